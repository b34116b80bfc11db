"""Runs as SLURM jobs (``SlurmLauncher``, through submitit): the job's body, what squeue and sbatch say, options."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness import cli
from harness.campaign.jobs import Job
from harness.campaign.launch import RUN_ENV, STOP_SIGNALS, Ended, Launcher
from harness.campaign.queue import MEM_GB
from harness.campaign.text import ROOT, one_line, shown

TIME_MARGIN = 2.0  # a SLURM job's time limit over its cell's cost: a node's speed is not measured, and a run cut off
MIN_TIME_MIN = 10  # at its limit loses the episodes since its last checkpoint; at least this (start-up, imports)
TIME_RUNGS_MIN = (10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)  # a computed time limit is
# rounded up to the next of these (beyond, to whole days): jobs of similar length ask the same, so they share an array
MAX_REQUEUES = 20  # a SLURM job requeued at its time limit or preemption (checkpointed first), at most this many
# times: a job whose limit is too short for its start-up would otherwise loop
MAX_JOBS = 50  # --max-jobs: SLURM jobs queued or running at once
SUBMITIT = ".submitit"  # under --work: submitit's folder per SLURM job (its pickles and log)
MARK = "tpo-bench:"  # the comment of a campaign's SLURM jobs starts so; the rest names their sbatch call
SLURM_RECORD = ".slurm.json"  # beside a run folder: the SLURM job that runs it (job id, submit time, command)
ENDED = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
         "TIMEOUT")  # SLURM states of a job that no longer runs (squeue lists them a while); PREEMPTED may requeue
NEVER_STARTS = {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "AccountNotAllowed",
                "QOSMaxCpuPerJobLimit", "QOSMaxGRESPerJob", "QOSMaxMemoryPerJob", "QOSMaxWallDurationPerJobLimit",
                "InvalidAccount", "InvalidQOS"}  # squeue's pending reasons that waiting does not cure
UNANSWERED = ("Unable to contact", "Socket timed out", "connect failure", "Could not establish a configuration",
              "resolve_ctls", "Zero Bytes")  # sbatch without a controller to ask: no word on the submission
MAX_ARRAY_TASKS = 1000  # tasks per job array: within SLURM's default MaxArraySize (1001), which sites rarely lower
CAMPAIGN_OPTIONS = ("partition", "time", "cpus-per-task", "mem", "gpus-per-node", "job-name", "output", "error",
                    "array", "comment")  # sbatch options the campaign sets itself: not for --sbatch


def slurm_setup() -> list[str]:
    """The shell lines a SLURM job runs before its run: ``run_environment`` for the job's inherited environment,
    the Hugging Face libraries offline (an LLM cell's model and data were fetched on the login node:
    ``harness.llm.offline``), and a one-line failure on a node that does not see this checkout at its path."""
    from harness.llm.offline import NODE_ENVIRONMENT

    unseen = (shlex.quote(f"{MARK} {ROOT} is not on") + ' "$(hostname)"'
              + shlex.quote(": the checkout and --work must be on a file system the nodes share, at the same path"))
    return [*(f"export {name}={shlex.quote(value)}" for name, value in {**RUN_ENV, **NODE_ENVIRONMENT}.items()),
            f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"[ -d {shlex.quote(str(ROOT / 'harness'))} ] || {{ echo {unseen} >&2; exit 1; }}"]


class SlurmError(Exception):
    """squeue could not say which jobs are queued or running (one line: what it said)."""


def slurm_queue() -> list[tuple[str, str, str]]:
    """(job id, state, comment) of each of this user's SLURM jobs that is queued or running, an array's tasks one by
    one (``123_4``); SlurmError when squeue cannot say."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--array", f"--user={os.getuid()}", "--format=%i|%T|%k"],
                              check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"squeue: {one_line(error)}") from None
    if done.returncode != 0:
        said = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        raise SlurmError(said[-1] if said else f"squeue exited {done.returncode}")
    rows = [tuple(line.split("|", 2)) for line in done.stdout.splitlines() if line.count("|") >= 2]
    return [(job_id, state, comment.strip()) for job_id, state, comment in rows if state not in ENDED]


def slurm_active_jobs() -> dict[str, str]:
    """{job id: state} of this user's SLURM jobs that are queued or running (``slurm_queue``)."""
    return {job_id: state for job_id, state, _ in slurm_queue()}


