"""An artefact is declared once, in its preset (``artefact:``): the report's tables and the campaign's queue entries
are read from there, and a declaration that names what the preset does not have is refused in one line."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from common.checks import ConfigError
from harness import artefacts
from harness.campaign import load_queue
from harness.config import preset_sweep, sweep_value
from harness.report.specs import FINAL, Stat, declared_table, tables_of
from conftest import ROOT


@pytest.fixture
def presets(tmp_path, monkeypatch):
    """Presets and queue files of our own: write(name, artefact block) adds a preset declaring it; the queues q,
    other and mine exist (``<tmp>/campaign/<queue>.yaml``, ``cells: declared``)."""
    (tmp_path / "experiment").mkdir()
    (tmp_path / "campaign").mkdir()
    for queue in ("q", "other", "mine"):
        (tmp_path / "campaign" / f"{queue}.yaml").write_text("chunk: 1\ncells: declared\n")
    monkeypatch.setattr(artefacts, "PRESETS", tmp_path / "experiment")
    monkeypatch.setattr(artefacts, "QUEUES", tmp_path / "campaign")
    artefacts.declaration.cache_clear()
    yield lambda name, block: (tmp_path / "experiment" / f"{name}.yaml").write_text(
        block if isinstance(block, str) else yaml.safe_dump({"artefact": block}))
    artefacts.declaration.cache_clear()


def test_a_queue_is_ordered_by_priority_number_then_order_then_preset(presets):
    presets("b_preset", {"campaign": {"q": [{"priority": "P10", "seeds": 1}, {"priority": "P2", "order": 2}]}})
    presets("a_preset", {"campaign": {"q": [{"priority": "P2", "order": 1}, {"priority": "P2", "order": 2},
                                            {"priority": "B1"}], "other": [{"priority": "P1"}]}})
    listed = [(preset, index, entry["priority"]) for preset, index, entry in artefacts.queue_entries("q")]
    assert listed == [("a_preset", 2, "B1"), ("a_preset", 0, "P2"), ("a_preset", 1, "P2"), ("b_preset", 1, "P2"),
                      ("b_preset", 0, "P10")]
    assert all("order" not in entry for _, _, entry in artefacts.queue_entries("q"))  # not a cell's key


@pytest.mark.parametrize("block, message", [
    ({"tabels": []}, r"artefact\.tabels is not valid; valid choices: tables, campaign$"),
    ({"campaign": {"papr": []}}, r"artefact\.campaign\.papr is not a campaign queue; valid choices: mine, other, q$"),
    ({"campaign": {"q": [{"priority": "P1", "order": "first"}]}}, r"artefact\.campaign\.q\[0\]\.order='first' is "
                                                                  r"not valid; expected an integer"),
    ({"tables": {"name": "t"}}, r"artefact\.tables is not valid; expected a list of tables"),
    ("artefact: [unclosed\n", r" is not valid YAML: "),
])
def test_a_declaration_of_the_wrong_shape_is_refused_in_one_line(presets, block, message):
    """A typo in a queue's name would otherwise drop its entries from every queue, silently."""
    presets("typo", block)
    with pytest.raises(ConfigError, match=r"^typo\.yaml" + (r": " if not message.startswith(" ") else "") + message):
        artefacts.declaration("typo")


def test_the_paper_queue_is_its_presets_declarations(tmp_path):
    """conf/campaign/paper.yaml lists no cell: its cells are the presets' entries for it, each from the preset that
    declares it, so that a copy of the file under its own name reads the same queue."""
    text = (ROOT / "conf" / "campaign" / "paper.yaml").read_text()
    assert yaml.safe_load(text)["cells"] == "declared"
    copy = tmp_path / "paper.yaml"
    copy.write_text(text)
    cells = load_queue(str(copy))["cells"]
    assert cells == load_queue("paper")["cells"]
    assert len({cell["preset"] for cell in cells}) > 10 and len(cells) > 150


def test_a_declared_queue_without_entries_or_a_misspelt_cells_is_refused(presets, tmp_path):
    presets("a_preset", {"campaign": {"q": []}})
    with pytest.raises(SystemExit, match=re.escape("Error: other.yaml: cells: declared, but no preset declares "
                                                   "entries for queue 'other'")):
        load_queue(str(artefacts.QUEUES / "other.yaml"))
    typo = tmp_path / "typo.yaml"
    typo.write_text("chunk: 1\ncells: declraed\n")
    with pytest.raises(SystemExit, match=re.escape("Error: typo.yaml: cells='declraed' is not valid; expected a "
                                                   "list of cells or 'declared'")):
        load_queue(str(typo))


