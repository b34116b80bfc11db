"""The W&B mirror (harness/tracking.py), read back from offline runs with wandb's own record format: a sweep's points
are groups of their own, ``step`` is every metric's x-axis, rows arrive as they are produced (not at checkpoints),
starting W&B or a W&B that cannot keep up never holds training, each seed's summary is summary.json's, and TRL's own
metrics reach the seed's run. Above logger.seed_runs seeds one run holds every seed as columns of its rows, and the
report reads it back as it reads a run per seed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
import threading
import time
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import ROOT, compose_config, run_cli, run_config, run_killed_at
from harness import tracking, wandb_offline
from harness.wandb_offline import item_key as key
from harness.trainers import trainer_class
from harness.tracking import wandb_group
from tasks import get_task

OFFLINE = ["logger=wandb", "logger.mode=offline"]


@dataclass
class OfflineRun:
    """What an offline run's ``.wandb`` file holds so far."""

    name: str = ""
    group: str = ""
    job_type: str = ""
    config: dict = field(default_factory=dict)
    metrics: list = field(default_factory=list)  # (name or glob, its step metric)
    history: list = field(default_factory=list)  # one dict per row
    summary: dict = field(default_factory=dict)
    ended: bool = False  # its exit record is written
    path: Path | None = None  # the .wandb file, in <run dir>/wandb/offline-run-<launch time>-<id>/


def read_offline(run_dir: Path, ended: bool = False) -> list[OfflineRun]:
    """Every offline W&B run of ``run_dir``, in its seeds' order; ``ended``: once each has its exit record (waiting
    up to a minute), as wandb's service writes a run's last records after ``run.finish()`` has returned."""
    deadline = time.monotonic() + 60
    runs = _read_offline(run_dir)
    while ended and not (runs and all(run.ended for run in runs)) and time.monotonic() < deadline:
        time.sleep(0.2)
        runs = _read_offline(run_dir)
    return runs


def _read_offline(run_dir: Path) -> list[OfflineRun]:
    runs = []
    for path in sorted((run_dir / "wandb").glob("offline-run-*/run-*.wandb")):
        run = OfflineRun(path=path)
        for record in wandb_offline.records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.name, run.group, run.job_type = record.run.display_name, record.run.run_group, record.run.job_type
                run.config = {key(item): json.loads(item.value_json) for item in record.run.config.update}
            elif kind == "metric":
                run.metrics.append((record.metric.name or record.metric.glob_name, record.metric.step_metric))
            elif kind == "history":
                run.history.append({key(item): json.loads(item.value_json) for item in record.history.item})
            elif kind == "summary":
                run.summary.update({key(item): json.loads(item.value_json) for item in record.summary.update})
            elif kind == "exit":
                run.ended = True
        runs.append(run)
    return sorted(runs, key=lambda run: run.config.get("seed", -1))


def rows(run: OfflineRun) -> list[dict]:
    """The run's metrics.csv rows (not those forwarded from TRL)."""
    return [row for row in run.history if tracking.TRL_STEP not in row]


def seeds_of(run: OfflineRun) -> tuple[int, ...]:
    """The seeds a W&B run mirrors: its own, or those of the configuration's run."""
    return (run.config["seed"],) if "seed" in run.config else tuple(run.config[tracking.SEED_IDS])


# ---- the group: the run's identity as the launch overrode it ---------------------------------------------------------

