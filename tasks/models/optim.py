"""Seed-batched Muon + Nesterov-Adam, a port of ``optax.contrib.muon`` 0.2.8 as the reference uses it
(docs/reproduction.md §4.1).

Every parameter has a leading seed axis S. All arithmetic is per seed (elementwise, or batched matmuls and a
Frobenius norm per seed matrix), so seeds never interact: a seed with a NaN or zero gradient changes nothing for the
others, and ``step(active)`` leaves the parameters *and* optimizer state of inactive (e.g. diverged) seeds untouched.
Step counts are kept per seed for the same reason.

One optimizer, ``MuonAdam``, with one group per parameter. A group with ``matrix=(fan_in, fan_out)`` is updated by
Muon, the per-seed parameter viewed as that matrix in JAX layout (x @ W: rows = fan_in); ``matrix=None`` means
Nesterov-Adam. ``transformer_param_groups`` builds the groups for ``tasks.models.transformer``.

Muon (β 0.95, lr 1e-3, weight decay 0): m ← β m + (1−β) g;  m̂ = β m/(1−β^{t+1}) + (1−β) g/(1−β^t);
X = m̂ (transposed if fan_in > fan_out) / (‖X‖_F + 1e-8); 5 Newton–Schulz steps X ← aX + (bA + cA²)X, A = XXᵀ,
(a, b, c) = (3.4445, −4.7750, 2.0315); W ← W − lr · sqrt(max(1, fan_out/fan_in)) · X.
Nesterov-Adam (optax ``adamw(nesterov=True)``, b1 0.9, b2 0.999, eps 1e-8, wd 0; not ``torch.optim.NAdam``, which
uses a momentum-decay schedule): m̂ as above with b1, v̂ = v/(1−b2^t), W ← W − lr · m̂/(sqrt(v̂) + eps).

Differences of ``torch.optim.Muon`` (PyTorch ≥ 2.9) from this port, i.e. from optax: default weight decay 0.1;
Newton–Schulz in bfloat16; pre-normalisation X / max(‖X‖_F, 1e-7); momentum without bias correction (update =
(1−β) g + β buf); scale sqrt(max(1, shape[0]/shape[1])) of the stored tensor, right for ``nn.Linear`` weights but 1
instead of sqrt(64/V), sqrt(64/2H) for the embedding and positional tables; only 2-D tensors (so no seed axis, and the
reference's Muon update of the (heads, head_dim) q/k/v biases needs custom code).
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass

import torch

NS_COEFFS = (3.4445, -4.7750, 2.0315)
MUON_SPLITS = ("reference", "matrices")
GUARDS = ("none", "skip", "scale")


def transformer_param_groups(params: dict[str, torch.Tensor], muon_split: str = "reference") -> list[dict]:
    """One group per transformer parameter: ``{"params": [p], "name": name, "matrix": (fan_in, fan_out) | None}``.

    ``"reference"``: optax's rule on the Flax tree, Muon iff the per-seed tensor is 2-D (FFN and head kernels,
    token and positional tables, q/k/v biases (heads, hd)); q/k/v/out kernels, 1-D biases and LayerNorm go to Adam.
    ``"matrices"``: every weight matrix on Muon, the attention kernels viewed as D × D; all biases and LayerNorm on
    Adam. ``"none"``: every parameter on Nesterov-Adam (``optim=adam``).
    """
    if muon_split not in (*MUON_SPLITS, "none"):
        raise ValueError(f"muon_split must be one of {(*MUON_SPLITS, 'none')}, got {muon_split!r}")
    return [
        {"params": [p], "name": name, "matrix": _muon_matrix(name, p.shape[1:], muon_split)}
        for name, p in params.items()
    ]


def _muon_matrix(name: str, shape: torch.Size, muon_split: str) -> tuple[int, int] | None:
    if muon_split == "none":
        return None
    if muon_split == "reference":
        return tuple(shape) if len(shape) == 2 else None
    if name.endswith(("attn.q.kernel", "attn.k.kernel", "attn.v.kernel")):  # (D, heads, hd): input axis first
        return shape[0], math.prod(shape[1:])
    if name.endswith(".kernel") or name.endswith("_emb"):  # out kernel (heads, hd, D): output axis last
        return math.prod(shape[:-1]), shape[-1]
    return None


def muon_scale(matrix: tuple[int, int]) -> float:
    """Muon's shape factor sqrt(max(1, fan_out / fan_in)), JAX layout."""
    fan_in, fan_out = matrix
    return math.sqrt(max(1.0, fan_out / fan_in))


