"""The report turns run directories into tables and figures without averaging in failed or partial runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import run_config
from harness.report import load_runs, mechanism_table, write_report
from harness.report.__main__ import main
from harness.report.specs import Stat
from harness.report.stats import point, seed_matrix

RUNS = Path(__file__).resolve().parent.parent / "results" / "runs"


def test_report_tables_figures_and_flags(tmp_path):
    sweep = tmp_path / "sweep"
    for algorithm, seeds in (("tpo", 3), ("pg", 3), ("dg", 2)):
        run_config(["task=tabular_single", f"algorithm={algorithm}", f"seeds={seeds}", "task.steps=40"],
                   sweep / algorithm)
    (sweep / "ppo").mkdir()
    (sweep / "ppo" / "summary.json").write_text(json.dumps(
        {"status": "failed", "task": "tabular_single", "algorithm": "ppo", "error": "ConfigError: ..."}))

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "conclusions.md").write_text("# What the runs say\n")
    table = write_report([sweep], tmp_path / "out").set_index("algorithm")
    assert "[conclusions.md](conclusions.md)" in (tmp_path / "out" / "README.md").read_text()
    metrics = pd.read_csv(sweep / "tpo" / "metrics.csv")
    last = metrics[metrics.step == 39]["error"].to_numpy()
    expected = f"{100 * last.mean():.3g} ± {100 * last.std() / np.sqrt(3):.2g}"
    assert table.loc["tpo", "final error % (mean ± s.e.)"] == expected
    assert table.loc["dg", "flags"] == "partial"  # fewer seeds than its siblings
    assert table.loc["ppo", "flags"] == "failed"
    assert table.loc["pg", "flags"] == ""
    for name in ("README.md", "runs.csv", "default_tabular_single.png", "default_tabular_single.pdf",
                 "default_tabular_single.caption.md"):
        assert (tmp_path / "out" / name).exists()
    runs, curves = load_runs([sweep])
    assert len(runs) == 4 and set(curves.algorithm) == {"tpo", "pg", "dg"}
    assert list(curves.columns[-4:]) == ["seed", "step", "metric", "value"]


def test_mechanism_table_averages_seeds_at_step_2000():
    curves = pd.DataFrame({
        "algorithm": ["tpo"] * 4, "metric": ["mech_surplus_bin3"] * 3 + ["error"], "step": [2000, 2000, 1800, 2000],
        "seed": [0, 1, 0, 0], "value": [0.07, 0.09, 5.0, 0.1]})
    table = mechanism_table(curves)
    assert len(table) == 1
    row = table.iloc[0]
    assert np.isclose(row.surplus, 0.08) and np.isclose(row.se, 0.01 / np.sqrt(2)) and row.seeds == 2


@pytest.mark.cross_cpu
def test_steps_to_and_final_agree_with_the_trainers_summary():
    """Same rule as harness/rundir/outputs.py on the committed MNIST runs: their summaries were written on another
    machine, so the final mean is compared within np.isclose (make test reruns this under an emulated other CPU)."""
    runs, curves = load_runs([RUNS / "fig4_mnist"], metrics=["error"])
    for run in runs.itertuples():
        summary = json.loads((Path(run.run_dir) / "summary.json").read_text())
        part = curves[curves.run == run.run]
        matrix = seed_matrix(part.seed.to_numpy(), part.step.to_numpy(), part.value.to_numpy())
        reached = point(Stat("steps_to", threshold=0.05), matrix)
        assert (None if np.isinf(reached) else reached) == summary["steps_to"]["error"]["0.05"]
        assert np.isclose(point(Stat("final"), matrix), summary["final"]["error"]["mean"])


def _stored_metrics(algorithm: str) -> pd.DataFrame:
    return pd.read_csv(RUNS / "fig4_mnist" / algorithm / "metrics.csv.gz")


def test_cli_writes_mnist_tables_with_the_paper_column(tmp_path, capsys):
    """Fig 4a/4b from the committed runs against the same numbers computed here straight from their metrics."""
    main([str(RUNS / "fig4_mnist"), "--out", str(tmp_path), "--figures", "none", "--resamples", "200"])
    assert "written to" in capsys.readouterr().out
    assert "conclusions.md" not in (tmp_path / "README.md").read_text()  # linked only where one was written
    cells = pd.read_csv(tmp_path / "fig4a.csv", dtype={"paper": str}).set_index(["row", "stat"])
    assert cells.loc[("TPO", "final"), "paper"] == "2.9"
    for row, algorithm in (("TPO", "tpo"), ("DG", "dg")):
        mean_error = _stored_metrics(algorithm).groupby("step").error.mean()
        assert cells.loc[(row, "steps_to_0.05"), "ours"] == mean_error.index[mean_error < 0.05][0]
        assert np.isclose(cells.loc[(row, "final"), "ours"], mean_error.iloc[-1])
    assert cells.loc[("TPO", "steps_to_0.05"), "paper_in_rerun"]
    mechanism = pd.read_csv(tmp_path / "fig4b.csv", dtype={"paper": str})
    top = mechanism[(mechanism.row == "TPO") & (mechanism.col == "[.75, 1]")].iloc[0]
    at_2000 = _stored_metrics("tpo").query("step == 2000")
    assert top.paper == "0.073"
    assert np.isclose(top.ours, at_2000.loc[at_2000.mech_count_bin3 > 0, "mech_surplus_bin3"].mean())


def test_seed_ranges_merge_across_flush_denormal_but_not_across_a_hyperparameter(tmp_path):
    """Runs recorded before ``flush_denormal`` existed (no key: they did not flush) merge with new ones (true), as
    across ``threads`` or ``cpu_matmul``; a differing hyperparameter is still a conflict."""
    from harness.report import synthetic
    from harness.report.tables import Report

    errors = {"error": np.full((2, 3), 0.5)}
    old = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20)
    new = {**synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20, seed_offset=2),
           "flush_denormal": True}
    other = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20, seed_offset=4,
                                  **{"algorithm.eta": 2.0})
    steps = np.array([0, 10, 19])
    for name, config in (("a", old), ("b", new), ("c", other)):
        synthetic.write_run(tmp_path / name, config, errors, steps=steps)
    runs, curves = load_runs([tmp_path / "a", tmp_path / "b"])
    resolved = Report(runs, curves).resolve("table3_terminal", {"algorithm.name": "tpo"}, (4, 20, "preset"))
    assert resolved.status == "ok" and resolved.finished_seeds == [0, 1, 2, 3]
    runs, curves = load_runs([tmp_path / "a", tmp_path / "c"])
    resolved = Report(runs, curves).resolve("table3_terminal", {"algorithm.name": "tpo"}, (4, 20, "preset"))
    assert resolved.status == "conflict" and "algorithm.eta" in resolved.flags[0]


def test_a_report_removes_the_tables_and_figures_it_no_longer_writes_and_keeps_hand_written_files(tmp_path):
    from harness.report import synthetic

    steps = np.array([0, 10, 19])
    config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20,
                                   **{"task.H": 7, "task.match": "prompts"})
    synthetic.write_run(tmp_path / "runs" / "a", config, {"error": np.full((2, 3), 0.5)}, steps=steps)
    out = tmp_path / "report"
    write_report([tmp_path / "runs"], out, tables="table3", figures="fig7", resamples=20)
    written = {"table3.md", "table3.csv", "table3.tex", "table3_dynamics.json", "fig7.png", "fig7.pdf",
               "fig7.caption.md"}
    assert written <= {p.name for p in out.iterdir()}
    (out / "conclusions.md").write_text("read by hand\n")
    write_report([tmp_path / "runs"], out, tables="none", figures="none", resamples=20)
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "conclusions.md", "missing.json", "runs.csv"]
    # a table and a figure of the same name: dropping the figure keeps the table
    write_report([tmp_path / "runs"], out, tables="beyond_relapse", figures="beyond_relapse", resamples=20)
    assert {"beyond_relapse.md", "beyond_relapse.png"} <= {p.name for p in out.iterdir()}
    write_report([tmp_path / "runs"], out, tables="beyond_relapse", figures="none", resamples=20)
    names = {p.name for p in out.iterdir()}
    assert "beyond_relapse.md" in names and "beyond_relapse.png" not in names and "conclusions.md" in names


def test_a_cell_with_more_seeds_than_its_preset_takes_the_presets_first_seeds(tmp_path):
    """beyond_relapse's 10-seed rows read Table 3's 20-seed runs: the row averages seeds 0-9 like its neighbours, and
    says so; a budget that is not the preset's (the paper's, a largest run's) keeps every seed."""
    from harness.report import synthetic, tables
    from harness.report.specs import Table
    from harness.report.tables import Report

    steps = np.array([0, 10, 19])
    finals = np.arange(6) / 10  # seed s ends at s / 10
    for offset in (3, 0):  # the higher seeds written first: the cap goes by seed id, not by run age
        config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 3, 20, seed_offset=offset)
        errors = np.repeat(finals[offset:offset + 3, None], len(steps), axis=1)
        synthetic.write_run(tmp_path / "runs" / f"seeds{offset}", config, {"error": errors}, steps=steps)
    report = Report(*load_runs([tmp_path / "runs"]))
    capped = report.resolve("table3_terminal", {"algorithm.name": "tpo"}, (4, 20, "preset"))
    assert capped.status == "ok" and capped.finished_seeds == [0, 1, 2, 3]
    assert "first 4 of 6 seeds (the preset's)" in capped.flags
    assert report.matrix(capped, "error").values[:, -1].mean() == pytest.approx(finals[:4].mean())
    exact = report.resolve("table3_terminal", {"algorithm.name": "tpo"}, (6, 20, "preset"))
    assert exact.finished_seeds == list(range(6)) and not exact.flags
    every = report.resolve("table3_terminal", {"algorithm.name": "tpo"}, (4, 20, "paper"))
    assert every.finished_seeds == list(range(6)) and not every.flags
    assert report.budget("no_such_preset") == (0, 0, "largest run")  # a figure line nothing has run yet
    spec = Table("capped", "A table over the preset's seeds", "table3_terminal", rows=({"algorithm.name": "tpo"},))
    with pytest.MonkeyPatch.context() as patch:  # the table says which seeds a complete cell averages
        patch.setattr(tables, "preset_budget", lambda preset: (4, 20))
        write_report([tmp_path / "runs"], tmp_path / "report", tables="capped", figures="none", resamples=20,
                     table_specs={"capped": spec})
    assert "Notes: TPO: first 4 of 6 seeds (the preset's)." in (tmp_path / "report" / "capped.md").read_text()


