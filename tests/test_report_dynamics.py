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


def test_relapse_onsets_their_climbs_and_the_episodes_at_risk_with_their_zero_gradient_streaks():
    from harness.report.dynamics import Onsets, onsets, risk_by_streak
    from harness.rundir.summary import relapse_events

    errors = np.array([1.0, 0.5, 0.01, 0.0, 0.1, 0.5, 0.3, 0.0, 0.25, 0.0, np.nan, 0.0, 0.9])
    zero = np.array([0, 0, 1, 1, 0, 0, 1, 1, 0, 1, 0, 1, 0], dtype=bool)
    found = onsets(errors, zero, solved=0.02, relapse=0.2)
    # solved at 2 (streak 1) and 3 (streak 2), calm at 4 (streak 0), onset at 5 (last solved 3); solved at 7
    # (streak 2), onset at 8; solved at 9, whose next episode is NaN: the curve ends, 11-12 never count
    assert found.climbs == [2, 1]
    assert found.streaks == [1, 2, 0, 2] and found.followed == [False, False, True, True]
    events = relapse_events(np.arange(len(errors)), errors, 0.02, 0.2)
    assert events["relapses"] == len(found.climbs)  # the same events as summary.json's
    risk = risk_by_streak(found).set_index("zero-gradient episodes in a row")
    assert risk.loc["0", "risk per episode"] == 1.0 and risk.loc["1–2", "risk per episode"] == pytest.approx(1 / 3)
    assert risk.loc["3–10", "episodes at risk"] == 0 and np.isnan(risk.loc["≥ 11", "risk per episode"])
    both = onsets(errors[:5], zero[:5], into=Onsets(climbs=[7], streaks=[3], followed=[False]))
    assert both.climbs == [7] and both.streaks == [3, 1, 2] and both.followed == [False, False, False]


def test_drift_is_the_update_in_zero_gradient_episodes_over_the_others():
    from harness.report.dynamics import drift

    zero = np.array([False, False, True, True])
    assert drift(np.array([1.0, 3.0, 0.5, 1.5]), zero) == 0.5
    assert np.isnan(drift(np.ones(4), np.ones(4, dtype=bool)))  # nothing to compare with
    assert drift(np.array([1.0, np.nan, 0.5, 0.5]), zero) == 0.5  # an episode that logs no update is left out
    assert np.isnan(drift(np.full(4, np.nan), zero))  # runs from before the diagnostic


def test_relapse_summary_counts_each_seed_once_and_refuses_a_seed_in_two_runs_or_two_configurations(tmp_path):
    from harness.report import synthetic
    from harness.report.load import episodes
    from harness.report.dynamics import cell_relapses

    steps = np.arange(8)
    errors = np.array([[1.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]])
    metrics = {"error": errors, "frac_zero_var": (errors == 0).astype(float),
               "update_muon": np.where(errors == 0, 0.5, 1.0)}
    for offset in (0, 2):
        config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 8, seed_offset=offset)
        synthetic.write_run(tmp_path / "cell" / f"seeds{offset}", config, metrics, steps=steps)
    row, found = cell_relapses(tmp_path / "cell")
    assert (row["seeds"], row["onsets"], row["seeds with onsets"], row["median climb"]) == (4, 2, 2, 1)
    assert row["Muon drift, median [range] (seeds)"] == "0.50 [0.50, 0.50] (2)"  # seeds that never solve: no zeros
    config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 8)  # seeds 0-1 again
    synthetic.write_run(tmp_path / "copy" / "a", config, metrics, steps=steps)
    synthetic.write_run(tmp_path / "copy" / "b", config, metrics, steps=steps)
    with pytest.raises(SystemExit, match="more than one run"):
        episodes(tmp_path / "copy")
    other = synthetic.make_config("table3_terminal", "token_reversal", "grpo", 2, 8, seed_offset=4)
    synthetic.write_run(tmp_path / "cell" / "grpo", other, metrics, steps=steps)
    with pytest.raises(SystemExit, match="2 configurations"):
        episodes(tmp_path / "cell")


def test_episodes_binned_by_gradient_norm_edges_included_below():
    import pandas as pd

    from harness.report.dynamics import by_gradient_norm

    wide = pd.DataFrame({"grad_norm": [0.0, 0.0, 5e-4, 1e-3, 0.05, 2.0, 3.0, np.nan],
                         "update_muon": [1.0, 3.0, 2.0, 5.0, 3.0, 4.0, np.nan, 9.0], "error": [0.0] * 8})
    table = by_gradient_norm(wide)
    assert table.index.tolist() == ["0", "(0, 0.001)", "[0.001, 0.01)", "[0.01, 0.1)", "≥ 1"]
    assert table["update_muon"].tolist() == [2.0, 2.0, 5.0, 3.0, 4.0]  # 1e-3 opens the next bin; NaN updates skipped
    shares = [2 / 7, 1 / 7, 1 / 7, 1 / 7, 2 / 7]  # every episode with a gradient norm, logged update or not
    assert table["share of episodes"].tolist() == pytest.approx(shares)


