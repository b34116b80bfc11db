"""The campaign runner: a queue of cells in seed ranges, exported and reported as they finish, resumable after a
kill -9 at any moment with the same numbers as an uninterrupted campaign."""

from __future__ import annotations

import gzip
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from conftest import ROOT
from harness import campaign
from harness.campaign import cells as campaign_cells
from harness.campaign import cli as campaign_cli
from harness.campaign import exports as campaign_exports
from harness.campaign import local as campaign_local
from harness.campaign import reports as campaign_reports
from harness.campaign import runner as campaign_runner
from harness.campaign import text as campaign_text
from harness.report.synthetic import make_config, write_run
from harness.rundir import outputs

STEPS = 2000  # ~1 ms each: a kill 0.3 s after the first checkpoint (step 50) lands seconds before a run's end
QUEUE = {"chunk": 20, "cells": [
    {"priority": "P1", "preset": "fig3_tabular_multi", "name": name, "seeds": 40, "cost": 0.001,
     "overrides": [f"algorithm={name}", f"task.steps={STEPS}", "task.checkpoint_every=50"]}
    for name in ("tpo", "grpo")]}


def start(tmp_path: Path, folder: str) -> tuple[subprocess.Popen, Path]:
    queue = tmp_path / "queue.yaml"
    queue.write_text(yaml.safe_dump(QUEUE))
    root = tmp_path / folder
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness.campaign", str(queue), "--jobs", "2", "--work",
                                str(root / "work"), "--results", str(root / "results")], cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    return process, root


def kill_all(runner: int) -> None:
    """SIGKILL the runner and every run it started, mid-write or not (each run is a session of its own): the runs
    frozen first, so that the runner's death (``die_with_parent``'s SIGTERM) cannot let one write its summary."""
    runs = [int(stat.parent.name) for stat in Path("/proc").glob("[0-9]*/stat")
            if _parent(stat) == runner]
    for run in runs:
        os.kill(run, signal.SIGSTOP)
    os.killpg(runner, signal.SIGKILL)
    for run in runs:
        os.kill(run, signal.SIGKILL)


def _parent(stat: Path) -> int | None:
    try:
        return int(stat.read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):  # ended meanwhile
        return None


def metrics(root: Path) -> dict[str, str]:
    return {str(path.relative_to(root)): gzip.decompress(path.read_bytes()).decode()
            for path in sorted((root / "results" / "runs").rglob("metrics.csv.gz"))}


