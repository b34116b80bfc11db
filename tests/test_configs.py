"""Smoke tests: every experiment preset and every task × algorithm pair composes and runs at tiny size."""

from __future__ import annotations

import itertools

import pytest

from algorithms import ALGORITHMS
from conftest import CONF, compose_config, run_config
from llm_helpers import llm_presets
from harness.config import build_task
from harness.config import compose_config as harness_compose
from tasks import TASKS, get_task
from common.checks import ConfigError

# LLM tasks and their presets need a language model: tests/test_llm_*.py cover them.
LLM_TASKS = {name for name, entry in TASKS.items() if entry.path.startswith("tasks.llm.")}
TOY_TASKS = sorted(set(TASKS) - LLM_TASKS)
EXPERIMENTS = sorted({p.stem for p in (CONF / "experiment").glob("*.yaml")} - set(llm_presets(LLM_TASKS)))
TINY = {"mnist_bandit": ["task.steps=4", "task.eval_every=2"], "tabular_single": ["task.steps=3"],
        "tabular_multi": ["task.steps=3"],
        "token_reversal": ["task.steps=2", "task.H=3", "task.batch_size=4", "task.K=2"]}


def sweep_combinations(experiment: str) -> list[list[str]]:
    cfg = harness_compose([f"experiment={experiment}"], with_hydra=True)
    params = cfg.hydra.sweeper.params or {}
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in params.items()]
    return [list(combo) for combo in itertools.product(*axes)]


def test_every_algorithm_and_task_has_a_config():
    assert sorted(p.stem for p in (CONF / "algorithm").glob("*.yaml")) == sorted(ALGORITHMS)
    assert sorted(p.stem for p in (CONF / "task").glob("*.yaml")) == sorted(TASKS)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_preset_runs_at_tiny_size(experiment, tmp_path):
    combos = sweep_combinations(experiment)
    assert combos, f"{experiment} defines no sweep"
    for index, combo in enumerate(combos):
        base = compose_config([f"experiment={experiment}", *combo])
        overrides = [f"experiment={experiment}", *combo, "seeds=2", *TINY[base.task.name]]
        summary = run_config(overrides, tmp_path / str(index))
        assert summary["status"] == "completed", (combo, summary)


@pytest.mark.parametrize("task", TOY_TASKS)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_task_algorithm_pairs_run_or_fail_early(task, algorithm, tmp_path):
    overrides = [f"task={task}", f"algorithm={algorithm}", "seeds=2", *TINY[task]]
    if algorithm in get_task(task).supported_algorithms():
        assert run_config(overrides, tmp_path)["status"] == "completed"
    else:
        with pytest.raises(ConfigError, match=f"valid algorithms for {task}"):
            build_task(compose_config(overrides))


def test_slurm_launcher_configs_compose():
    for launcher in ("submitit_slurm_cpu", "submitit_slurm_gpu"):
        cfg = harness_compose([f"hydra/launcher={launcher}"], with_hydra=True)
        assert cfg.hydra.launcher._target_.endswith("SlurmLauncher")
        assert cfg.hydra.launcher.cpus_per_task >= 1
