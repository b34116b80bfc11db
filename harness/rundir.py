"""Run identity: what a run directory already holds decides whether a launch may start, resume or skip it.

Each run directory records the fingerprint of its resolved configuration in ``identity.json``: everything that
changes the numbers, so neither logging, progress bars, thread count, the CPU matmul library (both move only float
rounding, as a change of host does), checkpoint spacing, the steps-to thresholds
of the summary, where MNIST is read from nor the experiment's name. A launch into a directory with results then

- ``trainer.resume=false`` (default): refuses, unless ``trainer.overwrite=true`` (which clears the old run first);
- ``trainer.resume=true``: resumes its checkpoint, refuses when there is none or the fingerprint differs (naming
  the differing keys), and returns the summary of a run that already finished without training again;
- ``trainer.resume=auto``: as ``true``, but starts afresh when there is nothing to resume (an empty directory, or
  one whose run failed or was killed before its first checkpoint) — what re-running a sweep into its folder needs.

Hydra is told not to write ``.hydra/`` itself (``hydra.output_subdir: null``): it would rewrite it at every launch,
before any check, so a refused launch would relabel the run it refused. A fresh start writes it instead. A lock file
(``run.lock``: pid and host) keeps a second process from writing into a run that is still training.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from omegaconf import DictConfig, OmegaConf

from harness import outputs
from algorithms.checks import ConfigError

IDENTITY_FILE, LOCK_FILE = "identity.json", "run.lock"
TRL_DIR = "trl"  # the LLM trainer's checkpoints
HYDRA_DIR = ".hydra"  # the launch that started the run: config.yaml (as composed), overrides.yaml
RUN_FILES = (outputs.METRICS_FILE, outputs.CHECKPOINT_FILE, IDENTITY_FILE, TRL_DIR)
RESULT_FILES = (*RUN_FILES, outputs.SUMMARY_FILE, outputs.ERROR_FILE, "wandb", HYDRA_DIR)  # cleared by a fresh start
# How a run is computed or reported, not what it computes (threads and cpu_matmul move only float rounding, as a
# change of host does); task.steps: trainer.steps runs.
NOT_IDENTITY = ("experiment_name", "logger", "threads", "cpu_matmul", "trainer.progress", "trainer.resume",
                "trainer.overwrite", "trainer.checkpoint_every", "task.checkpoint_every", "task.steps", "task.steps_to",
                "task.data_dir", "task.source", "trainer.solved_below", "trainer.relapse_above")
# Keys added after runs were recorded, at the value that reproduces those runs: at that value a key is left out of
# the identity (and filled in for the report, harness/report/load.py), so older runs still resume, and their seed
# ranges merge with new ones; any other value is part of the identity.
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "optim.guard": "none", "optim.guard_tau": 0.0,
    "algorithm.std_floor": 0.0, "algorithm.std_shrinkage": 0.0, "algorithm.std_prior": 0.5,
    "algorithm.rank_scores": False,
    "task.reward_noise": 0.0, "task.partial_credit": 0.0,
}
FINISHED = ("completed", "diverged")
_started: set[Path] = set()  # run directories this process has started writing into (see ``started``)


def identity(cfg: DictConfig) -> dict[str, Any]:
    """The resolved configuration less the keys in NOT_IDENTITY and the NEUTRAL_DEFAULTS at their value."""
    return _without_volatile(OmegaConf.to_container(cfg, resolve=True))


def _without_volatile(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` less the keys in NOT_IDENTITY and the NEUTRAL_DEFAULTS at their value, in place; also applied to
    a recorded identity, so that a run recorded before a key joined NOT_IDENTITY still resumes."""
    for dotted in (*NOT_IDENTITY, *NEUTRAL_DEFAULTS):
        *parents, leaf = dotted.split(".")
        node = config
        for parent in parents:
            node = node.get(parent, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict) and leaf in node and (
                dotted not in NEUTRAL_DEFAULTS or _canonical(node[leaf]) == _canonical(NEUTRAL_DEFAULTS[dotted])):
            node.pop(leaf)
    return config


