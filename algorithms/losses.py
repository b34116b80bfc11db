"""Policy losses, one small pure function each (spec §2).

Shapes: every function takes tensors of shape (R, ..., L) and returns a loss per replica, shape (R,).
R is the replica (seed) axis: a seed-batched run sums the R losses, so each seed's parameters receive exactly
their own gradient. L is the last axis: the K candidates of a group for the group losses, the T tokens of a
sample for the single-sample losses (T = 1 for bandits). The axes between are batch axes, averaged.

``logp_new`` carries the gradient; ``logp_old``, scores and advantages are treated as constants (detached here,
so a caller cannot leak gradient through them). Because the TPO target and every advantage are recomputed from
``logp_old`` and the scores, they stay frozen across the epochs of one batch by construction.
"""

from __future__ import annotations

import torch

from algorithms.functional import log_softmax
from algorithms.scores import ZERO_VARIANCE_THRESHOLD, population_std, standardize


def _mean_over_batch(per_unit: torch.Tensor) -> torch.Tensor:
    """(R, ...) → (R,): average over every axis but the replica axis."""
    return per_unit.flatten(1).mean(1) if per_unit.dim() > 1 else per_unit


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


def tpo_target(
    logp_old: torch.Tensor, scores: torch.Tensor, eta: float = 1.0, anchor: bool = True, zero_variance: str = "centered"
) -> torch.Tensor:
    """q_k ∝ p_old_k · exp(u_k / η) over the group (Eq. 2); with ``anchor=False``, q = softmax(u / η)."""
    u = standardize(scores.detach(), zero_variance=zero_variance)
    logits = logp_old.detach() + u / eta if anchor else u / eta
    return log_softmax(logits).exp()


def tpo_loss(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    scores: torch.Tensor,
    eta: float = 1.0,
    anchor: bool = True,
    zero_variance: str = "centered",
) -> torch.Tensor:
    """TPO (Eq. 3): mean over groups of −Σ_k q_k log p^θ_k, p^θ = softmax over the group of ``logp_new``."""
    q = tpo_target(logp_old, scores, eta, anchor, zero_variance)
    return _mean_over_batch(_CrossEntropyToTarget.apply(logp_new, q))


def tpo_no_anchor_loss(logp_new, logp_old, scores, eta: float = 1.0, zero_variance: str = "centered"):
    """Ablation: TPO with q = softmax(u/η), i.e. without the p_old factor (Fig 8)."""
    return tpo_loss(logp_new, logp_old, scores, eta, anchor=False, zero_variance=zero_variance)


def group_pg_loss(
    logp_new: torch.Tensor, scores: torch.Tensor, eta: float = 1.0, zero_variance: str = "centered",
    sampled: torch.Tensor | None = None,
) -> torch.Tensor:
    """Group PG (same-signal scalar ablation): −mean over groups of Σ_k (u_k/η) ℓ^θ_k.

    ``sampled`` (0/1, same shape) restricts the sum to the members that were actually sampled, for bandits whose
    group is the full action set (spec §2.16: the MNIST weight is u at the sampled class only).
    """
    weights = standardize(scores.detach(), zero_variance=zero_variance) / eta
    if sampled is not None:
        weights = weights * sampled
    return _mean_over_batch(-(weights * logp_new).sum(-1))


def clipped_objective(
    logp_new: torch.Tensor,
    logp_old: torch.Tensor,
    advantages: torch.Tensor,
    clip_eps: float = 0.2,
    beta: float = 0.0,
    log_ratio_clip: float | None = None,
) -> torch.Tensor:
    """Per-item min(ρA, clip(ρ, 1±ε)A) − β·KL_k3, with ρ = exp(x), x = ℓ^θ − ℓ^old, KL_k3 = e^{−x} + x − 1.

    The k3 estimator is the reverse KL to the rollout snapshot π_old, evaluated on the sampled items.
    """
    log_ratio = logp_new - logp_old.detach()
    if log_ratio_clip is not None:
        log_ratio = log_ratio.clamp(-log_ratio_clip, log_ratio_clip)
    ratio = log_ratio.exp()
    advantages = advantages.detach()
    objective = torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip_eps, 1.0 + clip_eps) * advantages)
    if beta:
        objective = objective - beta * ((-log_ratio).exp() + log_ratio - 1.0)
    return objective


def clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps=0.2, beta=0.0, log_ratio_clip=None):
    """−mean over the batch of Σ_L ``clipped_objective`` (PPO over tokens, GRPO over a group's candidates)."""
    objective = clipped_objective(logp_new, logp_old, advantages, clip_eps, beta, log_ratio_clip)
    return _mean_over_batch(-objective.sum(-1))


def grpo_loss(
    logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor,
    clip_eps: float = 0.2, beta: float = 0.04, log_ratio_clip: float = 20.0,
) -> torch.Tensor:
    """GRPO (spec §2.7): clipped surrogate on the group's sequence ratios, log-ratio clipped to ±20, k3 KL
    (β = 0.04) to the rollout snapshot, summed over the K candidates, averaged over groups.
    ``advantages`` are the group z-scores (``scores.zscore_advantages``)."""
    return clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps, beta, log_ratio_clip)


def grpo_masked_loss(
    logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, scores: torch.Tensor,
    clip_eps: float = 0.2, beta: float = 0.04, log_ratio_clip: float = 20.0,
) -> torch.Tensor:
    """GRPO with zero-variance groups masked out (spec §2.10): −Σ_b 1{σ_b > 1e-6} G_b / max(1, #informative)."""
    group_objective = clipped_objective(logp_new, logp_old, advantages, clip_eps, beta, log_ratio_clip).sum(-1)
    informative = (population_std(scores.detach()).squeeze(-1) > ZERO_VARIANCE_THRESHOLD).to(group_objective.dtype)
    total = (informative * group_objective).flatten(1).sum(1)
    return -total / informative.flatten(1).sum(1).clamp_min(1.0)


def ppo_loss(logp_new, logp_old, advantages, clip_eps: float = 0.2) -> torch.Tensor:
    """PPO (spec §2.13): per-token ratios, no log-ratio clip, no KL; −mean over samples of Σ_t."""
    return clipped_surrogate_loss(logp_new, logp_old, advantages, clip_eps, beta=0.0)


def dg_loss(
    logp_new: torch.Tensor, advantages: torch.Tensor, eta: float = 1.0, surprisal_clip: float | None = None
) -> torch.Tensor:
    """Delightful gradient (spec §2.14): −mean Σ_t sg(σ(A·ℓ/η)·A) log π, surprisal ℓ = −log π under the current
    parameters; ``surprisal_clip`` clips ℓ to [−c, c] (never enabled in the paper)."""
    surprisal = -logp_new.detach()
    if surprisal_clip is not None:
        surprisal = surprisal.clamp(-surprisal_clip, surprisal_clip)
    advantages = advantages.detach()
    weight = torch.sigmoid(advantages * surprisal / eta) * advantages
    return _mean_over_batch(-(weight * logp_new).sum(-1))


def pg_loss(logp_new: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """REINFORCE with a baseline: −mean Σ_t A_t log π(a_t)."""
    return _mean_over_batch(-(advantages.detach() * logp_new).sum(-1))


def ce_loss(logp_label: torch.Tensor) -> torch.Tensor:
    """Supervised cross-entropy oracle: −mean log π(y) (full information, no sampling)."""
    return _mean_over_batch(-logp_label.sum(-1))


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
    return _mean_over_batch((per_token * mask).sum(-1) / mask.sum(-1).clamp_min(1.0))
