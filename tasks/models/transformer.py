"""Seed-batched causal transformer for the token tasks (docs/reproduction.md §3.1), functional and nanoGPT-sized.

Parameters are a flat ``dict[str, Tensor]``; every tensor has a leading seed axis S, so S independent models run as
one batched program (einsum/bmm over S) and a seed's numbers never depend on which other seeds share the batch.
Shapes follow the Flax reference tree, kernels in JAX layout (in, out) so a layer is ``x @ kernel + bias``; this
is what lets ``tasks.models.optim`` reproduce optax's rank-based Muon/Adam split (D = d_model, L = 2H, hd = D / heads):

    tok_emb (S, V, D)                       pos_emb (S, L, D)
    h{i}.ln1.scale, h{i}.ln1.bias (S, D)    h{i}.ln2.scale, h{i}.ln2.bias (S, D)
    h{i}.attn.{q,k,v}.kernel (S, D, heads, hd)    h{i}.attn.{q,k,v}.bias (S, heads, hd)
    h{i}.attn.out.kernel (S, heads, hd, D)        h{i}.attn.out.bias (S, D)
    h{i}.mlp.up.kernel (S, D, F)  h{i}.mlp.up.bias (S, F)    h{i}.mlp.down.kernel (S, F, D)  h{i}.mlp.down.bias (S, D)
    ln_f.scale, ln_f.bias (S, D)            head.kernel (S, D, V)  head.bias (S, V)

Incremental decoding keeps a key/value cache: per layer a pair (k, v) of shape (S, N, heads, t, hd) for the t
positions seen so far. It is functional (each call returns a longer cache, nothing is written in place), so it also
works under autograd: ``prefill`` then ``extend(..., rows=...)`` runs a shared prompt once for all its continuations.
Each layer's q/k/v projections run as one matmul and every bias is fused into its matmul (``linear.seed_dense``:
oneDNN on AMD CPUs with AVX-512, 2–2.4× MKL's speed at these shapes; baddbmm elsewhere).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from common.checks import ConfigError, check_positive_int
from common.kernels import gelu_tanh, log_softmax
from tasks import rng
from tasks.models.linear import seed_dense

LN_EPS = 1e-6


@dataclass(frozen=True)
class TransformerConfig:
    """The model's sizes (``conf/model/*.yaml``), checked once: the defaults are the paper's (docs/reproduction.md
    §3.1). The vocabulary and context length come from the task."""

    d_model: int = 64
    heads: int = 2
    layers: int = 2
    ffn: int = 256  # the MLP's hidden width

    def __post_init__(self):
        for key in ("heads", "d_model", "layers", "ffn"):
            check_positive_int(f"model.{key}", getattr(self, key))
        if self.d_model % self.heads:
            raise ConfigError(f"model.heads={self.heads} is not valid; it must divide model.d_model={self.d_model}")

    @classmethod
    def from_config(cls, model) -> TransformerConfig:
        """From a ``model`` config node (ConfigError, naming the key, for a size that is not a positive integer)."""
        return cls(d_model=model.d_model, heads=model.heads, layers=model.layers, ffn=model.ffn)


def init_params(seeds: torch.Tensor, vocab_size: int, seq_len: int, config: TransformerConfig = TransformerConfig()
                ) -> dict[str, torch.Tensor]:
    """Flax-default initialisation, one independent model per seed (stream ``init/<name>`` of ``tasks.rng``).

    Kernels: truncated LeCun normal (fan_in = input width); token embedding N(0, 1/d_model); positions N(0, 0.02²);
    biases 0; LayerNorm scale 1. Returned tensors are leaves with ``requires_grad=True``.
    """
    d_model, heads, layers, ffn = config.d_model, config.heads, config.layers, config.ffn
    hd = d_model // heads
    S, device = len(seeds), seeds.device

    def kernel(name: str, shape: tuple[int, ...], fan_in: int) -> None:
        params[name + ".kernel"] = rng.lecun_normal(seeds, f"init/{name}.kernel", shape, fan_in)

    def zeros(name: str, *shape: int) -> None:
        params[name] = torch.zeros(S, *shape, device=device)

    def layer_norm(name: str) -> None:
        params[name + ".scale"] = torch.ones(S, d_model, device=device)
        zeros(name + ".bias", d_model)

    params = {
        "tok_emb": rng.normal(seeds, "init/tok_emb", 0, (vocab_size, d_model), std=d_model**-0.5),
        "pos_emb": rng.normal(seeds, "init/pos_emb", 0, (seq_len, d_model), std=0.02),
    }
    for i in range(layers):
        layer_norm(f"h{i}.ln1")
        for n in "qkv":
            kernel(f"h{i}.attn.{n}", (d_model, heads, hd), d_model)
            zeros(f"h{i}.attn.{n}.bias", heads, hd)
        kernel(f"h{i}.attn.out", (heads, hd, d_model), d_model)
        zeros(f"h{i}.attn.out.bias", d_model)
        layer_norm(f"h{i}.ln2")
        kernel(f"h{i}.mlp.up", (d_model, ffn), d_model)
        zeros(f"h{i}.mlp.up.bias", ffn)
        kernel(f"h{i}.mlp.down", (ffn, d_model), ffn)
        zeros(f"h{i}.mlp.down.bias", d_model)
    layer_norm("ln_f")
    kernel("head", (d_model, vocab_size), d_model)
    zeros("head.bias", vocab_size)
    return {name: p.requires_grad_() for name, p in params.items()}


def log_probs(params: dict[str, torch.Tensor], tokens: torch.Tensor) -> torch.Tensor:
    """Teacher-forced next-token log-probs: tokens (S, N, L) → (S, N, L, V); output t depends on tokens ≤ t."""
    return _forward(params, tokens)[1]


Cache = list[tuple[torch.Tensor, torch.Tensor]]


def prefill(params: dict[str, torch.Tensor], prompt: torch.Tensor) -> tuple[Cache, torch.Tensor]:
    """Run the prompt (S, N, P) into a fresh cache; returns (cache, log-probs (S, N, V) of the next token)."""
    cache, logp = _forward(params, prompt)
    return cache, logp[:, :, -1]


def extend(
    params: dict[str, torch.Tensor], cache: Cache, tokens: torch.Tensor, start: int, rows: torch.Tensor | None = None,
    row_sums: bool = False,
) -> tuple[Cache, torch.Tensor]:
    """Append tokens (S, N, T) at positions start … start+T−1 (start = cached length); returns (cache, log-probs
    (S, N, T, V)), equal to the matching rows of ``log_probs`` on the whole sequence.

    ``rows`` (S, N) says which cached sequence each new row continues (many rows may share one prompt's cache,
    which is computed once); None means row n continues cached row n. ``row_sums``: on CPU, backpropagate the row
    selection through ``_RowSums`` (the same bits, faster)."""
    return _forward(params, tokens, start, cache, rows, row_sums)


def decode(
    params: dict[str, torch.Tensor], cache: Cache, token: torch.Tensor, position: int, rows: torch.Tensor | None = None
) -> tuple[Cache, torch.Tensor]:
    """Append ``token`` (S, N) at ``position``; returns (cache, next-token log-probs (S, N, V)); ``rows`` as in
    ``extend``."""
    cache, logp = _forward(params, token[..., None], position, cache, rows)
    return cache, logp[:, :, 0]


def repeat_rows(S: int, N: int, k: int, device: torch.device | None = None) -> torch.Tensor:
    """The ``rows`` index that continues each of N cached sequences k times: (S, N·k) = [0]*k + [1]*k + …"""
    return torch.arange(N, device=device).repeat_interleave(k).expand(S, N * k)


# The backward of ``_select_rows`` as ``_RowSums`` (exact; switch for tests and bench/section4_cost.py)
CONTIGUOUS_ROW_GRAD = True


def _select_rows(cached: torch.Tensor, rows: torch.Tensor, row_sums: bool = False) -> torch.Tensor:
    """cached (S, N_cache, ...) → (S, N, ...) with row n = cached[s, rows[s, n]].

    One ``index_select`` over the flattened (seed, row) axis: 4× faster than advanced indexing forward, and its
    backward is an index_add where advanced indexing's sorts the indices (fwd + bwd 0.46 → 0.19 ms, 795 rows).
    With ``row_sums``, on CPU under autograd, the backward is ``_RowSums``: the same sums in the same order, without
    torch's slow element-wise scatter for a non-contiguous gradient (25-60 ms per call for the 7,000 answer rows of
    a Section 4 episode)."""
    S, N_cache = cached.shape[:2]
    flat = (rows + torch.arange(S, device=rows.device)[:, None] * N_cache).flatten()
    source = cached.flatten(0, 1)
    if (row_sums and CONTIGUOUS_ROW_GRAD and source.device.type == "cpu" and source.requires_grad
            and torch.is_grad_enabled()):
        return _RowSums.apply(source, flat).view(S, rows.shape[1], *cached.shape[2:])
    return source.index_select(0, flat).view(S, rows.shape[1], *cached.shape[2:])


class _RowSums(torch.autograd.Function):
    """``source.index_select(0, index)`` whose backward is torch's own, ``zeros.index_add_(0, index, grad)``, on a
    contiguous copy of ``grad``: the same sums in the same order, bit for bit. The gradient arrives as a slice of the
    attention's concatenated keys/values (non-contiguous), on which torch's CPU index_add falls back to an element-wise
    scatter 3-4× slower than the copy and the contiguous row adds together."""

    @staticmethod
    def forward(ctx, source: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(index)
        ctx.rows = source.shape[0]
        return source.index_select(0, index)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (index,) = ctx.saved_tensors
        return grad.new_zeros((ctx.rows, *grad.shape[1:])).index_add_(0, index, grad.contiguous()), None


def _forward(
    params: dict[str, torch.Tensor], tokens: torch.Tensor, start: int = 0, cache: Cache | None = None,
    rows: torch.Tensor | None = None, row_sums: bool = False,
) -> tuple[Cache, torch.Tensor]:
    """Tokens (S, N, T) at positions start … start+T−1, attending to the cached positions < start as well."""
    S, N, T = tokens.shape
    seed = torch.arange(S, device=tokens.device)[:, None, None]
    x = params["tok_emb"][seed, tokens] + params["pos_emb"][:, None, start : start + T]
    future = torch.ones(T, start + T, dtype=torch.bool, device=tokens.device).triu(start + 1)
    present = []
    for i in range(_num_layers(params)):
        h = _layer_norm(x, params, f"h{i}.ln1")
        q, k, v = _project_qkv(h, params, f"h{i}.attn")
        if cache is not None:
            past_k, past_v = cache[i]
            if rows is not None:
                past_k, past_v = _select_rows(past_k, rows, row_sums), _select_rows(past_v, rows, row_sums)
            k, v = torch.cat((past_k, k), -2), torch.cat((past_v, v), -2)
        present.append((k, v))
        x = x + _merge_heads(_attend(q, k, v, future), params, f"h{i}.attn.out")
        h = _layer_norm(x, params, f"h{i}.ln2")
        x = x + _dense(gelu_tanh(_dense(h, params, f"h{i}.mlp.up")), params, f"h{i}.mlp.down")
    return present, log_softmax(_dense(_layer_norm(x, params, "ln_f"), params, "head"))


def _num_layers(params: dict[str, torch.Tensor]) -> int:
    return sum(name.endswith(".ln1.scale") for name in params)


def _layer_norm(x: torch.Tensor, params: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if x.shape[0] == 1:  # one seed (CPU computes grouped rollouts seed by seed): the affine fused into the kernel
        return F.layer_norm(x, x.shape[-1:], params[name + ".scale"][0], params[name + ".bias"][0], eps=LN_EPS)
    y = F.layer_norm(x, x.shape[-1:], eps=LN_EPS)
    return y * params[name + ".scale"][:, None, None] + params[name + ".bias"][:, None, None]


def _dense(x: torch.Tensor, params: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """(S, N, T, in) @ kernel (S, in, out) + bias (S, out), as one fused batched matmul."""
    S, N, T, width = x.shape
    kernel = params[name + ".kernel"]
    return seed_dense(x.reshape(S, N * T, width), kernel, params[name + ".bias"]).view(S, N, T, -1)


def _project_qkv(x: torch.Tensor, params: dict[str, torch.Tensor], name: str) -> tuple[torch.Tensor, ...]:
    """(S, N, T, D) → q, k, v, each (S, N, heads, T, hd): the three projections as one fused matmul."""
    S, N, T, D = x.shape
    _, heads, hd = params[name + ".q.bias"].shape
    kernel = torch.cat([params[f"{name}.{n}.kernel"].flatten(2) for n in "qkv"], -1)  # (S, D, 3·heads·hd)
    bias = torch.cat([params[f"{name}.{n}.bias"].flatten(1) for n in "qkv"], -1)
    qkv = seed_dense(x.reshape(S, N * T, D), kernel, bias)
    return qkv.view(S, N, T, 3, heads, hd).permute(3, 0, 1, 4, 2, 5).unbind(0)


def _merge_heads(x: torch.Tensor, params: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    """(S, N, heads, T, hd) → (S, N, T, D) through the output projection (S, heads, hd, D)."""
    S, N, heads, T, hd = x.shape
    merged = x.transpose(2, 3).reshape(S, N * T, heads * hd)
    kernel = params[name + ".kernel"].flatten(1, 2)
    return seed_dense(merged, kernel, params[name + ".bias"]).view(S, N, T, -1)


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, future: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product attention; ``future`` (T, T_k) marks the key positions a query must not see."""
    scores = (q / math.sqrt(q.shape[-1])) @ k.mT
    scores = scores.masked_fill(future, torch.finfo(scores.dtype).min)
    return scores.softmax(-1) @ v
