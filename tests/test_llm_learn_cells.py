"""The LLM learning comparison's cells: the CPU preset and its GPU twin as campaign queues (one seed a run, a
seed's pair before the next seed), the GPU twin differing from the CPU comparison only in size and device, and the
GPU command run end to end on CPU at tiny size (runs exported, the report's table written)."""

from __future__ import annotations

import gzip
import io
import os
import re
import subprocess
import sys

import pandas as pd
import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT
from harness import artefacts, campaign
from harness.config import build_task, compose_config
from harness.report import tables
from harness.report.load import flatten
from harness.trainers.trl import check_llm_config

GPU_SIZE = {"device": "cuda", "model.dtype": "float32", "task.K": 16, "task.batch_size": 16,
            "task.micro_batch_groups": 16, "task.eval_size": 256, "task.eval_batch_size": 256, "task.steps": 100}


def test_a_preset_sweeping_seed_offset_is_a_cell_per_method_whose_jobs_are_one_seed_in_paired_order(capsys,
                                                                                                    tmp_path):
    """An LLM preset trains one seed a run and sweeps ``seed_offset``: the campaign's cells are its other axes
    (the offsets are its jobs'), one seed a job, and the queue runs both methods of a seed before the next seed.
    Bugs caught: ``seed_offset`` kept as a cell override (every job of a cell would train seed 0), chunk left at
    the queue's default, the cells named by the seed axis."""
    cells = campaign.expand({"priority": "L1", "preset": "llm_cpu_learn", "grid": {}, "seeds": 3, "cost": 36},
                            "llm_cpu.yaml: cells[0]")
    assert [(cell["name"], cell["overrides"], cell["chunk"]) for cell in cells] == [
        ("tpo", ["algorithm=tpo"], 1), ("grpo", ["algorithm=grpo"], 1)]
    for queue in ("llm_cpu", "llm_gpu"):
        with pytest.raises(SystemExit, match="0"):
            campaign.main([queue, "--dry-run", "--results", str(tmp_path / "results")])
        listed = [line.split()[2:4] for line in capsys.readouterr().out.splitlines() if line.startswith("L")]
        assert listed == [[method, f"seeds{seed}"] for seed in range(3) for method in ("tpo", "grpo")], queue


@pytest.mark.parametrize("change, message", [
    ({"grid": {"seed_offset": 1}}, "cells[0].grid.seed_offset is the campaign's to set"),
    ({"chunk": 3}, "cells[0].chunk=3 is not valid for preset llm_cpu_learn, whose runs train one seed each"),
    ({"overrides": ["seed_offset=1"]}, "cells[0].overrides: 'seed_offset=1' is the campaign's to set"),
    ({"overrides": ["seeds=2"]}, "cells[0].overrides: 'seeds=2' is the campaign's to set"),
])
def test_seeds_a_one_seed_presets_jobs_set_cannot_be_set_by_its_queue_entry(tmp_path, change, message):
    """The campaign's jobs set each run's seeds and offset, last on the command line: an entry that sets them too
    would be silently replaced (an override) or refused at every run's start (``chunk`` > 1 asks an LLM run for
    several seeds), so it is refused before anything runs, in one line."""
    queue = tmp_path / "queue.yaml"
    queue.write_text(yaml.safe_dump({"chunk": 1, "cells": [
        {"priority": "L1", "preset": "llm_cpu_learn", "grid": {}, "seeds": 3, "cost": 36, **change}]}))
    with pytest.raises(SystemExit, match="^Error: queue.yaml: " + re.escape(message)):
        campaign.main([str(queue), "--dry-run", "--results", str(tmp_path / "results")])


def test_a_one_seed_presets_missing_seeds_are_one_sweep_over_their_offsets_that_the_launcher_accepts():
    """An LLM preset's budget is its runs' one seed times the offsets it sweeps, and the command the report gives
    for a cell short of seeds sweeps the missing offsets with one seed a run, merged across the cells that read the
    same runs: the launcher refuses ``seeds=2`` for an LLM run. A preset without a sweep still has a budget."""
    assert tables.preset_budget("llm_cpu_learn") == (3, 50) and tables.preset_budget("llm_gpu_learn") == (3, 100)
    assert tables.preset_budget("scorecard_quick")[0] == compose_config(["experiment=scorecard_quick"]).seeds
    base = "python -m harness -m experiment=llm_cpu_learn algorithm=grpo"
    one = tables.command("llm_cpu_learn", {"algorithm.name": "grpo"}, have=[0], seeds=3)
    assert one == f"{base} seeds=1 seed_offset=1,2"
    assert tables.merge_commands([tables.command("llm_cpu_learn", {"algorithm.name": "grpo"}, have=[0, 2], seeds=3),
                                  one]) == [one]
    assert tables.command("table3_terminal", {"algorithm.name": "tpo", "task.H": 9, "task.match": "prompts"},
                          have=range(5), seeds=20).endswith(" seeds=15 seed_offset=5")  # other presets: ranges
    for offset in (1, 2):
        cfg = compose_config(["experiment=llm_cpu_learn", "algorithm=grpo", "seeds=1", f"seed_offset={offset}"])
        task = build_task(cfg)
        assert check_llm_config(cfg, task.algorithm, task.settings, world_size=1) == 1