def test_a_shorter_run_of_another_configuration_is_superseded_not_a_conflict(tmp_path):
    """Seeds 0-1 ran 10 of 20 steps under another η; seeds 2-3 ran all 20: the short run is ignored (flagged), not
    a conflict. Two full runs of different η stay a conflict, and the token task's dedup and seed_chunk (rounding
    only) never make one."""
    from harness.report import synthetic
    from harness.report.tables import Report

    steps = np.array([0, 10, 19])
    short = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 10, **{"algorithm.eta": 2.0})
    synthetic.write_run(tmp_path / "short", short, {"error": np.full((2, 2), 0.5)}, steps=steps[:2])
    full = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20, seed_offset=2,
                                 **{"task.dedup": True, "task.seed_chunk": 1})
    synthetic.write_run(tmp_path / "full", full, {"error": np.full((2, 3), 0.5)}, steps=steps)
    other = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20, seed_offset=4,
                                  **{"task.dedup": False, "task.seed_chunk": "auto"})
    synthetic.write_run(tmp_path / "other", other, {"error": np.full((2, 3), 0.5)}, steps=steps)
    clash = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 20, seed_offset=6,
                                  **{"algorithm.eta": 2.0})
    synthetic.write_run(tmp_path / "clash", clash, {"error": np.full((2, 3), 0.5)}, steps=steps)

    def resolve(*names):
        runs, curves = load_runs([tmp_path / name for name in names])
        return Report(runs, curves).resolve("table3_terminal", {"algorithm.name": "tpo"}, (4, 20, "preset"))

    superseded = resolve("short", "full", "other")
    assert superseded.status == "ok" and superseded.finished_seeds == [2, 3, 4, 5]
    assert "ignored 1 shorter run(s)" in superseded.flags
    conflict = resolve("short", "full", "clash")
    assert conflict.status == "conflict" and "algorithm.eta" in conflict.flags[0]
    assert resolve("short").status == "partial"  # nothing longer: the short run is what there is


