"""Golden files for every paper table, built from synthetic run directories with known values.

Every table of ``specs.TABLES`` gets 3 seeds per cell (expected budget 3 seeds × 600 steps; MNIST 2,400), with
special cells: missing, partial (fewer seeds), failed, interrupted, a conflicting configuration, a seed in two
runs, a shorter duplicate run and a cell whose seeds come from two runs.
``UPDATE_GOLDEN=1 pytest tests/test_report_golden.py`` rewrites tests/golden/ (inspect the diff by eye); the
hand-computed assertions below pin a few numbers independently of the golden files.

The goldens were written on one machine and are compared as text (markdown) and within rtol 1e-9 (csv) on every
machine: the synthetic values are rounded and the report's arithmetic is float64 numpy, whose last-bit differences
between CPUs do not reach the rendered digits. make test reruns this module under each emulated other CPU
(tests/cpu_emulation.py) to keep it so.
"""

from __future__ import annotations

import functools
import json
import os
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.report import tables
from harness.report.build import write_report
from harness.report.load import load_runs
from harness.report.specs import TABLES
from harness.report.synthetic import make_config, write_run
from harness.report.tables import Report

pytestmark = pytest.mark.cross_cpu

GOLDEN = Path(__file__).parent / "golden"
SEEDS = 3
STEPS = {"fig4_mnist": np.arange(0, 2400, 200)}
DEFAULT_STEPS = np.arange(0, 600, 50)
SPECS = TABLES


def synthetic_budget(preset: str) -> tuple[int, int]:
    """What the synthetic runs of a preset are: 3 seeds × 600 steps (MNIST 2,400), standing in for its preset's."""
    return SEEDS, int(STEPS.get(preset, DEFAULT_STEPS)[-1]) + 50

MISSING = ("table1_vocab_sweep", "algorithm.name=ppo task.V=16")
PARTIAL = ("table1_vocab_sweep", "algorithm.name=dg task.V=8")  # 2 of 3 seeds
FAILED = ("table3_terminal", "algorithm.name=ppo task.match=interactions task.H=10")  # single-sample: no alike runs
INTERRUPTED = ("table2_variations", "task.reward=sequential task.target=flip algorithm.name=ppo")
CONFLICT = ("fig13_masking", "task.K=32 algorithm.name=grpo_masked")  # a second run with another beta
SHORTER = ("table5_eta_sweep", "algorithm.name=tpo algorithm.eta=4")  # plus an older 100-step smoke run
MERGED = ("fig12_k_sweep", "algorithm.name=grpo task.K=64")  # seeds 0-1 and seed 2 in two runs
DUPLICATED = ("fig12_k_sweep", "algorithm.name=tpo task.K=64")  # seeds 0-2, then seed 2 again in a second run


def values(name: str, seeds: int, steps: np.ndarray, mnist: bool) -> dict[str, np.ndarray]:
    """Deterministic curves per cell: error decays at a cell-specific rate to a cell-specific floor."""
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    rate, floor = rng.uniform(0.5, 2.0), rng.choice([0.0, 0.002, 0.005, 0.03, 0.97])
    t = np.arange(len(steps))
    error = floor + (1 - floor) * np.exp(-rate * t) * rng.uniform(0.5, 1.0, (seeds, 1))
    error = np.round(np.clip(error + rng.normal(0, 0.001, (seeds, len(t))), 0, 1), 4)
    out = {"error": error}
    if mnist:
        for b in range(4):
            out[f"mech_surplus_bin{b}"] = np.round(rng.normal(0.02 * b, 0.01, (seeds, len(t))), 5)
    else:  # drawn after the error, which they leave as it was
        out["frac_zero_var"] = (rng.uniform(size=(seeds, len(t))) < 0.3).astype(float)
        for part in ("update_muon", "update_adam"):
            out[part] = np.round(rng.uniform(0.01, 0.03, (seeds, len(t))), 4)
        # the LLM tables' metrics: the score of the training rollouts and a held-out success logged every 4 steps
        out["reward_mean"] = np.round(1 - error, 4)
        held_out = np.round(np.clip(1 - error + rng.normal(0, 0.05, (seeds, len(t))), 0, 1), 4)
        out["test_accuracy"] = np.where((t % 4 == 0) | (t == t[-1]), held_out, np.nan)
    return out