def test_the_gpu_cell_is_the_cpu_comparison_at_the_papers_batch_size():
    """llm_gpu_learn changes only the size (K = 16 completions of 16 prompts, Fig 9's), the steps, the held-out
    set's size, the device and the precision pinned to the CPU runs' float32; every other key (model, puzzles,
    learning rate, completion length, loss) is the CPU preset's."""
    for algorithm in ("tpo", "grpo"):
        cpu, gpu = (flatten(OmegaConf.to_container(compose_config([f"experiment={preset}", f"algorithm={algorithm}"]),
                                                  resolve=True)) for preset in ("llm_cpu_learn", "llm_gpu_learn"))
        differing = {key for key in cpu.keys() | gpu.keys() if cpu.get(key) != gpu.get(key)}
        assert differing - {"experiment_name"} == set(GPU_SIZE), differing
        assert {key: gpu[key] for key in GPU_SIZE} == GPU_SIZE
        assert gpu["experiment_name"] == "llm_gpu_learn"
    gpu_cells = campaign.load_queue("llm_gpu")["cells"]
    assert {cell["gpus"] for cell in gpu_cells} == {1} and all("device=cuda" in cell["overrides"] for cell in gpu_cells)


def test_the_gpu_command_runs_on_cpu_at_tiny_size_and_writes_its_runs_and_table(tiny_llm, tmp_path):
    """``python -m harness.campaign llm_gpu`` with its first entry's cells on CPU at tiny size (2 steps of 2 prompts
    × K = 2 from the tiny model): both methods' runs exported under one results folder with the held-out success
    at step 0 and at the last step, and the report's table regenerated beside them."""
    preset, _, entry = artefacts.queue_entries("llm_gpu")[0]
    entry = {"preset": preset, **entry}
    for key in ("gpus", "gpu_hours"):
        entry.pop(key)
    entry["overrides"] = ["device=cpu", "model=hf", f"model.path={tiny_llm}", "model.gradient_checkpointing=false",
                          "task.K=2", "task.batch_size=2", "task.micro_batch_groups=2", "task.max_completion_length=8",
                          "task.steps=2", "task.eval_every=1", "task.eval_size=2", "task.eval_batch_size=2"]
    queue = tmp_path / "queue.yaml"
    queue.write_text(yaml.safe_dump({"chunk": 1, "cells": [entry]}))
    results = tmp_path / "results"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    done = subprocess.run([sys.executable, "-m", "harness.campaign", str(queue), "--jobs", "1", "--work",
                           str(tmp_path / "work"), "--results", str(results)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = pd.read_csv(results / "llm_gpu_learn" / "llm_gpu_learn.csv").set_index(["row", "stat"])
    assert sorted(table.index) == sorted((row, stat) for row in ("GRPO", "TPO") for stat in ("at_step_0", "final",
                                                                                              "mean"))
    assert set(table.budget) == {"3 seeds × 100 steps (preset)"}  # three offsets of one seed: partial (†) at one
    for algorithm, row in (("tpo", "TPO"), ("grpo", "GRPO")):
        run = results / "runs" / "llm_gpu_learn" / algorithm / "seeds0"
        metrics = pd.read_csv(io.StringIO(gzip.decompress((run / "metrics.csv.gz").read_bytes()).decode()))
        assert list(metrics.step) == [0, 1] and metrics.test_accuracy.between(0, 1).all(), algorithm
        assert table.loc[(row, "at_step_0"), "ours"] == metrics.test_accuracy.iloc[0]
        assert table.loc[(row, "final"), "ours"] == metrics.test_accuracy.iloc[-1]
        assert table.loc[(row, "mean"), "ours"] == pytest.approx(metrics.reward_mean.mean())