def test_a_grouped_methods_interaction_matched_cell_reads_its_prompt_matched_runs(tmp_path):
    """task.match changes only single-sample methods (``TokenReversal.inert_keys``): TPO's interaction-matched cell
    reads the prompt-matched runs (the preset's value) and says so, even beside runs of its own value; PPO's stays
    missing; runs of the other value fill a cell only where its one configuration has none; every command runs the
    one configuration, counting its seeds, and H = 10's lands in Fig 1b's preset whichever matching the cell names."""
    import shutil

    from harness.report import synthetic
    from harness.report.tables import Report, command, fill_command

    steps = np.array([0, 10, 19])

    def write(name, algorithm, match, final, seeds=2):
        config = synthetic.make_config("table3_terminal", "token_reversal", algorithm, seeds, 20,
                                       **{"task.H": 7, "task.match": match})
        synthetic.write_run(tmp_path / "runs" / name, config, {"error": np.full((seeds, 3), final)}, steps=steps)

    def cell(algorithm, match):
        report = Report(*load_runs([tmp_path / "runs"]))
        resolved = report.resolve("table3_terminal", {"algorithm.name": algorithm, "task.match": match,
                                                      "task.H": 7}, (2, 20, "preset"))
        final = report.matrix(resolved, "error").values[:, -1].mean() if resolved.usable else None
        return resolved, final

    write("tpo", "tpo", "prompts", 0.25)
    write("ppo", "ppo", "prompts", 0.5)
    write("tpo_interactions", "tpo", "interactions", 0.75, seeds=1)  # an older, partial run of the same configuration
    read, final = cell("tpo", "interactions")
    assert read.status == "ok" and final == pytest.approx(0.25)
    assert read.flags == ["the task.match=prompts runs (the same configuration here)"]
    assert cell("tpo", "prompts")[0].flags == [] and cell("ppo", "interactions")[0].status == "missing"
    shutil.rmtree(tmp_path / "runs" / "tpo")  # the one configuration has no runs: the other value's fill the cells
    own, final = cell("tpo", "interactions")
    assert own.status == "partial" and final == pytest.approx(0.75) and "the task" not in own.flags[0]
    other = cell("tpo", "prompts")[0]
    assert other.flags[0] == "the task.match=interactions runs (the same configuration here)"
    full = "python -m harness -m experiment=table3_terminal algorithm=tpo task.H=7 task.match=prompts"
    assert fill_command("table3_terminal", {"algorithm.name": "tpo", "task.match": "interactions", "task.H": 7},
                        own, (2, 20, "preset")) == full  # not "seeds=1 seed_offset=1" of the other value's runs
    assert "task.match=interactions" in command("table3_terminal", {"algorithm.name": "ppo",
                                                                    "task.match": "interactions"})
    for match in ("prompts", "interactions"):
        assert command("table3_terminal", {"algorithm.name": "grpo", "task.match": match, "task.H": 10}) == \
            "python -m harness -m experiment=fig1b_sparse algorithm=grpo task.H=10 task.match=prompts"
    # Fig 8 shares Table 3's runs, whose H = 10 are Fig 1b's: followed on to where they run
    assert command("fig8_ablations", {"algorithm.name": "grpo", "task.match": "prompts", "task.H": 10}) == \
        "python -m harness -m experiment=fig1b_sparse algorithm=grpo task.H=10 task.match=prompts"


