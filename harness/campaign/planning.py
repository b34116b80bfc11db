"""What a queue leaves to run: every job with its state and cost, in order, and what fits in a time window."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from harness.campaign.cells import cell_identity, preset_steps
from harness.campaign.exports import exported
from harness.campaign.jobs import Job
from harness.campaign.queue import selected

MARGIN = 1.25  # --finish-within: a run's wall time over its cell's mean measured cost (seeds and machine load vary)


def _rate(spent: dict[str, tuple[float, int]], keep: Callable[[str], bool]) -> float | None:
    """CPU-seconds per seed-episode over the CPU models ``keep`` accepts (None without any)."""
    total = sum(seconds for model, (seconds, _) in spent.items() if keep(model))
    work = sum(episodes for model, (_, episodes) in spent.items() if keep(model))
    return total / work if work else None


def _rates(spent: dict[str, tuple[float, int]], cpu_model: str) -> tuple[float | None, float | None]:
    """(The cost measured on ``cpu_model``, the cost measured on the others)."""
    return (_rate(spent, lambda model: bool(cpu_model) and model == cpu_model),
            _rate(spent, lambda model: not cpu_model or model != cpu_model))


def cpu_factor(results: Path, cpu_model: str) -> float | None:
    """This CPU's speed factor: the median, over every cell under ``results/runs`` measured on both (any queue's), of
    its cost on ``cpu_model`` over its cost on the others; None where no cell has both."""
    measured = [_rates(exported(cell_dir, 0).spent, cpu_model) for cell_dir in sorted((results / "runs").glob("*/*"))
                if cell_dir.is_dir() and not cell_dir.name.endswith(".tmp")]
    ratios = [here / other for here, other in measured if here and other]
    return statistics.median(ratios) if ratios else None


@dataclass
class Listing:
    """One listing of a cell in the queue, as ``plan`` finds it under results/runs."""

    cell: dict
    first_seed: int  # a cell listed again: its seeds from the earlier listing's count
    steps: int
    finished: set[int]  # its seeds exported, of the cell's configuration
    cost: float | None  # measured: CPU-seconds per seed-episode
    note: str  # how the cost was measured, for the plan's states
    here: bool  # the cost measured on this CPU

    @property
    def key(self) -> str:
        return f"{self.cell['preset']}/{self.cell['name']}"


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
    factor = cpu_factor(results, cpu_model)
    listings = _listings(queue, results, only, cpu_model, factor, stale)
    costs, calibrations = {}, []
    for listing in listings:  # every priority's, for the calibration of the estimates
        if listing.cost and not listing.first_seed:
            costs[listing.key] = (listing.cost, "measured here" if listing.here
                                  else listing.note.strip(" ()") or "measured elsewhere")
            calibrations.append((listing.cell["priority"], listing.here, listing.cost / float(listing.cell["cost"])))
    jobs = []
    for listing in listings:
        if selected(listing.cell, only):
            cost, note = _estimate(listing, costs, calibrate(calibrations, listing.cell["priority"]))
            jobs += _jobs(listing, int(listing.cell.get("chunk", queue.get("chunk", 5))), cost, note)
    return jobs, factor


def _listings(queue: dict, results: Path, only: set[str] | None, cpu_model: str, factor: float | None,
              stale: list[tuple[Path, str, list[str]]] | None) -> list[Listing]:
    """Each listing of the queue with its exported seeds and measured cost; the runs of another configuration of
    the first listings of the cells ``only`` selects appended to ``stale``."""
    listings, listed = [], {}
    last = {f"{cell['preset']}/{cell['name']}": int(cell["seeds"]) for cell in queue["cells"]}
    for cell in queue["cells"]:
        key, overrides = f"{cell['preset']}/{cell['name']}", tuple(cell.get("overrides", ()))
        first_seed = listed.get(key, 0)  # a cell listed again: the seeds beyond its earlier listing's
        listed[key] = int(cell["seeds"])
        end = int(cell["seeds"]) if int(cell["seeds"]) < last[key] else math.inf  # seeds a later listing holds
        steps = preset_steps(cell["preset"], overrides)
        runs = exported(results / "runs" / cell["preset"] / cell["name"], steps,
                        cell_identity(cell["preset"], overrides))
        if stale is not None and selected(cell, only) and not first_seed:
            stale.extend((folder, key, changes) for folder, changes in runs.stale)
        cost, note, here = _measured(runs.spent, cpu_model, factor)
        listings.append(Listing(cell, first_seed, steps, {seed for seed in runs.seeds if first_seed <= seed < end},
                                cost, note, here))
    return listings


def _measured(spent: dict[str, tuple[float, int]], cpu_model: str,
              factor: float | None) -> tuple[float | None, str, bool]:
    """(The cell's measured cost, how, whether on this CPU): its runs' on ``cpu_model``, else on the others' times
    ``factor``; None without any."""
    cost_here, cost_other = _rates(spent, cpu_model)
    if cost_here:
        return cost_here, "", True
    if cost_other:
        note = f" (cost × {factor:.2f} for this CPU)" if factor else " (cost from other CPUs)" if cpu_model else ""
        return cost_other * (factor or 1.0), note, False
    return None, "", False


def _estimate(listing: Listing, costs: dict[str, tuple[float, str]],
              calibration: tuple[float, str] | None) -> tuple[float, str]:
    """(The listing's cost, how it was found): measured, else its ``like`` cell's times ``scale``, else the
    queue's estimate times ``calibration``, else the estimate as it is."""
    cell = listing.cell
    if listing.cost is not None:
        return listing.cost, listing.note
    if cell.get("like") in costs:
        like_cost, like_note = costs[cell["like"]]
        return (like_cost * float(cell.get("scale", 1.0)),
                f" (as {cell['like']} × {float(cell.get('scale', 1.0)):.3g}: {like_note})")
    if calibration:
        return float(cell["cost"]) * calibration[0], f" (estimate × {calibration[0]:.2f}, as {calibration[1]})"
    return float(cell["cost"]), " (cost estimated)"


def _jobs(listing: Listing, chunk: int, cost: float, note: str) -> list[tuple[Job, str]]:
    """The listing's jobs: one of its exported seeds (done), then a job per ``chunk``-aligned seed range of the
    seeds left (to run). ``chunk``: the cell's own, else the queue's (a GPU cell batches all its seeds)."""
    cell, first_seed, finished = listing.cell, listing.first_seed, listing.finished
    overrides, seeds = tuple(cell.get("overrides", ())), int(cell["seeds"])

    def job(offset: int, count: int) -> Job:  # a GPU cell's: its share of the projected GPU-hours
        share = float(cell["gpu_hours"]) * count / (seeds - first_seed) if "gpu_hours" in cell else None
        return Job(cell["priority"], cell["preset"], cell["name"], overrides, offset, count, listing.steps, cost,
                   share)

    jobs = []
    if finished:
        jobs.append((job(min(finished), len(finished)), f"done: seeds {_ranges(sorted(finished))}"))
    for start in range(first_seed, seeds, chunk):  # chunk-aligned seed ranges: stable names, done seeds skipped
        block = [seed for seed in range(start, min(start + chunk, seeds)) if seed not in finished]
        jobs += [(job(offset, count), "to run" + note) for offset, count in _contiguous(block)]
    return jobs


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
        recorded = OmegaConf.load(config)  # a run recorded before RENAMED: trainer.checkpoint_every, which may differ
        every = int(recorded.trainer.get("checkpoint_every", recorded.task.checkpoint_every))
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

