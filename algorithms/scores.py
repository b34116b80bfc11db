"""Scores → standardized signals and advantages (paper Appendix A; docs/reproduction.md §1, §2.7, §2.13).

Tensors follow one convention across the library: the *last* axis is the comparison set (a group of K
candidates, or a batch when single-sample methods standardize over it), every leading axis is a batch axis.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms.hyperparameters import hyperparameter

ZERO_VARIANCE_THRESHOLD = 1e-6
ZERO_VARIANCE_MODES = ("centered", "zero")


@dataclass(frozen=True)
class Spread:
    """What a group's scores are divided by, for the algorithms that standardise (TPO family, Group PG, GRPO
    family). The default is the paper's population std σ. Standardisation makes a group whose scores differ by
    0.001 as sharp as a 1-vs-0 group (the paper's Limitations); the variants, beyond the paper, temper that:

    * ``rank_scores``: the scores are replaced by their mid-ranks (ties share their mean rank) first;
    * ``std_shrinkage`` κ > 0: σ̃² = (K σ² + κ σ₀²)/(K + κ), a prior std ``std_prior`` σ₀ worth κ members;
    * ``std_floor`` f > 0: σ → max(σ̃, f).

    They apply in that order. A group is zero-variance by the σ of its raw scores ≤ 1e-6 whatever the variant (so
    ranks never turn float noise below that into a full signal), as ``Groups.informative`` counts it."""

    std_floor: float = hyperparameter(0.0, "σ → max(σ, floor) (low-variance groups); 0 = the paper's σ", low=0)
    std_shrinkage: float = hyperparameter(0.0, "κ of σ̃² = (Kσ² + κσ₀²)/(K + κ); 0 = no shrinkage", low=0)
    std_prior: float = hyperparameter(0.5, "σ₀ of the shrinkage (0.5: the largest std of a score in [0, 1])", low=0,
                                      low_open=True)
    rank_scores: bool = hyperparameter(False, "standardise the scores' mid-ranks instead of the scores")

    @property
    def is_default(self) -> bool:
        """The paper's σ (the prior std matters only with shrinkage)."""
        return not (self.std_floor or self.std_shrinkage or self.rank_scores)

    def prepare(self, scores: torch.Tensor, dim: int) -> torch.Tensor:
        """The scores the standardisation reads: mid-ranks with ``rank_scores``, else ``scores`` itself."""
        return mid_ranks(scores, dim) if self.rank_scores else scores

    def std(self, variance: torch.Tensor, members: int) -> torch.Tensor:
        """The divisor from a group's population variance (``members`` = K)."""
        if self.std_shrinkage:
            kappa = self.std_shrinkage
            variance = (members * variance + kappa * self.std_prior ** 2) / (members + kappa)
        std = variance.sqrt()
        return std.clamp_min(self.std_floor) if self.std_floor else std


DEFAULT_SPREAD = Spread()


def mid_ranks(scores: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Rank of each score within ``dim``, 1 = lowest; tied scores share the mean of their ranks (float, whatever
    the scores' dtype)."""
    x = scores.movedim(dim, -1)
    below = (x.unsqueeze(-2) < x.unsqueeze(-1)).sum(-1)
    tied = (x.unsqueeze(-2) == x.unsqueeze(-1)).sum(-1)
    dtype = scores.dtype if scores.is_floating_point() else torch.get_default_dtype()
    return (below.to(dtype) + (tied.to(dtype) + 1) / 2).movedim(-1, dim)


def population_std(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """sqrt(mean((x - mean x)^2)), ddof = 0, keeping ``dim``."""
    centred = x - x.mean(dim, keepdim=True)
    return centred.pow(2).mean(dim, keepdim=True).sqrt()


def _centred(scores: torch.Tensor, dim: int, spread: Spread) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What both standardisations start from, over ``dim``: the centred scores that ``spread`` prepares (mid-ranks or
    the scores), their population variance, and the σ that decides whether a group is zero-variance, that of the raw
    scores (``Spread``)."""
    prepared = spread.prepare(scores, dim)
    centred = prepared - prepared.mean(dim, keepdim=True)
    variance = centred.pow(2).mean(dim, keepdim=True)
    return centred, variance, population_std(scores, dim) if spread.rank_scores else variance.sqrt()


def standardize(scores: torch.Tensor, dim: int = -1, zero_variance: str = "centered",
                spread: Spread = DEFAULT_SPREAD) -> torch.Tensor:
    """TPO's u = (s - mean s) / popstd(s) over ``dim`` (``spread``: another divisor, see ``Spread``).

    Groups with popstd <= 1e-6 carry no ranking information. ``zero_variance="centered"`` returns the centred
    scores there (reference code; they are 0 up to float rounding, and exactly 0 for identical scores whose mean
    is exact, e.g. all-0 or all-1 terminal rewards); ``"zero"`` returns exact zeros (the paper's u = 0).
    """
    if zero_variance not in ZERO_VARIANCE_MODES:
        raise ValueError(f"zero_variance={zero_variance!r}; valid choices: {', '.join(ZERO_VARIANCE_MODES)}")
    centred, variance, std = _centred(scores, dim, spread)
    divisor = std if spread.is_default else spread.std(variance, scores.shape[dim])
    fallback = centred if zero_variance == "centered" else torch.zeros_like(centred)
    return torch.where(std > ZERO_VARIANCE_THRESHOLD, centred / divisor.clamp_min(ZERO_VARIANCE_THRESHOLD), fallback)


def zscore_advantages(scores: torch.Tensor, dim: int = -1, eps: float = 1e-8, guard: bool = True,
                      eps_in_sqrt: bool = False, spread: Spread = DEFAULT_SPREAD) -> torch.Tensor:
    """GRPO's A = (s - mean s) / (popstd(s) + eps) over ``dim`` (``spread``: another divisor, see ``Spread``).

    ``guard=True`` sets A = 0 in groups whose popstd <= 1e-6 (the paper's intent). ``guard=False`` is the
    reference code's unguarded formula: for dense scores the float mean of K equal values can be off by one ulp,
    and dividing that by 1e-8 gives every member of the group the same spurious advantage of order ±1.
    ``eps_in_sqrt``: (s - mean s) / sqrt(var + eps), the tabular bandit reference's form (docs/reproduction.md §2.12).
    """
    centred, variance, std = _centred(scores, dim, spread)
    if not spread.is_default:
        divisor = spread.std(variance, scores.shape[dim])
        advantages = centred / (divisor.pow(2).add(eps).sqrt() if eps_in_sqrt else divisor + eps)
    elif eps_in_sqrt:
        advantages = centred / variance.add(eps).sqrt()
    else:
        advantages = centred / (std + eps)
    if guard:
        advantages = torch.where(std > ZERO_VARIANCE_THRESHOLD, advantages, torch.zeros_like(advantages))
    return advantages


def batch_mean_baseline(rewards: torch.Tensor, batch_dim: int = 1) -> torch.Tensor:
    """Per-position batch-mean baseline of the token tasks: A_t = r_t - mean over the batch of r_t."""
    return rewards - rewards.mean(batch_dim, keepdim=True)
