"""A run directory's files — the source of truth for everything downstream.

``metrics.csv``: columns ``step, seed`` then one per metric (``error`` first).
``summary.json``: status, final values (mean, s.e. with population std, per seed), steps-to thresholds.
``checkpoint.pt``: everything needed to resume; written atomically so a kill never leaves a torn file.
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

METRICS_FILE, SUMMARY_FILE, CHECKPOINT_FILE, ERROR_FILE = "metrics.csv", "summary.json", "checkpoint.pt", "error.txt"


def atomic_write_bytes(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(payload, indent=2, allow_nan=False) + "\n").encode())


def git_commit() -> str | None:
    """The code's git commit, suffixed "-dirty" when tracked files have uncommitted changes; None outside git."""
    root = Path(__file__).resolve().parent.parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode:
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


class MetricsWriter:
    """Appends per-seed rows to metrics.csv; on resume it first cuts the file back to the checkpointed row count."""

    def __init__(self, run_dir: Path, metric_names: tuple[str, ...], seeds: list[int], resume_rows: int | None):
        self.path = run_dir / METRICS_FILE
        self.columns = ["step", "seed", *metric_names]
        self.seeds = seeds
        if resume_rows is not None and self.path.exists():
            with open(self.path) as handle:  # rows after the checkpoint (and any torn last line) are dropped
                kept = handle.readlines()[: resume_rows + 1]
            self.path.write_text("".join(kept))
            self.rows = resume_rows
        else:
            self.path.write_text(",".join(self.columns) + "\n")
            self.rows = 0
        self._handle = open(self.path, "a")

    def append(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        """One row per seed; floats with 9 significant digits, which round-trips float32 exactly."""
        values = np.column_stack([metrics[name] for name in self.columns[2:]]) if len(self.columns) > 2 else None
        lines = []
        for index, seed in enumerate(self.seeds):
            cells = "" if values is None else "," + ",".join(f"{v:.9g}" for v in values[index])
            lines.append(f"{step},{seed}{cells}\n")
        self._handle.write("".join(lines))
        self.rows += len(self.seeds)

    def flush(self) -> None:
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self.flush()
        self._handle.close()


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    tmp = run_dir / (CHECKPOINT_FILE + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, run_dir / CHECKPOINT_FILE)


def load_checkpoint(run_dir: Path) -> dict[str, Any] | None:
    path = run_dir / CHECKPOINT_FILE
    return torch.load(path, weights_only=False) if path.exists() else None


def seed_statistics(values: np.ndarray) -> dict[str, Any]:
    """Mean and s.e. (population std / sqrt(n)) over the finite per-seed values."""
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else math.nan
    se = float(finite.std() / math.sqrt(finite.size)) if finite.size else math.nan
    return {"mean": _finite_or_none(mean), "se": _finite_or_none(se), "n": int(finite.size),
            "per_seed": [_finite_or_none(v) for v in values]}


def steps_to(curve: pd.Series, threshold: float) -> int | None:
    """First step whose seed-mean value is strictly below ``threshold`` (spec §7), or None."""
    below = curve[curve < threshold]
    return int(below.index[0]) if len(below) else None


def summarize(run_dir: Path, metric_names: tuple[str, ...], thresholds: list[float]) -> dict[str, Any]:
    """final.<metric> at each seed's last logged step, and steps_to for ``error`` on the seed-mean curve."""
    path = run_dir / METRICS_FILE
    frame = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["step", "seed", *metric_names])
    if frame.empty:
        return {"final": {}, "steps_to": {}, "last_step": None}
    last = frame.sort_values("step").groupby("seed").tail(1).sort_values("seed")
    final = {name: seed_statistics(last[name].to_numpy(dtype=float)) for name in metric_names}
    mean_curve = frame.groupby("step")["error"].mean() if "error" in frame else None
    reached = {str(t): steps_to(mean_curve, t) for t in thresholds} if mean_curve is not None else {}
    return {"final": final, "steps_to": {"error": reached}, "last_step": int(frame["step"].max())}


def run_summary(cfg, run_dir: Path, metric_names, *, status: str, seeds: list[int], seed_status: dict[str, str],
                diverged: dict[str, int], started: float, hardware: dict[str, Any]) -> dict[str, Any]:
    """``summary.json`` of a finished run: what ran, how it ended, its final values and steps-to (read back from
    ``metrics.csv``), its cost and provenance. ``hardware`` adds to the host and thread count."""
    return {
        "status": status,
        "experiment": cfg.experiment_name,
        "task": cfg.task.name,
        "algorithm": cfg.algorithm.name,
        "seeds": seeds,
        "steps": int(cfg.trainer.steps),
        "seed_status": seed_status,
        "diverged_at_step": diverged,
        **summarize(run_dir, metric_names, list(cfg.task.steps_to)),
        "wall_seconds": round(time.time() - started, 3),
        "hardware": {**hardware, "threads": torch.get_num_threads(), "host": socket.gethostname()},
        "commit": git_commit(),
    }
