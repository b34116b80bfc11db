"""``python -m harness.campaign``'s command line, and one campaign of a queue: plan, print, refuse, then run."""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import textwrap
import time
from dataclasses import replace
from pathlib import Path

from omegaconf import OmegaConf

from harness import cli, locations
from harness.campaign import cells as composed
from harness.campaign.cells import cell_identity, cell_refusal, node_refusal
from harness.campaign.exports import clean_exports
from harness.campaign.jobs import Job
from harness.campaign.launch import Launcher
from harness.campaign.listing import QueueListing, plan_summary, print_queue
from harness.campaign.local import LocalLauncher
from harness.campaign.locks import campaign_lock
from harness.campaign.planning import breadth_first, fit_plan, plan
from harness.campaign.queue import GPU_OVERRIDE, check_cells, check_only, load_queue, queue_cells
from harness.campaign.records import REPLACED, replace_stale, work_mismatch
from harness.campaign.reports import retry_stale_reports
from harness.campaign.runner import exit_stopped, run
from harness.campaign.slurm import MAX_JOBS, SlurmLauncher, sbatch_options
from harness.campaign.text import shown

MAX_PARALLEL = 10_000  # the most --jobs or --max-jobs accepts
MAX_HOURS = 10_000.0  # the most --hours or --finish-within accepts (over a year)
SLURM_COMMANDS = ("sbatch", "squeue", "srun")  # what --launcher slurm calls: on PATH where it runs (a login node)


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    args = parser.parse_args(argv)
    # --stop-after counts from the command's start, planning included: a window's end is the machine's
    args.stop_at = None if args.stop_after is None else time.time() + 3600 * args.stop_after
    args.work, args.results = args.work.resolve(), args.results.resolve()  # the runs start in the repository root
    _check_launcher(parser, args)
    queue = load_queue(args.queue)
    only = check_only(queue, args.only, args.queue)
    check_cells(queue, args.queue)
    if args.summary:
        print(textwrap.fill(plan_summary(queue, args.results, only), width=116, break_long_words=False,
                            break_on_hyphens=False))
        return
    if args.dry_run:  # reads only: no lock, so that a running campaign can be watched
        sys.exit(campaign(queue, args, only))
    sys.exit(_locked_campaign(queue, args, only))


def _parser() -> cli.Parser:
    description = sys.modules[__package__].__doc__  # the package's (harness/campaign/__init__.py, loaded first)
    parser = cli.Parser(prog="python -m harness.campaign", description=description,
                        details='docs/usage.md, "The campaign", and harness/campaign/__init__.py',
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("queue", nargs="?", default="paper", help="conf/campaign/<queue>.yaml, or a YAML path")
    parser.add_argument("--jobs", type=cli.number(int, low=1, high=MAX_PARALLEL), default=2,
                        help="runs at a time (one core each)")
    parser.add_argument("--only", default=None,
                        help="comma list of the queue's priorities and cells to run, e.g. P1,P2 or "
                             "P7,fig8_ablations/h10_group_pg (case-sensitive)")
    parser.add_argument("--breadth", action="store_true",
                        help="within a priority, every cell's first seeds before any cell's next ones")
    parser.add_argument("--dry-run", action="store_true", help="print the queue and its cost, run nothing")
    parser.add_argument("--all", action="store_true", help="list the cells already done too (else only counted)")
    parser.add_argument("--summary", action="store_true",
                        help="print the queue's size and cost in one paragraph (README's cluster numbers), run nothing")
    parser.add_argument("--replace", action="store_true",
                        help="move runs of another configuration than their cell's (refused otherwise) to "
                             "<work>/.replaced/<time>/ and run their seeds again")
    parser.add_argument("--hours", type=cli.number(float, low=0, high=MAX_HOURS), default=None,
                        help="start no run after this many hours (running ones finish); 0: only export finished runs")
    parser.add_argument("--finish-within", type=cli.number(float, low=0, high=MAX_HOURS), default=None,
                        metavar="HOURS",
                        help="start only runs expected to end within this many hours (a hard session end)")
    parser.add_argument("--stop-after", type=cli.number(float, low=0, high=MAX_HOURS), default=None, metavar="HOURS",
                        help="after this many hours, stop the runs, each at a checkpoint it saves then, and start no "
                             "more (the same command resumes them)")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local",
                        help="where runs run: local (--jobs at a time on this machine) or slurm (a SLURM job each)")
    parser.add_argument("--partition", default=None, help="--launcher slurm: the partition (default: the cluster's)")
    parser.add_argument("--account", default=None, help="--launcher slurm: the account to charge (sbatch --account)")
    parser.add_argument("--qos", default=None, help="--launcher slurm: the quality of service (sbatch --qos)")
    parser.add_argument("--constraint", default=None, help="--launcher slurm: node features (sbatch --constraint)")
    parser.add_argument("--sbatch", action="append", default=[], metavar="OPTION=VALUE",
                        help="--launcher slurm: any other sbatch option, without its dashes (repeatable), e.g. "
                             "--sbatch reservation=mine --sbatch exclude=node07")
    parser.add_argument("--node-python", default=None, metavar="PATH",
                        help="--launcher slurm: the Python interpreter's path on the nodes (default: this one's)")
    parser.add_argument("--max-jobs", type=cli.number(int, low=1, high=MAX_PARALLEL), default=None,
                        help=f"--launcher slurm: SLURM jobs queued or running at once (default {MAX_JOBS})")
    parser.add_argument("--work", type=Path, default=locations.HOME / "runs" / "campaign",
                        help="run directories")
    parser.add_argument("--results", type=Path, default=locations.HOME / "results",
                        help="where finished runs are copied")
    return parser