def test_a_campaign_killed_at_any_moment_finishes_with_the_same_numbers(tmp_path):
    process, full = start(tmp_path, "full")
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    names = sorted(metrics(full))
    assert names == [f"results/runs/fig3_tabular_multi/{cell}/seeds{a}-{a + 19}/metrics.csv.gz"
                     for cell in ("grpo", "tpo") for a in (0, 20)]
    report = (full / "results" / "fig3_tabular_multi" / "README.md").read_text()
    assert "fig3_tabular_multi" in report
    exported = metrics(full)
    shutil.rmtree(full / "results" / "runs" / "fig3_tabular_multi" / "grpo")  # as if stopped before its export
    only_export = subprocess.run([sys.executable, "-m", "harness.campaign", str(tmp_path / "queue.yaml"), "--hours",
                                  "0", "--work", str(full / "work"), "--results", str(full / "results")],
                                 cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
                                 text=True, timeout=300)
    assert only_export.returncode == 0 and "start" not in only_export.stdout
    assert only_export.stdout.count("exported fig3_tabular_multi/grpo") == 2 and metrics(full) == exported

    process, killed = start(tmp_path, "killed")
    deadline = time.time() + 300
    while time.time() < deadline and not list((killed / "work").rglob("checkpoint.pt")):
        time.sleep(0.05)
    time.sleep(0.3)
    kill_all(process.pid)
    process.wait()
    interrupted = [p.parent for p in (killed / "work").rglob("checkpoint.pt")
                   if not (p.parent / "summary.json").exists()]
    assert interrupted, "the kill landed after the runs finished"
    dry = subprocess.run([sys.executable, "-m", "harness.campaign", str(tmp_path / "queue.yaml"), "--dry-run",
                          "--work", str(killed / "work"), "--results", str(killed / "results")], cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert "resumable" in dry.stdout and "runs to go" in dry.stdout
    process, _ = start(tmp_path, "killed")
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output
    assert metrics(killed) == metrics(full)
    resumed = [json.loads((killed / "results" / "runs" / p.relative_to(killed / "work") / "summary.json")
                          .read_text())["resumed_from"] for p in interrupted]
    assert all(len(steps) == 1 and 0 < steps[0] < STEPS for steps in resumed), (interrupted, resumed)

    again = subprocess.run([sys.executable, "-m", "harness.campaign", str(tmp_path / "queue.yaml"), "--work",
                            str(killed / "work"), "--results", str(killed / "results")], cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "0 runs to go" in again.stdout


def record_run(folder: Path, cell: dict, summary: dict) -> None:
    """An exported run of ``cell``'s configuration: ``summary`` (its seeds and steps), the identity.json the cell's
    composed config gives for them, and a metrics.csv.gz."""
    identity = campaign.cell_identity(cell["preset"], tuple(cell["overrides"]))
    identity = {**identity, "seeds": len(summary["seeds"]), "seed_offset": min(summary["seeds"]),
                "trainer": {**identity["trainer"], "steps": summary["steps"]}}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "identity.json").write_text(json.dumps({"config": identity}))
    (folder / "summary.json").write_text(json.dumps(summary))
    rows = "".join(f"0,{seed},0.5\n" for seed in summary["seeds"])  # a row for each seed, as a run writes
    (folder / "metrics.csv.gz").write_bytes(gzip.compress(f"step,seed,error\n{rows}".encode()))


def test_seeds_already_exported_are_not_run_again(tmp_path):
    results = tmp_path / "results"
    earlier = results / "runs" / "fig3_tabular_multi" / "tpo"  # an older run of seeds 0-3, any folder layout
    record_run(earlier, QUEUE["cells"][0], {"status": "completed", "seeds": [0, 1, 2, 3], "steps": STEPS,
                                            "cpu_seconds": 24.0})
    shorter = earlier / "seeds5-6"  # a finished run of fewer episodes than the cell's: its seeds run again
    record_run(shorter, QUEUE["cells"][0], {"status": "completed", "seeds": [5, 6], "steps": STEPS // 2,
                                            "cpu_seconds": 3.0})
    jobs, _ = campaign.plan({"chunk": 5, "cells": [dict(QUEUE["cells"][0], seeds=12)]}, results)
    assert [(job.offset, job.seeds, state) for job, state in jobs] == [
        (0, 4, "done: seeds 0-3"), (4, 1, "to run"), (5, 5, "to run"), (10, 2, "to run")]
    assert jobs[1][0].name == "seeds4" and jobs[2][0].name == "seeds5-9"
    # measured on the cell's finished runs, short ones included (the cost of an episode), not the queue's estimate
    assert jobs[1][0].cost == (24.0 + 3.0) / (4 * STEPS + 2 * (STEPS // 2))


def test_an_unknown_queue_lists_the_valid_ones(capsys):
    try:
        campaign.main(["nosuch", "--dry-run"])
    except SystemExit as error:
        assert ("campaign queue 'nosuch' not found; valid choices: beyond, failure_modes, llm_cpu, llm_gpu, paper, "
                "section4_gpu" in str(error))
    else:
        raise AssertionError("an unknown queue was accepted")


def test_an_estimate_is_calibrated_by_the_cells_that_say_most_about_this_cpu_and_its_priority():
    ratios = [("F1", True, 0.5), ("F1", False, 0.3), ("F2", False, 0.2), ("F3", True, 0.9), ("F3", True, 0.7)]
    assert campaign.calibrate(ratios, "F1") == (0.5, "F1's cells measured here")
    assert campaign.calibrate(ratios, "F2") == (0.2, "F2's measured cells")
    assert campaign.calibrate(ratios, "F4") == (0.7, "cells measured here")  # median of 0.5, 0.9, 0.7
    assert campaign.calibrate([("F2", False, 0.2), ("F2", False, 0.4)], "F4") == (
        pytest.approx(0.3), "this queue's measured cells")
    assert campaign.calibrate([], "F1") is None


@pytest.mark.parametrize("change, message", [
    (lambda cells: cells[1].pop("cost"), "queue.yaml: cells[1] has no cost; a cell needs priority, preset, name, "),
    (lambda cells: cells[0].update(cost=0), "queue.yaml: cells[0].cost=0 is not valid; expected CPU-seconds per "),
    (lambda cells: cells[1].update(name="tpo"), "queue.yaml: cells[1] repeats the cell fig3_tabular_multi/tpo; "),
    (lambda cells: cells.append(dict(cells[0], priority="P2")),  # listed again without more seeds
     "queue.yaml: cells[2] repeats the cell fig3_tabular_multi/tpo; a cell listed again takes it further: the same "
     "overrides and more seeds than its 40"),
    (lambda cells: cells.append(dict(cells[0], seeds=50, overrides=[*cells[0]["overrides"], "task.N=10"])),
     "queue.yaml: cells[2] repeats the cell fig3_tabular_multi/tpo; "),
    (lambda cells: cells[1].update(like="fig3_tabular_multi/nosuch"),
     "queue.yaml: cells[1].like='fig3_tabular_multi/nosuch' is not a cell of the queue; expected <preset>/<cell>"),
    (lambda cells: cells[1].update(like="tpo"), "queue.yaml: cells[1].like='tpo' is not valid; expected "
                                                "<preset>/<cell>, a cell of the queue"),
    (lambda cells: cells[1].update(scale=2), "queue.yaml: cells[1].scale is for a cell with like: <preset>/<cell>"),
    (lambda cells: cells[1].update(like="fig3_tabular_multi/tpo", scale=0),
     "queue.yaml: cells[1].scale=0 is not valid; expected a number > 0"),
])
def test_a_queue_with_a_bad_cell_is_refused_before_anything_runs(tmp_path, change, message):
    """A cell without an estimate, with a zero one (it would divide the calibration), listed twice (it would count
    twice in it, and run twice) or again with nothing more to run, or estimated by a cell that is not there."""
    queue = {"chunk": 5, "cells": [dict(cell) for cell in QUEUE["cells"]]}
    change(queue["cells"])
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(queue))
    with pytest.raises(SystemExit, match="^Error: " + re.escape(message)):
        campaign.main([str(path), "--dry-run", "--results", str(tmp_path / "results")])
    assert not (tmp_path / "results").exists()


def sweep_of(preset: str) -> dict[str, list[str]]:
    """A preset's sweep read here from its file, independently of the harness."""
    params = yaml.safe_load((ROOT / "conf" / "experiment" / f"{preset}.yaml").read_text())["hydra"]["sweeper"]["params"]
    return {axis: str(values).split(",") for axis, values in params.items()}


TABLE3_METHODS = sweep_of("table3_terminal")["algorithm"]


def test_a_grid_entry_is_the_points_of_its_presets_sweep_it_picks_named_by_their_values(tmp_path):
    """A grid entry expands in the preset's axis order (first slowest, values in the entry's order), sets every axis
    of the sweep, names a cell by the axes the preset sweeps over, and takes per-axis costs at each point. Bugs
    caught: the product taken in the entry's key order, a one-valued axis (``algorithm: tpo`` of Table 5) named,
    the prefix dropped (``8_tpo``), the entry's own overrides placed first, a per-axis cost read at another axis."""
    sweep = sweep_of("table3_terminal")
    assert list(sweep) == ["task.match", "task.H", "algorithm"]
    entry = {"priority": "P1", "preset": "table3_terminal", "seeds": 20, "overrides": ["task.steps=10"],
             "grid": {"algorithm": ["dg", "tpo"], "task.H": [9, 8], "task.match": "prompts"},
             "cost": {"algorithm": {"tpo": 0.4, "dg": 0.1}}}
    cells = campaign.expand(entry, "queue.yaml: cells[0]")
    expected = [(h, a) for h in ("9", "8") for a in ("dg", "tpo")]
    assert [cell["name"] for cell in cells] == [f"prompts_h{h}_{a}" for h, a in expected]
    assert [cell["overrides"] for cell in cells] == [
        ["task.match=prompts", f"task.H={h}", f"algorithm={a}", "task.steps=10"] for h, a in expected]
    assert [cell["cost"] for cell in cells] == [{"dg": 0.1, "tpo": 0.4}[a] for _, a in expected]
    assert all("grid" not in cell and cell["seeds"] == 20 and cell["priority"] == "P1" for cell in cells)
    table5 = campaign.expand({"priority": "P8", "preset": "table5_eta_sweep", "seeds": 10, "cost": 0.45, "grid": {}},
                             "queue.yaml: cells[0]")
    assert sweep_of("table5_eta_sweep")["algorithm"] == ["tpo"]  # one value: set, not named
    assert [(cell["name"], cell["overrides"]) for cell in table5] == [
        (f"eta{float(eta):g}", ["algorithm=tpo", f"algorithm.eta={eta}"]) for eta in sweep_of("table5_eta_sweep")[
            "algorithm.eta"]]
    assert [cell["name"] for cell in table5][:3] == ["eta0.25", "eta0.5", "eta1"]


@pytest.mark.parametrize("change, message", [
    ({"grid": {"task.N": 3}}, "cells[0].grid.task.N is not an axis of the preset's sweep; valid axes: task.match, "
                              "task.H, algorithm"),
    ({"grid": {"task.H": [8, 11]}}, "cells[0].grid.task.H=11 is not a value of the preset's sweep; valid values: 7, "
                                    "8, 9, 10"),
    ({"grid": {"task.H": 8}, "name": "h8"}, "cells[0].name is for a grid of one point; this grid has 10"),
    ({"grid": {"task.H": 8, "task.match": "prompts"}, "cost": {"algorithm": {TABLE3_METHODS[0]: 0.4}}},
     f"cells[0].cost has no value for algorithm={TABLE3_METHODS[1]}; it needs one per value of algorithm the grid "
     "picks"),
    ({"grid": {"task.H": 8}, "cost": {"task.K": {"8": 0.4}}}, "cells[0].cost={'task.K': {'8': 0.4}} is not valid; "),
    ({"grid": ["task.H=8"]}, "cells[0].grid=['task.H=8'] is not valid; expected a mapping of the preset's sweep axes"),
    ({"preset": "table3", "grid": {}}, "cells[0]: experiment=table3 is not a preset; valid choices: "),
])
def test_a_grid_entry_outside_its_presets_sweep_is_refused_in_one_line(tmp_path, change, message):
    """A queue never restates a preset's values, so a value or an axis the preset does not sweep is a typo: refused
    naming the key and the valid choices, before anything runs."""
    entry = {"priority": "P1", "preset": "table3_terminal", "seeds": 20, "cost": 0.4, **change}
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump({"chunk": 5, "cells": [entry]}))
    with pytest.raises(SystemExit, match="^Error: queue.yaml: " + re.escape(message)):
        campaign.main([str(path), "--dry-run", "--results", str(tmp_path / "results")])
    assert not (tmp_path / "results").exists()


def test_the_paper_queue_picks_points_of_its_presets_and_lists_no_cell_by_hand():
    """Every entry of the paper queue is a grid entry: its cells' values are its presets', by construction."""
    from harness import artefacts

    entries = [entry for _, _, entry in artefacts.queue_entries("paper")]
    assert [index for index, entry in enumerate(entries) if "grid" not in entry] == []
    cells = campaign.load_queue("paper")["cells"]
    assert len(cells) > 2 * len(entries)
    for cell in cells:
        sweep = sweep_of(cell["preset"])
        point = dict(override.split("=", 1) for override in cell["overrides"] if override != "device=cuda")
        assert list(point) == list(sweep) and all(point[axis] in sweep[axis] for axis in sweep), cell


def test_no_two_cells_of_the_paper_queue_run_one_configuration():
    """Two cells whose runs would compute the same numbers (identities equal but for the budget, keys that move
    only rounding, and keys their method does not depend on: ``Task.inert_keys``, a null ``algorithm.epochs`` at
    the number it stands for) are one configuration run twice; a figure reads the other's runs instead (report
    SHARED_RUNS: Section 4's K = 32 cells are Fig 10's). Two kinds are left: Table 2's bag-of-tokens reverse copy
    is Table 1's V = 2, both run before this check; Fig 6's TPO there is Table 5's η = 1, which its table cannot
    read without naming η (its GRPO has none)."""
    owners: dict[str, set[str]] = {}
    for cell in campaign.load_queue("paper")["cells"]:
        what, _ = _what_runs_compute(cell["preset"], cell["overrides"])
        owners.setdefault(what, set()).add(f"{cell['preset']}/{cell['name']}")
    twice = sorted(sorted(cells) for cells in owners.values() if len(cells) > 1)
    assert [[cell.split("/")[0] for cell in pair] for pair in twice] == [
        ["fig6_variations", "table5_eta_sweep"], *[["table1_vocab_sweep", "table2_variations"]] * 4], twice


def _what_runs_compute(preset: str, overrides: list[str]) -> tuple[str, dict]:
    """A composed cell's configuration as the report compares runs (``as_current``: a null ``algorithm.epochs`` at
    the number it stands for), less the budget, the keys that move only rounding and the keys its method does not
    depend on (``Task.inert_keys``), as JSON; and the budget's keys."""
    from algorithms.registry import get_algorithm
    from harness.identity import BUDGET, RESULT_NEUTRAL
    from harness.report.load import as_current, flatten
    from tasks import get_task

    config = as_current(flatten(campaign_cells.cell_identity(preset, tuple(overrides))))
    left_out = {*BUDGET, *RESULT_NEUTRAL,
                *get_task(config["task.name"]).inert_keys(get_algorithm(config["algorithm.name"]))}
    what = json.dumps({key: value for key, value in config.items() if key not in left_out}, sort_keys=True)
    return what, {key: config.get(key) for key in BUDGET}


def _header_commands() -> list[tuple[str, list[str]]]:
    """Every ``python -m harness -m experiment=...`` line of a paper or beyond-the-paper preset's header (the
    commands its comment tells a user to run), as (preset, overrides), less launcher options and comments."""
    commands = []
    for path in sorted((ROOT / "conf" / "experiment").glob("*.yaml")):
        for line in path.read_text().splitlines():
            found = re.match(r"#\s+python -m harness -m experiment=(\S+)(.*)", line)
            assert found or "python -m harness -m" not in line, f"{path.name}: a command this test cannot read: {line}"
            if found and not found[1].startswith("demo_"):
                words = found[2].split("#")[0].split("(")[0].split()
                commands.append((found[1], [word for word in words if not word.startswith(("hydra/", "hydra."))]))
    return commands


def _sweep_jobs(preset: str, words: list[str]) -> list[list[str]]:
    """The jobs of ``python -m harness -m experiment=<preset> <words>`` as Hydra's basic sweeper expands them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    sweep = (yaml.safe_load((ROOT / "conf" / "experiment" / f"{preset}.yaml").read_text()).get("hydra") or {}
             ).get("sweeper", {}).get("params") or {}
    overrides = OverridesParser.create().parse_overrides([*(f"{k}={v}" for k, v in sweep.items()), *words])
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def test_the_header_commands_of_the_presets_run_each_configuration_once():
    """A preset's header command runs its own cells only: a configuration whose runs another preset holds (Fig 8's
    TPO and GRPO are Table 3's; Table 3's H = 10 TPO, GRPO and DG are Fig 1b's; a grouped method's
    interaction-matched cell is its prompt-matched one) run again would give the report two runs of one seed, which
    it refuses to average. Same seeds and budget, same configuration as the queue compares them; the pairs left are
    the queue's (its check says why). And the header commands together run every configuration of every preset's
    sweep (``hydra.sweeper.params``), whichever preset's header runs it."""
    owners: dict[str, list[tuple[str, set[int]]]] = {}
    twice = []
    commands = _header_commands()
    assert {"table3_terminal", "fig8_ablations", "fig12_k_sweep", "fig1b_sparse"} <= {preset for preset, _ in commands}
    for preset, words in commands:
        for job in _sweep_jobs(preset, words):
            what, budget = _what_runs_compute(preset, job)
            what = json.dumps([what, budget["task.steps"]])
            seeds = set(range(budget["seed_offset"] or 0, (budget["seed_offset"] or 0) + budget["seeds"]))
            label = f"{preset} {' '.join(job)}"
            twice += [sorted([label, other]) for other, held in owners.get(what, []) if held & seeds]
            owners.setdefault(what, []).append((label, seeds))
    assert [[label.split()[0] for label in pair] for pair in sorted(twice)] == [
        ["fig6_variations", "table5_eta_sweep"], *[["table1_vocab_sweep", "table2_variations"]] * 4], sorted(twice)
    run = {json.loads(what)[0] for what in owners}
    left_out = [f"{preset} {' '.join(job)}" for preset in sorted({preset for preset, _ in commands})
                for job in _sweep_jobs(preset, []) if _what_runs_compute(preset, job)[0] not in run]
    assert not left_out, left_out


