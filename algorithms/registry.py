"""Algorithm id → loss, the rollout shapes it can run on, its advantage estimator and default epochs.

A task offers some rollout shapes; an algorithm runs on the first of its shapes that the task offers. Adding an
algorithm means one loss function in ``losses.py``, one entry here and one ``conf/algorithm/<id>.yaml`` (and, for
a hyperparameter no other algorithm has, its valid range in ``HYPERPARAMETERS``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from algorithms import losses
from algorithms.scores import ZERO_VARIANCE_MODES


class Rollout(str, Enum):
    """How candidates are produced for one context."""

    SINGLE = "single"  # one sampled action/sequence per context (PPO, DG, PG; GRPO standardizes over the batch)
    GROUP = "group"  # K sampled full sequences per context
    TOKEN_CANDIDATES = "token_candidates"  # K sampled next tokens at every state of one behaviour path
    FULL_ACTION_SET = "full_action_set"  # a bandit's whole action set is the group (only sampled arms are scored)
    EXACT = "exact"  # closed-form expected direction (tabular, no sampling)
    SUPERVISED = "supervised"  # the label itself (CE oracle)


class Advantage(str, Enum):
    """What the loss consumes in place of raw scores."""

    SCORES = "scores"  # raw scores; the loss standardizes them itself (TPO family)
    ZSCORE = "zscore"  # (s − mean)/(popstd + 1e-8) over the comparison set (the group, or the batch)
    BASELINE = "baseline"  # r − b with the task's baseline
    NONE = "none"  # no reward signal (CE)


@dataclass(frozen=True)
class AlgorithmSpec:
    name: str
    loss: Callable
    rollouts: tuple[Rollout, ...]
    advantage: Advantage
    epochs: int
    summary: str

    def rollout_for(self, offered: tuple[Rollout, ...] | frozenset[Rollout]) -> Rollout | None:
        return next((shape for shape in self.rollouts if shape in offered), None)


_G, _S, _T, _F, _E = Rollout.GROUP, Rollout.SINGLE, Rollout.TOKEN_CANDIDATES, Rollout.FULL_ACTION_SET, Rollout.EXACT

ALGORITHMS: dict[str, AlgorithmSpec] = {
    spec.name: spec
    for spec in (
        AlgorithmSpec("tpo", losses.tpo_loss, (_G, _F, _E), Advantage.SCORES, 4, "Target Policy Optimization"),
        AlgorithmSpec("tpo_token", losses.tpo_loss, (_T,), Advantage.SCORES, 4, "TPO over K next-token candidates"),
        AlgorithmSpec("tpo_no_anchor", losses.tpo_no_anchor_loss, (_G,), Advantage.SCORES, 4, "TPO, q = softmax(u/η)"),
        AlgorithmSpec("grpo", losses.grpo_loss, (_G, _S, _E), Advantage.ZSCORE, 4, "GRPO, clip + k3 KL to π_old"),
        AlgorithmSpec("grpo_token", losses.grpo_loss, (_T,), Advantage.ZSCORE, 4, "GRPO over K next-token candidates"),
        AlgorithmSpec("grpo_no_kl", losses.grpo_loss, (_G,), Advantage.ZSCORE, 4, "GRPO with β = 0"),
        AlgorithmSpec("grpo_masked", losses.grpo_masked_loss, (_G,), Advantage.ZSCORE, 4, "GRPO, zero-variance masked"),
        AlgorithmSpec("group_pg", losses.group_pg_loss, (_G, _F), Advantage.SCORES, 4, "PG weighted by TPO's u"),
        AlgorithmSpec("ppo", losses.ppo_loss, (_S,), Advantage.BASELINE, 4, "PPO, clipped per-token ratio"),
        AlgorithmSpec("dg", losses.dg_loss, (_S, _E), Advantage.BASELINE, 1, "Delightful gradient, σ(A·ℓ/η) gate"),
        AlgorithmSpec("pg", losses.pg_loss, (_S, _E), Advantage.BASELINE, 4, "REINFORCE with a baseline"),
        AlgorithmSpec("ce", losses.ce_loss, (Rollout.SUPERVISED, _E), Advantage.NONE, 1, "cross-entropy oracle"),
    )
}


# The valid values of every hyperparameter a conf/algorithm/*.yaml sets, whichever task reads it: a range (the
# keywords of tasks.base.check_number), a tuple of choices, or bool. tests/test_validation.py checks that every key
# of every conf/algorithm/*.yaml has an entry.
HYPERPARAMETERS: dict[str, dict | tuple | type] = {
    "epochs": dict(low=1, integer=True, optional=True),  # updates per rollout batch; null = the registry default
    "eta": dict(low=0, low_open=True),  # η > 0: TPO's q ∝ p_old·exp(u/η), Group PG's u/η, DG's gate σ(A·ℓ/η)
    "clip_eps": dict(low=0, low_open=True),  # ε of clip(ρ, 1 − ε, 1 + ε); ε = 0 pins the ratio at 1
    "beta": dict(low=0),  # weight of the k3 KL to π_old; 0 = none
    "log_ratio_clip": dict(low=0, low_open=True, allow_inf=True),  # |log ρ| ≤ c before exp; inf = no clip
    "surprisal_clip": dict(low=0, low_open=True, optional=True, allow_inf=True),  # ℓ ∈ [−c, c]; null = never
    "zero_variance": ZERO_VARIANCE_MODES,
    "zero_variance_guard": bool,
}


def check_hyperparameters(cfg) -> None:
    """Raise a ConfigError naming the key, the value and its valid range for any hyperparameter of the
    ``algorithm`` config node outside ``HYPERPARAMETERS``."""
    from tasks.base import check_bool, check_choice, check_number  # tasks.base imports this package

    for name, value in cfg.items():
        valid, key = HYPERPARAMETERS.get(name), f"algorithm.{name}"
        if isinstance(valid, dict):
            check_number(key, value, **valid)
        elif isinstance(valid, tuple):
            check_choice(key, value, valid)
        elif valid is bool:
            check_bool(key, value)


def get_algorithm(name: str) -> AlgorithmSpec:
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm={name!r} is unknown; valid choices: {', '.join(ALGORITHMS)}") from None
