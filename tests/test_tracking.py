"""W&B never stalls or stops training: each wandb.init is bounded by logger.init_timeout, and the first failure turns
W&B off for every seed of the run, with one warning, while the local files stay complete."""

from __future__ import annotations

import sys
import types
import warnings

import pandas as pd
import pytest

from conftest import compose_config, run_config
from harness.tracking import DEFAULT_INIT_TIMEOUT


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


OVERRIDES = ["task=tabular_single", "algorithm=tpo", "seeds=3", "trainer.steps=6", "trainer.checkpoint_every=2",
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

    from harness.tracking import make_tracker

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
