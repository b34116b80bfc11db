"""Seed statistics exactly as docs/reproduction.md §7, percentile-bootstrap intervals over seeds, and paired
comparisons.

* final = seed mean at the last step; at_step = seed mean at a given step; mean = seed mean of each seed's mean over
  all logged steps; steps_to X = first step whose seed-mean curve is strictly below X (``inf`` = never). Means skip
  non-finite values (seeds that diverged).
* s.e. = population std / sqrt(n).
* Bootstrap: resample seeds with replacement (``RESAMPLES`` draws from ``numpy.random.default_rng(SEED)``), apply
  the same statistic to each resample's seed-mean curve, take the 2.5% and 97.5% quantiles (no interpolation, so
  ``never`` stays ``inf``). Same data and seed → same interval.
* Rerun interval (the test of a published value, ``rerun_interval``): where the statistic of a second run of as
  many seeds would land, ours plus the difference between two independent resamples; the report marks a paper
  value ✓ when it overlaps this interval, not the confidence interval of ours.
* Paired: seeds with the same id share initial parameters and contexts across algorithms. The difference
  (algorithm − reference) is bootstrapped with the *same* resampled seed ids for both, over the seeds that have a
  value on both sides (not diverged, the metric logged); never − never counts as 0.
  P(better) = fraction of paired seeds on which the algorithm's own per-seed value is better (lower; higher for
  ``Stat.higher_is_better``) than the reference's (ties count ½); per-seed steps_to is the seed's own first step
  below X.

Why not ``scipy.stats.bootstrap`` or rliable: from ``default_rng(SEED)`` scipy's percentile method draws these very
resamples (paired ones too) but interpolates its quantiles linearly, with no ``inverted_cdf`` choice, so every
interval end would move (the tables' CSVs with it) and an end between a finite resample and a never one would become
never; its BCa is another interval altogether. rliable's intervals (arch's percentile bootstrap) interpolate too, and
draw from numpy's global generator.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass

import numpy as np

from harness.rundir.summary import relapse_events
from harness.report.specs import Stat

RESAMPLES, SEED, LEVEL = 2000, 0, 0.95
MAX_CHUNK = 256  # steps per matrix product when searching first crossings


@dataclass
class SeedMatrix:
    """One metric of one cell: values (seeds × steps), NaN where a seed diverged."""

    seeds: np.ndarray
    steps: np.ndarray
    values: np.ndarray

    def align(self, other: SeedMatrix) -> tuple[SeedMatrix, SeedMatrix]:
        """Both restricted to their common seed ids and steps (rows and columns in the same order)."""
        seeds, a_rows, b_rows = np.intersect1d(self.seeds, other.seeds, return_indices=True)
        steps, a_cols, b_cols = np.intersect1d(self.steps, other.steps, return_indices=True)
        return (SeedMatrix(seeds, steps, self.values[np.ix_(a_rows, a_cols)]),
                SeedMatrix(seeds, steps, other.values[np.ix_(b_rows, b_cols)]))


def seed_matrix(seed: np.ndarray, step: np.ndarray, value: np.ndarray) -> SeedMatrix:
    """Pivot tidy (seed, step, value) rows; keeps only the steps every seed logged (partial runs may stop early)."""
    seeds, seed_index = np.unique(seed, return_inverse=True)
    steps, step_index = np.unique(step, return_inverse=True)
    values = np.full((len(seeds), len(steps)), np.nan)
    present = np.zeros(values.shape, dtype=bool)
    values[seed_index, step_index] = value
    present[seed_index, step_index] = True
    common = present.all(0)
    return SeedMatrix(seeds, steps[common], values[:, common])


def _nanmean(values: np.ndarray, axis: int = 0) -> np.ndarray:
    finite = np.isfinite(values)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(finite, values, 0.0).sum(axis) / finite.sum(axis)


def first_below(curves: np.ndarray, steps: np.ndarray, threshold: float) -> np.ndarray:
    """Per row of ``curves`` (…, T): the first step whose value is strictly below ``threshold``, else inf."""
    below = curves < threshold
    first = below.argmax(-1)
    hit = np.take_along_axis(below, np.expand_dims(first, -1), -1)[..., 0]
    return np.where(hit, steps[first].astype(float), np.inf)


def _column(stat: Stat, matrix: SeedMatrix) -> np.ndarray:
    """The per-seed values a final/at_step/mean statistic averages."""
    if stat.kind == "final":
        return matrix.values[:, -1]
    if stat.kind == "mean":
        return _nanmean(matrix.values, axis=1)
    if stat.kind in ("solved", "relapsed", "relapses"):
        events = [relapse_events(matrix.steps, row, stat.threshold, stat.relapse_above or 1.0)
                  for row in matrix.values]
        counts = np.array([float(e["solved" if stat.kind == "solved" else "relapses"]) for e in events])
        return counts if stat.kind == "relapses" else (counts > 0).astype(float)
    hits = np.flatnonzero(matrix.steps == stat.step)
    return matrix.values[:, hits[0]] if hits.size else np.full(len(matrix.seeds), np.nan)


def point(stat: Stat, matrix: SeedMatrix) -> float:
    if matrix.values.size == 0:
        return np.nan
    if stat.kind == "steps_to":
        return float(first_below(_nanmean(matrix.values), matrix.steps, stat.threshold))
    return float(_nanmean(_column(stat, matrix)))


def standard_error(stat: Stat, matrix: SeedMatrix) -> float:
    """Population std / sqrt(n) over finite per-seed values (NaN for steps_to, a property of the mean curve)."""
    if stat.kind == "steps_to" or matrix.values.size == 0:
        return np.nan
    column = _column(stat, matrix)
    column = column[np.isfinite(column)]
    return float(column.std() / np.sqrt(column.size)) if column.size else np.nan


def per_seed(stat: Stat, matrix: SeedMatrix) -> np.ndarray:
    if stat.kind == "steps_to":
        return first_below(matrix.values, matrix.steps, stat.threshold)
    return _column(stat, matrix)


@functools.lru_cache(maxsize=64)
def resample_counts(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> np.ndarray:
    """(resamples, n) multiplicities of each seed in each bootstrap resample (read-only, cached)."""
    draws = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    offsets = (draws + n * np.arange(resamples)[:, None]).ravel()
    counts = np.bincount(offsets, minlength=resamples * n).reshape(resamples, n).astype(float)
    counts.flags.writeable = False
    return counts


def _weighted_means(counts: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Seed means of every resample; NaN-aware only when needed (mixed-dtype matmuls skip BLAS)."""
    finite = np.isfinite(values)
    if finite.all():
        return (counts @ values) / counts.shape[1]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (counts @ np.where(finite, values, 0.0)) / (counts @ finite.astype(float))


