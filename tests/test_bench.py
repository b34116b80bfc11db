"""The bench scripts' own logic: the GPU projection expands presets as Hydra does, its agreement check compares
every task's metrics, and it refuses to run without CUDA; the phase profiler attributes a step's time to its phases;
the thread comparison reads the token bench's output; the workload bench counts decoded rows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import episode_workload  # noqa: E402
import gpu_side_by_side  # noqa: E402
import gpu_sweep_projection  # noqa: E402
import profile_phases  # noqa: E402
import threads  # noqa: E402


@pytest.mark.parametrize("preset,jobs,seeds,episodes", [("table3_terminal", 40, 20, 2000),
                                                       ("table1_vocab_sweep", 16, 20, 1000),
                                                       ("table2_variations", 32, 10, 1000)])
def test_projection_expands_every_job_of_a_preset(preset, jobs, seeds, episodes):
    expanded, n_seeds, n_episodes = gpu_sweep_projection.preset_jobs(preset)
    assert (len(expanded), n_seeds, n_episodes) == (jobs, seeds, episodes)
    assert len({tuple(job) for job in expanded}) == jobs
    assert all(job[0] == f"experiment={preset}" for job in expanded)


@pytest.mark.parametrize("overrides", gpu_sweep_projection.CHECKS, ids=" ".join)
def test_projection_checks_compare_logged_metrics_of_every_task(overrides):
    """The GPU run's CPU-vs-GPU agreement check, run CPU against CPU: it compares metrics for every checked
    configuration (not an empty set), and the same seeds repeat exactly."""
    diffs = gpu_sweep_projection.check(overrides, steps=2, devices=("cpu", "cpu"))["max_abs_diff"]
    assert "error" in diffs and all(diff == 0 for diff in diffs.values())


@pytest.fixture
def stub_cuda(monkeypatch):
    """A visible "GPU" for the projection's flow; its episode timings are stubbed by each test."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda: "stub")
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 0)


@pytest.mark.usefixtures("stub_cuda")
def test_projection_writes_every_section_of_its_report(tmp_path, monkeypatch):
    """The GPU run's flow without a GPU: episode timings stubbed at 0.5 s, every speed setting and the projected
    hours of a table (40 jobs × 2,000 episodes) reach the JSON report."""
    monkeypatch.setattr(gpu_sweep_projection, "seconds_per_episode", lambda overrides, seeds, episodes=2: 0.5)
    monkeypatch.setattr(sys, "argv", ["gpu_sweep_projection.py", "--out", str(tmp_path), "--skip-checks",
                                      "--tables", "table3_terminal"])
    gpu_sweep_projection.main()
    report = json.loads((tmp_path / "gpu_sweep_projection.json").read_text())
    # speed settings: the 5 Table 3 methods, PPO and DG matched by interactions, TPO with dedup, dense V = 2 and 16
    assert report["gpu"] == "stub" and report["complete"] and len(report["speed"]) == 5 + 2 + 1 + 2
    assert all(row["episodes_per_s"] == 2.0 for row in report["speed"])
    table = report["tables"]["table3_terminal"]
    assert table["jobs"] == 40 and table["projected_hours"] == pytest.approx(40 * 2000 * 0.5 / 3600)


@pytest.mark.usefixtures("stub_cuda")
def test_projection_stopped_midway_keeps_what_it_measured(tmp_path, monkeypatch):
    calls = []

    def timing(overrides, seeds, episodes=2):
        if len(calls) == 3:
            raise KeyboardInterrupt  # as a run reaching its time limit
        calls.append(overrides)
        return 0.5

    monkeypatch.setattr(gpu_sweep_projection, "seconds_per_episode", timing)
    monkeypatch.setattr(sys, "argv", ["gpu_sweep_projection.py", "--out", str(tmp_path), "--skip-checks"])
    with pytest.raises(KeyboardInterrupt):
        gpu_sweep_projection.main()
    report = json.loads((tmp_path / "gpu_sweep_projection.json").read_text())
    assert not report["complete"] and len(report["speed"]) == 3
    calls.clear()  # now stopped in a table's fourth job: the three timed before it are kept
    monkeypatch.setattr(gpu_sweep_projection, "seconds_per_episode",
                        lambda overrides, seeds, episodes=2: timing(overrides, seeds) if "experiment" in overrides[0]
                        else 0.5)
    monkeypatch.setattr(sys, "argv", ["gpu_sweep_projection.py", "--out", str(tmp_path), "--skip-checks",
                                      "--tables", "table1_vocab_sweep"])
    with pytest.raises(KeyboardInterrupt):
        gpu_sweep_projection.main()
    table = json.loads((tmp_path / "gpu_sweep_projection.json").read_text())["tables"]["table1_vocab_sweep"]
    assert len(table["per_job_s_per_episode"]) == 3


