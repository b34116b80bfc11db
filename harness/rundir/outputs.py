"""A run directory's files — the source of truth for everything downstream.

``metrics.csv``: columns ``step, seed`` then one per metric (``error`` first).
``summary.json``: status, final values (mean, s.e. with population std, per seed), steps-to thresholds
(``harness.rundir.summary``).
``checkpoint.pt``: everything needed to resume, with a checksum and the run's fingerprint.

Every file is replaced whole (written to a temporary file, then renamed), never rewritten or appended in place: a
concurrent reader (the report, a notebook, a dashboard) and a run killed at any moment only ever see complete files.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import logging
import os
import pickle
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from harness.locations import CHECKOUT


log = logging.getLogger(__name__)
METRICS_FILE, SUMMARY_FILE, CHECKPOINT_FILE, ERROR_FILE = "metrics.csv", "summary.json", "checkpoint.pt", "error.txt"


def summary_files(root: Path) -> list[Path]:
    """Every ``summary.json`` below ``root`` (links followed), sorted. A folder that vanishes while it is walked (a
    campaign sharing the folder renames its export into place) is passed over, not an error as for ``rglob``."""
    return sorted(Path(folder) / SUMMARY_FILE for folder, _, files in os.walk(root, followlinks=True)
                  if SUMMARY_FILE in files)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace ``path`` by ``data`` whole and durably (temporary file, fsync, rename)."""
    atomic_write_text(path, [data], durable=True)


def atomic_write_text(path: Path, chunks: list[str] | list[bytes], durable: bool = True) -> None:
    """Replace ``path`` by the concatenated ``chunks``: readers see the old file or the new one, never a mix.
    ``durable`` also fsyncs before the rename, so a machine crash cannot leave an empty file either."""
    tmp = temporary_path(path)  # per process: two writers never share a temporary
    binary = bool(chunks) and isinstance(chunks[0], bytes)
    try:
        with open(tmp, "wb" if binary else "w") as handle:
            handle.writelines(chunks)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:  # a full disk, an interruption: no temporary is left behind (it would hold the space)
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass
        raise


def temporary_path(path: Path) -> Path:
    """The temporary ``atomic_write_text`` writes ``path`` to: ``<name>.<pid>.tmp`` beside it
    (``harness.rundir.is_own_temporary`` recognises exactly these)."""
    return path.with_name(f"{path.name}.{os.getpid()}.tmp")


def record_failure(run_dir: Path, summary: dict[str, Any], error_text: str) -> bool:
    """Best effort: ``summary.json`` (status failed) and ``error.txt`` of a run that failed. Whatever stops them (the
    disk that filled up and failed the run, say) is logged in one line and never raised over the run's own error;
    returns whether both were written."""
    written = True
    for name, write in ((SUMMARY_FILE, lambda path: write_json(path, summary)),
                        (ERROR_FILE, lambda path: atomic_write_text(path, [error_text]))):
        try:
            write(run_dir / name)
        except (OSError, ValueError) as error:
            log.warning("could not record the failure in %s (%s: %s)", run_dir / name, type(error).__name__, error)
            written = False
    return written


def write_json(path: Path, payload: dict[str, Any]) -> None:
    atomic_write_bytes(path, (json.dumps(payload, indent=2, allow_nan=False) + "\n").encode())


def git_commit() -> str | None:
    """The code's git commit, suffixed "-dirty" when tracked files other than results/ (outputs: the campaign
    rewrites reports there while it runs) have uncommitted changes; None outside a checkout."""
    if not (CHECKOUT / ".git").exists():  # an installed package: not a checkout (whatever repository holds the venv)
        return None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=CHECKOUT, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ".", ":!results"],
                               cwd=CHECKOUT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if commit.returncode:
        return None
    return commit.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def package_version() -> str | None:
    """The installed tpo-bench's version: with ``git_commit`` (None outside a checkout, as in an installed wheel) it
    names the code a run ran; None when the code runs uninstalled (``PYTHONPATH=.``)."""
    try:
        return importlib.metadata.version("tpo-bench")
    except importlib.metadata.PackageNotFoundError:
        return None


