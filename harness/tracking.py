"""Weights & Biases mirror of the local run files: one W&B run per seed, grouped by experiment/task/algorithm.

Local files stay the source of truth. Rows are buffered and pushed at checkpoints and at the end, so logging
costs little per step; any W&B failure is reported once and training continues without it.
"""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger(__name__)


class NullTracker:
    def log(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        pass

    def flush(self) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


def resolve_mode(mode: str) -> str:
    """``auto`` → online when an API key is configured (env or netrc), else offline."""
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        hosts = netrc.netrc().hosts
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        hosts = {}
    return "online" if any("wandb" in host for host in hosts) else "offline"


class WandbTracker:
    """Buffers per-seed rows and mirrors them to one W&B run per seed."""

    def __init__(self, *, project: str, entity: str | None, group: str, name: str, tags: list[str], mode: str,
                 config: dict[str, Any], run_dir: Path, seeds: list[int]):
        self.settings = dict(project=project, entity=entity, group=group, tags=tags, mode=resolve_mode(mode))
        self.name, self.config, self.run_dir, self.seeds = name, config, run_dir, seeds
        self.buffer: list[tuple[int, dict[str, np.ndarray]]] = []
        self.runs: list[Any] | None = None
        self.failed = False

    def _fail(self, error: Exception) -> None:
        if not self.failed:
            warnings.warn(f"W&B logging disabled after an error ({error!r}); training continues, local files "
                          "are complete.", stacklevel=3)
        self.failed, self.buffer = True, []

    def _start(self) -> None:
        import wandb

        self.runs = []
        for seed in self.seeds:
            run_id = hashlib.sha1(f"{self.run_dir.resolve()}|{seed}".encode()).hexdigest()[:16]
            self.runs.append(wandb.init(
                **self.settings, name=f"{self.name}/seed{seed}", id=run_id, resume="allow", dir=str(self.run_dir),
                config={**self.config, "seed": seed}, reinit="create_new", settings=wandb.Settings(silent=True)))
        log.info("W&B: %d %s runs in group %s (%s)", len(self.runs), self.settings["mode"], self.settings["group"],
                 "upload later with `wandb sync <run dir>/wandb/offline-run-*`" if self.settings["mode"] == "offline"
                 else self.settings["project"])

    def log(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        if not self.failed:
            self.buffer.append((step, metrics))

    def flush(self) -> None:
        if self.failed or not self.buffer:
            return
        try:
            if self.runs is None:
                self._start()
            for step, metrics in self.buffer:
                for index, run in enumerate(self.runs):
                    run.log({name: float(values[index]) for name, values in metrics.items()}, step=step)
            self.buffer = []
        except Exception as error:  # noqa: BLE001 - W&B must never stop training
            self._fail(error)

    def finish(self, summary: dict[str, Any]) -> None:
        self.flush()
        if self.failed or self.runs is None:
            return
        try:
            for index, run in enumerate(self.runs):
                run.summary["status"] = summary.get("seed_status", {}).get(str(self.seeds[index]), summary["status"])
                for metric, stats in summary.get("final", {}).items():
                    run.summary[f"final/{metric}"] = stats["per_seed"][index]
                run.finish()
        except Exception as error:  # noqa: BLE001
            self._fail(error)


def make_tracker(cfg, run_dir: Path, seeds: list[int], resolved_config: dict[str, Any]):
    logger_cfg = cfg.logger
    if logger_cfg.name == "none":
        return NullTracker()
    experiment = cfg.experiment_name
    group = f"{experiment}/{cfg.task.name}/{cfg.algorithm.name}"
    try:
        return WandbTracker(project=logger_cfg.project, entity=logger_cfg.entity, group=group, name=group,
                            tags=[experiment, cfg.task.name, cfg.algorithm.name, *logger_cfg.tags],
                            mode=logger_cfg.mode, config=resolved_config, run_dir=run_dir, seeds=seeds)
    except Exception as error:  # noqa: BLE001
        warnings.warn(f"W&B unavailable ({error!r}); continuing with local files only.", stacklevel=2)
        return NullTracker()
