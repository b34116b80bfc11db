"""The campaign's locks: one campaign per cell, one writer at a time of exports and reports into results."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from harness import cli
from harness.campaign.text import shown

LOCKS = ".campaign-locks"  # under --work and --results: <preset>/<cell>.lock per cell held; results.lock
OLD_LOCK = ".campaign.lock"  # a whole folder's, held by campaigns of earlier versions: a live one excludes all


@contextmanager
def campaign_lock(work: Path, results: Path, cells: list[tuple[str, str]]) -> Iterator[None]:
    """Hold ``<folder>/LOCKS/<preset>/<cell>.lock`` (pid and host) under ``work`` and ``results`` for each of
    ``cells`` for the ``with`` block: one campaign per cell, so campaigns of other cells share the folders.
    SystemExit (one line, naming the cell) when a live campaign holds one, or a live campaign of an earlier version
    holds a whole folder (``OLD_LOCK``); a lock whose process is gone (on this host) is taken over."""
    from harness import rundir

    for folder in (work, results):
        _refuse_old_lock(folder)
    with ExitStack() as locks:
        for folder in (work, results):
            for preset, cell in cells:
                path = folder / LOCKS / preset / cell  # "tpo/" and "./tpo" are one folder, so one lock
                path = path.with_name(f"{path.name}.lock")
                path.parent.mkdir(parents=True, exist_ok=True)
                locks.enter_context(rundir.lock_file(path, _busy(folder, preset, cell)))
        yield


def _refuse_old_lock(folder: Path) -> None:
    """SystemExit (one line) while a live campaign of an earlier version holds all of ``folder`` (``OLD_LOCK``)."""
    from harness import rundir

    holder = rundir.lock_holder(folder / OLD_LOCK) if (folder / OLD_LOCK).exists() else None
    if holder is not None:
        raise cli.Refusal(f"Error: a campaign of an earlier version (process {holder}) holds all of {folder}; "
                         f"wait for it or stop it (a lock left by a crash on another host: delete "
                         f"{folder / OLD_LOCK})")


def _busy(folder: Path, preset: str, cell: str) -> Callable[[str, Path], Exception]:
    """The refusal of a cell lock that a live campaign holds (``rundir.lock_file``'s ``busy``)."""
    return lambda holder, path: cli.Refusal(
        f"Error: another campaign (process {holder}) runs {preset}/{cell} in {folder}; wait for it or stop it "
        f"(campaigns of other cells, e.g. other --only priorities, may run beside it; locks left by a crash on "
        f"another host: delete the files naming process {holder} under {folder / LOCKS})")


_HELD: dict[Path, int] = {}  # results_lock's takes in this process, per lock file (by the thread holding its guard)
_GUARDS: dict[Path, threading.RLock] = {}  # per lock file: which thread of this process may take it
_GUARDS_LOCK = threading.Lock()


@contextmanager
def results_lock(results: Path) -> Iterator[None]:
    """Hold ``<results>/LOCKS/results.lock`` exclusively for the ``with`` block: campaigns sharing ``results``
    export runs and write report folders (and the list of stale ones) one at a time, so a report never reads a
    folder another campaign is renaming into place. Waits for another holder, saying so once; re-entrant in a
    thread, and the process's other threads (the runner's reporter) wait for it; the kernel releases it when its
    process dies, so a killed campaign never leaves it held."""
    path = (results / LOCKS / "results.lock").resolve()
    with _GUARDS_LOCK:
        guard = _GUARDS.setdefault(path, threading.RLock())
    with guard, ExitStack() as held:  # one thread of this process at a time (the runner's, its reporter's)
        if _HELD.get(path):
            _HELD[path] += 1
            held.callback(_HELD.__setitem__, path, _HELD[path] - 1)
            yield
            return
        yield held.enter_context(_flock_results(path, results))


@contextmanager
def _flock_results(path: Path, results: Path) -> Iterator[None]:
    """``results_lock``'s first take in this process: the file lock other processes see."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            print(f"{time.strftime('%H:%M:%S')} waiting for process {holder}, which exports or reports into "
                  f"{shown(results)}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as error:  # ENOLCK, ENOSYS, EOPNOTSUPP: a file system without flock (Lustre without -o flock)
            raise cli.Refusal(f"Error: cannot lock {shown(path)} ({error.strerror}): --results must be on a file "
                             "system with flock (NFS with its lock daemon, Lustre mounted with -o flock, a local "
                             "disk); nothing was exported") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"{os.getpid()} {socket.gethostname()}\n")
        handle.flush()
        _HELD[path] = 1
        try:
            yield
        finally:
            del _HELD[path]