def newton_schulz(
    x: torch.Tensor, steps: int = 5, coeffs: tuple[float, float, float] = NS_COEFFS, eps: float = 1e-8
) -> torch.Tensor:
    """Approximate orthogonal polar factor of each matrix x[s] of (S, rows, cols), as optax computes it."""
    tall = x.shape[-2] > x.shape[-1]
    if tall:
        x = x.mT
    x = x / (torch.linalg.matrix_norm(x, keepdim=True) + eps)
    a, b, c = coeffs
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.mT if tall else x


class MuonAdam(torch.optim.Optimizer):
    """Muon on groups with a ``matrix``, Nesterov-Adam on the rest; ``eps`` is Adam's (Muon's norm eps is 1e-8)."""

    def __init__(
        self,
        groups: list[dict],
        lr: float = 1e-3,
        muon_beta: float = 0.95,
        adam_betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        ns_steps: int = 5,
    ):
        defaults = dict(lr=lr, muon_beta=muon_beta, adam_betas=adam_betas, eps=eps, ns_steps=ns_steps, matrix=None)
        super().__init__(groups, defaults)
        self._applied: dict[tuple, torch.Tensor] | None = None  # bucket → summed update, while recording

    @torch.no_grad()
    def step(self, active: torch.Tensor | None = None, factor: torch.Tensor | None = None) -> None:
        """One update of every parameter with a gradient; ``active`` (S,) bool freezes the seeds marked False;
        ``factor`` (S,) multiplies each seed's update, Muon's and Adam's (``Guard``'s scaled step).

        Parameters are updated in buckets (all Adam parameters of one set of hyperparameters, likewise for Muon):
        their tensors are concatenated along a flat axis, so the elementwise arithmetic is a few large ops instead
        of ~20 small ones per parameter, and the Newton–Schulz iterations run once for every matrix of one shape."""
        buckets: dict[tuple, list[tuple[torch.Tensor, dict, dict]]] = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["count"] = p.new_zeros(p.shape[0])  # per-seed step count ("step" would not follow .to())
                    state["mu"] = torch.zeros_like(p)
                    if group["matrix"] is None:
                        state["nu"] = torch.zeros_like(p)
                muon = group["matrix"] is not None
                key = (muon, group["lr"], group["muon_beta"] if muon else group["adam_betas"], group["eps"],
                       group["ns_steps"], p.dtype, p.device)
                buckets.setdefault(key, []).append((p, state, group))
        for key, members in buckets.items():
            applied = self._update(members, active, key[0], factor)
            if self._applied is not None:
                self._applied[key] = self._applied[key].add_(applied) if key in self._applied else applied

    def parts(self) -> dict[str, list[torch.Tensor]]:
        """The parameters Muon and Nesterov-Adam update."""
        parts: dict[str, list[torch.Tensor]] = {"muon": [], "adam": []}
        for group in self.param_groups:
            parts["adam" if group["matrix"] is None else "muon"].extend(group["params"])
        return parts

    def record_updates(self) -> None:
        """Start summing the updates ``step`` applies, per part, for ``update_norms``."""
        self._applied = {}

    @torch.no_grad()
    def update_norms(self) -> dict[str, torch.Tensor]:
        """Per seed, the L2 norm of the updates applied to each part since ``record_updates``, summed over the steps
        (S,); NaN for a part with no parameter. What the optimizer really did, next to the gradient's norm: Muon's
        orthogonalised step does not shrink with the gradient. It is the norm of the update tensors as added, not of
        the parameters' change: a float32 difference of parameters keeps only the update's leading bits, so another
        CPU's last-bit differences in the parameters moved it by up to a few percent."""
        parts = self.parts()
        first = next(params for params in parts.values() if params)[0]
        out = {}
        for name, params in parts.items():
            squares = [applied.pow(2).sum(1) for (muon, *_), applied in self._applied.items()
                       if muon == (name == "muon")]
            if not params:
                out[name] = torch.full(first.shape[:1], math.nan, device=first.device)
            else:
                out[name] = torch.stack(squares).sum(0).sqrt() if squares else first.new_zeros(first.shape[:1])
        return out

    @staticmethod
    def _update(members: list[tuple[torch.Tensor, dict, dict]], active: torch.Tensor | None, muon: bool,
                factor: torch.Tensor | None = None) -> torch.Tensor:
        """Update one bucket; returns the update it added to the parameters, (S, N) (zero for a frozen seed)."""
        params = [p for p, _, _ in members]
        group = members[0][2]
        sizes = [p[0].numel() for p in params]
        flat = lambda tensors: torch.cat([t.flatten(1) for t in tensors], 1)  # noqa: E731  (S, N)
        count = torch.stack([state["count"] for _, state, _ in members], 1)  # per-seed step counts (S, members)
        t = count + 1
        repeats = _member_sizes(tuple(sizes), t.device)
        spread = lambda per_member: per_member.repeat_interleave(  # noqa: E731  (S, members) → (S, N)
            repeats, dim=1, output_size=sum(sizes))  # a known output size: no device-to-host read on a GPU
        g = flat([p.grad for p in params])
        state_keys = ("mu",) if muon else ("mu", "nu")
        old = {"param": flat(params), **{key: flat([state[key] for _, state, _ in members]) for key in state_keys},
               "count": count}
        if muon:
            beta = group["muon_beta"]
            mu = (1 - beta) * g + beta * old["mu"]
            beta_t = integer_power(beta, t)
            m_hat = beta * (mu / spread(1 - beta_t * beta)) + (1 - beta) * (g / spread(1 - beta_t))
            blocks = [(block, member_group["matrix"]) for block, (_, _, member_group) in zip(m_hat.split(sizes, 1),
                                                                                            members)]
            updates = _newton_schulz_by_shape(blocks, group["ns_steps"])
            scale = torch.cat([g.new_full((size,), -group["lr"] * muon_scale(member[2]["matrix"]))
                               for size, member in zip(sizes, members)])
            update = scale * torch.cat(updates, 1)
        else:
            b1, b2 = group["adam_betas"]
            mu = (1 - b1) * g + b1 * old["mu"]
            nu = (1 - b2) * g * g + b2 * old["nu"]
            b1_t = integer_power(b1, t)
            m_hat = b1 * (mu / spread(1 - b1_t * b1)) + (1 - b1) * (g / spread(1 - b1_t))
            v_hat = nu / spread(1 - integer_power(b2, t))
            update = -group["lr"] * m_hat / (v_hat.sqrt() + group["eps"])
        applied = update if factor is None else factor.unsqueeze(1) * update
        new = {"param": old["param"] + applied, "mu": mu}
        if not muon:
            new["nu"] = nu
        new["count"] = t
        for key, value in new.items():  # inactive seeds keep their old values; one where and one copy per key
            if active is not None:
                value = torch.where(active.unsqueeze(1), value, old[key])
            targets = [p if key == "param" else state[key] for p, state, _ in members]
            if key == "count":
                parts = value.unbind(1)
            else:
                parts = [part.view_as(target) for part, target in zip(value.split(sizes, 1), targets)]
            torch._foreach_copy_(targets, parts)
        return applied if active is None else torch.where(active.unsqueeze(1), applied, 0.0)


