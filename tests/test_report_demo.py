"""The report of `make demo` tells the truth: each demo preset's runs are judged against that preset's own size (the
tabular bandits' 150 and 1,000 steps, MNIST's 8 seeds × 3,000 steps), so complete runs carry no † and no "partial"
flag, the paper-style specs that cover the demo find its runs, and every command the report suggests composes."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import numpy as np
import pytest

from conftest import compose_config
from harness.report import synthetic, tables
from harness.report.build import write_report

DEMO = {  # preset → (task, algorithms) as conf/experiment/demo_*.yaml sweep them
    "demo_tabular": (("tabular_single", "tabular_multi"), ("tpo", "dg", "grpo", "pg")),
    "demo_mnist": (("mnist_bandit",), ("tpo", "dg", "group_pg", "grpo", "pg")),
    "demo_sparse": (("token_reversal",), ("tpo", "grpo", "dg")),
}
FIGURES = ("demo_tabular_single", "demo_tabular_multi", "demo_mnist_bandit", "demo_sparse_token_reversal")


def _size(preset: str, task: str) -> tuple[int, int]:
    """(seeds, steps) one run of the preset's sweep trains: its composed config, as `make demo` runs it."""
    cfg = compose_config([f"experiment={preset}", f"task={task}"] if preset == "demo_tabular" else
                         [f"experiment={preset}"])
    assert cfg.experiment_name == preset  # the runs carry their own preset's name (all were "demo")
    return int(cfg.seeds), int(cfg.task.steps)


def write_demo(root: Path, seeds_of: dict | None = None, skip: tuple = ()) -> Path:
    """Synthetic run folders of the whole demo, as large as the presets ask (``seeds_of``: fewer seeds for some
    (preset, task, algorithm); ``skip``: cells not run)."""
    rng = np.random.default_rng(0)
    for preset, (tasks, algorithms) in DEMO.items():
        for task in tasks:
            seeds, steps = _size(preset, task)
            logged = np.arange(0, steps, 200) if task == "mnist_bandit" else np.arange(steps)
            for algorithm in algorithms:
                if (preset, task, algorithm) in skip:
                    continue
                n = (seeds_of or {}).get((preset, task, algorithm), seeds)
                values = {"error": synthetic.learning_curves(rng, n, len(logged), 1.0, 0.01, 0.05)}
                if task.startswith("tabular"):
                    values["misalignment"] = synthetic.learning_curves(rng, n, len(logged), 0.5, 0.001, 0.05)
                config = synthetic.make_config(preset, task, algorithm, n, steps)
                synthetic.write_run(root / preset / task / algorithm, config, values, steps=logged)
    return root


def _overrides(command: str) -> list[str]:
    words = shlex.split(command)
    assert words[:4] == ["python", "-m", "harness", "-m"], command
    return words[4:]


def _rows(out: Path) -> list[str]:
    """Every table row of every markdown file the report wrote (runs, tables, figure captions' line lists)."""
    return [line for path in sorted(out.glob("*.md")) for line in path.read_text().splitlines() if line.startswith("|")]


@pytest.fixture(scope="module")
def complete(tmp_path_factory) -> Path:
    root = write_demo(tmp_path_factory.mktemp("demo") / "multirun")
    out = root.parent / "report"
    write_report([root], out, resamples=200)
    return out


def test_complete_demo_runs_are_not_flagged_and_the_demo_specs_find_them(complete):
    assert json.loads((complete / "missing.json").read_text()) == []
    rows = _rows(complete)
    assert rows and not [row for row in rows if "†" in row or "partial" in row]
    assert "Missing or incomplete" not in (complete / "README.md").read_text()
    for name in FIGURES:
        caption = (complete / f"{name}.caption.md").read_text()
        assert (complete / f"{name}.png").exists() and "| partial" not in caption and "†" not in caption
        assert "Demo:" in caption.splitlines()[0]  # a title in words, not a raw id
    assert (complete / "demo_sparse.md").exists()
    runs = (complete / "runs.csv").read_text()
    assert "partial" not in runs and "demo_tabular" in runs and "demo_mnist" in runs


def test_partial_and_missing_demo_runs_are_flagged_and_every_suggested_command_composes(tmp_path):
    root = write_demo(tmp_path / "multirun", seeds_of={("demo_mnist", "mnist_bandit", "tpo"): 4},
                      skip=(("demo_tabular", "tabular_multi", "pg"), ("demo_sparse", "token_reversal", "dg")))
    out = tmp_path / "report"
    write_report([root], out, resamples=200)
    mnist = (out / "demo_mnist_bandit.caption.md").read_text()
    assert "| partial (4/8 seeds) |" in mnist and "† marks a partial line" in mnist
    assert "partial" in (out / "runs.csv").read_text()
    commands = json.loads((out / "missing.json").read_text())
    assert "python -m harness -m experiment=demo_mnist algorithm=tpo seeds=4 seed_offset=4" in commands
    assert "python -m harness -m experiment=demo_tabular algorithm=pg task=tabular_multi" in commands
    assert any("experiment=demo_sparse algorithm=dg" in command for command in commands)
    for command in commands:
        cfg = compose_config(_overrides(command))  # raises on an unknown preset or override
        preset = next(word.split("=", 1)[1] for word in _overrides(command) if word.startswith("experiment="))
        assert cfg.experiment_name == preset and (preset, cfg.task.name) in {
            (name, task) for name, (tasks, _) in DEMO.items() for task in tasks}


def test_a_presets_budget_follows_the_task_it_sweeps():
    """demo_tabular sweeps both bandits: a multi-context run is due 1,000 steps, a single-context one 150."""
    assert tables.task_budget("demo_tabular", "tabular_multi") == (20, 1000)
    assert tables.task_budget("demo_tabular", "tabular_single") == (20, 150)
    assert tables.task_budget("demo_mnist", "mnist_bandit") is None  # not swept: the preset's own budget
    assert tables.preset_budget("demo_mnist") == (8, 3000)