def _canonical(node: Any) -> Any:
    """Numbers by value (``eta=3`` and ``eta=3.0`` run the same numbers), containers recursively."""
    if isinstance(node, dict):
        return {key: _canonical(value) for key, value in node.items()}
    if isinstance(node, list):
        return [_canonical(value) for value in node]
    if isinstance(node, float) and node.is_integer():
        return int(node)
    return node


def fingerprint(config: dict[str, Any]) -> str:
    text = json.dumps(_canonical(config), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(node, dict):
        return {prefix: node}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(_flatten(value, f"{prefix}{key}." if isinstance(value, dict) else f"{prefix}{key}"))
    return flat


def differing_keys(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded → current`` for every leaf that differs ("<absent>" where one side lacks it)."""
    old, new = _flatten(recorded), _flatten(current)
    return [f"{key}: {old.get(key, '<absent>')} → {new.get(key, '<absent>')}" for key in sorted(old.keys() | new.keys())
            if _canonical(old.get(key, "<absent>")) != _canonical(new.get(key, "<absent>"))]


def check_resume_options(cfg: DictConfig) -> tuple[bool | str, bool]:
    resume, overwrite = cfg.trainer.resume, cfg.trainer.get("overwrite", False)
    if not (isinstance(resume, bool) or resume == "auto"):
        raise ConfigError(f"trainer.resume={resume!r} is not valid; valid choices: false, true, auto")
    if not isinstance(overwrite, bool):
        raise ConfigError(f"trainer.overwrite={overwrite!r} is not valid; valid choices: false, true")
    if overwrite and resume is not False:
        raise ConfigError(f"trainer.overwrite=true with trainer.resume={resume} is contradictory; valid choices: "
                          "trainer.overwrite=true (start over) or trainer.resume=true/auto (continue)")
    return resume, overwrite


@dataclass
class RunStart:
    """The decision for one launch: resume (a checkpoint exists), skip (``finished`` holds the summary) or fresh."""

    fingerprint: str
    uid: str  # changes with every fresh start: W&B run ids derive from it, so a replaced run never continues an old one
    resume: bool
    finished: dict[str, Any] | None
    _record: dict[str, Any] | None  # identity.json to write on a fresh start
    _config: DictConfig | None = None

    def apply(self, run_dir: Path) -> None:
        """Mark ``run_dir`` as this process's; on a fresh start, clear what an earlier run left there and record
        this run's identity and launch (main process only)."""
        _started.add(run_dir.resolve())
        if self._record is None:
            return
        for path in [run_dir / name for name in RESULT_FILES] + list(run_dir.glob("*.tmp")):
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists():
                path.unlink()
        (run_dir / HYDRA_DIR).mkdir()
        outputs.atomic_write_text(run_dir / HYDRA_DIR / "config.yaml", [OmegaConf.to_yaml(self._config)])
        overrides = _launch_overrides()
        if overrides is not None:
            outputs.atomic_write_text(run_dir / HYDRA_DIR / "overrides.yaml", [OmegaConf.to_yaml(overrides)])
        outputs.write_json(run_dir / IDENTITY_FILE, self._record)


def _launch_overrides():
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().overrides.task if HydraConfig.initialized() else None


def started(run_dir: Path) -> bool:
    """Whether this process began writing into ``run_dir`` (every failure before that leaves it as it was)."""
    return run_dir.resolve() in _started


def has_results(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds a run. The record of a launch that failed before any work (a ``summary.json``
    with status failed, ``error.txt``, nothing else) does not count: there is nothing in it to keep."""
    if any((run_dir / name).exists() for name in RUN_FILES):
        return True
    return (run_dir / outputs.SUMMARY_FILE).exists() and _status(run_dir) != "failed"


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock file for the ``with`` block; ConfigError if a live process holds it (a lock left by
    a process that no longer runs on this host is taken over)."""
    path = run_dir / LOCK_FILE
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = _lock_holder(path)
            if holder is None:  # stale: its process is gone
                path.unlink(missing_ok=True)
                continue
            raise ConfigError(f"{run_dir} is being written by process {holder}; wait for it or stop it (a lock "
                              f"left by a crash on another host: delete {path})") from None
        with os.fdopen(descriptor, "w") as handle:
            handle.write(f"{os.getpid()} {socket.gethostname()}\n")
        break
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def _lock_holder(path: Path) -> str | None:
    """``pid on host`` of a live lock holder; None when the lock is stale (or unreadable for more than a few
    seconds: its writer died between creating and writing it)."""
    try:
        pid, host = path.read_text().split()
        pid = int(pid)
    except (OSError, ValueError):
        try:
            fresh = time.time() - path.stat().st_mtime < 5
        except OSError:
            return None
        return "starting" if fresh else None
    if host == socket.gethostname():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
    return f"{pid} on {host}"


def plan_run(cfg: DictConfig, run_dir: Path, checkpoint_exists: Callable[[Path], bool]) -> RunStart:
    """Decide, reading only, what this launch does with ``run_dir``; ConfigError (one line) when it must refuse."""
    resume, overwrite = check_resume_options(cfg)
    current = identity(cfg)
    current_fingerprint = fingerprint(current)
    fresh = {"fingerprint": current_fingerprint, "uid": uuid.uuid4().hex, "config": current}

    def start_fresh() -> RunStart:
        return RunStart(current_fingerprint, fresh["uid"], resume=False, finished=None, _record=fresh, _config=cfg)

    if overwrite or not has_results(run_dir):
        if resume is True and not overwrite:
            raise ConfigError(f"trainer.resume=true but {run_dir} holds no run to resume; valid choices: "
                              "trainer.resume=auto (resume if there is a run, else start) or trainer.resume=false")
        return start_fresh()
    status = _status(run_dir)
    if resume is False:
        raise ConfigError(f"{run_dir} already holds a run ({status}); trainer.resume=true continues it, "
                          "trainer.overwrite=true replaces it, or choose another run directory")
    recorded = _read_identity(run_dir)
    if recorded is None:
        raise ConfigError(f"{run_dir} holds a run with no readable {IDENTITY_FILE} (written before tpo-bench "
                          "recorded run identity, or damaged), so it cannot be checked against this configuration; "
                          "trainer.overwrite=true replaces it")
    recorded_config = recorded.get("config")
    recorded_fingerprint = (fingerprint(_without_volatile(recorded_config)) if isinstance(recorded_config, dict)
                            else recorded.get("fingerprint"))
    if recorded_fingerprint != current_fingerprint:
        changes = differing_keys(recorded_config if isinstance(recorded_config, dict) else {}, current)
        raise ConfigError(f"{run_dir} was run with another configuration ({'; '.join(changes) or 'fingerprint'}); "
                          "resume it with its own configuration, choose another run directory, or "
                          "trainer.overwrite=true to replace it")
    uid = recorded.get("uid", current_fingerprint)
    run_fingerprint = recorded.get("fingerprint", current_fingerprint)  # what its checkpoints were written under
    if status in FINISHED:
        summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
        return RunStart(run_fingerprint, uid, resume=False, finished=summary, _record=None)
    if checkpoint_exists(run_dir):
        return RunStart(run_fingerprint, uid, resume=True, finished=None, _record=None)
    if resume == "auto":  # failed or killed before its first checkpoint: nothing to keep
        return start_fresh()
    raise ConfigError(f"trainer.resume=true but {run_dir} has no checkpoint to resume ({status}); "
                      "trainer.resume=auto starts it again, trainer.overwrite=true replaces it")


def _status(run_dir: Path) -> str:
    try:
        return json.loads((run_dir / outputs.SUMMARY_FILE).read_text())["status"]
    except (OSError, ValueError, KeyError, TypeError):
        return "running or killed: no summary"


def _read_identity(run_dir: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((run_dir / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
