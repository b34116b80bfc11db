"""``python -m harness.scorecard``: the suite, the refusals, the campaign that runs a candidate's cells, and the
scorecard's numbers recomputed here from the errors its runs were written with (rliable's own functions for the
aggregates)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rliable import metrics

from harness import campaign, scorecard
from harness.report.synthetic import make_config, write_run

SEEDS, STEPS = 6, 12
TINY = """version: 3
preset: scorecard_quick
baselines: [tpo, pg, dg, ppo]
cells:
  - {name: a, family: one, seeds: 6, cost: 0.001, overrides: [task=tabular_single, task.steps=12]}
  - {name: b, family: one, seeds: 6, cost: 0.001, overrides: [task=tabular_single, task.steps=12, task.alpha=0.3]}
  - {name: c, family: two, seeds: 6, cost: 0.001, overrides: [task=tabular_single, task.steps=12, task.arms=10]}
"""
SHIFT = {"tpo": -0.2, "grpo": 0.0, "pg": 0.25}  # error offsets: the candidate (grpo) behind TPO, ahead of PG
RESAMPLES = 300


def tiny_suite(tmp_path: Path, text: str = TINY, name: str = "tiny") -> scorecard.Suite:
    folder = tmp_path / "suites"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.yaml").write_text(text)
    return scorecard.load_suite(name, folder)


def synthetic_errors() -> dict[tuple[str, str], np.ndarray]:
    """(cell, algorithm) → seeds × steps errors in thousandths (exact through metrics.csv); DG's equal GRPO's, so
    its Δ is exactly 0, and PPO's differ from them by a little noise, opposite on the second half of the seeds but
    for one thousandth, so its interval holds 0 but not its Δ (both level)."""
    rng = np.random.default_rng(11)
    values = {}
    for cell in "abc":
        for algorithm, shift in SHIFT.items():
            values[cell, algorithm] = np.clip(rng.integers(300, 701, (SEEDS, STEPS)) / 1000 + shift, 0, 1)
        values[cell, "dg"] = values[cell, "grpo"].copy()
        noise = rng.integers(-30, 31, (SEEDS // 2, STEPS)) / 1000
        values[cell, "ppo"] = np.clip(values[cell, "grpo"] + np.vstack([noise, 0.001 - noise]), 0, 1)
    return values


def write_synthetic(results: Path, errors: dict) -> None:
    for (cell, algorithm), values in errors.items():
        folder = results / "runs" / "scorecard_quick" / cell / algorithm / f"seeds0-{SEEDS - 1}"
        write_run(folder, make_config("scorecard_quick", "tabular_single", algorithm, SEEDS, STEPS), {"error": values})


def test_the_committed_suites_compose_pin_a_version_and_stay_within_their_cost():
    """Both suites load, every cell composes with every baseline (their runs would start), and the quick suite's
    estimated cost for one algorithm is under an hour of one core. Bug caught: a tabular_multi cell in
    conf/scorecard/quick.yaml (its exact updates refuse rloo, dapo, ...)."""
    for name in scorecard.suite_names():
        suite = scorecard.load_suite(name)
        assert suite.version >= 1 and suite.preset == f"scorecard_{name}"
        plan = scorecard.queue(suite, [scorecard.Candidate(baseline) for baseline in suite.baselines])
        campaign.check_cells(plan, name)
        assert not [cell for cell in plan["cells"] if campaign.cell_refusal(cell["preset"], tuple(cell["overrides"]))]
    quick = scorecard.load_suite("quick")
    hours = sum(cell.cost * cell.seeds * campaign.preset_steps(quick.preset, (*cell.overrides, "algorithm=tpo"))
                for cell in quick.cells) / 3600
    assert hours <= 1.0


@pytest.mark.parametrize("text, message", [
    (TINY.replace("version: 3\n", ""), "tiny.yaml: no version"),
    (TINY + "extra: 1\n", "unknown key 'extra'"),
    (TINY.replace("family: two, ", ""), "cells[2]: no family"),
    (TINY.replace("task.arms=10", "algorithm.eta=2"), "cells[2].overrides: only task=<task>"),
    (TINY.replace("name: c", "name: a"), "each name once"),
    (TINY.replace("seeds: 6, cost: 0.001, overrides: [task=tabular_single, task.steps=12]}",
                  "seeds: 0, cost: 0.001, overrides: [task=tabular_single]}"), "cells[0].seeds=0"),
])
def test_a_malformed_suite_is_refused_in_one_line_naming_the_key(tmp_path, text, message):
    """Bug caught: harness/scorecard.py:load_suite without its check of the suite's keys (``SUITE_KEYS``)."""
    with pytest.raises(scorecard.ScorecardError, match=message.replace("[", r"\[").replace(".", r"\.")) as caught:
        tiny_suite(tmp_path, text)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("arguments, message", [
    (["algorithm=grpo", "task.V=4"], "task.V=4: the tiny suite (v3) pins the task"),
    (["algorithm=grpo", "seeds=3"], "seeds=3: the tiny suite"),
    (["algorithm=grpo", "algorithm=tpo"], "give one algorithm=<id>"),
    (["algorithm=tpoo"], "did you mean tpo?"),
    (["algorithm.eta=2"], "no algorithm=<id>; valid choices: "),
    (["algorithm=tpo", "algorithm.eta=a/b"], "cannot name the runs' folder"),
])
def test_anything_but_the_algorithm_and_its_keys_is_refused(tmp_path, arguments, message):
    """Bug caught: parse_candidate taking any ``key=value`` as an override (a task key would change the runs)."""
    suite = tiny_suite(tmp_path)
    with pytest.raises(scorecard.ScorecardError) as caught:
        scorecard.parse_candidate(arguments, suite)
    assert message in str(caught.value)