class CheckpointError(Exception):
    """A checkpoint that cannot be resumed (damaged, truncated, foreign); raised before anything is written."""


class MetricsWriter:
    """Per-seed rows of metrics.csv, kept in memory and published whole.

    The file is republished (temporary file + rename) at most every ``publish_every`` seconds, at every ``flush``
    (each checkpoint, before the checkpoint itself is written) and at ``close``, so a reader sees whole rows only
    and never an empty file. On resume the rows up to the checkpoint's count are kept and the rest dropped."""

    def __init__(self, run_dir: Path, metric_names: tuple[str, ...], seeds: list[int], resume_rows: int | None,
                 publish_every: float = 2.0):
        self.path = run_dir / METRICS_FILE
        self.columns = ["step", "seed", *metric_names]
        self.seeds = seeds
        self.publish_every = publish_every
        self._chunks = [",".join(self.columns) + "\n"]
        self.rows = 0
        self._failed = False  # a publish raised (a full disk): ``close`` does not raise it again over the first
        self._durable_rows = -1  # the rows at the last durable publish: ``close`` has nothing to add when unchanged
        self._kept: list[str] = []  # the lines kept on resume
        if resume_rows is not None:
            kept = self._kept = self._rows_on_disk(resume_rows)
            self._chunks = [",".join(self.columns) + "\n", "".join(kept)]
            self.rows = resume_rows
        self._publish(durable=True)

    def _rows_on_disk(self, count: int) -> list[str]:
        """The first ``count`` rows of the file being resumed. A run started before a metric was added keeps the
        columns it started with (a file's columns never change mid-run; the new metric is not recorded for it)."""
        lines = self.path.read_text().splitlines(keepends=True) if self.path.exists() else []
        on_disk = lines[0].rstrip("\n").split(",") if lines else []
        if on_disk != self.columns and on_disk[:2] == ["step", "seed"] and set(on_disk) < set(self.columns):
            log.warning("%s was started without the metrics %s; resuming with its own columns", self.path,
                        ", ".join(c for c in self.columns if c not in on_disk))
            self.columns = on_disk
        if on_disk != self.columns:
            raise CheckpointError(f"{self.path} does not have the columns the checkpoint was written with; it is "
                                  "left as it is: start again with trainer.overwrite=true")
        kept = lines[1: count + 1]
        if len(kept) < count or (kept and not kept[-1].endswith("\n")):
            raise CheckpointError(f"{self.path} holds {len(kept)} complete rows but the checkpoint recorded {count}; "
                                  "it is left as it is: start again with trainer.overwrite=true")
        return kept

    def kept_rows(self) -> list[tuple[int, tuple[str, ...], np.ndarray]]:
        """The rows kept on resume as ``append`` received them: per step, (step, metric names, seeds × metrics
        values); the cells round-trip float32 exactly."""
        names, per_step = tuple(self.columns[2:]), len(self.seeds)
        rows = []
        for start in range(0, len(self._kept), per_step):
            cells = [line.rstrip("\n").split(",") for line in self._kept[start:start + per_step]]
            rows.append((int(cells[0][0]), names, np.array([[float(c) for c in row[2:]] for row in cells],
                                                            dtype=np.float64).reshape(per_step, len(names))))
        return rows

    def append(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        """One row per seed; floats with 9 significant digits, which round-trips float32 exactly."""
        values = np.column_stack([metrics[name] for name in self.columns[2:]]) if len(self.columns) > 2 else None
        lines = []
        for index, seed in enumerate(self.seeds):
            cells = "" if values is None else "," + ",".join(f"{v:.9g}" for v in values[index])
            lines.append(f"{step},{seed}{cells}\n")
        self._chunks.append("".join(lines))
        self.rows += len(self.seeds)
        if time.monotonic() - self._published_at >= self.publish_every:
            self._publish(durable=False)

    def _publish(self, durable: bool) -> None:
        if len(self._chunks) > 2:  # keep the text as few large strings: republishing costs one write
            self._chunks = [self._chunks[0], "".join(self._chunks[1:])]
        try:
            atomic_write_text(self.path, self._chunks, durable=durable)
        except BaseException:
            self._failed = True
            raise
        self._failed = False
        self._published_at = time.monotonic()
        if durable:
            self._durable_rows = self.rows

    def flush(self) -> None:
        """Publish every row so far and make it durable (called before each checkpoint)."""
        self._publish(durable=True)

    def close(self) -> None:
        """Publish every row not published durably yet; after a publish that raised, nothing: it is called on the
        way out of a failed run too, whose own error (a full disk: that publish's, or the checkpoint's just after a
        flush) is not to be buried under the same error again."""
        if not self._failed and self.rows != self._durable_rows:
            self.flush()


CHECKPOINT_MAGIC = b"tpo-bench checkpoint v1\n"  # bump when CHECKPOINT_SCHEMA changes
CHECKPOINT_SCHEMA = {"step": int, "rows": int, "task": dict, "diverged": dict, "resumes": list,
                     "cpu_seconds": (int, float)}
CHECKPOINT_HELP = ("metrics.csv and summary.json are left as they were; restore a good copy of the checkpoint, or "
                   "start the run again with trainer.overwrite=true")


def save_checkpoint(run_dir: Path, state: dict[str, Any]) -> None:
    """``state`` (tensors, numbers, strings and plain containers only) behind a magic line and its SHA-256."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    atomic_write_bytes(run_dir / CHECKPOINT_FILE, CHECKPOINT_MAGIC + hashlib.sha256(payload).digest() + payload)


def load_checkpoint(run_dir: Path, fingerprint: str) -> dict[str, Any] | None:
    """The verified checkpoint of the run with ``fingerprint``, or None when there is none; CheckpointError (one
    line: file, what is wrong, how to go on) when it is damaged, truncated, foreign or not a tpo-bench checkpoint.
    Loaded with ``weights_only=True``: a crafted file cannot run code."""
    path = run_dir / CHECKPOINT_FILE
    if not path.exists():
        return None
    data = path.read_bytes()
    header = len(CHECKPOINT_MAGIC) + hashlib.sha256().digest_size
    if not data.startswith(CHECKPOINT_MAGIC):
        problem = "is not a tpo-bench checkpoint (no checkpoint header; older versions wrote none)"
    elif len(data) <= header or hashlib.sha256(data[header:]).digest() != data[len(CHECKPOINT_MAGIC):header]:
        problem = "is damaged or truncated (its SHA-256 does not match its contents)"
    else:
        try:
            state = torch.load(io.BytesIO(data[header:]), weights_only=True, map_location="cpu")
        except Exception as error:  # noqa: BLE001 - any unreadable payload is reported the same way
            if isinstance(error, pickle.UnpicklingError) and "GLOBAL" in str(error):
                problem = ("holds objects other than tensors, numbers, strings and plain containers (refused: "
                           "loading them could run code)")
            elif isinstance(error, pickle.UnpicklingError):
                problem = "cannot be read (not a torch.save payload)"
            else:
                problem = f"cannot be read ({type(error).__name__}: {(str(error).splitlines() or [''])[0]})"
        else:
            if not isinstance(state, dict) or state.get("fingerprint") != fingerprint:
                found = state.get("fingerprint") if isinstance(state, dict) else None
                problem = f"belongs to another run (fingerprint {found}, this run's is {fingerprint})"
            else:
                wrong = [key for key, kind in CHECKPOINT_SCHEMA.items()
                         if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool)
                         or (kind is int and state[key] < 0)]
                if not wrong:
                    return state
                problem = f"has no valid {', '.join(wrong)} (not written by this version of tpo-bench)"
    raise CheckpointError(f"{path} {problem}; {CHECKPOINT_HELP}")