def bootstrap(stat: Stat, matrix: SeedMatrix, counts: np.ndarray) -> np.ndarray:
    """The statistic on every resample (rows of ``counts``). A resample's mean can only be below X where some seed
    is, so steps_to searches just those steps, in chunks, until every resample has crossed."""
    if stat.kind != "steps_to":
        return _weighted_means(counts, _column(stat, matrix))
    lowest = np.where(np.isfinite(matrix.values), matrix.values, np.inf).min(0)
    candidates = np.flatnonzero(lowest < stat.threshold)
    found = np.full(len(counts), np.inf)
    open_rows = np.arange(len(counts))
    start, width = 0, 8
    while start < len(candidates) and open_rows.size:  # most resamples cross early: chunks grow 8, 16, 32, ...
        columns = candidates[start:start + width]
        hit = first_below(_weighted_means(counts[open_rows], matrix.values[:, columns]), matrix.steps[columns],
                          stat.threshold)
        found[open_rows] = hit
        open_rows = open_rows[~np.isfinite(hit)]
        start, width = start + width, min(2 * width, MAX_CHUNK)
    return found


def interval(samples: np.ndarray, level: float = LEVEL) -> tuple[float, float]:
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return np.nan, np.nan
    tail = (1 - level) / 2
    low, high = np.quantile(samples, [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high)


def _difference(a: np.ndarray | float, b: np.ndarray | float) -> np.ndarray:
    a, b = np.asarray(a, float), np.asarray(b, float)
    both_never = np.isinf(a) & np.isinf(b) & (a == b)
    with np.errstate(invalid="ignore"):
        return np.where(both_never, 0.0, a - b)


@dataclass
class Summary:
    """``seeds``: how many seeds the value averages (finite per-seed values; all seeds for steps_to); ``rerun_low``,
    ``rerun_high``: where the same statistic of a rerun of as many seeds would land (``rerun_interval``)."""

    value: float
    se: float
    low: float
    high: float
    seeds: int
    rerun_low: float = np.nan
    rerun_high: float = np.nan


def summarize(stat: Stat, matrix: SeedMatrix, resamples: int = RESAMPLES, seed: int = SEED) -> Summary:
    """Point value, s.e., bootstrap interval and rerun interval of one cell."""
    n = len(matrix.seeds)
    if n == 0 or matrix.values.size == 0:
        return Summary(np.nan, np.nan, np.nan, np.nan, n)
    samples = bootstrap(stat, matrix, resample_counts(n, resamples, seed))
    low, high = interval(samples)
    value = point(stat, matrix)
    finite = n if stat.kind == "steps_to" else int(np.isfinite(_column(stat, matrix)).sum())
    if stat.kind == "steps_to":
        rerun = rerun_interval(value, samples, float(matrix.steps[0]), float(matrix.steps[-1]) + 1, censor=True)
    else:
        rerun = rerun_interval(value, samples, *((0.0, 1.0) if stat.percent else (-math.inf, math.inf)))
    return Summary(value, standard_error(stat, matrix), low, high, finite, *rerun)


def rerun_interval(value: float, samples: np.ndarray, lowest: float, highest: float, censor: bool = False,
                   level: float = LEVEL) -> tuple[float, float]:
    """A 95% bootstrap prediction interval for the statistic of a second, independent run of as many seeds: ours
    plus the quantiles of the difference between two independent resamples (resample i against resample i + R/2, so
    the difference is symmetric: a rerun is as likely above ours as below). It is the test of a published value,
    itself one run of its seeds: the confidence interval of ours cannot reach past our slowest seed, so a statistic
    set by the slowest seed (steps to X of the seed mean) has a lopsided one whose end is often the point itself.
    The ends are kept within what the statistic can be, [``lowest``, ``highest``] (0–1 for a fraction, the run's
    first logged step and one step past its last for steps to X). ``censor`` (steps to X): a resample that never
    crosses counts as crossing one step after the run, ``highest``, and an end there is never (``inf``)."""
    if censor:
        samples, value = np.minimum(samples, highest), min(value, highest)
    spread = samples - np.roll(samples, len(samples) // 2)
    low, high = (float(np.clip(end, lowest, highest)) for end in interval(value + spread, level))
    if censor:
        low, high = (math.inf if end >= highest else end for end in (low, high))
    return low, high


@dataclass
class Paired:
    diff: float
    low: float
    high: float
    p_better: float
    seeds: int


def paired(stat: Stat, matrix: SeedMatrix, reference: SeedMatrix, resamples: int = RESAMPLES,
           seed: int = SEED) -> Paired:
    """Algorithm − reference on their common seeds where both have a value (see module docstring)."""
    a, b = matrix.align(reference)
    if len(a.seeds) == 0 or a.values.size == 0:
        return Paired(np.nan, np.nan, np.nan, np.nan, 0)
    mine, theirs = per_seed(stat, a), per_seed(stat, b)
    valid = ~(np.isnan(mine) | np.isnan(theirs))  # a seed that diverged, or lacks the metric, on either side
    if not valid.all():
        a, b = (SeedMatrix(m.seeds[valid], m.steps, m.values[valid]) for m in (a, b))
        mine, theirs = mine[valid], theirs[valid]
    n = int(valid.sum())
    if n == 0:
        return Paired(np.nan, np.nan, np.nan, np.nan, 0)
    counts = resample_counts(n, resamples, seed)
    low, high = interval(_difference(bootstrap(stat, a, counts), bootstrap(stat, b, counts)))
    mine, theirs = (theirs, mine) if stat.higher_is_better else (mine, theirs)
    better = (mine < theirs) + 0.5 * (mine == theirs)
    return Paired(float(_difference(point(stat, a), point(stat, b))), low, high, float(better.mean()), n)


def mean_interval(values: np.ndarray, resamples: int = RESAMPLES, seed: int = SEED, level: float = LEVEL,
                  chunk: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Per column of ``values`` (seeds × steps): the percentile-bootstrap interval of the seed mean, the tables' rule
    (resample seeds with replacement, ``resamples`` draws from ``default_rng(seed)``, no interpolation) applied to
    every step at once; a resample whose seeds are all non-finite at a step is left out there. One seed: its value."""
    n, steps = values.shape
    if n == 0 or steps == 0:
        return np.full(steps, np.nan), np.full(steps, np.nan)
    counts = resample_counts(n, resamples, seed)
    tail = (1 - level) / 2
    low, high = np.empty(steps), np.empty(steps)
    for start in range(0, steps, chunk):  # (resamples × chunk) means at a time: bounded memory on long runs
        means = _weighted_means(counts, values[:, start:start + chunk])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a step no resample has a value at: NaN
            low[start:start + chunk], high[start:start + chunk] = np.nanquantile(
                means, [tail, 1 - tail], axis=0, method="inverted_cdf")
    return low, high
