"""The runner's loop: jobs started as slots free, finished runs exported and reported, pending costs renewed."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from harness.campaign.exports import export
from harness.campaign.jobs import Job
from harness.campaign.launch import STOP_SIGNALS, Launcher
from harness.campaign.local import LocalLauncher
from harness.campaign.locks import results_lock
from harness.campaign.planning import seconds_needed
from harness.campaign.records import DONE, finished, set_aside_damaged, work_mismatch
from harness.campaign.reports import Reporter, note_stale_reports
from harness.campaign.text import shown


def run(jobs: list[Job], parallel: int, work: Path, results: Path, hours: float | None = None,
        finish_within: float | None = None, costs: Callable[[], dict[tuple[str, str], float]] | None = None,
        launcher: Launcher | None = None, stop_at: float | None = None) -> int:
    """Run ``jobs`` ``parallel`` at a time through ``launcher`` (default: ``LocalLauncher``), starting none after
    ``hours`` and none expected to end after ``finish_within`` hours, stopping the running ones at the time
    ``stop_at`` (``time.time()``'s; each at a checkpoint it saves then: ``Launcher.stop``), with the pending jobs'
    costs renewed from
    ``costs`` (preset, cell) after each finished run; returns the number of failed jobs and failed reports. Jobs
    the launcher still runs from an earlier runner (SLURM) are re-attached, not started again. A job whose work
    folder holds a run of another configuration (``work_mismatch``) is refused in one line and counts as failed
    (``main`` refuses those before calling this; a run this starts is checked by its own launch,
    ``harness.rundir``)."""
    return Runner(parallel, work, results, hours, finish_within, costs, launcher, stop_at).run(jobs)


def exit_stopped(signum, frame) -> None:
    """The runner's handler of ``STOP_SIGNALS``: it leaves (exit 130), and what it holds is let go on the way out."""
    raise SystemExit(130)


class Runner:
    """One ``run``: its slots (``running``: slot → (the launcher's handle, job)), the jobs still to start
    (``pending``) and the runs that ended done, to export once the freed slots are filled again (``ended_done``)."""

    def __init__(self, parallel: int, work: Path, results: Path, hours: float | None, finish_within: float | None,
                 costs: Callable[[], dict[tuple[str, str], float]] | None, launcher: Launcher | None,
                 stop_at: float | None = None):
        self.parallel, self.work, self.results, self.costs = parallel, work, results, costs
        self.launcher = launcher or LocalLauncher(work)
        self.deadline = None if hours is None else time.time() + 3600 * hours
        self.end = None if finish_within is None else time.time() + 3600 * finish_within
        self.stop_at = stop_at
        self.failed = 0
        self.pending: list[Job] = []
        self.running: dict[int, tuple[object, Job]] = {}
        self.ended_done: list[tuple[Job, str]] = []
        self.skipped: set[tuple[str, str, str]] = set()  # said once each: skipped for now by --finish-within
        self.reporter: Reporter | None = None

    def run(self, jobs: list[Job]) -> int:
        jobs = self.refuse_mismatched(jobs)
        for job in jobs:
            set_aside_damaged(job, self.work)
        self.reporter = Reporter(self.results)
        self.export_finished_earlier(jobs)
        pending = [job for job in jobs if not finished(job, self.work)]
        attached = self.launcher.attach(pending)
        self.running = {slot: (handle, job) for slot, (job, handle) in enumerate(attached.items())}
        self.pending = [job for job in pending if job not in attached]
        previous = {signum: signal.signal(signum, exit_stopped) for signum in STOP_SIGNALS}  # the finally stops runs
        try:
            self.loop()
            self.failed += self.reporter.finish()
        finally:
            self.launcher.stop([handle for handle, _ in self.running.values()])  # local runs stopped; SLURM jobs go on
            for signum, handler in previous.items():  # the caller's own handlers again (a runner used in-process)
                if handler is not None:  # None: set outside Python, cannot be put back from here
                    signal.signal(signum, handler)
        return self.failed

    def refuse_mismatched(self, jobs: list[Job]) -> list[Job]:
        """The jobs less those whose work folder holds a run of another configuration: each refused in one line,
        counted as failed."""
        refused = []
        for job in jobs:
            changes = work_mismatch(job, self.work)
            if changes:
                refused.append(job)
                self.failed += 1
                print(f"REFUSED {job.preset}/{job.cell}/{job.name}: {shown(job.work_dir(self.work))} holds a run of "
                      f"another configuration ({'; '.join(changes)}); --replace moves it aside", flush=True)
        return [job for job in jobs if job not in refused]

    def export_finished_earlier(self, jobs: list[Job]) -> None:
        """Export the runs that finished before this runner started (one stopped between a run's end and its
        export)."""
        for job in [job for job in jobs if finished(job, self.work)]:
            self.exported_now(job)
            print(f"exported {job.preset}/{job.cell}/{job.name}, finished earlier → {job.result_dir(self.results)}",
                  flush=True)

    def exported_now(self, job: Job) -> None:
        """Export the job's run; its report in the reporter's thread, while the runner refills the slot."""
        export(job, self.work, self.results)
        with results_lock(self.results):  # noted, so that a runner stopped before the report leaves it to the next
            note_stale_reports(self.results, add=[job.preset])
        self.reporter.submit(job.preset)

    def loop(self) -> None:
        """Until every job ended, or --stop-after: fill the free slots, export what ended done (then fill again, at
        the renewed costs), else wait a second and poll the running ones."""
        while self.pending or self.running or self.ended_done:
            if self.stop_at is not None and time.time() >= self.stop_at:
                print(f"{time.strftime('%H:%M:%S')} --stop-after: {len(self.running)} runs stop at a checkpoint they "
                      f"save now, {len(self.pending)} not started; the same command resumes them", flush=True)
                self.launcher.stop([handle for handle, _ in self.running.values()])  # before any report is awaited
                self.running = {}
                self.export_ended()
                return
            free = [slot for slot in range(self.parallel) if slot not in self.running]
            if self.deadline is not None and time.time() >= self.deadline:
                self.pending = []  # past --hours: let the running ones finish, start nothing new
            free = self.refill(free)
            if self.ended_done:
                self.export_ended()
                self.renew_costs()
                continue  # the renewed costs may fit a run that did not fit before
            if not self.running and free and self.pending:  # nothing left that fits in the time left
                break
            if not (self.pending or self.running):
                break
            time.sleep(1)
            self.poll()

    def refill(self, free: list[int]) -> list[int]:
        """Start pending jobs that fit in the ``free`` slots, together (SLURM: one sbatch call per resources); the
        slots left free. A job the launcher refuses counts as failed, and its slot takes the next job."""
        while free:
            starting = self.startable(len(free))
            if not starting:
                break
            slots, free = free[:len(starting)], free[len(starting):]
            for slot, job, handle in zip(slots, starting, self.launcher.start_all(list(zip(starting, slots)))):
                if handle is None:  # refused, in a line of the launcher's: the slot takes the next job
                    self.failed += 1
                    free.append(slot)
                else:
                    self.running[slot] = (handle, job)
        return free

    def startable(self, count: int) -> list[Job]:
        """Up to ``count`` pending jobs that fit, in queue order, taken from ``pending``."""
        starting = []
        while len(starting) < count and (job := next((job for job in self.pending if self.fits(job)), None)):
            self.pending.remove(job)
            starting.append(job)
        return starting

    def fits(self, job: Job) -> bool:
        """Whether the job is expected to end within --finish-within; checked again whenever a slot frees (costs may
        have fallen). A job that does not is said once."""
        needed = 0.0 if self.end is None else seconds_needed(job, self.work)
        if self.end is None or needed <= self.end - time.time():
            return True
        if (job.preset, job.cell, job.name) not in self.skipped:
            self.skipped.add((job.preset, job.cell, job.name))
            print(f"{time.strftime('%H:%M:%S')} skip  {job.preset}/{job.cell}/{job.name} for now: needs "
                  f"{needed / 3600:.2f} h, {max(0.0, self.end - time.time()) / 3600:.2f} h left",
                  flush=True)
        return False

    def export_ended(self) -> None:
        """Export the runs that ended done (after the refill: an export waits while a report holds the results)."""
        for job, status in self.ended_done:
            self.exported_now(job)
            print(f"{time.strftime('%H:%M:%S')} done  {job.preset}/{job.cell}/{job.name} ({status}) → "
                  f"{job.result_dir(self.results)}", flush=True)
        self.ended_done = []

    def renew_costs(self) -> None:
        """The pending jobs' costs as measured by now (``costs``), where given; kept when they cannot be read."""
        if self.costs is None:
            return
        try:
            measured = self.costs()
        except (OSError, ValueError, AttributeError) as error:  # a summary being written
            print(f"costs not renewed (kept): {error}", flush=True)
            measured = {}
        self.pending = [replace(job, cost=measured.get((job.preset, job.cell), job.cost)) for job in self.pending]

    def poll(self) -> None:
        """Judge each running job that ended: done (to export), else failed, said in one line."""
        for slot, (handle, job) in list(self.running.items()):
            ended = self.launcher.poll(handle, job)
            if ended is None:
                continue
            del self.running[slot]
            summary = job.work_dir(self.work) / "summary.json"
            status = json.loads(summary.read_text()).get("status") if summary.exists() else "no summary"
            if ended.clean and status in DONE:
                self.ended_done.append((job, status))
            else:
                self.failed += 1
                print(f"{time.strftime('%H:%M:%S')} FAILED {job.preset}/{job.cell}/{job.name} ({ended.how}, "
                      f"{status}); log: {ended.log}", flush=True)
