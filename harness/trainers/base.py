"""The interface ``harness/run.py``'s lifecycle drives: lock → plan → resume state → session → fit → finish.

A trainer is built from a run's configuration (every ConfigError comes from its constructor, before the run folder
is touched); the lifecycle then calls its hooks in order. Subclasses: ``batched.BatchedTrainer`` (all seeds of a
batched task in one process), ``trl.TRLTrainer`` (one seed of an LLM task, possibly over several processes).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig

from harness import rundir
from harness.config import run_settings
from harness.session import Session


@dataclass
class Resume:
    """Where a run continues from: its step, the metrics rows already written, the steps earlier launches resumed
    from and the CPU-seconds they used, and what the trainer itself needs to restore (``state``)."""

    step: int
    rows: int
    resumes: list[int] = field(default_factory=list)
    cpu_seconds: float = 0.0
    state: Any = None


class Trainer:
    """Base class of the trainers; ``harness/run.py`` calls the hooks in the order they are defined here."""

    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.settings = run_settings(cfg)  # typed and checked once; what the loop reads
        self.task: Any = None
        self.seeds: list[int] = []
        self.device = torch.device("cpu")
        self.is_main = True  # the process that writes (one of several under data parallelism)
        self.diverged: dict[str, int] = {}  # seed → first step with a non-finite loss

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The columns of metrics.csv besides step and seed."""
        return self.task.metric_names

    def lock(self, run_dir: Path) -> contextlib.AbstractContextManager:
        """Hold the run folder for this launch (``rundir.locked``)."""
        return rundir.locked(run_dir)

    def has_checkpoint(self, run_dir: Path) -> bool:
        """Whether ``run_dir`` holds a checkpoint this trainer can resume from."""
        raise NotImplementedError

    def resume(self, run_dir: Path, fingerprint: str) -> Resume | None:
        """Load the checkpoint of the run with ``fingerprint`` into the task (CheckpointError if it does not fit)."""
        raise NotImplementedError

    def prepare(self, run_dir: Path) -> None:
        """Work whose refusals must come before the folder changes (loading a model); nothing by default."""

    def apply(self, plan: rundir.RunStart, run_dir: Path) -> None:
        """Make the run folder what the plan says (fresh, overwritten or resumed)."""
        plan.apply(run_dir)

    def fit(self, session: Session, start: Resume | None) -> None:
        """Train from ``start`` (None: from scratch) to ``settings.steps``, writing rows through ``session``."""
        raise NotImplementedError

    def resume_hint(self, run_dir: Path) -> str:
        return f"the last checkpoint in {run_dir} resumes with trainer.resume=true"

    def hardware(self) -> dict[str, Any]:
        """What summary.json records about where the run ran (``device_hardware`` and what the trainer adds)."""
        raise NotImplementedError


def device_hardware(device: torch.device | str) -> dict[str, Any]:
    """The device, the CPU's model (timings and float rounding come from it; on a GPU the host still runs the
    loop) and, on CUDA, the GPU's name."""
    from tasks.models.linear import cpu_model

    device = torch.device(device)
    return {"device": str(device), "cpu": cpu_model(),
            **({"gpu": torch.cuda.get_device_name(device)} if device.type == "cuda" else {})}
