"""The rules of docs/reproduction.md §7, the bootstrap and the paired statistics, checked against numbers computed by
hand."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report.specs import Stat
from harness.report.stats import SeedMatrix, bootstrap, paired, per_seed, point, resample_counts, seed_matrix, \
    summarize

FINAL, TO_1 = Stat("final"), Stat("steps_to", threshold=0.01)


def matrix(values, steps=None, seeds=None) -> SeedMatrix:
    values = np.asarray(values, dtype=float)
    return SeedMatrix(np.arange(len(values)) if seeds is None else np.asarray(seeds),
                      np.arange(values.shape[1]) if steps is None else np.asarray(steps), values)


def test_steps_to_is_strict_and_uses_the_seed_mean_curve():
    # seed means: 0.5, 0.02, 0.01 (not < 0.01), 0.0095 → step 30 (steps are labels, not indices)
    m = matrix([[0.6, 0.03, 0.012, 0.009], [0.4, 0.01, 0.008, 0.010]], steps=[0, 10, 20, 30])
    assert point(TO_1, m) == 30
    assert point(Stat("steps_to", threshold=0.0095), m) == np.inf  # 0.0095 is not below 0.0095
    # per seed: seed 0 first < 0.01 at 30; seed 1 at 20
    np.testing.assert_array_equal(per_seed(TO_1, m), [30, 20])


def test_final_and_se_skip_diverged_seeds_and_use_population_std():
    m = matrix([[0.5, 0.2], [0.5, 0.4], [0.5, np.nan]])
    summary = summarize(FINAL, m)
    assert summary.value == pytest.approx(0.3)
    assert summary.se == pytest.approx(0.1 / np.sqrt(2))  # popstd of (0.2, 0.4) = 0.1
    assert summary.seeds == 2
    assert point(Stat("at_step", step=0), m) == pytest.approx(0.5)
    assert np.isnan(point(Stat("at_step", step=7), m))


def test_seed_matrix_keeps_only_steps_every_seed_logged():
    m = seed_matrix(np.array([0, 0, 0, 1, 1]), np.array([0, 1, 2, 0, 1]), np.array([1.0, 2, 3, 4, 5]))
    np.testing.assert_array_equal(m.steps, [0, 1])
    np.testing.assert_array_equal(m.values, [[1, 2], [4, 5]])


def test_bootstrap_is_reproducible_and_matches_a_naive_resampler():
    rng = np.random.default_rng(1)
    m = matrix(rng.random((7, 5)))
    first, again = summarize(FINAL, m, resamples=500, seed=3), summarize(FINAL, m, resamples=500, seed=3)
    assert (first.low, first.high) == (again.low, again.high)
    assert (first.low, first.high) != (summarize(FINAL, m, resamples=500, seed=4).low,
                                       summarize(FINAL, m, resamples=500, seed=4).high)
    # naive: draw seed indices with the same generator, average the last column, take the quantiles
    draws = np.random.default_rng(3).integers(0, 7, size=(500, 7))
    naive = m.values[draws, -1].mean(1)
    np.testing.assert_allclose(bootstrap(FINAL, m, resample_counts(7, 500, 3)), naive)
    assert first.low == pytest.approx(np.quantile(naive, 0.025, method="inverted_cdf"))
    assert first.high == pytest.approx(np.quantile(naive, 0.975, method="inverted_cdf"))
    assert first.low <= first.value <= first.high


def test_steps_to_bootstrap_matches_a_naive_resampler_including_never():
    rng = np.random.default_rng(2)
    m = matrix(np.clip(rng.random((5, 400)) * np.exp(-np.arange(400) / 60) + rng.random((5, 1)) * 0.012, 0, 1))
    draws = np.random.default_rng(0).integers(0, 5, size=(300, 5))
    curves = m.values[draws].mean(1)
    below = curves < 0.01
    naive = np.where(below.any(1), below.argmax(1), np.inf)
    np.testing.assert_array_equal(bootstrap(TO_1, m, resample_counts(5, 300, 0)), naive)
    assert np.isinf(naive).any() and np.isfinite(naive).any()  # the example exercises both outcomes


def test_paired_difference_and_probability_of_improvement():
    reference = matrix([[0.5, 0.4], [0.5, 0.2], [0.5, 0.3], [0.5, 0.1]], seeds=[0, 1, 2, 3])
    # better than the reference on seeds 0 and 2, tie on 1, worse on 3; seed 9 has no partner
    algorithm = matrix([[0.5, 0.1], [0.5, 0.2], [0.5, 0.2], [0.5, 0.3], [0.5, 0.0]], seeds=[0, 1, 2, 3, 9])
    result = paired(FINAL, algorithm, reference, resamples=400)
    assert result.seeds == 4
    assert result.diff == pytest.approx((0.1 + 0.2 + 0.2 + 0.3) / 4 - (0.4 + 0.2 + 0.3 + 0.1) / 4)  # -0.05
    assert result.p_better == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    assert result.low <= result.diff <= result.high
    same = paired(FINAL, reference, reference)
    assert (same.diff, same.low, same.high, same.p_better) == (0, 0, 0, 0.5)


def test_paired_uses_only_the_seeds_with_a_value_on_both_sides():
    """A seed that diverged (NaN) on either side drops out of both: otherwise each side averages other seeds."""
    reference = matrix([[0.5, 0.2], [0.5, 0.2], [0.5, np.nan]], seeds=[0, 1, 2])
    algorithm = matrix([[0.5, 0.1], [0.5, np.nan], [0.5, 0.3]], seeds=[0, 1, 2])
    result = paired(FINAL, algorithm, reference, resamples=400)
    assert (result.seeds, result.p_better) == (1, 1.0)
    assert result.diff == pytest.approx(0.1 - 0.2) and result.low == result.high == pytest.approx(-0.1)
    assert np.isnan(paired(FINAL, matrix([[0.5, np.nan]]), matrix([[0.5, 0.2]])).diff)


def test_paired_steps_to_counts_never_minus_never_as_zero():
    never = matrix([[0.5, 0.5, 0.5]] * 3)
    fast = matrix([[0.5, 0.005, 0.0]] * 3)
    assert paired(TO_1, never, never).diff == 0
    slow = paired(TO_1, never, fast)
    assert slow.diff == np.inf and slow.p_better == 0.0
    assert paired(TO_1, fast, never).p_better == 1.0


def test_higher_is_better_flips_the_probability():
    low, high = matrix([[0.1], [0.1]]), matrix([[0.2], [0.2]])
    assert paired(Stat("final", higher_is_better=True), high, low).p_better == 1.0
    assert paired(FINAL, high, low).p_better == 0.0


def test_mean_over_the_run_averages_each_seed_over_its_steps_then_over_seeds():
    mean = Stat("mean")
    m = matrix([[1.0, 0.5, 0.0, 0.9], [0.8, 0.2, 0.2, 0.0], [1.0, np.nan, np.nan, np.nan]])
    per_seed_means = [(1.0 + 0.5 + 0.0 + 0.9) / 4, (0.8 + 0.2 + 0.2 + 0.0) / 4, 1.0]  # a diverged seed: its steps
    np.testing.assert_allclose(per_seed(mean, m), per_seed_means)
    assert point(mean, m) == pytest.approx(np.mean(per_seed_means))
    a, b = matrix([[0.5, 0.5], [0.2, 0.4]]), matrix([[0.1, 0.1], [0.4, 0.4]])
    result = paired(mean, a, b, resamples=200)
    assert result.diff == pytest.approx(((0.5 + 0.3) - (0.1 + 0.4)) / 2)
    assert result.p_better == 0.5  # seed 1: 0.3 < 0.4 (better); seed 0: 0.5 > 0.1


def test_the_rerun_interval_is_ours_plus_the_difference_of_two_independent_resamples():
    """Final error of 8 seeds: the rerun interval is value + the 2.5/97.5% quantiles of resample i − resample
    i + R/2, computed here naively from the same resamples; it is symmetric about ours (each pair appears both
    ways) and wider than the confidence interval (two runs' noise, not one). Bug caught: the spread taken as
    resample − ours (the confidence interval again, not a rerun's)."""
    m = matrix(np.random.default_rng(4).random((8, 3)))
    summary = summarize(FINAL, m, resamples=400, seed=2)
    counts = resample_counts(8, 400, 2)
    means = counts @ m.values[:, -1] / 8
    spread = means - np.roll(means, 200)
    tail = (1 - 0.95) / 2  # as the tables compute it (a hair above 0.025 in floating point)
    expected = np.quantile(summary.value + spread, [tail, 1 - tail], method="inverted_cdf")
    assert (summary.rerun_low, summary.rerun_high) == pytest.approx(tuple(expected), abs=1e-12)
    assert summary.value - summary.rerun_low == pytest.approx(summary.rerun_high - summary.value, abs=1e-12)
    assert summary.rerun_low < summary.low and summary.rerun_high > summary.high


def test_a_steps_to_set_by_the_slowest_seed_gets_a_rerun_interval_past_it():
    """Seeds 0-18 cross 1% at episodes 40-199, seed 19 at 438: the seed mean crosses at 438, and no resample crosses
    later (a resample either holds seed 19, crossing at 438, or does not, crossing sooner), so the confidence
    interval ends at the point. A rerun's slowest seed can be slower: the rerun interval reaches past 438. A run
    whose seed mean never crosses has a rerun interval ending at never; the lower end never goes below the first
    step."""
    values = np.ones((20, 1000))
    for seed, crossing in enumerate(np.random.default_rng(1).integers(40, 200, 19)):
        values[seed, crossing:] = 0.0
    values[19, 438:] = 0.0
    summary = summarize(TO_1, matrix(values))
    assert summary.value == 438 and summary.high == 438 and summary.rerun_high > 438
    values[19, :] = 1.0  # seed 19 never learns: the seed mean stays at 5%
    never = summarize(TO_1, matrix(values))
    assert never.value == np.inf and never.rerun_high == np.inf and never.rerun_low >= 0
