"""The pure formulas the algorithm library (``library.py``) is written in: TPO's target and cross-entropy, the
clipped importance-weighted objective, the k3 KL to the rollout snapshot, DG's gate, sequence log-probs and the KL
to a reference (docs/reproduction.md §2); and the per-item statistics of an update that ``Algorithm.metrics``
reports (ratio deviation, clipped items), with their mean over the items.

Tensors have the replica (seed) axis first and the comparison set (K candidates) or the tokens last.
``logp_new`` carries the gradient; ``logp_old``, scores and advantages are constants (detached here, so a caller
cannot leak gradient through them).
"""

from __future__ import annotations

import torch

from common.kernels import log_softmax
from algorithms.scores import DEFAULT_SPREAD, Spread, standardize


class _CrossEntropyToTarget(torch.autograd.Function):
    """−Σ_k q_k log softmax(ℓ)_k with the gradient written as the paper states it: softmax(ℓ) − q.

    Autograd through log_softmax would give softmax(ℓ)·Σq − q, which differs from p − q by float rounding of Σq;
    writing the gradient out makes it vanish *exactly* when p_θ = q (e.g. the first epoch of a zero-variance group).
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        log_p = log_softmax(logits)
        ctx.save_for_backward(log_p, target)
        return -(target * log_p).sum(-1)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        log_p, target = ctx.saved_tensors
        return grad_output.unsqueeze(-1) * (log_p.exp() - target), None


def cross_entropy_to_target(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """−Σ_k q_k log softmax(ℓ)_k over the last axis, with gradient softmax(ℓ) − q on ℓ (Eq. 3). Without a graph
    to record, the value is computed directly (the same operations, without the autograd Function's call cost)."""
    if logits.requires_grad and torch.is_grad_enabled():
        return _CrossEntropyToTarget.apply(logits, target)
    return -(target.detach() * log_softmax(logits)).sum(-1)


def tpo_target(logp_old: torch.Tensor, scores: torch.Tensor, eta: float = 1.0, anchor: bool = True,
               zero_variance: str = "centered", spread: Spread = DEFAULT_SPREAD) -> torch.Tensor:
    """q_k ∝ p_old_k · exp(u_k / η) over the group (Eq. 2); with ``anchor=False``, q = softmax(u / η)."""
    u = standardize(scores.detach(), zero_variance=zero_variance, spread=spread)
    logits = logp_old.detach() + u / eta if anchor else u / eta
    return log_softmax(logits).exp()


def clipped_objective(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float = 0.2,
    beta: float = 0.0,
    log_ratio_clip: float | None = None,
    clip_eps_high: float | None = None,
    length: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """Per-item min(ρA, clip(ρ, 1 − ε, 1 + ε_high)A) − β·KL_k3, with ρ = exp(x), x = (ℓ^θ − ℓ^old)/L,
    KL_k3 = e^{−x} + x − 1; ε_high defaults to ε (DAPO's clip-higher sets it apart), L to 1 (GSPO's length).

    The k3 estimator is the reverse KL to the rollout snapshot π_old, evaluated on the sampled items.
    """
    log_ratio = surrogate_log_ratio(logp_new, logp_old, log_ratio_clip, length)
    ratio = log_ratio.exp()
    advantages = advantages.detach()
    high = clip_eps if clip_eps_high is None else clip_eps_high
    objective = torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip_eps, 1.0 + high) * advantages)
    if beta:
        objective = objective - beta * k3(log_ratio)
    return objective


def surrogate_log_ratio(logp_new: torch.Tensor, logp_old: torch.Tensor,
                        log_ratio_clip: torch.Tensor | float | None = None,
                        length: torch.Tensor | float | None = None) -> torch.Tensor:
    """x = (ℓ^θ − ℓ^old)/L, clipped to ±``log_ratio_clip`` when set: the log of the ratio a clipped surrogate clips."""
    log_ratio = logp_new - logp_old.detach()
    if length is not None:
        log_ratio = log_ratio / length
    if log_ratio_clip is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)
    return log_ratio