def run_keys() -> dict[tuple[str, str], tuple[dict, str, dict]]:
    """Every distinct run the tables ask for, (experiment, config key) → (the preset that runs it, the config it
    records): a cell another preset's runs serve (``SHARED_RUNS``; the preset its report command names) is written
    once, under that preset, with that preset's values of every key a table names, as its real runs hold them:
    (experiment, key text) → (key, owner, recorded key)."""
    cells = []
    for spec in SPECS.values():
        for _, _, key in spec.cells():
            key = {k: v for k, v in key.items() if k != "metric"}
            experiment = key.pop("experiment", spec.preset)
            cells.append((tables._preset_of(tables.command(experiment, key)), experiment, key))
    keys, written = {}, set()
    for owner, experiment, key in sorted(cells, key=lambda cell: cell[0] != cell[1]):  # as its owner names it
        one = tables.one_configuration(experiment, key)
        recorded = {**preset_values(owner), **{k: v for k, v in one.items()
                                               if k not in tables._left_at_default(owner, one)}}
        if (owner, frozenset(recorded.items())) not in written:
            written.add((owner, frozenset(recorded.items())))
            keys[(experiment, tables.key_text(key))] = (key, owner, recorded)
    return keys


@functools.cache
def preset_values(preset: str) -> dict:
    """The preset's value of every key a table's cells name that it sets (a sweep of one value included)."""
    from omegaconf import OmegaConf

    cfg = tables.preset_config(preset)
    if cfg is None:
        return {}
    sweep = {name: str(values).split(",") for name, values in cfg.hydra.sweeper.params.items()}
    named = {name for spec in SPECS.values() for _, _, key in spec.cells() for name in key} - {
        "experiment", "metric", "algorithm.name"}
    values = {}
    for name in sorted(named):
        swept = sweep.get(tables.GROUP_CHOICE.get(name, name))
        value = (tables._number(swept[0]) if len(swept) == 1 else None) if swept else OmegaConf.select(cfg, name)
        if value is not None:
            values[name] = value
    return values


def write_cell(root: Path, experiment: str, key: dict, suffix: str = "", seeds: int = SEEDS, offset: int = 0,
          owner: str = "", recorded: dict | None = None, **kwargs) -> Path:
    """A cell's run, in a folder named by its cell (``suffix`` for a second run of it): the same name whatever the
    order of the tables, so a table added to a preset changes no other golden. ``owner`` and ``recorded``: the
    preset that runs it and the config keys it records (``run_keys``)."""
    mnist = experiment == "fig4_mnist"
    steps = STEPS.get(experiment, DEFAULT_STEPS)
    configured = kwargs.pop("configured", int(steps[-1]) + 50)
    params = {k: v for k, v in (recorded or key).items() if k != "algorithm.name"} | kwargs.pop("params", {})
    config = make_config(owner or experiment, "mnist_bandit" if mnist else "token_reversal", key["algorithm.name"],
                         seeds, configured, seed_offset=offset, **params)
    data = values(f"{experiment} {tables.key_text(key)}", SEEDS, steps, mnist)
    data = {m: v[offset:offset + seeds] for m, v in data.items()}
    logged = kwargs.pop("logged", len(steps))
    data = {m: v[:, :logged] for m, v in data.items()}
    folder = f"run-{zlib.crc32(f'{experiment} {tables.key_text(key)}'.encode()):08x}{suffix}"
    return write_run(root / experiment / folder, config, data, steps=steps[:logged], **kwargs)


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("golden") / "runs"
    for (experiment, text), (key, owner, recorded) in run_keys().items():
        cell = (experiment, text)
        write = functools.partial(write_cell, owner=owner, recorded=recorded)
        if cell == MISSING:
            continue
        if cell == PARTIAL:
            write(root, experiment, key, seeds=2)
        elif cell == FAILED:
            write(root, experiment, key, status="failed")
        elif cell == INTERRUPTED:
            write(root, experiment, key, status="interrupted", logged=6)
        elif cell == MERGED:
            write(root, experiment, key, seeds=2)
            write(root, experiment, key, "-b", seeds=1, offset=2)
        else:
            run_dir = write(root, experiment, key)
            if cell == CONFLICT:
                write(root, experiment, key, "-b", params={"algorithm.beta": 0.0}, seeds=2)
            if cell == DUPLICATED:
                write(root, experiment, key, "-b", seeds=1, offset=2)
            if cell == SHORTER:
                smoke = write(root, experiment, key, "-smoke", configured=100, logged=2)
                os.utime(smoke / "summary.json", (0, 0))  # older than the full run
                os.utime(run_dir / "summary.json")
    return root


