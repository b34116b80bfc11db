"""The contract between the trainer and a task.

A task owns its environment, policy and optimizer; the trainer owns the loop, outputs, checkpoints and logging.
Every tensor a task returns has a leading seed axis S: all seeds train as one batched computation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from algorithms import AlgorithmSpec, Rollout


class ConfigError(ValueError):
    """A configuration value that cannot run; raised before any work is done."""


def check_choice(key: str, value: Any, choices: tuple | list) -> Any:
    """Raise a ConfigError naming ``key`` and the valid choices if ``value`` is not one of them (booleans and
    numbers are told apart: 1 is not true)."""
    if not any(value == choice and isinstance(value, bool) == isinstance(choice, bool) for choice in choices):
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: {', '.join(map(str, choices))}")
    return value


def check_positive_int(key: str, value: Any) -> int:
    """Raise a ConfigError naming ``key`` unless ``value`` is a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}={value!r} is not valid; expected a positive integer")
    return value


def check_number(key: str, value: Any, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, integer: bool = False, optional: bool = False,
                 allow_inf: bool = False) -> Any:
    """Raise a ConfigError naming ``key``, the value and the valid range unless ``value`` is a number (an integer
    with ``integer``) within [low, high] (``low_open`` / ``high_open``: that end excluded); ``optional``: null is
    valid too. NaN is never valid, ±inf only with ``allow_inf``. Returns ``value``."""
    if value is None and optional:
        return value
    valid = isinstance(value, (int, float)) and not isinstance(value, bool) and (isinstance(value, int) or not integer)
    if valid and isinstance(value, float):
        valid = not math.isnan(value) and (allow_inf or math.isfinite(value))
    if valid and low is not None:
        valid = value > low if low_open else value >= low
    if valid and high is not None:
        valid = value < high if high_open else value <= high
    if not valid:
        if low is not None and high is not None:
            bounds = f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            bounds = f" {'>' if low_open else '>='} {low}"
        elif high is not None:
            bounds = f" {'<' if high_open else '<='} {high}"
        else:
            bounds = ""
        kind, shown = "an integer" if integer else "a number", "null" if value is None else repr(value)
        raise ConfigError(f"{key}={shown} is not valid; expected {'null or ' if optional else ''}{kind}{bounds}")
    return value


def check_positive_float(key: str, value: Any, optional: bool = False) -> Any:
    """A number > 0 (η, clip ε, learning rates, temperatures, timeouts); ``optional``: null is valid too."""
    return check_number(key, value, low=0, low_open=True, optional=optional)


def check_non_negative(key: str, value: Any, integer: bool = False) -> Any:
    """A number (an integer with ``integer``) >= 0: KL coefficients, "0 = off" counts such as checkpoint_every."""
    return check_number(key, value, low=0, integer=integer)


def check_bool(key: str, value: Any) -> bool:
    """Raise a ConfigError naming ``key`` unless ``value`` is true or false."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: true, false")
    return value


@dataclass
class StepOutput:
    """What one training step (an episode, for sequence tasks) reports.

    ``loss`` is the per-seed loss (S,); a non-finite value marks that seed diverged; ``metrics`` maps names to
    per-seed values (S,) to be logged at ``log_step`` (None: nothing logged this step).
    """

    loss: torch.Tensor | None = None
    metrics: dict[str, torch.Tensor] | None = None
    log_step: int | None = None


class Task:
    """Base class: subclasses set the class attributes and implement ``step`` and the state methods."""

    name: ClassVar[str]
    rollouts: ClassVar[frozenset[Rollout]]
    metric_names: ClassVar[tuple[str, ...]] = ("error",)
    algorithms: ClassVar[tuple[str, ...] | None] = None  # restricts the algorithms further, when set

    def __init__(self, cfg: DictConfig, algorithm_cfg: DictConfig, algorithm: AlgorithmSpec, rollout: Rollout,
                 seeds: torch.Tensor, device: torch.device, model: DictConfig | None = None,
                 optim: DictConfig | None = None):
        self.cfg = cfg
        self.model_cfg = model  # top-level ``model`` / ``optim`` nodes, present when the task's defaults pull them in
        self.optim_cfg = optim
        self.algorithm_cfg = algorithm_cfg
        self.algorithm = algorithm
        self.rollout = rollout
        self.seeds = seeds
        self.device = device

    @classmethod
    def check_steps(cls, cfg: DictConfig, steps: int) -> None:
        """Refuse a step budget the task's configuration cannot use (before any work); most tasks accept any."""

    def require_single_update(self) -> None:
        """Bandit tasks take exactly one update per batch (spec §4.2–4.3): refuse a multi-epoch request."""
        epochs = self.algorithm_cfg.get("epochs")
        if epochs not in (None, 1):
            raise ConfigError(f"algorithm.epochs={epochs} is not valid for task={self.name}, which takes one update "
                              "per batch; valid choices: null, 1")

    @classmethod
    def supported_algorithms(cls) -> list[str]:
        from algorithms import ALGORITHMS

        return [name for name, spec in ALGORITHMS.items()
                if spec.rollout_for(cls.rollouts) is not None and (cls.algorithms is None or name in cls.algorithms)]

    def step(self, step: int) -> StepOutput:
        raise NotImplementedError

    def initial_metrics(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Metrics of the untrained policy to log before the first step, if the task's convention has them."""
        return None

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
