"""``python -m harness.campaign [QUEUE] [--jobs N] [--dry-run] [--only P1,P2]``: run a queue of paper cells to the end.

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
checkpoint. Seeds already in
``results/runs/<preset>/<cell>/`` from earlier runs of the same configuration count as done, so a cell is extended,
not rerun. ``--dry-run`` prints the queue: what is done, what is left and its estimated CPU-hours.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import yaml
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parent.parent
QUEUES = ROOT / "conf" / "campaign"
DONE = ("completed", "diverged")
MARGIN = 1.25  # --finish-within: a run's wall time over its cell's mean measured cost (seeds and machine load vary)


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

    def command(self, work: Path) -> list[str]:
        return [sys.executable, "-m", "harness", f"experiment={self.preset}", *self.overrides, f"seeds={self.seeds}",
                f"seed_offset={self.offset}", "logger=none", "threads=1", "trainer.resume=auto",
                "trainer.progress=false", f"hydra.run.dir={self.work_dir(work)}"]


def load_queue(name: str) -> dict:
    path = Path(name) if name.endswith(".yaml") else QUEUES / f"{name}.yaml"
    if not path.exists():
        choices = ", ".join(sorted(p.stem for p in QUEUES.glob("*.yaml")))
        raise SystemExit(f"Error: campaign queue {name!r} not found; valid choices: {choices}")
    queue = yaml.safe_load(path.read_text()) or {}
    seen = set()
    for index, cell in enumerate(queue.get("cells") or ()):
        where = f"{path.name}: cells[{index}]"
        missing = [key for key in ("priority", "preset", "name", "seeds", "cost") if key not in cell]
        if missing:
            raise SystemExit(f"Error: {where} has no {missing[0]}; a cell needs priority, preset, name, seeds, cost")
        if isinstance(cell["cost"], bool) or not isinstance(cell["cost"], (int, float)) or not cell["cost"] > 0:
            raise SystemExit(f"Error: {where}.cost={cell['cost']!r} is not valid; expected CPU-seconds per "
                             "seed-episode > 0")
        if (cell["preset"], cell["name"]) in seen:
            raise SystemExit(f"Error: {where} repeats the cell {cell['preset']}/{cell['name']}; list each cell once")
        seen.add((cell["preset"], cell["name"]))
    return queue


@functools.cache  # a running campaign re-plans after every finished run: compose each cell's config once
def preset_steps(preset: str, overrides: tuple[str, ...]) -> int:
    from harness.run import compose_config

    return int(compose_config([f"experiment={preset}", *overrides]).trainer.steps)


def exported(cell_dir: Path, steps: int) -> tuple[set[int], dict[str, tuple[float, int]]]:
    """Seeds of the finished runs of at least ``steps`` episodes already below ``cell_dir`` (any seed-range layout,
    earlier runs included; a shorter run's seeds are run again, as the report ignores it beside full ones), and what
    every finished run cost: per recorded CPU model ("" where none was recorded), CPU-seconds (wall seconds for runs
    older than ``cpu_seconds``) and seed-episodes."""
    seeds: set[int] = set()
    spent: dict[str, tuple[float, int]] = {}
    for summary in cell_dir.rglob("summary.json") if cell_dir.exists() else ():
        if summary.parent.name.endswith(".tmp"):  # an export cut short (``export`` writes there, then renames)
            continue
        record = json.loads(summary.read_text())
        if record.get("status") in DONE:
            if record.get("steps", 0) >= steps:
                seeds.update(record.get("seeds", []))
            seconds = record.get("cpu_seconds") or record.get("wall_seconds")  # wall: runs from before cpu_seconds
            if seconds:
                model = (record.get("hardware") or {}).get("cpu") or ""
                total, work = spent.get(model, (0.0, 0))
                spent[model] = (total + seconds, work + len(record["seeds"]) * record["steps"])
    return seeds, spent


def _rate(spent: dict[str, tuple[float, int]], keep) -> float | None:
    """CPU-seconds per seed-episode over the CPU models ``keep`` accepts (None without any)."""
    total = sum(seconds for model, (seconds, _) in spent.items() if keep(model))
    work = sum(episodes for model, (_, episodes) in spent.items() if keep(model))
    return total / work if work else None


def plan(queue: dict, results: Path, only: set[str] | None = None, cpu_model: str = ""
         ) -> tuple[list[tuple[Job, str]], float | None]:
    """Every job of the queue with its state (exported, or to run), and this CPU's speed factor.

    A job's cost is its cell's measured CPU-seconds per seed-episode on ``cpu_model`` where the cell has runs from
    it; else its other runs' cost times the factor: the median, over every cell under ``results/runs`` measured on
    both (any queue's), of this CPU's cost over the others' (hosts and code versions differ up to 3x; None where no
    cell has both, and costs from other CPUs are taken as they are); else the queue's estimate, calibrated: times the
    median of cost over estimate of the queue's cells with a cost by the first two rules (``calibrate``). The
    estimates were written on some CPU, at some time, a priority's together: its measured cells say how this CPU
    compares (unscaled where none is measured)."""
    chunk = int(queue.get("chunk", 5))

    def rates(spent: dict[str, tuple[float, int]]) -> tuple[float | None, float | None]:  # (this CPU, the others)
        return (_rate(spent, lambda model: bool(cpu_model) and model == cpu_model),
                _rate(spent, lambda model: not cpu_model or model != cpu_model))

    measured = [rates(exported(cell_dir, 0)[1]) for cell_dir in sorted((results / "runs").glob("*/*"))
                if cell_dir.is_dir()]
    ratios = [here / other for here, other in measured if here and other]
    factor = statistics.median(ratios) if ratios else None
    cells, calibrations = [], []
    for cell in queue["cells"]:  # every priority's, for the calibration of the estimates
        steps = preset_steps(cell["preset"], tuple(cell.get("overrides", ())))
        finished, spent = exported(results / "runs" / cell["preset"] / cell["name"], steps)
        cost_here, cost_other = rates(spent)
        if cost_here:
            cost, note = cost_here, ""
        elif cost_other:
            cost = cost_other * (factor or 1.0)
            note = f" (cost × {factor:.2f} for this CPU)" if factor else " (cost from other CPUs)" if cpu_model else ""
        else:
            cost, note = None, ""
        cells.append((cell, steps, finished, cost, note))
        if cost:
            calibrations.append((cell["priority"], bool(cost_here), cost / float(cell["cost"])))
    jobs = []
    for cell, steps, finished, cost, note in cells:
        if only and cell["priority"] not in only:
            continue
        overrides, seeds = tuple(cell.get("overrides", ())), int(cell["seeds"])
        calibration = calibrate(calibrations, cell["priority"])
        if cost is None and calibration:
            cost = float(cell["cost"]) * calibration[0]
            note = f" (estimate × {calibration[0]:.2f}, as {calibration[1]})"
        elif cost is None:
            cost, note = float(cell["cost"]), " (cost estimated)"
        if finished:
            jobs.append((Job(cell["priority"], cell["preset"], cell["name"], overrides, min(finished),
                             len(finished), steps, cost), f"done: seeds {_ranges(sorted(finished))}"))
        for start in range(0, seeds, chunk):  # runs of chunk-aligned seed ranges: stable names, any seed done skipped
            block = [seed for seed in range(start, min(start + chunk, seeds)) if seed not in finished]
            for offset, count in _contiguous(block):
                jobs.append((Job(cell["priority"], cell["preset"], cell["name"], overrides, offset, count, steps,
                                 cost), "to run" + note))
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


def breadth_first(planned: list[tuple[Job, str]], chunk: int) -> list[tuple[Job, str]]:
    """``plan``'s jobs reordered so that, within each priority, every cell's first seed range runs before any
    cell's second: a campaign stopped early then compares all of a priority's methods on the same seeds."""
    ranks = {priority: rank for rank, priority in enumerate(dict.fromkeys(job.priority for job, _ in planned))}
    return sorted(planned, key=lambda item: (ranks[item[0].priority], item[0].offset // chunk))


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
    """Copy a finished run's committed files into results/runs (written to a temporary folder, then renamed)."""
    source, target = job.work_dir(work), job.result_dir(results)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in ("summary.json", "identity.json"):
        shutil.copy2(source / name, tmp / name)
    shutil.copy2(source / ".hydra" / "config.yaml", tmp / "config.yaml")
    with open(source / "metrics.csv", "rb") as raw, gzip.GzipFile(tmp / "metrics.csv.gz", "wb", mtime=0) as packed:
        shutil.copyfileobj(raw, packed)
    shutil.rmtree(target, ignore_errors=True)
    os.replace(tmp, target)


def report(preset: str, results: Path) -> None:
    """Regenerate the tables and figures of ``preset`` and of every preset whose report reads its runs
    (``report_sources``: shared runs, and variant presets such as beyond_relapse_skip of beyond_relapse), from
    everything under results/runs. Each folder shows its own tables and figures only (``report_specs``), whatever
    other runs it reads. A variant preset with no table or figure of its own gets no report folder."""
    from harness.report.specs import FIGURES, TABLES, report_sources, report_specs

    owners = {spec.preset for spec in TABLES.values()} | {p.preset for f in FIGURES.values() for p in f.panels}
    readers = [name for name in owners if name != preset and preset in report_sources(name)]
    targets = ([preset] if preset in owners or not readers else []) + sorted(readers)
    for target in targets:
        sources = [results / "runs" / name for name in report_sources(target)]
        chosen = []
        if target in owners:  # its own tables and figures only, not those of the runs it shares
            tables, figures = report_specs(target)
            chosen = ["--tables", ",".join(tables) or "none", "--figures", ",".join(figures) or "generic"]
        subprocess.run([sys.executable, "-m", "harness.report", *map(_shown, filter(Path.exists, sources)),
                        "--out", _shown(results / target), *chosen], cwd=ROOT, check=False, stdout=subprocess.DEVNULL)


def _shown(path: Path) -> str:
    """A path as committed reports print it (their command and run folders): relative to the repository when inside
    it, so the text does not depend on where the clone lives."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def finished(job: Job, work: Path) -> str | None:
    """The status of the job's run when it already finished in its work folder (e.g. the runner was stopped
    between the run's end and its export), else None."""
    summary = job.work_dir(work) / "summary.json"
    status = json.loads(summary.read_text()).get("status") if summary.exists() else None
    return status if status in DONE else None


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
    every = int(OmegaConf.load(config).trainer.checkpoint_every)
    if not last.isdigit() or every <= 0:
        return 0.0
    return min(1.0, (int(last) + 1) // every * every / job.steps)


def seconds_needed(job: Job, work: Path) -> float:
    """The wall time ``--finish-within`` allows for the job: its episodes left at its cell's cost, times MARGIN."""
    return MARGIN * 3600 * job.cpu_hours * (1 - progress(job, work))


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


def run(jobs: list[Job], parallel: int, work: Path, results: Path, hours: float | None = None,
        finish_within: float | None = None, costs: Callable[[], dict[tuple[str, str], float]] | None = None) -> int:
    """Run ``jobs`` ``parallel`` at a time, each pinned to its own core (the last cores first, leaving core 0 to
    interactive work when ``parallel`` is below the core count), starting none after ``hours`` and none expected
    to end after ``finish_within`` hours, with the pending jobs' costs renewed from ``costs`` (preset, cell) after
    each finished run; returns the number of failed jobs."""
    cores = sorted(os.sched_getaffinity(0), reverse=True) if hasattr(os, "sched_getaffinity") else []
    deadline = None if hours is None else time.time() + 3600 * hours
    end = None if finish_within is None else time.time() + 3600 * finish_within
    for job in [job for job in jobs if finished(job, work)]:
        export(job, work, results)
        report(job.preset, results)
        print(f"exported {job.preset}/{job.cell}/{job.name}, finished earlier → {job.result_dir(results)}", flush=True)
    pending, running, failed = [job for job in jobs if not finished(job, work)], {}, 0

    def stop(signum, frame):
        raise SystemExit(130)  # the ``finally`` below stops the runs

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
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
        while pending or running:
            free = [slot for slot in range(parallel) if slot not in running]
            if deadline is not None and time.time() >= deadline:
                pending = []  # past --hours: let the running ones finish, start nothing new
            while free and (job := next((job for job in pending if fits(job)), None)):
                pending.remove(job)
                slot = free.pop(0)
                job.work_dir(work).mkdir(parents=True, exist_ok=True)
                core = cores[slot % len(cores)] if cores else None
                with open(job.work_dir(work).with_suffix(".log"), "a") as log:  # the run writes to its own copy
                    process = subprocess.Popen(job.command(work), cwd=ROOT, env=env, stdout=log,
                                               stderr=subprocess.STDOUT, preexec_fn=(
                                                   lambda c=core: os.sched_setaffinity(0, {c}))
                                               if core is not None else None)
                running[slot] = (process, job)
                print(f"{time.strftime('%H:%M:%S')} start {job.preset}/{job.cell}/{job.name} (core {core})", flush=True)
            if not running and free and pending:  # nothing left that fits in the time left
                break
            time.sleep(1)
            for slot, (process, job) in list(running.items()):
                if process.poll() is None:
                    continue
                del running[slot]
                summary = job.work_dir(work) / "summary.json"
                status = json.loads(summary.read_text()).get("status") if summary.exists() else "no summary"
                if process.returncode == 0 and status in DONE:
                    export(job, work, results)
                    report(job.preset, results)
                    print(f"{time.strftime('%H:%M:%S')} done  {job.preset}/{job.cell}/{job.name} ({status}) → "
                          f"{job.result_dir(results)}", flush=True)
                    if costs is not None:
                        try:
                            measured = costs()
                        except (OSError, ValueError, AttributeError) as error:  # a summary being written
                            print(f"costs not renewed (kept): {error}", flush=True)
                            measured = {}
                        pending = [replace(job, cost=measured.get((job.preset, job.cell), job.cost)) for job in pending]
                else:
                    failed += 1
                    print(f"{time.strftime('%H:%M:%S')} FAILED {job.preset}/{job.cell}/{job.name} (exit "
                          f"{process.returncode}, {status}); log: {job.work_dir(work).with_suffix('.log')}", flush=True)
    finally:
        alive = [process for process, _ in running.values() if process.poll() is None]
        for process in alive:  # stopped or failed: no run goes on alone, holding its lock
            process.terminate()  # SIGTERM: it writes its summary ("interrupted"); its checkpoint resumes it
        for process in alive:
            process.wait(timeout=120)
        for signum, handler in previous.items():  # the caller's own handlers again (a runner used in-process)
            if handler is not None:  # None: set outside Python, cannot be put back from here
                signal.signal(signum, handler)
    return failed


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.campaign", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("queue", nargs="?", default="paper", help="conf/campaign/<queue>.yaml, or a YAML path")
    parser.add_argument("--jobs", type=int, default=2, help="runs at a time (one core each)")
    parser.add_argument("--only", default=None, help="comma list of priorities to run, e.g. P1,P2")
    parser.add_argument("--breadth", action="store_true",
                        help="within a priority, every cell's first seeds before any cell's next ones")
    parser.add_argument("--dry-run", action="store_true", help="print the queue and its cost, run nothing")
    parser.add_argument("--hours", type=float, default=None,
                        help="start no run after this many hours (running ones finish); 0: only export finished runs")
    parser.add_argument("--finish-within", type=float, default=None, metavar="HOURS",
                        help="start only runs expected to end within this many hours (a hard session end)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "campaign", help="run directories")
    parser.add_argument("--results", type=Path, default=ROOT / "results", help="where finished runs are copied")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs={args.jobs} is not valid; expected a positive integer")
    for flag, value in (("--hours", args.hours), ("--finish-within", args.finish_within)):
        if value is not None and not value >= 0:  # NaN too
            parser.error(f"{flag}={value} is not valid; expected a number >= 0")
    queue = load_queue(args.queue)
    only = set(args.only.split(",")) if args.only else None
    from tasks.models.linear import cpu_model

    planned, factor = plan(queue, args.results, only, cpu_model())
    if args.breadth:
        planned = breadth_first(planned, int(queue.get("chunk", 5)))
    todo = [job for job, state in planned if state.startswith("to run")]
    fits = None if args.finish_within is None else set(fit_plan(todo, args.jobs, 3600 * args.finish_within,
                                                                 args.work))
    preset_width = max((len(job.preset) for job, _ in planned), default=0)
    cell_width = max((len(job.cell) for job, _ in planned), default=0)
    for job, state in planned:
        if state.startswith("to run") and finished(job, args.work):
            state = "finished, to be exported"
        elif state.startswith("to run") and (job.work_dir(args.work) / "checkpoint.pt").exists():
            state = "resumable" + state[len("to run"):]
        if fits is not None and job in todo:
            state += "" if job in fits else f"; does not fit in {args.finish_within:g} h"
        name = "" if state.startswith("done") else job.name
        print(f"{job.priority}  {job.preset:<{preset_width}} {job.cell:<{cell_width}} {name:<12} {job.steps:>6} steps "
              f"{job.cpu_hours:6.2f} CPU-h  {state}")
    hours = sum(job.cpu_hours for job in todo)
    print(f"{len(todo)} runs to go: {hours:.1f} CPU-hours, {hours / args.jobs:.1f} h at --jobs {args.jobs}")
    if factor:
        print(f"this CPU ({cpu_model()}) runs cells at {factor:.2f}× the cost recorded elsewhere (median over cells "
              "measured on both, any queue's); cells measured only elsewhere are scaled by that")
    if fits is not None:
        print(f"{len(fits)} of them fit in {args.finish_within:g} h at --jobs {args.jobs} "
              f"(each run's cost × {MARGIN}, for the episodes it has left)")
    if args.dry_run or not todo:  # costs: as ``plan`` says
        return

    def costs() -> dict[tuple[str, str], float]:  # after each finished run: the cells' costs as measured by now
        return {(job.preset, job.cell): job.cost for job, _ in plan(queue, args.results, only, cpu_model())[0]}

    sys.exit(1 if run(todo, args.jobs, args.work, args.results, args.hours, args.finish_within, costs) else 0)


if __name__ == "__main__":
    main()
