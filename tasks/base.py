"""The contract between a trainer and a task.

A task owns its environment, policy and optimizer; a trainer (``harness/trainers``) owns the loop: rollout, the
frozen signal, the epochs of updates, outputs, checkpoints and logging. ``Task.trainer`` names the trainer that runs
it: "group" (the batched group trainer: the task supplies a rollout, the log-probs of its candidates, the algorithm's
view of a batch and an optimizer step, and contains no update loop), "closed_form" (the task's own ``step``: an
expected update computed in closed form, with no sample to fit) or "trl" (LLM tasks, ``harness/trainers/trl.py``).
Every tensor a task returns has a leading seed axis S: all seeds train as one batched computation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
from omegaconf import DictConfig

from algorithms import Aggregation, Algorithm, Groups, Rollout
from common import declared
from common.checks import ConfigError

# A task node's keys that the harness reads, not the task: its id, its kind (llm), the run's budget and checkpoint
# spacing (harness.config.RunSettings, the one reader) and the thresholds summary.json reports
RUN_KEYS = ("name", "kind", "steps", "checkpoint_every", "steps_to")


@dataclass
class StepOutput:
    """What one training step (an episode, for sequence tasks) reports.

    ``loss`` is the per-seed loss (S,); a non-finite value marks that seed diverged; ``metrics`` maps names to
    per-seed values (S,) to be logged at ``log_step`` (None: nothing logged this step).
    """

    loss: torch.Tensor | None = None
    metrics: dict[str, torch.Tensor] | None = None
    log_step: int | None = None


@dataclass
class RolloutBatch:
    """One rollout batch of a chunk of seeds, as the group trainer passes it back to its task. Tasks subclass it with
    what their rollout produced; the trainer fills ``groups`` (the algorithm's view, with ℓ_old) and ``signal`` (the
    algorithm's frozen signal) on the first epoch, from the rollout policy itself."""

    seeds: slice = field(default_factory=lambda: slice(None), kw_only=True)
    groups: Groups | None = field(default=None, kw_only=True)
    signal: torch.Tensor | None = field(default=None, kw_only=True)


class Task:
    """Base class: subclasses set the class attributes and implement the methods of their trainer."""

    @dataclass(frozen=True)
    class Settings:
        """What a task reads of its ``task`` node, each declared once (``common.declared.setting``) and typed by
        ``settings_of``; a task subclasses it with its own, and a test holds ``conf/task/<id>.yaml`` to it."""

    name: ClassVar[str]
    rollouts: ClassVar[frozenset[Rollout]]
    metric_names: ClassVar[tuple[str, ...]] = ("error",)
    trainer: ClassVar[str] = "group"
    # More than one update per rollout batch allowed (the algorithm's epochs, which its trainer runs); else exactly
    # one, and an algorithm.epochs above 1 is refused (the bandit tasks: docs/reproduction.md §4.2–4.3)
    multi_epoch: ClassVar[bool] = False

    def __init__(self, cfg: DictConfig, algorithm: Algorithm, rollout: Rollout, seeds: torch.Tensor,
                 device: torch.device, model: DictConfig | None = None, optim: DictConfig | None = None):
        self.settings = self.settings_of(cfg)  # every key checked and typed, once
        self.model_cfg = model  # top-level ``model`` / ``optim`` nodes, present when the task's defaults pull them in
        self.optim_cfg = optim
        self.algorithm = algorithm  # the registry's algorithm, hyperparameters typed (``algorithm.hp``)
        self.rollout = rollout
        self.seeds = seeds
        self.device = device
        self.params: dict[str, torch.Tensor] = {}  # seed-batched leaves (S, ...), checkpointed with ``optimizer``
        self.optimizer: Any = None
        if not self.multi_epoch:
            self.require_single_update()

    @classmethod
    def settings_of(cls, node: DictConfig):
        """The task's settings of a ``task`` node; ConfigError for a bad value or a key neither it nor the harness
        (``RUN_KEYS``) reads."""
        return declared.build(cls.Settings, node, "task", f"task={cls.name}", others=RUN_KEYS)

    @classmethod
    def memory_estimate(cls, cfg: DictConfig, seeds: int) -> tuple[float, str] | None:
        """(bytes, the sizes it grows with) of a run of ``seeds`` seeds: a coarse upper bound (``tasks/memory.py``
        checks it against the cap before anything is allocated); None where the task gives none."""
        return None

    @classmethod
    def check_steps(cls, cfg: DictConfig, steps: int) -> None:
        """Refuse a step budget the task's configuration cannot use (before any work); most tasks accept any."""

    @classmethod
    def epochs_for(cls, algorithm: Algorithm) -> int:
        """The updates per rollout batch a run of ``algorithm`` on this task makes: the algorithm's epochs (its
        ``default_epochs`` where ``algorithm.epochs`` is null) on a multi-epoch task, else one. The report reads a run
        recorded with a null ``algorithm.epochs`` at this number, so a cell that names it finds the run."""
        return algorithm.epochs if cls.multi_epoch else 1

    def require_single_update(self) -> None:
        """A task without ``multi_epoch`` takes exactly one update per batch: refuse a multi-epoch request."""
        epochs = self.algorithm.hp.epochs
        if epochs not in (None, 1):
            raise ConfigError(f"algorithm.epochs={epochs} is not valid for task={self.name}, which takes one update "
                              "per batch; valid choices: null, 1")

    def require_default_aggregation(self) -> None:
        """A task whose update is written in closed form (not by autograd through the loss) computes it for the
        algorithm's own aggregation: refuse another, which it would not honour."""
        default = Aggregation(type(self.algorithm).Hyperparameters().aggregation)
        if self.algorithm.aggregation is not default:
            raise ConfigError(f"algorithm.aggregation={self.algorithm.aggregation.value} is not valid for "
                              f"task={self.name}, whose update is computed in closed form; valid choices: "
                              f"{default.value}")

    @classmethod
    def inert_keys(cls, algorithm: type[Algorithm]) -> frozenset[str]:
        """Config keys on which a run of ``algorithm`` does not depend, whatever their value (most tasks: none). A
        report's cell that sets one reads the runs of the preset's own value, and its command runs that value, so
        that one configuration is never run twice (``harness/report/tables.py``)."""
        return frozenset()

    @classmethod
    def supports(cls, algorithm: type[Algorithm]) -> bool:
        """Whether the task can run the algorithm: it offers one of its rollout shapes (a task may refine this)."""
        return algorithm.rollout_for(cls.rollouts) is not None

    @classmethod
    def supported_algorithms(cls) -> list[str]:
        from algorithms import ALGORITHMS

        return [name for name, algorithm in ALGORITHMS.items() if cls.supports(algorithm)]

    def initial_metrics(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """Metrics of the untrained policy to log before the first step, if the task's convention has them."""
        return None

    # ---- the group trainer's calls, in the order it makes them (harness/trainers/batched.py) ------------------------
    def rollout_batches(self, step: int) -> list[RolloutBatch]:
        """Sample and score this step's rollouts with the current policy, one batch per chunk of seeds."""
        raise NotImplementedError

    def log_probs(self, batch: RolloutBatch) -> torch.Tensor:
        """The current log-probs ℓ of the batch's candidates, shaped as the algorithm reads them, with their graph."""
        raise NotImplementedError

    def groups(self, batch: RolloutBatch, logp_old: torch.Tensor) -> Groups:
        """The algorithm's view of the batch: its scores and ℓ_old (the first epoch's ℓ, detached)."""
        raise NotImplementedError

    def zero_grad(self) -> None:
        """Clear the gradients before an epoch's backward passes."""

    def backward(self, loss: torch.Tensor, batch: RolloutBatch) -> None:
        """Accumulate the gradient of the batch's per-seed loss (S,) on the parameters."""
        loss.sum().backward()

    def optimizer_step(self, epoch: int, loss: torch.Tensor) -> None:
        """Apply an epoch's accumulated gradient; ``loss`` is the epoch's per-seed loss over all batches (S,)."""
        raise NotImplementedError

    def report(self, step: int, batches: list[RolloutBatch]) -> StepOutput:
        """The step's outcome once its updates are applied: the first epoch's loss and the metrics to log."""
        raise NotImplementedError

    # ---- the closed-form trainer's call ---------------------------------------------------------------------------
    def step(self, step: int) -> StepOutput:
        """One closed-form update (``trainer = "closed_form"``)."""
        raise NotImplementedError

    # ---- checkpoints --------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"params": {name: value.detach() for name, value in self.params.items()},
                "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        with torch.no_grad():
            for name, value in state["params"].items():
                self.params[name].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
