"""The harness end to end: composition errors, outputs, determinism, resume, divergence, multirun isolation."""

from __future__ import annotations

import importlib.metadata
import json
import platform
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import ROOT, compose_config, run_cli, run_config, run_killed_at
from harness.rundir import outputs
from harness.config import build_task
from common.checks import ConfigError
from tasks.base import StepOutput
from harness.trainers import episode, trainer_class


def read_metrics(run_dir: Path) -> pd.DataFrame:
    return pd.read_csv(run_dir / "metrics.csv")


def test_outputs_have_the_documented_shape(tmp_path, tiny_mnist):
    summary = run_config([*tiny_mnist, "algorithm=tpo"], tmp_path)
    frame = read_metrics(tmp_path)
    assert list(frame.columns[:3]) == ["step", "seed", "error"]
    assert sorted(frame["seed"].unique()) == [0, 1]
    assert sorted(frame["step"].unique()) == [0, 10, 20]  # reference labels: after 10(i+1) updates → 10i
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["status"] == summary["status"] == "completed"
    last = frame[frame["step"] == 20].sort_values("seed")["error"].to_numpy()
    final = on_disk["final"]["error"]
    np.testing.assert_allclose(final["per_seed"], last)
    np.testing.assert_allclose(final["mean"], last.mean())
    np.testing.assert_allclose(final["se"], last.std(ddof=0) / np.sqrt(2))
    assert set(on_disk["steps_to"]["error"]) == {"0.05"}


def test_summary_records_the_commit_the_run_launched_with(tmp_path, monkeypatch):
    """A commit made while a run trains is not the code it runs: summary.json keeps the commit of the launch."""
    run_dir = tmp_path / "run"

    def commit_now():
        metrics = run_dir / outputs.METRICS_FILE
        return "after-training" if metrics.exists() and len(metrics.read_text().splitlines()) > 1 else "at-launch"

    for where in ("harness.rundir.outputs.git_commit", "harness.run.git_commit", "harness.rundir.summary.git_commit"):
        monkeypatch.setattr(where, commit_now, raising=False)
    summary = run_config(["task=tabular_single", "algorithm=tpo", "seeds=2", "task.steps=5"], run_dir)
    assert summary["commit"] == "at-launch"
    assert json.loads((run_dir / outputs.SUMMARY_FILE).read_text())["commit"] == "at-launch"


def test_summary_records_the_installed_packages_version(tmp_path):
    """Outside a checkout (an installed wheel) the commit is None: the version names the code. Bugs caught: the key
    dropped, the version of another distribution (or None) recorded."""
    try:
        importlib.metadata.distribution("tpo-bench")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("the suite runs uninstalled (PYTHONPATH=.): no version to record")
    summary = run_config(["task=tabular_single", "algorithm=tpo", "task.steps=3"], tmp_path / "run")
    declared = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    assert json.loads((tmp_path / "run" / outputs.SUMMARY_FILE).read_text())["version"] == declared
    assert summary["version"] == declared


def test_a_run_from_a_checkout_records_the_checkouts_commit():
    """The commit a run records is the repository's HEAD, whichever folder of the package asks."""
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode or not (ROOT / ".git").exists():
        pytest.skip("the tests run outside a git checkout")
    assert outputs.git_commit().removesuffix("-dirty") == head.stdout.strip()


def test_the_commit_is_dirty_with_changed_code_not_with_changed_results(tmp_path, monkeypatch):
    """A changed tracked file marks the commit -dirty, unless it is under results/ (reports a campaign rewrites while
    its runs train); an untracked file never does; outside a checkout there is no commit."""
    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path, check=True,
                              capture_output=True, text=True).stdout.strip()

    monkeypatch.setattr(outputs, "CHECKOUT", tmp_path)
    assert outputs.git_commit() is None
    (tmp_path / "results").mkdir()
    for name in ("code.py", "results/table.md"):
        (tmp_path / name).write_text("one\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "first")
    head = git("rev-parse", "HEAD")
    (tmp_path / "results" / "table.md").write_text("two\n")
    (tmp_path / "new.py").write_text("untracked\n")
    assert outputs.git_commit() == head
    (tmp_path / "code.py").write_text("two\n")
    assert outputs.git_commit() == f"{head}-dirty"


def test_a_run_on_a_gpu_records_its_name_beside_the_hosts_cpu(monkeypatch):
    from harness.trainers.base import device_hardware
    from tasks.models.linear import cpu_model

    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: f"GPU {torch.device(device).index}")
    assert device_hardware(torch.device("cuda", 1)) == {"device": "cuda:1", "cpu": cpu_model(), "gpu": "GPU 1"}
    assert device_hardware("cpu") == {"device": "cpu", "cpu": cpu_model()}


