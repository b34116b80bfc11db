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


def test_relapse_onsets_their_climbs_and_the_zero_gradient_windows_before_them():
    from harness.report.relapses import onsets

    errors = np.array([1.0, 0.5, 0.01, 0.0, 0.1, 0.5, 0.3, 0.0, 0.25, np.nan])
    zero = np.array([0, 0, 1, 1, 0, 0, 1, 1, 0, 0], dtype=bool)
    found = onsets(errors, zero, solved=0.02, relapse=0.2, window=2)
    # solved at 2 and 3, onset at 5 (last solved 3); solved again at 7, onset at 8; the NaN at 9 is neither
    assert found.climbs == [2, 1]
    assert found.before_onset == [0.5, 1.0]  # zero[3:5], zero[6:8]
    assert found.before_calm == [0.0, 0.5, 1.0, 0.5]  # before episodes 2, 3, 4 and 7
    early = onsets(np.array([0.0, 0.5]), np.array([True, True]), window=2)
    assert early.climbs == [1] and early.before_onset == []  # counted, but no full window before it


def test_drift_is_the_update_in_zero_gradient_episodes_over_the_others():
    from harness.report.relapses import drift

    zero = np.array([False, False, True, True])
    assert drift(np.array([1.0, 3.0, 0.5, 1.5]), zero) == 0.5
    assert np.isnan(drift(np.ones(4), np.ones(4, dtype=bool)))  # nothing to compare with
    assert np.isnan(drift(np.array([1.0, np.nan, 1.0, 1.0]), zero))  # runs from before the diagnostic


def test_relapse_summary_counts_each_seed_of_merged_seed_ranges_once(tmp_path):
    from harness.report import synthetic
    from harness.report.relapses import summarize

    steps = np.arange(12)
    errors = np.tile(np.array([1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0]), (2, 1))
    for offset in (0, 2):
        config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 12, seed_offset=offset)
        synthetic.write_run(tmp_path / f"seeds{offset}", config,
                            {"error": errors, "frac_zero_var": (errors == 0).astype(float)}, steps=steps)
    row = summarize(tmp_path, window=3)
    assert row["seeds"] == 4 and row["onsets"] == 4 and row["median climb"] == 1
    assert row["zero-gradient share, 3 before an onset"] == "1.00"  # episodes 3-5 of every seed are solved


def test_episodes_binned_by_gradient_norm_edges_included_below():
    import pandas as pd

    from harness.report.relapses import by_gradient_norm

    wide = pd.DataFrame({"grad_norm": [0.0, 0.0, 5e-4, 1e-3, 0.05, 2.0, np.nan],
                         "update_muon": [1.0, 3.0, 2.0, 5.0, 3.0, 4.0, 9.0], "error": [0.0] * 7})
    table = by_gradient_norm(wide)
    assert table.index.tolist() == ["0", "(0, 0.001)", "[0.001, 0.01)", "[0.01, 0.1)", "≥ 1"]
    assert table["update_muon"].tolist() == [2.0, 2.0, 5.0, 3.0, 4.0]  # exactly 1e-3 opens the next bin
    assert table["share of episodes"].tolist() == pytest.approx([2 / 6, 1 / 6, 1 / 6, 1 / 6, 1 / 6])  # NaN left out