def test_a_cell_listed_again_holds_the_seeds_beyond_its_earlier_listing(tmp_path):
    """A queue brings every cell of a sweep to 10 seeds before any to 30: the later listing runs seeds 10-29 only,
    and a seed done counts once, in the listing that holds it."""
    results = tmp_path / "results"
    record_run(results / "runs" / "fig3_tabular_multi" / "tpo" / "seeds0-4", QUEUE["cells"][0],
               {"status": "completed", "seeds": [0, 1, 2, 3, 4], "steps": STEPS, "cpu_seconds": 5.0})
    record_run(results / "runs" / "fig3_tabular_multi" / "tpo" / "seeds10-14", QUEUE["cells"][0],
               {"status": "completed", "seeds": [10, 11, 12, 13, 14], "steps": STEPS, "cpu_seconds": 5.0})
    cells = [dict(QUEUE["cells"][0], seeds=10), dict(QUEUE["cells"][1], seeds=10),
             dict(QUEUE["cells"][0], priority="P2", seeds=20), dict(QUEUE["cells"][1], priority="P2", seeds=20)]
    jobs, _ = campaign.plan({"chunk": 5, "cells": cells}, results)
    assert [(job.priority, job.cell, job.name, state.split(" (")[0]) for job, state in jobs] == [
        ("P1", "tpo", "seeds0-4", "done: seeds 0-4"), ("P1", "tpo", "seeds5-9", "to run"),
        ("P1", "grpo", "seeds0-4", "to run"), ("P1", "grpo", "seeds5-9", "to run"),
        ("P2", "tpo", "seeds10-14", "done: seeds 10-14"), ("P2", "tpo", "seeds15-19", "to run"),
        ("P2", "grpo", "seeds10-14", "to run"), ("P2", "grpo", "seeds15-19", "to run")]
    jobs, _ = campaign.plan({"chunk": 5, "cells": cells}, results, {"P2"})
    assert [(job.cell, job.name) for job, state in jobs if state.startswith("to run")] == [
        ("tpo", "seeds15-19"), ("grpo", "seeds10-14"), ("grpo", "seeds15-19")]


def test_a_cell_without_runs_is_estimated_by_its_like_cells_measured_cost_times_its_scale(tmp_path):
    """Section 4's sweeps: a K = 64 cell costs twice the K = 32 run measured (not the queue's estimate, however
    calibrated), until it has a run of its own."""
    results = tmp_path / "results"
    record_run(results / "runs" / "fig3_tabular_multi" / "tpo" / "seeds0-1", QUEUE["cells"][0], {
        "status": "completed", "seeds": [0, 1], "steps": STEPS, "cpu_seconds": 2 * STEPS * 3.0,
        "hardware": {"cpu": "CPU A"}})
    cells = [dict(QUEUE["cells"][0], seeds=2, cost=1.0),
             dict(QUEUE["cells"][1], seeds=2, cost=50.0, like="fig3_tabular_multi/tpo", scale=2),
             dict(QUEUE["cells"][1], name="estimated", seeds=2, cost=50.0)]
    jobs, _ = campaign.plan({"chunk": 5, "cells": cells}, results, cpu_model="CPU A")
    assert [(job.cell, job.cost, state) for job, state in jobs if state != "done: seeds 0-1"] == [
        ("grpo", 6.0, "to run (as fig3_tabular_multi/tpo × 2: measured here)"),
        ("estimated", 150.0, "to run (estimate × 3.00, as P1's cells measured here)")]
    record_run(results / "runs" / "fig3_tabular_multi" / "grpo" / "seeds0", QUEUE["cells"][1], {
        "status": "completed", "seeds": [0], "steps": STEPS, "cpu_seconds": STEPS * 1.5, "hardware": {"cpu": "CPU A"}})
    jobs, _ = campaign.plan({"chunk": 5, "cells": cells}, results, cpu_model="CPU A")
    assert [(job.cell, job.cost) for job, state in jobs if state.startswith("to run")] == [
        ("grpo", 1.5), ("estimated", pytest.approx(50.0 * (3.0 + 1.5 / 50.0) / 2))]  # its own, then P1's median


def test_breadth_first_runs_every_cells_first_seeds_before_any_cells_next(tmp_path):
    cells = [dict(QUEUE["cells"][0], seeds=10), dict(QUEUE["cells"][1], seeds=10),
             dict(QUEUE["cells"][0], priority="P2", name="later", seeds=5)]
    jobs = campaign.breadth_first(campaign.plan({"chunk": 5, "cells": cells}, tmp_path)[0])
    assert [(job.priority, job.cell, job.name) for job, _ in jobs] == [
        ("P1", "tpo", "seeds0-4"), ("P1", "grpo", "seeds0-4"), ("P1", "tpo", "seeds5-9"), ("P1", "grpo", "seeds5-9"),
        ("P2", "later", "seeds0-4")]
    cells = [dict(QUEUE["cells"][0], seeds=4, chunk=2), dict(QUEUE["cells"][1], seeds=4, chunk=2)]  # cells' own
    jobs = campaign.breadth_first(campaign.plan({"chunk": 5, "cells": cells}, tmp_path)[0])
    assert [(job.cell, job.name) for job, _ in jobs] == [
        ("tpo", "seeds0-1"), ("grpo", "seeds0-1"), ("tpo", "seeds2-3"), ("grpo", "seeds2-3")]


def fake_processes(run_class: type) -> type:
    """``subprocess`` as ``LocalLauncher`` uses it, its processes ``run_class``'s."""
    return type("Processes", (), {"Popen": run_class, "STDOUT": None, "TimeoutExpired": subprocess.TimeoutExpired})


def fake_launches(monkeypatch, clock: list[float], run_class: type) -> None:
    """The runner and the local launcher on a fake clock (each sleep a minute) and fake processes."""
    clock_module = type("Clock", (), {
        "time": staticmethod(lambda: clock[0]), "strftime": staticmethod(lambda _: "t"),
        "sleep": staticmethod(lambda _: clock.__setitem__(0, clock[0] + 60))})
    for module in (campaign_runner, campaign_local):
        monkeypatch.setattr(module, "time", clock_module)
    monkeypatch.setattr(campaign_local, "subprocess", fake_processes(run_class))


def hour_job(name: str, hours: float, steps: int = 100) -> campaign.Job:
    """A one-seed job whose cell cost makes it exactly ``hours`` CPU-hours."""
    return campaign.Job("P1", "fig3_tabular_multi", name, (), 0, 1, steps, 3600 * hours / steps)


