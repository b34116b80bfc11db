"""``python -m harness.campaign [QUEUE] [--jobs N] [--dry-run] [--only P1,P2]``: run a queue of paper cells to the end.
``python -m harness.campaign [QUEUE] --launcher slurm [--partition P] [--max-jobs N]``: the same, as SLURM jobs.

A queue (``conf/campaign/<QUEUE>.yaml``, default ``paper``) lists cells in priority order: a preset, the overrides
that pick one point of its sweep, how many seeds, and the measured CPU cost per seed-episode. Each cell's seeds are
split into runs of ``chunk`` seeds (``seed_offset`` ranges, merged by the report), run ``--jobs`` at a time as
``python -m harness experiment=<preset> <overrides> seeds=<n> seed_offset=<o> trainer.resume=auto`` in
``runs/campaign/<preset>/<cell>/seeds<a>-<b>/``, one core and one thread each. A finished run is copied to
``results/runs/<preset>/<cell>/seeds<a>-<b>/`` (summary.json, identity.json, config.yaml, gzipped metrics.csv: what
is committed) and the preset's report is regenerated into ``results/<preset>/``.

Everything is decided from files: the same command after an interruption (Ctrl-C, a kill, the end of a session)
exports runs that finished meanwhile, skips the exported ones, resumes the interrupted ones from their checkpoints
and starts the rest. ``--breadth`` runs each cell's first seed range before any cell's second (within a priority),
so a campaign stopped early compares all of a priority's methods on the same seeds. ``--hours H`` starts no run
after H hours; ``--finish-within H`` starts only runs expected to end within H hours (a session or a batch
allocation with a hard end, where a run cut off loses its work folder): each run's time is its cell's measured cost
plus a margin (``MARGIN``), for the episodes its checkpoint has left, and a run that does not fit is skipped for a
later one that does; with ``--dry-run`` it prints that plan. Ctrl-C or SIGTERM stops the runs, each at its last
checkpoint (SLURM jobs go on, below). Seeds already in
``results/runs/<preset>/<cell>/`` from earlier runs of the same configuration count as done, so a cell is extended,
not rerun. ``--dry-run`` prints the queue: what is done, what is left and its estimated CPU-hours.

On a SLURM cluster, ``--launcher slurm`` (from a login node; the work folder on a file system the nodes share) submits
each run as a SLURM job of the same command, through submitit (its log in ``<work>/.submitit/<job id>/``),
``--max-jobs`` (default 50) queued or running at once, on ``--partition`` (default: the cluster's); the runner exports
and reports the finished runs as a local one does. A cell may ask for ``cpus`` (default 1), ``mem_gb`` (4), ``time_min``
(default: its cost for the run's episodes × 2, ``TIME_MARGIN``, at least 10) and ``gpus`` (0, or 1: one GPU per job).
A job near its time limit, or preempted, is checkpointed and requeued under its job id (``CheckpointableCommand``:
SLURM's SIGUSR2 has the run save a checkpoint at its next step and stop), and resumes, at most ``MAX_REQUEUES``
times. A
*GPU cell* (``gpus: 1`` with the override ``device=cuda``, the two together) runs its seeds batched on the GPU,
``chunk`` seeds per job (a cell's own ``chunk`` overrides the queue's: all its seeds in one job), and gives its
projected ``gpu_hours`` (all seeds), its jobs' time limit; a local campaign leaves GPU cells to ``--launcher slurm``
unless this machine has a GPU. Each job is recorded in ``<work>/<preset>/<cell>/seeds<a>-<b>.slurm.json`` (job id,
submit time, command) as it is submitted. The jobs outlive the runner: Ctrl-C or SIGTERM stops the runner only, saying
so, and the same command re-attaches to each recorded job that squeue still lists with that command; a recorded job that
ended is judged by its run folder as a local run is (exported, else submitted again: it resumes from its checkpoint). A
run folder claimed by a live ``run.lock`` or by a recorded job squeue lists that is not re-attached is refused in one
line (``REFUSED``), never submitted to twice. ``--dry-run --launcher slurm`` prints each job's resources and whether it
is re-attached or to be submitted.

Nothing is trusted that was not checked. Every cell's overrides are composed before anything runs (a typo is
refused in one line naming the cell), and ``--only`` names must be priorities or ``<preset>/<cell>`` cells of the
queue (case-sensitive). A run
counts as done, is exported or is skipped only when its recorded configuration (``identity.json``, else the
``config.yaml`` of runs older than it, compared as ``harness.rundir`` fingerprints them) is the cell's as the queue
composes it now, and its step budget is the cell's: an exported run must match on everything but its seed range and
the keys the report ignores (``harness.report.load.IGNORED``, such as ``flush_denormal``), and have a readable
summary and metrics; a run in the work folder must match exactly, seeds and steps included (its own launch would
refuse it otherwise). An exported run of fewer steps is not counted and its seeds run again (the report ignores it
beside full ones). Any other mismatch, in results/runs or in the work folder, is refused in one line naming the
differing keys, and nothing starts: ``--replace`` moves every such run aside, to
``<work>/.replaced/<time>/{results,work}/...`` (nothing is deleted), and runs the cells' seeds again. A damaged run
under results/runs (an unreadable summary.json, metrics file or record of its configuration) is skipped with a
one-line warning naming it. A cell with a value its run would refuse at its start (it composes, but its task or
algorithm rejects it: ``build_task`` on PyTorch's ``meta`` device says so) is refused in one line before anything
runs, by ``--dry-run`` too.

One campaign at a time per cell: a campaign holds ``.campaign-locks/<preset>/<cell>.lock`` (pid and host; a lock
whose process is gone is taken over) under ``--work`` and ``--results`` for every cell of the priorities it runs, and
a second campaign that wants one of them refuses in one line naming the cell (``--dry-run`` reads only and takes no
lock). Campaigns of other cells share the folders: other ``--only`` priorities, a queue of other cells, a scorecard.
Exports and reports are written one at a time (``.campaign-locks/results.lock`` under ``--results``; a campaign
waits for another's, saying so). At its start a campaign removes the export temporaries that campaigns cut short
left behind in its cells (``results/runs/<preset>/<cell>/seeds<a>-<b>[.<pid>-<id>][.old].tmp``). An export is
written to a folder of its own and renamed into place. A report that fails is named in one line (``REPORT FAILED``)
and the campaign exits non-zero at its end, as it does for a failed run; its folder is listed in
``<results>/.stale-reports.json`` and the next campaign regenerates it first.
"""

from __future__ import annotations

import argparse
import copy
import errno
import functools
import gzip
import json
import math
import os
import queue
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from harness import cli, locations
from harness.process import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
QUEUES = locations.CONF / "campaign"
DONE = ("completed", "diverged")
MARGIN = 1.25  # --finish-within: a run's wall time over its cell's mean measured cost (seeds and machine load vary)
FIXED = ("logger=none", "threads=1", "trainer.resume=auto", "trainer.progress=false")  # every run's, see Job.command
BUDGET = ("seeds", "seed_offset", "trainer.steps")  # compared apart from a run's identity: seed ranges merge
LOCKS = ".campaign-locks"  # under --work and --results: <preset>/<cell>.lock per cell held; results.lock
OLD_LOCK = ".campaign.lock"  # a whole folder's, held by campaigns of earlier versions: a live one excludes all
SCORECARD_PRESETS = "scorecard_"  # presets of the scorecard's suites (harness.scorecard): no report of the campaign's
STALE_REPORTS = ".stale-reports.json"  # under --results: report folders out of date (a failed report, a stopped runner)
REPLACED = ".replaced"  # under --work: where --replace moves runs of another configuration
EXPORT_TMP = re.compile(r"^seeds\d+(?:-\d+)?(?:\.\d+-[0-9a-f]+)?(?:\.old)?\.tmp$")  # export's temporaries only
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # the runner's: Ctrl-C, a kill, a login session's end
RUN_ENV = {"WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}  # every run's, either launcher (and ``run_environment``)
CELL_KEYS = ("priority", "preset", "name", "seeds", "cost", "overrides", "chunk", "cpus", "mem_gb", "time_min", "gpus",
             "gpu_hours", "like", "scale")
GPU_OVERRIDE = "device=cuda"  # a GPU cell's: its runs batch their seeds on the GPU (``gpus: 1``)
MEM_GB = 4  # a SLURM job's memory where its cell names none (conf/hydra/launcher/submitit_slurm_cpu.yaml's)
TIME_MARGIN = 2.0  # a SLURM job's time limit over its cell's cost: a node's speed is not measured, and a run cut off
MIN_TIME_MIN = 10  # at its limit loses the episodes since its last checkpoint; at least this (start-up, imports)
TIME_RUNGS_MIN = (10, 15, 20, 30, 45, 60, 90, 120, 180, 240, 360, 480, 720, 960, 1440)  # a computed time limit is
# rounded up to the next of these (beyond, to whole days): jobs of similar length ask the same, so they share an array
MAX_REQUEUES = 20  # a SLURM job requeued at its time limit or preemption (checkpointed first), at most this many
# times: a job whose limit is too short for its start-up would otherwise loop
MAX_JOBS = 50  # --max-jobs: SLURM jobs queued or running at once
MAX_PARALLEL = 10_000  # the most --jobs or --max-jobs accepts
MAX_HOURS = 10_000.0  # the most --hours or --finish-within accepts (over a year)
SUBMITIT = ".submitit"  # under --work: submitit's folder per SLURM job (its pickles and log)
MARK = "tpo-bench:"  # the comment of a campaign's SLURM jobs starts so; the rest names their sbatch call
SLURM_RECORD = ".slurm.json"  # beside a run folder: the SLURM job that runs it (job id, submit time, command)
ENDED = ("BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY",
         "TIMEOUT")  # SLURM states of a job that no longer runs (squeue lists them a while); PREEMPTED may requeue


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """A local run's environment: ``environ`` with ``RUN_ENV`` and this repository first on ``PYTHONPATH``. Paths
    already there stay after it: packages a machine provides outside the project's environment (``make gpu-site``'s
    on a GPU machine) reach the runs as they reach the campaign."""
    earlier = environ.get("PYTHONPATH")
    return {**environ, **RUN_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), *([earlier] if earlier else [])])}