def test_a_candidates_label_names_its_overrides_and_its_runs_are_the_suites_cells(tmp_path):
    """Bug caught: queue without ``*candidate.arguments`` in a cell's overrides (the default algorithm runs)."""
    suite = tiny_suite(tmp_path)
    candidate = scorecard.parse_candidate(["algorithm=tpo", "algorithm.eta=0.5"], suite)
    assert candidate.label == "tpo,eta=0.5"
    plan = scorecard.queue(suite, [candidate, scorecard.Candidate("pg")])
    assert [cell["name"] for cell in plan["cells"]] == ["a/tpo,eta=0.5", "a/pg", "b/tpo,eta=0.5", "b/pg",
                                                         "c/tpo,eta=0.5", "c/pg"]
    first = plan["cells"][0]
    assert first["overrides"] == ["task=tabular_single", "task.steps=12", "algorithm=tpo", "algorithm.eta=0.5"]
    assert (first["seeds"], first["chunk"]) == (6, 6)
    identity = campaign.cell_identity(first["preset"], tuple(first["overrides"]))
    assert (identity["algorithm"]["eta"], identity["task"]["steps"]) == (0.5, 12)


def test_the_scorecard_is_the_paired_and_rliable_numbers_of_its_runs(tmp_path):
    """Every number recomputed from the errors: the per-cell Δ (candidate − baseline, mean and final windows), the
    families' Δ and verdicts, rliable's IQM and the candidate's probability of improvement over each baseline.
    Bugs caught: ``oriented`` not negating Δ; ``aggregate_frame`` not turning P(improvement); the verdict read from
    the point estimate instead of the interval."""
    suite = tiny_suite(tmp_path)
    errors = synthetic_errors()
    write_synthetic(tmp_path / "results", errors)
    candidate = scorecard.Candidate("grpo")
    out = tmp_path / "card"
    scorecard.write(suite, candidate, tmp_path / "results", out, "python -m harness.scorecard algorithm=grpo",
                    RESAMPLES)
    score = {key: 1.0 - value for key, value in errors.items()}
    window = {"mean": lambda s: s.mean(1), "final": lambda s: s[:, -1]}

    cells = pd.read_csv(out / "scorecard_cells.csv")
    assert (cells.runs == [f"results/runs/scorecard_quick/{cell}/{algorithm}/seeds0-{SEEDS - 1}"
                           for cell, algorithm in zip(cells.cell, cells.algorithm)]).all()
    for cell in "abc":
        for baseline in ("tpo", "pg", "dg", "ppo"):
            for name, reduce in window.items():
                row = cells[(cells.cell == cell) & (cells.algorithm == baseline) & (cells.window == name)].iloc[0]
                ours, theirs = reduce(score[cell, "grpo"]), reduce(score[cell, baseline])
                assert row["diff"] == pytest.approx((ours - theirs).mean(), abs=1e-12)
                assert row.diff_low <= row["diff"] <= row.diff_high
                assert row.p_better == pytest.approx(((ours > theirs) + 0.5 * (ours == theirs)).mean())

    families = pd.read_csv(out / "scorecard_families.csv").set_index(["family", "baseline"])
    for family, members in (("one", "ab"), ("two", "c")):
        for baseline in ("tpo", "pg", "dg", "ppo"):
            expected = np.mean([(score[c, "grpo"].mean(1) - score[c, baseline].mean(1)).mean() for c in members])
            assert families.loc[(family, baseline), "diff"] == pytest.approx(expected, abs=1e-12)
        assert families.loc[(family, "tpo"), "verdict"] == "behind"
        assert families.loc[(family, "pg"), "verdict"] == "ahead"
        assert families.loc[(family, "dg"), "verdict"] == "level"
        assert families.loc[(family, "ppo"), "verdict"] == "level"
        assert families.loc[(family, "ppo"), "diff"] != 0.0

    frame = pd.read_csv(out / "scorecard_aggregates.csv")
    matrix = {name: np.stack([score[c, name].mean(1) for c in "abc"], axis=1)
              for name in ("grpo", "tpo", "pg", "dg", "ppo")}
    for name, scores in matrix.items():
        row = frame[(frame.window == "mean") & (frame.algorithm == name) & (frame.statistic == "iqm")].iloc[0]
        assert row.estimate == pytest.approx(metrics.aggregate_iqm(scores), abs=1e-12)
    for name in ("tpo", "pg", "dg", "ppo"):
        row = frame[(frame.window == "mean") & (frame.algorithm == name) & (frame.statistic == "candidate_improves")]
        expected = metrics.probability_of_improvement(matrix["grpo"], matrix[name])
        assert row.estimate.iloc[0] == pytest.approx(expected, abs=1e-12)
        assert row.low.iloc[0] <= row.estimate.iloc[0] <= row.high.iloc[0]

    text = (out / "scorecard.md").read_text()
    assert text.startswith("# Scorecard: GRPO on the tiny suite (v3)")
    assert f"sha256 {suite.digest}" in text
    assert "- **one**: ahead of PG; behind TPO; level with DG, PPO." in text
    assert (out / "scorecard.png").stat().st_size > 0