@pytest.fixture(scope="module")
def report(sweep, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("golden_out")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "preset_budget", synthetic_budget)
        write_report([sweep], out, tables="all", figures="none", table_specs=SPECS, resamples=500)
    return out


def _normalised_csv(path: Path, sweep: Path) -> pd.DataFrame:
    frame = pd.read_csv(path, keep_default_na=False, na_values=[""])
    frame["runs"] = frame["runs"].fillna("").str.replace(str(sweep.parent), "<tmp>", regex=False)
    return frame


@pytest.mark.parametrize("name", list(TABLES))
def test_table_matches_golden(name, report, sweep):
    produced_md = (report / f"{name}.md").read_text()
    produced_csv = _normalised_csv(report / f"{name}.csv", sweep)
    if os.environ.get("UPDATE_GOLDEN"):
        GOLDEN.mkdir(exist_ok=True)
        (GOLDEN / f"{name}.md").write_text(produced_md)
        produced_csv.to_csv(GOLDEN / f"{name}.csv", index=False)
    assert produced_md == (GOLDEN / f"{name}.md").read_text()
    expected = pd.read_csv(GOLDEN / f"{name}.csv", keep_default_na=False, na_values=[""])
    assert list(produced_csv.columns) == list(expected.columns)
    for column in expected.columns:
        if pd.api.types.is_numeric_dtype(expected[column]):
            np.testing.assert_allclose(produced_csv[column].astype(float), expected[column].astype(float),
                                       rtol=1e-9, equal_nan=True, err_msg=column)
        else:
            assert produced_csv[column].fillna("").tolist() == expected[column].fillna("").tolist(), column


