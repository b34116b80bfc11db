"""What a campaign prints of its queue before it runs (a row per job, the totals), and ``--summary``'s paragraph."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness.campaign.jobs import Job
from harness.campaign.planning import MARGIN, plan
from harness.campaign.queue import GPU_OVERRIDE
from harness.campaign.records import damaged_finish, finished
from harness.campaign.slurm import SlurmLauncher, submission_calls


@dataclass
class QueueListing:
    """The queue as a campaign is about to run it: ``plan``'s jobs with their states, and how they would run."""

    planned: list[tuple[Job, str]]
    todo: list[Job]  # the jobs to run
    stale: list[tuple[Path, str, list[str]]]  # runs of another configuration (folder, cell, how they differ)
    fits: set[Job] | None  # --finish-within's: the jobs that fit
    work: Path
    parallel: int
    at: str  # how ``parallel`` was given: "--jobs N" or "--max-jobs N"
    slurm: SlurmLauncher | None = None  # --launcher slurm's: its word on each job to run (``describe``)


def print_queue(listing: QueueListing, show_all: bool, finish_within: float | None, factor: float | None) -> None:
    """The totals of what is left to run, then a row per job (the done ones counted, listed with ``show_all``)."""
    rows, done = _rows(listing, show_all, finish_within)
    _print_totals(listing, finish_within, factor)
    print(f"{done} runs done{'' if show_all else ' (--all lists them)'}; the queue, in order:", *rows, sep="\n",
          flush=True)


def _rows(listing: QueueListing, show_all: bool, finish_within: float | None) -> tuple[list[str], int]:
    """(The queue's rows, the number of jobs done)."""
    preset_width = max((len(job.preset) for job, _ in listing.planned), default=0)
    cell_width = max((len(job.cell) for job, _ in listing.planned), default=0)
    mismatched = {folder for folder, _, _ in listing.stale}
    rows, done = [], 0
    for job, state in listing.planned:
        state = _state(listing, job, _work_state(job, state, listing.work, mismatched), finish_within)
        done += state.startswith("done")
        if state.startswith("done") and not show_all:
            continue
        name = "" if state.startswith("done") else job.name
        cost = f"{job.hours:6.2f} {'CPU' if job.gpu_hours is None else 'GPU'}-h"
        rows.append(f"{job.priority}  {job.preset:<{preset_width}} {job.cell:<{cell_width}} {name:<12} "
                    f"{job.steps:>6} steps {cost}  {state}")
    return rows, done


def _work_state(job: Job, state: str, work: Path, mismatched: set[Path]) -> str:
    """A job to run's state by its work folder: a run of another configuration there, a run finished (whole or
    damaged), a checkpoint to resume from; other states as they are."""
    if not state.startswith("to run"):
        return state
    if job.work_dir(work) in mismatched:
        return "refused: its work folder holds a run of another configuration"
    if finished(job, work):
        return "finished, to be exported"
    damage = damaged_finish(job, work)
    if damage:
        return f"damaged ({damage}): to be moved aside and run again"
    if (job.work_dir(work) / "checkpoint.pt").exists():
        return "resumable" + state[len("to run"):]
    return state


def _state(listing: QueueListing, job: Job, state: str, finish_within: float | None) -> str:
    """``state`` with whether the job fits in --finish-within, and on SLURM the launcher's word on it."""
    if listing.fits is not None and job in listing.todo:
        state += "" if job in listing.fits else f"; does not fit in {finish_within:g} h"
    if listing.slurm is not None and state.startswith(("to run", "resumable")):
        state += f"; {listing.slurm.describe(job)}"
    return state


def _print_totals(listing: QueueListing, finish_within: float | None, factor: float | None) -> None:
    """The runs to go and their hours, this CPU's speed factor, what fits in --finish-within, and on SLURM how the
    first jobs are submitted."""
    hours = sum(job.cpu_hours for job in listing.todo if GPU_OVERRIDE not in job.overrides)
    gpu_jobs = [job for job, state in listing.planned
                if GPU_OVERRIDE in job.overrides and not state.startswith("done")]
    print(f"{len(listing.todo)} runs to go: {hours:.1f} CPU-hours, {hours / listing.parallel:.1f} h at {listing.at}")
    if gpu_jobs:
        gpu_hours = sum(job.gpu_hours or 0.0 for job in gpu_jobs)
        print(f"GPU jobs to go: {len(gpu_jobs)}, {gpu_hours:.1f} GPU-hours projected (cells' gpu_hours), one GPU each")
    if factor:
        from tasks.models.linear import cpu_model

        print(f"this CPU ({cpu_model()}) runs cells at {factor:.2f}× the cost recorded elsewhere (median over cells "
              "measured on both, any queue's); cells measured only elsewhere are scaled by that")
    if listing.fits is not None:
        print(f"{len(listing.fits)} of them fit in {finish_within:g} h at {listing.at} "
              f"(each run's cost × {MARGIN}, for the episodes it has left)")
    if listing.slurm is not None:
        first = [job for job in listing.todo if listing.fits is None or job in listing.fits][:listing.parallel]
        print(f"{len(first)} jobs submitted at the start, {submission_calls(listing.slurm, first)}; each later refill "
              "is one call per resources of the jobs it starts")


def plan_summary(queue: dict, results: Path, only: set[str] | None = None) -> str:
    """The queue's (or its ``only`` cells') size and cost in one paragraph, at the costs measured so far (each cell's
    on whatever CPU ran it, unscaled: the same text on every machine), and how a cluster receives it whole: README's
    cluster numbers."""
    planned, _ = plan(queue, results, only)
    cpu_jobs = [(job, state.startswith("done")) for job, state in planned if job.gpu_hours is None]
    gpu_jobs = [job for job, state in planned if job.gpu_hours is not None and not state.startswith("done")]
    to_go = [job for job, done in cpu_jobs if not done] + gpu_jobs
    committed = sum(job.cpu_hours for job, done in cpu_jobs if done)
    remaining = sum(job.cpu_hours for job, done in cpu_jobs if not done)
    calls = submission_calls(SlurmLauncher(Path("work"), queue["cells"]), to_go)
    return (f"The queue is {committed + remaining:.0f} CPU-hours at the costs measured so far ({committed:.0f} of "
            f"them committed; {remaining:.0f} to go, in {len(to_go) - len(gpu_jobs)} jobs) and "
            f"{sum(job.gpu_hours for job in gpu_jobs):.0f} projected GPU-hours ({len(gpu_jobs)} GPU jobs). Submitted "
            f"whole (`--max-jobs {len(to_go)}`), its {len(to_go)} jobs go in {calls}.")