def test_a_seeds_mean_of_a_metric_is_over_its_finite_values(tmp_path):
    """A metric that is infinite at one step (a KL to a snapshot with a zero probability) or NaN between its
    logging steps: each seed's mean is over its finite values, and no seed drops out of the mean over seeds."""
    from harness.rundir.summary import summarize

    pd.DataFrame({"step": [0, 1, 2] * 2, "seed": [0] * 3 + [1] * 3, "error": [0.5, 0.25, 0.0, 0.5, 0.5, 0.5],
                  "kl": [1.0, np.inf, 3.0, np.nan, 4.0, -np.inf]}).to_csv(tmp_path / outputs.METRICS_FILE,
                                                                          index=False)
    mean = summarize(tmp_path, ("error", "kl"), [])["mean"]
    assert mean["kl"]["per_seed"] == [2.0, 4.0] and mean["kl"]["mean"] == 3.0 and mean["kl"]["n"] == 2
    assert mean["error"]["per_seed"] == [0.25, 0.5]


def test_same_config_and_seed_give_identical_metrics(tmp_path, tiny_mnist):
    for name in ("a", "b"):
        run_config([*tiny_mnist, "algorithm=dg"], tmp_path / name)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()


_TINY_TOKEN = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "model.d_model=16",
               "model.layers=1", "model.ffn=32", "task.checkpoint_every=0", "task.reward=terminal"]


@pytest.mark.parametrize("overrides", [["task=tabular_multi", "algorithm=tpo", "task.steps=20"],
                                       [*_TINY_TOKEN, "algorithm=tpo", "task.steps=12"],
                                       [*_TINY_TOKEN, "algorithm=grpo", "task.steps=12"]],
                         ids=["tabular_multi", "token_tpo", "token_grpo"])
def test_seed_batching_is_invisible_to_each_seed(tmp_path, overrides):
    """Bit for bit: seed 2 of a 6-seed run is seed 2 run alone (the token task's Muon bias corrections reach
    exponents where torch's pow rounds by tensor size, 0.95**6 among them, within a few episodes of 4 epochs)."""
    run_config([*overrides, "seeds=6"], tmp_path / "batched")  # enough elements for pow's vectorised loop
    run_config([*overrides, "seeds=1", "seed_offset=2"], tmp_path / "alone")
    batched = read_metrics(tmp_path / "batched")
    alone = read_metrics(tmp_path / "alone")
    pd.testing.assert_frame_equal(batched[batched.seed == 2].reset_index(drop=True), alone, check_exact=True)


def test_common_random_numbers_across_algorithms():
    tpo = build_task(compose_config(["task=mnist_bandit", "algorithm=tpo", "seeds=2"]))
    pg = build_task(compose_config(["task=mnist_bandit", "algorithm=pg", "seeds=2"]))
    for name, value in tpo.params.items():
        assert torch.equal(value, pg.params[name])
    assert not torch.equal(tpo.params["w0"][0], tpo.params["w0"][1])  # seeds differ from each other


