"""Synthetic run directories in the harness's own file format (``.hydra/config.yaml``, ``metrics.csv``,
``summary.json``), for the report's tests, the aggregation bench and the notebook's offline fallback."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

HARDWARE = {"device": "cpu", "threads": 1, "host": "synthetic"}


def make_config(experiment: str, task: str, algorithm: str, seeds: int, steps: int, seed_offset: int = 0,
                **params) -> dict:
    """A nested config like Hydra's; ``params`` are dotted keys (``task.V=4``, ``algorithm.eta=0.5``)."""
    config = {"task": {"name": task, "steps": steps, "steps_to": [0.05, 0.01]},
              "algorithm": {"name": algorithm, "epochs": None, "eta": 1.0}, "logger": {"name": "none"},
              "experiment_name": experiment, "seeds": seeds, "seed_offset": seed_offset, "device": "cpu",
              "threads": 1, "trainer": {"resume": False, "progress": False}}
    for key, value in params.items():
        group, name = key.split(".", 1)
        config[group][name] = value
    return config


def write_run(run_dir: Path, config: dict, values: dict[str, np.ndarray] | None = None, *,
              steps: np.ndarray | None = None, seed_ids: list[int] | None = None, status: str = "completed",
              metrics_file: Path | None = None, wall_seconds: float = 1.0, cpu_seconds: float = 1.0) -> Path:
    """One run directory. ``values``: metric → (seeds, logged steps) array; or ``metrics_file``: a metrics.csv to
    copy (the bench). ``status="failed"`` writes no metrics, like a run that crashed."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / ".hydra").mkdir(exist_ok=True)
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    seed_ids = list(range(config["seed_offset"], config["seed_offset"] + config["seeds"])) if seed_ids is None \
        else seed_ids
    summary = {"status": status, "experiment": config["experiment_name"], "task": config["task"]["name"],
               "algorithm": config["algorithm"]["name"], "seeds": seed_ids, "steps": config["task"]["steps"],
               "cpu_seconds": cpu_seconds, "wall_seconds": wall_seconds, "hardware": HARDWARE}
    if status == "failed":
        summary = {**summary, "seeds": [], "error": "RuntimeError: synthetic failure"}
    elif metrics_file is not None:
        shutil.copyfile(metrics_file, run_dir / "metrics.csv")
    else:
        first = next(iter(values.values()))
        steps = np.arange(first.shape[1]) if steps is None else np.asarray(steps)
        frame = pd.DataFrame({"step": np.repeat(steps, len(seed_ids)), "seed": np.tile(seed_ids, len(steps)),
                              **{name: array.T.ravel() for name, array in values.items()}})
        frame.to_csv(run_dir / "metrics.csv", index=False, float_format="%.9g")
        summary["last_step"] = int(steps[-1])
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    return run_dir


def learning_curves(rng: np.random.Generator, seeds: int, steps: int, start: float, floor: float, rate: float,
                    noise: float = 0.02) -> np.ndarray:
    """(seeds, steps) errors decaying from ``start`` to ``floor`` at a per-seed jittered ``rate``, clipped to [0, 1]."""
    t = np.arange(steps)
    rates = rate * rng.lognormal(0.0, 0.3, size=(seeds, 1))
    curves = floor + (start - floor) * np.exp(-rates * t) + noise * rng.standard_normal((seeds, steps))
    return np.clip(curves, 0.0, 1.0)


HERO = {  # (start, floor, rate): roughly the paper's Fig 1 curves
    "fig4_mnist": {"tpo": (0.13, 0.029, 1.2e-3), "dg": (0.13, 0.032, 1.0e-3), "grpo": (0.30, 0.06, 3e-4)},
    "fig1b_sparse": {"tpo": (1.0, 0.07, 1.2e-2), "grpo": (1.0, 0.50, 6e-3), "dg": (1.0, 0.998, 1e-3)},
}


def hero_sweep(root: Path, seeds: int = 4, token_steps: int = 400, seed: int = 0) -> Path:
    """A tiny synthetic stand-in for the Fig 1 sweeps (MNIST evals every 200 steps, sparse token task)."""
    rng = np.random.default_rng(seed)
    for experiment, algorithms in HERO.items():
        mnist = experiment == "fig4_mnist"
        steps = np.arange(0, 10000, 200) if mnist else np.arange(token_steps)
        for algorithm, (start, floor, rate) in algorithms.items():
            error = learning_curves(rng, seeds, len(steps), start, floor, rate * (200 if mnist else 1),
                                    noise=0.002 if mnist else 0.02)
            config = make_config(experiment, "mnist_bandit" if mnist else "token_reversal", algorithm, seeds,
                                 10000 if mnist else token_steps)
            write_run(root / experiment / algorithm, config, {"error": error}, steps=steps)
    return root
