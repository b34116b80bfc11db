"""Seed-wise tables the report's paper tables do not print, from the committed runs, for hand-written conclusions.

A report table gives each cell's final error and steps to a threshold. A ``conclusions.md`` also quotes other
per-seed statistics: paired differences over other windows of the run, per-seed first crossings, solved and
relapsed seeds. This prints them in markdown from the same cells, seeds and runs as the report's tables
(``Report.resolve`` under the preset of the first path's runs) with its statistics (``stats``: percentile bootstrap
over seeds from ``default_rng(--seed)``; a difference resampled over the seeds both sides have), so that a table
quoting them names its command in ``<!-- computed by: python -m harness.report.seedwise ... -->``
(``harness.report.quotes``). The first of ``--algorithms`` is the reference of every difference. ``--vary
KEY=V1,V2,...`` makes each method one row per value of a config key (``algorithm.epochs=4,16``; ``experiment=`` a
variant preset), the first value of the first method the reference: configurations of one method, paired over the
seed ids they share.

* ``paired``: per method and window (final error; mean error over the run, the area under the curve per episode;
  mean error over the second half, the late phase of ``dynamics``), the value with its interval, then each
  method − the reference, paired. ``--paper`` adds the paper's Fig 1b seeds, paired the same way: the reference
  repository's per-seed curves (``assets/token_reversal_sparse_reward_results.npz``) or
  ``results/paper/fig1b_seed_dynamics.json``, which ``python -m harness.report.dynamics paper`` writes from them.
* ``perseed``: per method, the seeds whose own curve gets below ``--threshold`` and the median seed's first episode
  below it (a seed that never does counts as later than any).
* ``methods``: per method, final error, its paired difference to the reference, steps to ``--threshold`` (seed
  mean), seeds solved and, of those, relapsed (the report's thresholds, ``specs.SOLVED`` and ``RELAPSED``), and
  the mean error over the run.
* ``diagnostics``: per method, Section 4's per-episode diagnostics read off the seed-mean curves (Figs 10a, 11a):
  the all-fail fraction at the episodes ``--at``; the first-epoch gradient norm's peak after a centred
  ``--window``-episode average (as Figs 10b and 11 smooth), its episode, and the first later episode where that
  average falls below ``--fraction`` of the peak ("never" if it does not); the largest single-episode seed mean and
  its episode; the seed mean at the last episode. ``--zero-variance`` adds the fraction of groups whose scores
  have zero variance (all-fail or all-success: no group-relative signal) at the episodes ``--at``, the mark of a
  policy that has become deterministic.
* ``replicate``: per method, ours beside the paper's number for the same cell of ``--table``, and their difference
  in units of the spread of a second run of as many seeds: the normal approximation of the tables' rerun
  interval (``stats.rerun_interval``), with a p-value. The paper's number is itself one run of its seeds. If both
  came from the same process, paper − ours
  would have standard deviation √2·sd (sd: the standard deviation of ours over bootstrap resamples, taken for
  both), so z = (paper − ours)/(√2·sd) and its two-sided normal p say whether the two runs differ by more than
  seed noise. It assumes the paper's seed-to-seed spread equals ours; "n/a" where a statistic is "never" on some
  resample or the paper gives no single number.
* ``relapses``: per method, the error at episode ``--at`` (seed mean with its interval, the median seed), the
  seeds in a relapse there (solved, below ``specs.SOLVED``'s 2%, then back above ``RELAPSED``'s 20% and not solved
  again) with their errors, and the seed mean without them; over the run, the seeds that ever relapse, relapses
  per seed and the share of seed-episodes spent in a relapse. Whether a seed mean at one episode is the typical
  seed's or a relapsing seed's.
* ``rerun``: per method, ours beside other runs of the same cell whose seeds are not ours (``--other``: per-seed
  curves in an ``.npz``, ``<algorithm>_errors`` seeds × episodes, as the paper's own code writes them): the
  statistic with its interval for each, their difference with an interval from resampling each side's seeds on its
  own (unpaired), and, per seed, the median first episode below ``--threshold`` and a Mann–Whitney p on those
  (does the typical seed differ, or only the seed mean's slowest seed?).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.stats import mannwhitneyu, norm

from harness import cli
from harness.report import stats
from harness.report.figures import smooth
from harness.report.load import load_runs, warn
from harness.report.paper import lookup, parse_cell
from harness.report.specs import FINAL, MEAN, RELAPSED, RELAPSES, SOLVED, Stat, algorithm_rank, label
from harness.report.tables import Report, fmt

METRIC = "error"
MAX_SEED_IDS = 100_000  # --seeds: more ids than any run folder holds
GRAD_NORM, ALL_FAIL, ZERO_VARIANCE = "grad_norm", "all_fail", "frac_zero_var"  # what ``diagnostics`` reads
MINUS = "\u2212"


def second_half(matrix: stats.SeedMatrix) -> stats.SeedMatrix:
    """The logged steps from the middle one on: the late phase of ``dynamics.seed_dynamics``."""
    late = matrix.steps >= matrix.steps[len(matrix.steps) // 2]
    return stats.SeedMatrix(matrix.seeds, matrix.steps[late], matrix.values[:, late])


@dataclass(frozen=True)
class Window:
    """A part of each seed's curve (``select``) and the statistic over seeds that reads it."""

    label: str
    stat: Stat
    select: Callable[[stats.SeedMatrix], stats.SeedMatrix] = lambda matrix: matrix


