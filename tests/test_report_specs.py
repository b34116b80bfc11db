"""The table/figure specs stay in sync with the experiment presets and with the paper's numbers."""

from __future__ import annotations

import pytest

from harness.report import paper
from harness.report.specs import FIGURES, SHARED_RUNS, TABLES
from harness.report.tables import CONF, _preset_of, command, outside_grid


def check_cell(default: str, key: dict) -> list[str]:
    """Problems with one cell: keys the preset neither sweeps over nor sets to the cell's value."""
    name = key.get("experiment", default)
    if not (CONF / "experiment" / f"{name}.yaml").exists():
        pytest.skip(f"preset {name} not written yet")
    outside = outside_grid(name, key)
    assert outside is not None, f"preset {name} does not compose"
    return [f"{name}: {config_key}={key[config_key]} is not in the preset's grid" for config_key in outside]


@pytest.mark.parametrize("name", list(TABLES))
def test_every_table_cell_is_in_its_presets_grid(name):
    table = TABLES[name]
    problems = [p for _, _, key in table.cells() for p in check_cell(table.preset, key)]
    assert not problems, problems


@pytest.mark.parametrize("name", list(FIGURES))
def test_every_figure_line_is_in_its_presets_grid(name):
    problems = []
    for panel in FIGURES[name].panels:
        xs = [{panel.x: x} for x in panel.xs] or [{}]
        for series in panel.series:
            for x in xs:
                problems += check_cell(panel.preset, {**panel.where, **series.key, **x})
    assert not problems, problems


@pytest.mark.parametrize("name", list(TABLES))
def test_a_cells_command_runs_it_where_the_report_reads_it(name):
    """A cell's fill command goes to the preset whose runs serve it (``SHARED_RUNS``, followed on); the report
    reads the cell's own preset and those it lists, not further: a command that lands beyond them would run seeds
    the cell never reads (Fig 8's H = 10 lands in Fig 1b's, which Fig 8 lists beside Table 3's)."""
    table = TABLES[name]
    for _, _, key in table.cells():
        own = key.get("experiment", table.preset)
        target = _preset_of(command(table.preset, key))
        assert target in (own, *SHARED_RUNS.get(own, ())), (key, target)


def test_every_published_number_belongs_to_a_table_cell():
    numbers = paper.paper_numbers()
    orphans = []
    for _, row in numbers.iterrows():
        table = TABLES[row.artefact]
        assert row.stat in {s.name for s in table.stats}, row.to_dict()
        keys = [{"experiment": table.preset, **key} for _, _, key in table.cells()]
        if not any(all(k in key and paper._same(key[k], v) for k, v in row.key.items()) for key in keys):
            orphans.append(f"{row.artefact} {row.cell}")
    assert not orphans, orphans
    # spot checks against the paper (docs/reproduction.md §12)
    assert paper.lookup("table3", "final", {"algorithm.name": "tpo", "task.match": "interactions",
                                            "task.H": 10}).text == "19.0"
    mnist_dg = paper.lookup("fig4a", "final", {"algorithm.name": "dg"})
    assert (mnist_dg.text, mnist_dg.low, mnist_dg.high) == ("3.2", pytest.approx(0.031), pytest.approx(0.033))
    never = paper.lookup("table2", "steps_to_0.01", {"task.reward": "sequential", "task.target": "copy",
                                                     "algorithm.name": "ppo"})
    assert never.text == "−" and never.overlaps(900, float("inf")) and not never.overlaps(100, 900)
    rounded = paper.lookup("table1", "steps_to_0.01", {"algorithm.name": "dg", "task.V": 16})
    assert rounded.overlaps(393, 400) and not rounded.overlaps(394, 400)
    six_nine = paper.lookup("table3", "final", {"algorithm.name": "tpo", "task.match": "prompts", "task.H": 7})
    assert six_nine.overlaps(0.0694, 0.08) and not six_nine.overlaps(0.0696, 0.08)  # 6.9% stands for [6.85, 6.95]


def test_a_cell_merges_runs_launched_with_other_resume_options():
    """Seed ranges of one cell run by different launches (resume, overwrite, logging) are one configuration."""
    from harness.report.load import signature

    base = {"task.name": "token_reversal", "task.H": 10, "algorithm.name": "tpo", "seeds": 5, "seed_offset": 0}
    other = {**base, "seed_offset": 5, "trainer.resume": "auto", "trainer.overwrite": False,
             "logger.init_timeout": 10.0, "threads": 1}
    assert signature(base) == signature(other)
    assert signature(base) != signature({**base, "task.H": 7})


def test_a_report_reads_the_runs_of_every_panel_of_the_figures_it_draws():
    from harness.report.specs import report_sources

    assert report_sources("fig1b_sparse") == ["fig1b_sparse", "fig4_mnist"]  # Fig 1: (a) MNIST, (b) sparse reward
    assert report_sources("fig4_mnist") == ["fig4_mnist", "fig1b_sparse"]
    assert report_sources("table3_terminal") == ["table3_terminal", "fig1b_sparse"]  # shared runs (H = 10)
    assert report_sources("table1_vocab_sweep") == ["table1_vocab_sweep"]


def test_a_tables_swept_rows_and_columns_are_its_presets_values_in_its_order():
    """Table 3 names the preset's axes, not their values: its rows and columns are the preset's sweep, read here
    from the file, typed as a run's config holds them. Bugs caught: values left as text (``"7"`` never matches a run's
    ``7``), sorted instead of the preset's order, ``algorithm`` not mapped to ``algorithm.name``."""
    import yaml

    from conftest import ROOT

    params = yaml.safe_load((ROOT / "conf" / "experiment" / "table3_terminal.yaml").read_text())["hydra"]["sweeper"][
        "params"]
    matches, horizons, methods = (str(params[axis]).split(",") for axis in ("task.match", "task.H", "algorithm"))
    table = TABLES["table3"]
    assert list(table.rows) == [{"algorithm.name": method} for method in methods]
    assert list(table.cols) == [{"task.match": match, "task.H": int(h)} for match in matches for h in horizons]
    assert [key["task.H"] for key in TABLES["fig8"].cols] == [7, 8, 10] and methods[0] == "tpo"
    eta = [key["algorithm.eta"] for key in TABLES["table5"].rows]
    assert eta == [0.25, 0.5, 1.0, 2.0, 4.0] and all(isinstance(value, float) for value in eta)


def test_a_tasks_labels_come_from_its_registry_entry():
    """Sequence tasks count episodes, bandits steps; the token task's error follows its reward. Bugs caught: the
    reward's label read for another task, an LLM task counted in steps, a task added without a label."""
    from harness.report.specs import TASK_LABEL, axis_labels
    from tasks import TASKS

    assert axis_labels("token_reversal", "bag_of_tokens") == ("Episode", "Token error")
    assert axis_labels("token_reversal", "terminal") == ("Episode", "Exact-match error")
    assert axis_labels("mnist_bandit", "bag_of_tokens") == ("Step", "Test error")
    assert axis_labels("gsm8k") == ("Episode", "Error") and axis_labels(None) == ("Step", "Error")
    assert set(TASK_LABEL) == set(TASKS) and all(TASK_LABEL.values())
