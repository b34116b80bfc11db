"""A run directory: what it holds, who may write there, and what a launch does with it.

The package is everything about one run's folder. This module is its identity and plan (below); beside it
``outputs`` writes its files whole (metrics, checkpoints, JSON), ``summary`` reads metrics.csv back into
summary.json, and ``session`` is the open run every trainer writes through (metrics writer, W&B mirror, SIGTERM).

Run identity: what a run directory already holds decides whether a launch may start, resume or skip it.

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

What a fresh start (``trainer.overwrite=true`` too) removes is only what tpo-bench wrote (``housekeeping``):

- its own temporaries, by their exact name (``<file>.<pid>.tmp`` for the files it writes: ``is_own_temporary``),
  in any folder; a resume removes these too (a write cut short, by a full disk say, leaves none, but a killed
  process can), since the lock shows no other process writes there;
- in a *run directory* (an ``identity.json`` of tpo-bench, or a run of older versions recognised by the content of
  its ``summary.json``, ``checkpoint.pt`` or ``metrics.csv``): the entries of ``RESULT_FILES`` (in ``.hydra/`` only
  ``HYDRA_FILES``; in ``wandb/`` only its seeds' W&B run folders, named by their run ids, with W&B's own files of
  the folder), but what its ``identity.json`` records as ``foreign`` (the entries that were in the folder before
  the run started, such as someone's notes or their own ``wandb/offline-run-*``, are listed there and stay).

Anything else is foreign and stays: a name ending in ``.tmp`` that is not one of those temporaries, a folder the
run did not create. A folder that is not a run directory and holds foreign entries is refused (one line) unless
``trainer.overwrite=true``; then the run starts there and keeps them. A foreign entry where a run writes its own
(``metrics.csv``, ``identity.json``, ..., ``.hydra/config.yaml``, anything in ``trl/``) is refused even then, and
whatever ``trainer.resume`` says (named as files tpo-bench did not write, not as a run); one in
``wandb/`` is not (W&B names its folders per run). The files this launch's Hydra made (its ``<job>.log``; a
sweep's ``multirun.yaml`` and records) and the lock count as nothing.

A run keeps the ``experiment_name`` it started with: a resume (or a launch that finds it finished) under another
name logs a warning naming both and goes on under the run's own name (its summary.json and W&B group do not
change), as the name is not part of the identity.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from harness.identity import LEFT_OUT_AT_VALUE, NOT_IDENTITY, RENAMED, RETIRED_INTO
from harness.rundir import outputs
from common.checks import ConfigError
from algorithms.registry import neutral_hyperparameters

IDENTITY_FILE, LOCK_FILE = "identity.json", "run.lock"
TRL_DIR = "trl"  # the LLM trainer's checkpoints
HYDRA_DIR = ".hydra"  # the launch that started the run: config.yaml (as composed), overrides.yaml
RUN_FILES = (outputs.METRICS_FILE, outputs.CHECKPOINT_FILE, IDENTITY_FILE, TRL_DIR)
WANDB_DIR = "wandb"
TENSORBOARD_DIR = "tensorboard"  # logger=tensorboard's event files, one folder per seed
RESULT_FILES = (*RUN_FILES, outputs.SUMMARY_FILE, outputs.ERROR_FILE, WANDB_DIR, TENSORBOARD_DIR,
                HYDRA_DIR)  # cleared by a fresh start
HYDRA_FILES = (f"{HYDRA_DIR}/config.yaml", f"{HYDRA_DIR}/overrides.yaml")  # what a fresh start writes there
# An exported run (results/runs/...): what is committed of a finished run, read back by the report like a run folder
EXPORTED_CONFIG, EXPORTED_METRICS = "config.yaml", f"{outputs.METRICS_FILE}.gz"
EXPORTED_FILES = (outputs.SUMMARY_FILE, IDENTITY_FILE, EXPORTED_CONFIG, EXPORTED_METRICS)
CONFIG_FILES = (HYDRA_FILES[0], EXPORTED_CONFIG)  # a run's config: its run folder's, else its export's
WANDB_FILES = ("latest-run", "debug.log", "debug-internal.log")  # W&B's own files of a folder its runs write into
SHARED_DIRS = (HYDRA_DIR, WANDB_DIR, TRL_DIR)  # folders a run writes into: their entries are looked at one by one
# the files tpo-bench writes whole (outputs.atomic_write_text), whose temporaries it recognises by name
WRITTEN_FILES = (outputs.METRICS_FILE, outputs.CHECKPOINT_FILE, IDENTITY_FILE, outputs.SUMMARY_FILE, outputs.ERROR_FILE,
                 f"{HYDRA_DIR}/config.yaml", f"{HYDRA_DIR}/overrides.yaml")
_TEMPORARY = re.compile(r"(?P<file>.+)\.[0-9]+\.tmp")  # outputs.temporary_path
LAUNCH_FILES = (LOCK_FILE, "multirun.yaml", ".tpo-bench-jobs")  # and Hydra's <job>.log: a launch's, never removed
log = logging.getLogger(__name__)
FINISHED = ("completed", "diverged")
_started: set[Path] = set()  # run directories this process has started writing into (see ``started``)



def write_export(run_dir: Path, target: Path) -> None:
    """Write ``EXPORTED_FILES`` of the finished run in ``run_dir`` into the folder ``target``: its summary and
    identity as they are, its launch's config at the top, its metrics gzipped with no timestamp (the same rows give
    the same bytes, so a re-export changes nothing under git)."""
    import gzip

    for name in (outputs.SUMMARY_FILE, IDENTITY_FILE):
        shutil.copy2(run_dir / name, target / name)
    shutil.copy2(run_dir / HYDRA_FILES[0], target / EXPORTED_CONFIG)
    with open(run_dir / outputs.METRICS_FILE, "rb") as raw, gzip.GzipFile(target / EXPORTED_METRICS, "wb",
                                                                          mtime=0) as packed:
        shutil.copyfileobj(raw, packed)

def identity(cfg: DictConfig) -> dict[str, Any]:
    """The resolved configuration less the keys in NOT_IDENTITY, and the NEUTRAL_DEFAULTS and RETIRED keys at their
    value."""
    return _without_volatile(OmegaConf.to_container(cfg, resolve=True))


def _without_volatile(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with its RENAMED keys under their new names, less the keys in NOT_IDENTITY, and the NEUTRAL_DEFAULTS
    and RETIRED keys (the algorithm's neutral hyperparameters too) at their value, a RETIRED key at another value
    read as RETIRED_INTO says, in place; also applied to a
    recorded identity, so that a run recorded before a key joined NOT_IDENTITY, was renamed, or left the configs,
    still resumes."""
    for old, new in RENAMED.items():
        old_node, leaf = _parent(config, old)
        if leaf in old_node:
            new_node, new_leaf = _parent(config, new, create=True)
            new_node[new_leaf] = old_node.pop(leaf)
    for dotted in (*NOT_IDENTITY, *LEFT_OUT_AT_VALUE):
        node, leaf = _parent(config, dotted)
        if leaf in node and (dotted not in LEFT_OUT_AT_VALUE
                             or _canonical(node[leaf]) == _canonical(LEFT_OUT_AT_VALUE[dotted])):
            node.pop(leaf)
    for old, new in RETIRED_INTO.items():
        old_node, leaf = _parent(config, old)
        if leaf in old_node:
            value = old_node.pop(leaf)
            new_node, new_leaf = _parent(config, new, create=True)
            if new_node.get(new_leaf) is None:
                new_node[new_leaf] = value
    algorithm = config.get("algorithm")
    if isinstance(algorithm, dict):
        for key, default in neutral_hyperparameters(algorithm.get("name")).items():
            if key in algorithm and _canonical(algorithm[key]) == _canonical(default):
                algorithm.pop(key)
    return config