def test_a_seeds_ending_is_read_from_its_last_episodes_and_its_first_reach_from_its_steps():
    from harness.report.dynamics import ending

    steps = np.arange(0, 2000, 10)  # 200 logged episodes, one every 10 steps
    errors = np.r_[np.full(100, 0.9), np.full(100, 0.01)]  # wrong for the first half, then solved
    alive, rounding = np.full(200, 0.5), np.full(200, 1e-11)
    learned = ending(steps, errors, alive, np.zeros(200), last=100)
    assert learned["ending"] == "learned" and learned["error"] == pytest.approx(0.01)
    assert learned["first episode < 0.05"] == 1000  # the step, not the index
    longer = ending(steps, errors, alive, np.zeros(200), last=150)
    assert longer["error"] == pytest.approx((50 * 0.9 + 100 * 0.01) / 150)
    wrong = np.full(200, 0.95)
    stuck = np.where(np.arange(200) >= 110, rounding, alive)  # the last 90 of the last 100 vanish
    assert ending(steps, wrong, stuck, np.ones(200))["ending"] == "stuck"
    assert ending(steps, wrong, np.where(np.arange(200) >= 111, rounding, alive), np.ones(200))["ending"] == "moving"
    assert ending(steps, wrong, np.full(200, 2e-6), np.ones(200))["ending"] == "moving"  # small is not vanishing
    summary = ending(steps, wrong, stuck, np.r_[np.zeros(100), np.full(100, 0.8)])
    assert summary["vanishing gradient"] == pytest.approx(0.9) and summary["all-wrong groups"] == pytest.approx(0.8)
    assert summary["first episode < 0.05"] is None and summary["last episode"] == 1990
    assert ending(steps, np.full(200, 0.25), alive, np.zeros(200), learned=0.25)["ending"] == "moving"  # strictly
    nan_at_150 = np.r_[errors[:150], np.full(50, np.nan)]  # diverged: the curve ends at its first NaN
    diverged = ending(steps, nan_at_150, np.r_[np.full(150, 1e-11), np.full(50, np.nan)], np.zeros(200), last=100)
    assert diverged["ending"] == "diverged" and diverged["last episode"] == 1490
    assert diverged["error"] == pytest.approx((50 * 0.9 + 50 * 0.01) / 100)  # episodes 50-149
    assert diverged["vanishing gradient"] == 1.0


def test_endings_count_each_seed_of_a_cells_runs(tmp_path, capsys):
    from harness.report import synthetic
    from harness.report.dynamics import cell_endings, ending_counts, main

    steps = np.arange(0, 200, 10)
    errors = np.array([np.full(20, 0.0), np.full(20, 0.97)])
    norms = np.array([np.full(20, 1e-12), np.full(20, 1e-12)])
    for offset, grad_norm in ((0, norms), (2, norms + np.array([[0.0], [1.0]]))):  # seed 3 keeps a gradient
        config = synthetic.make_config("beyond_amplification", "token_reversal", "grpo", 2, 200, seed_offset=offset,
                                       **{"task.reward_noise": 0.01})
        synthetic.write_run(tmp_path / "cell" / f"seeds{offset}", config,
                            {"error": errors, "grad_norm": grad_norm, "all_fail": errors}, steps=steps)
    seeds = cell_endings(tmp_path / "cell", last=10)
    assert seeds["ending"].tolist() == ["learned", "stuck", "learned", "moving"]
    row = ending_counts(seeds)
    assert (row["seeds"], row["learned"], row["stuck"], row["moving"], row["never < 0.05"]) == (4, 2, 1, 1, 2)
    main(["endings", str(tmp_path / "cell"), "--last", "10"])
    printed = [[cell.strip() for cell in line.split("|")[2:-1]] for line in capsys.readouterr().out.splitlines()]
    assert printed[2] == ["4", "2", "1", "1", "0", "2"]  # the folder's row: seeds, the four endings, never < 0.05
    assert printed[-1] == ["moving", "0.970", "0.000", "0.970", "never", "190"]  # seed 3
    with pytest.raises(SystemExit):
        main(["endings", str(tmp_path / "cell"), "--last", "0"])


def test_percent_keeps_two_significant_digits_and_says_none_and_zero():
    from harness.report.dynamics import percent

    assert [percent(x) for x in (0.4017, 0.0308, 0.0003, 0.002007, 1.0, 0.0, float("nan"))] == [
        "40%", "3.1%", "0.03%", "0.2%", "100%", "0", "–"]


