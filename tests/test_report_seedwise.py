"""``python -m harness.report.seedwise`` on synthetic runs whose answers are known in closed form."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.report import seedwise
from harness.report.dynamics import seed_dynamics
from harness.report.synthetic import make_config, write_run

EXPERIMENT = "seedwise_synthetic"  # no preset of that name: the cells take the largest run's budget


def _write(root, algorithm: str, errors: np.ndarray) -> None:
    seeds, steps = errors.shape
    write_run(root / algorithm, make_config(EXPERIMENT, "token_reversal", algorithm, seeds, steps),
              {"error": errors})


def _rows(text: str) -> dict[str, list[str]]:
    """Markdown rows by label; a later table's rows replace an earlier one's of the same label."""
    rows = {}
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and not line.startswith("|---") and cells[0]:
            rows[cells[0]] = cells[1:]
    return rows


def _run(capsys, *argv) -> dict[str, list[str]]:
    seedwise.main([str(arg) for arg in argv])
    return _rows(capsys.readouterr().out)


def test_a_constant_shift_on_every_seed_is_a_paired_point_and_the_windows_average_as_defined(tmp_path, capsys):
    """GRPO = TPO + 0.01·t on every seed, TPO spread widely over seeds: the unpaired intervals are wide, the paired
    ones a point. Over t = 0..9 the shift averages 4.5 points over the run, 7.0 over the second half (t = 5..9)
    and is 9.0 at the end. Bug caught: ``second_half`` keeping the steps after the middle one only (``>`` for
    ``>=``: 7.5)."""
    spread = np.linspace(0.1, 0.8, 6)[:, None]
    tpo = np.repeat(spread, 10, axis=1)
    _write(tmp_path, "tpo", tpo)
    _write(tmp_path, "grpo", tpo + 0.01 * np.arange(10))
    rows = _run(capsys, "paired", tmp_path, "--algorithms", "tpo,grpo", "--resamples", "500")
    assert rows["GRPO"] == ["6", "+9.0 [9.0, 9.0]", "+4.5 [4.5, 4.5]", "+7.0 [7.0, 7.0]"]
    assert rows["TPO"][1].startswith("45.0 [")  # the seed mean, with an interval of nonzero width
    assert rows["TPO"][1] != "45.0 [45.0, 45.0]"


def test_the_difference_is_the_method_minus_the_first_listed(tmp_path, capsys):
    """Three seeds where DG is 0.2 below TPO everywhere: DG − TPO = −20.0, whichever order the runs load in.
    Bug caught: ``stats.paired`` called with the reference first (TPO − DG: +20.0)."""
    tpo = np.tile([[0.9], [0.6], [0.3]], 5)
    _write(tmp_path, "tpo", tpo)
    _write(tmp_path, "dg", tpo - 0.2)
    rows = _run(capsys, "paired", tmp_path, "--algorithms", "tpo,dg", "--windows", "final", "--resamples", "300")
    assert rows["DG"] == ["3", "\u221220.0 [\u221220.0, \u221220.0]"]


def test_the_per_seed_median_counts_a_seed_that_never_gets_there_as_the_latest(tmp_path, capsys):
    """Seeds below 1% first at episodes 2, 4 and 6, and two never (one touches exactly 1%, not below): 3/5 seeds
    reach it and the median seed's first episode is 6, not 4 (the median of those that reach it). Bug caught:
    ``np.median(first[np.isfinite(first)])`` in ``perseed_table``."""
    errors = np.full((5, 8), 0.5)
    for seed, first in enumerate((2, 4, 6)):
        errors[seed, first:] = 0.0
    errors[3, 5:] = 0.01
    _write(tmp_path, "tpo_token", errors)
    rows = _run(capsys, "perseed", tmp_path, "--threshold", "0.01")
    assert rows["TPO_token"] == ["5", "3/5", "6"]


def test_methods_counts_solved_and_relapsed_seeds_and_reads_the_seed_mean_for_steps_to(tmp_path, capsys):
    """TPO: seed 0 solves (< 2%) at step 1 and relapses (0.31 > 20%), seed 1 solves at step 2 and stays; the seed
    mean first gets below 5% at step 3 (neither seed's own first step). CISPO never solves: "–" relapsed. TPO's
    run mean by hand: (1 + 0.01 + 0.31 + 0 + 1 + 0.5 + 0.01 + 0) / 8 = 35.375%, shown 35.4.
    Bug caught: the relapsed count read from ``SOLVED`` instead of ``RELAPSED`` (2 for TPO)."""
    _write(tmp_path, "tpo", np.array([[1.0, 0.01, 0.31, 0.0], [1.0, 0.5, 0.01, 0.0]]))
    _write(tmp_path, "cispo", np.ones((2, 4)))
    rows = _run(capsys, "methods", tmp_path, "--algorithms", "tpo,cispo", "--threshold", "0.05",
                "--resamples", "200")
    assert rows["TPO"] == ["2", "0.0 [0.0, 0.0]", "–", "3", "2/2", "1", "35.4"]
    assert rows["CISPO"] == ["2", "100.0 [100.0, 100.0]", "+100.0 [100.0, 100.0]", "never", "0/2", "–", "100.0"]


def test_seeds_restricts_every_method_to_those_ids_before_pairing(tmp_path, capsys):
    """Four seeds; GRPO − TPO is +10 on seeds 0-1 and +50 on seeds 2-3: over ``--seeds 0-1`` it is +10.0 exactly.
    Bug caught: ``load_cells`` ignoring ``--seeds`` (+30.0 over all four)."""
    tpo = np.zeros((4, 3))
    _write(tmp_path, "tpo", tpo)
    _write(tmp_path, "grpo", tpo + np.array([[0.1], [0.1], [0.5], [0.5]]))
    rows = _run(capsys, "methods", tmp_path, "--algorithms", "tpo,grpo", "--seeds", "0-1", "--threshold", "0.05",
                "--resamples", "200")
    assert rows["GRPO"][:2] == ["2", "10.0 [10.0, 10.0]"] and rows["GRPO"][2] == "+10.0 [10.0, 10.0]"


def test_vary_pairs_configurations_of_one_method_over_their_shared_seeds(tmp_path, capsys):
    """TPO with 4 and 16 epochs, 16 = 4 + 0.01·t on seeds 0-3 and the 16-epoch run with two more seeds (4, 5, far
    off): each configuration is a row named by its value, the first value the reference, paired over seeds 0-3 only
    (+9.0 exactly at the end); listing 16 first makes 4 the difference (−9.0). Bugs caught: the varied key left out
    of the cell's key (both rows the same runs: +0.0); the reference taken from the last value; rows labelled by
    the method alone."""
    base = np.repeat(np.linspace(0.2, 0.8, 4)[:, None], 10, axis=1)
    for epochs, errors in ((4, base), (16, np.vstack([base + 0.01 * np.arange(10), np.ones((2, 10))]))):
        write_run(tmp_path / f"e{epochs}", make_config(EXPERIMENT, "token_reversal", "tpo", len(errors), 10,
                                                       **{"algorithm.epochs": epochs}), {"error": errors})
    rows = _run(capsys, "paired", tmp_path, "--algorithms", "tpo", "--vary", "algorithm.epochs=4,16",
                "--windows", "final", "--resamples", "300")
    assert list(rows) == ["TPO, epochs=4", "TPO, epochs=16", "X \u2212 TPO, epochs=4, paired"]
    assert rows["TPO, epochs=16"] == ["4", "+9.0 [9.0, 9.0]"]
    seedwise.main(["methods", str(tmp_path), "--algorithms", "tpo", "--vary", "algorithm.epochs=16,4",
                   "--threshold", "0.05", "--resamples", "300"])
    out = capsys.readouterr().out
    assert "| Δ to TPO, epochs=16 [95% CI] |" in out
    seeds, final, delta = _rows(out)["TPO, epochs=4"][:3]
    assert (seeds, delta) == ("4", "\u22129.0 [\u22129.0, \u22129.0]") and final.startswith("50.0 [")


@pytest.mark.parametrize("argv, message", [
    (["--vary", "algorithm.epochs=4"], "expected one config key and two or more values"),
    (["--vary", "algorithm.epochs=4,4"], "a value is given twice"),
    (["--vary", "algorithm.epochs=4,16", "--where", "algorithm.epochs=4"], "the key is also in --where"),
    (["--vary", "algorithm.epochs=4,16", "--paper", "fig1b.npz"], "--vary: not with --paper"),
])
def test_vary_refuses_one_value_a_repeated_value_a_key_in_where_and_the_papers_seeds(tmp_path, capsys, argv,
                                                                                     message):
    """Each bad ``--vary`` is one line naming it, exit 2, before any table. Bugs caught: a single value accepted (no
    pair to make); the key given in both --vary and --where, the --where value silently overridden."""
    _write(tmp_path, "tpo", np.zeros((2, 3)))
    with pytest.raises(SystemExit) as exit_:
        seedwise.main(["paired", str(tmp_path), "--algorithms", "tpo", *argv])
    captured = capsys.readouterr()
    assert exit_.value.code == 2 and message in captured.err and "|" not in captured.out


def test_without_algorithms_a_cell_lists_the_grouped_methods_whose_runs_it_reads(tmp_path, capsys):
    """``--where task.match=interactions``: PPO's interaction-matched run and TPO's prompt-matched one, which a
    grouped method's interaction-matched cell reads (its ``task.match`` is inert), are both listed; a TPO run of
    another H is not. Bug caught: the listing matching every key exactly (PPO alone)."""
    for algorithm, match, H in (("tpo", "prompts", 7), ("ppo", "interactions", 7), ("tpo", "prompts", 8)):
        write_run(tmp_path / f"{algorithm}_h{H}", make_config(EXPERIMENT, "token_reversal", algorithm, 3, 4,
                                                               **{"task.match": match, "task.H": H}),
                  {"error": np.full((3, 4), 0.5 if algorithm == "tpo" else 0.25)})
    rows = _run(capsys, "methods", tmp_path, "--where", "task.match=interactions,task.H=7", "--threshold", "0.05",
                "--resamples", "200")
    assert {label: row[:2] for label, row in rows.items()} == {"TPO": ["3", "50.0 [50.0, 50.0]"],
                                                              "PPO": ["3", "25.0 [25.0, 25.0]"]}


def test_the_papers_seeds_from_curves_and_from_the_dynamics_json_agree(tmp_path, capsys):
    """The same per-seed curves as an ``.npz`` and as ``fig1b_seed_dynamics.json`` (``dynamics``' per-seed finals,
    run means and late-phase means) give the same rows, window by window. Bug caught: ``paper_side`` not selecting
    the window from the npz curves (its second half = the run mean)."""
    rng = np.random.default_rng(1)
    curves = {name: rng.uniform(0.0, 1.0, size=(5, 10)) for name in ("tpo", "grpo")}
    np.savez(tmp_path / "paper.npz", episodes=np.arange(10), **{f"{k}_errors": v for k, v in curves.items()})
    (tmp_path / "paper.json").write_text(json.dumps({k: seed_dynamics(v, np.arange(10), episodes=())
                                                     for k, v in curves.items()}))
    runs = tmp_path / "runs"
    for name, errors in curves.items():
        _write(runs, name, errors)
    argv = ("paired", runs, "--algorithms", "tpo,grpo", "--resamples", "300", "--paper")
    from_curves, from_json = _run(capsys, *argv, tmp_path / "paper.npz"), _run(capsys, *argv, tmp_path / "paper.json")
    for row in ("TPO, paper", "GRPO, paper"):
        assert from_json[row] == from_curves[row] and len(set(from_json[row][1:4])) == 3
    assert from_curves["GRPO"] == from_curves["GRPO, paper"]  # ours are the same curves, paired the same way


def test_replicate_measures_the_papers_distance_in_units_of_an_independent_rerun(tmp_path, capsys, monkeypatch):
    """Twenty seeds end at 20% or 40% (ten each): our final error is 30.0%, its bootstrap sd ≈ 10/√20 = 2.24 points.
    The paper's 36.0% is +6.0 points away: z = 6.0/(√2 · 2.24) = 1.90, p = 0.06. GRPO's seed mean gets below 5% at
    step 3, but never on some resamples, so its steps-to has no sd: n/a; a cell the paper does not print reads "–".
    Bugs caught: the √2 dropped (z = 2.7), the sign of the difference flipped, the sd taken as the seeds' own
    spread (z = 0.4)."""
    from functools import partial

    from harness.report import paper

    numbers = tmp_path / "paper_numbers.csv"
    numbers.write_text("artefact,stat,cell,value,low,high,unit,source,note\n"
                       "synthetic,final,algorithm.name=tpo,36.0,,,%,test,\n"
                       "synthetic,steps_to_0.05,algorithm.name=grpo,3,,,steps,test,\n")
    monkeypatch.setattr(seedwise, "lookup", partial(paper.lookup, path=numbers))
    _write(tmp_path / "runs", "tpo", np.repeat([[0.2], [0.4]], 10, axis=0) * np.ones((1, 4)))
    rows = _run(capsys, "replicate", tmp_path / "runs", "--algorithms", "tpo", "--table", "synthetic",
                "--resamples", "4000")
    assert rows["TPO"][:2] == ["20", "30.0 [26.0, 34.0]"] and float(rows["TPO"][2]) == pytest.approx(2.24, abs=0.06)
    assert rows["TPO"][3:6] == ["36.0", "+6.0", "+1.9"] and float(rows["TPO"][6]) == pytest.approx(0.06, abs=0.011)
    grpo = np.full((4, 6), 0.5)
    grpo[:3, 3:], grpo[3, 3:] = 0.0, 0.1  # the seed mean is 2.5% from step 3; resamples half seed 3 never cross
    _write(tmp_path / "runs2", "grpo", grpo)
    _write(tmp_path / "runs2", "tpo", np.zeros((4, 6)))
    rows = _run(capsys, "replicate", tmp_path / "runs2", "--algorithms", "grpo,tpo", "--table", "synthetic",
                "--threshold", "0.05", "--resamples", "300")
    assert rows["GRPO"][1] == "3 [3, never]" and rows["GRPO"][2:] == ["n/a", "3", "n/a", "n/a", "n/a"]
    assert rows["TPO"][3] == "–"


def test_rerun_sets_another_runs_seeds_beside_ours_unpaired(tmp_path, capsys):
    """Ours: six seeds whose error drops to 0 at episodes 3..8. The other run: the same seeds 2 episodes later, in an
    ``.npz`` as the paper's code writes curves. Its seed mean crosses 2 episodes later (+2 for the point), its median
    seed too, and the Mann–Whitney p is scipy's on the two sets of per-seed first episodes. A copy of ours reads +0
    and p = 1.00 (medians 5.5 and 7.5 shown rounded). Bugs caught: the difference taken ours − other (−2), the p
    computed on the seed-mean curves."""
    from scipy.stats import mannwhitneyu

    firsts = np.arange(3, 9)
    ours = np.ones((6, 14))
    later = np.ones((6, 14))
    for seed, first in enumerate(firsts):
        ours[seed, first:] = 0.0
        later[seed, first + 2:] = 0.0
    _write(tmp_path / "runs", "dg", ours)
    np.savez(tmp_path / "later.npz", dg_errors=later.astype(np.float32), episodes=np.arange(14))
    np.savez(tmp_path / "same.npz", dg_errors=ours.astype(np.float32), episodes=np.arange(14))
    rows = _run(capsys, "rerun", tmp_path / "runs", "--algorithms", "dg", "--threshold", "0.01", "--resamples", "300",
                "--other", tmp_path / "later.npz", "--other", tmp_path / "same.npz")
    assert rows["DG"][:1] + rows["DG"][2:] == ["6", "6", "–", "–"] and rows["DG"][1].startswith("8 [")
    later_row, same_row = rows["DG, later.npz"], rows["DG, same.npz"]
    assert later_row[1].startswith("10 [") and later_row[2] == "8" and later_row[3].startswith("+2 [")
    assert later_row[4] == f"{mannwhitneyu(firsts + 2, firsts).pvalue:.2f}" != "1.00"
    assert same_row[1] == rows["DG"][1] and same_row[3].startswith("0 [") and same_row[4] == "1.00"


def test_diagnostics_reads_the_peak_of_the_averaged_seed_mean_and_its_decay_after_the_peak(tmp_path, capsys):
    """Two seeds whose gradient norms are g and 3g (seed mean 2g) and a lone spike on one seed late; all-fail
    fractions 1.0/0.8 falling by 0.1 per episode. Everything expected is recomputed here from its definition: the
    3-episode centred (edge-padded) average of the seed mean, its peak, the first later episode below 10% of it, the
    raw maximum, the last value, the all-fail means at episodes 0 and 5. The curve starts at 0, below 10% of the
    peak, so a decay read from the start (not from the peak) answers 0. Bug caught: ``below`` searched from episode
    0 (``averaged`` for ``averaged[peak:]``); the peak read from the raw mean (the spike, episode 9)."""
    g = np.array([0.0, 1.0, 2.0, 4.0, 8.0, 4.0, 2.0, 1.0, 0.5, 0.05, 0.01, 0.0])
    norms = np.stack([g, 3 * g])
    norms[0, 9] = 40.0  # one seed's spike: the largest single-episode mean, not the averaged peak
    fails = np.stack([1.0 - 0.1 * np.arange(12), 0.8 - 0.05 * np.arange(12)])
    write_run(tmp_path / "tpo", make_config(EXPERIMENT, "token_reversal", "tpo", 2, 12),
              {"error": fails, "grad_norm": norms, "all_fail": fails})
    mean = norms.mean(axis=0)
    padded = np.concatenate([mean[:1], mean, mean[-1:]])
    averaged = np.array([padded[i:i + 3].mean() for i in range(12)])
    peak = max(range(12), key=lambda i: averaged[i])
    decay = next(i for i in range(peak, 12) if averaged[i] < 0.1 * averaged[peak])
    assert 0 < peak < decay and peak != 9 and mean.argmax() == 9  # what the test relies on
    rows = _run(capsys, "diagnostics", tmp_path, "--at", "0,5", "--window", "3", "--fraction", "0.1")
    assert rows["TPO"] == ["2", f"{fails[:, 0].mean():.3f}", f"{fails[:, 5].mean():.3f}", f"{averaged[peak]:.3g}",
                           str(peak), str(decay), f"{mean[9]:.3g} (9)", f"{mean[-1]:.2g}"]


def test_diagnostics_adds_the_zero_variance_fraction_after_the_all_fail_one_when_asked(tmp_path, capsys):
    """``--zero-variance`` reads the runs' ``frac_zero_var`` (all-fail and all-success groups), not their all-fail
    fraction: the two differ here (a seed whose groups are all-success from episode 3 on), each column is the seed
    mean at its episode, all-fail columns first; a method whose runs lack the metric keeps its row, with "not logged"
    in those columns. Without the flag the columns are as before. Bug caught: the zero-variance columns read from
    the all-fail cells (``fractions = [fail, fail]``); the columns in episode-major order; a row dropped for the
    missing metric."""
    steps = 8
    fails = np.stack([0.9 - 0.05 * np.arange(steps), np.full(steps, 0.5)])
    zero = np.stack([np.full(steps, 0.9), np.where(np.arange(steps) >= 3, 1.0, 0.5)])
    write_run(tmp_path / "group_pg", make_config(EXPERIMENT, "token_reversal", "group_pg", 2, steps),
              {"error": fails, "grad_norm": np.ones((2, steps)), "all_fail": fails, "frac_zero_var": zero})
    write_run(tmp_path / "tpo", make_config(EXPERIMENT, "token_reversal", "tpo", 2, steps),
              {"error": fails, "grad_norm": np.ones((2, steps)), "all_fail": fails})
    plain = _run(capsys, "diagnostics", tmp_path, "--at", "0,5", "--window", "1")
    rows = _run(capsys, "diagnostics", tmp_path, "--at", "0,5", "--window", "1", "--zero-variance")
    expected = [f"{values[:, episode].mean():.3f}" for values in (fails, zero) for episode in (0, 5)]
    assert rows["Group PG"][:5] == ["2", *expected]
    assert rows["Group PG"][5:] == plain["Group PG"][3:]
    assert rows["TPO"] == [*plain["TPO"][:3], "not logged", "not logged", *plain["TPO"][3:]]
    assert len(plain["Group PG"]) == 8


def test_relapses_reads_the_seeds_in_a_relapse_at_an_episode_and_the_mean_without_them(tmp_path, capsys):
    """Seed 0 solves at step 1 (1%), relapses at step 2 (50% > 20%) and is still unsolved at step 3 (10%); seed 1
    solves at step 1 and stays; seed 2 never solves (a seed that never solved is not in a relapse). At step 3: mean
    (10 + 0 + 90) / 3 = 33.3%, median 10, seed 0 in a relapse, mean without it (0 + 90) / 2 = 45.0; over the run 1 of
    3 seeds relapses, 1/3 relapses per seed, seed 0 spends 2 of 4 steps in a relapse: 2 / 12 = 16.7%.
    Bug caught: ``in_relapse`` marking a relapse until the error is below ``relapse_above`` (step 3's 10% would end
    seed 0's relapse: "none")."""
    _write(tmp_path, "tpo", np.array([[1.0, 0.01, 0.5, 0.1], [1.0, 0.01, 0.0, 0.0], [1.0, 1.0, 0.95, 0.9]]))
    rows = _run(capsys, "relapses", tmp_path, "--algorithms", "tpo", "--at", "3", "--resamples", "200")
    assert rows["TPO"][:1] == ["3"] and rows["TPO"][1].startswith("33.3 [")
    assert rows["TPO"][2:] == ["10.0", "seed 0 (10.0)", "45.0", "1/3", "0.3", "16.7%"]
    assert seedwise.in_relapse(np.array([0.5, 0.01, 0.3, 0.1, 0.01]), 0.02, 0.2).tolist() == [
        False, False, True, True, False]
