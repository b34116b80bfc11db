"""Per-seed dynamics (first crossing of 50%, solved, relapse) on hand-made curves, and the report section."""

from __future__ import annotations

import numpy as np

import pytest

from harness.report.dynamics import distribution_tests, seed_dynamics

STEPS = np.arange(0, 1000, 100)  # 10 logged episodes: 0, 100, ..., 900


def test_crossings_solved_and_relapse_on_hand_made_seeds():
    errors = np.array([
        [1.0, 0.9, 0.6, 0.4, 0.01, 0.0, 0.0, 0.0, 0.0, 0.0],      # below 50% at 300, solved at 400, stays
        [1.0, 0.45, 0.3, 0.015, 0.1, 0.25, 0.05, 0.0, 0.0, 0.0],  # below 50% at 100, solved at 300, relapses at 500
        [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],        # never learns
        [1.0, 0.8, 0.5, 0.3, 0.2, 0.2, 0.2, 0.2, 0.2, 0.21],       # below 50% at 300 (0.5 is not below), never solved
    ])
    d = seed_dynamics(errors, STEPS, episodes=(100, 500, 900))
    assert d["first_below_half"] == [300, 100, None, 300]
    assert d["median_first_below_half"] == 300.0 and d["never_below_half"] == 1
    assert d["solved"] == 2 and d["relapsed"] == 1  # 0.25 > 20% after solving; seed 3's 0.21 never solved
    assert d["mean_at"] == {"100": (0.9 + 0.45 + 1.0 + 0.8) / 4, "500": (0.0 + 0.25 + 1.0 + 0.2) / 4,
                            "900": (0.0 + 0.0 + 1.0 + 0.21) / 4}
    assert d["final_per_seed"] == [0.0, 0.0, 1.0, 0.21]
    assert d["relapses_per_seed"] == [0, 1, None, None]  # counted for solved seeds only
    assert d["late_mean_per_seed"] == pytest.approx([0.0, 0.3 / 5, 1.0, 1.01 / 5])  # episodes 500-900
    assert d["stuck_late"] == 1  # only the seed that never learns has a late-phase mean above 50%
    # from the first solve on: seed 0 never above 20% in 6 episodes, seed 1 once (0.25) in 7; unsolved seeds: None
    assert d["post_solve_relapse_share_per_seed"] == pytest.approx([0.0, 1 / 7, None, None])


def test_distribution_tests_against_the_papers_seeds_match_exact_closed_forms():
    """5 seeds that all solve at 0 error against 5 that never do: the exact two-sided Mann–Whitney p of complete
    separation is 2 / C(10, 5), and so is Fisher's for 5/5 against 0/5 solved."""
    finals = 0.001 * np.arange(5)[:, None]  # distinct values: no ties, so the exact distribution applies
    solved = seed_dynamics(np.hstack([np.tile([1.0, 0.4, 0.0], (5, 1)), finals]), np.arange(4), episodes=())
    stuck = seed_dynamics(np.hstack([np.ones((5, 3)), 0.9 + finals]), np.arange(4), episodes=())
    p = distribution_tests(solved, stuck)
    assert p["final error"] == pytest.approx(2 / 252) and p["seeds solved"] == pytest.approx(2 / 252)
    assert p["seeds stuck late"] == pytest.approx(2 / 252)  # 0/5 against 5/5 stuck
    assert p["first episode < 50%"] is None and p["relapses per solved seed"] is None  # the stuck side has none
    assert p["post-solve share > 20%"] is None
    assert distribution_tests(solved, solved)["final error"] == pytest.approx(1.0)


def test_a_rise_to_exactly_the_relapse_threshold_is_not_a_relapse_and_nan_never_counts():
    errors = np.array([[1.0, 0.01, 0.2, 0.0], [1.0, np.nan, np.nan, np.nan], [1.0, 0.01, 0.3, np.nan]])
    d = seed_dynamics(errors, np.arange(4), episodes=())
    assert d["solved"] == 2 and d["relapsed"] == 1
    assert d["first_below_half"] == [1, None, 1]
    assert d["post_solve_relapse_share_per_seed"] == pytest.approx([0.0, None, 0.5])  # the curve ends at the NaN
    assert d["stuck_late"] == 1  # the seed that diverged before the late phase (steps 2-3); the others' means < 50%


def test_locked_seeds_end_with_zero_variance_groups_above_the_relapse_threshold():
    steps = np.arange(20)  # the last 10%: steps 18 and 19
    errors = np.array([[1.0] * 18 + [0.5, 0.5],     # a deterministic partial solution: locked
                       [1.0] * 20,                  # never found the reward, every group all-fail: locked
                       [1.0] * 18 + [0.5, 0.5],     # still exploring (90% zero-variance): not locked
                       [1.0] * 18 + [0.1, 0.1],     # solved enough (10% error): not locked
                       [1.0] * 18 + [0.5, np.nan]])  # diverged at the end: unknown
    zero_var = np.array([[0.5] * 18 + [1.0, 0.97],  # mean 0.985 >= 0.98 over the tail
                         [1.0] * 20,
                         [1.0] * 18 + [0.9, 0.9],
                         [1.0] * 20,
                         [1.0] * 20])
    d = seed_dynamics(errors, steps, episodes=(), zero_var=zero_var)
    assert d["locked_per_seed"] == [True, True, False, False, None] and d["locked"] == 2
    assert "locked" not in seed_dynamics(errors, steps, episodes=())  # no zero-variance data: not claimed