def _check_launcher(parser: cli.Parser, args: argparse.Namespace) -> None:
    """The --launcher slurm options refused with the local launcher, and refused without SLURM's commands (but for
    --dry-run); ``args.sbatch_options`` and ``args.max_jobs`` set."""
    slurm_only = {"--partition": args.partition, "--max-jobs": args.max_jobs, "--account": args.account,
                  "--qos": args.qos, "--constraint": args.constraint, "--sbatch": args.sbatch or None,
                  "--node-python": args.node_python}
    given = [option for option, value in slurm_only.items() if value is not None]
    if args.launcher == "local" and given:
        parser.error(f"{given[0]} is for --launcher slurm")
    if args.launcher == "slurm" and args.stop_after is not None:
        parser.error("--stop-after is for the local launcher (a SLURM job stops at its own time limit, checkpointed)")
    args.sbatch_options = sbatch_options(parser, args)
    args.max_jobs = args.max_jobs or MAX_JOBS
    if args.launcher == "slurm" and not args.dry_run:
        missing = [name for name in SLURM_COMMANDS if shutil.which(name) is None]
        if missing:
            raise cli.Refusal(f"Error: --launcher slurm: {', '.join(missing)} not found on PATH; run the campaign "
                             "where SLURM's commands are (a login node), or without --launcher slurm")


def _locked_campaign(queue: dict, args: argparse.Namespace, only: set[str] | None) -> int:
    """``campaign`` holding the locks of its cells, after removing the export temporaries a campaign cut short left
    in them and regenerating the reports a failed report left out of date; the exit code."""
    cells = queue_cells(queue, only)
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a kill, a login session's end: the locks go with the runner
        signal.signal(signum, exit_stopped)
    with campaign_lock(args.work, args.results, cells):
        for folder in clean_exports(args.results, cells):
            print(f"removed {shown(folder)}, an export cut short", flush=True)
        failed_reports = retry_stale_reports(args.results)
        return campaign(queue, args, only) or (1 if failed_reports else 0)


def _cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def share_gpu(job: Job, share: int, gpu_bytes: float) -> Job:
    """A GPU job run beside ``share - 1`` others on one GPU (a local campaign's ``--jobs`` on a GPU machine): its
    seeds computed together in chunks whose memory estimate fits its share of the GPU (``task.seed_chunk``, a key
    that moves only float rounding and that the report ignores), so that several cells fill a GPU that one cell's
    kernel launches leave idle, and none runs out of memory. Other jobs, and a cell that sets its own chunk, as
    they are."""
    if (share <= 1 or GPU_OVERRIDE not in job.overrides
            or any(override.startswith("task.seed_chunk=") for override in job.overrides)):
        return job
    from tasks.memory import fitting_chunk

    config = OmegaConf.create(cell_identity(job.preset, job.overrides))
    if config.task.get("name") != "token_reversal":
        return job
    config.seeds = job.seeds
    chunk = fitting_chunk(config, gpu_bytes / share)
    return replace(job, overrides=(*job.overrides, f"task.seed_chunk={chunk}"))


def campaign(queue: dict, args: argparse.Namespace, only: set[str] | None) -> int:
    """Plan, print, refuse or replace runs of another configuration, then run (``main``'s body); the exit code."""
    from tasks.models.linear import cpu_model

    stale: list[tuple[Path, str, list[str]]] = []
    planned, factor = plan(queue, args.results, only, cpu_model(), stale)
    planned = _arranged(planned, args)
    composed.CELLS.save()  # what ``plan`` and ``share_gpu`` composed
    todo = [job for job, state in planned if state.startswith("to run")]
    stale += _work_stale(todo, args.work)
    if stale and args.replace and not args.dry_run:
        _replace(stale, args.work, args.results)
        return campaign(queue, argparse.Namespace(**{**vars(args), "replace": False}), only)  # once
    launcher, parallel, at = _launcher(queue, args)
    slurm = launcher if isinstance(launcher, SlurmLauncher) else None
    fits = _fitting(todo, parallel, args)
    print_queue(QueueListing(planned, todo, stale, fits, args.work, parallel, at, slurm), args.all,
                args.finish_within, factor)
    if stale:
        _refuse_stale(stale, args.work)
        return 2
    if _refused_cells(todo, on_nodes=slurm is not None and not args.dry_run):
        return 2
    if args.dry_run or not todo:  # costs: as ``plan`` says
        return 0

    def costs() -> dict[tuple[str, str], float]:  # after each finished run: the cells' costs as measured by now
        return {(job.preset, job.cell): job.cost for job, _ in plan(queue, args.results, only, cpu_model())[0]}

    return 1 if run(todo, parallel, args.work, args.results, args.hours, args.finish_within, costs, launcher,
                    args.stop_at) else 0