def slurm_setup() -> list[str]:
    """The shell lines a SLURM job runs before its run: ``run_environment`` for the job's inherited environment,
    the Hugging Face libraries offline (an LLM cell's model and data were fetched on the login node:
    ``harness.llm.offline``), and a one-line failure on a node that does not see this checkout at its path."""
    from harness.llm.offline import NODE_ENVIRONMENT

    unseen = (f"{MARK} {ROOT} is not on $(hostname): the checkout and --work must be on a file system the nodes "
              "share, at the same path")
    return [*(f"export {name}={shlex.quote(value)}" for name, value in {**RUN_ENV, **NODE_ENVIRONMENT}.items()),
            f"export PYTHONPATH={shlex.quote(str(ROOT))}${{PYTHONPATH:+:$PYTHONPATH}}",
            f"[ -d {shlex.quote(str(ROOT / 'harness'))} ] || {{ echo \"{unseen}\" >&2; exit 1; }}"]


@dataclass(frozen=True)
class Job:
    """One run: ``seeds`` seeds from ``offset`` of one cell."""

    priority: str
    preset: str
    cell: str
    overrides: tuple[str, ...]
    offset: int
    seeds: int
    steps: int
    cost: float  # CPU-seconds per seed-episode
    gpu_hours: float | None = None  # a GPU cell's job: its seeds' share of the cell's projected GPU-hours

    @property
    def name(self) -> str:
        return f"seeds{self.offset}" + (f"-{self.offset + self.seeds - 1}" if self.seeds > 1 else "")

    def work_dir(self, work: Path) -> Path:
        return work / self.preset / self.cell / self.name

    def result_dir(self, results: Path) -> Path:
        return results / "runs" / self.preset / self.cell / self.name

    @property
    def cpu_hours(self) -> float:
        return self.cost * self.seeds * self.steps / 3600

    @property
    def hours(self) -> float:
        """The hours the job is expected to take on its device: a GPU cell's GPU-hours, else its CPU-hours."""
        return self.cpu_hours if self.gpu_hours is None else self.gpu_hours

    def command(self, work: Path) -> list[str]:
        return [sys.executable, "-m", "harness", f"experiment={self.preset}", *self.overrides, f"seeds={self.seeds}",
                f"seed_offset={self.offset}", *FIXED, f"hydra.run.dir={hydra_value(str(self.work_dir(work)))}"]


def hydra_value(text: str) -> str:
    """``text`` as the value of a Hydra override: as it is when Hydra's grammar reads it so, else quoted (a scorecard
    candidate's folder ``tpo,eta=0.5`` would otherwise be read as a list and a key)."""
    if re.fullmatch(r"[\w/.+\-:@%~]+", text):
        return text
    # inside quotes a backslash escapes only a quote or the backslashes before one (and before the closing quote)
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped) + "'"


def load_queue(name: str) -> dict:
    path = Path(name) if name.endswith(".yaml") else QUEUES / f"{name}.yaml"
    if not path.exists():
        choices = ", ".join(sorted(p.stem for p in QUEUES.glob("*.yaml")))
        raise cli.Refusal(f"Error: campaign queue {name!r} not found; valid choices: {choices}")
    queue = yaml.safe_load(path.read_text()) or {}
    seen: dict[tuple[str, str], dict] = {}
    for index, cell in enumerate(queue.get("cells") or ()):
        where = f"{path.name}: cells[{index}]"
        missing = [key for key in ("priority", "preset", "name", "seeds", "cost") if key not in cell]
        if missing:
            raise cli.Refusal(f"Error: {where} has no {missing[0]}; a cell needs priority, preset, name, seeds, cost")
        if isinstance(cell["cost"], bool) or not isinstance(cell["cost"], (int, float)) or not cell["cost"] > 0:
            raise cli.Refusal(f"Error: {where}.cost={cell['cost']!r} is not valid; expected CPU-seconds per "
                             "seed-episode > 0")
        earlier = seen.get((cell["preset"], cell["name"]))
        if earlier is not None and (list(cell.get("overrides") or ()) != list(earlier.get("overrides") or ())
                                    or not cell["seeds"] > earlier["seeds"]):
            raise cli.Refusal(f"Error: {where} repeats the cell {cell['preset']}/{cell['name']}; a cell listed again "
                             f"takes it further: the same overrides and more seeds than its {earlier['seeds']}")
        seen[(cell["preset"], cell["name"])] = cell
        check_resources(cell, where)
    cells = {f"{cell['preset']}/{cell['name']}" for cell in queue.get("cells") or ()}
    for index, cell in enumerate(queue.get("cells") or ()):
        if "like" in cell and cell["like"] not in cells:
            raise cli.Refusal(f"Error: {path.name}: cells[{index}].like={cell['like']!r} is not a cell of the queue; "
                             "expected <preset>/<cell>, a cell whose measured cost this one's estimate scales")
    return queue


def check_resources(cell: dict, where: str) -> None:
    """SystemExit (one line naming the key and its valid values) for a cell key that is not a valid one, or a SLURM
    resource (``cpus``, ``mem_gb``, ``time_min``, ``gpus``) of the wrong type or range: a typo would otherwise be
    ignored, or refused by sbatch only after the jobs before it were submitted."""
    unknown = [key for key in cell if key not in CELL_KEYS]
    if unknown:
        raise cli.Refusal(f"Error: {where} has an unknown key {unknown[0]!r}; valid keys: {', '.join(CELL_KEYS)}")

    def integer(value) -> bool:
        return isinstance(value, int) and not isinstance(value, bool)

    for key, valid, expected in (
            ("cpus", lambda v: integer(v) and v >= 1, "an integer >= 1 (CPUs per job, default 1)"),
            ("mem_gb", lambda v: (integer(v) or isinstance(v, float)) and 0 < v < math.inf,
             f"a number > 0 (GB of memory per job, default {MEM_GB})"),
            ("time_min", lambda v: integer(v) and v >= 1,
             "an integer >= 1 (minutes per job; default: the cell's cost for the job's episodes, with a margin)"),
            ("gpus", lambda v: integer(v) and v in (0, 1), "0 or 1 (a GPU cell's jobs get one GPU each; default 0)"),
            ("chunk", lambda v: integer(v) and v >= 1, "an integer >= 1 (seeds per job; default: the queue's chunk)"),
            ("gpu_hours", lambda v: (integer(v) or isinstance(v, float)) and 0 < v < math.inf,
             "a number > 0 (the cell's projected GPU-hours, all its seeds)"),
            ("like", lambda v: isinstance(v, str) and v.count("/") == 1, "<preset>/<cell>, a cell of the queue"),
            ("scale", lambda v: (integer(v) or isinstance(v, float)) and 0 < v < math.inf,
             "a number > 0 (this cell's cost over its like cell's)")):
        if key in cell and not valid(cell[key]):
            raise cli.Refusal(f"Error: {where}.{key}={cell[key]!r} is not valid; expected {expected}")
    gpu, on_cuda = cell.get("gpus", 0) == 1, GPU_OVERRIDE in (cell.get("overrides") or ())
    if gpu != on_cuda:  # the GPU a job asks for and the device its run uses go together
        raise cli.Refusal(f"Error: {where} has gpus: {cell.get('gpus', 0)} but "
                         f"{'no' if gpu else 'the'} override {GPU_OVERRIDE}; a GPU cell has both, a CPU cell neither")
    if "gpu_hours" in cell and not gpu:
        raise cli.Refusal(f"Error: {where}.gpu_hours is for a GPU cell (gpus: 1, {GPU_OVERRIDE})")
    if "scale" in cell and "like" not in cell:
        raise cli.Refusal(f"Error: {where}.scale is for a cell with like: <preset>/<cell> (whose cost it scales)")


class CellError(Exception):
    """A cell whose overrides do not compose (one line: what Hydra or the harness said)."""


CELL_CACHE = "campaign-cells"  # under the user's cache: each cell's composed identity and refusal, by source
SOURCES = ("harness", "algorithms", "tasks", "common")  # packages whose code composes and checks a cell


@functools.cache
def source_fingerprint() -> str:
    """sha256 of every config and source file that composing or checking a cell reads (conf/, and the .py and .yaml
    files of ``SOURCES``) and of the installed distributions' names and versions (Hydra, its plugins, torch): an
    edit or an upgrade gives another fingerprint, so a cached cell is never stale."""
    import hashlib
    import importlib.metadata
    import importlib.util

    roots = [locations.CONF, *(Path(importlib.util.find_spec(name).submodule_search_locations[0])
                               for name in SOURCES)]
    digest = hashlib.sha256()
    installed = sorted(f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions())
    digest.update("\n".join(installed).encode())
    for root in roots:
        for path in sorted(p for pattern in ("*.py", "*.yaml") for p in root.rglob(pattern)
                           if "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(root.parent)}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


class CellCache:
    """Composed cells and checked exported runs, kept across processes (``<cache>/campaign-cells/<fingerprint>.json``;
    the cache is ``$TPO_BENCH_CACHE``, else ``~/.cache/tpo-bench``): Hydra takes about half a second a composition
    and a queue holds hundreds of cells and exported runs, so a campaign's start (``--dry-run`` too) would otherwise
    spend minutes redoing what it did last time. Cells are keyed by preset and overrides, runs by the paths, sizes,
    inodes and change times of every file their check reads, all under the fingerprint of the code, configs and
    installed packages (``source_fingerprint``). Only what the code and configs alone decide is kept: an identity,
    a cell that would start, a run's check (a refusal can depend on this machine, such as MNIST not installed, and
    is made again). An unreadable file is ignored and rewritten; the ``KEEP`` newest files are kept."""

    KEEP = 4  # fingerprints' files: the code of a few checkouts or versions

    def __init__(self):
        self.entries: dict[str, dict] | None = None
        self.changed = False

    def path(self) -> Path:
        from tasks.mnist_data import cache_root

        return cache_root() / CELL_CACHE / f"{source_fingerprint()}.json"

    def get(self, key: list, compose: Callable[[], dict]) -> dict:
        """The entry cached under ``key`` (JSON values), else ``compose()``'s, remembered."""
        if self.entries is None:
            try:
                self.entries = json.loads(self.path().read_text())
            except (OSError, ValueError):
                self.entries = {}
            if not isinstance(self.entries, dict):
                self.entries = {}
        key = json.dumps(key)
        if key not in self.entries:
            self.entries[key] = compose()
            self.changed = True
        return self.entries[key]

    def set(self, key: list, entry: dict) -> None:
        self.get(key, lambda: entry)
        self.entries[json.dumps(key)] = entry
        self.changed = True

    def save(self) -> None:
        """Write what was composed since the last save, whole (a temporary renamed into place); a cache that
        cannot be written only costs the next start its compositions."""
        if not self.changed:
            return
        path = self.path()
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(self.entries))
            os.replace(temporary, path)
            self.changed = False
            older = sorted(path.parent.glob("*.json"), key=lambda other: other.stat().st_mtime, reverse=True)
            for other in older[self.KEEP:]:
                other.unlink(missing_ok=True)
        except OSError:
            temporary.unlink(missing_ok=True)