def test_a_gpu_cells_runs_are_timed_by_its_gpu_hours_not_its_cpu_cost(tmp_path):
    """--finish-within on a GPU machine: a GPU cell whose CPU cost would take 10 hours but whose 10 seeds take
    0.3 GPU-hours fits in half an hour, each run by its seeds' share."""
    cell = dict(QUEUE["cells"][0], seeds=10, chunk=5, cost=3600 * 10 / (10 * STEPS), gpus=1, gpu_hours=0.3,
                overrides=[*QUEUE["cells"][0]["overrides"], "device=cuda"])
    jobs = [job for job, _ in campaign.plan({"chunk": 5, "cells": [cell]}, tmp_path)[0]]
    assert [(job.name, job.gpu_hours, job.hours) for job in jobs] == [("seeds0-4", 0.15, 0.15),
                                                                        ("seeds5-9", 0.15, 0.15)]
    assert jobs[0].cpu_hours == pytest.approx(5.0)
    assert campaign.fit_plan(jobs, 1, 3600 * 0.5, tmp_path) == jobs  # 2 × 0.15 h × MARGIN 1.25
    cpu_jobs = [replace(job, gpu_hours=None) for job in jobs]
    assert campaign.fit_plan(cpu_jobs, 1, 3600 * 0.5, tmp_path) == []


def test_finish_within_skips_runs_that_would_overrun_and_backfills_shorter_ones(tmp_path):
    a, b, c, d = hour_job("a", 1.0), hour_job("b", 1.0), hour_job("c", 0.5), hour_job("d", 0.2)
    # with MARGIN 1.25: a and b take 1.25 h each, one per slot; c would end at 1.875 h > 1.6 h and is skipped; d ends
    # at 1.5 h and runs
    assert campaign.MARGIN == 1.25
    assert campaign.fit_plan([a, b, c, d], 2, 1.6 * 3600, tmp_path) == [a, b, d]
    assert campaign.fit_plan([a, b, c, d], 1, 1.6 * 3600, tmp_path) == [a, d]
    resumable = hour_job("e", 2.0)
    folder = resumable.work_dir(tmp_path)
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "config.yaml").write_text("task:\n  checkpoint_every: 20\n"
                                                  "trainer:\n  checkpoint_every: ${task.checkpoint_every}\n")
    (folder / "metrics.csv").write_text("step,seed,error\n" + "".join(f"{s},0,0.5\n" for s in range(50)) + "5")
    assert campaign.seconds_needed(resumable, tmp_path) == 1.25 * 3600 * 2.0  # no checkpoint yet: starts over
    (folder / "checkpoint.pt").write_bytes(b"")
    # steps 0-49 logged (the cut-off last line ignored), checkpoints every 20: the resume keeps steps 0-39 of 100
    assert campaign.seconds_needed(resumable, tmp_path) == 1.25 * 3600 * 2.0 * 0.6
    assert campaign.fit_plan([resumable], 1, 1.5 * 3600, tmp_path) == [resumable]
    assert campaign.fit_plan([resumable], 1, 1.4 * 3600, tmp_path) == []


def test_a_run_that_cannot_finish_in_time_is_never_started(tmp_path, capsys):
    handlers = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    failed = campaign.run([hour_job("long", 1.0)], 1, tmp_path / "work", tmp_path / "results", finish_within=1.0)
    assert failed == 0 and not (tmp_path / "work").exists()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == handlers  # the caller's again
    assert "skip  fig3_tabular_multi/long/seeds0 for now: needs 1.25 h, 1.00 h left" in capsys.readouterr().out


def test_a_run_skipped_on_a_high_estimate_starts_once_measured_costs_make_it_fit(tmp_path, monkeypatch, capsys):
    """A fake clock and fake runs on 2 slots: ``a`` takes 0.5 h; ``b`` is estimated at 1 CPU-hour (1.25 h with the
    margin, over the 1 h left) until ``a`` finishes and the renewed costs put it at 0.2 (0.25 h, within the 0.5 h
    then left)."""
    clock, durations, started = [0.0], {"a": 0.5, "b": 0.2}, []

    class FakeRun:
        def __init__(self, command, **_):
            self.folder = Path(next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1])
            self.cell, self.start, self.returncode = self.folder.parent.name, clock[0], None
            started.append((self.cell, clock[0]))

        def poll(self):
            if clock[0] - self.start < 3600 * durations[self.cell]:
                return None
            (self.folder / "summary.json").write_text(json.dumps({"status": "completed"}))
            self.returncode = 0
            return 0

    clock_module = type("Clock", (), {
        "time": staticmethod(lambda: clock[0]), "strftime": staticmethod(lambda _: f"{clock[0] / 3600:.2f}h"),
        "sleep": staticmethod(lambda _: clock.__setitem__(0, clock[0] + 60))})
    for module in (campaign_runner, campaign_local):
        monkeypatch.setattr(module, "time", clock_module)
    monkeypatch.setattr(campaign_local, "subprocess", fake_processes(FakeRun))
    monkeypatch.setattr(campaign_runner, "export", lambda job, work, results: None)
    monkeypatch.setattr(campaign_reports, "report", lambda preset, results: None)
    a, b = hour_job("a", 0.5), hour_job("b", 1.0)
    failed = campaign.run([a, b], 2, tmp_path / "work", tmp_path / "results", finish_within=1.0,
                          costs=lambda: {("fig3_tabular_multi", "b"): 3600 * 0.2 / b.steps})
    assert failed == 0 and [cell for cell, _ in started] == ["a", "b"] and started[1][1] == 0.5 * 3600
    assert capsys.readouterr().out.count("skip  fig3_tabular_multi/b/seeds0 for now") == 1


def test_a_runner_leaving_on_an_error_stops_the_runs_it_started(tmp_path, monkeypatch):
    """``a`` finishes and its export fails: the runner raises, and ``b``, still running, is asked to checkpoint and
    stop (SIGUSR2), and SIGTERMed when it does not (it then writes its summary and its checkpoint resumes it)
    instead of running on alone."""
    clock, terminated, asked = [0.0], [], []

    class FakeRun:
        def __init__(self, command, **_):
            self.folder = Path(next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1])
            self.cell, self.returncode = self.folder.parent.name, None

        def poll(self):
            if self.cell == "a" and clock[0] >= 120:
                (self.folder / "summary.json").write_text(json.dumps({"status": "completed"}))
                self.returncode = 0
            return self.returncode

        def send_signal(self, signum):
            asked.append((self.cell, signum))  # ignored, as an LLM run ignores it

        def terminate(self):
            terminated.append(self.cell)
            self.returncode = -15

        def wait(self, timeout=None):
            if self.returncode is None:
                raise subprocess.TimeoutExpired("run", timeout)
            return self.returncode

    def export(job, work, results):
        raise OSError("disk full")

    fake_launches(monkeypatch, clock, FakeRun)
    monkeypatch.setattr(campaign_runner, "export", export)
    with pytest.raises(OSError, match="disk full"):
        campaign.run([hour_job("a", 0.1), hour_job("b", 0.1)], 2, tmp_path / "work", tmp_path / "results")
    assert asked == [("b", signal.SIGUSR2)] and terminated == ["b"]


def test_a_run_asked_to_checkpoint_while_it_starts_stops_at_its_first_step(tmp_path):
    """The runner's ask (SIGUSR2) reaching a run before its interpreter can answer it waits (blocked from its start
    until the handler is in place): the run stops at its first step with a checkpoint. Bug caught: the signal not
    blocked in the child (its default action ends the run at once, exit -12, nothing written)."""
    job = campaign.Job("P1", "fig3_tabular_multi", "tpo", ("algorithm=tpo", "task.steps=20000",
                                                           "task.checkpoint_every=0"), 0, 1, 20000, 0.001)
    process = campaign_local.LocalLauncher(tmp_path / "work").start(job, 0)
    process.send_signal(signal.SIGUSR2)  # the interpreter is still starting
    assert process.wait(timeout=300) == 130
    run_dir = job.work_dir(tmp_path / "work")
    fingerprint = json.loads((run_dir / "identity.json").read_text())["fingerprint"]
    assert outputs.load_checkpoint(run_dir, fingerprint)["step"] == 1


def test_a_second_stop_while_runs_save_their_checkpoints_stops_them_at_once_and_the_runner_waits(tmp_path, capsys):
    """A run slow to answer the ask (a long step): a second Ctrl-C during the grace SIGTERMs it at once (it keeps its
    last checkpoint) and the launcher still waits for it to end; the caller's handlers stand again after. Bugs
    caught: the second Ctrl-C leaving the launcher at once (the run left alone, SIGTERMed mid-ask by the runner's
    death), the handlers not put back."""
    events = []

    class SlowRun:
        returncode = None

        def poll(self):
            return self.returncode

        def send_signal(self, signum):
            events.append(signal.Signals(signum).name)

        def terminate(self):
            events.append("SIGTERM")
            self.returncode = -15

        def wait(self, timeout=None):
            if self.returncode is None:
                events.append("waiting")
                signal.raise_signal(signal.SIGINT)  # the second Ctrl-C, while the run still saves
            return self.returncode

    handler = signal.getsignal(signal.SIGINT)
    campaign_local.LocalLauncher(tmp_path).stop([SlowRun()])
    assert events == ["SIGUSR2", "waiting", "SIGTERM"]
    assert signal.getsignal(signal.SIGINT) == handler
    assert "stopping the runs now, each at its last checkpoint" in capsys.readouterr().out