WINDOWS = {"final": Window("final error", FINAL), "run": Window("mean error over the run", MEAN),
           "second-half": Window("mean error, second half", MEAN, second_half)}
# the per-seed fields of fig1b_seed_dynamics.json, by window
PAPER_PER_SEED = {"final": "final_per_seed", "run": "run_mean_per_seed", "second-half": "late_mean_per_seed"}


@dataclass
class Cell:
    """One method's seeds: its error matrix (None when the report has no usable runs for it) and the report's status
    of the cell (ok, partial, missing, failed, conflict); ``key``: the ``--vary`` key's value, if any."""

    algorithm: str
    matrix: stats.SeedMatrix | None
    status: str
    key: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        """The row label: the method's, then the varied key's (``TPO, epochs=16``)."""
        return label({"algorithm.name": self.algorithm, **self.key})


def parse_seeds(text: str) -> list[int]:
    """``0-4,7`` → [0, 1, 2, 3, 4, 7] (an argparse type: at most ``MAX_SEED_IDS`` ids, ranges in order)."""
    seeds = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        try:
            low, high = int(first), int(last or first)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: expected seed ids such as 0-4 or 0,2,5-9") from None
        if not 0 <= low <= high or len(seeds) + high - low + 1 > MAX_SEED_IDS:
            raise argparse.ArgumentTypeError(f"{text!r}: expected ranges low-high with 0 <= low <= high, at most "
                                             f"{MAX_SEED_IDS} ids")
        seeds += range(low, high + 1)
    return seeds


def parse_vary(text: str) -> dict[str, list]:
    """``algorithm.epochs=4,16`` → {"algorithm.epochs": [4.0, 16.0]} (an argparse type; values typed as --where's)."""
    name, _, values = text.partition("=")
    if not name or not values or "," not in values or any(not value for value in values.split(",")):
        raise argparse.ArgumentTypeError(f"{text!r}: expected one config key and two or more values, e.g. "
                                         "algorithm.epochs=4,16")
    typed = [parse_cell(f"{name}={value}")[name] for value in values.split(",")]
    if len(set(typed)) != len(typed):
        raise argparse.ArgumentTypeError(f"{text!r}: a value is given twice")
    return {name: typed}