def test_a_candidate_that_is_a_baseline_is_compared_with_the_others(tmp_path):
    """Bug caught: baselines_of returning every baseline (the candidate compared with itself)."""
    suite = tiny_suite(tmp_path)
    write_synthetic(tmp_path / "results", synthetic_errors())
    compared = scorecard.comparison(suite, scorecard.Candidate("tpo"), tmp_path / "results", RESAMPLES)
    assert compared.values == ["tpo", "pg", "dg", "ppo"]


def test_missing_runs_are_named_with_the_command_that_runs_them(tmp_path):
    """Bug caught: missing_text giving the candidate's command for a baseline's missing cell."""
    suite = tiny_suite(tmp_path)
    errors = {key: value for key, value in synthetic_errors().items() if key != ("b", "pg")}
    write_synthetic(tmp_path / "results", errors)
    with pytest.raises(scorecard.ScorecardError,
                       match=r"pg in b \(python -m harness.scorecard --baselines --suite tiny\)"):
        scorecard.check_baselines(suite, scorecard.Candidate("rloo"), tmp_path / "results")
    with pytest.raises(scorecard.ScorecardError, match=r"rloo in a, b, c \(python -m harness.scorecard algorithm=rloo"):
        scorecard.comparison(suite, scorecard.Candidate("rloo"), tmp_path / "results")


