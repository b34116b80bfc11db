"""Mechanism analysis of the algorithms on the MNIST bandit (docs/reproduction.md §6.4, paper Appendix C, Fig 4b).

For each test example with class probabilities π, label y, p = π_y and v = e_y − π, the exact expected logit update
d of an algorithm (one sampled action, reward 1{a = y}, baseline b = Σπ²) has the form

    d = β·v + Σ_{j≠y} α_j (π − e_j).

Its first-order effect on p is the gain p·⟨v, d⟩. A scalar one-vs-rest method can only move along v; its gain is
p·β_sym·‖v‖², with β_sym the exact coefficient when the wrong-class mass is spread evenly (π_j = q = (1−p)/9).
The surplus exact − scalar measures what TPO gains from pushing down the *specific* confusing classes, which
grows with the concentration c = max_{j≠y} π_j / (1 − p) of the mistake.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

from common.checks import ConfigError
from algorithms.library import DG, GRPO, PG, TPO, GroupPG
from algorithms.registry import Algorithm

# the smallest η for which TPO's closed form (float64) stays finite: (10/3)/η ≤ ln(float64 max), rounded up
TPO_ETA_MIN = math.ceil((10 / 3) / math.log(torch.finfo(torch.float64).max) * 1e4) / 1e4
BIN_EDGES = (0.0, 0.25, 0.5, 0.75, 1.01)
LOG_CLIP = 1e-8


def check_eta(algorithm: Algorithm) -> None:
    """Refuse, before any work, an η whose closed form overflows: TPO's λ = exp((10/3)/η) is a Python float, and
    below ``TPO_ETA_MIN`` math.exp raises OverflowError at the first test evaluation, after the training work."""
    if type(algorithm) is TPO and algorithm.hp.eta < TPO_ETA_MIN:
        raise ConfigError(f"algorithm.eta={algorithm.hp.eta} is not valid with task.mechanism=true (the mechanism "
                          f"analysis's exp((10/3)/η) overflows float64); expected algorithm.eta >= {TPO_ETA_MIN:.4g}, "
                          "or task.mechanism=false")


def _neg_log(x: torch.Tensor) -> torch.Tensor:
    return -torch.log(x.clamp_min(LOG_CLIP))


# Each algorithm's (β, α, β_sym): the exact d = β·v + Σ_{j≠y} α_j (π − e_j) (α_y = 0) and the symmetric scalar
# coefficient, from (probs, p, wrong = probs off the label, q = (1 − p)/9, the algorithm's hyperparameters).

def _pg(probs, p, wrong, q, hp):
    return p, torch.zeros_like(probs), p


def _group_pg(probs, p, wrong, q, hp):
    # Group PG weights log π(a) by u_a = ±3 instead of A: 2·3 = 6 times PG in expectation (10 classes).
    beta = 2 * math.sqrt(probs.shape[-1] - 1) * p
    return beta, torch.zeros_like(probs), beta


def _dg(probs, p, wrong, q, hp):
    def hit(b):  # a = y (prob p): A = 1 − b, gate σ(A·(−log p)/η), update A·gate·v
        return p * (1 - b) * torch.sigmoid((1 - b) * _neg_log(p) / hp.eta)

    def miss(b, r):  # a = j ≠ y (prob r = π_j): A = −b, update π_j·b·gate·(π − e_j) per unit π_j
        return b * torch.sigmoid(-b * _neg_log(r) / hp.eta)
    b, b_sym = probs.pow(2).sum(-1, keepdim=True), p.pow(2) + (probs.shape[-1] - 1) * q.pow(2)
    return hit(b), wrong * miss(b, probs), hit(b_sym) + p * miss(b_sym, q)


def _tpo(probs, p, wrong, q, hp):
    # One-hot skill: u = ±(3, −1/3, ...), so q ∝ π with the sampled class scaled by λ^{±1}, λ = e^{(10/3)/η}.
    num_classes = probs.shape[-1]
    lam = math.exp(num_classes / math.sqrt(num_classes - 1) / hp.eta)

    def gamma(r):
        return r * (lam - 1) / (lam * (1 - r) + r)
    beta = p * p * (lam - 1) / (1 - p + lam * p)  # p·β₊(p)
    return beta, wrong * gamma(wrong), beta + p * gamma(q)


# the algorithms with an exact expected update here, by class (not subclass: TPONoAnchor's is not TPO's); GRPO's
# batch-standardised advantage has no per-example closed form (None: its gains are NaN)
COEFFICIENTS: dict[type[Algorithm], Callable | None] = {PG: _pg, DG: _dg, TPO: _tpo, GRPO: None, GroupPG: _group_pg}


def covers(algorithm: Algorithm) -> bool:
    """Whether the analysis has the algorithm (its gains may be NaN: GRPO)."""
    return type(algorithm) in COEFFICIENTS


def mechanism_per_example(probs: torch.Tensor, labels: torch.Tensor, algorithm: Algorithm) -> dict[str, torch.Tensor]:
    """Per-example p, gain, scalar_gain, surplus, concentration and misclassified flag; shapes probs.shape[:-1].

    Computed in float64, with the algorithm's own hyperparameters (η). GRPO's batch-standardised advantage has no
    per-example closed form: its gains are NaN.
    """
    if not covers(algorithm):
        raise ValueError(f"algorithm={algorithm.id} has no exact expected update here; valid choices: "
                         f"{', '.join(cls.id for cls in COEFFICIENTS)}")
    probs = probs.double()
    onehot = torch.nn.functional.one_hot(labels, probs.shape[-1]).double().expand_as(probs)
    p = (probs * onehot).sum(-1, keepdim=True)
    v = onehot - probs
    v_sq = v.pow(2).sum(-1, keepdim=True)
    coefficients = COEFFICIENTS[type(algorithm)]
    if coefficients is None:
        gain = scalar_gain = torch.full_like(p, math.nan)
    else:
        wrong, q = probs * (1.0 - onehot), (1.0 - p) / (probs.shape[-1] - 1)
        beta, alpha, beta_sym = coefficients(probs, p, wrong, q, algorithm.hp)
        off_axis = (v * (alpha.sum(-1, keepdim=True) * probs - alpha)).sum(-1, keepdim=True)
        gain = p * (beta * v_sq + off_axis)
        scalar_gain = p * (beta_sym * v_sq)
    max_wrong = (probs * (1 - onehot)).amax(-1)
    p = p.squeeze(-1)
    return {"p": p, "gain": gain.squeeze(-1), "scalar_gain": scalar_gain.squeeze(-1),
            "surplus": (gain - scalar_gain).squeeze(-1),
            "concentration": max_wrong / (1 - p).clamp_min(LOG_CLIP),
            "misclassified": probs.argmax(-1) != labels}


def mechanism_by_bin(probs: torch.Tensor, labels: torch.Tensor, algorithm: Algorithm) -> dict[str, torch.Tensor]:
    """Means of gain, scalar_gain, surplus and the count per concentration bin, each of shape (S, 4).

    probs (S, N, 10) over S seeds, labels (N,). Only misclassified examples with finite values count; a bin
    without any has mean NaN (so GRPO gives NaN means and zero counts).
    """
    stats = mechanism_per_example(probs, labels, algorithm)
    values = torch.stack([stats["gain"], stats["scalar_gain"], stats["surplus"]], -1)
    conc = stats["concentration"]
    edges = torch.tensor(BIN_EDGES, dtype=conc.dtype, device=conc.device)
    keep = stats["misclassified"] & values.isfinite().all(-1) & conc.isfinite() & (conc <= edges[-1])
    bins = torch.bucketize(conc, edges[1:-1], right=True)
    member = torch.nn.functional.one_hot(bins, len(BIN_EDGES) - 1).double() * keep.unsqueeze(-1)
    count = member.sum(-2)
    sums = torch.einsum("snk,snm->skm", member, torch.where(keep.unsqueeze(-1), values, 0.0))
    means = torch.where(count.unsqueeze(-1) > 0, sums / count.clamp_min(1).unsqueeze(-1), math.nan)
    return {"gain": means[..., 0], "scalar_gain": means[..., 1], "surplus": means[..., 2],
            "count": count.long()}