def load_cells(paths: list[Path], algorithms: list[str], where: str, seeds: list[int] | None,
               preset: str | None, metric: str = METRIC, vary: dict[str, list] | None = None) -> list[Cell]:
    """Each algorithm's cell (``where``'s keys and the algorithm) of ``metric``, resolved as the report's tables
    resolve it, restricted to ``seeds`` when given; no ``algorithms``: every one with runs the cell reads (a grouped
    method's that differ only in a key it does not depend on, ``Task.inert_keys``), in the paper's order. ``vary``
    ({key: values}): one cell per algorithm and value, the values in their order within each algorithm."""
    runs, curves = load_runs(paths, metrics=[metric])
    if runs.empty:
        raise cli.Refusal(f"no runs under {', '.join(map(str, paths))}")
    if preset is None:
        own = {experiment for run_dir, experiment in zip(runs.run_dir, runs.experiment)
               if Path(run_dir).is_relative_to(paths[0])}
        if len(own) != 1:
            raise cli.Refusal(f"{paths[0]}: runs of {len(own)} presets ({', '.join(sorted(own))}); give --preset")
        preset = own.pop()
    report = Report(runs, curves)
    key = parse_cell(where.replace(",", " "))
    varied, values = next(iter((vary or {None: [None]}).items()))
    if varied in key:
        raise cli.Refusal(f"--vary {varied}: the key is also in --where; give it in one of them")
    algorithms = algorithms or sorted(set(report.matching(preset, key, inert=True).algorithm), key=algorithm_rank)
    budget = report.budget(preset)
    cells = []
    for algorithm, value in ((algorithm, value) for algorithm in algorithms for value in values):
        cell = Cell(algorithm, None, "", {} if varied is None else {varied: value})
        resolved = report.resolve(preset, {**key, **cell.key, "algorithm.name": algorithm}, budget)
        matrix = report.matrix(resolved, metric) if resolved.usable else None
        if matrix is not None and seeds is not None:
            keep = np.isin(matrix.seeds, seeds)
            if not keep.any():
                raise cli.Refusal(f"--seeds: {cell.name} has none of them (its seeds: "
                                  f"{', '.join(map(str, matrix.seeds[:20]))}{' …' if len(matrix.seeds) > 20 else ''})")
            matrix = stats.SeedMatrix(matrix.seeds[keep], matrix.steps, matrix.values[keep])
        if resolved.status != "ok" or resolved.flags:
            warn(f"{cell.name}: {'; '.join([resolved.status, *resolved.flags])}")
        cell.matrix, cell.status = matrix, resolved.status
        cells.append(cell)
    return cells


def number(stat: Stat, value: float, signed: bool = False) -> str:
    """``tables.fmt`` with a typographic minus, and a plus on a positive difference."""
    text = fmt(stat, value).replace("-", MINUS)
    return f"+{text}" if signed and value > 0 else text


def with_interval(stat: Stat, value: float, low: float, high: float, signed: bool = False) -> str:
    return f"{number(stat, value, signed)} [{number(stat, low)}, {number(stat, high)}]"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    return "\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                      *("| " + " | ".join(row) + " |" for row in rows)])


Side = dict[str, dict[str, stats.SeedMatrix | None]]  # row label → window → its seeds' values there


def windowed(cells: list[Cell], windows: list[str]) -> Side:
    return {cell.name: {name: None if cell.matrix is None else WINDOWS[name].select(cell.matrix)
                        for name in windows} for cell in cells}


def paper_side(path: Path, algorithms: list[str], windows: list[str]) -> Side:
    """The paper's seeds (ids 0, 1, ...) per window: from its per-seed curves (``.npz``) or the per-seed values
    ``fig1b_seed_dynamics.json`` holds (None for a window it lacks)."""
    if path.suffix == ".npz":
        data = np.load(path)
        cells = []
        for algorithm in algorithms:
            errors = data[f"{algorithm}_errors"].astype(float)
            cells.append(Cell(algorithm, stats.SeedMatrix(np.arange(len(errors)), data["episodes"], errors), "ok"))
        return windowed(cells, windows)
    per_seed = json.loads(path.read_text())

    def column(algorithm: str, window: str) -> stats.SeedMatrix | None:
        if window not in PAPER_PER_SEED:
            return None
        values = np.array(per_seed[algorithm][PAPER_PER_SEED[window]], dtype=float)  # None (diverged) → NaN
        return stats.SeedMatrix(np.arange(len(values)), np.zeros(1, dtype=int), values[:, None])

    return {label({"algorithm.name": algorithm}): {name: column(algorithm, name) for name in windows}
            for algorithm in algorithms}