def _parent(config: dict[str, Any], dotted: str, create: bool = False) -> tuple[dict[str, Any], str]:
    """(the mapping that holds ``dotted``'s last part, that part); where the config has none, an empty mapping, or
    with ``create`` the mappings made in it."""
    *parents, leaf = dotted.split(".")
    node = config
    for parent in parents:
        node = (node.setdefault(parent, {}) if create else node.get(parent, {})) if isinstance(node, dict) else {}
    return (node if isinstance(node, dict) else {}), leaf


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


def flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested config as one level of dotted keys (``{"task": {"H": 7}}`` → ``{"task.H": 7}``); lists stay values."""
    if not isinstance(node, dict):
        return {prefix: node}
    flat: dict[str, Any] = {}
    for key, value in node.items():
        flat.update(flatten(value, f"{prefix}{key}." if isinstance(value, dict) else f"{prefix}{key}"))
    return flat


def differing_keys(recorded: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """``key: recorded → current`` for every leaf that differs ("<absent>" where one side lacks it)."""
    old, new = flatten(recorded), flatten(current)
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


def is_own_temporary(entry: str) -> bool:
    """Whether ``entry`` (a path relative to the run directory, ``/``-separated) is a temporary of one of the files
    tpo-bench writes: exactly ``<file>.<pid>.tmp`` (outputs.temporary_path) beside it."""
    match = _TEMPORARY.fullmatch(entry)
    return match is not None and match["file"] in WRITTEN_FILES


def _entries(run_dir: Path) -> list[str]:
    """What ``run_dir`` holds: its entries, those of SHARED_DIRS one by one (``wandb/offline-run-1``)."""
    if not run_dir.is_dir():
        return []
    found = []
    for path in sorted(run_dir.iterdir()):
        if path.name in SHARED_DIRS and path.is_dir() and not path.is_symlink():
            found.extend(f"{path.name}/{child.name}" for child in sorted(path.iterdir()))
        else:
            found.append(path.name)
    return found


def _launch_files() -> set[str]:
    """The files of this launch rather than of a run: the lock, Hydra's ``<job>.log`` and a sweep's records."""
    from hydra.core.hydra_config import HydraConfig

    names = set(LAUNCH_FILES)
    if HydraConfig.initialized():
        names.add(f"{HydraConfig.get().job.name}.log")
    return names


def is_run_directory(run_dir: Path) -> bool:
    """Whether tpo-bench wrote a run into ``run_dir``: its ``identity.json``, or (a run of versions that wrote none,
    a launch's failure record) a ``summary.json`` with a status, a ``checkpoint.pt`` with tpo-bench's header or a
    ``metrics.csv`` with its columns."""
    record = _read_identity(run_dir)
    if record is not None and "fingerprint" in record:
        return True
    try:
        summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
        if isinstance(summary, dict) and "status" in summary:
            return True
    except (OSError, ValueError):
        pass
    for name, start in ((outputs.CHECKPOINT_FILE, outputs.CHECKPOINT_MAGIC), (outputs.METRICS_FILE, b"step,seed")):
        try:
            with open(run_dir / name, "rb") as handle:
                if handle.read(len(start)) == start:
                    return True
        except OSError:
            pass
    return False


@dataclass
class Housekeeping:
    """What a fresh start in a folder finds there: ``ours`` to remove, ``foreign`` entries to keep."""

    run_directory: bool
    ours: list[str]
    foreign: list[str]

    @property
    def in_the_way(self) -> list[str]:
        """Foreign entries where a run writes its own: a project file's name, ``HYDRA_FILES``, anything in ``trl/``
        (W&B names its folders per run: a foreign entry in ``wandb/`` is no clash)."""
        return [entry for entry in self.foreign if entry in HYDRA_FILES
                or entry.split("/")[0] in RESULT_FILES and entry.split("/")[0] not in (WANDB_DIR, HYDRA_DIR)]


def wandb_run_id(run_dir: Path, uid: str, seed: int) -> str:
    """The W&B run id of one seed of the run in ``run_dir`` (``uid``: its identity's, new at every fresh start)."""
    return hashlib.sha1(f"{run_dir.resolve()}|{uid}|{seed}".encode()).hexdigest()[:16]


def _own_wandb_entries(run_dir: Path, record: dict[str, Any]) -> set[str]:
    """The entries of ``wandb/`` the run recorded in ``record`` wrote: its seeds' run folders (``*-<run id>``) and,
    when it has one there, W&B's files of the folder (``latest-run``, ``debug*.log``), which its runs rewrote."""
    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    seeds, offset = config.get("seeds"), config.get("seed_offset", 0)
    uid = record.get("uid", record.get("fingerprint"))  # as plan_run reads it: runs recorded before uids had none
    if not (isinstance(seeds, int) and isinstance(offset, int) and isinstance(uid, str)):
        return set()
    ids = {wandb_run_id(run_dir, uid, seed) for seed in range(offset, offset + seeds)}
    folders = {f"{WANDB_DIR}/{path.name}" for path in (run_dir / WANDB_DIR).glob("*run-*")
               if path.name.rsplit("-", 1)[-1] in ids}
    return folders | ({f"{WANDB_DIR}/{name}" for name in WANDB_FILES} if folders else set())


def housekeeping(run_dir: Path) -> Housekeeping:
    """Sort what ``run_dir`` holds into what tpo-bench wrote and what it did not (module docstring); reads only."""
    run = is_run_directory(run_dir)
    record = (_read_identity(run_dir) or {}) if run else {}
    recorded = record.get("foreign")
    kept = {entry for entry in recorded if isinstance(entry, str)} if isinstance(recorded, list) else set()
    own_wandb = _own_wandb_entries(run_dir, record) if record else set()
    launch = _launch_files()
    ours, foreign = [], []
    for entry in _entries(run_dir):
        if entry in launch:
            continue
        top = entry.split("/")[0]
        written = (entry in own_wandb if top == WANDB_DIR and record else  # a run recorded before ids: all of it
                   entry in HYDRA_FILES if top == HYDRA_DIR else top in RESULT_FILES)
        if is_own_temporary(entry) or (run and written and entry not in kept):
            ours.append(entry)
        else:
            foreign.append(entry)
    return Housekeeping(run, ours, foreign)


def _remove(run_dir: Path, entries: list[str]) -> None:
    for entry in entries:
        path = run_dir / entry
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def _listed(entries: list[str], most: int = 5) -> str:
    shown = ", ".join(entries[:most])
    return shown + (f" and {len(entries) - most} more" if len(entries) > most else "")


@dataclass
class RunStart:
    """The decision for one launch: resume (a checkpoint exists), skip (``finished`` holds the summary) or fresh."""

    fingerprint: str
    uid: str  # changes with every fresh start: W&B run ids derive from it, so a replaced run never continues an old one
    resume: bool
    finished: dict[str, Any] | None
    _record: dict[str, Any] | None  # identity.json to write on a fresh start
    _config: DictConfig | None = None
    _remove: tuple[str, ...] = ()  # what tpo-bench wrote there that this start clears (``housekeeping``)
    _remove_dirs: tuple[str, ...] = ()  # folders of an earlier run, removed when that leaves them empty

    def apply(self, run_dir: Path) -> None:
        """Mark ``run_dir`` as this process's; remove the temporaries of earlier processes; on a fresh start, clear
        what an earlier run wrote there (only that: ``housekeeping``) and record this run's identity and launch
        (main process only)."""
        _started.add(run_dir.resolve())
        _remove(run_dir, list(self._remove))
        for name in self._remove_dirs:
            try:
                (run_dir / name).rmdir()
            except OSError:  # gone, or holds what it keeps
                pass
        if self._record is None:
            return
        # identity.json first: a process killed after it leaves a run directory (started afresh by resume=auto),
        # never .hydra files without one, which a relaunch would refuse as files tpo-bench did not write
        outputs.write_json(run_dir / IDENTITY_FILE, self._record)
        (run_dir / HYDRA_DIR).mkdir(exist_ok=True)
        outputs.atomic_write_text(run_dir / HYDRA_DIR / "config.yaml", [OmegaConf.to_yaml(self._config)])
        overrides = _launch_overrides()
        if overrides is not None:
            outputs.atomic_write_text(run_dir / HYDRA_DIR / "overrides.yaml", [OmegaConf.to_yaml(overrides)])


def _launch_overrides():
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().overrides.task if HydraConfig.initialized() else None


def recorded_overrides(run_dir: Path) -> list[str] | None:
    """The command-line overrides of the launch that started the run in ``run_dir`` (``.hydra/overrides.yaml``,
    written by its fresh start), which a resume keeps; None when it has none: a run composed outside Hydra
    (``harness.config.compose_config``: scripts, tests) has no record of what was overridden."""
    try:
        overrides = OmegaConf.load(run_dir / HYDRA_DIR / "overrides.yaml")
    except Exception:  # noqa: BLE001 - absent or unreadable: nothing recorded
        return None
    return [str(item) for item in overrides] if OmegaConf.is_list(overrides) else None


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
    """Hold ``run_dir``'s lock file for the ``with`` block; ConfigError if a live process holds it."""
    def busy(holder: str, path: Path) -> Exception:
        return ConfigError(f"{run_dir} is being written by process {holder}; wait for it or stop it (a lock left by "
                           f"a crash on another host: delete {path})")

    with lock_file(run_dir / LOCK_FILE, busy):
        yield


@contextmanager
def lock_file(path: Path, busy: Callable[[str, Path], Exception]) -> Iterator[None]:
    """Hold the lock file ``path`` (pid and host, created exclusively) for the ``with`` block; raise ``busy(holder,
    path)`` when a live process holds it. A lock whose process no longer runs on this host is taken over; on leaving,
    the file is removed only while it is still this process's (a taken-over lock is not someone else's to delete)."""
    for _ in range(2):
        try:
            descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            holder = lock_holder(path)
            if holder is None:  # stale: its process is gone
                path.unlink(missing_ok=True)
                continue
            raise busy(holder, path) from None
        with os.fdopen(descriptor, "w") as handle:
            job = slurm_job_id()  # on a cluster node: the scheduler says when the holder ended
            handle.write(f"{os.getpid()} {socket.gethostname()}{f' {job}' if job else ''}\n")
        break
    else:  # taken over twice in a row: another process is racing for it
        raise busy(lock_holder(path) or "starting", path)
    try:
        yield
    finally:
        try:
            if path.read_text().split()[:1] == [str(os.getpid())]:
                path.unlink()
        except OSError:
            pass


def lock_holder(path: Path) -> str | None:
    """``pid on host`` of a live lock holder; None when the lock is stale (or unreadable for more than a few
    seconds: its writer died between creating and writing it). A holder on this host is live while its process
    runs. One on another host is live unless it recorded its SLURM job (a run in a SLURM job does) and that job has
    ended (squeue no longer lists it), or is this process's own job, requeued: its earlier run is over. Without a
    job, or when squeue cannot say, another host's lock counts as live."""
    try:
        pid, host, *job = path.read_text().split()
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
    elif job and (job[0] == slurm_job_id() or slurm_job_ended(job[0])):
        return None
    return f"{pid} on {host}" + (f" (SLURM job {job[0]})" if job else "")


def slurm_job_id() -> str | None:
    """This process's SLURM job as squeue names it: ``<array>_<task>`` for a task of a job array (its own
    ``SLURM_JOB_ID`` is a number squeue does not print), else ``SLURM_JOB_ID``; None outside SLURM."""
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    return f"{array}_{task}" if array and task else os.environ.get("SLURM_JOB_ID")


def slurm_job_ended(job_id: str) -> bool:
    """Whether the SLURM job ``job_id`` has ended: squeue lists it no longer (or no longer knows it); False when
    squeue cannot say (not installed, the controller not answering)."""
    try:
        listed = subprocess.run(["squeue", "--noheader", "--array", f"--jobs={job_id}", "--format=%i"],
                                capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if listed.returncode:
        return "invalid job id" in listed.stderr.lower()  # purged from the controller's memory: long over
    return job_id not in listed.stdout.split()


def plan_run(cfg: DictConfig, run_dir: Path, checkpoint_exists: Callable[[Path], bool],
             finished_problem: Callable[[Path], str | None] = lambda run_dir: None) -> RunStart:
    """Decide, reading only, what this launch does with ``run_dir``; ConfigError (one line) when it must refuse.
    ``finished_problem``: why a run whose summary says it finished is not one the report takes whole (the report's
    rule, ``harness.report.load.finished_run_problem``), then refused."""
    resume, overwrite = check_resume_options(cfg)
    current = identity(cfg)
    current_fingerprint = fingerprint(current)
    fresh = {"fingerprint": current_fingerprint, "uid": uuid.uuid4().hex, "config": current}

    def start_fresh() -> RunStart:
        found = housekeeping(run_dir)
        if found.foreign and not found.run_directory and found.in_the_way and not overwrite:
            raise ConfigError(f"{run_dir} is not empty and holds no run: it holds files tpo-bench did not write "
                              f"({_listed(found.foreign)}), {_listed(found.in_the_way)} where a run writes its own; "
                              "it is left as it is: move them, or choose a new or empty run directory")
        if found.foreign and not found.run_directory and not overwrite:
            raise ConfigError(f"{run_dir} is not empty and holds no run (it holds {_listed(found.foreign)}); choose "
                              "a new or empty run directory, or trainer.overwrite=true to start a run there (it keeps "
                              "the files tpo-bench did not write)")
        if found.in_the_way:
            raise ConfigError(f"{run_dir} holds {_listed(found.in_the_way)}, not written by tpo-bench, where a run "
                              "writes its own (trainer.overwrite=true removes only what tpo-bench wrote); move them "
                              "or choose another run directory")
        record = {**fresh, "experiment_name": cfg.experiment_name}
        if found.foreign:
            record["foreign"] = found.foreign  # there before the run: a later overwrite keeps them too
        ours_dirs = tuple(name for name in (WANDB_DIR, TRL_DIR) if found.run_directory and (run_dir / name).is_dir())
        return RunStart(current_fingerprint, fresh["uid"], resume=False, finished=None, _record=record, _config=cfg,
                        _remove=tuple(found.ours), _remove_dirs=ours_dirs)

    # a folder with a metrics.csv, checkpoint.pt, ... that tpo-bench did not write holds no run: start_fresh refuses
    # it as a folder of someone else's files, whatever resume says
    if overwrite or not has_results(run_dir) or not is_run_directory(run_dir):
        if resume is True and not overwrite and not has_results(run_dir):
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
        problem = finished_problem(run_dir)
        if problem is not None:
            raise ConfigError(f"{run_dir} holds a {status} run that is damaged ({problem}); it is left as it is: "
                              "trainer.overwrite=true runs it again")
        _keep_experiment_name(cfg, run_dir, recorded)
        summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
        return RunStart(run_fingerprint, uid, resume=False, finished=summary, _record=None)
    if checkpoint_exists(run_dir):
        _keep_experiment_name(cfg, run_dir, recorded)
        orphans = tuple(entry for entry in _entries(run_dir) if is_own_temporary(entry))
        return RunStart(run_fingerprint, uid, resume=True, finished=None, _record=None, _remove=orphans)
    if resume == "auto":  # failed or killed before its first checkpoint: nothing to keep
        return start_fresh()
    raise ConfigError(f"trainer.resume=true but {run_dir} has no checkpoint to resume ({status}); "
                      "trainer.resume=auto starts it again, trainer.overwrite=true replaces it")


def recorded_experiment_name(run_dir: Path, record: dict[str, Any] | None = None) -> str | None:
    """The ``experiment_name`` the run in ``run_dir`` started with: from its ``identity.json``, else (runs recorded
    before it was kept there) its ``summary.json`` or ``.hydra/config.yaml``; None when none says."""
    record = _read_identity(run_dir) if record is None else record
    if isinstance(record.get("experiment_name") if record else None, str):
        return record["experiment_name"]
    try:
        summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
        if isinstance(summary, dict) and isinstance(summary.get("experiment"), str):
            return summary["experiment"]
    except (OSError, ValueError):
        pass
    try:
        name = OmegaConf.load(run_dir / HYDRA_DIR / "config.yaml").get("experiment_name")
    except Exception:  # noqa: BLE001 - unreadable or not a mapping: it says nothing
        return None
    return name if isinstance(name, str) else None


def _keep_experiment_name(cfg: DictConfig, run_dir: Path, record: dict[str, Any]) -> None:
    """A resumed run keeps the experiment_name it started with (module docstring); a warning names both."""
    original = recorded_experiment_name(run_dir, record)
    if original is None or original == cfg.experiment_name:
        return
    log.warning("%s was started as experiment_name=%s; it keeps that name (not experiment_name=%s)", run_dir,
                original, cfg.experiment_name)
    with read_write(cfg), open_dict(cfg):
        cfg.experiment_name = original


def _status(run_dir: Path) -> str:
    """How the run in ``run_dir`` ended, as its summary.json says; what is there otherwise, in a few words."""
    path = run_dir / outputs.SUMMARY_FILE
    if not path.exists():
        return "running or killed: no summary"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        return f"its {outputs.SUMMARY_FILE} cannot be read: {type(error).__name__}"
    status = summary.get("status") if isinstance(summary, dict) else None
    return status if isinstance(status, str) else f"its {outputs.SUMMARY_FILE} records no status"


def _read_identity(run_dir: Path) -> dict[str, Any] | None:
    try:
        record = json.loads((run_dir / IDENTITY_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None
