"""The report turns run directories into tables and figures without averaging in failed or partial runs."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd

from conftest import run_config
from harness.report import load_runs, mechanism_table, write_report


def test_report_tables_figures_and_flags(tmp_path):
    sweep = tmp_path / "sweep"
    for algorithm, seeds in (("tpo", 3), ("pg", 3), ("dg", 2)):
        run_config(["task=tabular_single", f"algorithm={algorithm}", f"seeds={seeds}", "trainer.steps=40"],
                   sweep / algorithm)
    (sweep / "ppo").mkdir()
    (sweep / "ppo" / "summary.json").write_text(json.dumps(
        {"status": "failed", "task": "tabular_single", "algorithm": "ppo", "error": "ConfigError: ..."}))

    table = write_report([sweep], tmp_path / "out").set_index("algorithm")
    metrics = pd.read_csv(sweep / "tpo" / "metrics.csv")
    last = metrics[metrics.step == 39]["error"].to_numpy()
    assert table.loc["tpo", "final error % (mean ± s.e.)"] == f"{100 * last.mean():.3g} ± {100 * last.std() / np.sqrt(3):.2g}"
    assert table.loc["dg", "flags"] == "partial"  # fewer seeds than its siblings
    assert table.loc["ppo", "flags"] == "failed"
    assert table.loc["pg", "flags"] == ""
    for name in ("README.md", "default_tabular_single.csv", "default_tabular_single.png", "default_tabular_single.pdf"):
        assert (tmp_path / "out" / name).exists()
    runs, curves = load_runs([sweep])
    assert len(runs) == 4 and set(curves.algorithm) == {"tpo", "pg", "dg"}


def test_mechanism_table_averages_seeds_at_step_2000():
    curves = pd.DataFrame({
        "algorithm": ["tpo"] * 4, "metric": ["mech_surplus_bin3"] * 3 + ["error"], "step": [2000, 2000, 1800, 2000],
        "seed": [0, 1, 0, 0], "value": [0.07, 0.09, 5.0, 0.1]})
    table = mechanism_table(curves)
    assert len(table) == 1
    row = table.iloc[0]
    assert np.isclose(row.surplus, 0.08) and np.isclose(row.se, 0.01 / np.sqrt(2)) and row.seeds == 2