def test_the_group_names_the_identity_keys_the_launch_overrode():
    """Bugs caught (tracking.py: ``overridden``, ``_text``, ``wandb_group``): a key outside the identity (seeds,
    resume, logger, threads, a neutral default) in the group, the group path's own choices repeated, a config group's
    choice left out, numbers not by value (``eta=2.0`` for ``eta=2``), the collision rule, the order."""
    overrides = ["experiment=table3_terminal", "task.match=prompts", "task.H=7", "algorithm=tpo", "seeds=3",
                 "seed_offset=3", "trainer.resume=auto", *OFFLINE, "threads=2", "algorithm.std_floor=0.0",
                 "algorithm.eta=2.0", "optim=adam"]
    cfg = compose_config(overrides)
    assert wandb_group(cfg, overrides) == "table3_terminal/token_reversal/tpo/eta=2,optim=adam,H=7,match=prompts"
    assert wandb_group(cfg, None) == wandb_group(cfg, []) == "table3_terminal/token_reversal/tpo"
    llm = ["task=gsm8k", "algorithm=grpo", "algorithm.epochs=3", "model.name=smollm2_135m", "optim.name=adamw",
           "task.lora_rank=0", "task.ref_kl=0"]
    assert (wandb_group(compose_config(llm), llm)  # two "name"s: full keys
            == "default/gsm8k/grpo/epochs=3,model.name=smollm2_135m,optim.name=adamw,lora_rank=0,ref_kl=0")


def test_a_run_recorded_under_a_renamed_key_keeps_its_group():
    """A run launched as ``trainer.steps=200`` (its recorded overrides, read back when it resumes) keeps the group it
    started in, where the key sorted after ``task.*``; launched today as ``task.steps=200`` it names the same value.
    Bug caught: the renamed key dropped from the group (a resumed run's rows in another group than its first)."""
    cfg = compose_config(["experiment=table3_terminal", "task.H=7", "task.target=copy", "task.steps=200"])
    assert wandb_group(cfg, ["task.H=7", "task.target=copy", "trainer.steps=200"]) == (
        "table3_terminal/token_reversal/tpo/H=7,target=copy,steps=200")
    assert wandb_group(cfg, ["task.H=7", "task.target=copy", "task.steps=200"]) == (
        "table3_terminal/token_reversal/tpo/H=7,steps=200,target=copy")


def test_a_run_keeps_the_group_of_the_launch_that_started_it(tmp_path, monkeypatch):
    """The group comes from the run's ``.hydra/overrides.yaml`` (its fresh start's launch), which a resume keeps."""
    calls = []
    module = types.ModuleType("wandb")
    module.Settings = lambda **settings: settings

    def init(**kwargs):
        calls.append(kwargs)
        raise RuntimeError("the test reads the arguments only")

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- task.alpha=0.2\n- seeds=2\n- trainer.resume=auto\n")
    cfg = compose_config(["task=tabular_single", "task.alpha=0.2", *OFFLINE])
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        tracking.make_tracker(cfg, tmp_path, [0], {}).finish({})
    assert [(call["group"], call["name"], call["job_type"]) for call in calls] == [
        ("default/tabular_single/tpo/alpha=0.2", "default/tabular_single/tpo/alpha=0.2/seed0", "tabular_single")]