def test_stop_after_stops_the_runs_at_that_hour_starts_no_more_and_fails_none(tmp_path, monkeypatch, capsys):
    """``--stop-after 1``, two slots: ``a`` ends done within the hour and is exported, ``c`` takes its slot, ``b`` and
    ``c`` still run at the hour and are stopped (asked to checkpoint: each does, exits 130 and writes
    "interrupted"), ``d`` never starts; nothing counts as failed. Bugs caught: the hour not checked (``b`` and ``c``
    run to their end, ``d`` starts), the stopped runs counted as failed, the run ended done before the hour left
    unexported."""
    clock, asked, started, exported = [0.0], [], [], []

    class FakeRun:
        def __init__(self, command, **_):
            self.folder = Path(next(a for a in command if a.startswith("hydra.run.dir=")).split("=", 1)[1])
            self.cell, self.returncode = self.folder.parent.name, None
            started.append(self.cell)

        def poll(self):
            if self.returncode is None and clock[0] >= (1800 if self.cell == "a" else 7200):
                (self.folder / "summary.json").write_text(json.dumps({"status": "completed"}))
                self.returncode = 0
            return self.returncode

        def send_signal(self, signum):
            asked.append((self.cell, signum))
            (self.folder / "summary.json").write_text(json.dumps({"status": "interrupted"}))
            self.returncode = 130

        def wait(self, timeout=None):
            return self.returncode

    fake_launches(monkeypatch, clock, FakeRun)
    monkeypatch.setattr(campaign_runner, "export", lambda job, work, results: exported.append(job.cell))
    monkeypatch.setattr(campaign_runner, "Reporter", lambda results: type("R", (), {
        "submit": lambda self, preset: None, "finish": lambda self: 0})())
    jobs = [hour_job(name, 2.0) for name in "abcd"]
    assert campaign.run(jobs, 2, tmp_path / "work", tmp_path / "results", stop_at=3600.0) == 0
    assert started == ["a", "b", "c"] and exported == ["a"]
    assert sorted(asked) == [("b", signal.SIGUSR2), ("c", signal.SIGUSR2)]
    assert clock[0] == 3600  # stopped at the hour, not at b's end
    assert "--stop-after: 2 runs stop at a checkpoint they save now, 1 not started" in capsys.readouterr().out


def test_a_stopped_campaign_loses_no_step_of_its_runs_and_resumes_to_the_same_numbers(tmp_path):
    """A run checkpointing only at its end (``task.checkpoint_every=0``): a Ctrl-C at the campaign's terminal (SIGINT
    to its process group) mid-run has the run save a checkpoint at the step it stood at (harness.process's
    CHECKPOINT_SIGNAL), from which the same command finishes it with the numbers of a campaign never stopped. Bugs
    caught: the launcher's stop SIGTERMs at once, or the run shares the runner's process group and gets the SIGINT
    itself (either way it keeps no checkpoint and starts again from step 0)."""
    steps = 20_000
    queue = tmp_path / "queue.yaml"
    queue.write_text(yaml.safe_dump({"chunk": 2, "cells": [
        {"priority": "P1", "preset": "fig3_tabular_multi", "name": "tpo", "seeds": 2, "cost": 0.001,
         "overrides": ["algorithm=tpo", f"task.steps={steps}", "task.checkpoint_every=0"]}]}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}

    def campaign_in(root: Path) -> subprocess.Popen:
        return subprocess.Popen([sys.executable, "-m", "harness.campaign", str(queue), "--jobs", "1", "--work",
                                 str(root / "work"), "--results", str(root / "results")], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)

    full = campaign_in(tmp_path / "full")
    output, _ = full.communicate(timeout=600)
    assert full.returncode == 0, output
    stopped = campaign_in(tmp_path / "stopped")
    run_dir = tmp_path / "stopped" / "work" / "fig3_tabular_multi" / "tpo" / "seeds0-1"
    deadline = time.time() + 300
    while time.time() < deadline and not (run_dir / "metrics.csv").exists():
        time.sleep(0.05)
    time.sleep(1.0)
    os.killpg(stopped.pid, signal.SIGINT)  # a terminal's Ctrl-C
    output, _ = stopped.communicate(timeout=300)
    assert stopped.returncode == 130, output
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "interrupted", output
    fingerprint = json.loads((run_dir / "identity.json").read_text())["fingerprint"]
    resume_step = outputs.load_checkpoint(run_dir, fingerprint)["step"]
    assert 0 < resume_step < steps, output
    again = campaign_in(tmp_path / "stopped")
    output, _ = again.communicate(timeout=600)
    assert again.returncode == 0, output
    summary = json.loads((tmp_path / "stopped" / "results" / "runs" / run_dir.relative_to(run_dir.parents[2]) /
                          "summary.json").read_text())
    assert summary["resumed_from"] == [resume_step]
    assert metrics(tmp_path / "stopped") == metrics(tmp_path / "full")


def test_a_report_folder_shows_its_own_tables_and_figures_not_those_of_the_runs_it_shares(tmp_path):
    """Table 3's H = 7 runs are also beyond_relapse's Muon rows and the modern baselines' TPO: a finished Table 3
    cell regenerates all three folders, each with its own table and figure only."""
    import numpy as np

    from harness.report import synthetic

    steps = np.arange(0, 2000, 100)
    config = synthetic.make_config("table3_terminal", "token_reversal", "tpo", 2, 2000,
                                   **{"task.H": 7, "task.match": "prompts"})
    synthetic.write_run(tmp_path / "runs" / "table3_terminal" / "prompts_h7_tpo" / "seeds0-1", config,
                        {"error": np.full((2, len(steps)), 0.25)}, steps=steps)
    campaign.report("table3_terminal", tmp_path)
    shown = {folder: sorted(p.name for p in (tmp_path / folder).glob("*.md") if p.name != "README.md")
             for folder in ("table3_terminal", "beyond_relapse", "beyond_terminal_baselines")}
    assert shown == {"table3_terminal": ["fig7.caption.md", "table3.md"],
                     "beyond_relapse": ["beyond_relapse.caption.md", "beyond_relapse.md"],
                     "beyond_terminal_baselines": ["beyond_terminal.caption.md", "beyond_terminal.md"]}
    readme = (tmp_path / "beyond_relapse" / "README.md").read_text()
    assert "--tables beyond_relapse --figures beyond_relapse`" in readme  # the command that regenerates it
    assert re.search(r"\| TPO, Muon +\| 25\.0", readme)  # Table 3's run is the Muon row


def test_fig8_reads_table3_s_prompt_matched_runs_and_fig1b_s_not_the_interaction_matched_ones(tmp_path):
    """Fig 8's TPO rows are Table 3's prompt-matched runs (H = 10: Fig 1b's, which Table 3 itself reads); Table 3's
    interaction-matched TPO at the same H is another configuration and must not join the cell. Bugs caught:
    specs.py without fig8's ``where=PROMPT_MATCHED`` (the H = 7 cell is a conflict of two configurations), or
    without fig1b_sparse in its SHARED_RUNS (H = 10 missing: sharing is not transitive)."""
    import numpy as np
    import pandas as pd

    from harness.report import synthetic

    steps = np.arange(0, 2000, 100)
    runs = {("table3_terminal", "prompts_h7_tpo", 7, "prompts"): 0.25,
            ("table3_terminal", "interactions_h7_tpo", 7, "interactions"): 0.75,
            ("fig1b_sparse", "tpo", 10, "prompts"): 0.10}
    for (preset, cell, horizon, match), error in runs.items():
        config = synthetic.make_config(preset, "token_reversal", "tpo", 2, 2000,
                                       **{"task.H": horizon, "task.match": match})
        synthetic.write_run(tmp_path / "runs" / preset / cell / "seeds0-1", config,
                            {"error": np.full((2, len(steps)), error)}, steps=steps)
    assert campaign.report("fig8_ablations", tmp_path) == []
    table = pd.read_csv(tmp_path / "fig8_ablations" / "fig8.csv").set_index(["row", "col"])
    assert table.loc[("TPO", "H=7"), ["status", "ours"]].tolist() == ["partial", 0.25]
    assert table.loc[("TPO", "H=10"), ["status", "ours"]].tolist() == ["partial", 0.10]
    assert table.loc[("TPO", "H=8"), "command"] == ("python -m harness -m experiment=table3_terminal algorithm=tpo "
                                                    "task.H=8 task.match=prompts")  # run once, for both tables


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs two cores to choose between")
def test_a_run_is_pinned_to_a_core_no_other_run_holds_even_one_of_another_runner(tmp_path):
    """A campaign and a scorecard runner side by side, each with --jobs 1: the second one's run goes to a free core,
    not to the slot's core that the first one's run holds. Bug caught: harness/campaign/local.py:LocalLauncher.core
    returning the slot's core whatever is pinned there (both runs share one core, the other idles)."""
    launcher = campaign.LocalLauncher(tmp_path)
    busy = launcher.core(0)
    before = campaign.pinned_load(launcher.cores)
    wanted = max(before.values()) + 1  # busiest of all once the other runner's runs are there (whatever else runs)
    others = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                               preexec_fn=lambda: os.sched_setaffinity(0, {busy}))
              for _ in range(wanted - before[busy])]
    try:
        deadline = time.time() + 10
        while campaign.pinned_load(launcher.cores)[busy] < wanted and time.time() < deadline:
            time.sleep(0.05)
        assert campaign.pinned_load(launcher.cores)[busy] >= wanted
        assert campaign.LocalLauncher(tmp_path).core(0) != busy
    finally:
        for other in others:
            other.kill()
            other.wait()