def paired_tables(sides: dict[str, Side], windows: list[str], resamples: int, seed: int) -> str:
    """Per method and window its value [interval]; then each method − the side's first, paired over the seeds both
    have. One row per method and side (``sides``: row-label suffix → side)."""
    header = [WINDOWS[name].label for name in windows]
    values, differences = [], []
    for suffix, side in sides.items():
        reference = side[next(iter(side))]
        for name_of_row, matrices in side.items():
            row = name_of_row + suffix
            summaries = {name: None if matrices[name] is None else
                         stats.summarize(WINDOWS[name].stat, matrices[name], resamples, seed) for name in windows}
            values.append([row, str(max((s.seeds for s in summaries.values() if s), default=0)),
                           *("n/a" if s is None else with_interval(WINDOWS[name].stat, s.value, s.low, s.high)
                             for name, s in summaries.items())])
            if matrices is reference:
                continue
            pairs = {name: None if matrices[name] is None or reference[name] is None else
                     stats.paired(WINDOWS[name].stat, matrices[name], reference[name], resamples, seed)
                     for name in windows}
            differences.append([row, str(max((p.seeds for p in pairs.values() if p), default=0)),
                                *("n/a" if p is None else with_interval(WINDOWS[name].stat, p.diff, p.low, p.high,
                                                                        signed=True)
                                  for name, p in pairs.items())])
    reference_label = next(iter(next(iter(sides.values()))))
    return "\n\n".join([markdown(["", "seeds", *header], values),
                         markdown([f"X {MINUS} {reference_label}, paired", "seeds", *header], differences)])


def perseed_table(cells: list[Cell], threshold: float) -> str:
    """Per method: seeds, the seeds whose own curve gets below ``threshold``, the median seed's first episode
    below it (``never`` counts as later than any episode, as ``stats.first_below`` gives it)."""
    stat = Stat("steps_to", threshold=threshold)
    rows = []
    for cell in cells:
        if cell.matrix is None:
            rows.append([cell.name, "0", cell.status, cell.status])
            continue
        first = stats.per_seed(stat, cell.matrix)
        median = np.median(first)
        rows.append([cell.name, str(len(first)),
                     f"{int(np.isfinite(first).sum())}/{len(first)}",
                     "never" if np.isinf(median) else fmt(stat, median)])
    threshold_text = f"{100 * threshold:g}%"
    return markdown(["", "seeds", f"seeds that reach {threshold_text}",
                     f"per-seed median (first episode below {threshold_text})"], rows)


def methods_table(cells: list[Cell], threshold: float, resamples: int, seed: int) -> str:
    """Per method: final error [interval], paired Δ to the first method [interval], steps to ``threshold`` of the
    seed mean, seeds solved and relapsed at the report's thresholds, and the mean error over the run."""
    steps_to = Stat("steps_to", threshold=threshold)
    reference = cells[0]
    rows = []
    for cell in cells:
        name = cell.name
        if cell.matrix is None:
            rows.append([name, "0", *[cell.status] * 6])
            continue
        final = stats.summarize(FINAL, cell.matrix, resamples, seed)
        if cell is reference or reference.matrix is None:
            delta = "–"
        else:
            paired = stats.paired(FINAL, cell.matrix, reference.matrix, resamples, seed)
            delta = with_interval(FINAL, paired.diff, paired.low, paired.high, signed=True)
        reached = stats.point(steps_to, cell.matrix)
        solved = int(stats.per_seed(SOLVED, cell.matrix).sum())
        relapsed = int(stats.per_seed(RELAPSED, cell.matrix).sum())  # a seed that never solved never relapses
        rows.append([name, str(len(cell.matrix.seeds)), with_interval(FINAL, final.value, final.low, final.high),
                     delta, "never" if np.isinf(reached) else fmt(steps_to, reached),
                     f"{solved}/{len(cell.matrix.seeds)}", str(relapsed) if solved else "–",
                     number(MEAN, stats.point(MEAN, cell.matrix))])
    return markdown(["", "seeds", "final error % [95% CI]",
                     f"Δ to {reference.name} [95% CI]",
                     f"steps to {100 * threshold:g}%", f"seeds solved (< {100 * SOLVED.threshold:g}%)",
                     f"of those, relapsed (> {100 * RELAPSED.relapse_above:g}%)", "mean error over the run"], rows)