def test_a_cell_naming_epochs_reads_the_runs_that_left_them_at_their_default(tmp_path):
    """A run recorded with a null algorithm.epochs made its method's default number of updates on its task
    (``Task.epochs_for``: TPO 4 and DG 1 on token reversal, one on a single-update bandit): Fig 15's 4-epoch and
    Fig 17's 1-epoch cells read Fig 10's and Table 2's runs (report SHARED_RUNS), 8 epochs stays missing, and the
    commands that complete them run the shared preset's configuration, its epochs left null."""
    from harness.report import synthetic
    from harness.report.load import read_config
    from harness.report.tables import Report, command

    steps = np.array([0, 10, 19])

    def write(preset, algorithm, final, **params):
        config = synthetic.make_config(preset, "token_reversal", algorithm, 2, 20, **params)
        synthetic.write_run(tmp_path / "runs" / preset / algorithm, config, {"error": np.full((2, 3), final)},
                            steps=steps)

    def final(preset, key):
        report = Report(*load_runs([tmp_path / "runs"]))
        resolved = report.resolve(preset, key, (2, 20, "preset"))
        return report.matrix(resolved, "error").values[:, -1].mean() if resolved.usable else resolved.status

    write("fig10_diagnostics", "tpo", 0.25, **{"task.K": 32})
    write("fig10_diagnostics_tpo_1ep", "tpo", 0.5, **{"task.K": 32, "algorithm.epochs": 1})
    write("table2_variations", "dg", 0.75, **{"task.reward": "sequential", "task.target": "copy"})
    tpo = {"algorithm.name": "tpo", "task.K": 32}
    assert [final("fig15_epoch_sweep", {**tpo, "algorithm.epochs": epochs}) for epochs in (4, 1, 8)] == [
        0.25, 0.5, "missing"]
    dg = {"algorithm.name": "dg", "task.reward": "sequential", "task.target": "copy"}
    assert [final("fig17_dg_epochs", {**dg, "algorithm.epochs": epochs}) for epochs in (1, 4)] == [0.75, "missing"]
    assert command("fig15_epoch_sweep", {**tpo, "algorithm.epochs": 4}) == \
        "python -m harness -m experiment=fig10_diagnostics algorithm=tpo task.K=32"
    assert command("fig17_dg_epochs", {**dg, "algorithm.epochs": 1}) == \
        "python -m harness -m experiment=table2_variations algorithm=dg task.reward=sequential task.target=copy"
    assert "algorithm.epochs=4" in command("fig17_dg_epochs", {**dg, "algorithm.epochs": 4})
    for task in ("tabular_single", "gsm8k"):  # one update per batch; an LLM run: the TRL trainer's one
        config = synthetic.make_config("any", task, "tpo", 2, 20)
        synthetic.write_run(tmp_path / task, config, {"error": np.full((2, 3), 0.5)}, steps=steps)
        assert read_config(tmp_path / task)["algorithm.epochs"] == 1
    retired = synthetic.make_config("any", "gsm8k", "tpo", 2, 20)  # an LLM run recorded with the retired key
    retired["task"]["epochs"] = 2
    synthetic.write_run(tmp_path / "retired", retired, {"error": np.full((2, 3), 0.5)}, steps=steps)
    assert read_config(tmp_path / "retired")["algorithm.epochs"] == 2