@pytest.mark.usefixtures("stub_cuda")
def test_a_failing_setting_is_reported_and_the_others_still_measured(tmp_path, monkeypatch):
    """One lent GPU session runs the script once: an error in one setting must not lose the rest."""
    def check(overrides):
        if overrides is gpu_sweep_projection.CHECKS[1]:
            raise RuntimeError("CUDA error: an illegal memory access\nmore lines")
        return {"config": " ".join(overrides), "max_abs_diff": {"error": 0.0}}

    def timing(overrides, seeds, episodes=2):
        if "algorithm=grpo" in overrides or "task.V=4" in overrides:
            raise ValueError("boom")
        return 0.5

    monkeypatch.setattr(gpu_sweep_projection, "check", check)
    monkeypatch.setattr(gpu_sweep_projection, "seconds_per_episode", timing)
    monkeypatch.setattr(sys, "argv", ["gpu_sweep_projection.py", "--out", str(tmp_path), "--tables",
                                      "table1_vocab_sweep"])
    gpu_sweep_projection.main()
    report = json.loads((tmp_path / "gpu_sweep_projection.json").read_text())
    assert report["complete"] and len(report["checks"]) == len(gpu_sweep_projection.CHECKS)
    assert report["checks"][1]["error"] == "RuntimeError: CUDA error: an illegal memory access"
    assert [row.get("error") for row in report["speed"]].count("ValueError: boom") == 1  # GRPO, prompt-matched
    assert len(report["speed"]) == 10
    table = report["tables"]["table1_vocab_sweep"]
    assert len(table["errors"]) == 4 and len(table["per_job_s_per_episode"]) == 12  # V = 4: its 4 algorithms
    assert table["projected_hours"] == pytest.approx(12 * 1000 * 0.5 / 3600)


def test_workload_counts_the_prefix_rows_the_sampler_decodes():
    answers = torch.tensor([[[[0, 0, 1], [0, 1, 1], [0, 0, 0]], [[1, 1, 1], [1, 1, 1], [1, 1, 0]]]])  # (1, 2, 3, 3)
    # prompt 0: depth 1 {0}, depth 2 {00, 01}; prompt 1: depth 1 {1}, depth 2 {11}
    assert episode_workload.decoded_rows(answers) == 5


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_projection_refuses_without_cuda():
    result = subprocess.run([sys.executable, "bench/gpu_sweep_projection.py"], cwd=ROOT, capture_output=True, text=True,
                            env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=120)
    assert result.returncode == 2 and "no CUDA device" in result.stderr


def test_phase_profile_of_a_token_episode_adds_up():
    overrides = ["task=token_reversal", "task.H=3", "task.batch_size=8", "task.K=4", "algorithm=tpo"]
    result = profile_phases.profile(overrides, seeds=2, episodes=2, warm=1)
    phases = result["phases"]
    assert {"rollout", "forward", "optimizer", "rest"} <= set(phases)
    assert sum(cpu for cpu, _ in phases.values()) == pytest.approx(result["cpu"], rel=1e-6)
    assert all(cpu >= 0 for name, (cpu, _) in phases.items() if name != "rest")
    assert result["flops"] > 0