def test_reports_name_folders_inside_the_repository_relative_to_it(tmp_path):
    assert campaign_text.shown(ROOT / "results" / "runs" / "fig1b_sparse") == "results/runs/fig1b_sparse"
    assert campaign_text.shown(tmp_path / "results") == str((tmp_path / "results").resolve())


@pytest.mark.parametrize("inherited", [None, "", "/opt/site:/opt/more"])
def test_runs_find_this_repository_first_and_the_machines_own_paths_after_it(inherited):
    """Locally and in a SLURM job alike: a GPU machine's packages outside the project's environment (on PYTHONPATH)
    reach the runs, and this checkout's modules come first."""
    environ = {"HOME": "/h", **({"PYTHONPATH": inherited} if inherited else {})}
    expected = str(ROOT) + (os.pathsep + inherited if inherited else "")
    local = campaign.run_environment(environ)
    assert local == {**environ, "PYTHONPATH": expected, "WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}
    script = "; ".join([*campaign.slurm_setup(), 'echo "$PYTHONPATH|$WANDB_MODE|$OMP_NUM_THREADS"'])
    shell_env = {"PATH": os.environ["PATH"], **({"PYTHONPATH": inherited} if inherited else {})}
    said = subprocess.run(["bash", "-c", script], env=shell_env, capture_output=True, text=True, check=True).stdout
    assert said.strip() == f"{expected}|disabled|1"


@pytest.mark.parametrize("queue", ["section4_gpu", "section4_sweeps_gpu"])
def test_the_gpu_queue_runs_paper_cells_whose_runs_count_as_done_for_the_paper_queue(queue):
    """The GPU queues' cells are paper queue cells (Section 4's mechanism, P6; its sweeps, P14 taken to 30 seeds in
    P19) with all seeds batched on a GPU: same preset, name, seeds and configuration but the device (which the
    report ignores), so their runs land in the paper's cell folders; the listing it twins holds as many seeds (Fig
    10's TPO and GRPO are listed at 10 seeds for Section 4's mechanism, at 30 for its sweeps)."""
    paper = {(c["preset"], c["name"], c["seeds"]): c for c in campaign.load_queue("paper")["cells"]}
    gpu_cells = campaign.load_queue(queue)["cells"]
    assert gpu_cells
    for cell in gpu_cells:
        twin = paper[(cell["preset"], cell["name"], cell["seeds"])]
        assert cell["seeds"] == cell["chunk"] and cell["gpus"] == 1
        overrides = tuple(cell["overrides"])
        assert campaign.differences(campaign.cell_identity(cell["preset"], overrides),
                                    campaign.cell_identity(twin["preset"], tuple(twin["overrides"])),
                                    campaign_exports._exported_ignores()) == []
        assert campaign.cell_identity(cell["preset"], overrides)["device"] == "cuda"


def test_gpu_jobs_side_by_side_each_compute_their_seeds_in_chunks_that_fit_their_share_of_the_gpu():
    from omegaconf import OmegaConf

    from tasks.memory import estimate_memory

    overrides = ("task.K=64", "algorithm=grpo", "device=cuda")
    job = campaign.Job("P14", "fig12_k_sweep", "k64_grpo", overrides, 0, 30, 2000, 1.0, 1.0)

    def need(chunk: int) -> float:  # the run's own memory estimate at that chunk, composed independently
        config = OmegaConf.create(campaign.cell_identity("fig12_k_sweep", (*overrides, f"task.seed_chunk={chunk}")))
        config.seeds = 30
        return estimate_memory(config)[0]

    gpu = 80e9
    shared = campaign.share_gpu(job, 4, gpu)
    chunk = int(shared.overrides[-1].removeprefix("task.seed_chunk="))
    assert shared.overrides[:-1] == overrides and 1 <= chunk < 30
    assert need(chunk) <= gpu / 4 < need(chunk + 1)  # the most seeds whose estimate fits a quarter of the GPU
    assert campaign.share_gpu(job, 1, gpu) == job  # alone: every seed in one batched program
    assert campaign.share_gpu(job, 4, 1e15).overrides[-1] == "task.seed_chunk=30"
    assert campaign.share_gpu(job, 4, 1.0).overrides[-1] == "task.seed_chunk=1"  # none fits: the run refuses it
    own = replace(job, overrides=(*overrides, "task.seed_chunk=3"))
    assert campaign.share_gpu(own, 4, gpu) == own  # a cell's own chunk stands
    cpu = replace(job, overrides=("task.K=64", "algorithm=grpo"))
    assert campaign.share_gpu(cpu, 4, gpu) == cpu
    tabular = campaign.Job("P1", "fig3_tabular_multi", "tpo", ("algorithm=tpo", "device=cuda"), 0, 30, 100, 1.0)
    assert campaign.share_gpu(tabular, 4, gpu) == tabular  # no chunking to choose


def test_a_local_campaign_on_a_gpu_machine_chunks_each_gpu_job_to_its_share_of_the_gpu(tmp_path, monkeypatch):
    import tasks.memory

    started = []
    monkeypatch.setattr(campaign_cli, "_cuda_here", lambda: True)
    monkeypatch.setattr(tasks.memory, "machine_memory", lambda device="cpu": (80e9, "a GPU of 80 GB"))
    monkeypatch.setattr(campaign_cli, "cell_refusal", lambda preset, overrides: None)  # no CUDA to build it on here
    monkeypatch.setattr(campaign_cli, "run", lambda jobs, parallel, *args, **kwargs: started.extend(jobs) or 0)
    arguments = ["section4_sweeps_gpu", "--only", "fig12_k_sweep/k64_grpo", "--results", str(tmp_path / "results"),
                 "--work", str(tmp_path / "work")]
    with pytest.raises(SystemExit, match="^0$"):
        campaign.main([*arguments, "--jobs", "4"])
    (job,) = started
    assert job.overrides[-1] == campaign.share_gpu(replace(job, overrides=job.overrides[:-1]), 4, 80e9).overrides[-1]
    assert job.overrides[-1] != "task.seed_chunk=30"  # 30 seeds of K = 64 do not fit a quarter of 80 GB
    started.clear()
    with pytest.raises(SystemExit, match="^0$"):
        campaign.main([*arguments, "--jobs", "1"])  # alone: the run's own choice, all seeds at once
    assert not any(override.startswith("task.seed_chunk") for override in started[0].overrides)


def test_a_gpu_runs_seeds_count_as_done_but_its_cpu_seconds_are_no_cpus_cost(tmp_path):
    cell_dir = tmp_path / "results" / "runs" / "fig3_tabular_multi" / "tpo"
    record_run(cell_dir / "seeds0-1", QUEUE["cells"][0], {
        "status": "completed", "seeds": [0, 1], "steps": STEPS, "cpu_seconds": 2 * STEPS * 2.0,
        "hardware": {"cpu": "CPU A", "device": "cpu"}})
    record_run(cell_dir / "seeds2-4", QUEUE["cells"][0], {  # its seeds batched on a GPU: seconds of CPU A, barely
        "status": "completed", "seeds": [2, 3, 4], "steps": STEPS, "cpu_seconds": 3 * STEPS * 0.01,
        "hardware": {"cpu": "CPU A", "device": "cuda:0"}})
    identity_file = cell_dir / "seeds2-4" / "identity.json"
    identity = json.loads(identity_file.read_text())
    identity_file.write_text(json.dumps({"config": {**identity["config"], "device": "cuda"}}))
    expected = campaign.cell_identity(QUEUE["cells"][0]["preset"], tuple(QUEUE["cells"][0]["overrides"]))
    found = campaign.exported(cell_dir, STEPS, expected)
    assert found.seeds == {0, 1, 2, 3, 4} and not found.stale  # the device is a setting the report ignores
    assert found.spent == {"CPU A": (2 * STEPS * 2.0, 2 * STEPS)}


def test_costs_are_this_cpus_where_measured_and_scaled_by_its_speed_elsewhere(tmp_path):
    results = tmp_path / "results"

    def record(cell: str, name: str, seeds: list[int], cpu: str | None, per_episode: float,
               preset: str = "fig3_tabular_multi") -> None:
        record_run(results / "runs" / preset / cell / name, QUEUE["cells"][cell == "grpo"], {
            "status": "completed", "seeds": seeds, "steps": STEPS, "cpu_seconds": len(seeds) * STEPS * per_episode,
            "hardware": {"cpu": cpu} if cpu else None})

    record("tpo", "seeds0-1", [0, 1], "CPU A", 2.0)
    record("tpo", "seeds2", [2], "CPU B", 0.5)  # the same cell on CPU B: 4x cheaper
    record("grpo", "seeds0-1", [0, 1], "CPU A", 4.0)  # measured on CPU A only
    record("grpo", "seeds2-4.tmp", [2, 3, 4], "CPU B", 9.0)  # an export cut short: not a run
    record("x", "seeds0", [0], "CPU A", 1.0, preset="another_queues")  # a cell of no cell here: CPU B 2x cheaper
    record("x", "seeds1", [1], "CPU B", 0.5, preset="another_queues")
    cells = [dict(QUEUE["cells"][0], seeds=5, cost=1.0), dict(QUEUE["cells"][1], priority="P2", seeds=5, cost=6.0),
             dict(QUEUE["cells"][0], name="later", seeds=5, cost=8.0),  # no runs: the estimate, calibrated by P1's
             dict(QUEUE["cells"][0], name="other", priority="P3", seeds=5, cost=2.0)]  # P3 has none: by the others

    def costs(cpu: str, only: set[str] | None = None) -> tuple[dict[str, float], float | None]:
        jobs, factor = campaign.plan({"chunk": 5, "cells": cells}, results, only, cpu_model=cpu)
        assert [(job.cell, job.name) for job, state in jobs if not state.startswith("done")] == [
            (cell, name) for cell, name in (("tpo", "seeds3-4"), ("grpo", "seeds2-4"), ("later", "seeds0-4"),
                                            ("other", "seeds0-4"))
            if only is None or cell == "grpo"]
        return {job.cell: job.cost for job, _ in jobs}, factor

    # CPU B's speed: the median of 0.25 (tpo) and 0.5 (another queue's cell). An estimate is calibrated by its
    # priority's measured cells, cost over estimate ("later": tpo's 0.5 / 1.0), or where its priority has none by
    # the cells measured on this CPU ("other": tpo's again, not grpo's 1.5 / 6.0, scaled from CPU A)
    assert costs("CPU B") == ({"tpo": 0.5, "grpo": 4.0 * 0.375, "later": 8.0 * 0.5, "other": 2.0 * 0.5}, 0.375)
    assert costs("CPU B", {"P2"}) == ({"grpo": 4.0 * 0.375}, 0.375)  # whatever the priorities run
    assert costs("CPU A") == ({"tpo": 2.0, "grpo": 4.0, "later": 8.0 * 2.0,
                               "other": 2.0 * (2.0 / 1.0 + 4.0 / 6.0) / 2}, 3.0)
    pooled = (2 * 2.0 + 0.5) / 3  # a CPU with no runs of its own: every run's cost, unscaled
    assert costs("CPU C") == ({"tpo": pooled, "grpo": 4.0, "later": 8.0 * pooled,
                               "other": 2.0 * (pooled / 1.0 + 4.0 / 6.0) / 2}, None)
    cells = cells[2:]  # no cell measured: the estimate as it is
    assert campaign.plan({"chunk": 5, "cells": cells}, results, None, "CPU B")[0][0][0].cost == 8.0


def test_a_runner_killed_by_sigkill_leaves_no_run_training(tmp_path):
    """``kill -9`` of the runner alone (not its process group): its run gets SIGTERM, stops at its checkpoint and
    writes its summary ("interrupted"), holding no lock; the same command resumes it. Bug caught:
    LocalLauncher.start without die_with_parent (the run trained on with parent pid 1, holding run.lock)."""
    queue = tmp_path / "queue.yaml"
    queue.write_text(yaml.safe_dump({"chunk": 2, "cells": [
        {"priority": "P1", "preset": "fig3_tabular_multi", "name": "tpo", "seeds": 2, "cost": 0.001,
         "overrides": ["algorithm=tpo", "task.steps=200000", "task.checkpoint_every=50"]}]}))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    runner = subprocess.Popen([sys.executable, "-m", "harness.campaign", str(queue), "--work", str(tmp_path / "work"),
                               "--results", str(tmp_path / "results")], cwd=tmp_path, env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run_dir = tmp_path / "work" / "fig3_tabular_multi" / "tpo" / "seeds0-1"
    deadline = time.time() + 120
    while time.time() < deadline and not (run_dir / "checkpoint.pt").exists():
        time.sleep(0.05)
    run_pid = int((run_dir / "run.lock").read_text().split()[0])
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    def alive() -> bool:  # (an exited child of the dead runner may linger as a zombie until init reaps it)
        try:
            return Path(f"/proc/{run_pid}/stat").read_text().split()[2] != "Z"
        except OSError:
            return False

    deadline = time.time() + 120
    while time.time() < deadline and alive():
        time.sleep(0.1)
    still = alive()
    if still:
        os.kill(run_pid, signal.SIGKILL)
    assert not still, "the run trained on after its runner died"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "interrupted", summary
    assert not (run_dir / "run.lock").exists()


def test_the_local_launcher_waits_for_a_live_run_lock_then_refuses_in_one_line(tmp_path, capsys):
    """A run folder held by a live process (an orphan of a killed runner still closing, a run started by hand):
    the launcher waits for it to let go and starts the run, or refuses it in a REFUSED line instead of starting a run
    that exits 2. Bug caught: LocalLauncher.start without ``claim`` (the campaign reported ``FAILED … exit 2``)."""
    from harness import rundir

    job, launcher = hour_job("held", 0.1), campaign.LocalLauncher(tmp_path)
    launcher.lock_wait_s = 1.0
    job.work_dir(tmp_path).mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (job.work_dir(tmp_path) / rundir.LOCK_FILE).write_text(f"{holder.pid} {socket.gethostname()}\n")
        assert launcher.start(job, 0) is None
        (line,) = capsys.readouterr().out.splitlines()
        assert "REFUSED" in line and f"process {holder.pid} on" in line and "held" in line
        (job.work_dir(tmp_path) / rundir.LOCK_FILE).write_text("12345 another-host\n")  # not seen to end from here
        launcher.lock_wait_s, started = 30.0, time.time()
        assert launcher.start(job, 0) is None and time.time() - started < 5
        assert "delete" in capsys.readouterr().out
        closing = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.5)"])
        threading.Thread(target=closing.wait).start()  # reaped when it ends, as init reaps an orphan
        (job.work_dir(tmp_path) / rundir.LOCK_FILE).write_text(f"{closing.pid} {socket.gethostname()}\n")
        started = time.time()
        assert launcher.claim(job) is None  # it let go within the wait
        assert closing.poll() is not None and time.time() - started < 30
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture
def cell_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache of composed cells in the test's folder, as a fresh process has it."""
    monkeypatch.setenv("TPO_BENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(campaign_cells, "CELLS", campaign.CellCache())
    return tmp_path / "cache" / campaign.CELL_CACHE


def test_a_cell_composed_once_is_read_back_by_the_next_process_without_composing(cell_cache, monkeypatch):
    """The first composition is saved under the code's fingerprint; a new cache (a new process) returns the same
    identity and knows the cell starts, with composition made to fail; a refusal is checked again (it may be this
    machine's, such as data not installed). Bugs caught: ``CellCache.save`` not writing, ``get`` composing again
    despite the file, a cell that starts not remembered (each start builds every cell's task), a refusal kept."""
    cell = QUEUE["cells"][0]
    overrides = tuple(cell["overrides"])
    identity = campaign.cell_identity(cell["preset"], overrides)
    assert campaign.cell_refusal(cell["preset"], overrides) is None
    assert campaign.cell_refusal(cell["preset"], ("task.alpha=-1",)) is not None
    campaign_cells.CELLS.save()
    assert [path.name for path in cell_cache.iterdir()] == [f"{campaign.source_fingerprint()}.json"]

    import harness.config

    def no_compose(*args, **kwargs):
        raise AssertionError("composed again")

    monkeypatch.setattr(harness.config, "compose_config", no_compose)
    monkeypatch.setattr(campaign_cells, "CELLS", campaign.CellCache())
    assert campaign.cell_identity(cell["preset"], overrides) == identity
    assert campaign.cell_refusal(cell["preset"], overrides) is None
    assert campaign.cell_refusal(cell["preset"], ("task.alpha=-1",)) == "composed again"  # checked anew


def test_a_damaged_cache_file_is_ignored_and_rewritten(cell_cache):
    cell = QUEUE["cells"][0]
    cell_cache.mkdir(parents=True)
    path = cell_cache / f"{campaign.source_fingerprint()}.json"
    path.write_text('{"truncated')
    identity = campaign.cell_identity(cell["preset"], tuple(cell["overrides"]))
    campaign_cells.CELLS.save()
    assert list(json.loads(path.read_text()).values()) == [{"identity": identity}]


def test_an_exported_runs_check_is_made_again_when_its_config_changes(cell_cache, tmp_path):
    """A finished run's check is cached per version of every file it reads: config.yaml cut short after a first
    check is found damaged by a new process. Bug caught: the stamp covering summary.json and metrics only (the
    run counted as done from the cache while the report calls it damaged)."""
    run = tmp_path / "run"
    write_run(run, make_config("fig3_tabular_multi", "tabular_multi", "tpo", 2, 4), {"error": np.zeros((2, 4))})
    assert campaign_exports._exported_problem(run) is None
    campaign_cells.CELLS.save()
    config = run / ".hydra" / "config.yaml"
    config.write_text(config.read_text()[:-1])  # the last newline gone: cut short
    campaign_cells.CELLS = campaign.CellCache()
    assert "cut short" in campaign_exports._exported_problem(run)


def test_the_fingerprint_follows_every_config_file_s_content(tmp_path, monkeypatch):
    """An edited value in one config file (same name, same size) gives another fingerprint, so no cell composed
    from the old file is read back. Bug caught: a fingerprint of names and sizes only."""
    conf = tmp_path / "conf"
    (conf / "task").mkdir(parents=True)
    (conf / "task" / "t.yaml").write_text("alpha: 0.1\n")
    monkeypatch.setattr(campaign_cells.locations, "CONF", conf)
    campaign.source_fingerprint.cache_clear()
    before = campaign.source_fingerprint()
    (conf / "task" / "t.yaml").write_text("alpha: 0.2\n")
    campaign.source_fingerprint.cache_clear()
    assert campaign.source_fingerprint() != before
    campaign.source_fingerprint.cache_clear()


def test_results_on_a_file_system_without_flock_are_refused_in_one_line(tmp_path, monkeypatch):
    """Lustre mounted without ``-o flock`` answers flock with ENOSYS: one line naming the folder and what to do,
    nothing exported, instead of a traceback."""
    import errno
    import fcntl

    def no_flock(handle, operation):
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", no_flock)
    with pytest.raises(SystemExit, match=r"^Error: cannot lock .*results\.lock \(Function not implemented\): "
                                         r"--results must be on a file system with flock"):
        with campaign.results_lock(tmp_path / "results"):
            raise AssertionError("locked")


def test_the_plan_summary_counts_committed_and_remaining_hours_and_one_sbatch_call_per_resources(tmp_path):
    """A cell half committed (its measured cost: 2 CPU-s an episode), one estimated with resources of its own, and
    a GPU cell: the hours and jobs as computed here from the costs, three sbatch calls (one per resources).

    Bug caught: ``plan_summary`` counting the committed runs' hours as still to go, or the GPU jobs' CPU cost."""
    results = tmp_path / "results"
    record_run(results / "runs" / "fig3_tabular_multi" / "tpo" / "seeds0-1", QUEUE["cells"][0], {
        "status": "completed", "seeds": [0, 1], "steps": STEPS, "cpu_seconds": 2 * STEPS * 2.0})
    cells = [dict(QUEUE["cells"][0], seeds=4, cost=9.0), dict(QUEUE["cells"][1], seeds=3, cost=5.0, cpus=2,
                                                              time_min=30),
             dict(QUEUE["cells"][1], name="gpu", seeds=3, cost=5.0, gpus=1, gpu_hours=6.0, chunk=3,
                  overrides=[*QUEUE["cells"][1]["overrides"], campaign.GPU_OVERRIDE])]
    estimated = 5.0 * 2.0 / 9.0  # the estimate times the priority's measured over estimated cost
    committed, remaining = 2 * STEPS * 2.0 / 3600, (2 * STEPS * 2.0 + 3 * STEPS * estimated) / 3600
    limit = 360  # 2 seeds × 2,000 episodes × 2 CPU-s × 2 (margin) = 267 min, rounded up to a step
    assert campaign.plan_summary({"chunk": 2, "cells": cells}, results) == (
        f"The queue is {committed + remaining:.0f} CPU-hours at the costs measured so far ({committed:.0f} of them "
        f"committed; {remaining:.0f} to go, in 3 jobs) and 6 projected GPU-hours (1 GPU jobs). Submitted whole "
        "(`--max-jobs 4`), its 4 jobs go in 3 sbatch calls, a job array per resources (2 × cpus 2, mem 4 GB, time "
        f"30 min, gpus 0; 1 × cpus 1, mem 4 GB, time {limit} min, gpus 0; 1 × cpus 1, mem 4 GB, time 720 min, "
        "gpus 1).")


def test_the_readmes_cluster_numbers_are_the_paper_queues_plan():
    """README's cluster paragraph is ``--summary``'s output for the committed results: regenerated with each
    committed cell, never copied by hand."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"<!-- plan: python -m harness\.campaign --summary [^\n]*-->\n(.*?)\n<!-- end plan -->", readme,
                      re.S)
    assert block, "README.md has no plan block"
    expected = campaign.plan_summary(campaign.load_queue("paper"), ROOT / "results")
    assert " ".join(block.group(1).split()) == expected, "README's plan is stale: python -m harness.campaign --summary"


def test_an_llm_cell_whose_model_the_nodes_cannot_get_is_refused_in_one_line_and_others_pass(monkeypatch, tmp_path,
                                                                                                capsys):
    """On SLURM, an LLM cell's model is fetched on the login node before submission: a Hub id neither cached nor
    reachable is refused in one line naming ``model.path``; a cell of a task that downloads nothing passes.

    Bug caught: ``node_refusal`` deciding by a key the identity does not have (every cell passing)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    why = campaign.node_refusal("fig9_gsm8k", ("model.path=nobody-here/no-model", "algorithm=tpo"))
    assert why and "model.path='nobody-here/no-model'" in why and "\n" not in why
    assert campaign.node_refusal("fig3_tabular_multi", ("algorithm=tpo",)) is None


def test_a_regenerated_report_points_at_the_conclusions_it_no_longer_backs(tmp_path, monkeypatch, capsys):
    """Fig 10's runs exported: its report folder and Fig 13's (which reads them) are regenerated, and each one's
    conclusions.md is checked. Fig 13's quotes a number the new tables lack and a computed table its command no
    longer prints: each is said in a line, then the command that checks again; Fig 10's, current, says nothing.
    Bugs caught: the check left out; run for the exported preset only instead of each regenerated folder."""
    monkeypatch.setattr(campaign_reports, "_regenerate", lambda target, preset, owners, results: True)
    monkeypatch.setattr(campaign_reports, "_report_targets", lambda preset: (set(), [preset, "fig13_masking"]))
    printed = "| | seeds | final error |\n|---|---|---|\n| TPO | 10 | 0.052 [0.0, 0.16] |\n"
    monkeypatch.setattr("harness.report.quotes._run_module", lambda words, cwd: printed)
    marker = "<!-- computed by: python -m harness.report.seedwise paired results/runs/fig10_diagnostics -->\n"
    for name, grpo, final in (("fig10_diagnostics", "11.4", "0.052 [0.0, 0.16]"),
                              ("fig13_masking", "11.5", "0.05 [0.0, 0.16]")):
        folder = tmp_path / "results" / name
        folder.mkdir(parents=True)
        (folder / "fig.md").write_text("| | final |\n|---|---|\n| TPO | 11.4 [0.0, 28.8] |\n")
        (folder / "conclusions.md").write_text(
            f"# Reading\n\n| | seeds | ours |\n|---|---|---|\n| GRPO | 10 | {grpo} |\n"
            f"\n{marker}| | seeds | final error |\n|---|---|---|\n| TPO | 10 | {final} |\n")
    assert campaign_reports.report("fig10_diagnostics", tmp_path / "results") == []
    lines = [line for line in capsys.readouterr().out.splitlines() if "CONCLUSIONS BEHIND" in line]
    assert len(lines) == 3 and all("fig13_masking/conclusions.md" in line for line in lines)
    assert "11.5 (column 'ours') is in no generated table" in lines[0]
    assert "not what `python -m harness.report.seedwise paired" in lines[1] and "0.05 [0.0, 0.16]" in lines[1]
    assert lines[2].endswith("--rerun fig13_masking checks it again")


def test_a_conclusions_check_that_raises_is_named_and_leaves_the_report_done(tmp_path, monkeypatch, capsys):
    """A check of one folder's conclusions that raises (here an unreadable file) is one line naming the folder and the
    command that checks again; the report still counts as regenerated and the next folder is still checked. Bugs
    caught: the check unguarded (the error ends ``report`` and the reporter counts a report failure); one failed
    check ending the loop over folders."""
    monkeypatch.setattr(campaign_reports, "_regenerate", lambda target, preset, owners, results: True)
    monkeypatch.setattr(campaign_reports, "_report_targets", lambda preset: (set(), ["fig10_diagnostics",
                                                                                     "fig13_masking"]))
    checked = []

    def check(target, results):
        checked.append(target)
        if target == "fig10_diagnostics":
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")
        return 0

    monkeypatch.setattr(campaign_reports, "conclusions_left_behind", check)
    assert campaign_reports.report("fig10_diagnostics", tmp_path / "results") == []
    assert checked == ["fig10_diagnostics", "fig13_masking"]
    lines = [line for line in capsys.readouterr().out.splitlines() if "CONCLUSIONS" in line]
    assert len(lines) == 1
    assert "CONCLUSIONS NOT CHECKED fig10_diagnostics: UnicodeDecodeError: 'utf-8' codec" in lines[0]
    assert lines[0].endswith("--rerun fig10_diagnostics checks them")


def test_a_report_that_raises_is_said_in_one_line_and_the_next_preset_is_still_reported(tmp_path, monkeypatch,
                                                                                       capsys):
    """The reporter's thread outlives a report that raises (here as when a campaign's checkout is edited under it
    and the report's code no longer imports): the failure is one line and counted, and later exports still get
    their reports. Bug caught: ``Reporter._work`` calling ``report`` unguarded (the thread dies at the first
    error; every later export goes unreported and ``finish`` counts nothing)."""
    done = []

    def report(preset, results):
        if preset == "broken":
            raise ImportError("cannot import name 'x' from 'harness.config'")
        done.append(preset)
        return []

    monkeypatch.setattr(campaign_reports, "report", report)
    reporter = campaign_reports.Reporter(tmp_path)
    for preset in ("broken", "table3_terminal"):
        reporter.submit(preset)
    assert reporter.finish() == 1 and done == ["table3_terminal"]
    failed = [line for line in capsys.readouterr().out.splitlines() if "REPORT FAILED" in line]
    assert len(failed) == 1 and failed[0].endswith(
        "REPORT FAILED broken: ImportError: cannot import name 'x' from 'harness.config'; its exported runs stay noted "
        "for the next campaign's reports")