def test_a_folder_holding_files_no_scorecard_wrote_is_refused(tmp_path):
    """Bug caught: claim returning without looking (the scorecard's files written beside the user's)."""
    suite = tiny_suite(tmp_path)
    write_synthetic(tmp_path / "results", synthetic_errors())
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    with pytest.raises(scorecard.ScorecardError, match="holds files no scorecard wrote"):
        scorecard.write(suite, scorecard.Candidate("grpo"), tmp_path / "results", out, "command", RESAMPLES)
    assert [path.name for path in out.iterdir()] == ["notes.md"]


def one_cell_suite(tmp_path: Path, baseline: str):
    """A quick suite of one tiny tabular cell with ``baseline``, and run_cells' arguments for tmp_path's folders."""
    text = f"""version: 1
preset: scorecard_quick
baselines: [{baseline}]
cells:
  - {{name: a, family: one, seeds: 2, cost: 0.001, overrides: [task=tabular_single, task.steps=6]}}
"""
    args = scorecard.argparse.Namespace(jobs=2, dry_run=False, finish_within=None, replace=False,
                                        work=tmp_path / "work", results=tmp_path / "results")
    return tiny_suite(tmp_path, text), args


def test_the_candidates_cells_run_through_the_campaign_and_a_run_of_another_configuration_is_refused(tmp_path,
                                                                                                     capsys):
    """Real runs: the baselines' cells, then the candidate's, land in results/runs/<preset>/<cell>/<label>/; a
    second call runs nothing; a candidate folder holding another configuration's run is refused (exit 2); a live
    campaign's lock on the candidate's cell refuses it, one on another cell does not. Bugs caught:
    harness/campaign/reports.py:report without its scorecard-preset skip (a report folder appears);
    harness/scorecard.py:run_cells locking ``[]`` instead of its cells (no refusal)."""
    suite, args = one_cell_suite(tmp_path, "tpo")
    assert scorecard.run_cells(suite, [scorecard.Candidate("tpo")], args) == 0
    exported = tmp_path / "results" / "runs" / "scorecard_quick" / "a" / "tpo" / "seeds0-1"
    assert (exported / "summary.json").exists()
    assert not (tmp_path / "results" / "scorecard_quick").exists()  # the campaign writes no report of its own

    shutil.copytree(exported, exported.parent.parent / "pg" / "seeds0-1")  # TPO's run where PG's belongs
    capsys.readouterr()
    assert scorecard.run_cells(suite, [scorecard.Candidate("pg")], args) == 2
    assert "holds a run of another configuration than the cell scorecard_quick/a/pg" in capsys.readouterr().err
    shutil.rmtree(exported.parent.parent / "pg")
    locks = tmp_path / "results" / ".campaign-locks" / "scorecard_quick" / "a"
    locks.mkdir(parents=True, exist_ok=True)
    for label in ("tpo", "pg"):  # a live campaign (this process) holds each cell in turn
        (locks / f"{label}.lock").write_text(f"{os.getpid()} {os.uname().nodename}\n")
    with pytest.raises(SystemExit, match="^Error: another campaign .* runs scorecard_quick/a/pg in "):
        scorecard.run_cells(suite, [scorecard.Candidate("pg")], args)
    (locks / "pg.lock").unlink()
    assert scorecard.run_cells(suite, [scorecard.Candidate("pg")], args) == 0  # beside the holder of a/tpo
    assert scorecard.run_cells(suite, [scorecard.Candidate("pg")], args) == 0
    assert "0 runs to go" in capsys.readouterr().out
    card = scorecard.write(suite, scorecard.Candidate("pg"), args.results, tmp_path / "card", "command", RESAMPLES)
    assert "| a | TPO | 2 |" in card.read_text()


