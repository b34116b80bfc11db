"""Exact expected update directions on logits for a one-hot bandit (docs/reproduction.md §2.6, §2.12, §2.14,
§2.15, §2.17; paper Appendix B). With reward 1{a = y}, every method except TPO moves along v = e_y − π, scaled by
β(p), p = π(y).

``probs`` has shape (..., A) over A arms; ``correct`` is the index of the rewarded arm on the same leading axes.
"""

from __future__ import annotations

import torch

from common.kernels import softmax
from algorithms.scores import standardize


def _one_hot_like(probs: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """e_y in probs' shape and dtype (a scatter: F.one_hot reads the labels back to validate them on CPU)."""
    return torch.zeros_like(probs).scatter_(-1, correct.unsqueeze(-1), 1.0)


def _p_and_v(probs: torch.Tensor, correct: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    e_y = _one_hot_like(probs, correct)
    return (probs * e_y).sum(-1, keepdim=True), e_y - probs


def ce_direction(probs, correct):
    """Cross-entropy oracle: v = e_y − π (β_CE = 1)."""
    return _p_and_v(probs, correct)[1]


def pg_direction(probs, correct):
    """Exact REINFORCE (baseline 0): E_a[r ∇log π(a)] = p·v."""
    p, v = _p_and_v(probs, correct)
    return p * v


def dg_direction(probs, correct, eta: float = 1.0):
    """Exact DG (baseline 0): p·σ(−log p / η)·v, i.e. β_DG = p/(1+p) at η = 1."""
    p, v = _p_and_v(probs, correct)
    return p * torch.sigmoid(-torch.log(p + 1e-30) / eta) * v


def grpo_direction(probs, correct):
    """Exact population GRPO: sqrt(p / (1 − p + 1e-8))·v (the z-score of a Bernoulli(p) reward)."""
    p, v = _p_and_v(probs, correct)
    return torch.sqrt(p / (1.0 - p + 1e-8)) * v


def tpo_direction(probs, correct, eta: float = 1.0):
    """Exact TPO: q − π with q ∝ (π + 1e-8)·exp(u/η), u = standardize(e_y) over the arms (+3, −1/3, ... for 10)."""
    u = standardize(_one_hot_like(probs, correct))
    target = softmax(torch.log(probs + 1e-8) + u / eta)
    return target - probs
