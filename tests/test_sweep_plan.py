"""The line a sweep prints before its first job: its size and its CPU-hours estimated from committed runs."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from omegaconf import OmegaConf

from harness.sweep import sweep_jobs, sweep_plan

STEPS = 1000


def committed(runs: Path, preset: str, cell: str, config: dict, seeds: int, cpu_seconds: float) -> None:
    folder = runs / preset / cell
    folder.mkdir(parents=True)
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    (folder / "summary.json").write_text(json.dumps({
        "task": config["task"]["name"], "algorithm": config["algorithm"]["name"], "seeds": list(range(seeds)),
        "steps": STEPS, "cpu_seconds": cpu_seconds, "hardware": {"device": "cpu"}}))


def launch(params: dict, command_line: list[str]):
    """The config a multirun's callbacks see: the preset's sweep and the command line's overrides."""
    return OmegaConf.create({
        "experiment_name": "p", "seeds": 20, "task": {"name": "token_reversal", "H": 7, "steps": STEPS},
        "algorithm": {"name": "tpo"},
        "hydra": {"sweeper": {"params": params}, "overrides": {"task": command_line}}})


def test_the_plan_counts_the_product_and_prices_each_job_by_its_own_committed_runs(tmp_path):
    """The preset sweeps algorithm × H (2 × 2 jobs); the command line sets seeds=4 for every job. Committed runs at
    H = 7 cost 2 (TPO) and 6 (GRPO) CPU-seconds per seed-step, the H = 10 GRPO run 9; TPO at H = 10 has none, so it
    is priced by TPO's runs in any preset of the task (an H = 7 run elsewhere: 4). Bugs caught: the command line's
    seeds ignored (20 seeds priced), jobs priced by the first matching run whatever their H, a missing job
    dropped instead of priced by its task and algorithm, ``experiment=`` or ``seeds=`` required to match a
    recorded config value (no run ever matches: every job priced by task and algorithm)."""
    runs = tmp_path / "runs"
    for algorithm, H, rate in (("tpo", 7, 2.0), ("grpo", 7, 6.0), ("grpo", 10, 9.0)):
        committed(runs, "p", f"{algorithm}_h{H}", {"task": {"name": "token_reversal", "H": H},
                                                   "algorithm": {"name": algorithm}}, 5, rate * 5 * STEPS)
    committed(runs, "other", "tpo", {"task": {"name": "token_reversal", "H": 7}, "algorithm": {"name": "tpo"}}, 2,
              4.0 * 2 * STEPS)
    config = launch({"algorithm": "tpo,grpo", "task.H": "7,10"}, ["experiment=p", "seeds=4"])
    assert sorted(map(tuple, sweep_jobs(config))) == sorted(
        ("algorithm=" + a, "task.H=" + h, "experiment=p", "seeds=4") for a in ("tpo", "grpo") for h in ("7", "10"))
    hours = (2.0 + 6.0 + 9.0 + (2.0 * 5 * STEPS + 4.0 * 2 * STEPS) / (7 * STEPS)) * 4 * STEPS / 3600
    line = sweep_plan(config, runs)
    assert line.startswith(f"sweep p: 4 job(s), {4 * 4 * STEPS:,} seed-steps in all; about {hours:.3g} CPU-hours")


def test_jobs_without_any_committed_run_of_their_task_and_algorithm_are_counted_apart(tmp_path):
    runs = tmp_path / "runs"
    committed(runs, "p", "tpo", {"task": {"name": "token_reversal", "H": 7}, "algorithm": {"name": "tpo"}}, 2,
              2 * 3600.0)  # 3.6 CPU-seconds per seed-step: 20 seeds × 1,000 steps are 20 CPU-hours
    line = sweep_plan(launch({"algorithm": "tpo,dg"}, ["experiment=p"]), runs)
    assert "about 20 CPU-hours for 1 of them (the other 1: no committed run of their task and algorithm" in line


def test_a_sweep_over_tasks_counts_each_tasks_own_steps(tmp_path):
    """A preset sweeping ``task=`` with no steps of its own: each job's episodes are its task's (conf/task), not the
    launch's first task's. Bug caught: every job counted at the composed config's task.steps."""
    from harness import locations

    steps = {task: int(OmegaConf.load(locations.CONF / "task" / f"{task}.yaml").steps)
             for task in ("tabular_single", "tabular_multi")}
    config = launch({"task": "tabular_single,tabular_multi"}, ["experiment=p", "seeds=3"])
    config.task.name, config.task.steps = "tabular_single", steps["tabular_single"]
    line = sweep_plan(config, tmp_path / "runs")
    assert line.startswith(f"sweep p: 2 job(s), {3 * sum(steps.values()):,} seed-steps in all")


def test_a_sweep_under_an_hour_is_priced_in_minutes(tmp_path):
    runs = tmp_path / "runs"
    committed(runs, "p", "tpo", {"task": {"name": "token_reversal", "H": 7}, "algorithm": {"name": "tpo"}}, 20,
              1800.0)  # 0.09 CPU-seconds per seed-step: 20 seeds × 1,000 steps are half a CPU-hour
    assert "; about 30 CPU-minutes, as committed runs" in sweep_plan(launch({"algorithm": "tpo"}, []), runs)