def test_run_folders_are_listed_in_natural_order_of_their_seed_ranges(tmp_path):
    from harness.report.load import find_run_dirs

    for name in ("seeds15-19", "seeds5-9", "seeds10-14", "seeds0-4", "eta1", "eta0.5", "eta0.25"):
        (tmp_path / "cell" / name).mkdir(parents=True)
        (tmp_path / "cell" / name / "summary.json").write_text("{}")
    assert [p.name for p in find_run_dirs([tmp_path])] == ["eta0.25", "eta0.5", "eta1", "seeds0-4", "seeds5-9",
                                                           "seeds10-14", "seeds15-19"]


def test_every_algorithm_has_its_own_look_and_a_panels_methods_differ_in_colour():
    """An algorithm's look is declared with its class: colour and line style tell every two methods apart (a
    token-level variant looks like the method it varies), the methods a panel draws together differ in colour, and
    the figures draw each with its class's marker. Bugs caught: two classes given one look, a variant not inheriting
    its method's, the report's style or marker read from elsewhere than the class."""
    from algorithms import ALGORITHMS
    from harness.report import figures
    from harness.report.specs import FIGURES, Series

    methods = {name: cls.look for name, cls in ALGORITHMS.items() if not name.endswith("_token")}
    assert len({look[:2] for look in methods.values()}) == len(methods)
    assert all(ALGORITHMS[name].look == methods[name.removesuffix("_token")] for name in ALGORITHMS)
    for name, cls in ALGORITHMS.items():
        assert figures.series_style(Series({"algorithm.name": name}), 0, 1) == cls.look[:2]
        assert figures.series_marker(Series({"algorithm.name": name}), 0) == cls.look[2]
    for figure in FIGURES.values():
        for panel in figure.panels:
            drawn = [s.key["algorithm.name"] for s in panel.series if set(s.key) == {"algorithm.name"} and not s.style]
            assert len({ALGORITHMS[name].look[0] for name in drawn}) == len(drawn), (figure.name, panel.title)


