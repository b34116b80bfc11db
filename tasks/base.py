"""The contract between the trainer and a task.

A task owns its environment, policy and optimizer; the trainer owns the loop, outputs, checkpoints and logging.
Every tensor a task returns has a leading seed axis S: all seeds train as one batched computation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from algorithms import Algorithm, Rollout
from algorithms.checks import ConfigError


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

    def __init__(self, cfg: DictConfig, algorithm_cfg: DictConfig, algorithm: Algorithm, rollout: Rollout,
                 seeds: torch.Tensor, device: torch.device, model: DictConfig | None = None,
                 optim: DictConfig | None = None):
        self.cfg = cfg
        self.model_cfg = model  # top-level ``model`` / ``optim`` nodes, present when the task's defaults pull them in
        self.optim_cfg = optim
        self.algorithm_cfg = algorithm_cfg
        self.algorithm = algorithm  # the registry's algorithm, hyperparameters typed (``algorithm.hp``)
        self.rollout = rollout
        self.seeds = seeds
        self.device = device

    @classmethod
    def check_steps(cls, cfg: DictConfig, steps: int) -> None:
        """Refuse a step budget the task's configuration cannot use (before any work); most tasks accept any."""

    def require_single_update(self) -> None:
        """Bandit tasks take exactly one update per batch (docs/reproduction.md §4.2–4.3): refuse a multi-epoch
        request."""
        epochs = self.algorithm.hp.epochs
        if epochs not in (None, 1):
            raise ConfigError(f"algorithm.epochs={epochs} is not valid for task={self.name}, which takes one update "
                              "per batch; valid choices: null, 1")

    @classmethod
    def supports(cls, algorithm: type[Algorithm]) -> bool:
        """Whether the task can run the algorithm: it offers one of its rollout shapes (a task may refine this)."""
        return algorithm.rollout_for(cls.rollouts) is not None

    @classmethod
    def supported_algorithms(cls) -> list[str]:
        from algorithms import ALGORITHMS

        return [name for name, algorithm in ALGORITHMS.items() if cls.supports(algorithm)]

    def step(self, step: int) -> StepOutput:
        raise NotImplementedError

    def initial_metrics(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Metrics of the untrained policy to log before the first step, if the task's convention has them."""
        return None

    def state_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def load_state_dict(self, state: dict[str, Any]) -> None:
        raise NotImplementedError
