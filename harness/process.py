"""Process-wide settings of the entry points. ``exit_at_once_on_stop``: how a stop ends a process whose modules are
still loading; ``exit_interrupted``: how it ends one that handled the stop. Two memory settings for CPU training,
applied by the entry points (``python -m harness``, the bench scripts) before torch allocates anything; neither
changes a number:

- ``THP_MEM_ALLOC_ENABLE=1`` (unless set): PyTorch's CPU allocator asks for transparent huge pages on tensors of
  2 MB or more. The MNIST bandit gathers random rows of its training-image table every step, and with 4 KB pages
  each row is a TLB miss (measured with the float32 table, 20 seeds: 8.8 → 7.4 ms per step). Set it to 0 to opt out.
- glibc keeps freed memory for reuse (``mallopt``: blocks up to 32 MB come from the heap, whose free top is not
  returned to the system): by default glibc hands each block over a few MB back to the kernel when freed, so every
  training step page-faults its activations in again (token reversal from initialisation: ~15,000 faults per
  episode, 5–6% of a TPO episode, 2–3% of GRPO's, 5% of the dense task's; within noise over a whole run, whose late
  episodes are small, and on the MNIST bandit). The process keeps its peak heap until it exits (the peak itself is
  unchanged). ``TPO_BENCH_KEEP_FREED_MEMORY=0`` opts out.
"""

import ctypes
import os
import platform
import signal
import sys
import threading
import time
from typing import Callable, NoReturn

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameter numbers (malloc.h)
_HEAP_BLOCK_LIMIT = 32 * 1024 * 1024  # the largest mmap threshold glibc accepts on 64-bit systems


def tune_memory() -> bool:
    """Apply both settings; True when glibc took the freed-memory one."""
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    if os.environ.get("TPO_BENCH_KEEP_FREED_MEMORY", "1") == "0" or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL("libc.so.6").mallopt
    return bool(mallopt(_M_MMAP_THRESHOLD, _HEAP_BLOCK_LIMIT)) and bool(mallopt(_M_TRIM_THRESHOLD, 2**31 - 1))


CHECKPOINT_SIGNAL = signal.SIGUSR2  # a scheduler's "checkpoint and stop": SLURM's before a time limit or a
# preemption (``--signal=USR2@<seconds>``, as submitit asks for it)
_checkpoint_asked = threading.Event()


def checkpoint_on_signal() -> None:
    """From now on ``CHECKPOINT_SIGNAL`` asks the run to save a checkpoint at its next step and stop there
    (``checkpoint_asked``), instead of ending the process (the signal's default): a job near its time limit loses
    nothing, whatever its ``checkpoint_every``. A handler already there is left alone: a Hydra sweep job that
    submitit runs in this very process requeues itself on the signal (its own checkpoint)."""
    if signal.getsignal(CHECKPOINT_SIGNAL) in (signal.SIG_DFL, _ask_checkpoint):
        signal.signal(CHECKPOINT_SIGNAL, _ask_checkpoint)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {CHECKPOINT_SIGNAL})  # a campaign blocks it until now (its asks wait)


def _ask_checkpoint(signum, frame) -> None:
    _checkpoint_asked.set()


def checkpoint_asked() -> bool:
    """Whether ``CHECKPOINT_SIGNAL`` arrived (``checkpoint_on_signal``): the step loop saves and stops."""
    return _checkpoint_asked.is_set()


def exit_at_once_on_stop(message: str, cleanup=None) -> None:
    """Make SIGINT and SIGTERM print ``message``, call ``cleanup`` (what the process made so far goes) and end the
    process with 130 where it stands, for an entry point whose modules are loading or whose launch is being composed:
    nothing of a run is written yet, and unwinding half-imported modules or a half-built config can fail in their own
    cleanup (a half-built OmegaConf node turned the stop into an AttributeError)."""

    def stop(signum, frame) -> None:
        sys.stdout.flush()
        print(message, file=sys.stderr, flush=True)
        if cleanup is not None:
            try:
                cleanup()
            except OSError:
                pass
        os._exit(130)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)


def stop_by_interrupt(signum, frame) -> NoReturn:
    """A SIGINT or SIGTERM handler that raises KeyboardInterrupt, how a run is stopped at its checkpoint. The first
    SIGTERM also makes the process ignore later ones: the death of a parent with several threads (``die_with_parent``)
    sends the signal once per thread, as the kernel hands the child from thread to thread, and a second one landing
    while the first is handled would cut the closing short (no summary). The process is ending by then anyway."""
    if signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    raise KeyboardInterrupt(signal.Signals(signum).name)


def exit_interrupted() -> NoReturn:
    """``sys.exit(130)`` after a handled stop, with 130 as the exit status whatever the stop interrupted.

    A KeyboardInterrupt that passes through ``exec`` of a string (dataclasses and namedtuples build their methods
    so, on import) sets CPython's "KeyboardInterrupt unhandled" flag even when a caller handles it, and the
    interpreter then ends by SIGINT instead of with the status asked for. Every ``exec`` of a string clears that
    flag first, so an empty one does."""
    exec("")
    sys.exit(130)


def running(pid: int) -> bool:
    """Whether process ``pid`` is alive on this machine (another user's counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_PR_SET_PDEATHSIG = 1  # prctl option (linux/prctl.h)
# looked up once, here: a child calls it between fork and exec, where loading a library could wait for ever on a
# lock another thread of the parent (the campaign's reporter) held when it forked
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent(parent: int) -> None:
    """In a child, before it execs: SIGTERM when ``parent`` (the process that started it) dies, even by ``kill -9``,
    so that no run trains on alone holding its lock (it stops at its checkpoint as on any SIGTERM). Linux only;
    elsewhere nothing. A parent that died before the call is noticed by the parent pid having changed."""
    if _PRCTL is None:
        return
    _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGTERM)


def end_with_parent(orphaned: Callable[[], None], poll_s: float = 0.5) -> None:
    """Call ``orphaned`` every ``poll_s`` seconds once this process's parent has died (even by ``kill -9``): a
    thread watches the parent pid change as the orphan is handed to init. Unlike ``die_with_parent`` it needs no
    exec and does not depend on which of the parent's threads started this process (a worker pool's manager thread
    may end long before the pool)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        while True:
            orphaned()
            time.sleep(poll_s)

    threading.Thread(target=watch, name="end-with-parent", daemon=True).start()