def test_a_figures_variant_presets_are_told_apart_and_a_long_title_wraps_to_the_figure():
    """beyond_relapse and beyond_amplification draw one line per variant preset: each gets its own colour (they
    were all the same grey), and a title longer than the figure is wide wraps instead of being cut off."""
    from harness.report import figures
    from harness.report.specs import FIGURES, RELAPSE_VARIANTS, Series

    colours = {figures.series_style(Series({"experiment": name}), i, len(RELAPSE_VARIANTS))[0]
               for i, name in enumerate(RELAPSE_VARIANTS)}
    assert len(colours) == len(RELAPSE_VARIANTS)
    assert figures.series_style(Series({"algorithm.name": "tpo"}), 0, 2) == figures.ALGORITHM_STYLE["tpo"]

    title = FIGURES["beyond_relapse"].title
    lines = figures.wrapped_title(title, 2 * 3.6).split("\n")  # two panels of 3.6 in
    assert len(lines) == 2 and " ".join(lines) == title
    assert all(len(line) <= figures.TITLE_CHARS_PER_INCH * 7.2 for line in lines)
    assert figures.wrapped_title("Fig 2", 7.2) == "Fig 2"


def test_a_figure_draws_only_the_panels_with_runs_and_its_caption_says_which_are_missing(tmp_path):
    """Fig 7 with runs for one of its 8 cells: one panel, no "no runs" placeholders; the caption opens with two
    human lines (what, seeds, episodes, the band) and names the panels not drawn; provenance below a heading lists
    every declared line without runs as missing, and a run's CPU seconds (every process) beside its wall seconds
    (the last process), in the caption and the README's runs table.
    Bug caught: harness.report.figures.caption without the rows of ``drawer.unrun`` (the caption of a partial figure
    read as complete)."""
    from harness.report import synthetic

    steps = np.arange(20)  # PPO: a single-sample method's runs fill one cell (a grouped one's, both matchings')
    config = synthetic.make_config("table3_terminal", "token_reversal", "ppo", 3, 20,
                                   **{"task.H": 7, "task.match": "prompts", "task.reward": "terminal"})
    synthetic.write_run(tmp_path / "runs" / "a", config, {"error": np.linspace(1, 0, 60).reshape(3, 20)},
                        steps=steps, cpu_seconds=7.5, wall_seconds=2.0)  # as a resumed run: its last process short
    out = tmp_path / "report"
    from harness.report import tables
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "preset_budget", lambda preset: (3, 20))
        write_report([tmp_path / "runs"], out, tables="none", figures="fig7", resamples=50)
    runs_table = [line for line in (out / "README.md").read_text().splitlines() if "| ppo " in line]
    header = next(line for line in (out / "README.md").read_text().splitlines() if "| algorithm " in line)
    cells = dict(zip((c.strip() for c in header.split("|")), (c.strip() for c in runs_table[0].split("|"))))
    assert (cells["CPU s"], cells["wall s"]) == ("7.5", "2")
    caption = (out / "fig7.caption.md").read_text().splitlines()
    assert caption[0].startswith("**Fig 7") and "3 seeds, 20 episodes" in caption[0]
    assert "95% percentile bootstrap" in caption[1] and "Not drawn, no runs yet: Prompt, H=8; Prompt, H=9" in caption[1]
    assert caption[2] == "" and caption[3] == "## Provenance"
    assert "Lines without runs yet: " in caption[1]
    rows = [line.split(" | ") for line in caption if line.startswith("| ") and " | " in line][1:]
    assert [row[2] for row in rows].count("ok") == 1
    assert [row[7:] for row in rows if row[2] == "ok"] == [["7.5", "2.0 |"]]  # CPU s of every process, wall s
    missing = [(row[0].strip("| "), row[1]) for row in rows if row[2] == "missing"]
    assert len(missing) == 39 and len(set(missing)) == 39  # every other line of the 8 panels × 5 methods, once
    from matplotlib import image
    height, width = image.imread(out / "fig7.png").shape[:2]
    assert width < 1000  # one panel wide (a single-row figure is at least 6 in = 900 px), not four