@pytest.mark.parametrize("task", ["tabular_single", "mnist_bandit"])
def test_resume_after_interrupt_matches_uninterrupted_run(tmp_path, monkeypatch, task, tiny_mnist):
    overrides = tiny_mnist if task == "mnist_bandit" else [
        "task=tabular_single", "seeds=3", "task.steps=30", "task.checkpoint_every=10"]
    overrides = [*overrides, "algorithm=tpo"]
    run_config(overrides, tmp_path / "full")

    task_cls = type(build_task(compose_config(overrides)))
    run_killed_at(overrides, tmp_path / "killed", task_cls, 25)
    assert json.loads((tmp_path / "killed" / "summary.json").read_text())["status"] == "interrupted"
    assert len(read_metrics(tmp_path / "killed")) < len(read_metrics(tmp_path / "full"))  # it stopped mid-way
    stepped, original = [], trainer_class(task_cls).episode

    def counted(task, step):
        stepped.append(step)
        return original(task, step)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(counted))
    summary = run_config([*overrides, "trainer.resume=true"], tmp_path / "killed")
    assert summary["status"] == "completed"
    assert stepped == list(range(20, 30)) and summary["resumed_from"] == [20]  # from the checkpoint, not step 0
    assert (tmp_path / "full" / "metrics.csv").read_bytes() == (tmp_path / "killed" / "metrics.csv").read_bytes()


def test_resume_after_sigkill(tmp_path):
    """A real kill -9 mid-run: resuming from the last checkpoint reproduces the uninterrupted numbers."""
    # ~0.6 ms a step: the kill after the first checkpoint (step 50) lands over a second before the end
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=3000", "task.checkpoint_every=50",
            "logger=none"]
    run_cli([*args, f"hydra.run.dir={tmp_path / 'full'}"], tmp_path)
    killed = tmp_path / "killed"
    env = {"PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *args, f"hydra.run.dir={killed}"], cwd=tmp_path,
                               env={**__import__("os").environ, **env}, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (killed / "checkpoint.pt").exists() and time.time() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    fingerprint = json.loads((killed / "identity.json").read_text())["fingerprint"]
    stopped_at = outputs.load_checkpoint(killed, fingerprint)["step"]
    assert 0 < stopped_at < 3000  # killed mid-run, with a checkpoint
    assert len(read_metrics(killed)) < len(read_metrics(tmp_path / "full"))
    result = run_cli([*args, f"hydra.run.dir={killed}", "trainer.resume=true"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((killed / "summary.json").read_text())["resumed_from"] == [stopped_at]
    assert (tmp_path / "full" / "metrics.csv").read_bytes() == (killed / "metrics.csv").read_bytes()


def test_a_diverged_seed_is_marked_and_the_others_continue(tmp_path, monkeypatch):
    overrides = ["task=tabular_single", "algorithm=pg", "seeds=3", "task.steps=10"]
    task_cls = type(build_task(compose_config(overrides)))
    trainer = trainer_class(task_cls)
    original = trainer.episode

    def poisoned(task, step):
        out = original(task, step)
        if step >= 4:
            out = StepOutput(loss=out.loss.clone().index_fill_(0, torch.tensor([1]), float("nan")),
                             metrics=out.metrics, log_step=out.log_step)
        return out

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(poisoned))
    summary = run_config(overrides, tmp_path)
    assert summary["status"] == "diverged"
    assert summary["seed_status"] == {"0": "completed", "1": "diverged", "2": "completed"}
    assert summary["diverged_at_step"] == {"1": 4}
    frame = read_metrics(tmp_path)
    assert frame[(frame.seed == 1) & (frame.step >= 4)]["error"].isna().all()
    assert frame[frame.seed != 1]["error"].notna().all()
    assert summary["final"]["error"]["n"] == 2


def test_divergence_between_recorded_steps_is_dated_to_its_first_non_finite_step(tmp_path, monkeypatch):
    """MNIST records metrics every ``eval_every`` steps; the losses in between are checked then, each seed dated to
    its own first non-finite loss (a transient one counts)."""
    overrides = ["task=mnist_bandit", "task.eval_every=5", "task.steps=10", "task.batch_size=16", "seeds=3",
                 "task.checkpoint_every=0"]
    task_cls = type(build_task(compose_config(overrides)))
    trainer = trainer_class(task_cls)
    original = trainer.episode
    poison = {1: range(3, 10), 2: [7]}  # seed index → steps with a NaN loss

    def poisoned(task, step):
        out = original(task, step)
        loss = out.loss.clone()
        for index, steps in poison.items():
            if step in steps:
                loss[index] = float("nan")
        return StepOutput(loss=loss, metrics=out.metrics, log_step=out.log_step)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(poisoned))
    summary = run_config(overrides, tmp_path)
    assert summary["diverged_at_step"] == {"1": 3, "2": 7}
    assert summary["seed_status"] == {"0": "completed", "1": "diverged", "2": "diverged"}
    error = read_metrics(tmp_path).pivot(index="step", columns="seed", values="error")  # evaluations after 5, 10
    assert error[0].notna().all() and error[1].isna().all() and error[2].isna().tolist() == [False, True]


def test_a_divergence_recorded_before_an_interruption_keeps_its_step_after_resuming(tmp_path, monkeypatch):
    overrides = ["task=mnist_bandit", "task.eval_every=5", "task.steps=10", "task.batch_size=16", "seeds=2",
                 "task.checkpoint_every=5"]
    task_cls = type(build_task(compose_config(overrides)))
    trainer = trainer_class(task_cls)
    original = trainer.episode

    def poisoned(task, step):  # seed 1's loss is NaN from step 3 on
        out = original(task, step)
        loss = out.loss.clone()
        loss[1] = float("nan") if step >= 3 else loss[1]
        return StepOutput(loss=loss, metrics=out.metrics, log_step=out.log_step)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(poisoned))
    run_killed_at(overrides, tmp_path, task_cls, 7)  # after the checkpoint at step 5
    summary = run_config([*overrides, "trainer.resume=true"], tmp_path)  # resumes at 5, NaN again from there
    assert summary["resumed_from"] == [5] and summary["diverged_at_step"] == {"1": 3}