def in_relapse(errors: np.ndarray, solved_below: float, relapse_above: float) -> np.ndarray:
    """Per logged step, whether a seed is in a relapse there: it had solved (error below ``solved_below``), then
    rose above ``relapse_above`` and has not solved again (``relapse_events``' states, step by step)."""
    state, solved, relapsed = np.zeros(len(errors), dtype=bool), False, False
    for index, error in enumerate(errors):
        if not solved and error < solved_below:
            solved, relapsed = True, False
        elif solved and error > relapse_above:
            solved, relapsed = False, True
        state[index] = relapsed
    return state


def relapses_table(cells: list[Cell], at: int, resamples: int, seed: int) -> str:
    """Per method, the error at episode ``at``: the seed mean [95% CI], the median seed, the seeds in a relapse
    there (``in_relapse`` at the report's thresholds) and the seed mean without them; over the run, the seeds that
    ever relapse, relapses per seed and the share of episodes a seed spends in a relapse."""
    stat = Stat("at_step", step=at)
    below, above = SOLVED.threshold, RELAPSED.relapse_above
    rows = []
    for cell in cells:
        name = cell.name
        if cell.matrix is None:
            rows.append([name, "0", *[cell.status] * 7])
            continue
        matrix = cell.matrix
        column = int(np.searchsorted(matrix.steps, at))
        if column == len(matrix.steps) or matrix.steps[column] != at:
            raise cli.Refusal(f"{name}: episode {at} is not logged")
        states = np.array([in_relapse(row, below, above) for row in matrix.values])
        events = stats.per_seed(RELAPSES, matrix)
        value = stats.summarize(stat, matrix, resamples, seed)
        at_values, relapsing = matrix.values[:, column], states[:, column]
        rest = at_values[~relapsing]
        rows.append([name, str(len(matrix.seeds)), with_interval(stat, value.value, value.low, value.high),
                     number(stat, float(np.median(at_values))),
                     ", ".join(f"seed {s} ({number(stat, v)})" for s, v in
                               zip(matrix.seeds[relapsing], at_values[relapsing])) or "none",
                     number(stat, float(rest.mean())) if rest.size else "–",
                     f"{int((events > 0).sum())}/{len(matrix.seeds)}", f"{events.mean():.1f}",
                     f"{100 * states.mean():.1f}%"])
    return markdown(["", "seeds", f"error at {at} (%) [95% CI]", f"median seed at {at}",
                     f"seeds in a relapse at {at} (error %)", f"seed mean at {at} without them",
                     "seeds that ever relapse", "relapses per seed", "episodes in a relapse"], rows)


def seed_mean(matrix: stats.SeedMatrix) -> np.ndarray:
    """Each logged step's mean over the seeds with a finite value there (NaN where none has: a metric the method
    does not log)."""
    finite = np.isfinite(matrix.values)
    with np.errstate(invalid="ignore"):
        return np.where(finite, matrix.values, 0.0).sum(axis=0) / finite.sum(axis=0)


def _g(value: float, digits: int = 3) -> str:
    return f"{value:.{digits}g}" if np.isfinite(value) else "n/a"


def _fraction_at(mean: np.ndarray, steps: np.ndarray, episode: int) -> str:
    where = np.flatnonzero(steps == episode)
    if where.size == 0:
        return "not logged"
    return "n/a" if np.isnan(mean[where[0]]) else f"{mean[where[0]]:.3f}"