def test_figure_bands_are_the_tables_bootstrap_interval():
    """The band at the last step is the final-error interval of the tables (same rule, generator and resamples)."""
    from harness.report.stats import SeedMatrix, mean_interval, summarize

    values = np.random.default_rng(3).random((7, 5))
    low, high = mean_interval(values, 500, 0)
    final = summarize(Stat("final"), SeedMatrix(np.arange(7), np.arange(5), values), 500, 0)
    assert (low[-1], high[-1]) == pytest.approx((final.low, final.high))
    assert np.all(low <= values.mean(0)) and np.all(values.mean(0) <= high)


def test_never_reached_thresholds_read_as_words_in_markdown_not_inf():
    from harness.report.specs import Stat as S
    from harness.report.tables import cell_text, paired_text

    to5 = S("steps_to", threshold=0.05)
    base = {"paper": "", "paper_in_rerun": None, "status": "ok", "seeds": 20, "seeds_run": 20, "paired_seeds": 20,
            "reference": "TPO", "p_better": 0.2}
    never = pd.Series({**base, "ours": np.inf, "ci_low": np.inf, "ci_high": np.inf, "_reached": 3})
    assert cell_text(to5, never) == "never (3/20 seeds reach it)"
    late = pd.Series({**base, "ours": 120.0, "ci_low": 90.0, "ci_high": np.inf})
    assert cell_text(to5, late) == "120 [90, never]"
    assert paired_text(to5, pd.Series({**never, "diff": np.inf, "diff_low": np.inf, "diff_high": np.inf})) == \
        "not reached (ref. is) P=0.20"
    both = pd.Series({**never, "diff": 0.0, "diff_low": 0.0, "diff_high": np.inf})
    assert paired_text(to5, both) == "neither reaches it [0, ∞)* P=0.20"


def test_seed_ranges_of_a_complete_configuration_are_not_flagged_partial(tmp_path):
    """TPO's 4 seeds in two runs (0-1, 2-3), DG's in one, GRPO's runs hold seeds 0-1 only, PPO's seeds 0-1 were
    interrupted and 2-3 completed: the per-run table flags GRPO's run and both of PPO's partial and neither of
    TPO's, as a table merges them into a complete cell. Bugs caught: the flag read from each run's own seed count
    (both TPO rows partial), an interrupted run's seeds counted as done (its summary's steps are the budget's)."""
    from harness.report.synthetic import make_config, write_run

    errors = np.full((2, 3), 0.5)
    for name, algorithm, offset, status in (("tpo_a", "tpo", 0, "completed"), ("tpo_b", "tpo", 2, "completed"),
                                            ("grpo", "grpo", 0, "completed"), ("ppo_a", "ppo", 0, "interrupted"),
                                            ("ppo_b", "ppo", 2, "completed")):
        write_run(tmp_path / "runs" / name,
                  make_config("ranges", "tabular_single", algorithm, 2, 3, seed_offset=offset), {"error": errors},
                  status=status)
    write_run(tmp_path / "runs" / "dg", make_config("ranges", "tabular_single", "dg", 4, 3),
              {"error": np.full((4, 3), 0.5)})
    table = write_report([tmp_path / "runs"], tmp_path / "out", figures="none")
    flags = sorted((row.algorithm, row.seeds, row.flags) for row in table.itertuples())
    assert flags == [("dg", 4, ""), ("grpo", 2, "partial"), ("ppo", 2, "interrupted, partial"), ("ppo", 2, "partial"),
                     ("tpo", 2, ""), ("tpo", 2, "")]