def test_unknown_names_fail_before_work_with_the_valid_choices(tmp_path):
    result = run_cli(["algorithm=nope", "logger=none"], tmp_path)
    assert result.returncode != 0
    assert "algorithm/nope" in result.stderr and "tpo_no_anchor" in result.stderr and "grpo_masked" in result.stderr
    result = run_cli(["task=nope", "logger=none"], tmp_path)
    assert result.returncode != 0 and "tabular_single" in result.stderr and "mnist_bandit" in result.stderr
    result = run_cli(["trainer.stepz=3", "logger=none"], tmp_path)
    assert result.returncode != 0 and "trainer.stepz" in result.stderr


def test_an_algorithm_the_task_cannot_run_is_rejected(tmp_path):
    with pytest.raises(ConfigError, match="tpo_token cannot run on task=mnist_bandit .*token_candidates.*; "
                                          "valid algorithms for mnist_bandit: tpo, group_pg, grpo, ppo, dg, pg, ce, "
                                          "rloo, dr_grpo, dapo, gspo, cispo$"):
        build_task(compose_config(["task=mnist_bandit", "algorithm=tpo_token"]))
    result = run_cli(["task=tabular_single", "algorithm=tpo_no_anchor", "logger=none"], tmp_path)
    assert result.returncode == 2
    assert "valid algorithms for tabular_single: tpo, group_pg, grpo, ppo, dg, pg, rloo" in result.stderr
    assert not list(tmp_path.rglob("metrics.csv"))


@pytest.mark.parametrize("override,key", [("task.eval_step_label=later", "task.eval_step_label"),
                                          ("seeds=0", "seeds"), ("device=tpu", "device"),
                                          ("algorithm.zero_variance=maybe", "zero_variance"),
                                          ("algorithm.epochs=4", "algorithm.epochs")])
def test_bad_values_name_the_key(override, key):
    with pytest.raises((ConfigError, ValueError), match=key):
        task = build_task(compose_config(["task=mnist_bandit", "algorithm=tpo", override]))
        episode(task, 0)


@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]])
def test_a_failing_job_does_not_stop_the_sweep(tmp_path, launcher):
    result = run_cli(["-m", "task=tabular_single", "algorithm=tpo,tpo_no_anchor,pg", "seeds=2", "task.steps=5",
                      "logger=none", f"hydra.sweep.dir={tmp_path / 'sweep'}", *launcher], tmp_path)
    statuses = {json.loads(p.read_text())["algorithm"]: json.loads(p.read_text())["status"]
                for p in (tmp_path / "sweep").rglob("summary.json")}
    assert statuses == {"tpo": "completed", "tpo_no_anchor": "failed", "pg": "completed"}, result.stderr
    failed = next(p.parent for p in (tmp_path / "sweep").rglob("summary.json") if "tpo_no_anchor" in str(p))
    assert "valid algorithms" in (failed / "error.txt").read_text()