def diagnostics_table(norms: list[Cell], fails: list[Cell], at: list[int], window: int, fraction: float,
                      zero_variance: list[Cell] | None = None) -> str:
    """Per method (``norms``, ``fails`` and ``zero_variance``: its gradient-norm, all-fail and, if given,
    zero-variance cells, in the same order), the ``diagnostics`` command's columns (see the module docstring), from
    the seed mean of each episode."""
    rows = []
    for index, (grad, fail) in enumerate(zip(norms, fails)):
        name = grad.name
        fractions = [fail] + ([zero_variance[index]] if zero_variance else [])
        missing = next((cell for cell in (grad, fail) if cell.matrix is None), None)
        if missing is not None:
            rows.append([name, "0", *[missing.status] * (len(fractions) * len(at) + 5)])
            continue
        for cell in fractions[1:]:  # runs older than the metric lack it: their columns say so, the row stays
            if cell.matrix is not None and set(cell.matrix.seeds) != set(grad.matrix.seeds):
                warn(f"{name}: frac_zero_var from {len(cell.matrix.seeds)} of {len(grad.matrix.seeds)} seeds")
        fails_at = ["not logged" if cell.matrix is None else _fraction_at(seed_mean(cell.matrix), cell.matrix.steps,
                                                                           episode)
                    for cell in fractions for episode in at]
        mean, steps = seed_mean(grad.matrix), grad.matrix.steps
        averaged = smooth(mean, window, centred=True)
        if not np.isfinite(averaged).any():
            rows.append([name, str(len(grad.matrix.seeds)), *fails_at, *["n/a"] * 5])
            continue
        peak, top = int(np.nanargmax(averaged)), int(np.nanargmax(mean))
        below = np.flatnonzero(averaged[peak:] < fraction * averaged[peak])  # after the peak: the curve starts low
        rows.append([name, str(len(grad.matrix.seeds)), *fails_at, _g(averaged[peak]), str(steps[peak]),
                     "never" if below.size == 0 else str(steps[peak + below[0]]),
                     f"{_g(mean[top])} ({steps[top]})", _g(mean[-1], 2)])
    return markdown(["", "seeds", *(f"all-fail at episode {episode}" for episode in at),
                     *(f"zero-variance at episode {episode}" for episode in (at if zero_variance else ())),
                     f"gradient-norm peak ({window}-episode centred average)", "at episode",
                     f"first episode below {100 * fraction:g}% of the peak", "largest single-episode mean (episode)",
                     "last episode's mean"], rows)


def replicate_table(cells: list[Cell], stat: Stat, table: str, where: dict, resamples: int, seed: int) -> str:
    """Per method: ours [interval], the bootstrap sd, the paper's number for the cell, paper − ours, z and p (see the
    module docstring)."""
    rows = []
    for cell in cells:
        name = cell.name
        paper = lookup(table, stat.name, {**where, **cell.key, "algorithm.name": cell.algorithm})
        published = paper.text if paper is not None else "–"
        if cell.matrix is None:
            rows.append([name, "0", cell.status, "n/a", published, "n/a", "n/a", "n/a"])
            continue
        counts = stats.resample_counts(len(cell.matrix.seeds), resamples, seed)
        samples = stats.bootstrap(stat, cell.matrix, counts)  # the interval's resamples give the sd too
        point, (low, high) = stats.point(stat, cell.matrix), stats.interval(samples)
        value = "never" if np.isinf(point) else fmt(stat, point)
        row = [name, str(len(cell.matrix.seeds)), f"{value} [{fmt(stat, low)}, "
               f"{'never' if np.isinf(high) else fmt(stat, high)}]"]
        spread = float(np.std(samples)) if np.isfinite(samples).all() else np.nan
        shown = f"{spread:.1f}" if stat.kind == "steps_to" else number(stat, spread)
        centre = (paper.low + paper.high) / 2 if paper is not None else np.nan
        if not (np.isfinite(spread) and spread > 0 and np.isfinite(centre) and np.isfinite(point)):
            rows.append([*row, shown if np.isfinite(spread) else "n/a", published, "n/a", "n/a", "n/a"])
            continue
        z = (centre - point) / (np.sqrt(2) * spread)
        rows.append([*row, shown, published, number(stat, centre - point, signed=True),
                     f"{z:+.1f}".replace("-", MINUS), f"{2 * norm.sf(abs(z)):.2f}"])
    return markdown(["", "seeds", "ours [95% CI]", "bootstrap sd", "paper", f"paper {MINUS} ours",
                     "z (independent rerun)", "p"], rows)


def other_cell(path: Path, algorithm: str) -> Cell:
    data = np.load(path)
    errors = np.asarray(data[f"{algorithm}_errors"], dtype=float)
    return Cell(algorithm, stats.SeedMatrix(np.arange(len(errors)), np.arange(errors.shape[1]), errors), "ok")


