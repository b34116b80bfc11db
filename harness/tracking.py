"""Weights & Biases mirror of the local run files: one W&B run per seed, grouped by experiment/task/algorithm.

Local files stay the source of truth. Rows are buffered and pushed at checkpoints and at the end, so logging
costs little per step; any W&B failure is reported once and training continues without it.
"""

from __future__ import annotations

import logging
import netrc
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from harness.rundir import wandb_run_id

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


MODES = ("auto", "online", "offline", "disabled")
DEFAULT_INIT_TIMEOUT = 10.0  # seconds; wandb's own default, 90 s, is how long an unreachable server stalls a run


def check_logger_config(logger_cfg) -> None:
    """Validate the ``logger`` node before any work (ConfigError naming the key and the valid values)."""
    from algorithms.checks import check_choice, check_number

    if check_choice("logger.name", logger_cfg.name, ("wandb", "none")) == "none":
        return
    check_choice("logger.mode", logger_cfg.mode, MODES)
    check_number("logger.init_timeout", logger_cfg.get("init_timeout", DEFAULT_INIT_TIMEOUT), low=0, low_open=True)


class WandbTracker:
    """Buffers per-seed rows and mirrors them to one W&B run per seed.

    Each ``wandb.init`` waits at most ``init_timeout`` seconds (``logger.init_timeout``): without it an online run
    whose server cannot be reached waits 90 s inside wandb. The first failure, on any seed, disables W&B for every
    seed of the run (one warning; the runs already started are finished), so a run never waits once per seed."""

    def __init__(self, *, project: str, entity: str | None, group: str, name: str, tags: list[str], mode: str,
                 config: dict[str, Any], run_dir: Path, seeds: list[int],
                 init_timeout: float = DEFAULT_INIT_TIMEOUT, run_uid: str = ""):
        self.settings = dict(project=project, entity=entity, group=group, tags=tags, mode=resolve_mode(mode))
        self.init_timeout = float(init_timeout)
        self.run_uid = run_uid  # new at every fresh start (identity.json): a replaced run never continues an old one
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

        runs = []
        try:
            for seed in self.seeds:
                run_id = wandb_run_id(self.run_dir, self.run_uid, seed)
                runs.append(wandb.init(
                    **self.settings, name=f"{self.name}/seed{seed}", id=run_id, resume="allow",
                    dir=str(self.run_dir), config={**self.config, "seed": seed}, reinit="create_new",
                    settings=wandb.Settings(silent=True, init_timeout=self.init_timeout)))
        except BaseException:
            for run in runs:  # the seeds started before the failure: close them rather than leave them running
                try:
                    run.finish(exit_code=1)
                except Exception:  # noqa: BLE001
                    pass
            raise
        self.runs = runs
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
                run.summary["last_step"] = summary.get("last_step")  # the report checks the history against it
                for metric, stats in summary.get("final", {}).items():
                    run.summary[f"final/{metric}"] = stats["per_seed"][index]
                run.finish()
        except Exception as error:  # noqa: BLE001
            self._fail(error)


def make_tracker(cfg, run_dir: Path, seeds: list[int], resolved_config: dict[str, Any], run_uid: str = ""):
    logger_cfg = cfg.logger
    if logger_cfg.name == "none":
        return NullTracker()
    experiment = cfg.experiment_name
    group = f"{experiment}/{cfg.task.name}/{cfg.algorithm.name}"
    try:
        return WandbTracker(project=logger_cfg.project, entity=logger_cfg.entity, group=group, name=group,
                            tags=[experiment, cfg.task.name, cfg.algorithm.name, *logger_cfg.tags],
                            mode=logger_cfg.mode, config=resolved_config, run_dir=run_dir, seeds=seeds,
                            init_timeout=logger_cfg.get("init_timeout", DEFAULT_INIT_TIMEOUT), run_uid=run_uid)
    except Exception as error:  # noqa: BLE001
        warnings.warn(f"W&B unavailable ({error!r}); continuing with local files only.", stacklevel=2)
        return NullTracker()
