"""Runs on this machine (``LocalLauncher``), each a process pinned to the core fewest processes are pinned to."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

from harness.campaign.jobs import Job
from harness.campaign.launch import STOP_SIGNALS, Ended, Launcher, run_environment
from harness.campaign.text import ROOT, shown
from harness.process import CHECKPOINT_SIGNAL, die_with_parent


def pinned_load(cores: list[int]) -> dict[int, int]:
    """How many processes of this machine are pinned to each of ``cores`` alone: the runs of this runner and of any
    other (a campaign and a scorecard side by side). Kernel threads (no command line) are left out: each core has
    its own. Without /proc, every core counts 0."""
    load = dict.fromkeys(cores, 0)
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            if not (status.parent / "cmdline").read_bytes():
                continue
            allowed = next((line.split(":", 1)[1].strip() for line in status.read_text().splitlines()
                            if line.startswith("Cpus_allowed_list:")), "")
        except OSError:  # the process ended meanwhile
            continue
        if allowed.isdigit() and int(allowed) in load:
            load[int(allowed)] += 1
    return load


class LocalLauncher(Launcher):
    """Runs each job as a process of this machine, pinned to a core of its own: the core with the fewest processes
    pinned to it (``pinned_load``), so two runners side by side use two cores; among equals, the last cores first,
    leaving core 0 to interactive work when there are fewer runs than cores. Each run is a session of its own, so a
    terminal's Ctrl-C or hangup, or ``timeout``'s signal to its process group, reaches the runner alone. The runs end
    with the runner: stopping it asks each to save a checkpoint at the end of its step and stop
    (``CHECKPOINT_SIGNAL``; a run in its last step completes), and SIGTERMs those still running after
    ``stop_grace_s`` or at a second stop signal (each then keeps its last checkpoint); the runner's death, even by
    ``kill -9``, SIGTERMs them (``die_with_parent``). A run folder whose ``run.lock`` a live process holds (a run of
    an earlier runner still closing, or one started by hand) is waited for up to ``lock_wait_s``, then refused in
    one line."""

    lock_wait_s = 60.0  # a run SIGTERMed by its runner's death writes its summary and lets go within seconds
    stop_grace_s = 120.0  # a step of Section 4's costliest cells (16 epochs, K = 64) takes up to about a minute here

    def __init__(self, work: Path):
        self.work = work
        self.cores = sorted(os.sched_getaffinity(0), reverse=True) if hasattr(os, "sched_getaffinity") else []
        self.env = run_environment(os.environ)

    def attach(self, jobs: list[Job]) -> dict[Job, subprocess.Popen]:
        return {}  # no run outlives the runner that started it

    def core(self, slot: int) -> int | None:
        """The core for the run of ``slot``: the least pinned one, ties in slot order (the slot's own core first)."""
        if not self.cores:
            return None
        load = pinned_load(self.cores)
        start = slot % len(self.cores)
        return min(self.cores[start:] + self.cores[:start], key=load.__getitem__)

    def claim(self, job: Job) -> str | None:
        """Why the job's run folder is not free (a live process of this machine still holding its run.lock after
        ``lock_wait_s``; at once, a lock of another host, which this machine cannot see end), or None."""
        from harness import rundir

        lock, waited_until = job.work_dir(self.work) / rundir.LOCK_FILE, time.time() + self.lock_wait_s

        def here(holder: str) -> bool:  # "<pid> on <host>[ (SLURM job <id>)]", or "starting"
            return holder == "starting" or holder.split(" (")[0].endswith(f" on {socket.gethostname()}")

        while (holder := rundir.lock_holder(lock)) and here(holder) and time.time() < waited_until:
            time.sleep(0.5)
        if holder is None:
            return None
        if here(holder):
            return f"process {holder} holds it (stop it, or wait for it to end)"
        return f"process {holder} holds its {rundir.LOCK_FILE} (a lock left by a crash on another host: delete {lock})"

    def start(self, job: Job, slot: int) -> subprocess.Popen | None:
        """Start the job's run (None, with a REFUSED line, when its run folder is not free: ``claim``)."""
        claimed = self.claim(job)
        if claimed:
            print(f"{time.strftime('%H:%M:%S')} REFUSED {job.preset}/{job.cell}/{job.name}: not started, "
                  f"{shown(job.work_dir(self.work))}: {claimed}", flush=True)
            return None
        job.work_dir(self.work).mkdir(parents=True, exist_ok=True)
        core, runner = self.core(slot), os.getpid()

        def prepare() -> None:  # in the child: its core, and its end with the runner's (even a kill -9)
            if core is not None:
                os.sched_setaffinity(0, {core})
            die_with_parent(runner)
            # an ask to checkpoint waits until the run can answer it (harness.process.checkpoint_on_signal), not
            # ending the run with its default action while the interpreter starts
            signal.pthread_sigmask(signal.SIG_BLOCK, {CHECKPOINT_SIGNAL})

        with open(job.work_dir(self.work).with_suffix(".log"), "a") as log:  # the run writes to its own copy
            process = subprocess.Popen(job.command(self.work), cwd=ROOT, env=self.env, stdout=log,
                                       stderr=subprocess.STDOUT, preexec_fn=prepare, start_new_session=True)
        print(f"{time.strftime('%H:%M:%S')} start {job.preset}/{job.cell}/{job.name} (core {core})", flush=True)
        return process

    def poll(self, process: subprocess.Popen, job: Job) -> Ended | None:
        if process.poll() is None:
            return None
        return Ended(process.returncode == 0, f"exit {process.returncode}", job.work_dir(self.work).with_suffix(".log"))

    def stop(self, processes: list[subprocess.Popen]) -> None:
        """Stopped or failed: no run goes on alone, holding its lock, and none loses the work of its last
        checkpoint interval (a long one, or none but the last, is hours of a run) unless it ignores the ask."""
        alive = [process for process in processes if process.poll() is None]
        if not alive:
            return
        print(f"{time.strftime('%H:%M:%S')} stopping {len(alive)} runs: each saves a checkpoint at the end of its "
              f"step, then stops (at once, at its last checkpoint: after {self.stop_grace_s:g} s, or Ctrl-C again)",
              flush=True)

        def now(signum=None, frame=None) -> None:  # stopped at their last checkpoint, within seconds
            if signum is not None:
                print(f"{time.strftime('%H:%M:%S')} stopping the runs now, each at its last checkpoint", flush=True)
            for process in alive:
                if process.poll() is None:
                    process.terminate()

        try:  # a second stop signal stops the runs now, and the runner still waits for them
            previous = {signum: signal.signal(signum, now) for signum in STOP_SIGNALS}
        except ValueError:  # not the main thread (a runner used in-process): the caller's handlers stand
            previous = {}
        try:
            for process in alive:
                process.send_signal(CHECKPOINT_SIGNAL)  # harness.process: save at the end of this step, then stop
            deadline = time.time() + self.stop_grace_s
            for process in alive:
                try:
                    process.wait(timeout=max(0.0, deadline - time.time()))
                except subprocess.TimeoutExpired:  # one that does not answer the ask
                    now()
            for process in alive:
                process.wait(timeout=120)
        finally:
            for signum, handler in previous.items():
                if handler is not None:  # None: set outside Python, cannot be put back from here
                    signal.signal(signum, handler)