def test_wandb_failure_warns_once_and_training_continues(tmp_path, monkeypatch, tiny_mnist):
    import wandb

    def broken_init(*args, **kwargs):
        raise RuntimeError("no W&B today")

    monkeypatch.setattr(wandb, "init", broken_init)
    with pytest.warns(UserWarning, match="W&B logging disabled"):
        summary = run_config([*tiny_mnist, "algorithm=pg", "logger=wandb"], tmp_path)
    assert summary["status"] == "completed"
    assert len(read_metrics(tmp_path)) == 6


def test_wandb_offline_writes_one_run_per_seed(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    run_config(["task=tabular_single", "algorithm=tpo", "seeds=2", "task.steps=5", "logger=wandb",
                "logger.mode=offline", "logger.init_timeout=120", "experiment_name=wb"], tmp_path)  # a cold start
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2
    assert all(list(run.glob("*.wandb")) for run in runs)


def test_mnist_bandit_learns(tmp_path):
    summary = run_config(["task=mnist_bandit", "algorithm=tpo", "seeds=2", "task.steps=300",
                          "task.eval_every=100", "task.eval_step_label=updates"], tmp_path)
    frame = read_metrics(tmp_path)
    initial = frame[frame.step == 0]["error"].mean()
    assert initial > 0.7  # an untrained 10-way policy
    assert summary["final"]["error"]["mean"] < 0.25


REUSE_PROBE = """
import ctypes, resource
from harness import process
KEEPS_FREED_MEMORY = process.tune_memory()
libc = ctypes.CDLL("libc.so.6")
libc.prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: 4 KB pages even where transparent huge pages are "always"
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def faults_of_one_round():  # a training step in miniature: 3 blocks of 8 MB live together, then freed together
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    blocks = [libc.malloc(8 * 2**20) for _ in range(3)]
    for block in blocks:
        ctypes.memset(block, 1, 8 * 2**20)
    for block in blocks:
        libc.free(block)
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
print(KEEPS_FREED_MEMORY, *[faults_of_one_round() for _ in range(6)])
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="tunes glibc's allocator")
@pytest.mark.parametrize("keep", ["1", "0"])
def test_freed_memory_is_kept_for_reuse_without_page_faults(keep):
    """The allocator under every CPU tensor keeps freed blocks mapped (the probe calls it directly: torch's
    aligned allocations add fragmentation that makes a tensor-level probe depend on allocation history)."""
    env = {"TPO_BENCH_KEEP_FREED_MEMORY": keep, "THP_MEM_ALLOC_ENABLE": "0", "PATH": "", "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", REUSE_PROBE], env=env, capture_output=True, text=True, check=True)
    kept, *faults = out.stdout.split()
    faults = [int(count) for count in faults]
    assert faults[0] > 6000  # 6,144 pages of 4 KB touched for the first time
    if keep == "1":
        assert kept == "True" and sum(faults[-3:]) < 64  # the heap keeps the blocks, handed out again mapped
    else:
        assert kept == "False" and min(faults[-3:]) > 2000  # glibc returned them to the system: pages fault again


def _subnormals_flushed() -> bool:
    return bool((torch.tensor([1e-39]) * 1.0 == 0).item())  # 1e-39 is subnormal in float32


@pytest.mark.parametrize("flush", [True, False])
def test_subnormals_are_flushed_while_training_only(tmp_path, monkeypatch, flush):
    from tasks.tabular import TabularSingle

    seen, report = [], TabularSingle.report
    monkeypatch.setattr(TabularSingle, "report",
                        lambda self, i, batches: (seen.append(_subnormals_flushed()), report(self, i, batches))[1])
    run_config(["task=tabular_single", "algorithm=tpo", "task.steps=3", "logger=none",
                f"flush_denormal={str(flush).lower()}"], tmp_path)
    assert seen == [flush] * 3
    assert not _subnormals_flushed()  # the process default is restored