def slurm_marked_jobs() -> dict[str, list[str]]:
    """{submission mark: ids of its jobs still queued or running}: the mark is the comment ``SlurmLauncher.submit``
    gives each sbatch call's jobs, by which a runner killed as it submitted finds them (``slurm_queue``)."""
    marked: dict[str, list[str]] = {}
    for job_id, _, comment in slurm_queue():
        if comment.startswith(MARK):
            marked.setdefault(comment, []).append(job_id)
    return marked


def slurm_pending_reason(job_id: str) -> str:
    """squeue's reason why ``job_id`` is pending (``%r``), or what kept squeue from saying."""
    try:
        said = subprocess.run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%r"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"squeue cannot say ({one_line(error)})"
    return said.stdout.strip() or f"squeue cannot say ({said.stderr.strip() or 'no answer'})"


def sbatch_said(error: BaseException) -> str:
    """sbatch's own error line, from submitit's exception (its stderr, with a traceback or a long preamble)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    said = [line for line in lines if line.startswith("sbatch:")]
    return (said or lines or [type(error).__name__])[-1]


@dataclass(frozen=True)
class Resources:
    """What a SLURM job of a cell asks for."""

    cpus: int
    mem_gb: float
    time_min: int
    gpus: int

    def __str__(self) -> str:
        return f"cpus {self.cpus}, mem {self.mem_gb:g} GB, time {self.time_min} min, gpus {self.gpus}"


def _log_lines(path: Path) -> list[str]:
    """The last lines of a job's log (none when it has none)."""
    try:
        with open(path, "rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - 4096))
            return log.read().decode(errors="replace").splitlines()
    except OSError:
        return []


def time_limit(minutes: float) -> int:
    """A job's time limit for ``minutes`` of work: at least ``MIN_TIME_MIN``, rounded up to ``TIME_RUNGS_MIN``."""
    rungs = [rung for rung in TIME_RUNGS_MIN if rung >= max(MIN_TIME_MIN, minutes)]
    return rungs[0] if rungs else 1440 * math.ceil(minutes / 1440)


def array_name(jobs: list[Job]) -> str:
    """The SLURM job name of an sbatch call's ``jobs``: the run's own for one, else what its runs share."""
    if len(jobs) == 1:
        return f"{jobs[0].preset}/{jobs[0].cell}/{jobs[0].name}"
    cells, presets = {f"{job.preset}/{job.cell}" for job in jobs}, {job.preset for job in jobs}
    what = cells.pop() if len(cells) == 1 else presets.pop() if len(presets) == 1 else "campaign"
    return f"{what} ({len(jobs)} runs)"


@contextmanager
def signals_held() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP held back for the block (delivered again at its end): a job submitted is a job
    recorded, or a runner started again would submit it a second time. Held by the handlers, not by a signal mask:
    a signal a thread's mask blocks goes to another thread (the reporter's, a library's), and Python runs its
    handler in the main thread at once all the same. For the main thread, the only one that sets handlers."""
    caught: list[int] = []
    previous = {signum: signal.signal(signum, lambda signum, frame: caught.append(signum)) for signum in STOP_SIGNALS}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if caught:
            os.kill(os.getpid(), caught[0])  # the runner's own handler now: it stops after the records are written


@dataclass(frozen=True)
class SlurmRun:
    """A SLURM job running a campaign job's command, and submitit's files of it."""

    job_id: str
    log: Path
    result: Path  # submitit's pickle of how the command ended; absent if the job was killed


class CheckpointableCommand:
    """A SLURM job's body, as submitit pickles it: the run's command in a process of its own. Near the job's time
    limit, or when it is preempted, SLURM sends SIGUSR2 (submitit asks for it ``signal_delay_s`` before the limit)
    and submitit calls ``checkpoint``: the run is asked to save a checkpoint at its next step and stop there
    (SIGUSR2, ``harness.process.checkpoint_on_signal``), else stopped at its last checkpoint (SIGTERM), and the
    job is requeued under the same job id with the same command, which resumes the run (``trainer.resume=auto``),
    at most ``MAX_REQUEUES`` times."""

    ask_s, stop_s = 45.0, 20.0  # within submitit's 90 s before the limit: the next step's checkpoint, else the last

    def __init__(self, command: list[str], cwd: str):
        self.command, self.cwd = command, cwd
        self.process: subprocess.Popen | None = None

    def __getstate__(self) -> dict:
        return {"command": self.command, "cwd": self.cwd}  # a running process is not part of the submission

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["command"], state["cwd"])

    def __call__(self) -> None:
        from submitit.core.utils import FailedJobError

        self.process = subprocess.Popen(self.command, cwd=self.cwd)
        code = self.process.wait()
        if code:
            raise FailedJobError(f"the run exited with status {code}: {shlex.join(self.command)}")

    def checkpoint(self):
        import submitit

        if self.process is not None and not self._ended(0):
            self.process.send_signal(signal.SIGUSR2)
            if not self._ended(self.ask_s):
                self.process.terminate()
                self._ended(self.stop_s)
        return submitit.helpers.DelayedSubmission(CheckpointableCommand(self.command, self.cwd))

    def _ended(self, seconds: float) -> bool:
        """Whether the run's process ended within ``seconds``, without reaping it: ``checkpoint`` runs in a signal
        handler, maybe inside ``__call__``'s ``wait``, which holds the Popen's lock (a second ``wait`` would wait
        its whole timeout)."""
        deadline = time.monotonic() + seconds
        while True:
            try:
                if os.waitid(os.P_PID, self.process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            except ChildProcessError:  # already reaped
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.1)


class SlurmLauncher(Launcher):
    """Runs each job as a SLURM job, through submitit: a ``CheckpointableCommand`` of exactly ``Job.command``, with
    the resources of its cell; the jobs that start together are submitted as one job array per resources (one sbatch
    call each). The jobs outlive the runner: each submission is recorded beside its run folder
    (``<run folder>.slurm.json``: job id, submit time, command), and a runner started again re-attaches to a recorded
    job that squeue still lists with the same command. The record is written, with the sbatch call's mark, before
    sbatch is called: a runner killed before sbatch returned finds its jobs by that mark (their SLURM comment). A
    recorded job that ended is judged by its run folder, as a local run is. A run folder claimed by another recorded
    job that still runs, or by a live ``run.lock``, is not submitted to."""

    poll_s = 5.0  # between two squeue calls

    pending_warn_s = 600.0  # a job pending longer than this is named with squeue's reason, once
    result_grace_s = 30.0  # an ended job's result is looked for this long (NFS caches a folder's listing)

    def __init__(self, work: Path, cells: list[dict], partition: str | None = None,
                 active_jobs: Callable[[], dict[str, str]] | None = None, sbatch: dict[str, str] | None = None,
                 marked_jobs: Callable[[], dict[str, list[str]]] | None = None, python: str | None = None):
        self.work, self.partition, self.sbatch = work, partition, dict(sbatch or {})
        self.python = python or sys.executable  # the interpreter's path on the nodes
        self.cells = {(cell["preset"], cell["name"]): cell for cell in cells}
        self.active_jobs = active_jobs or slurm_active_jobs
        self.marked_jobs = marked_jobs or slurm_marked_jobs
        self._active: dict[str, str] = {}
        self._asked = -math.inf
        self._marked: dict[str, list[str]] = {}
        self._marks_asked = -math.inf
        self._warned: set[str] = set()
        self._pending_since: dict[str, float] = {}  # job id → when it was first seen pending
        self._tested: dict[Resources, str | None] = {}  # --dry-run: sbatch --test-only's word per resources
        self._missing_since: dict[str, float] = {}  # ended job id → when its result was first looked for, missing
        self._pending_warned: set[str] = set()
        self._live: set[str] = set()  # job ids submitted or attached here that have not ended: what goes on at a stop

    def resources(self, job: Job) -> Resources:
        """The cell's ``cpus``, ``mem_gb``, ``time_min`` and ``gpus``; the time from the job's cost when not given."""
        cell = self.cells.get((job.preset, job.cell), {})
        minutes = time_limit(TIME_MARGIN * 60 * job.hours)  # a GPU cell's: from its GPU-hours
        return Resources(cell.get("cpus", 1), cell.get("mem_gb", MEM_GB), cell.get("time_min", minutes),
                         cell.get("gpus", 0))

    def record_path(self, job: Job) -> Path:
        return job.work_dir(self.work).with_suffix(SLURM_RECORD)

    def record(self, job: Job) -> dict | None:
        """The job's record when it names a SLURM job, else None."""
        record = self._read_record(job)
        return record if isinstance(record.get("job_id"), str) else None

    def _read_record(self, job: Job) -> dict:
        try:
            record = json.loads(self.record_path(job).read_text())
        except (OSError, ValueError):
            return {}  # none yet (it is written whole, by a rename)
        return record if isinstance(record, dict) else {}

    def _write_record(self, job: Job, record: dict) -> None:
        path = self.record_path(job)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, path)

    def found_by_mark(self, job: Job) -> str | None:
        """The id of the SLURM job a runner killed as it submitted ``job`` left unrecorded (its record holds only the
        sbatch call's mark and the job's index in it), when squeue lists it; else None."""
        record = self._read_record(job)
        if "job_id" in record or not isinstance(record.get("mark"), str):
            return None
        index = str(record.get("index"))
        return next((job_id for job_id in self.marked().get(record["mark"], [])
                     if job_id.partition("_")[2] == index or ("_" not in job_id and index == "0")), None)

    def marked(self) -> dict[str, list[str]]:
        """squeue's jobs by submission mark, asked at most every ``poll_s`` seconds; SlurmError when it cannot say."""
        if time.time() - self._marks_asked >= self.poll_s:
            self._marked, self._marks_asked = self.marked_jobs(), time.time()
        return self._marked

    def active(self) -> dict[str, str]:
        """squeue's answer, asked at most every ``poll_s`` seconds; SlurmError when it cannot say."""
        if time.time() - self._asked >= self.poll_s:
            self._active, self._asked = self.active_jobs(), time.time()
        return self._active

    def running(self, job: Job) -> tuple[str, str | None] | None:
        """(SLURM job id, its state: None while squeue cannot say) of the recorded job of ``job``'s run folder when
        it may still run, else None."""
        record = self.record(job)
        if record is None:
            return None
        try:
            state = self.active().get(record["job_id"])
        except SlurmError:
            return record["job_id"], None
        return (record["job_id"], state) if state else None

    def claim(self, job: Job) -> str | None:
        """Why ``job``'s run folder is not ours to submit to (a recorded job that may still run, of another command
        or not re-attached; a live run.lock), or None."""
        from harness import rundir

        running = self.running(job)
        if running:
            job_id, state = running
            return (f"SLURM job {job_id} ({state}) runs it" if state else
                    f"squeue cannot say whether its SLURM job {job_id} still runs")
        lock = job.work_dir(self.work) / rundir.LOCK_FILE
        holder = rundir.lock_holder(lock)
        if holder and "(SLURM job" in holder:
            return f"process {holder} holds its {rundir.LOCK_FILE}: that job still runs (wait for it, or scancel it)"
        if holder:
            return (f"process {holder} holds its {rundir.LOCK_FILE} (a lock left by a crash on another host: delete "
                    f"{lock})")
        return None

    def attach(self, jobs: list[Job]) -> dict[Job, SlurmRun]:
        """The jobs whose recorded SLURM job is still queued or running the job's command; SystemExit (one line)
        when squeue cannot say, since submitting then could run a job twice."""
        try:
            self._active, self._asked = self.active_jobs(), time.time()
            found = {job: job_id for job in jobs if (job_id := self.found_by_mark(job))}
        except SlurmError as error:
            raise cli.Refusal(f"Error: cannot tell which recorded SLURM jobs still run ({error}); nothing was "
                             "submitted: run the same command again once squeue answers") from None
        attached = {}
        for job in jobs:
            if job in found:
                self._write_record(job, {**self._read_record(job), "job_id": found[job]})
            record = self.record(job)
            state = self._active.get(record["job_id"]) if record else None
            if state and record.get("command") == self.command(job):
                attached[job] = self._run(record["job_id"])
                print(f"{time.strftime('%H:%M:%S')} attach {job.preset}/{job.cell}/{job.name} → SLURM job "
                      f"{record['job_id']} ({state}), submitted {record.get('submitted')}", flush=True)
        return attached

    def _run(self, job_id: str) -> SlurmRun:
        import submitit

        paths = submitit.SlurmJob(self.work / SUBMITIT / "%j", job_id).paths
        self._live.add(job_id)
        return SlurmRun(job_id, paths.stdout, paths.result_pickle)

    def command(self, job: Job) -> list[str]:
        """The job's run command, with the nodes' interpreter and as many threads as its cell's ``cpus``."""
        cpus = self.resources(job).cpus
        _, *rest = job.command(self.work)
        return [self.python, *(f"threads={cpus}" if part == "threads=1" else part for part in rest)]

    def executor(self, jobs: list[Job], mark: str):
        """A submitit executor for ``jobs`` (of one resources): their resources, the runner's sbatch options, and
        ``mark`` as their SLURM comment."""
        import submitit

        resources = self.resources(jobs[0])
        executor = submitit.AutoExecutor(folder=self.work / SUBMITIT / "%j", cluster="slurm",
                                         slurm_max_num_timeout=MAX_REQUEUES, slurm_python=shlex.quote(self.python))
        executor.update_parameters(
            name=array_name(jobs), timeout_min=resources.time_min, nodes=1, tasks_per_node=1,
            cpus_per_task=resources.cpus, mem_gb=resources.mem_gb, slurm_stderr_to_stdout=True,
            slurm_setup=slurm_setup(), slurm_array_parallelism=len(jobs),
            slurm_additional_parameters={**self.sbatch, "comment": mark},
            **({"gpus_per_node": resources.gpus} if resources.gpus else {}),
            **({"slurm_partition": self.partition} if self.partition else {}))
        return executor

    def start_all(self, starts: list[tuple[Job, int]]) -> list[SlurmRun | None]:
        """Submit the jobs, one sbatch call (a job array, of one job or more) per resources. None for a job not
        submitted: with a REFUSED line when its run folder is claimed (``claim``), with a REJECTED line when sbatch
        refuses its call (the runner goes on with the others)."""
        handles: dict[Job, SlurmRun | None] = {}
        groups: dict[Resources, list[Job]] = {}
        for job, _ in starts:
            claim = self.claim(job)
            if claim:
                print(f"{time.strftime('%H:%M:%S')} REFUSED {job.preset}/{job.cell}/{job.name}: not submitted, "
                      f"{shown(job.work_dir(self.work))} is claimed: {claim}", flush=True)
                handles[job] = None
            else:
                groups.setdefault(self.resources(job), []).append(job)
        for resources, jobs in groups.items():  # arrays of at most MAX_ARRAY_TASKS tasks
            for first in range(0, len(jobs), MAX_ARRAY_TASKS):
                chunk = jobs[first:first + MAX_ARRAY_TASKS]
                handles.update(zip(chunk, self.submit(resources, chunk)))
        return [handles[job] for job, _ in starts]

    def submit(self, resources: Resources, jobs: list[Job]) -> list[SlurmRun | None]:
        """One sbatch call for ``jobs``, of ``resources``: each job's record is written first with the call's mark
        and the job's index in it, then with its SLURM job id once sbatch answered."""
        from submitit.core.utils import FailedJobError, FailedSubmissionError

        mark, when = f"{MARK}{uuid.uuid4().hex[:12]}", time.strftime("%Y-%m-%d %H:%M:%S")
        earlier = {job: self._read_record(job) for job in jobs}
        commands = {job: self.command(job) for job in jobs}
        executor = self.executor(jobs, mark)
        with signals_held():
            for index, job in enumerate(jobs):
                job.work_dir(self.work).mkdir(parents=True, exist_ok=True)
                self._write_record(job, {"mark": mark, "index": index, "submitted": when, "command": commands[job]})
            try:
                with executor.batch():
                    submitted = [executor.submit(CheckpointableCommand(commands[job], str(ROOT))) for job in jobs]
            except (FailedJobError, FailedSubmissionError, OSError) as error:
                self._rejected(resources, jobs, earlier, error)
                return [None] * len(jobs)
            for index, (job, handle) in enumerate(zip(jobs, submitted)):
                self._write_record(job, {"job_id": handle.job_id, "mark": mark, "index": index, "submitted": when,
                                         "command": commands[job]})
        return [self._submitted(job, handle.job_id, resources, earlier[job].get("job_id"))
                for job, handle in zip(jobs, submitted)]

    def _rejected(self, resources: Resources, jobs: list[Job], earlier: dict[Job, dict], error: Exception) -> None:
        """The records of ``jobs``, whose sbatch call was refused, as before the call; a REJECTED line each."""
        for job in jobs:  # as before the call
            if earlier[job]:
                self._write_record(job, earlier[job])
            else:
                self.record_path(job).unlink()
            print(f"{time.strftime('%H:%M:%S')} REJECTED {job.preset}/{job.cell}/{job.name}: sbatch refused "
                  f"it ({resources}): {sbatch_said(error)}", flush=True)

    def _submitted(self, job: Job, job_id: str, resources: Resources, before: str | None) -> SlurmRun:
        """The run of ``job``, submitted as ``job_id``, said in one line (with the recorded job ``before`` it, which
        ended before the run did)."""
        self._active[job_id] = "PENDING"  # until squeue is asked again
        resumes = (job.work_dir(self.work) / "checkpoint.pt").exists()
        print(f"{time.strftime('%H:%M:%S')} submit {job.preset}/{job.cell}/{job.name} → SLURM job "
              f"{job_id} ({resources})" + (f"; its SLURM job {before} ended before the run did"
                                           + (": it resumes from its checkpoint" if resumes else "")
                                           if before else ""), flush=True)
        return self._run(job_id)

    def poll(self, run: SlurmRun, job: Job) -> Ended | None:
        if self._listed(run, job):
            return None
        ended = self._outcome(run)
        if ended is not None:
            self._live.discard(run.job_id)
        return ended

    def _listed(self, run: SlurmRun, job: Job) -> bool:
        """Whether squeue lists the run's job (named once when it has pended too long), or cannot say (said once:
        the controller busy or restarting, asked again at the next poll)."""
        try:
            if run.job_id in self.active():
                if self.active()[run.job_id] == "PENDING":
                    self.warn_pending(run, job)
                return True
        except SlurmError as error:
            if str(error) not in self._warned:
                self._warned.add(str(error))
                print(f"{time.strftime('%H:%M:%S')} squeue failed, SLURM jobs assumed still running: {error}",
                      flush=True)
            return True
        return False

    def _outcome(self, run: SlurmRun) -> Ended | None:
        """How the ended job's command ended, by submitit's result (None while its result may still show up)."""
        from submitit.core.utils import FailedJobError, pickle_load

        try:
            outcome, value = pickle_load(run.result)
        except (OSError, EOFError, ValueError):  # no result: the job was killed, or a shared file system lags
            return self._without_result(run)
        if outcome == "success":
            return Ended(True, f"SLURM job {run.job_id}", run.log)
        said = [line.strip() for line in str(value).splitlines() if line.strip()]  # a traceback: the run's stderr last
        last = said[-1].removeprefix(f"{FailedJobError.__module__}.{FailedJobError.__name__}: ") if said else outcome
        return Ended(False, f"SLURM job {run.job_id}: {last}", run.log)

    def _without_result(self, run: SlurmRun) -> Ended | None:
        """An ended job without a result: None for ``result_grace_s`` (asked again at the next poll), then failed,
        with the campaign's line from its log when there is one."""
        since = self._missing_since.setdefault(run.job_id, time.time())
        if time.time() - since < self.result_grace_s:
            return None  # asked again at the next poll
        said = next((line for line in reversed(_log_lines(run.log)) if line.startswith(MARK)), None)
        return Ended(False, f"SLURM job {run.job_id} ended without a result ("
                     + (said or "cancelled, out of time or memory, or its node failed") + ")", run.log)

    def warn_pending(self, run: SlurmRun, job: Job) -> None:
        """One line, once, for a job pending longer than ``pending_warn_s``: squeue's reason, and for a reason that
        no waiting cures (resources the partition cannot give) what to do."""
        since = self._pending_since.setdefault(run.job_id, time.time())
        if run.job_id in self._pending_warned or time.time() - since < self.pending_warn_s:
            return
        self._pending_warned.add(run.job_id)
        reason = slurm_pending_reason(run.job_id)
        advice = (f"; it may never start: scancel {run.job_id}, then fix the cell's cpus, mem_gb, time_min or gpus, "
                  "or the sbatch options" if reason in NEVER_STARTS else "")
        print(f"{time.strftime('%H:%M:%S')} PENDING {job.preset}/{job.cell}/{job.name}: SLURM job {run.job_id} has "
              f"waited {(time.time() - since) / 60:.0f} min: {reason}{advice}", flush=True)

    def stop(self, runs: list[SlurmRun]) -> None:
        """Say which jobs go on: the runner's, and any submitted or attached here that it has not yet taken into
        its list (a stop signal may arrive between sbatch's answer and then)."""
        live = sorted({run.job_id for run in runs} | self._live, key=lambda job_id: (len(job_id), job_id))
        if live:
            print(f"{time.strftime('%H:%M:%S')} stopped: {len(live)} SLURM jobs go on ({', '.join(live)}); the same "
                  "command re-attaches to them", flush=True)

    def describe(self, job: Job) -> str:
        """``--dry-run``'s word on a job to run: its resources, and whether a recorded job is re-attached or claims
        its folder, or it is to be submitted."""
        resources, record = self.resources(job), self.record(job)
        try:
            state = self.active().get(record["job_id"]) if record else None
        except SlurmError as error:
            return f"{resources}; SLURM job {record['job_id']}: state unknown ({error})"
        if state and record.get("command") == self.command(job):
            return f"{resources}; SLURM job {record['job_id']} ({state}): re-attach"
        try:
            found = self.found_by_mark(job)
        except SlurmError as error:
            return f"{resources}; a submission cut short: whether squeue lists its job is unknown ({error})"
        if found:
            return f"{resources}; SLURM job {found}, submitted by a runner killed as it recorded it: re-attach"
        claim = self.claim(job)
        if claim:
            return f"{resources}; refused: {claim}"
        rejected = self.test_only(job)
        if rejected:
            return f"{resources}; sbatch would refuse it: {rejected}"
        return f"{resources}; to submit" + (f" again (SLURM job {record['job_id']} ended)" if record else "")

    def test_only(self, job: Job) -> str | None:
        """sbatch's error for the job's submission, asked with ``sbatch --test-only`` (nothing is submitted) once
        per resources; None when sbatch would take it (or is not here to ask)."""
        resources = self.resources(job)
        if shutil.which("sbatch") is None or shutil.which("srun") is None:  # submitit's executor needs both
            return None
        if resources not in self._tested:
            executor = self.executor([job], f"{MARK}test-only")._executor  # submitit's: the script it would submit
            script = executor._make_submission_file_text(shlex.join(self.command(job)), uuid.uuid4().hex)
            with tempfile.NamedTemporaryFile("w", suffix=".sh") as handle:
                handle.write(script)
                handle.flush()
                try:
                    tested = subprocess.run(["sbatch", "--test-only", handle.name], capture_output=True, text=True,
                                            timeout=60)
                    unanswered = any(text in tested.stderr for text in UNANSWERED)
                    self._tested[resources] = (sbatch_said(RuntimeError(tested.stderr))
                                               if tested.returncode and not unanswered else None)
                except (OSError, subprocess.TimeoutExpired):
                    self._tested[resources] = None
        return self._tested[resources]