def cells(report: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(report / f"{name}.csv", keep_default_na=False, na_values=[""], dtype={"paper": str}).set_index(
        ["cell", "stat"])


def test_hand_computed_steps_to_final_and_paired(report):
    t1 = cells(report, "table1")
    tpo = values("table1_vocab_sweep algorithm.name=tpo_token task.V=8", SEEDS, DEFAULT_STEPS, False)["error"]
    mean = tpo.mean(0)
    first = next((DEFAULT_STEPS[i] for i in range(len(mean)) if mean[i] < 0.01), np.inf)
    assert t1.loc[("algorithm.name=tpo_token task.V=8", "steps_to_0.01"), "ours"] == first == 150
    assert t1.loc[("algorithm.name=tpo_token task.V=8", "steps_to_0.01"), "paper"] == "103"

    grpo = values("table1_vocab_sweep algorithm.name=grpo_token task.V=8", SEEDS, DEFAULT_STEPS, False)["error"]
    grpo_mean = grpo.mean(0)
    grpo_first = next((DEFAULT_STEPS[i] for i in range(len(grpo_mean)) if grpo_mean[i] < 0.01), np.inf)
    row = t1.loc[("algorithm.name=grpo_token task.V=8", "steps_to_0.01")]
    assert row["diff"] == grpo_first - first == 200
    def first_per_seed(x):
        return [next((DEFAULT_STEPS[i] for i in range(len(seed)) if seed[i] < 0.01), np.inf) for seed in x]

    wins = [(g < t) + 0.5 * (g == t) for g, t in zip(first_per_seed(grpo), first_per_seed(tpo))]
    assert row["p_better"] == pytest.approx(np.mean(wins))

    t3 = cells(report, "table3")
    key = "algorithm.name=tpo task.match=prompts task.H=7"
    last = values(f"table3_terminal {key}", SEEDS, DEFAULT_STEPS, False)["error"][:, -1]
    assert t3.loc[(key, "final"), "ours"] == pytest.approx(last.mean())
    assert t3.loc[(key, "final"), "se"] == pytest.approx(last.std() / np.sqrt(SEEDS))
    assert t3.loc[(key, "final"), "paper"] == "6.9"

    # beyond_amplification_noise pairs every cell with the paper's σ without noise (two keys name the reference)
    noise = cells(report, "beyond_amplification_noise")
    floor = values("beyond_amplification_floor algorithm.name=tpo task.reward_noise=0.01", SEEDS, DEFAULT_STEPS,
                   False)["error"][:, -1]
    clean = values("beyond_amplification algorithm.name=tpo task.reward_noise=0", SEEDS, DEFAULT_STEPS,
                   False)["error"][:, -1]
    row = noise.loc[("algorithm.name=tpo experiment=beyond_amplification_floor task.reward_noise=0.01", "final")]
    assert row["diff"] == pytest.approx(floor.mean() - clean.mean())
    assert row["p_better"] == pytest.approx(np.mean((floor < clean) + 0.5 * (floor == clean)))

    fig4b = cells(report, "fig4b")
    surplus = values("fig4_mnist algorithm.name=tpo", SEEDS, STEPS["fig4_mnist"], True)["mech_surplus_bin3"]
    assert fig4b.loc[("algorithm.name=tpo metric=mech_surplus_bin3", "at_step_2000"), "ours"] == pytest.approx(
        surplus[:, list(STEPS["fig4_mnist"]).index(2000)].mean())


def test_missing_partial_failed_interrupted_conflict_and_merged_cells(report):
    t1 = cells(report, "table1")
    missing = t1.loc[("algorithm.name=ppo task.V=16", "steps_to_0.01")]
    assert missing["status"] == "missing" and np.isnan(missing["ours"])
    assert missing["command"] == "python -m harness -m experiment=table1_vocab_sweep algorithm=ppo task.V=16"
    partial = t1.loc[("algorithm.name=dg task.V=8", "steps_to_0.01")]
    assert partial["status"] == "partial" and "2/3 seeds" in partial["flags"] and partial["seeds"] == 2
    assert partial["command"].endswith("algorithm=dg task.V=8 seeds=1 seed_offset=2")  # the run that completes it
    failed = cells(report, "table3").loc[(FAILED[1], "final")]
    assert failed["status"] == "failed" and "synthetic failure" in failed["flags"]
    interrupted = cells(report, "table2").loc[(INTERRUPTED[1], "steps_to_0.01")]
    assert interrupted["status"] == "partial" and "interrupted at step 250 of 600" in interrupted["flags"]
    assert interrupted["last_step"] == 250
    assert "seed_offset" not in interrupted["command"]  # its seeds are not done: a full run reruns them
    conflict = cells(report, "fig13").loc[(CONFLICT[1], "final")]  # two configurations: refused, no number
    assert conflict["status"] == "conflict" and np.isnan(conflict["ours"]) and "algorithm.beta" in conflict["flags"]
    duplicated = cells(report, "fig12").loc[(DUPLICATED[1], "final")]  # a seed in two runs: refused, no number
    assert duplicated["status"] == "conflict" and np.isnan(duplicated["ours"])
    assert "seed 2 is in more than one run" in duplicated["flags"]
    shorter = cells(report, "table5").loc[("algorithm.name=tpo algorithm.eta=4", "final")]
    assert shorter["status"] == "ok" and "ignored 1 shorter run" in shorter["flags"] and shorter["last_step"] == 550
    merged = cells(report, "fig12").loc[(MERGED[1], "final")]
    assert merged["status"] == "ok" and merged["seeds"] == 3 and len(merged["runs"].split()) == 2
    text = (report / "README.md").read_text()
    assert "python -m harness -m experiment=table1_vocab_sweep algorithm=ppo task.V=16" in text
    assert "python -m harness -m experiment=table1_vocab_sweep algorithm=dg task.V=8" in text


def test_table3_cells_get_per_seed_dynamics_of_ours_alone(report):
    """Table 3's cells have no per-seed data from the paper: each cell with runs gets ours, from its own seeds."""
    dynamics = json.loads((report / "table3_dynamics.json").read_text())
    assert len(dynamics) == 8 * 5 - 1 and "PPO, Interact., H=10" not in dynamics  # the failed cell
    tpo = dynamics["TPO, Prompt, H=7"]
    error = values("table3_terminal algorithm.name=tpo task.match=prompts task.H=7", SEEDS, DEFAULT_STEPS,
                   False)["error"]
    assert tpo["seeds"] == SEEDS and tpo["solved"] == int((error < 0.02).any(axis=1).sum())
    assert tpo["mean_at"]["500"] == pytest.approx(error[:, list(DEFAULT_STEPS).index(500)].mean())
    assert tpo["final_per_seed"] == pytest.approx(list(error[:, -1]))
    text = (report / "README.md").read_text()
    assert "### Table 3 — per-seed dynamics\n" in text and "| TPO, Prompt, H=7 | ours | 3 |" in text
    assert "### Fig 1b — per-seed dynamics against the paper's seeds" in text
    fig1b = text[text.index("### Fig 1b — per-seed dynamics"):]
    rows = [line.split(" | ")[:2] for line in fig1b.splitlines() if line.startswith("| TPO | ")]
    assert rows[:2] == [["| TPO", "ours"], ["| TPO", "paper"]]  # ours beside the paper's own seeds
    assert "Ours against the paper's seeds, two-sided p" in fig1b


def test_bootstrap_intervals_are_reproducible(sweep):
    runs, curves = load_runs([sweep], metrics=["error"])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "preset_budget", synthetic_budget)
        first = Report(runs, curves, resamples=300, seed=7).evaluate(SPECS["table3"])
        again = Report(runs, curves, resamples=300, seed=7).evaluate(SPECS["table3"])
        other = Report(runs, curves, resamples=300, seed=8).evaluate(SPECS["table3"])
    pd.testing.assert_frame_equal(first, again)
    np.testing.assert_array_equal(first.ours, other.ours)  # point values do not depend on the bootstrap