def test_relapses_prints_the_cells_side_by_side_under_their_algorithm_labels(tmp_path, capsys):
    """TPO (one seed, 10 episodes): solved at 1, onset at 3 (climb 1), solved again at 4; gradient norm exactly 0
    in 7 episodes, 5e-4, 0.5 and 2.0 in one each. GRPO: never solves, gradient 3.0 throughout. By hand: TPO's
    bins 70/10/10/10% with errors 0, 0, 60%, 100%; GRPO's only bin ≥ 1 (100%), the others "–" in its columns
    only; TPO's calm episodes by streak: 1 at 0 (no onset next), 4 at 1–2 (one onset next: 25%).
    Bugs caught: a cell's bins shifted into the other's columns; a missing bin printed as 0."""
    from harness.report import dynamics, synthetic

    tpo_error = np.array([[1.0, 0.0, 0.0, 0.6, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    tpo_grad = np.array([[2.0, 0.0, 0.0, 0.5, 5e-4, 0.0, 0.0, 0.0, 0.0, 0.0]])
    cells = {"tpo": (tpo_error, tpo_grad), "grpo": (np.ones((1, 10)), np.full((1, 10), 3.0))}
    for name, (error, grad) in cells.items():
        synthetic.write_run(tmp_path / name, synthetic.make_config("table3_terminal", "token_reversal", name, 1, 10),
                            {"error": error, "grad_norm": grad, "frac_zero_var": (grad == 0).astype(float),
                             "update_muon": np.where(grad == 0, 0.5, 1.0), "update_adam": grad / 10})
    dynamics.main(["relapses", str(tmp_path / "tpo"), str(tmp_path / "grpo")])
    summary, norms, risks = capsys.readouterr().out.strip().split("\n\n")
    rows = {line.split(" | ")[0].strip("| "): line.strip("|").split(" | ")[1:] for line in summary.splitlines()[2:]}
    assert [cell.strip() for cell in rows["TPO"][:5]] == ["1", "1", "1", "1", "100%"]
    assert [cell.strip() for cell in rows["GRPO"][:5]] == ["1", "0", "0", "–", "–"]
    header = norms.splitlines()[0]
    assert header.startswith("| gradient norm | TPO: share of episodes | TPO: Muon ‖Δθ‖ | TPO: Adam ‖Δθ‖ | TPO: error "
                             "| GRPO: share of episodes |")
    by_bin = {line.strip("|").split(" | ")[0].strip(): [c.strip() for c in line.strip("|").split(" | ")[1:]]
              for line in norms.splitlines()[2:]}
    assert by_bin["0"] == ["70%", "0.500", "0.000", "0", "–", "–", "–", "–"]
    assert by_bin["(0, 0.001)"][:4] == ["10%", "1.000", "0.000", "0"] and by_bin["(0, 0.001)"][4:] == ["–"] * 4
    assert by_bin["[0.1, 1)"][3] == "60%" and by_bin["≥ 1"] == ["10%", "1.000", "0.200", "100%",
                                                                "100%", "1.000", "0.300", "100%"]
    streaks = {line.strip("|").split(" | ")[0].strip(): [c.strip() for c in line.strip("|").split(" | ")[1:]]
               for line in risks.splitlines()[2:]}
    assert streaks["0"][:3] == ["1", "0", "0"] and streaks["1–2"][:3] == ["4", "1", "25%"]
    assert streaks["1–2"][3:] == ["0", "0", "–"]  # GRPO is never solved: no episode at risk


def test_relapses_keeps_a_small_climb_share_and_says_a_missing_update_norm_and_a_bad_folder_list(tmp_path, capsys):
    """One seed with 26 onsets, one of them a climb of 1 episode and 25 of 4: 1/26 = 3.8% (rounded twice: 4%); the
    update norms not logged (runs older than the diagnostic): "–", not nan; the same folder twice, or one without
    runs, refused in one line. Bugs caught: the share rounded to two decimals before the percentage; ``"{:.3f}"``
    of NaN; a duplicate folder silently merged into one column; a traceback for an empty folder."""
    from harness.report import dynamics, synthetic

    onsets = [0.0, 0.5] + [0.0, 0.1, 0.1, 0.1, 0.5] * 25  # solved, up at once; then 25 slow climbs (4 episodes)
    error = np.array([[1.0, *onsets]])
    grad = np.where(error == 0, 0.0, 1.0)
    synthetic.write_run(tmp_path / "tpo", synthetic.make_config("table3_terminal", "token_reversal", "tpo", 1,
                                                                error.shape[1]),
                        {"error": error, "grad_norm": grad, "frac_zero_var": (grad == 0).astype(float),
                         "update_muon": np.full(error.shape, np.nan)})
    dynamics.main(["relapses", str(tmp_path / "tpo")])
    summary, norms, _ = capsys.readouterr().out.strip().split("\n\n")
    assert [c.strip() for c in summary.splitlines()[2].strip("|").split(" | ")][1:6] == ["1", "26", "1", "4", "3.8%"]
    assert [c.strip() for c in norms.splitlines()[2].strip("|").split(" | ")][:3] == ["0", f"{100 * 26 / 127:.0f}%",
                                                                                      "–"]
    (tmp_path / "empty").mkdir()
    for argv, said in (([tmp_path / "tpo", tmp_path / "tpo"], "a folder is given twice"),
                       ([tmp_path / "empty"], "no run directories")):
        with pytest.raises(SystemExit) as refused:
            dynamics.main(["relapses", *map(str, argv)])
        assert refused.value.code == 2 and said in capsys.readouterr().err