def submission_calls(launcher: SlurmLauncher, jobs: list[Job]) -> str:
    """How ``jobs`` started together are submitted: one sbatch call (a job array) per resources."""
    groups = Counter(launcher.resources(job) for job in jobs)
    return (f"{len(groups)} sbatch calls, a job array per resources"
            + (f" ({'; '.join(f'{count} × {resources}' for resources, count in groups.most_common())})"
               if groups else ""))


def sbatch_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> dict[str, str]:
    """--account, --qos, --constraint and each --sbatch OPTION=VALUE as sbatch's long options (submitit's
    ``slurm_additional_parameters``); a malformed --sbatch is refused in one line."""
    options = {name: value for name, value in (("account", args.account), ("qos", args.qos),
                                                ("constraint", args.constraint)) if value is not None}
    for given in args.sbatch:
        name, equals, value = given.partition("=")
        name = name.strip().lstrip("-")
        if not equals or not re.fullmatch(r"[a-z][a-z0-9-]*", name) or not value:
            parser.error(f"--sbatch {given!r} is not valid; expected OPTION=VALUE, an sbatch long option without its "
                         "dashes, e.g. --sbatch reservation=mine")
        if name in CAMPAIGN_OPTIONS:
            parser.error(f"--sbatch {given!r}: {name} is set by the campaign (--partition; the cell's cpus, "
                         "mem_gb, time_min and gpus; its job arrays and their marks)")
        options[name.replace("-", "_")] = value
    return options
