"""How a sweep's launching process stops jobs that run in its worker processes (the joblib launcher).

Ctrl-C reaches the workers together with the launching process (one process group); ``kill <pid>`` reaches the
launching process alone. Either way each running job must stop at its last checkpoint and write its summary before
the launcher tears its workers down (joblib kills them at once when the sweep raises). So the launching process
handles SIGINT and SIGTERM itself (``StopJobs``): it gives the jobs a moment to stop on their own, sends SIGTERM to
those of its children still holding a run's lock (``run.lock``) in the sweep folder, waits until they release it,
then raises KeyboardInterrupt. A job running in this process (the basic launcher) is not a child: the interrupt is
raised at once, as before. The command that continues the sweep is the launching process's, so it is handed to
the jobs (``LAUNCH_ARGV_ENV``): a worker's own ``sys.argv`` is its launcher's (loky's, submitit's). A launching
process killed by ``kill -9`` handles nothing: each worker watches for it and stops itself (``worker_job``)."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import shlex
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from harness import process, rundir, sweep

LAUNCH_ARGV_ENV = "TPO_BENCH_LAUNCH_ARGV"
LAUNCHER_ENV = "TPO_BENCH_LAUNCHER"  # "<pid> <host>" of the sweep's launching process
GRACE_S = 5.0  # a job that got the signal itself stops and releases its lock well within this
STOP_S = 120.0  # the most a job is waited for once told to stop (it writes its summary; its checkpoint is on disk)


def launch_argv() -> list[str]:
    """The command-line arguments of the process that launched this sweep (this process's own outside a sweep)."""
    recorded = os.environ.get(LAUNCH_ARGV_ENV)
    return shlex.split(recorded) if recorded is not None else sys.argv[1:]


def record_launch_argv(argv: list[str]) -> None:
    os.environ[LAUNCH_ARGV_ENV] = shlex.join(argv)
    os.environ[LAUNCHER_ENV] = f"{os.getpid()} {socket.gethostname()}"


def _launcher() -> int | None:
    """The pid of this sweep's launching process, when it is another process on this machine (not on a cluster
    node, where the variable arrives with the job's environment)."""
    recorded = os.environ.get(LAUNCHER_ENV, "").split()
    if len(recorded) != 2 or recorded[1] != socket.gethostname() or not recorded[0].isdigit():
        return None
    return None if int(recorded[0]) == os.getpid() else int(recorded[0])


def launcher_gone() -> bool:
    """Whether this is a sweep job's worker whose launching process has died: nobody is left to take its jobs'
    results, so after a stopped job it ends rather than wait in the pool."""
    launcher = _launcher()
    return launcher is not None and os.getppid() != launcher and not process.running(launcher)


@contextlib.contextmanager
def worker_job():
    """Around a sweep job in a worker process the launching process started (joblib's): the worker ends with its
    launcher, which a ``kill -9`` leaves no time to stop it (it would train on, orphaned, holding its run's lock).
    Once the launcher is gone a running job is sent SIGTERM every half second, so that it stops at its checkpoint
    once training (``Session.training``) handles the signal; until then, and while the run writes its summary, a
    SIGTERM is only noted (and sent again until training takes it), and the worker ends after the job. An idle
    worker ends at once. A job in the launching
    process itself, or in a process no pool started (a cluster's job, which outlives its launcher), is left alone."""
    global _in_job, _watching
    launcher = _launcher()
    if launcher is None or multiprocessing.parent_process() is None:  # not a pool's worker: a cluster's job goes on
        yield
        return
    if os.getppid() != launcher:
        if launcher_gone():  # the launcher died before this job started: do not start it
            os.write(sys.stderr.fileno(), b"Interrupted: the sweep's launching process is gone; job not started\n")
            os._exit(130)
        yield
        return
    if not _watching:
        signal.signal(signal.SIGTERM, _note_stop)
        process.end_with_parent(_stop_orphan)
        _watching = True
    _in_job = True
    try:
        yield
    finally:
        _in_job = False
        if _stop_noted or launcher_gone():  # (a pool would catch SystemExit and keep the worker waiting)
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)


_in_job = False  # a worker's job is running (its orphan is stopped by SIGTERM, not ended)
_watching = False  # this worker watches its launcher (``process.end_with_parent``)
_stop_noted = False  # a SIGTERM arrived outside training


def _note_stop(signum, frame) -> None:
    """A worker's SIGTERM outside training: an idle worker ends; a job is sent SIGTERM again every half second until
    it ends, so that it stops at its checkpoint once training handles the signal (the launcher's stop of a job still
    setting up, too)."""
    global _stop_noted
    if not _in_job:
        os._exit(130)
    if not _stop_noted:
        _stop_noted = True
        threading.Thread(target=_resend_while_in_job, name="stop-again", daemon=True).start()


def _resend_while_in_job() -> None:
    while _in_job:
        time.sleep(0.5)
        if _in_job:
            os.kill(os.getpid(), signal.SIGTERM)


def _stop_orphan() -> None:
    """Called by the watcher every half second once the launcher is gone."""
    if _in_job:
        os.kill(os.getpid(), signal.SIGTERM)
    else:
        os._exit(130)


def raise_on_stop() -> None:
    """SIGINT, SIGTERM and SIGHUP raise KeyboardInterrupt in this process: a single run stops at its checkpoint
    (``harness.run``), or before it starts as ``harness.__main__.main`` says."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, process.stop_by_interrupt)
    signal.signal(signal.SIGHUP, process.stop_by_interrupt)  # an SSH session's end


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
            pid, host = lock.read_text().split()[:2]
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
