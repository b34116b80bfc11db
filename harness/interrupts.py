"""How a sweep's launching process stops jobs that run in its worker processes (the joblib launcher).

Ctrl-C reaches the workers together with the launching process (one process group); ``kill <pid>`` reaches the
launching process alone. Either way each running job must stop at its last checkpoint and write its summary before
the launcher tears its workers down (joblib kills them at once when the sweep raises). So the launching process
handles SIGINT and SIGTERM itself (``StopJobs``): it gives the jobs a moment to stop on their own, sends SIGTERM to
those of its children still holding a run's lock (``run.lock``) in the sweep folder, waits until they release it,
then raises KeyboardInterrupt. A job running in this process (the basic launcher) is not a child: the interrupt is
raised at once, as before. The command that continues the sweep is the launching process's, so it is handed to
the jobs (``LAUNCH_ARGV_ENV``): a worker's own ``sys.argv`` is its launcher's (loky's, submitit's). A launching
process killed by ``kill -9`` handles nothing: each worker watches for it and stops itself (``end_with_launcher``)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
import time
from pathlib import Path

from harness import process, rundir, sweep

LAUNCH_ARGV_ENV = "TPO_BENCH_LAUNCH_ARGV"
LAUNCHER_PID_ENV = "TPO_BENCH_LAUNCHER_PID"
_watching = False  # this process already ends with its launcher
GRACE_S = 5.0  # a job that got the signal itself stops and releases its lock well within this
STOP_S = 120.0  # the most a job is waited for once told to stop (it writes its summary; its checkpoint is on disk)


def launch_argv() -> list[str]:
    """The command-line arguments of the process that launched this sweep (this process's own outside a sweep)."""
    recorded = os.environ.get(LAUNCH_ARGV_ENV)
    return shlex.split(recorded) if recorded is not None else sys.argv[1:]


def record_launch_argv(argv: list[str]) -> None:
    os.environ[LAUNCH_ARGV_ENV] = shlex.join(argv)
    os.environ[LAUNCHER_PID_ENV] = str(os.getpid())


def end_with_launcher() -> None:
    """In a worker process the launching process started (joblib's), end with it: a launcher killed by ``kill -9``
    cannot stop its workers, which would train on, orphaned, holding their run's lock (``process.end_with_parent``).
    Once per process; a job in the launching process itself, or on a cluster node, is left alone."""
    global _watching
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    if _watching or launcher is None or os.getpid() == int(launcher) or os.getppid() != int(launcher):
        return
    process.end_with_parent()
    _watching = True


def launcher_gone() -> bool:
    """Whether this is a worker whose launching process has died: nobody is left to take its jobs' results, so
    after a stopped job it ends rather than wait in the pool."""
    launcher = os.environ.get(LAUNCHER_PID_ENV)
    return launcher is not None and int(launcher) not in (os.getpid(), os.getppid())


def raise_on_stop() -> None:
    """SIGINT and SIGTERM raise KeyboardInterrupt in this process: a single run stops at its checkpoint
    (``harness.run``), or before it starts as ``harness.__main__.main`` says."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, process.stop_by_interrupt)


def quiet_pool_teardown() -> None:
    """Silence, in the processes this one starts, the warnings joblib's resource tracker prints when a stopped
    sweep tears its worker pool down: it reports a semaphore as leaked and then finds it already removed. The
    stop's own lines are what the user needs; the filter matches only messages starting ``resource_tracker``."""
    quiet = "ignore:resource_tracker:UserWarning"
    filters = [entry for entry in os.environ.get("PYTHONWARNINGS", "").split(",") if entry]
    if quiet not in filters:
        os.environ["PYTHONWARNINGS"] = ",".join([*filters, quiet])


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def running_children(sweep_dir: Path) -> dict[int, Path]:
    """The jobs of ``sweep_dir`` that a child of this process is training: {pid: run folder}, from their locks."""
    found = {}
    for lock in sweep_dir.glob(f"*/{rundir.LOCK_FILE}"):
        try:
            pid, host = lock.read_text().split()
            pid = int(pid)
        except (OSError, ValueError):
            continue
        if host == socket.gethostname() and _parent(pid) == os.getpid():
            found[pid] = lock.parent
    return found


class StopJobs:
    """SIGINT/SIGTERM handler of a sweep's launching process; ``stopped`` lists the job folders it waited for."""

    def __init__(self) -> None:
        self.stopped: list[Path] = []

    def install(self) -> None:
        signal.signal(signal.SIGINT, self)
        signal.signal(signal.SIGTERM, self)

    def __call__(self, signum, frame) -> None:
        records = os.environ.get(sweep.RECORDS_ENV)  # set while a sweep runs (harness.sweep.SweepReport)
        running = running_children(Path(records).parent) if records else {}
        if running:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # one stop: a second Ctrl-C does not cut it short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            self.stopped = sorted(running.values())
            sweep_dir = Path(records).parent
            if not _wait(lambda: running_children(sweep_dir), GRACE_S):  # not signalled with us: tell them
                for pid in running_children(sweep_dir):
                    try:
                        os.kill(pid, signal.SIGTERM)
                    except ProcessLookupError:
                        pass
                _wait(lambda: running_children(sweep_dir), STOP_S)
        raise KeyboardInterrupt


def _wait(running, seconds: float) -> bool:
    """Wait until ``running()`` is empty or ``seconds`` pass; whether it emptied."""
    deadline = time.monotonic() + seconds
    while running():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True