def test_a_candidate_with_an_override_runs_and_gets_its_scorecard(tmp_path):
    """``algorithm=tpo algorithm.eta=0.5`` end to end at tiny size: its runs land in the ``tpo,eta=0.5`` folders with
    η = 0.5, and the scorecard is written. Bug caught: campaign.Run.command passing the label's ``,`` and ``=`` to
    Hydra unquoted in hydra.run.dir (every cell failed to start)."""
    suite, args = one_cell_suite(tmp_path, "grpo")
    candidate = scorecard.parse_candidate(["algorithm=tpo", "algorithm.eta=0.5"], suite)
    assert candidate.label == "tpo,eta=0.5"
    assert scorecard.run_cells(suite, [scorecard.Candidate("grpo"), candidate], args) == 0
    run = tmp_path / "results" / "runs" / "scorecard_quick" / "a" / "tpo,eta=0.5" / "seeds0-1"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert "eta: 0.5" in (run / "config.yaml").read_text()
    card = scorecard.write(suite, candidate, args.results, tmp_path / "card", "command", RESAMPLES)
    assert "| a | GRPO | 2 |" in card.read_text()


@pytest.mark.parametrize("arguments, message", [
    (["algorithm=tpo", "algorithm.etaa=0.5"], "Error: algorithm.etaa is not a config key; did you mean algorithm.eta?"),
    (["algorithm=tpo", "--finish-within", "-1"], "argument --finish-within: '-1' is not a finite number > 0"),
    (["algorithm=tpo", "--finish-within", "nan"], "argument --finish-within: 'nan' is not a finite number > 0"),
])
def test_a_bad_key_or_flag_is_refused_in_one_line_before_anything_runs(arguments, message, capsys):
    """Bugs caught: parse_candidate not composing the candidate's keys (an 18-line traceback advising ``+key``, which
    the scorecard refuses); main accepting a negative or NaN --finish-within."""
    with pytest.raises(SystemExit) as exit_code:
        scorecard.main([*arguments, "--quick", "--dry-run"])
    assert exit_code.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert message in err[-1] and not any("Traceback" in line for line in err)


def test_an_out_that_is_a_file_is_refused_before_the_runs_and_a_killed_scorecards_temporaries_are_cleared(tmp_path,
                                                                                                         capsys):
    """Bugs caught: main claiming --out only after the runs (a file there failed with a traceback after hours of
    runs); claim counting a killed scorecard's own ``.scorecard.png.<pid>.tmp`` as a foreign file (every re-run
    refused)."""
    results, mine = tmp_path / "results", tmp_path / "mine.txt"
    mine.write_text("mine")
    with pytest.raises(SystemExit) as exit_code:
        scorecard.main(["algorithm=grpo", "--quick", "--out", str(mine), "--results", str(results),
                        "--work", str(tmp_path / "work")])
    assert exit_code.value.code == 2 and mine.read_text() == "mine" and not (tmp_path / "work").exists()
    assert capsys.readouterr().err == f"Error: --out {mine}: not a folder; choose a new or empty folder\n"
    out = tmp_path / "card"
    out.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (out / f".scorecard.png.{dead.pid}.tmp").write_bytes(b"half a png")
    scorecard.claim(out)
    assert list(out.iterdir()) == []
    (out / f".scorecard.png.{os.getpid()}.tmp").write_bytes(b"being written")  # a live scorecard's: left alone
    with pytest.raises(scorecard.ScorecardError, match=f"another scorecard \\(process {os.getpid()}\\)"):
        scorecard.claim(out)


def test_the_command_refuses_in_one_line_and_exits_2(capsys):
    """Bug caught: main without its ``except ScorecardError`` (a traceback and exit 1)."""
    with pytest.raises(SystemExit) as exit_code:
        scorecard.main(["algorithm=grpo", "task.V=4", "--quick"])
    assert exit_code.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("Error: task.V=4: the quick suite (v1) pins the task") and err.count("\n") == 1