def rerun_table(cells: list[Cell], others: list[Path], threshold: float, resamples: int, seed: int) -> str:
    """Per method: ours and each other run of its cell, steps to ``threshold`` [interval], the per-seed median first
    episode below it, and for the others: other − ours [unpaired interval] and the Mann–Whitney p of the per-seed
    first episodes (see the module docstring)."""
    stat = Stat("steps_to", threshold=threshold)
    rows = []
    for cell in cells:
        name = cell.name
        if cell.matrix is None:
            rows.append([name, "0", cell.status, "n/a", "–", "–"])
            continue
        mine = stats.bootstrap(stat, cell.matrix, stats.resample_counts(len(cell.matrix.seeds), resamples, seed))
        for path in [None, *others]:
            matrix = cell.matrix if path is None else other_cell(path, cell.algorithm).matrix
            n = len(matrix.seeds)
            summary = stats.summarize(stat, matrix, resamples, seed)
            first = stats.per_seed(stat, matrix)
            median = np.median(first)
            row = [name if path is None else f"{name}, {path.name}", str(n),
                   f"{'never' if np.isinf(summary.value) else fmt(stat, summary.value)} [{fmt(stat, summary.low)}, "
                   f"{'never' if np.isinf(summary.high) else fmt(stat, summary.high)}]",
                   "never" if np.isinf(median) else fmt(stat, median)]
            if path is None:
                rows.append([*row, "–", "–"])
                continue
            theirs = stats.bootstrap(stat, matrix, stats.resample_counts(n, resamples, seed + 1))  # independent
            low, high = stats.interval(theirs - mine)
            difference = with_interval(stat, summary.value - stats.point(stat, cell.matrix), low, high, signed=True)
            p = mannwhitneyu(first, stats.per_seed(stat, cell.matrix)).pvalue
            rows.append([*row, difference, f"{p:.2f}"])
    return markdown(["", "seeds", f"steps to {100 * threshold:g}% [95% CI]",
                     f"per-seed median (first episode below {100 * threshold:g}%)", f"other {MINUS} ours [95% CI]",
                     "Mann–Whitney p (per seed)"], rows)


