"""Scores → standardized signals and advantages (paper Appendix A; spec §1, §2.7, §2.13).

Tensors follow one convention across the library: the *last* axis is the comparison set (a group of K
candidates, or a batch when single-sample methods standardize over it), every leading axis is a batch axis.
"""

from __future__ import annotations

import torch

ZERO_VARIANCE_THRESHOLD = 1e-6
ZERO_VARIANCE_MODES = ("centered", "zero")


def population_std(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """sqrt(mean((x - mean x)^2)), ddof = 0, keeping ``dim``."""
    centred = x - x.mean(dim, keepdim=True)
    return centred.pow(2).mean(dim, keepdim=True).sqrt()


def standardize(scores: torch.Tensor, dim: int = -1, zero_variance: str = "centered") -> torch.Tensor:
    """TPO's u = (s - mean s) / popstd(s) over ``dim``.

    Groups with popstd <= 1e-6 carry no ranking information. ``zero_variance="centered"`` returns the centred
    scores there (reference code; they are 0 up to float rounding, and exactly 0 for identical scores whose mean
    is exact, e.g. all-0 or all-1 terminal rewards); ``"zero"`` returns exact zeros (the paper's u = 0).
    """
    if zero_variance not in ZERO_VARIANCE_MODES:
        raise ValueError(f"zero_variance={zero_variance!r}; valid choices: {', '.join(ZERO_VARIANCE_MODES)}")
    centred = scores - scores.mean(dim, keepdim=True)
    std = centred.pow(2).mean(dim, keepdim=True).sqrt()
    informative = std > ZERO_VARIANCE_THRESHOLD
    fallback = centred if zero_variance == "centered" else torch.zeros_like(centred)
    return torch.where(informative, centred / std.clamp_min(ZERO_VARIANCE_THRESHOLD), fallback)


def zscore_advantages(scores: torch.Tensor, dim: int = -1, eps: float = 1e-8, guard: bool = True,
                      eps_in_sqrt: bool = False) -> torch.Tensor:
    """GRPO's A = (s - mean s) / (popstd(s) + eps) over ``dim``.

    ``guard=True`` sets A = 0 in groups whose popstd <= 1e-6 (the paper's intent). ``guard=False`` is the
    reference code's unguarded formula: for dense scores the float mean of K equal values can be off by one ulp,
    and dividing that by 1e-8 gives every member of the group the same spurious advantage of order ±1.
    ``eps_in_sqrt``: (s - mean s) / sqrt(var + eps), the tabular bandit reference's form (spec §2.12).
    """
    centred = scores - scores.mean(dim, keepdim=True)
    variance = centred.pow(2).mean(dim, keepdim=True)
    if eps_in_sqrt:
        advantages = centred / variance.add(eps).sqrt()
        std = variance.sqrt()
    else:
        std = variance.sqrt()
        advantages = centred / (std + eps)
    if guard:
        advantages = torch.where(std > ZERO_VARIANCE_THRESHOLD, advantages, torch.zeros_like(advantages))
    return advantages


def baseline_advantages(rewards: torch.Tensor, baseline: torch.Tensor | float) -> torch.Tensor:
    """A = r - b for single-sample methods (PG, PPO, DG); b is the task's baseline."""
    return rewards - baseline


def batch_mean_baseline(rewards: torch.Tensor, batch_dim: int = 1) -> torch.Tensor:
    """Per-position batch-mean baseline of the token tasks: A_t = r_t - mean over the batch of r_t."""
    return rewards - rewards.mean(batch_dim, keepdim=True)