CELLS = CellCache()


def cell_identity(preset: str, overrides: tuple[str, ...]) -> dict:
    """The identity (``harness.rundir.identity``) of the cell's runs as ``Job.command`` composes them; CellError
    when the overrides do not compose or resolve. Composed once per code and config version (``CellCache``)."""
    def compose() -> dict:
        from harness import rundir
        from harness.config import compose_config

        try:
            return {"identity": rundir.identity(compose_config([f"experiment={preset}", *overrides, *FIXED]))}
        except Exception as error:  # noqa: BLE001 - Hydra, OmegaConf and the harness raise many kinds: one line
            return {"error": _one_line(error)}

    entry = CELLS.get(["identity", preset, list(overrides)], compose)
    if "error" in entry:
        raise CellError(entry["error"])
    return copy.deepcopy(entry["identity"])


def cell_refusal(preset: str, overrides: tuple[str, ...]) -> str | None:
    """Why a run of the cell would be refused at its start (a value its task or algorithm rejects, such as
    ``task.alpha=abc``: it composes, but ``build_task`` checks it), in one line; None when it would start. Built on
    PyTorch's ``meta`` device: nothing is allocated. A cell that would start is remembered per code and config
    version (``CellCache``); a refusal is checked again each time (it may be this machine's: data not installed)."""
    key = ["starts", preset, list(overrides)]
    if CELLS.get(key, lambda: {}).get("starts"):
        return None
    import torch

    from harness.config import build_task, compose_config

    try:
        build_task(compose_config([f"experiment={preset}", *overrides, *FIXED]), device=torch.device("meta"))
    except Exception as error:  # noqa: BLE001 - the harness's ConfigError, or what a task raises: one line
        return _one_line(error)
    CELLS.set(key, {"starts": True})
    return None


def node_refusal(preset: str, overrides: tuple[str, ...]) -> str | None:
    """Why the cell's runs could not start on a node without network (an LLM cell's model or data neither in this
    machine's Hugging Face caches nor reachable: ``harness.llm.offline``), in one line; None when they can. What it
    fetched is said in a line each."""
    if cell_identity(preset, overrides).get("task", {}).get("kind") != "llm":
        return None
    from common.checks import ConfigError
    from harness.config import compose_config
    from harness.llm.offline import node_ready

    try:
        for line in node_ready(compose_config([f"experiment={preset}", *overrides, *FIXED])):
            print(f"{preset} {' '.join(overrides)}: {line}", flush=True)
    except ConfigError as error:
        return _one_line(error)
    return None


def submission_calls(launcher: "SlurmLauncher", jobs: list[Job]) -> str:
    """How ``jobs`` started together are submitted: one sbatch call (a job array) per resources."""
    groups = Counter(launcher.resources(job) for job in jobs)
    return (f"{len(groups)} sbatch calls, a job array per resources"
            + (f" ({'; '.join(f'{count} × {resources}' for resources, count in groups.most_common())})"
               if groups else ""))


def plan_summary(queue: dict, results: Path) -> str:
    """The queue's size and cost in one paragraph, at the costs measured so far (each cell's on whatever CPU ran it,
    unscaled: the same text on every machine), and how a cluster receives it whole: README's cluster numbers."""
    planned, _ = plan(queue, results)
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


def _one_line(error: BaseException) -> str:
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause).strip():
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text


def preset_steps(preset: str, overrides: tuple[str, ...]) -> int:
    return int(cell_identity(preset, overrides)["trainer"]["steps"])


def check_cells(queue: dict, name: str) -> None:
    """Compose every cell of the queue (every priority's: all feed the cost calibration); SystemExit naming the
    first cell whose overrides do not compose."""
    for index, cell in enumerate(queue.get("cells") or ()):
        try:
            cell_identity(cell["preset"], tuple(cell.get("overrides", ())))
        except CellError as error:
            raise cli.Refusal(f"Error: {Path(name).name if name.endswith('.yaml') else name + '.yaml'}: cells[{index}] "
                             f"({cell['preset']}/{cell['name']}) does not compose: {error}; fix its overrides"
                             ) from None
    CELLS.save()


def check_only(queue: dict, only: str | None, name: str) -> set[str] | None:
    """The ``--only`` selection: priorities (``P7``) and cells (``<preset>/<cell>``); SystemExit listing the
    queue's priorities for a name that is neither."""
    if only is None:
        return None
    chosen = {item.strip() for item in only.split(",") if item.strip()}
    cells = queue.get("cells") or ()
    priorities = list(dict.fromkeys(str(cell["priority"]) for cell in cells))
    unknown = sorted(chosen - set(priorities) - {f"{cell['preset']}/{cell['name']}" for cell in cells})
    if unknown or not chosen:
        raise cli.Refusal(f"Error: --only {only!r}: {', '.join(unknown) or 'nothing'} is neither a priority nor a "
                         f"cell (<preset>/<cell>) of {Path(name).name if name.endswith('.yaml') else name + '.yaml'}; "
                         f"valid priorities (case-sensitive): {', '.join(priorities)}")
    return chosen


def selected(cell: dict, only: set[str] | None) -> bool:
    """Whether ``--only`` (None: everything) selects the queue cell, by its priority or as ``<preset>/<cell>``."""
    return only is None or str(cell["priority"]) in only or f"{cell['preset']}/{cell['name']}" in only