def k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of KL(π_θ ‖ π_old) at the log-ratio x = ℓ^θ − ℓ^old of a sampled item: e^{−x} + x − 1
    (≥ 0; 0, with zero gradient, at x = 0, i.e. on the first epoch)."""
    return (-log_ratio).exp() + log_ratio - 1.0


def snapshot_kl(logp_new: torch.Tensor, logp_old: torch.Tensor,
                log_ratio_clip: torch.Tensor | float | None = None) -> torch.Tensor:
    """GRPO's KL term on its own: k3 of x = ℓ^θ − ℓ^old per item of ``logp_new`` (a sequence, or a token for
    per-token log-probs), x clipped to ±``log_ratio_clip`` (a number or a tensor broadcasting to x) when set; for the
    losses that do not go through ``clipped_objective`` with it (GSPO's length-normalised ratio, CISPO's stopped IS
    weight). Gradient 1 − e^{−x} on ℓ^θ where x is inside the clip, 0 outside."""
    return k3(surrogate_log_ratio(logp_new, logp_old, log_ratio_clip))


def dg_gate(logp: torch.Tensor, advantages: torch.Tensor, eta: float = 1.0, surprisal_clip: float | None = None
            ) -> torch.Tensor:
    """DG's weight sg(σ(A·ℓ/η)·A) (docs/reproduction.md §2.14), surprisal ℓ = −log π of ``logp``, clipped to
    [−c, c] if set."""
    surprisal = -logp.detach()
    if surprisal_clip is not None:
        surprisal = surprisal.clamp(-surprisal_clip, surprisal_clip)
    advantages = advantages.detach()
    return torch.sigmoid(advantages * surprisal / eta) * advantages


def sequence_logprob(token_logp: torch.Tensor, mask: torch.Tensor, length_normalized: bool = False) -> torch.Tensor:
    """Sequence log-prob ℓ = Σ_t mask_t · log π(y_t) over the last (token) axis, the paper's definition; with
    ``length_normalized`` it is divided by the number of unmasked tokens (an ablation; an empty sequence gives 0)."""
    mask = mask.to(token_logp.dtype)
    total = (token_logp * mask).sum(-1)
    return total / mask.sum(-1).clamp_min(1.0) if length_normalized else total


def reference_kl(token_logp_new: torch.Tensor, token_logp_ref: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(π_θ ‖ π_ref) per token, e^{r−ℓ} − (r − ℓ) − 1 (ℓ current, r reference log-prob), averaged
    over each sequence's unmasked tokens and then over the batch axes: (R, ..., T) → (R,). Gradient flows through
    ``token_logp_new`` only."""
    delta = token_logp_ref.detach() - token_logp_new
    per_token = delta.exp() - delta - 1.0
    mask = mask.to(per_token.dtype)
    per_sequence = (per_token * mask).sum(-1) / mask.sum(-1).clamp_min(1.0)
    return per_sequence.flatten(1).mean(1) if per_sequence.dim() > 1 else per_sequence


# ---- statistics of an update (``Algorithm.metrics``): per item, then their mean per replica ---------------------

def ratio_deviation(log_ratio: torch.Tensor) -> torch.Tensor:
    """|ρ − 1| with ρ = e^x: how far the policy has moved on an item."""
    return (log_ratio.exp() - 1.0).abs()


def clip_removes_gradient(ratio: torch.Tensor, advantages: torch.Tensor, clip_eps_low: float,
                          clip_eps_high: float) -> torch.Tensor:
    """1 where the clip removes the item's gradient: ρ > 1 + ε_high with A > 0, or ρ < 1 − ε_low with A < 0."""
    removed = ((ratio > 1.0 + clip_eps_high) & (advantages > 0)) | ((ratio < 1.0 - clip_eps_low) & (advantages < 0))
    return removed.to(ratio.dtype).masked_fill(torch.isnan(ratio), float("nan"))  # a NaN ratio is not "kept"


def weight_clipped(ratio: torch.Tensor, is_clip: float) -> torch.Tensor:
    """1 where CISPO's IS weight min(ρ, ε_max) is clipped: ρ > ε_max; else 0 (NaN where ρ is)."""
    return (ratio > is_clip).to(ratio.dtype).masked_fill(torch.isnan(ratio), float("nan"))


def item_mean(values: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """(R, ...) → (R,): the mean over every axis but the replica axis; with ``mask``, over the items where it is 1."""
    if mask is None:
        return values.flatten(1).mean(1)
    mask = mask.to(values.dtype)
    return (values * mask).flatten(1).sum(1) / mask.flatten(1).sum(1).clamp_min(1.0)
