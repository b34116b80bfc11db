"""W&B never stalls or stops training: each wandb.init is bounded by logger.init_timeout, and the first failure turns
W&B off for every seed of the run, with one warning, while the local files stay complete. Above logger.seed_runs
seeds one W&B run holds them all, a layout a resume keeps; the logger's keys are checked before any work."""

from __future__ import annotations

import json
import sys
import types
import warnings

import numpy as np
import pandas as pd
import pytest

from conftest import compose_config, run_config
from harness import tracking
from harness.tracking import DEFAULT_INIT_TIMEOUT, make_tracker


class FakeRun:
    def __init__(self):
        self.logged, self.finished, self.summary, self.metrics = [], [], {}, []

    def log(self, row):
        self.logged.append(row)

    def define_metric(self, name, **options):
        self.metrics.append((name, options))

    def finish(self, exit_code=None):
        self.finished.append(exit_code)


def fake_wandb(monkeypatch, succeed: int = 0) -> types.ModuleType:
    """A ``wandb`` module whose ``init`` records its arguments; the first ``succeed`` calls return a run, every
    later one raises as wandb does when ``init_timeout`` runs out."""
    module = types.ModuleType("wandb")
    module.calls, module.runs = [], []
    module.Settings = lambda **settings: settings

    def init(**kwargs):
        module.calls.append(kwargs)
        if len(module.calls) > succeed:
            raise TimeoutError(f"Run initialization has timed out after {kwargs['settings']['init_timeout']} sec.")
        module.runs.append(FakeRun())
        return module.runs[-1]

    module.init = init
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


OVERRIDES = ["task=tabular_single", "algorithm=tpo", "seeds=3", "task.steps=6", "task.checkpoint_every=2",
             "logger=wandb", "logger.mode=online"]


def run_warning_once(overrides, tmp_path):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        summary = run_config(overrides, tmp_path)
    messages = [str(w.message) for w in caught if "W&B" in str(w.message)]
    assert len(messages) == 1 and "W&B logging disabled" in messages[0], messages
    return summary, messages[0]


def test_init_is_bounded_and_a_first_failure_disables_every_seed(tmp_path, monkeypatch):
    wandb = fake_wandb(monkeypatch)
    summary, message = run_warning_once([*OVERRIDES, "logger.init_timeout=2.5"], tmp_path)
    assert len(wandb.calls) == 1  # not once per seed, nor again at the later checkpoints
    assert wandb.calls[0]["settings"]["init_timeout"] == 2.5
    assert "timed out" in message
    assert summary["status"] == "completed"
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert len(metrics) == 3 * 6 and sorted(metrics.seed.unique()) == [0, 1, 2]  # the local files are complete


def test_a_later_seed_failing_closes_the_runs_already_started(tmp_path, monkeypatch):
    wandb = fake_wandb(monkeypatch, succeed=1)
    summary, _ = run_warning_once(OVERRIDES, tmp_path)
    assert len(wandb.calls) == 2 and summary["status"] == "completed"
    assert wandb.runs[0].finished == [1] and wandb.runs[0].logged == []  # closed as failed, nothing half-logged


def test_the_default_timeout_is_short_and_reaches_wandb(tmp_path, monkeypatch):
    assert compose_config(["logger=wandb"]).logger.init_timeout == DEFAULT_INIT_TIMEOUT == 10
    wandb = fake_wandb(monkeypatch, succeed=3)
    summary = run_config(OVERRIDES, tmp_path)
    assert summary["status"] == "completed"
    assert [call["settings"]["init_timeout"] for call in wandb.calls] == [10.0] * 3
    assert [call["name"].rsplit("/", 1)[-1] for call in wandb.calls] == ["seed0", "seed1", "seed2"]
    assert all(len({row["step"] for row in run.logged}) == 6 and run.finished == [None] for run in wandb.runs)
    assert all(run.metrics == [("step", {}), ("*", {"step_metric": "step"})] for run in wandb.runs)  # the x-axis
    # each W&B summary records what the report checks its history against
    assert [run.summary["last_step"] for run in wandb.runs] == [max(row["step"] for row in wandb.runs[0].logged)] * 3
    assert [run.summary["status"] for run in wandb.runs] == ["completed"] * 3


def test_a_config_without_init_timeout_still_runs(tmp_path, monkeypatch):
    """Configs saved before logger.init_timeout existed (a resumed run's) get the default."""
    from omegaconf import open_dict

    wandb = fake_wandb(monkeypatch, succeed=1)
    cfg = compose_config(["task=tabular_single", "logger=wandb", "logger.mode=online"])
    with open_dict(cfg):
        del cfg.logger["init_timeout"]
    tracker = make_tracker(cfg, tmp_path, [0], {})
    tracker.log(0, {"error": pd.Series([0.5]).to_numpy()})
    tracker.finish({"status": "completed"})
    assert wandb.calls[0]["settings"]["init_timeout"] == DEFAULT_INIT_TIMEOUT


@pytest.mark.parametrize("value", ["0", "-1", "abc"])
def test_init_timeout_must_be_positive(value):
    from harness.config import build_task
    from common.checks import ConfigError

    with pytest.raises(ConfigError, match=f"logger.init_timeout={value if value != 'abc' else repr(value)} is not "
                                          "valid; expected a number > 0"):
        build_task(compose_config(["task=tabular_single", "logger=wandb", f"logger.init_timeout={value}"]))