def _refuse_bad_combinations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Arguments each valid alone that do not go together: one line, exit 2, before any run is read."""
    if args.command == "paired" and set(args.windows) - set(WINDOWS):
        parser.error(f"--windows: choose from {', '.join(WINDOWS)}")
    if args.vary and (args.command == "rerun" or getattr(args, "paper", None) is not None):
        parser.error(f"--vary: not with {'rerun' if args.command == 'rerun' else '--paper'} (the other runs hold one "
                     "configuration per method)")


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.report.seedwise", description=__doc__,
                        details="harness/report/seedwise.py",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("paths", nargs="+", type=Path, help="run folders (e.g. under results/runs); the first one's "
                                                           "preset resolves the cells")
    common.add_argument("--algorithms", type=lambda text: text.split(","), default=[],
                        help="comma list, the reference first (default: every one with runs, in the paper's order)")
    common.add_argument("--where", default="", help="the cells' other config keys: task.H=7,task.match=prompts")
    common.add_argument("--vary", type=parse_vary, default=None,
                        help="one row per method and value of this config key, the first the reference: "
                             "algorithm.epochs=4,16")
    common.add_argument("--seeds", type=parse_seeds, default=None, help="only these seed ids: 0-4 or 0,2,5-9")
    common.add_argument("--preset", default=None, help="resolve the cells as this preset's tables do (default: the "
                                                       "preset of the first path's runs)")
    common.add_argument("--resamples", type=cli.number(int, low=100, high=100_000), default=stats.RESAMPLES,
                        help="bootstrap resamples")
    common.add_argument("--seed", type=cli.number(int, low=0, high=2**32 - 1), default=stats.SEED,
                        help="bootstrap generator seed")
    commands = parser.add_subparsers(dest="command", required=True)
    paired = commands.add_parser("paired", parents=[common], help="windows of the run, each paired to the reference")
    paired.add_argument("--windows", type=lambda text: text.split(","), default=list(WINDOWS),
                        help=f"comma list of {', '.join(WINDOWS)}")
    paired.add_argument("--paper", type=Path, default=None,
                        help="the paper's Fig 1b seeds: the reference repository's per-seed curves (.npz) or "
                             "results/paper/fig1b_seed_dynamics.json")
    for name, text in (("perseed", "per-seed first episodes below a threshold"),
                       ("methods", "final error, Δ, steps to a threshold, solved and relapsed seeds, run mean")):
        commands.add_parser(name, parents=[common], help=text).add_argument(
            "--threshold", type=cli.number(float, above=0, high=1), required=True, help="error threshold, e.g. 0.01")
    diagnostics = commands.add_parser("diagnostics", parents=[common],
                                      help="Section 4's all-fail fraction and gradient-norm peak and decay")
    diagnostics.add_argument("--at", type=lambda text: [int(item) for item in text.split(",")], default=[0, 100],
                             help="episodes at which to read the all-fail fraction (default 0,100)")
    diagnostics.add_argument("--window", type=cli.number(int, low=1, high=10**9), default=50,
                             help="centred moving average of the gradient norm")
    diagnostics.add_argument("--fraction", type=cli.number(float, above=0, high=1), default=0.01,
                             help="the decay point: the first episode after the peak below this fraction of it")
    diagnostics.add_argument("--zero-variance", action="store_true",
                             help="also the fraction of zero-variance groups at the episodes --at")
    replicate = commands.add_parser("replicate", parents=[common],
                                    help="ours against the paper's number, in units of an independent rerun's spread")
    replicate.add_argument("--table", required=True, help="the paper artefact whose numbers to read, e.g. table1")
    replicate.add_argument("--threshold", type=cli.number(float, above=0, high=1), default=None,
                           help="steps to this error (e.g. 0.01); without it, the final error")
    relapses = commands.add_parser("relapses", parents=[common],
                                   help="the error at an episode with the seeds in a relapse there, and relapses "
                                        "over the run")
    relapses.add_argument("--at", type=cli.number(int, low=0, high=10**9), required=True, help="the episode, e.g. 400")
    rerun = commands.add_parser("rerun", parents=[common], help="ours against runs of the same cell on other seeds")
    rerun.add_argument("--other", type=Path, action="append", required=True,
                       help="per-seed curves of another run (.npz with <algorithm>_errors); repeat for several")
    rerun.add_argument("--threshold", type=cli.number(float, above=0, high=1), required=True,
                       help="error threshold, e.g. 0.01")
    args = parser.parse_args(argv)
    _refuse_bad_combinations(parser, args)
    if args.command == "diagnostics":
        norms, fails, *zero_variance = (
            load_cells(args.paths, args.algorithms, args.where, args.seeds, args.preset, metric, args.vary)
            for metric in (GRAD_NORM, ALL_FAIL, *([ZERO_VARIANCE] if args.zero_variance else [])))
        print(diagnostics_table(norms, fails, args.at, args.window, args.fraction, zero_variance[0] if zero_variance
                                else None))
        return
    cells = load_cells(args.paths, args.algorithms, args.where, args.seeds, args.preset, vary=args.vary)
    if args.command == "paired":
        sides = {"": windowed(cells, args.windows)}
        if args.paper is not None:
            sides[", paper"] = paper_side(args.paper, [cell.algorithm for cell in cells], args.windows)
        print(paired_tables(sides, args.windows, args.resamples, args.seed))
    elif args.command == "perseed":
        print(perseed_table(cells, args.threshold))
    elif args.command == "relapses":
        print(relapses_table(cells, args.at, args.resamples, args.seed))
    elif args.command == "rerun":
        print(rerun_table(cells, args.other, args.threshold, args.resamples, args.seed))
    elif args.command == "replicate":
        stat = FINAL if args.threshold is None else Stat("steps_to", threshold=args.threshold)
        print(replicate_table(cells, stat, args.table, parse_cell(args.where.replace(",", " ")), args.resamples,
                              args.seed))
    else:
        print(methods_table(cells, args.threshold, args.resamples, args.seed))


if __name__ == "__main__":
    main()