def test_llm_step_profile_takes_an_inner_phase_out_of_the_outer_one():
    """Generation runs inside TRL's rollout, the loss forward with and without gradients: each phase keeps its own
    seconds. Bug caught: an inner phase counted in the outer one as well (a step's phases adding up to more than the
    step), or a phase named by the grad mode attributed to the wrong one."""
    import llm_step_profile

    clock = llm_step_profile.PhaseClock()
    generation = clock.timed("generation", lambda: time.sleep(0.2))
    rollout = clock.timed("rollout rest", lambda: (generation(), time.sleep(0.01)))
    rollout()
    assert clock.wall["generation"] >= 0.2 and clock.wall["rollout rest"] < 0.15
    logps = clock.timed(lambda: "loss forward" if torch.is_grad_enabled() else "no-grad logps", lambda: None)
    with torch.no_grad():
        logps()
    assert "no-grad logps" in clock.wall and "loss forward" not in clock.wall


def test_logging_cost_times_each_logging_call_and_the_wandb_starts(tmp_path, monkeypatch):
    """One short offline-W&B run: every phase timed, the run starts apart (one per seed, in the mirror's thread).
    Bug caught: a timed target that no longer exists (the bench failing with an AttributeError)."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))  # the bench points it at its run folder: restored after
    spent = profile_phases.logging_cost(["task=tabular_single", "algorithm=tpo"], seeds=2, steps=5)
    assert {"csv", "wandb log", "wandb finish", "wandb start", "run"} <= set(spent)
    assert all(seconds >= 0 for seconds in spent.values()) and spent["wandb start"] > 0


def test_thread_comparison_reads_the_token_benchs_one_seed_row():
    job = threads.launch(1, 1, ("--H", "2", "--K", "2", "--batch-size", "4"))
    assert 0 < threads.seconds_per_episode(job) < 60


def test_side_by_side_writes_mnist_idx_files_an_idx_reader_reads_back(tmp_path):
    import reference_side_by_side as side
    from tasks.mnist_data import read_idx

    generator = np.random.default_rng(0)
    arrays = {"train_images": generator.integers(0, 256, (5, 784), dtype=np.uint8),
              "train_labels": generator.integers(0, 10, 5), "test_images": generator.integers(0, 256, (3, 784),
                                                                                              dtype=np.uint8),
              "test_labels": generator.integers(0, 10, 3)}
    side.write_mnist_idx(tmp_path, arrays)
    images = read_idx(tmp_path / "train-images-idx3-ubyte.gz")
    assert images.shape == (5, 28, 28) and np.array_equal(images.reshape(5, 784), arrays["train_images"])
    assert np.array_equal(read_idx(tmp_path / "t10k-labels-idx1-ubyte.gz"), arrays["test_labels"])


def test_side_by_side_differences_each_sides_own_budgets(monkeypatch):
    """A whole-run setting times the reference over 10-160 episodes and ours over 10-2,000: each side's cost per
    episode is its own long-minus-short over its own span (timings here: start-up + slope x budget)."""
    import reference_side_by_side as side

    slope, start = {"reference": 2.0, "ours": 0.25}, {"reference": 30.0, "ours": 5.0}
    order = []

    def fake_timed(command, core, env, cwd):
        who = "reference" if "tpo.cli" in command else "ours"
        budget = int(command[command.index("--num-episodes") + 1]) if who == "reference" else \
            int(next(arg for arg in command if arg.startswith("task.steps=")).split("=")[1])
        order.append((who, budget))
        return start[who] + slope[who] * budget

    monkeypatch.setattr(side, "timed", fake_timed)
    monkeypatch.setattr(side, "write_mnist_idx", lambda directory: None)
    row = side.measure("terminal_h10_tpo_run", side.SETTINGS["terminal_h10_tpo_run"], Path("python"), Path("ref"),
                       repeats=1, core=0)
    assert order == [("reference", 10), ("ours", 10), ("reference", 160), ("ours", 2000)]
    assert row["reference"] == pytest.approx(2.0) and row["ours"] == pytest.approx(0.25)
    assert row["ratio"] == pytest.approx(8.0) and row["budgets"] == {"reference": [10, 160], "ours": [10, 2000]}
    assert "terminal_h10_tpo_run" not in side.QUICK and "terminal_h10_tpo" in side.QUICK


def test_reference_curves_refuses_a_folder_that_is_not_the_papers_repository_before_building_anything(tmp_path,
                                                                                                     capsys):
    """``bench/reference_curves.py --reference`` names the paper's checkout; any other folder is refused in one
    line (exit 2) before its environment is built or an output written. Bug caught: the check dropped (pip would
    build the reference's venv, then the run fail deep in an import)."""
    import reference_curves

    with pytest.raises(SystemExit) as stop:
        reference_curves.main(["--reference", str(tmp_path), "--algorithm", "dg", "--V", "16", "--seeds", "0-1",
                               "--venv", str(tmp_path / "venv"), "--out", str(tmp_path / "out")])
    assert stop.value.code == 2 and "not a checkout of the paper's repository" in capsys.readouterr().err
    assert not (tmp_path / "venv").exists() and not (tmp_path / "out").exists()


def test_section4_whole_run_trains_plain_and_fast_to_the_same_digest(monkeypatch):
    """The whole-run bench's two variants agree bit for bit (its check), and the digest covers every episode's
    metrics: a metric changed after training (parameters untouched) changes it. Bug caught: the digest reading the
    CPU time, or skipping the metrics (``digest.update`` of the metrics loop → ``pass``)."""
    import section4_whole_run

    overrides = ["algorithm=tpo", "algorithm.epochs=1", "task.batch_size=8", "task.K=4"]
    plain, fast = (section4_whole_run.train(overrides, 1, 2, fast, 0) for fast in (False, True))
    assert plain["digest"] == fast["digest"] and plain["cpu"] > 0 and fast["cpu"] > 0
    real = section4_whole_run.episode

    def shifted(task, step):
        out = real(task, step)
        out.metrics["error"] = out.metrics["error"] + 1.0
        return out

    monkeypatch.setattr(section4_whole_run, "episode", shifted)
    assert section4_whole_run.train(overrides, 1, 2, True, 0)["digest"] != fast["digest"]


TINY_TERMINAL = ["task=token_reversal", "task.reward=terminal", "task.H=3", "task.V=2", "task.K=2",
                 "task.batch_size=4", "algorithm=tpo"]


def test_runs_side_by_side_report_every_runs_episodes_and_their_seed_episodes_per_second(tmp_path):
    """What the GPU measurement does, on CPU cores at a tiny size: N processes past one barrier, each counting its
    episodes; seed-episodes per second is theirs summed, the gain its ratio to one process's."""
    assert gpu_side_by_side.main(["--device", "cpu", "--processes", "1,2", "--seconds", "1", "--seeds", "2",
                                  "--out", str(tmp_path), *TINY_TERMINAL]) == 0
    report = json.loads((tmp_path / "gpu_side_by_side.json").read_text())
    one, two = report["runs"]
    assert (one["processes"], two["processes"]) == (1, 2) and len(two["episodes"]) == 2
    for run in (one, two):
        assert all(episodes > 0 for episodes in run["episodes"]) and all(s >= 1 for s in run["seconds"])
        assert run["seed_episodes_per_s"] == pytest.approx(
            sum(episodes * 2 / seconds for episodes, seconds in zip(run["episodes"], run["seconds"])))
    assert two["gain_over_one"] == pytest.approx(two["seed_episodes_per_s"] / one["seed_episodes_per_s"])


def test_a_run_that_cannot_start_side_by_side_is_reported_and_the_others_stop(tmp_path):
    assert gpu_side_by_side.main(["--device", "cpu", "--processes", "2", "--seconds", "1", "--seeds", "1",
                                  "--out", str(tmp_path), *TINY_TERMINAL[:-1], "algorithm=nosuch"]) == 0
    (run,) = json.loads((tmp_path / "gpu_side_by_side.json").read_text())["runs"]
    assert run["processes"] == 2 and "nosuch" in run["error"]


def test_side_by_side_refuses_without_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is visible")
    assert gpu_side_by_side.main(["--processes", "1"]) == 2
    assert "no CUDA device is visible" in capsys.readouterr().err
