"""summary.json of a run, read back from its metrics.csv: final values and means per seed, steps-to thresholds on
the seed-mean curve, each seed's solve and relapse events, cost and provenance. The report reads the same
definitions (``steps_to``, ``relapse_events``), so a run's summary and its tables agree."""

from __future__ import annotations

import math
import socket
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch

from harness.rundir.outputs import METRICS_FILE, package_version


def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


def until_diverged(errors: np.ndarray) -> np.ndarray:
    """A seed's error curve up to its first non-finite error: a seed that diverged has no curve after it."""
    errors = np.asarray(errors, dtype=float)
    ended = np.flatnonzero(~np.isfinite(errors))
    return errors[:ended[0]] if ended.size else errors


def relapse_events(steps: np.ndarray, errors: np.ndarray, solved_below: float, relapse_above: float
                   ) -> dict[str, int | None]:
    """A seed's solve and relapse events along its error curve: it *solves* when, unsolved, its error falls below
    ``solved_below``; it *relapses* when, solved, its error rises above ``relapse_above``, and may then solve again.
    Counts and the first step of each (summary.json's ``events``, and the report's solved and relapsed seeds)."""
    solved, relapses, first_solved, first_relapse, is_solved = 0, 0, None, None, False
    for step, error in zip(steps.tolist(), until_diverged(errors).tolist()):
        if not is_solved and error < solved_below:
            is_solved, solved = True, solved + 1
            first_solved = step if first_solved is None else first_solved
        elif is_solved and error > relapse_above:
            is_solved, relapses = False, relapses + 1
            first_relapse = step if first_relapse is None else first_relapse
    return {"solved": solved, "relapses": relapses, "first_solved": first_solved, "first_relapse": first_relapse}


def seed_statistics(values: np.ndarray) -> dict[str, Any]:
    """Mean and s.e. (population std / sqrt(n)) over the finite per-seed values."""
    finite = values[np.isfinite(values)]
    mean = float(finite.mean()) if finite.size else math.nan
    se = float(finite.std() / math.sqrt(finite.size)) if finite.size else math.nan
    return {"mean": _finite_or_none(mean), "se": _finite_or_none(se), "n": int(finite.size),
            "per_seed": [_finite_or_none(v) for v in values]}


def steps_to(curve: pd.Series, threshold: float) -> int | None:
    """First step whose seed-mean value is strictly below ``threshold`` (docs/reproduction.md §7), or None."""
    below = curve[curve < threshold]
    return int(below.index[0]) if len(below) else None


def summarize(run_dir: Path, metric_names: tuple[str, ...], thresholds: list[float], solved_below: float = 0.02,
              relapse_above: float = 0.2) -> dict[str, Any]:
    """final.<metric> at each seed's last logged step, mean.<metric> over each seed's finite values (a metric
    recorded every few steps is NaN between, a diverged seed's from its divergence on), steps_to for ``error`` on
    the seed-mean curve, and each seed's solve and relapse events (``relapse_events``)."""
    path = run_dir / METRICS_FILE
    frame = pd.read_csv(path) if path.exists() else pd.DataFrame(columns=["step", "seed", *metric_names])
    if frame.empty:
        return {"final": {}, "mean": {}, "steps_to": {}, "last_step": None}
    last = frame.sort_values("step").groupby("seed").tail(1).sort_values("seed")
    final = {name: seed_statistics(last[name].to_numpy(dtype=float)) for name in metric_names if name in frame}
    means = frame.replace([np.inf, -np.inf], np.nan).groupby("seed").mean()  # by seed, as ``last``; NaN skipped
    mean = {name: seed_statistics(means[name].to_numpy(dtype=float)) for name in metric_names if name in frame}
    mean_curve = frame.groupby("step")["error"].mean() if "error" in frame else None
    reached = {str(t): steps_to(mean_curve, t) for t in thresholds} if mean_curve is not None else {}
    summary = {"final": final, "mean": mean, "steps_to": {"error": reached}, "last_step": int(frame["step"].max())}
    if "error" in frame:
        per_seed = {str(seed): relapse_events(rows["step"].to_numpy(), rows["error"].to_numpy(dtype=float),
                                              solved_below, relapse_above)
                    for seed, rows in frame.sort_values("step", kind="stable").groupby("seed")}
        summary["events"] = {"solved_below": solved_below, "relapse_above": relapse_above,
                             "seeds_solved": sum(e["solved"] > 0 for e in per_seed.values()),
                             "seeds_relapsed": sum(e["relapses"] > 0 for e in per_seed.values()),
                             "per_seed": per_seed}
    return summary


def run_summary(cfg, settings, run_dir: Path, metric_names, *, status: str, seeds: list[int],
                seed_status: dict[str, str], diverged: dict[str, int], started: float, hardware: dict[str, Any],
                resumed_from: list[int], cpu_seconds: float, commit: str | None) -> dict[str, Any]:
    """``summary.json`` of a finished run: what ran, how it ended, its final values and steps-to (read back from
    ``metrics.csv``), its cost and provenance. ``hardware`` adds to the host and thread count; ``resumed_from``
    lists the steps this run was resumed at; wall time counts the last process only, ``cpu_seconds`` every process
    up to its last checkpoint (work redone after a kill counts once); ``commit`` is the code's at the last launch
    (``git_commit`` then: a commit made while the run trains is not the code it runs), ``version`` the installed
    package's."""
    return {
        "status": status,
        "experiment": cfg.experiment_name,
        "task": cfg.task.name,
        "algorithm": cfg.algorithm.name,
        "seeds": seeds,
        "steps": settings.steps,
        "seed_status": seed_status,
        "diverged_at_step": diverged,
        "resumed_from": resumed_from,
        **summarize(run_dir, metric_names, list(settings.steps_to), settings.solved_below, settings.relapse_above),
        "wall_seconds": round(time.time() - started, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "hardware": {**hardware, "threads": torch.get_num_threads(), "host": socket.gethostname()},
        "commit": commit,
        "version": package_version(),
    }