def _strip(config: dict, keys: tuple[str, ...]) -> dict:
    """A copy of the identity ``config`` without the dotted ``keys``."""
    config = copy.deepcopy(config)
    for dotted in keys:
        *parents, leaf = dotted.split(".")
        node = config
        for parent in parents:
            node = node.get(parent, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return config


def recorded_identity(folder: Path) -> dict | None:
    """The identity a run folder records: ``identity.json``'s config, else (runs older than it) its composed
    ``config.yaml``, through ``harness.rundir`` as a launch reads it; None when it has neither readable."""
    from harness import rundir

    try:
        record = json.loads((folder / rundir.IDENTITY_FILE).read_text())
        if isinstance(record, dict) and isinstance(record.get("config"), dict):
            return rundir._without_volatile(record["config"])  # as rundir.plan_run reads a recorded identity
    except (OSError, ValueError):
        pass
    for name in ("config.yaml", ".hydra/config.yaml"):
        if (folder / name).is_file():
            try:
                return rundir.identity(OmegaConf.load(folder / name))
            except Exception:  # noqa: BLE001 - damaged or unresolvable: not a configuration to trust
                return None
    return None


def damaged_record(folder: Path) -> tuple[str, str] | None:
    """(file, what is wrong) when the run's record of its configuration is damaged: an ``identity.json`` that is not
    tpo-bench's JSON record, or (runs older than it) a ``config.yaml`` that does not load as a whole configuration
    (a file cut short may still parse, as fewer keys); None when it is readable or absent."""
    from harness import rundir

    path = folder / rundir.IDENTITY_FILE
    if path.exists():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            return rundir.IDENTITY_FILE, f"unreadable ({type(error).__name__})"
        return None if isinstance(record, dict) and isinstance(record.get("config"), dict) else (
            rundir.IDENTITY_FILE, "not a run's identity record")
    for name in ("config.yaml", ".hydra/config.yaml"):
        if (folder / name).is_file():
            try:
                config = OmegaConf.load(folder / name)
            except Exception as error:  # noqa: BLE001 - YAML and OmegaConf raise many kinds
                return name, f"unreadable ({type(error).__name__})"
            missing = [key for key in ("task", "algorithm", "seeds", "trainer") if key not in config]
            return (name, f"not a whole configuration (no {', '.join(missing)})") if missing else None
    return None


def differences(recorded: dict | None, expected: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """``key: recorded → expected`` for every identity key that differs, less the dotted ``ignore`` prefixes
    (``["no readable identity.json or config.yaml"]`` where nothing is recorded; [] when they match)."""
    from harness import rundir

    if recorded is None:
        return ["no readable identity.json or config.yaml"]
    if rundir.fingerprint(recorded) == rundir.fingerprint(expected):
        return []
    changes = rundir.differing_keys(recorded, expected)
    return [change for change in changes
            if not any(key == prefix or key.startswith(prefix + ".") for key in [change.split(":", 1)[0]]
                       for prefix in ignore)]


def _exported_ignores() -> tuple[str, ...]:
    """What an exported run may differ in from its cell: its seed range and step budget (compared apart) and the
    keys the report ignores when it merges runs into a cell."""
    from harness.report.load import IGNORED

    return (*BUDGET, *IGNORED)


def work_mismatch(job: Job, work: Path) -> list[str]:
    """How the run in the job's work folder differs from the job (its identity composed, seeds and steps included);
    [] when it matches or the folder holds no recorded run yet."""
    from harness import rundir

    folder = job.work_dir(work)
    if not (folder / rundir.IDENTITY_FILE).exists() and not (folder / "summary.json").exists():
        return []  # nothing recorded: a fresh start (or a launch that failed before recording anything)
    if not (folder / rundir.IDENTITY_FILE).exists():
        status = rundir._status(folder)
        if status == "failed" and not rundir.has_results(folder):
            return []  # a launch that failed before any work: the harness starts it afresh
    expected = _strip(cell_identity(job.preset, job.overrides), BUDGET)
    expected.update(seeds=job.seeds, seed_offset=job.offset)
    expected.setdefault("trainer", {})["steps"] = job.steps
    return differences(recorded_identity(folder), expected)


_warned: set[str] = set()  # damaged runs already warned about (a running campaign re-plans after every run)


def _warn(path: Path, problem: str) -> None:
    key = f"{path}: {problem}"
    if key not in _warned:
        _warned.add(key)
        print(f"warning: skipped {_shown(path)}: {problem}", file=sys.stderr, flush=True)


def _metrics_problem(path: str, stamp: list[int]) -> str | None:
    """Why the metrics file at ``path`` cannot be read whole (a gzip file is decompressed to its end, which checks
    its length and CRC), or None; read once per version of the file (``stamp``: size, modification and change
    times, inode; ``CellCache``)."""
    return CELLS.get(["metrics", path, stamp], lambda: {"problem": _read_metrics_problem(path)})["problem"]


def _read_metrics_problem(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as packed:
                header = packed.readline()
                while packed.read(1 << 20):
                    pass
        else:
            with open(path, "rb") as raw:
                header = raw.readline()
    except (OSError, EOFError, ValueError) as error:
        return f"{type(error).__name__}: {str(error) or 'truncated'}"
    return None if header.startswith(b"step,seed") else "no step,seed header"


def _read_run(summary: Path) -> dict | None:
    """The finished run's summary.json, or None (with a one-line warning) when it or its metrics are damaged: one
    bad file never blocks a queue."""
    try:
        record = json.loads(summary.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        if record.get("status") in DONE:
            seeds, steps = record["seeds"], record["steps"]
            if not (isinstance(seeds, list) and all(isinstance(seed, int) for seed in seeds)
                    and isinstance(steps, int)):
                raise ValueError("seeds or steps of the wrong type")
    except (OSError, ValueError, KeyError, TypeError) as error:
        _warn(summary, f"unreadable ({type(error).__name__}: {(str(error) or 'empty').splitlines()[0]})")
        return None
    if record.get("status") not in DONE:
        return record
    metrics = next((summary.parent / name for name in ("metrics.csv.gz", "metrics.csv")
                    if (summary.parent / name).exists()), None)
    if metrics is None:
        _warn(summary.parent, "a finished run without metrics.csv.gz")
        return None
    stat = metrics.stat()
    problem = _metrics_problem(str(metrics), [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino])
    if problem:
        _warn(metrics, f"unreadable ({problem})")
        return None
    return record


@dataclass
class CellRuns:
    """What ``exported`` found below a cell's folder."""

    seeds: set[int]  # of the finished runs that count as done
    spent: dict[str, tuple[float, int]]  # per CPU model: CPU-seconds, seed-episodes
    stale: list[tuple[Path, list[str]]] = field(default_factory=list)  # runs of another configuration, how they differ


def exported(cell_dir: Path, steps: int, expected: dict | None = None) -> CellRuns:
    """Seeds of the finished runs of ``steps`` episodes already below ``cell_dir`` (any seed-range layout, earlier
    runs included) whose configuration is ``expected`` (a cell's identity; None: not checked), and what those runs
    cost: per recorded CPU model ("" where none was recorded), CPU-seconds (wall seconds for runs older than
    ``cpu_seconds``) and seed-episodes, of the runs trained on a CPU (a GPU run's seeds count, its cost does not). A
    shorter run's seeds are run again (the report ignores it beside full ones) but its cost counts; a run of another
    configuration (a longer one too) counts for nothing and is listed in ``stale``; a damaged one is skipped with a
    warning."""
    from harness.rundir.outputs import summary_files

    found = CellRuns(set(), {})
    for summary in summary_files(cell_dir):
        if summary.parent.name.endswith(".tmp"):  # an export cut short (``export`` writes there, then renames)
            continue
        record = _read_run(summary)
        if record is None or record.get("status") not in DONE:
            continue
        if expected is not None:
            damage = damaged_record(summary.parent)
            if damage:
                _warn(summary.parent / damage[0], damage[1])
                continue
            problem = _exported_problem(summary.parent)
            if problem:
                if problem not in _warned:
                    _warned.add(problem)
                    print(f"warning: {problem}; its seeds are not counted as done", file=sys.stderr, flush=True)
                continue
            changes = differences(recorded_identity(summary.parent), expected, _exported_ignores())
            if not changes and record["steps"] > steps:
                changes = [f"trainer.steps: {record['steps']} → {steps}"]
            if changes:
                found.stale.append((summary.parent, changes))
                continue
        if record["steps"] >= steps:
            found.seeds.update(record["seeds"])
        seconds = record.get("cpu_seconds") or record.get("wall_seconds")  # wall: runs from before cpu_seconds
        hardware = record.get("hardware") or {}
        if seconds and hardware.get("device", "cpu") == "cpu":  # a GPU run's CPU seconds say nothing of a CPU's
            model = hardware.get("cpu") or ""
            total, work = found.spent.get(model, (0.0, 0))
            found.spent[model] = (total + seconds, work + len(record["seeds"]) * record["steps"])
    return found


CHECKED_FILES = ("summary.json", "metrics.csv.gz", "metrics.csv", "config.yaml", ".hydra/config.yaml",
                 "identity.json")  # every file ``finished_run_problem`` reads


def _exported_problem(folder: Path) -> str | None:
    """``finished_run_problem`` of an exported run, read once per version of its files (``CellCache``: a campaign
    plans again after every run, and at every start)."""
    from harness.report.load import finished_run_problem

    stamp = [[(info := path.stat()).st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino] if path.exists()
             else None for path in (folder / name for name in CHECKED_FILES)]
    return CELLS.get(["run", str(folder.resolve()), stamp],
                     lambda: {"problem": finished_run_problem(folder)})["problem"]


def _rate(spent: dict[str, tuple[float, int]], keep) -> float | None:
    """CPU-seconds per seed-episode over the CPU models ``keep`` accepts (None without any)."""
    total = sum(seconds for model, (seconds, _) in spent.items() if keep(model))
    work = sum(episodes for model, (_, episodes) in spent.items() if keep(model))
    return total / work if work else None


def plan(queue: dict, results: Path, only: set[str] | None = None, cpu_model: str = "",
         stale: list[tuple[Path, str, list[str]]] | None = None) -> tuple[list[tuple[Job, str]], float | None]:
    """Every job of the queue with its state (exported, or to run), and this CPU's speed factor.

    A job's cost is its cell's measured CPU-seconds per seed-episode on ``cpu_model`` where the cell has runs from
    it; else its other runs' cost times the factor: the median, over every cell under ``results/runs`` measured on
    both (any queue's), of this CPU's cost over the others' (hosts and code versions differ up to 3x; None where no
    cell has both, and costs from other CPUs are taken as they are); else, for a cell with ``like: <preset>/<cell>``,
    that cell's cost by the same rules times ``scale`` (a cell of another group size or epoch count, scaled as
    measured); else the queue's estimate, calibrated: times the median of cost over estimate of the queue's cells
    with a cost by the first two rules (``calibrate``). The estimates were written on some CPU, at some time, a
    priority's together: its measured cells say how this CPU compares (unscaled where none is measured).

    A cell listed again further down the queue (same overrides, more seeds) is taken further there: that listing
    holds the seeds from the earlier listing's count to its own, so a queue can bring every cell of a sweep to 10
    seeds before any to 30.

    Only runs of the cell's configuration count (``exported``); the others, of the cells ``only`` selects, are
    appended to ``stale`` as (folder, cell, differing keys)."""
    def rates(spent: dict[str, tuple[float, int]]) -> tuple[float | None, float | None]:  # (this CPU, the others)
        return (_rate(spent, lambda model: bool(cpu_model) and model == cpu_model),
                _rate(spent, lambda model: not cpu_model or model != cpu_model))

    measured = [rates(exported(cell_dir, 0).spent) for cell_dir in sorted((results / "runs").glob("*/*"))
                if cell_dir.is_dir() and not cell_dir.name.endswith(".tmp")]
    ratios = [here / other for here, other in measured if here and other]
    factor = statistics.median(ratios) if ratios else None
    cells, calibrations, costs, listed = [], [], {}, {}
    last = {f"{cell['preset']}/{cell['name']}": int(cell["seeds"]) for cell in queue["cells"]}
    for cell in queue["cells"]:  # every priority's, for the calibration of the estimates
        key = f"{cell['preset']}/{cell['name']}"
        first_seed = listed.get(key, 0)  # a cell listed again: the seeds beyond its earlier listing's
        listed[key] = int(cell["seeds"])
        end = int(cell["seeds"]) if int(cell["seeds"]) < last[key] else math.inf  # seeds a later listing holds
        steps = preset_steps(cell["preset"], tuple(cell.get("overrides", ())))
        runs = exported(results / "runs" / cell["preset"] / cell["name"], steps,
                        cell_identity(cell["preset"], tuple(cell.get("overrides", ()))))
        finished, spent = {seed for seed in runs.seeds if first_seed <= seed < end}, runs.spent
        if stale is not None and selected(cell, only) and not first_seed:
            stale.extend((folder, key, changes) for folder, changes in runs.stale)
        cost_here, cost_other = rates(spent)
        if cost_here:
            cost, note = cost_here, ""
        elif cost_other:
            cost = cost_other * (factor or 1.0)
            note = f" (cost × {factor:.2f} for this CPU)" if factor else " (cost from other CPUs)" if cpu_model else ""
        else:
            cost, note = None, ""
        cells.append((cell, first_seed, steps, finished, cost, note))
        if cost and not first_seed:
            costs[key] = (cost, "measured here" if cost_here else note.strip(" ()") or "measured elsewhere")
            calibrations.append((cell["priority"], bool(cost_here), cost / float(cell["cost"])))
    jobs = []
    for cell, first_seed, steps, finished, cost, note in cells:
        if not selected(cell, only):
            continue
        overrides, seeds = tuple(cell.get("overrides", ())), int(cell["seeds"])
        calibration = calibrate(calibrations, cell["priority"])
        if cost is None and cell.get("like") in costs:
            like_cost, like_note = costs[cell["like"]]
            cost = like_cost * float(cell.get("scale", 1.0))
            note = f" (as {cell['like']} × {float(cell.get('scale', 1.0)):.3g}: {like_note})"
        elif cost is None and calibration:
            cost = float(cell["cost"]) * calibration[0]
            note = f" (estimate × {calibration[0]:.2f}, as {calibration[1]})"
        elif cost is None:
            cost, note = float(cell["cost"]), " (cost estimated)"

        def share(count: int) -> float | None:  # a GPU cell's projected GPU-hours for ``count`` of its seeds
            return float(cell["gpu_hours"]) * count / (seeds - first_seed) if "gpu_hours" in cell else None

        if finished:
            jobs.append((Job(cell["priority"], cell["preset"], cell["name"], overrides, min(finished),
                             len(finished), steps, cost, share(len(finished))),
                         f"done: seeds {_ranges(sorted(finished))}"))
        chunk = int(cell.get("chunk", queue.get("chunk", 5)))  # a cell's own: a GPU cell batches all its seeds
        for start in range(first_seed, seeds, chunk):  # chunk-aligned seed ranges: stable names, done seeds skipped
            block = [seed for seed in range(start, min(start + chunk, seeds)) if seed not in finished]
            for offset, count in _contiguous(block):
                jobs.append((Job(cell["priority"], cell["preset"], cell["name"], overrides, offset, count, steps,
                                 cost, share(count)), "to run" + note))
    return jobs, factor


def calibrate(ratios: list[tuple[str, bool, float]], priority: str) -> tuple[float, str] | None:
    """The median of (priority, measured on this CPU, cost over estimate) ``ratios`` that says most about this
    CPU and ``priority``, with where it comes from: the priority's cells measured here, else its cells with a cost
    scaled from other CPUs, else any priority's measured here, else any (None: no cell has a cost)."""
    for source, keep in ((f"{priority}'s cells measured here", lambda p, here: p == priority and here),
                         (f"{priority}'s measured cells", lambda p, here: p == priority),
                         ("cells measured here", lambda p, here: here),
                         ("this queue's measured cells", lambda p, here: True)):
        chosen = [ratio for p, here, ratio in ratios if keep(p, here)]
        if chosen:
            return statistics.median(chosen), source
    return None


def breadth_first(planned: list[tuple[Job, str]]) -> list[tuple[Job, str]]:
    """``plan``'s jobs reordered so that, within each priority, the runs go by their first seed (cells in queue
    order among equals): every cell's lowest seeds run before any cell's higher ones, whatever seeds per run each
    cell has, so a campaign stopped early compares all of a priority's methods on the same seeds."""
    ranks = {priority: rank for rank, priority in enumerate(dict.fromkeys(job.priority for job, _ in planned))}
    return sorted(planned, key=lambda item: (ranks[item[0].priority], item[0].offset))


def _ranges(seeds: list[int]) -> str:
    return ", ".join(f"{a}-{a + n - 1}" if n > 1 else str(a) for a, n in _contiguous(seeds))


def _contiguous(seeds: list[int]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for seed in seeds:
        if runs and runs[-1][0] + runs[-1][1] == seed:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((seed, 1))
    return runs


def export(job: Job, work: Path, results: Path) -> None:
    """``_export`` holding ``results_lock``: a report of a campaign sharing ``results`` never reads a folder while
    it is renamed into place."""
    with results_lock(results):
        _export(job, work, results)


def _export(job: Job, work: Path, results: Path) -> None:
    """Copy a finished run's committed files into results/runs: written to a temporary folder of this call's own
    (``seeds<a>-<b>.<pid>-<id>.tmp``), then renamed into place; a run already there is first renamed aside
    (``….old.tmp``) and removed after. Safe against another exporter of the same run at the same time: the last
    rename wins and neither sees a half-written folder."""
    source, target = job.work_dir(work), job.result_dir(results)
    stamp = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp, old = (target.with_name(f"{target.name}.{stamp}{suffix}.tmp") for suffix in ("", ".old"))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    try:
        for name in ("summary.json", "identity.json"):
            shutil.copy2(source / name, tmp / name)
        shutil.copy2(source / ".hydra" / "config.yaml", tmp / "config.yaml")
        with open(source / "metrics.csv", "rb") as raw, gzip.GzipFile(tmp / "metrics.csv.gz", "wb", mtime=0) as packed:
            shutil.copyfileobj(raw, packed)
        for _ in range(10):
            try:
                os.rename(tmp, target)  # atomic; fails while a non-empty target is there
                break
            except OSError as error:
                if not isinstance(error, FileExistsError) and error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                    raise
            try:
                os.rename(target, old)  # the run there (an older export of these seeds) aside, then try again
            except FileNotFoundError:
                pass  # another exporter moved it meanwhile
            shutil.rmtree(old, ignore_errors=True)
        else:
            raise OSError(f"{target} keeps being replaced by another exporter; not exported")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left where the rename happened
        shutil.rmtree(old, ignore_errors=True)


def clean_exports(results: Path, cells: list[tuple[str, str]]) -> list[Path]:
    """Remove the export temporaries (``EXPORT_TMP`` names, in results/runs/<preset>/<cell>/) that a campaign cut
    short left behind in ``cells`` ((preset, cell) pairs); called holding their locks, so no export of theirs is
    under way (another campaign's cells are its own). Returns what was removed."""
    removed = []
    for folder in sorted(path for preset, cell in cells for path in (results / "runs" / preset / cell).glob("*")):
        if EXPORT_TMP.match(folder.name) and folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def queue_cells(queue: dict, only: set[str] | None = None) -> list[tuple[str, str]]:
    """The (preset, cell) pairs of the queue's cells ``only`` selects (all when None): what a campaign of them
    locks."""
    return sorted({(str(cell["preset"]), str(cell["name"])) for cell in queue.get("cells") or ()
                   if selected(cell, only)})


@contextmanager
def campaign_lock(work: Path, results: Path, cells: list[tuple[str, str]]) -> Iterator[None]:
    """Hold ``<folder>/LOCKS/<preset>/<cell>.lock`` (pid and host) under ``work`` and ``results`` for each of
    ``cells`` for the ``with`` block: one campaign per cell, so campaigns of other cells share the folders.
    SystemExit (one line, naming the cell) when a live campaign holds one, or a live campaign of an earlier version
    holds a whole folder (``OLD_LOCK``); a lock whose process is gone (on this host) is taken over."""
    from harness import rundir

    for folder in (work, results):
        holder = rundir.lock_holder(folder / OLD_LOCK) if (folder / OLD_LOCK).exists() else None
        if holder is not None:
            raise cli.Refusal(f"Error: a campaign of an earlier version (process {holder}) holds all of {folder}; "
                             f"wait for it or stop it (a lock left by a crash on another host: delete "
                             f"{folder / OLD_LOCK})")

    def busy(folder: Path, preset: str, cell: str) -> Callable[[str, Path], Exception]:
        return lambda holder, path: cli.Refusal(
            f"Error: another campaign (process {holder}) runs {preset}/{cell} in {folder}; wait for it or stop it "
            f"(campaigns of other cells, e.g. other --only priorities, may run beside it; locks left by a crash on "
            f"another host: delete the files naming process {holder} under {folder / LOCKS})")

    with ExitStack() as locks:
        for folder in (work, results):
            for preset, cell in cells:
                path = folder / LOCKS / preset / cell  # "tpo/" and "./tpo" are one folder, so one lock
                path = path.with_name(f"{path.name}.lock")
                path.parent.mkdir(parents=True, exist_ok=True)
                locks.enter_context(rundir.lock_file(path, busy(folder, preset, cell)))
        yield


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
                  f"{_shown(results)}", flush=True)
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as error:  # ENOLCK, ENOSYS, EOPNOTSUPP: a file system without flock (Lustre without -o flock)
            raise cli.Refusal(f"Error: cannot lock {_shown(path)} ({error.strerror}): --results must be on a file "
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


def replace_stale(stale: list[tuple[Path, str, list[str]]], work: Path, results: Path) -> Path:
    """Move each stale run folder to ``<work>/.replaced/<time>/{results,work}/<its path there>`` (a run recorded
    straight in its cell's folder, beside seed-range folders: its files only); returns that folder."""
    aside = work / REPLACED / time.strftime("%Y%m%d-%H%M%S")
    for folder, _, _ in stale:
        folder = folder.resolve()
        base, kind = ((results.resolve(), "results") if folder.is_relative_to(results.resolve())
                      else (work.resolve(), "work"))
        destination = aside / kind / folder.relative_to(base)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if kind == "results" and folder.parent.parent == base / "runs":  # a cell folder: its own files only
            destination.mkdir(exist_ok=True)
            for entry in folder.iterdir():
                if not entry.is_dir() or entry.name == ".hydra":
                    shutil.move(str(entry), str(destination / entry.name))
        else:
            shutil.move(str(folder), str(destination))
    return aside


def report(preset: str, results: Path) -> list[str]:
    """Regenerate the tables and figures of ``preset`` and of every preset whose report reads its runs
    (``report_sources``: shared runs, and variant presets such as beyond_relapse_skip of beyond_relapse), from
    everything under results/runs. Each folder shows its own tables and figures only (``report_specs``), whatever
    other runs it reads. A variant preset with no table or figure of its own gets no report folder. Returns the
    report folders that failed, each named in one line (``REPORT FAILED``) with the report's last error line."""
    from harness.report.specs import FIGURES, TABLES, report_sources

    if preset.startswith(SCORECARD_PRESETS):  # read by python -m harness.scorecard, which writes its own report
        return []
    owners = {spec.preset for spec in TABLES.values()} | {p.preset for f in FIGURES.values() for p in f.panels}
    readers = [name for name in owners if name != preset and preset in report_sources(name)]
    targets = ([preset] if preset in owners or not readers else []) + sorted(readers)
    with results_lock(results):
        failed = [target for target in targets if not _regenerate(target, preset, owners, results)]
        regenerated = [target for target in targets if target not in failed]
        # the preset itself, noted when its runs were exported, is up to date once every report reading them is
        _note_stale_reports(results, add=failed, done=regenerated + ([] if failed else [preset]))
    return failed


def _regenerate(target: str, preset: str, owners: set[str], results: Path) -> bool:
    """Write ``target``'s report folder from the runs it reads (for ``preset``'s new runs); False, said in one line
    (``REPORT FAILED``), when the report fails."""
    from harness.report.specs import report_sources, report_specs

    sources = [results / "runs" / name for name in report_sources(target)]
    chosen = []
    if target in owners:  # its own tables and figures only, not those of the runs it shares
        tables, figures = report_specs(target)
        chosen = ["--tables", ",".join(tables) or "none", "--figures", ",".join(figures) or "generic"]
    command = [sys.executable, "-m", "harness.report", *map(_shown, filter(Path.exists, sources)),
               "--out", _shown(results / target), *chosen]
    try:
        done = subprocess.run(command, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True, errors="replace",  # ends with a stopped runner (its stale note stays)
                              preexec_fn=functools.partial(die_with_parent, os.getpid()))
        code, said = done.returncode, done.stderr or ""
    except OSError as error:
        code, said = None, str(error)
    if code != 0:
        last = next((line.strip() for line in reversed(said.splitlines()) if line.strip()), "no message")
        print(f"{time.strftime('%H:%M:%S')} REPORT FAILED {target} (for {preset}; exit {code}): {last}; "
              f"{_shown(results / target)} is not up to date: python -m harness.report "
              f"{' '.join(command[3:])}; the next campaign tries again", flush=True)
    return code == 0


def _note_stale_reports(results: Path, add: list[str] = (), done: list[str] = ()) -> list[str]:
    """The report folders a failed report left out of date, and the presets whose exported runs wait for their
    reports (``<results>/STALE_REPORTS``, kept across campaigns: a runner stopped in between leaves them to the next
    one): ``add`` joins them, ``done`` (regenerated) leaves them; returns those left."""
    path = results / STALE_REPORTS
    try:
        stale = json.loads(path.read_text()) if path.exists() else []
    except (OSError, ValueError):
        stale = []
    stale = sorted({name for name in stale if isinstance(name, str)} - set(done) | set(add))
    if stale:
        results.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(stale) + "\n")
    else:
        path.unlink(missing_ok=True)
    return stale


def retry_stale_reports(results: Path) -> int:
    """Regenerate the report folders a failed report left out of date (at a campaign's start); the number that fail
    again."""
    with results_lock(results):
        stale = _note_stale_reports(results)
    for target in stale:
        print(f"{time.strftime('%H:%M:%S')} report {target} again: it failed before", flush=True)
    return sum(len(report(target, results)) for target in stale)


def _shown(path: Path) -> str:
    """A path as committed reports print it (their command and run folders): relative to the repository when inside
    it, so the text does not depend on where the clone lives."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def finished(job: Job, work: Path) -> str | None:
    """The status of the job's run when it already finished in its work folder (e.g. the runner was stopped
    between the run's end and its export), else None; a run of another configuration (``work_mismatch``), with an
    unreadable summary, or one the report would not take whole (``damaged_finish``) is not finished for the job."""
    status = _summary_status(job, work)
    return status if status in DONE and not work_mismatch(job, work) and not damaged_finish(job, work) else None


def _summary_status(job: Job, work: Path) -> str | None:
    summary = job.work_dir(work) / "summary.json"
    try:
        return json.loads(summary.read_text()).get("status") if summary.exists() else None
    except (OSError, ValueError, AttributeError):
        return None


def damaged_finish(job: Job, work: Path) -> str | None:
    """Why the job's run, whose summary says it finished, is not a run the report takes whole (a file cut short or
    missing, rows short of the summary: ``harness.report.load.finished_run_problem``), in one line; None otherwise.
    Such a run is never exported: ``set_aside_damaged`` moves it aside and its seeds run again."""
    from harness.report.load import finished_run_problem

    if _summary_status(job, work) not in DONE:
        return None
    return finished_run_problem(job.work_dir(work))


def set_aside_damaged(job: Job, work: Path) -> None:
    """Move a damaged finished run (``damaged_finish``) to ``<name>.damaged-<time>`` beside it, saying so in one line,
    so that the job starts over (its files are kept for a look)."""
    problem = damaged_finish(job, work)
    if problem is None:
        return
    folder = job.work_dir(work)
    aside = folder.with_name(f"{folder.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(aside)
    print(f"DAMAGED {job.preset}/{job.cell}/{job.name}: {problem}; moved aside to {_shown(aside)}, its seeds run "
          "again", flush=True)


def progress(job: Job, work: Path) -> float:
    """The share of the job's episodes a resume would keep: up to the last checkpoint before its last logged step
    (0 for a run not started, or one killed before its first checkpoint, which starts over)."""
    folder = job.work_dir(work)
    metrics, config = folder / "metrics.csv", folder / ".hydra" / "config.yaml"
    if not (folder / "checkpoint.pt").exists() or not metrics.exists() or not config.exists():
        return 0.0
    with open(metrics, "rb") as file:
        file.seek(max(0, metrics.stat().st_size - 4096))
        lines = file.read().split(b"\n")[:-1]  # complete lines only: a write cut short ends without its newline
    last = lines[-1].split(b",")[0] if lines else b""
    try:
        every = int(OmegaConf.load(config).trainer.checkpoint_every)
    except Exception:  # noqa: BLE001 - a damaged config: nothing a resume could keep (the run refuses it itself)
        return 0.0
    if not last.isdigit() or every <= 0:
        return 0.0
    return min(1.0, (int(last) + 1) // every * every / job.steps)


def seconds_needed(job: Job, work: Path) -> float:
    """The wall time ``--finish-within`` allows for the job: its episodes left at its cell's cost, times MARGIN."""
    return MARGIN * 3600 * job.hours * (1 - progress(job, work))


def fit_plan(jobs: list[Job], parallel: int, seconds: float, work: Path) -> list[Job]:
    """The jobs ``run`` would start within ``seconds`` if each took ``seconds_needed``: in queue order, each on the
    slot that frees first, skipping any that would end after ``seconds`` (a later, shorter one may still fit)."""
    free_at, started = [0.0] * parallel, []
    for job in jobs:
        slot = min(range(parallel), key=free_at.__getitem__)
        needed = seconds_needed(job, work)
        if free_at[slot] + needed <= seconds:
            free_at[slot] += needed
            started.append(job)
    return started


@dataclass(frozen=True)
class Ended:
    """How a launched run's command ended; ``run`` judges the run by this and its summary.json."""

    clean: bool  # its command exited 0
    how: str  # for the FAILED line: "exit 1", "SLURM job 12: <its last error line>"
    log: Path  # what the run printed


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


class Launcher:
    """What ``run`` asks of a launcher: ``attach``, ``start_all``, ``poll``, ``stop``."""

    def start_all(self, starts: list[tuple[Job, int]]) -> list:
        """Start each (job, slot): its handle, or None when it was refused (in a line of the launcher's)."""
        return [self.start(job, slot) for job, slot in starts]


class LocalLauncher(Launcher):
    """Runs each job as a process of this machine, pinned to a core of its own: the core with the fewest processes
    pinned to it (``pinned_load``), so two runners side by side use two cores; among equals, the last cores first,
    leaving core 0 to interactive work when there are fewer runs than cores. The runs end with the runner: stopping
    it SIGTERMs them (each writes its summary, "interrupted", and keeps its checkpoint), and so does its death, even
    by ``kill -9`` (``die_with_parent``). A run folder whose ``run.lock`` a live process holds (a run of an earlier
    runner still closing, or one started by hand) is waited for up to ``lock_wait_s``, then refused in one line."""

    lock_wait_s = 60.0  # a run SIGTERMed by its runner's death writes its summary and lets go within seconds

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
                  f"{_shown(job.work_dir(self.work))}: {claimed}", flush=True)
            return None
        job.work_dir(self.work).mkdir(parents=True, exist_ok=True)
        core, runner = self.core(slot), os.getpid()

        def prepare() -> None:  # in the child: its core, and its end with the runner's (even a kill -9)
            if core is not None:
                os.sched_setaffinity(0, {core})
            die_with_parent(runner)

        with open(job.work_dir(self.work).with_suffix(".log"), "a") as log:  # the run writes to its own copy
            process = subprocess.Popen(job.command(self.work), cwd=ROOT, env=self.env, stdout=log,
                                       stderr=subprocess.STDOUT, preexec_fn=prepare)
        print(f"{time.strftime('%H:%M:%S')} start {job.preset}/{job.cell}/{job.name} (core {core})", flush=True)
        return process

    def poll(self, process: subprocess.Popen, job: Job) -> Ended | None:
        if process.poll() is None:
            return None
        return Ended(process.returncode == 0, f"exit {process.returncode}", job.work_dir(self.work).with_suffix(".log"))

    def stop(self, processes: list[subprocess.Popen]) -> None:
        alive = [process for process in processes if process.poll() is None]
        for process in alive:  # stopped or failed: no run goes on alone, holding its lock
            process.terminate()  # SIGTERM: it writes its summary ("interrupted"); its checkpoint resumes it
        for process in alive:
            process.wait(timeout=120)


class SlurmError(Exception):
    """squeue could not say which jobs are queued or running (one line: what it said)."""


def slurm_queue() -> list[tuple[str, str, str]]:
    """(job id, state, comment) of each of this user's SLURM jobs that is queued or running, an array's tasks one by
    one (``123_4``); SlurmError when squeue cannot say."""
    try:
        done = subprocess.run(["squeue", "--noheader", "--array", f"--user={os.getuid()}", "--format=%i|%T|%k"],
                              check=False, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SlurmError(f"squeue: {_one_line(error)}") from None
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


NEVER_STARTS = {"PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "AccountNotAllowed",
                "QOSMaxCpuPerJobLimit", "QOSMaxGRESPerJob", "QOSMaxMemoryPerJob", "QOSMaxWallDurationPerJobLimit",
                "InvalidAccount", "InvalidQOS"}  # squeue's pending reasons that waiting does not cure


UNANSWERED = ("Unable to contact", "Socket timed out", "connect failure", "Could not establish a configuration",
              "resolve_ctls", "Zero Bytes")  # sbatch without a controller to ask: no word on the submission


def slurm_pending_reason(job_id: str) -> str:
    """squeue's reason why ``job_id`` is pending (``%r``), or what kept squeue from saying."""
    try:
        said = subprocess.run(["squeue", "--noheader", f"--jobs={job_id}", "--format=%r"], capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        return f"squeue cannot say ({_one_line(error)})"
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
    """Ctrl-C, SIGTERM and SIGHUP held back for the block (delivered at its end): a job submitted is a job recorded,
    or a runner started again would submit it a second time."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


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
        self.sbatch_calls: Counter[Resources] = Counter()  # sbatch calls made, per resources
        self._active: dict[str, str] = {}
        self._asked = -math.inf
        self._warned: set[str] = set()
        self._pending_since: dict[str, float] = {}  # job id → when it was first seen pending
        self._tested: dict[Resources, str | None] = {}  # --dry-run: sbatch --test-only's word per resources
        self._missing_since: dict[str, float] = {}  # ended job id → when its result was first looked for, missing
        self._pending_warned: set[str] = set()

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
        return next((job_id for job_id in self.marked_jobs().get(record["mark"], [])
                     if job_id.partition("_")[2] == index or ("_" not in job_id and index == "0")), None)

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
        except SlurmError as error:
            raise cli.Refusal(f"Error: cannot tell which recorded SLURM jobs still run ({error}); nothing was "
                             "submitted: run the same command again once squeue answers") from None
        attached = {}
        for job in jobs:
            found = self.found_by_mark(job)
            if found:
                self._write_record(job, {**self._read_record(job), "job_id": found})
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
                      f"{_shown(job.work_dir(self.work))} is claimed: {claim}", flush=True)
                handles[job] = None
            else:
                groups.setdefault(self.resources(job), []).append(job)
        for resources, jobs in groups.items():
            handles.update(zip(jobs, self.submit(resources, jobs)))
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
                for job in jobs:  # as before the call
                    if earlier[job]:
                        self._write_record(job, earlier[job])
                    else:
                        self.record_path(job).unlink()
                    print(f"{time.strftime('%H:%M:%S')} REJECTED {job.preset}/{job.cell}/{job.name}: sbatch refused "
                          f"it ({resources}): {sbatch_said(error)}", flush=True)
                return [None] * len(jobs)
            for index, (job, handle) in enumerate(zip(jobs, submitted)):
                self._write_record(job, {"job_id": handle.job_id, "mark": mark, "index": index, "submitted": when,
                                         "command": commands[job]})
        self.sbatch_calls[resources] += 1
        runs = []
        for job, handle in zip(jobs, submitted):
            self._active[handle.job_id] = "PENDING"  # until squeue is asked again
            resumes = (job.work_dir(self.work) / "checkpoint.pt").exists()
            before = earlier[job].get("job_id")
            print(f"{time.strftime('%H:%M:%S')} submit {job.preset}/{job.cell}/{job.name} → SLURM job "
                  f"{handle.job_id} ({resources})" + (f"; its SLURM job {before} ended before the run did"
                                                      + (": it resumes from its checkpoint" if resumes else "")
                                                      if before else ""), flush=True)
            runs.append(self._run(handle.job_id))
        return runs

    def poll(self, run: SlurmRun, job: Job) -> Ended | None:
        from submitit.core.utils import FailedJobError, pickle_load

        try:
            if run.job_id in self.active():
                if self.active()[run.job_id] == "PENDING":
                    self.warn_pending(run, job)
                return None
        except SlurmError as error:  # the controller busy or restarting: asked again at the next poll
            if str(error) not in self._warned:
                self._warned.add(str(error))
                print(f"{time.strftime('%H:%M:%S')} squeue failed, SLURM jobs assumed still running: {error}",
                      flush=True)
            return None
        try:
            outcome, value = pickle_load(run.result)
        except (OSError, EOFError, ValueError):  # no result: the job was killed, or a shared file system lags
            since = self._missing_since.setdefault(run.job_id, time.time())
            if time.time() - since < self.result_grace_s:
                return None  # asked again at the next poll
            said = next((line for line in reversed(_log_lines(run.log)) if line.startswith(MARK)), None)
            return Ended(False, f"SLURM job {run.job_id} ended without a result ("
                         + (said or "cancelled, out of time or memory, or its node failed") + ")", run.log)
        if outcome == "success":
            return Ended(True, f"SLURM job {run.job_id}", run.log)
        said = [line.strip() for line in str(value).splitlines() if line.strip()]  # a traceback: the run's stderr last
        last = said[-1].removeprefix(f"{FailedJobError.__module__}.{FailedJobError.__name__}: ") if said else outcome
        return Ended(False, f"SLURM job {run.job_id}: {last}", run.log)

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
        if runs:
            print(f"{time.strftime('%H:%M:%S')} stopped: {len(runs)} SLURM jobs go on "
                  f"({', '.join(run.job_id for run in runs)}); the same command re-attaches to them", flush=True)

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
        found = self.found_by_mark(job)
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


class Reporter:
    """Regenerates reports in a thread of its own, a preset at a time and once for every exports queued meanwhile, so
    that the runner refills a freed slot at once (a report takes seconds to a minute); ``finish`` waits for the
    queue and returns the number of report folders that failed."""

    def __init__(self, results: Path):
        self.results, self.failures = results, 0
        self.queue: "queue.Queue[str | None]" = queue.Queue()
        self.waiting: set[str] = set()  # queued, not yet started: a second export joins the first's report
        self.guard = threading.Lock()
        self.thread = threading.Thread(target=self._work, name="reports", daemon=True)
        self.thread.start()

    def submit(self, preset: str) -> None:
        with self.guard:
            if preset in self.waiting:
                return
            self.waiting.add(preset)
        self.queue.put(preset)

    def _work(self) -> None:
        while (preset := self.queue.get()) is not None:
            with self.guard:
                self.waiting.discard(preset)
            failed = report(preset, self.results) or ()
            with self.guard:
                self.failures += len(failed)

    def finish(self) -> int:
        self.queue.put(None)
        self.thread.join()
        return self.failures


def run(jobs: list[Job], parallel: int, work: Path, results: Path, hours: float | None = None,
        finish_within: float | None = None, costs: Callable[[], dict[tuple[str, str], float]] | None = None,
        launcher: LocalLauncher | SlurmLauncher | None = None) -> int:
    """Run ``jobs`` ``parallel`` at a time through ``launcher`` (default: ``LocalLauncher``), starting none after
    ``hours`` and none expected to end after ``finish_within`` hours, with the pending jobs' costs renewed from
    ``costs`` (preset, cell) after each finished run; returns the number of failed jobs and failed reports. Jobs
    the launcher still runs from an earlier runner (SLURM) are re-attached, not started again. A job whose work
    folder holds a run of another configuration (``work_mismatch``) is refused in one line and counts as failed
    (``main`` refuses those before calling this; a run this starts is checked by its own launch,
    ``harness.rundir``)."""
    launcher = launcher or LocalLauncher(work)
    deadline = None if hours is None else time.time() + 3600 * hours
    end = None if finish_within is None else time.time() + 3600 * finish_within
    failed, refused = 0, []
    for job in jobs:
        changes = work_mismatch(job, work)
        if changes:
            refused.append(job)
            failed += 1
            print(f"REFUSED {job.preset}/{job.cell}/{job.name}: {_shown(job.work_dir(work))} holds a run of another "
                  f"configuration ({'; '.join(changes)}); --replace moves it aside", flush=True)
    jobs = [job for job in jobs if job not in refused]
    for job in jobs:
        set_aside_damaged(job, work)
    reporter = Reporter(results)

    def exported_now(job: Job) -> None:  # its report in the reporter's thread, while the runner refills the slot
        export(job, work, results)
        with results_lock(results):  # noted, so that a runner stopped before the report leaves it to the next
            _note_stale_reports(results, add=[job.preset])
        reporter.submit(job.preset)

    for job in [job for job in jobs if finished(job, work)]:
        exported_now(job)
        print(f"exported {job.preset}/{job.cell}/{job.name}, finished earlier → {job.result_dir(results)}", flush=True)
    pending = [job for job in jobs if not finished(job, work)]
    attached = launcher.attach(pending)
    running = {slot: (handle, job) for slot, (job, handle) in enumerate(attached.items())}
    pending = [job for job in pending if job not in attached]

    def stop(signum, frame):
        raise SystemExit(130)  # the ``finally`` below stops the runs

    previous = {signum: signal.signal(signum, stop) for signum in STOP_SIGNALS}
    skipped: set[tuple[str, str, str]] = set()

    def fits(job: Job) -> bool:  # --finish-within; checked again whenever a slot frees (costs may have fallen)
        needed = 0.0 if end is None else seconds_needed(job, work)
        if end is None or needed <= end - time.time():
            return True
        if (job.preset, job.cell, job.name) not in skipped:
            skipped.add((job.preset, job.cell, job.name))
            print(f"{time.strftime('%H:%M:%S')} skip  {job.preset}/{job.cell}/{job.name} for now: needs "
                  f"{needed / 3600:.2f} h, {max(0.0, end - time.time()) / 3600:.2f} h left",
                  flush=True)
        return False

    try:
        ended_done: list[tuple[Job, str]] = []  # ended, to export once the freed slots are filled again
        while pending or running or ended_done:
            free = [slot for slot in range(parallel) if slot not in running]
            if deadline is not None and time.time() >= deadline:
                pending = []  # past --hours: let the running ones finish, start nothing new
            while free:  # the jobs that start now, together (SLURM: one sbatch call per resources)
                starting = []
                while len(starting) < len(free) and (job := next((job for job in pending if fits(job)), None)):
                    pending.remove(job)
                    starting.append(job)
                if not starting:
                    break
                slots, free = free[:len(starting)], free[len(starting):]
                for slot, job, handle in zip(slots, starting, launcher.start_all(list(zip(starting, slots)))):
                    if handle is None:  # refused, in a line of the launcher's: the slot takes the next job
                        failed += 1
                        free.append(slot)
                    else:
                        running[slot] = (handle, job)
            for job, status in ended_done:  # after the refill: an export waits while a report holds the results
                exported_now(job)
                print(f"{time.strftime('%H:%M:%S')} done  {job.preset}/{job.cell}/{job.name} ({status}) → "
                      f"{job.result_dir(results)}", flush=True)
            if ended_done:
                if costs is not None:
                    try:
                        measured = costs()
                    except (OSError, ValueError, AttributeError) as error:  # a summary being written
                        print(f"costs not renewed (kept): {error}", flush=True)
                        measured = {}
                    pending = [replace(job, cost=measured.get((job.preset, job.cell), job.cost)) for job in pending]
                ended_done = []
                continue  # the renewed costs may fit a run that did not fit before
            if not running and free and pending:  # nothing left that fits in the time left
                break
            if not (pending or running):
                break
            time.sleep(1)
            for slot, (handle, job) in list(running.items()):
                ended = launcher.poll(handle, job)
                if ended is None:
                    continue
                del running[slot]
                summary = job.work_dir(work) / "summary.json"
                status = json.loads(summary.read_text()).get("status") if summary.exists() else "no summary"
                if ended.clean and status in DONE:
                    ended_done.append((job, status))
                else:
                    failed += 1
                    print(f"{time.strftime('%H:%M:%S')} FAILED {job.preset}/{job.cell}/{job.name} ({ended.how}, "
                          f"{status}); log: {ended.log}", flush=True)
        failed += reporter.finish()
    finally:
        launcher.stop([handle for handle, _ in running.values()])  # local runs stopped; SLURM jobs go on
        for signum, handler in previous.items():  # the caller's own handlers again (a runner used in-process)
            if handler is not None:  # None: set outside Python, cannot be put back from here
                signal.signal(signum, handler)
    return failed


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.campaign", description=__doc__,
                        details='docs/usage.md, "The campaign", and harness/campaign.py',
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
    args = parser.parse_args(argv)
    args.work, args.results = args.work.resolve(), args.results.resolve()  # the runs start in the repository root
    slurm_only = {"--partition": args.partition, "--max-jobs": args.max_jobs, "--account": args.account,
                  "--qos": args.qos, "--constraint": args.constraint, "--sbatch": args.sbatch or None,
                  "--node-python": args.node_python}
    given = [option for option, value in slurm_only.items() if value is not None]
    if args.launcher == "local" and given:
        parser.error(f"{given[0]} is for --launcher slurm")
    args.sbatch_options = sbatch_options(parser, args)
    args.max_jobs = args.max_jobs or MAX_JOBS
    if args.launcher == "slurm" and not args.dry_run:
        missing = [name for name in ("sbatch", "squeue", "srun") if shutil.which(name) is None]
        if missing:
            raise cli.Refusal(f"Error: --launcher slurm: {', '.join(missing)} not found on PATH; run the campaign "
                             "where SLURM's commands are (a login node), or without --launcher slurm")
    queue = load_queue(args.queue)
    only = check_only(queue, args.only, args.queue)
    check_cells(queue, args.queue)
    if args.summary:
        print(textwrap.fill(plan_summary(queue, args.results), width=116, break_long_words=False,
                            break_on_hyphens=False))
        return
    if args.dry_run:  # reads only: no lock, so that a running campaign can be watched
        sys.exit(campaign(queue, args, only))
    cells = queue_cells(queue, only)
    for signum in (signal.SIGTERM, signal.SIGHUP):  # a kill, a login session's end: the locks go with the runner
        signal.signal(signum, _exit_stopped)
    with campaign_lock(args.work, args.results, cells):
        for folder in clean_exports(args.results, cells):
            print(f"removed {_shown(folder)}, an export cut short", flush=True)
        failed_reports = retry_stale_reports(args.results)
        code = campaign(queue, args, only) or (1 if failed_reports else 0)
    sys.exit(code)


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
        if name in ("partition", "time", "cpus-per-task", "mem", "gpus-per-node", "job-name", "output", "error",
                    "array", "comment"):
            parser.error(f"--sbatch {given!r}: {name} is set by the campaign (--partition; the cell's cpus, "
                         "mem_gb, time_min and gpus; its job arrays and their marks)")
        options[name.replace("-", "_")] = value
    return options


def _exit_stopped(signum, frame) -> None:
    raise SystemExit(130)


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
    if args.breadth:
        planned = breadth_first(planned)
    slurm = args.launcher == "slurm"
    if not slurm and args.jobs > 1 and _cuda_here():  # GPU cells side by side on this machine's GPU
        from tasks.memory import machine_memory

        gpu_bytes = machine_memory("cuda")[0]
        planned = [(share_gpu(job, args.jobs, gpu_bytes), state) for job, state in planned]
    CELLS.save()
    if not slurm and not _cuda_here():  # a GPU cell's runs would fail here: they wait for a cluster or a GPU
        planned = [(job, "GPU cell: for --launcher slurm (no GPU here)" if GPU_OVERRIDE in job.overrides
                    and state.startswith("to run") else state) for job, state in planned]
    todo = [job for job, state in planned if state.startswith("to run")]
    stale += [(job.work_dir(args.work), f"{job.preset}/{job.cell}", changes) for job in todo
              if (changes := work_mismatch(job, args.work))]
    if stale and args.replace and not args.dry_run:
        aside = replace_stale(stale, args.work, args.results)
        for folder, cell, changes in stale:
            print(f"replaced {_shown(folder)} (another configuration than {cell}: {'; '.join(changes)}) → "
                  f"{_shown(aside)}", flush=True)
        return campaign(queue, argparse.Namespace(**{**vars(args), "replace": False}), only)  # once
    launcher = (SlurmLauncher(args.work, queue["cells"], args.partition, sbatch=args.sbatch_options,
                              python=args.node_python) if slurm else LocalLauncher(args.work))
    parallel, at = (args.max_jobs, f"--max-jobs {args.max_jobs}") if slurm else (args.jobs, f"--jobs {args.jobs}")
    fits = None if args.finish_within is None else set(fit_plan(todo, parallel, 3600 * args.finish_within,
                                                                 args.work))
    preset_width = max((len(job.preset) for job, _ in planned), default=0)
    cell_width = max((len(job.cell) for job, _ in planned), default=0)
    mismatched = {folder for folder, _, _ in stale}
    rows, done = [], 0
    for job, state in planned:
        if state.startswith("to run") and job.work_dir(args.work) in mismatched:
            state = "refused: its work folder holds a run of another configuration"
        elif state.startswith("to run") and finished(job, args.work):
            state = "finished, to be exported"
        elif state.startswith("to run") and damaged_finish(job, args.work):
            state = f"damaged ({damaged_finish(job, args.work)}): to be moved aside and run again"
        elif state.startswith("to run") and (job.work_dir(args.work) / "checkpoint.pt").exists():
            state = "resumable" + state[len("to run"):]
        if fits is not None and job in todo:
            state += "" if job in fits else f"; does not fit in {args.finish_within:g} h"
        if slurm and state.startswith(("to run", "resumable")):
            state += f"; {launcher.describe(job)}"
        done += state.startswith("done")
        if state.startswith("done") and not args.all:
            continue
        name = "" if state.startswith("done") else job.name
        cost = f"{job.hours:6.2f} {'CPU' if job.gpu_hours is None else 'GPU'}-h"
        rows.append(f"{job.priority}  {job.preset:<{preset_width}} {job.cell:<{cell_width}} {name:<12} "
                    f"{job.steps:>6} steps {cost}  {state}")
    hours = sum(job.cpu_hours for job in todo if GPU_OVERRIDE not in job.overrides)
    gpu_jobs = [job for job, state in planned if GPU_OVERRIDE in job.overrides and not state.startswith("done")]
    print(f"{len(todo)} runs to go: {hours:.1f} CPU-hours, {hours / parallel:.1f} h at {at}")
    if gpu_jobs:
        gpu_hours = sum(job.gpu_hours or 0.0 for job in gpu_jobs)
        print(f"GPU jobs to go: {len(gpu_jobs)}, {gpu_hours:.1f} GPU-hours projected (cells' gpu_hours), one GPU each")
    if factor:
        print(f"this CPU ({cpu_model()}) runs cells at {factor:.2f}× the cost recorded elsewhere (median over cells "
              "measured on both, any queue's); cells measured only elsewhere are scaled by that")
    if fits is not None:
        print(f"{len(fits)} of them fit in {args.finish_within:g} h at {at} "
              f"(each run's cost × {MARGIN}, for the episodes it has left)")
    if slurm:
        first = [job for job in todo if fits is None or job in fits][:parallel]
        print(f"{len(first)} jobs submitted at the start, {submission_calls(launcher, first)}; each later refill "
              "is one call per resources of the jobs it starts")
    print(f"{done} runs done{'' if args.all else ' (--all lists them)'}; the queue, in order:", *rows, sep="\n",
          flush=True)
    if stale:
        for folder, cell, changes in stale:
            print(f"Error: {_shown(folder)} holds a run of another configuration than the cell {cell} "
                  f"({'; '.join(changes)}); it is not counted: --replace moves it to "
                  f"{_shown(args.work / REPLACED)}/ and runs its seeds again", file=sys.stderr, flush=True)
        return 2
    cells_to_run = {(job.preset, job.cell): job for job in todo if GPU_OVERRIDE not in job.overrides or _cuda_here()}
    refused = [(cell, why) for cell, job in cells_to_run.items() if (why := cell_refusal(job.preset, job.overrides))]
    if slurm and not args.dry_run:  # an LLM cell's model and data fetched here, for nodes without network
        refused += [(cell, why) for cell, job in {(job.preset, job.cell): job for job in todo}.items()
                    if (why := node_refusal(job.preset, job.overrides))]
    CELLS.save()
    for (preset, name), why in refused:  # before any run starts: its jobs would each be refused at their start
        print(f"Error: cell {preset}/{name} would be refused at its start: {why}; fix its overrides",
              file=sys.stderr, flush=True)
    if refused:
        return 2
    if args.dry_run or not todo:  # costs: as ``plan`` says
        return 0

    def costs() -> dict[tuple[str, str], float]:  # after each finished run: the cells' costs as measured by now
        return {(job.preset, job.cell): job.cost for job, _ in plan(queue, args.results, only, cpu_model())[0]}

    return 1 if run(todo, parallel, args.work, args.results, args.hours, args.finish_within, costs, launcher) else 0


if __name__ == "__main__":
    main()