@pytest.mark.parametrize("seed_runs, runs", [(3, 3), (2, 1)])
def test_seed_runs_seeds_get_a_run_each_and_one_more_gets_one_run(tmp_path, monkeypatch, seed_runs, runs):
    """3 seeds with ``logger.seed_runs=3``: a W&B run per seed, as ever; with 2, one run for the configuration, named
    by the group, under its first seed's id (the one a fresh start clears), its config carrying the seed ids and its
    rows each seed's value as ``<metric>/seed<N>`` beside their mean. Bugs caught: tracking.py ``<`` for ``<=`` in
    the threshold, the seed ids left out of the config, the id of another seed."""
    from harness import rundir

    wandb = fake_wandb(monkeypatch, succeed=3)
    run_config([*OVERRIDES, f"logger.seed_runs={seed_runs}"], tmp_path)
    assert len(wandb.calls) == runs
    uid = json.loads((tmp_path / "identity.json").read_text())["uid"]
    if runs == 3:
        assert [call["config"]["seed"] for call in wandb.calls] == [0, 1, 2]
        return
    (call,) = wandb.calls
    assert call["name"] == call["group"] and call["id"] == rundir.wandb_run_id(tmp_path, uid, 0)
    assert call["config"]["seed_ids"] == [0, 1, 2] and "seed" not in call["config"]
    assert call["settings"]["x_save_requirements"] is False  # most of each later init's cost
    frame = pd.read_csv(tmp_path / "metrics.csv")
    (run,) = wandb.runs
    assert [row["step"] for row in run.logged] == sorted(frame.step.unique())
    last = run.logged[-1]
    assert [last[f"error/seed{seed}"] for seed in (0, 1, 2)] == pytest.approx(
        frame[frame.step == frame.step.max()].sort_values("seed").error.tolist(), rel=1e-6)
    assert last["error"] == pytest.approx(np.mean([last[f"error/seed{seed}"] for seed in (0, 1, 2)]))
    assert run.summary["status"] == "completed" and [run.summary[f"status/seed{s}"] for s in (0, 1, 2)] == [
        "completed"] * 3


@pytest.mark.parametrize("started, runs", [("seed_runs: 2", 1), ("seed_runs: 9", 9), ("", 9)])
def test_a_resume_keeps_the_wandb_layout_of_the_launch_that_started_the_run(tmp_path, monkeypatch, started, runs):
    """9 seeds: the layout follows the ``logger.seed_runs`` of the run's first launch (its ``.hydra/config.yaml``),
    one run per seed for a run mirrored before the key existed (not the default's 8), whatever this launch sets: a
    W&B run never changes layout midway. Bugs caught: tracking.py ``seed_runs`` reading this launch's key, or the
    default for a run without it."""
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "config.yaml").write_text(f"logger:\n  name: wandb\n  {started}\n")
    wandb = fake_wandb(monkeypatch, succeed=9)
    cfg = compose_config(["task=tabular_single", "logger=wandb", "logger.mode=online",
                          f"logger.seed_runs={9 if runs == 1 else 2}"])
    tracker = make_tracker(cfg, tmp_path, list(range(9)), {})
    tracker.finish({"status": "completed"})
    assert len(wandb.calls) == runs


@pytest.mark.parametrize("value", ["-1", "1.5", "abc"])
def test_seed_runs_must_be_a_count(value):
    from common.checks import ConfigError
    from harness.config import build_task

    shown = value if value != "abc" else repr(value)
    with pytest.raises(ConfigError, match=f"^logger.seed_runs={shown} is not valid; expected an integer >= 0$"):
        build_task(compose_config(["task=tabular_single", "logger=wandb", f"logger.seed_runs={value}"]))


def test_an_unknown_logger_name_is_refused_naming_the_choices():
    from common.checks import ConfigError
    from harness.config import build_task

    with pytest.raises(ConfigError, match="^logger.name='tensorbord' is not valid; valid choices: wandb, tensorboard, "
                                          "none$"):
        build_task(compose_config(["task=tabular_single", "logger=tensorboard", "logger.name=tensorbord"]))


def test_one_run_for_the_seeds_averages_the_finite_values_of_a_row():
    """A diverged seed's values are NaN: the configuration's row holds the mean of the others (NaN only when every
    seed's is), and each seed's own value. Bug caught: a plain mean (the group's line gone once one seed diverges)."""
    tracker = object.__new__(tracking.WandbTracker)  # the row layout only: no thread, no W&B
    tracker.per_seed, tracker.seeds = False, [3, 4, 5]
    values = np.array([[0.2, np.nan], [np.nan, np.nan], [0.4, np.nan]])  # seeds × (error, grad_norm)
    [row] = tracker._wandb_rows(7, ("error", "grad_norm"), values)
    assert row["step"] == 7 and row["error"] == pytest.approx(0.3) and np.isnan(row["grad_norm"])
    assert row["error/seed3"] == 0.2 and np.isnan(row["error/seed4"]) and row["error/seed5"] == 0.4