def test_a_two_hyperparameter_sweep_gives_each_point_its_group(tmp_path):
    result = run_cli(["-m", "task=tabular_single", "algorithm=tpo", "task.alpha=0.1,0.2", "task.arms=10,20", "seeds=2",
                      "task.steps=3", *OFFLINE, f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    found = {}
    for job in (tmp_path / "sweep").glob("*/wandb"):
        runs = read_offline(job.parent, ended=True)
        assert [run.name for run in runs] == [f"{runs[0].group}/seed{seed}" for seed in (0, 1)]
        assert {run.group for run in runs} == {runs[0].group} and {run.job_type for run in runs} == {"tabular_single"}
        assert [run.config["seed"] for run in runs] == [0, 1]
        found[runs[0].group] = (runs[0].config["task.alpha"], runs[0].config["task.arms"])  # flat, dotted keys
    assert found == {f"default/tabular_single/tpo/alpha={alpha},arms={arms},steps=3": (alpha, arms)
                     for alpha in (0.1, 0.2) for arms in (10, 20)}


# ---- live rows, the step metric, the summary -------------------------------------------------------------------------

def pause_at(monkeypatch, task: str, step: int, during) -> None:
    """Run ``during()`` in the training loop as it is about to run ``step`` (the run waits for it)."""
    trainer = trainer_class(get_task(task))
    original = trainer.episode

    def episode(task_, at):
        if at == step:
            during()
        return original(task_, at)

    monkeypatch.setattr(trainer, "episode", staticmethod(episode))


def test_rows_reach_wandb_as_they_are_produced_with_step_as_x_axis_and_the_summary(tmp_path, monkeypatch):
    """Rows 0-3 are in the offline runs within seconds, long before the only checkpoint (at the end); every row has
    ``step``, every metric's x-axis; each seed's summary is summary.json's."""
    run_dir, seen = tmp_path / "run", {}

    def read_before_the_checkpoint():
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            runs = read_offline(run_dir)
            seen["steps"] = [[row["step"] for row in rows(run)] for run in runs]
            if seen["steps"] == [[0, 1, 2, 3]] * 2:
                break
            time.sleep(0.2)
        seen["checkpoint"] = (run_dir / "checkpoint.pt").exists()

    pause_at(monkeypatch, "tabular_single", 4, read_before_the_checkpoint)
    summary = run_config(["task=tabular_single", "seeds=2", "task.steps=8", "task.checkpoint_every=0",
                          *OFFLINE], run_dir)
    assert seen == {"steps": [[0, 1, 2, 3]] * 2, "checkpoint": False}

    runs = read_offline(run_dir, ended=True)
    frame = pd.read_csv(run_dir / "metrics.csv")
    for index, run in enumerate(runs):
        assert ("step", "") in run.metrics and ("*", "step") in run.metrics
        mine = frame[frame.seed == index]
        assert [row["step"] for row in rows(run)] == mine.step.tolist()
        np.testing.assert_allclose([row["error"] for row in rows(run)], mine.error, rtol=1e-6)
        expected = {"status": "completed", "last_step": 7, "dropped_rows": 0, "metrics_rows": 8,
                    "commit": summary["commit"], "version": summary["version"],
                    "cpu_seconds": summary["cpu_seconds"], "wall_seconds": summary["wall_seconds"],
                    "final/error": summary["final"]["error"]["per_seed"][index],
                    "mean/error": summary["mean"]["error"]["per_seed"][index],
                    "steps_to/error<0.1": None, "steps_to/error<0.01": None,
                    **{f"hardware/{key}": value for key, value in summary["hardware"].items()}}
        assert {key: run.summary.get(key) for key in expected} == expected
    assert summary["mean"]["error"]["per_seed"] == pytest.approx(frame.groupby("seed").error.mean().tolist())


# ---- one run for a configuration's seeds ----------------------------------------------------------------------------

SINGLE_RUN = ["task=tabular_single", "seeds=3", "task.steps=8", *OFFLINE]
METRICS = ("error", "misalignment")


def test_above_seed_runs_one_run_holds_each_seed_in_columns_of_its_rows(tmp_path):
    """3 seeds, ``logger.seed_runs=2``: one offline run, named by its group, the seed ids in its config; its rows are
    metrics.csv's steps, each seed's value in ``<metric>/seed<N>`` (compared with metrics.csv read on its own), their
    mean under the metric's name; its summary the run's keys, each seed's as ``<key>/seed<N>`` beside their mean.
    Bugs caught (tracking.py ``_wandb_rows``, ``configuration_summary``): a seed's values in another seed's column
    (seeds × names read as names × seeds), a mean over the metrics rather than the seeds, a seed's final value or
    status from another seed."""
    summary = run_config([*SINGLE_RUN, "logger.seed_runs=2"], tmp_path)
    (run,) = read_offline(tmp_path, ended=True)
    assert run.name == run.group and run.config[tracking.SEED_IDS] == [0, 1, 2] and "seed" not in run.config
    frame = pd.read_csv(tmp_path / "metrics.csv")
    history = rows(run)
    assert [row["step"] for row in history] == sorted(frame.step.unique())
    columns = {"step", *METRICS, *(f"{metric}/seed{seed}" for metric in METRICS for seed in (0, 1, 2))}
    assert all({key for key in row if not key.startswith("_")} == columns for row in history)
    for metric in METRICS:
        wide = frame.pivot(index="step", columns="seed", values=metric).sort_index()[[0, 1, 2]]
        logged = np.array([[row[f"{metric}/seed{seed}"] for seed in (0, 1, 2)] for row in history])
        np.testing.assert_array_equal(np.float32(logged), np.float32(wide.to_numpy()))  # metrics.csv: float32's digits
        np.testing.assert_allclose([row[metric] for row in history], logged.mean(axis=1), rtol=1e-12)
    per_seed = {f"{kind}/{metric}/seed{seed}": summary[kind][metric]["per_seed"][seed]
                for kind in ("final", "mean") for metric in METRICS for seed in (0, 1, 2)}
    expected = {"status": "completed", "last_step": 7, "dropped_rows": 0, "metrics_rows": 8,
                "commit": summary["commit"], "version": summary["version"], "cpu_seconds": summary["cpu_seconds"],
                "final/error": summary["final"]["error"]["mean"], "mean/error": summary["mean"]["error"]["mean"],
                "steps_to/error<0.1": None, **per_seed, **{f"status/seed{seed}": "completed" for seed in (0, 1, 2)}}
    assert {key: run.summary.get(key) for key in expected} == expected
    assert "final/error/seed3" not in run.summary and "seed_status" not in run.summary


class ApiRun:
    """An offline run as ``wandb.Api().runs`` lists it: its config without W&B's own keys, summary, state, history."""

    def __init__(self, run: OfflineRun):
        self.name, self.group, self.id = run.name, run.group, run.path.parent.name.rsplit("-", 1)[-1]
        self.config = {key: value for key, value in run.config.items() if not key.startswith("_")}
        self.summary, self.state, self._history = run.summary, "finished" if run.ended else "running", run.history

    def scan_history(self):
        return iter(self._history)


def test_the_report_reads_one_run_for_the_seeds_as_it_reads_a_run_per_seed(tmp_path):
    """The same run mirrored with a run per seed and with one for its 3 seeds, read back through the report's W&B
    loader from the offline files: the same runs and curves, which are the run folder's. Bugs caught (load.py
    ``SeedOfRun``, ``_seed_runs``): a seed's column read as another's, the seed means read as a seed, the seed ids
    left in the configuration (another signature than the run folder's), a summary key of another seed."""
    from harness.report.load import load_runs
    from test_report_wandb import FakeApi

    loaded = {}
    for seed_runs in (3, 2):
        run_config([*SINGLE_RUN, f"logger.seed_runs={seed_runs}"], tmp_path / f"seed_runs{seed_runs}")
        offline = read_offline(tmp_path / f"seed_runs{seed_runs}", ended=True)
        assert len(offline) == (3 if seed_runs == 3 else 1)
        loaded[seed_runs] = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([ApiRun(run) for run in offline]))
    loaded["folder"] = load_runs([tmp_path / "seed_runs3"])
    keys, columns = ["seed", "step", "metric"], ["experiment", "task", "algorithm", "status", "seed_ids", "steps",
                                                  "last_step", "signature"]
    curves = {name: frame.sort_values(keys).reset_index(drop=True) for name, (_, frame) in loaded.items()}
    assert len(curves[2]) == 3 * 8 * len(METRICS)
    pd.testing.assert_frame_equal(curves[2], curves[3])
    pd.testing.assert_frame_equal(curves[2][keys].astype(str), curves["folder"][keys].astype(str))
    np.testing.assert_array_equal(np.float32(curves[2].value), np.float32(curves["folder"].value))
    records = {name: runs[columns].to_dict("records") for name, (runs, _) in loaded.items()}
    assert records[2] == records[3] == records["folder"] and records[2][0]["status"] == "completed"


# ---- every row exactly once after a resume ---------------------------------------------------------------------------

def assert_every_row_once(run_dir: Path) -> None:
    """Over all launches' offline files, each seed's W&B history holds every metrics.csv step exactly once."""
    frame = pd.read_csv(run_dir / "metrics.csv")

    def last_launch_ended(runs: list[OfflineRun]) -> bool:  # (a killed launch's runs may never end)
        last: dict[tuple, OfflineRun] = {}
        for run in runs:  # offline-run-<launch time>-<id>: the latest launch's sorts last
            seeds = seeds_of(run) if run.config else ()  # (a file just created holds no config yet)
            if seeds not in last or run.path.parent.name > last[seeds].path.parent.name:
                last[seeds] = run
        return ({seed for seeds in last for seed in seeds} == set(frame.seed)
                and all(run.ended for run in last.values()))

    deadline, runs = time.monotonic() + 60, read_offline(run_dir)
    while not last_launch_ended(runs) and time.monotonic() < deadline:
        time.sleep(0.2)
        runs = read_offline(run_dir)
    logged: dict[int, Counter] = {}
    for run in runs:
        for seed in seeds_of(run):  # (a configuration's run: the rows holding the seed's column)
            logged.setdefault(seed, Counter()).update(row["step"] for row in rows(run)
                                                      if "seed" in run.config or f"error/seed{seed}" in row)
    assert sorted(logged) == sorted(frame.seed.unique())
    for seed, counts in logged.items():
        expected = frame[frame.seed == seed].step.tolist()
        missing = sorted(set(expected) - set(counts))
        twice = sorted(step for step, n in counts.items() if n > 1)
        files = [(run.path.parent.name, run.ended, len(rows(run))) for run in runs if seed in seeds_of(run)]
        assert not missing and not twice and len(counts) == len(expected), \
            f"seed {seed}: {len(missing)} rows missing from W&B (first {missing[:3]}), logged twice {twice[:3]}; " \
            f"its files (launch, ended, rows): {files}"


@pytest.mark.parametrize("seed_runs, files", [(2, 4), (1, 2)])
def test_a_resume_does_not_log_again_the_rows_wandb_holds_past_the_checkpoint(tmp_path, seed_runs, files):
    """Ctrl-C at step 8 with checkpoints every 5: the interrupted launch's runs hold rows 0-7, the resume restarts at
    5 and reproduces rows 5-7, which must not reach W&B a second time: with a run per seed, and with one run for
    both seeds (``logger.seed_runs=1``)."""
    overrides = ["task=tabular_single", "seeds=2", "task.steps=20", "task.checkpoint_every=5", *OFFLINE,
                 f"logger.seed_runs={seed_runs}"]
    run_killed_at(overrides, tmp_path / "run", get_task("tabular_single"), 8)
    run_config([*overrides, "trainer.resume=auto"], tmp_path / "run")
    assert len(read_offline(tmp_path / "run")) == files  # two launches of two runs, or of one
    assert_every_row_once(tmp_path / "run")


@pytest.mark.parametrize("seed_runs", [2, 1])
def test_after_a_kill_9_the_resume_sends_wandb_the_rows_it_lost(tmp_path, seed_runs):
    """``kill -9`` just after the second checkpoint: the killed launch's wandb service has not written its last
    seconds of rows, which lie before the checkpoint and are not produced again; the resume sends them, to each
    seed's run or to the configuration's."""
    run_dir = tmp_path / "run"
    command = [sys.executable, "-m", "harness", "task=tabular_single", "seeds=2", "task.steps=3000",
               "task.checkpoint_every=500", *OFFLINE, f"logger.seed_runs={seed_runs}", "trainer.resume=auto",
               f"hydra.run.dir={run_dir}"]
    # each launch with a wandb service of its own, as from a shell (not this worker's, which earlier tests started and
    # which would outlive the kill holding the run's id)
    environment = {**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(command, cwd=tmp_path, env=environment, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    checkpoints, seen, deadline = 0, None, time.monotonic() + 120
    while checkpoints < 2 and process.poll() is None and time.monotonic() < deadline:
        stamp = (run_dir / "checkpoint.pt").stat().st_mtime_ns if (run_dir / "checkpoint.pt").exists() else None
        checkpoints += stamp is not None and stamp != seen
        seen = stamp
        time.sleep(0.002)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    assert checkpoints == 2, "the run ended before its second checkpoint"
    subprocess.run(command, cwd=tmp_path, env=environment, check=True, capture_output=True)
    assert_every_row_once(run_dir)


# ---- never holding training ------------------------------------------------------------------------------------------

class SlowRun:
    def __init__(self, gate: threading.Event | None = None):
        self.logged, self.summary, self.gate, self.finished = [], {}, gate, []

    def define_metric(self, name, **options):
        pass

    def log(self, row):
        if self.gate is not None:
            assert self.gate.wait(30), "training never released W&B: it waited for it"
        self.logged.append(row)

    def finish(self, exit_code=None):
        self.finished.append(exit_code)


def slow_wandb(monkeypatch, init_gate: threading.Event | None = None, log_gate: threading.Event | None = None):
    """A ``wandb`` whose ``init`` (or ``run.log``) waits until training sets the gate."""
    module = types.ModuleType("wandb")
    module.runs = []
    module.Settings = lambda **settings: settings

    def init(**kwargs):
        if init_gate is not None:
            assert init_gate.wait(30), "training never released W&B: it waited for it"
        module.runs.append(SlowRun(log_gate))
        return module.runs[-1]

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


def test_starting_wandb_does_not_hold_the_first_steps(tmp_path, monkeypatch):
    """``wandb.init`` returns only once training reached step 3: every row before still reaches the runs."""
    gate = threading.Event()
    wandb = slow_wandb(monkeypatch, init_gate=gate)
    pause_at(monkeypatch, "tabular_single", 3, gate.set)
    summary = run_config(["task=tabular_single", "seeds=2", "task.steps=6", "logger=wandb", "logger.mode=online"],
                         tmp_path)
    assert summary["status"] == "completed"
    assert [[row["step"] for row in run.logged] for run in wandb.runs] == [list(range(6))] * 2
    assert [run.finished for run in wandb.runs] == [[None]] * 2


def test_a_wandb_that_cannot_keep_up_loses_rows_not_training_time(tmp_path, monkeypatch):
    """With ``run.log`` stuck until the last step and room for 3 rows, the rows beyond are dropped (one warning,
    counted in each summary), training goes on, and the local files are complete."""
    gate = threading.Event()
    monkeypatch.setattr(tracking, "MAX_QUEUED_ROWS", 3)
    wandb = slow_wandb(monkeypatch, log_gate=gate)
    pause_at(monkeypatch, "tabular_single", 11, gate.set)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run_config(["task=tabular_single", "seeds=2", "task.steps=12", "logger=wandb",
                              "logger.mode=online"], tmp_path)
    messages = [str(w.message) for w in caught if "W&B" in str(w.message)]
    assert len(messages) == 1 and "W&B cannot keep up" in messages[0], messages
    assert summary["status"] == "completed" and len(pd.read_csv(tmp_path / "metrics.csv")) == 2 * 12
    for run in wandb.runs:
        assert run.summary["dropped_rows"] > 0 and len(run.logged) + run.summary["dropped_rows"] == 12


# ---- TRL's own metrics -----------------------------------------------------------------------------------------------

def test_trl_metrics_reach_the_seeds_run(tiny_llm, gsm8k_dir, tmp_path):
    """TRL's logged metrics (two updates per step) reach the seed's only W&B run as ``trl/<name>``, at the step whose
    rollout they train on, beside the metrics.csv rows."""
    from llm_helpers import tiny_overrides

    summary = run_config([*tiny_overrides(tiny_llm, "gsm8k", gsm8k_dir), "algorithm=grpo", "algorithm.epochs=2",
                          "task.eval_every=0", *OFFLINE], tmp_path)
    assert summary["status"] == "completed"
    (run,) = read_offline(tmp_path, ended=True)  # TRL opened no run of its own
    assert [row["step"] for row in rows(run)] == [0, 1]
    forwarded = [row for row in run.history if tracking.TRL_STEP in row and "trl/loss" in row]
    assert [(row["trl/global_step"], row["step"]) for row in forwarded] == [(1, 0), (2, 0), (3, 1), (4, 1)]
    assert {"trl/reward", "trl/completions/mean_length"} <= set(forwarded[0])
