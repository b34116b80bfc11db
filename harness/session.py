"""What every trainer's launch shares (``harness/run.py`` opens it for the batched and the TRL trainers alike): the
run's outputs (metrics.csv and the W&B mirror), SIGTERM as an interruption, subnormal floats flushed on CPU, the
CPU-seconds clock across resumes, and the closing summary."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from harness import process
from harness.config import RunSettings
from harness.rundir import outputs
from harness.rundir.summary import run_summary
from harness.tracking import NullTracker, make_tracker


def flush_denormals(enabled: bool) -> bool:
    """Flush subnormal floats to zero (x86 FTZ/DAZ) if ``enabled``; returns whether it did, so the caller restores
    the process default with ``torch.set_flush_denormal(False)`` when its run ends.

    CPUs take ~10–100× longer on subnormal operands, which appear late in training: Adam's g² for tiny gradients,
    softmax tails, near-target TPO gradients deep in a backward pass. Flushing changes values below 1.2e-38 only
    (measured: MNIST Adam step 185 → 67 µs, LLM CPU backward 154 → 12 s), and it is what the JAX reference gets on
    CPU: XLA's CPU client runs every computation with denormals flushed. ``flush_denormal=false`` keeps them."""
    return enabled and torch.set_flush_denormal(True)


@dataclass
class Session:
    """One launch of a run: its writer and tracker (main process only), the CPU clock and the outcome."""

    cfg: DictConfig
    settings: RunSettings
    run_dir: Path
    metric_names: tuple[str, ...]
    seeds: list[int]
    started: float  # wall clock at the launch
    cpu_before: float = 0.0  # CPU-seconds of the launches this one resumes
    resumes: list[int] = field(default_factory=list)
    main: bool = True  # the process that writes (one of several under data parallelism)
    fingerprint: str = ""  # the run's identity (rundir.fingerprint), recorded in its checkpoints
    commit: str | None = None  # the code's git commit at the launch (rundir.outputs.git_commit)
    status: str = "completed"
    writer: outputs.MetricsWriter | None = None
    tracker: Any = None
    _cpu_start: float = field(default_factory=time.process_time)

    def open(self, rows: int | None, uid: str) -> Session:
        """Create the writer (appending after ``rows`` kept rows) and the tracker."""
        if self.main:
            self.writer = outputs.MetricsWriter(self.run_dir, self.metric_names, self.seeds, rows)
            resolved = OmegaConf.to_container(self.cfg, resolve=True)
            self.tracker = make_tracker(self.cfg, self.run_dir, self.seeds, resolved, uid, self.writer.kept_rows())
        else:
            self.tracker = NullTracker()
        return self

    def cpu_seconds(self) -> float:
        return self.cpu_before + time.process_time() - self._cpu_start

    @contextlib.contextmanager
    def training(self, device: torch.device) -> Iterator[None]:
        """The body of the loop: SIGTERM (a scheduler's kill) ends it like Ctrl-C, recorded as ``interrupted`` (the
        last checkpoint resumes it); denormals are flushed on CPU; the writer is closed whatever happens."""
        in_main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGTERM, process.stop_by_interrupt) if in_main_thread else None
        flushing = flush_denormals(self.settings.flush_denormal and device.type == "cpu")
        try:
            yield
        except KeyboardInterrupt:
            self.status = "interrupted"
        finally:
            if flushing:
                torch.set_flush_denormal(False)
            if previous is not None and signal.getsignal(signal.SIGTERM) is process.stop_by_interrupt:
                signal.signal(signal.SIGTERM, previous)  # (after a SIGTERM, later ones stay ignored to the end)
            if self.writer is not None:
                self.writer.close()

    def finish(self, seed_status: dict[str, str], diverged: dict[str, int], hardware: dict[str, Any]
               ) -> dict[str, Any]:
        """Write summary.json (main process), close the tracker, and return the summary; re-raise an interruption
        once everything is written."""
        status = "diverged" if self.status == "completed" and diverged else self.status
        summary = run_summary(self.cfg, self.settings, self.run_dir, self.metric_names, status=status,
                              seeds=self.seeds, seed_status=seed_status, diverged=diverged, started=self.started,
                              hardware=hardware, resumed_from=self.resumes, cpu_seconds=self.cpu_seconds(),
                              commit=self.commit)
        if self.main:
            outputs.write_json(self.run_dir / outputs.SUMMARY_FILE, summary)
            self.tracker.finish(summary)
        if self.status == "interrupted":
            raise KeyboardInterrupt
        return summary
