"""The trainers of the batched tasks: every seed of a (task, algorithm) configuration in one process, one batched
computation, with checkpoints, divergence tracking and the metrics rows of every seed.

``GroupTrainer`` runs an episode as the paper's group RL does: sample and score a rollout with the current policy;
on the first epoch (θ = θ_old, so ℓ is the rollout policy's own) freeze ℓ_old and the algorithm's signal; take E
epochs of the algorithm's loss and the task's optimizer step; report. The task supplies only its environment and
policy (``tasks.base.Task``). ``ClosedFormTrainer`` runs a task whose update is an expected direction computed in
closed form (``Task.step``).
"""

from __future__ import annotations

import logging
import math
from pathlib import Path
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from harness import process
from harness.progress import Progress
from harness.rundir import outputs
from harness.config import build_task
from harness.session import Session
from harness.trainers.base import Resume, Trainer, device_hardware
from tasks.base import RolloutBatch, StepOutput, Task
from tasks.models import linear

log = logging.getLogger(__name__)
MAX_PENDING_LOSSES = 4096  # steps between divergence checks for a task that records rarely


class BatchedTrainer(Trainer):
    """The step loop of a batched task: checkpoints every ``task.checkpoint_every`` steps and at the end, a
    metrics row per seed at each step the task reports one, a seed's numbers NaN from the step its loss is first
    non-finite."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.task = build_task(cfg)
        self.seeds = self.task.seeds.tolist()
        self.device = self.task.device

    @staticmethod
    def episode(task: Task, step: int) -> StepOutput:
        raise NotImplementedError

    def has_checkpoint(self, run_dir: Path) -> bool:
        return (run_dir / outputs.CHECKPOINT_FILE).exists()

    def resume(self, run_dir: Path, fingerprint: str) -> Resume | None:
        checkpoint = outputs.load_checkpoint(run_dir, fingerprint)
        if checkpoint is None:
            return None
        steps = self.settings.steps
        if checkpoint["step"] > steps:
            raise outputs.CheckpointError(f"{run_dir / outputs.CHECKPOINT_FILE} is at step {checkpoint['step']}, "
                                          f"past task.steps={steps}; {outputs.CHECKPOINT_HELP}")
        try:
            self.task.load_state_dict(checkpoint["task"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise outputs.CheckpointError(f"{run_dir / outputs.CHECKPOINT_FILE} does not fit this task's state "
                                          f"({type(error).__name__}: {str(error).splitlines()[0]}); "
                                          f"{outputs.CHECKPOINT_HELP}") from None
        self.diverged = checkpoint["diverged"]
        return Resume(checkpoint["step"], checkpoint["rows"], [*checkpoint["resumes"], checkpoint["step"]],
                      checkpoint["cpu_seconds"])

    def fit(self, session: Session, start: Resume | None) -> None:
        task, seeds, diverged = self.task, self.seeds, self.diverged
        writer, tracker, fingerprint = session.writer, session.tracker, session.fingerprint
        steps, first = self.settings.steps, start.step if start else 0
        # first step with a non-finite loss per seed: the steps' losses are kept on the device and checked only when
        # metrics are recorded or saved, so that no step waits for the device, or pays ~5 ops, to check for divergence
        losses: list[tuple[int, torch.Tensor]] = []  # (step, its per-seed loss) since the last check

        def read_diverged() -> None:
            if not losses:
                return
            bad = ~torch.isfinite(torch.stack([loss for _, loss in losses]))  # (steps, seeds)
            first_bad = bad.to(torch.uint8).argmax(0)  # the first non-finite step per seed (0 where none)
            for index in bad.any(0).nonzero().flatten().tolist():
                diverged.setdefault(str(seeds[index]), losses[int(first_bad[index])][0])
            losses.clear()

        def record(step: int, metrics: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
            read_diverged()
            values = {name: value.detach().to("cpu", torch.float64).numpy() for name, value in metrics.items()}
            for index, seed in enumerate(seeds):
                if str(seed) in diverged:  # a diverged seed's numbers are meaningless from then on
                    for column in values.values():
                        column[index] = math.nan
            writer.append(step, values)
            tracker.log(step, values)
            return values

        def save(step: int) -> None:
            read_diverged()
            writer.flush()
            outputs.save_checkpoint(session.run_dir, {
                "step": step, "task": task.state_dict(), "rows": writer.rows, "diverged": diverged,
                "resumes": session.resumes, "fingerprint": fingerprint, "cpu_seconds": session.cpu_seconds()})
            tracker.flush()

        checkpoint_every = self.settings.checkpoint_every
        progress = Progress(f"{self.cfg.task.name}/{self.cfg.algorithm.name}", steps, first, self.settings.progress)
        try:
            if first == 0 and (initial := task.initial_metrics()) is not None:
                record(*initial)
            for step in range(first, steps):
                out = self.episode(task, step)
                if out.loss is not None:
                    losses.append((step, out.loss.detach().expand(len(seeds))))  # a view; (S,) or one for all
                    if len(losses) == MAX_PENDING_LOSSES:
                        read_diverged()
                errors = None
                if out.metrics is not None:
                    errors = record(out.log_step, out.metrics).get("error")
                progress.advance(errors)
                if checkpoint_every and (step + 1) % checkpoint_every == 0:
                    save(step + 1)
                if process.checkpoint_asked() and step + 1 < steps:  # a scheduler's time limit or preemption
                    save(step + 1)
                    raise KeyboardInterrupt(process.CHECKPOINT_SIGNAL.name)
            save(steps)
        finally:
            read_diverged()
            progress.close()

    def hardware(self) -> dict[str, Any]:
        return {**device_hardware(self.device), "cpu_matmul": linear.backend()}


class GroupTrainer(BatchedTrainer):
    """Rollout → frozen ℓ_old and signal → E epochs of loss and optimizer step, for any batched task. With E > 1 the
    algorithm's update metrics (``Algorithm.metric_names``: ratio deviation, k3 KL to the rollout snapshot, clip
    fraction) are logged each episode, averaged over the epochs after the first: the first runs at θ_old, where the
    ratio is 1, the KL 0 and nothing is clipped."""

    @property
    def metric_names(self) -> tuple[str, ...]:
        return (*self.task.metric_names, *update_metric_names(self.task))

    @staticmethod
    def episode(task: Task, step: int) -> StepOutput:
        batches = task.rollout_batches(step)
        names = update_metric_names(task)
        moved: dict[str, torch.Tensor] = {}  # the update metrics, summed over the epochs after the first
        epochs = updates_per_batch(task)
        for epoch in range(epochs):
            task.zero_grad()
            losses, metrics = [], []
            for batch in batches:
                loss, batch_metrics = GroupTrainer.batch_loss(task, batch, task.log_probs(batch))
                task.backward(loss, batch)
                losses.append(loss.detach())
                metrics.append(batch_metrics)
            task.optimizer_step(epoch, losses[0] if len(losses) == 1 else torch.cat(losses))
            if epoch and names:
                for name in names:
                    value = torch.cat([m[name] for m in metrics])
                    moved[name] = moved[name] + value if name in moved else value
        out = task.report(step, batches)
        if names and out.metrics is not None:
            out.metrics.update({name: value / (epochs - 1) for name, value in moved.items()})
        return out

    @staticmethod
    def batch_loss(task: Task, batch: RolloutBatch, logp: torch.Tensor) -> tuple[torch.Tensor, Mapping]:
        """The algorithm's per-seed loss on a batch at the current ℓ, and its update metrics. The batch's first call
        (the first epoch: no parameter has moved since sampling, so ℓ is the rollout policy's) freezes ℓ_old and the
        signal on it, so neither can drift across epochs."""
        if batch.groups is None:
            batch.groups = task.groups(batch, logp.detach())
            batch.signal = task.algorithm.signal(batch.groups)
        return task.algorithm.loss(logp, batch.groups, batch.signal)


def updates_per_batch(task: Task) -> int:
    """The epochs of loss and optimizer step per rollout batch (``Task.epochs_for``)."""
    return task.epochs_for(task.algorithm)


def update_metric_names(task: Task) -> tuple[str, ...]:
    """The update metrics a task's episodes log: the algorithm's, when it takes more than one epoch per batch."""
    return task.algorithm.metric_names if updates_per_batch(task) > 1 else ()


class ClosedFormTrainer(BatchedTrainer):
    """A task whose update is an expected direction in closed form: its own ``step``."""

    @staticmethod
    def episode(task: Task, step: int) -> StepOutput:
        return task.step(step)