def _arranged(planned: list[tuple[Job, str]], args: argparse.Namespace) -> list[tuple[Job, str]]:
    """``plan``'s jobs as this campaign runs them: breadth first with --breadth; on a machine with a GPU, its GPU
    jobs sharing it (``share_gpu``); on one without, its GPU cells left to --launcher slurm."""
    if args.breadth:
        planned = breadth_first(planned)
    slurm = args.launcher == "slurm"
    if not slurm and args.jobs > 1 and _cuda_here():  # GPU cells side by side on this machine's GPU
        from tasks.memory import machine_memory

        gpu_bytes = machine_memory("cuda")[0]
        planned = [(share_gpu(job, args.jobs, gpu_bytes), state) for job, state in planned]
    if not slurm and not _cuda_here():  # a GPU cell's runs would fail here: they wait for a cluster or a GPU
        planned = [(job, "GPU cell: for --launcher slurm (no GPU here)" if GPU_OVERRIDE in job.overrides
                    and state.startswith("to run") else state) for job, state in planned]
    return planned


def _work_stale(todo: list[Job], work: Path) -> list[tuple[Path, str, list[str]]]:
    """(Folder, cell, differing keys) of each job to run whose work folder holds a run of another configuration."""
    return [(job.work_dir(work), f"{job.preset}/{job.cell}", changes) for job in todo
            if (changes := work_mismatch(job, work))]


def _fitting(todo: list[Job], parallel: int, args: argparse.Namespace) -> set[Job] | None:
    """The jobs that fit in --finish-within (``fit_plan``); None without it."""
    return None if args.finish_within is None else set(fit_plan(todo, parallel, 3600 * args.finish_within,
                                                                args.work))


def _replace(stale: list[tuple[Path, str, list[str]]], work: Path, results: Path) -> None:
    """--replace: the runs of another configuration moved aside (``replace_stale``), each said in one line."""
    aside = replace_stale(stale, work, results)
    for folder, cell, changes in stale:
        print(f"replaced {shown(folder)} (another configuration than {cell}: {'; '.join(changes)}) → "
              f"{shown(aside)}", flush=True)


def _launcher(queue: dict, args: argparse.Namespace) -> tuple[Launcher, int, str]:
    """(The launcher of --launcher, the runs or jobs it keeps going at once, the option that says how many)."""
    if args.launcher == "slurm":
        launcher = SlurmLauncher(args.work, queue["cells"], args.partition, sbatch=args.sbatch_options,
                                 python=args.node_python)
        return launcher, args.max_jobs, f"--max-jobs {args.max_jobs}"
    return LocalLauncher(args.work), args.jobs, f"--jobs {args.jobs}"


def _refuse_stale(stale: list[tuple[Path, str, list[str]]], work: Path) -> None:
    """One line each for the runs of another configuration than their cell's: nothing runs."""
    for folder, cell, changes in stale:
        print(f"Error: {shown(folder)} holds a run of another configuration than the cell {cell} "
              f"({'; '.join(changes)}); it is not counted: --replace moves it to "
              f"{shown(work / REPLACED)}/ and runs its seeds again", file=sys.stderr, flush=True)


def _refused_cells(todo: list[Job], on_nodes: bool) -> bool:
    """Whether a cell to run would be refused at its runs' start (``cell_refusal``; its GPU cells only where this
    machine has a GPU), or, ``on_nodes``, on a node without network (``node_refusal``); each said in one line,
    before any run starts: its jobs would each be refused at their start."""
    cells_to_run = {(job.preset, job.cell): job for job in todo if GPU_OVERRIDE not in job.overrides or _cuda_here()}
    refused = [(cell, why) for cell, job in cells_to_run.items() if (why := cell_refusal(job.preset, job.overrides))]
    if on_nodes:  # an LLM cell's model and data fetched here, for nodes without network
        refused += [(cell, why) for cell, job in {(job.preset, job.cell): job for job in todo}.items()
                    if (why := node_refusal(job.preset, job.overrides))]
    composed.CELLS.save()
    for (preset, name), why in refused:
        print(f"Error: cell {preset}/{name} would be refused at its start: {why}; fix its overrides",
              file=sys.stderr, flush=True)
    return bool(refused)