def integer_power(base: float, exponent: torch.Tensor, bits: int = 24) -> torch.Tensor:
    """``base ** exponent`` for whole-number exponents below 2**bits, in ``exponent``'s dtype.

    torch's ``pow`` rounds some elements differently in its vectorised loop and in its scalar tail (float32
    0.95**6 on an AMD EPYC), and which of them an element takes depends on the tensor's size: here, on how many
    seeds share the optimizer. This raises the float32 base in double by binary exponentiation (multiplications
    only, which IEEE 754 rounds alike in vector and scalar code; a relative error of a few 1e-13), then rounds to
    float32: within an ulp of ``pow``, the same for every tensor size and device, with no read back to the host."""
    # the base as float32 stores it (as float32 pow starts from), rounded on the host: a tensor op here would be a
    # host tensor and a read back on a GPU
    whole, square = exponent.long(), base if exponent.dtype == torch.float64 else _float32(base)
    result = torch.ones_like(exponent, dtype=torch.float64)
    for bit in range(bits):
        result = torch.where((whole & (1 << bit)) != 0, result * square, result)
        square *= square  # base ** 2**(bit + 1), in double as the tensor's products
    return result.to(exponent.dtype)


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


@functools.cache
def _member_sizes(sizes: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The bucket's element counts on ``device``, made once (a tensor from a list is a blocking copy on a GPU)."""
    return torch.tensor(sizes, device=device)


def _newton_schulz_by_shape(matrices: list[tuple[torch.Tensor, tuple[int, int]]], steps: int) -> list[torch.Tensor]:
    """Orthogonalise each flat (S, rows·cols) block viewed as its (rows, cols) matrix; blocks of one shape (after
    the wide orientation Newton–Schulz uses) go through one batched call. Returns flat (S, rows·cols) blocks."""
    by_shape: dict[tuple[int, int], list[int]] = {}
    wide = []
    for index, (block, (rows, cols)) in enumerate(matrices):
        x = block.reshape(len(block), rows, cols)
        x = x.mT if rows > cols else x
        wide.append(x)
        by_shape.setdefault(tuple(x.shape[1:]), []).append(index)
    out: list[torch.Tensor | None] = [None] * len(matrices)
    for indices in by_shape.values():
        S = len(wide[indices[0]])
        orthogonal = newton_schulz(torch.cat([wide[i] for i in indices]), steps).split(S)
        for i, x in zip(indices, orthogonal):
            rows, cols = matrices[i][1]
            out[i] = (x.mT if rows > cols else x).reshape(S, -1)
    return out


def transformer_optimizer(params: dict[str, torch.Tensor], muon_split: str = "reference", lr: float = 1e-3) -> MuonAdam:
    """The reference optimizer for the transformer: Muon + Nesterov-Adam at one learning rate (1e-3 in the paper)."""
    return MuonAdam(transformer_param_groups(params, muon_split), lr=lr)


@dataclass(frozen=True)
class Guard:
    """An update rule that lets a seed's step follow its gradient's size (``optim.guard``; beyond the paper). Muon's
    step is the orthogonalised momentum, of the same size whatever the gradient: when every group of an episode has zero
    variance the gradient is exactly 0, yet each epoch still takes a full step along the old momentum.

    * ``none``: the reference's Muon.
    * ``skip``: a seed whose first-epoch gradient norm is ≤ τ (τ = 0: exactly zero) takes no step this episode —
      parameters, momentum and step count untouched.
    * ``scale``: each step's update of a seed (Muon's and Adam's parts) is multiplied by min(1, ‖g‖/τ), ‖g‖ the
      norm of that step's gradient over all parameters (τ > 0); a zero gradient moves nothing (the momenta still
      decay)."""

    kind: str = "none"
    tau: float = 0.0

    def moving(self, active: torch.Tensor, first_grad_norm: torch.Tensor) -> torch.Tensor:
        """The seeds that step this episode."""
        return active & (first_grad_norm > self.tau) if self.kind == "skip" else active

    def step_factor(self, grad_norm: torch.Tensor) -> torch.Tensor:
        """Each seed's factor on its update under ``scale``."""
        return (grad_norm / self.tau).clamp_max(1.0)


class FusedAdam:
    """Adam on a fixed list of tensors through torch's fused kernel: the arithmetic of
    ``torch.optim.Adam(fused=True)`` (tested bit-equal) without ``torch.optim.Optimizer``'s per-step Python
    bookkeeping (step hooks, grouping by device, ~100 µs: a tenth of a 1-seed MNIST step). Gradients are passed to
    ``step`` rather than read from ``.grad``. Plain Adam: no amsgrad, weight decay or maximisation."""

    def __init__(self, params, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8):
        self.params = list(params)
        self.lr, (self.beta1, self.beta2), self.eps = float(lr), betas, float(eps)
        self.exp_avg = [torch.zeros_like(p) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.params]
        # every tensor takes the same number of steps: one float32 counter on the device (as torch keeps it), passed
        # to the kernel once per tensor, so a step increments one scalar instead of one per tensor
        self.step_count = torch.zeros((), dtype=torch.float32, device=self.params[0].device)

    @torch.no_grad()
    def step(self, grads: list[torch.Tensor]) -> None:
        self.step_count.add_(1)
        torch._fused_adam_(self.params, grads, self.exp_avg, self.exp_avg_sq, [], [self.step_count] * len(self.params),
                           amsgrad=False, lr=self.lr, beta1=self.beta1, beta2=self.beta2, weight_decay=0.0,
                           eps=self.eps, maximize=False, grad_scale=None, found_inf=None)

    def state_dict(self) -> dict[str, list[torch.Tensor] | torch.Tensor]:
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq, "step": self.step_count}

    def load_state_dict(self, state: dict[str, list[torch.Tensor] | torch.Tensor]) -> None:
        with torch.no_grad():
            for key, tensors in (("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)):
                for target, value in zip(tensors, state[key], strict=True):
                    target.copy_(value)
            self.step_count.copy_(state["step"])