def test_a_declared_entry_may_not_name_another_preset(presets, tmp_path):
    presets("table3_terminal", {"campaign": {"mine": [{"priority": "P1", "preset": "fig1b_sparse", "grid": {},
                                                       "seeds": 1, "cost": 1}]}})
    with pytest.raises(SystemExit, match=re.escape("Error: table3_terminal.yaml: artefact.campaign.mine[0].preset "
                                                   "is not valid here")):
        load_queue(str(artefacts.QUEUES / "mine.yaml"))


def test_a_refusal_of_a_declared_cell_names_the_preset_that_declares_it(presets):
    """Bug caught: a cell check naming ``mine.yaml: cells[N]``, a file that lists no cell."""
    presets("table3_terminal", {"campaign": {"mine": [{"priority": "P1", "grid": {"algorithm": "tpo"}, "seeds": 1,
                                                       "cost": 1, "sed": 2}]}})
    with pytest.raises(SystemExit, match=re.escape("Error: table3_terminal.yaml: artefact.campaign.mine[0] has an "
                                                   "unknown key 'sed'")):
        load_queue(str(artefacts.QUEUES / "mine.yaml"))


def test_a_declared_tables_axes_are_its_presets_sweep_in_its_order():
    table = declared_table("table3_terminal", {"name": "t", "title": "T", "rows": ["algorithm"],
                                               "cols": ["task.match", "task.H"]})
    sweep = preset_sweep("table3_terminal")
    assert [row["algorithm.name"] for row in table.rows] == sweep["algorithm"]
    assert [(col["task.match"], col["task.H"]) for col in table.cols] == [
        (match, sweep_value(h)) for match in sweep["task.match"] for h in sweep["task.H"]]
    assert table.stats == (FINAL,) and table.preset == "table3_terminal"


def test_a_declared_stat_is_named_or_spelled_out():
    table = declared_table("table3_terminal", {"name": "t", "title": "T", "rows": [{"algorithm.name": "tpo"}],
                                               "stats": ["steps_to_0.05", {"kind": "mean", "metric": "x",
                                                                           "when": ["frac_zero_var", 1.0]}]})
    assert table.stats == (Stat("steps_to", threshold=0.05), Stat("mean", metric="x", when=("frac_zero_var", 1.0)))
    assert table.rows == ({"algorithm.name": "tpo"},) and table.cols == ({},)


@pytest.mark.parametrize("declared, message", [
    ({"rows": ["task.V"]}, r"\.rows='task.V' is not an axis of the preset's sweep; valid axes: task.match, task.H, "
                           r"algorithm$"),
    ({"rows": ["algorithm"], "stats": ["steps_to_1%"]}, r"\.stats='steps_to_1%' is not a named statistic; valid "
                                                         r"choices: final, mean, steps_to_0.01, "),
    ({"rows": ["algorithm"], "stats": [{"kind": "final", "metirc": "x"}]}, r"\.stats has metirc; a statistic is a "
                                                                           r"named one"),
    ({"rows": ["algorithm"], "colums": ["task.H"]}, r"\.colums is not valid; valid choices: name, title, rows, "),
    ({"rows": ["algorithm", {"task.H": 7}]}, r"\.rows=\[.*\] is not valid; expected a list of the preset's sweep "),
    ({}, r" has no rows; a table needs name, title and rows$"),
])
def test_a_table_declaring_what_its_preset_lacks_is_refused_in_one_line(declared, message):
    with pytest.raises(ConfigError, match=r"^table3_terminal\.yaml: artefact\.tables\[t\]" + message):
        declared_table("table3_terminal", {"name": "t", "title": "T", **declared})


def test_a_table_name_declared_twice_is_refused_naming_both_presets():
    """Bug caught: the second declaration silently replacing the first (a name is its table's files)."""
    table = {"name": "t", "title": "T", "rows": ["algorithm"]}
    assert list(tables_of([("table3_terminal", table)])) == ["t"]
    with pytest.raises(ConfigError, match=r"^fig8_ablations\.yaml: artefact\.tables\[t\] repeats a table name of "
                                          r"table3_terminal\.yaml"):
        tables_of([("table3_terminal", table), ("fig8_ablations", table)])


def test_a_run_of_a_preset_drops_its_declaration(tmp_path):
    """Hydra composes the ``artefact`` block into the config of ``python -m harness experiment=<preset>``; the run
    neither records it nor counts it in its identity, so a table or an entry added to a preset changes no run."""
    from hydra import compose, initialize_config_dir

    from harness.config import CONFIG_DIR
    from harness.run import train

    overrides = ["experiment=demo_sparse", "algorithm=tpo", "seeds=1", "task.steps=2", "task.H=3",
                 "task.batch_size=4", "task.K=2"]
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        composed = compose("config", overrides=overrides)
    assert "tables" in composed.artefact
    assert train(composed, tmp_path)["status"] == "completed"
    assert "artefact" not in yaml.safe_load((tmp_path / ".hydra" / "config.yaml").read_text())
    identity = json.loads((tmp_path / "identity.json").read_text())
    assert "artefact" not in json.dumps(identity)