def test_every_figure_renders_from_the_synthetic_sweep(sweep, tmp_path):
    """Each paper figure whose preset has runs is drawn (PNG + PDF) with its provenance caption."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tables, "preset_budget", synthetic_budget)
        write_report([sweep], tmp_path, tables="none", figures="auto", table_specs=SPECS, resamples=50)
    drawn = sorted(p.stem for p in tmp_path.glob("fig*.png"))
    assert drawn, "no figure drawn"
    for stem in drawn:
        assert (tmp_path / f"{stem}.pdf").exists() and (tmp_path / f"{stem}.caption.md").exists()
        assert b"/CreationDate" not in (tmp_path / f"{stem}.pdf").read_bytes()  # regenerated, the same bytes
    assert {"fig1", "fig4", "fig12", "fig13", "fig15"} <= set(drawn)


def test_a_partial_cells_command_runs_each_missing_seed_range_once():
    base = "python -m harness -m experiment=table3_terminal algorithm=tpo task.H=7"
    key = {"algorithm.name": "tpo", "task.H": 7}
    assert tables.command("table3_terminal", key, have=[0, 3, 4], seeds=7) == (
        f"{base} seeds=2 seed_offset=1; {base} seeds=2 seed_offset=5")
    assert tables.command("table3_terminal", key, have=[], seeds=7) == base  # nothing there: the whole sweep
    assert tables.command("table3_terminal", key, have=range(7), seeds=7) == base  # all seeds: a rerun (shorter runs)
    assert tables.command("table3_terminal", {"task.H": 7, "algorithm.name": "tpo"}) == base  # one override order


def test_missing_commands_list_each_seed_once_across_cells_over_the_same_runs():
    """Table 3 wants 20 seeds of a cell whose runs beyond_relapse reads wanting 10: one list of ranges, the union."""
    base = "python -m harness -m experiment=table3_terminal algorithm=tpo task.H=7"
    key = {"algorithm.name": "tpo", "task.H": 7}
    twenty, ten = (tables.command("table3_terminal", key, have=range(5), seeds=n) for n in (20, 10))
    assert tables.merge_commands([ten, twenty, base]) == [f"{base} seeds=15 seed_offset=5"]
    gaps = tables.command("table3_terminal", key, have=[0, 3], seeds=5)
    assert tables.merge_commands([gaps, "python -m harness -m experiment=fig4_mnist"]) == [
        f"{base} seeds=2 seed_offset=1", f"{base} seeds=1 seed_offset=4", "python -m harness -m experiment=fig4_mnist"]
