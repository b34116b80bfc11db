"""The trainers: the group trainer's episode (what it freezes, the update metrics it logs) and the registry by which
a task names its trainer."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from conftest import compose_config, run_config
from harness.config import build_task
from harness.trainers import TRAINERS, episode, trainer_class
from harness.trainers.batched import ClosedFormTrainer, GroupTrainer, update_metric_names, updates_per_batch
from tasks import TASKS, get_task

TOKEN = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "model.d_model=16",
         "model.layers=1", "model.ffn=32", "seeds=2", "task.reward=bag_of_tokens", "optim.lr=0.05",
         "task.logp_old=exact"]  # the first epoch's ρ is then exactly 1


@pytest.mark.parametrize("algorithm", ["grpo", "dapo", "cispo"])
def test_update_metrics_are_the_mean_over_the_epochs_after_the_first(algorithm, monkeypatch):
    """The logged clip fraction, ratio deviation and k3 KL are each seed's mean over epochs 2..E of what the loss
    reported on that epoch (its chunks in seed order); the first epoch, at θ_old, reports ρ = 1 exactly."""
    task = build_task(compose_config([*TOKEN, f"algorithm={algorithm}"]))
    assert updates_per_batch(task) == 4 and len(task.chunks) == 2
    calls, batch_loss = [], GroupTrainer.batch_loss

    def recording(task, batch, logp):
        loss, metrics = batch_loss(task, batch, logp)
        calls.append({name: metrics[name].clone() for name in task.algorithm.metric_names})
        return loss, metrics

    monkeypatch.setattr(GroupTrainer, "batch_loss", staticmethod(recording))
    for step in range(3):
        calls.clear()
        out = episode(task, step)
    per_epoch = [{name: torch.cat([calls[2 * epoch][name], calls[2 * epoch + 1][name]]) for name in calls[0]}
                 for epoch in range(4)]
    assert all(per_epoch[0][name].eq(0).all() for name in ("ratio_dev", "kl_snapshot", "clip_fraction"))
    assert per_epoch[3]["ratio_dev"].gt(0).all()  # the policy has moved: the comparison is not of zeros
    for name in ("ratio_dev", "kl_snapshot", "clip_fraction"):
        expected = (per_epoch[1][name] + per_epoch[2][name] + per_epoch[3][name]) / 3
        torch.testing.assert_close(out.metrics[name], expected, rtol=1e-6, atol=0)


def test_runs_log_update_metrics_only_where_an_update_reuses_its_batch(tmp_path):
    """GRPO, PPO, DAPO and CISPO (4 epochs) write a clip fraction per episode to metrics.csv; DG (1 epoch) and the
    bandits (one update per batch, where ρ = 1) write none."""
    for algorithm in ("grpo", "ppo", "dapo", "cispo", "dg"):
        run_config([*TOKEN, f"algorithm={algorithm}", "task.steps=3"], tmp_path / algorithm)
        frame = pd.read_csv(tmp_path / algorithm / "metrics.csv")
        if algorithm == "dg":
            assert not {"clip_fraction", "ratio_dev", "kl_snapshot"} & set(frame.columns)
            continue
        assert frame.clip_fraction.between(0, 1).all() and len(frame) == 3 * 2
        assert frame.ratio_dev.gt(0).all() and frame.kl_snapshot.ge(0).all()
    run_config(["task=tabular_single", "algorithm=grpo", "task.steps=3"], tmp_path / "bandit")
    assert "clip_fraction" not in pd.read_csv(tmp_path / "bandit" / "metrics.csv").columns


def test_every_task_names_a_registered_trainer():
    names = {name: get_task(name).trainer for name in TASKS}
    assert set(names.values()) <= set(TRAINERS)
    assert names["tabular_multi"] == "closed_form" and names["gsm8k"] == "trl" and names["token_reversal"] == "group"
    assert trainer_class(get_task("tabular_multi")) is ClosedFormTrainer
    assert trainer_class(get_task("mnist_bandit")) is GroupTrainer


def test_single_epoch_tasks_have_no_update_metrics():
    task = build_task(compose_config(["task=mnist_bandit", "algorithm=grpo", "seeds=1"]))
    assert updates_per_batch(task) == 1 and update_metric_names(task) == ()


@pytest.mark.parametrize("task,algorithm,aggregation", [("mnist_bandit", "tpo", "tokens"),
                                                        ("mnist_bandit", "grpo", "informative_groups"),
                                                        ("tabular_multi", "tpo", "constant")])
def test_a_closed_form_update_refuses_an_aggregation_it_would_not_honour(task, algorithm, aggregation):
    """MNIST's gradient and the exact tabular direction are written for the algorithm's own aggregation; another is
    refused in one line rather than silently trained with the default."""
    from common.checks import ConfigError

    overrides = [f"task={task}", f"algorithm={algorithm}", f"algorithm.aggregation={aggregation}"]
    with pytest.raises(ConfigError, match=rf"^algorithm.aggregation={aggregation} is not valid for task={task}, "
                                          r"whose update is computed in closed form; valid choices: \w+$"):
        build_task(compose_config(overrides))


def test_an_autograd_update_takes_another_aggregation():
    """tabular_single differentiates the loss itself, so it takes any aggregation (here GRPO with a token mean)."""
    task = build_task(compose_config(["task=tabular_single", "algorithm=grpo", "algorithm.aggregation=tokens"]))
    assert torch.isfinite(episode(task, 0).metrics["misalignment"]).all()


def test_a_trainer_reads_its_typed_settings_not_the_config_again(tmp_path, monkeypatch):
    """The run's settings are built and checked once, when the trainer is made (``harness.config.run_settings``);
    the loop, the checkpoints and summary.json read them. A config changed after that (here: task.steps 4 → 7,
    which no check saw) changes nothing. Bugs caught: the loop or summary.json re-reading ``cfg.task.steps``."""
    from omegaconf import open_dict

    from common.checks import ConfigError
    from harness import run
    from harness.config import run_settings

    built = []

    def changed_after_the_checks(task_cls):
        def make(cfg):
            trainer = trainer_class(task_cls)(cfg)
            with open_dict(cfg):
                cfg.task.steps = 7
            built.append(trainer)
            return trainer
        return make

    monkeypatch.setattr(run, "trainer_class", changed_after_the_checks)
    cfg = compose_config(["task=tabular_single", "algorithm=tpo", "task.steps=4", "seeds=2", "seed_offset=3",
                          "trainer.solved_below=0.5", "trainer.relapse_above=0.6", "logger=none"])
    (tmp_path / "run").mkdir()
    summary = run.train(cfg, tmp_path / "run")
    settings = built[0].settings
    assert (settings.steps, settings.seeds, list(settings.seed_ids)) == (4, 2, [3, 4])
    assert (settings.solved_below, settings.relapse_above, settings.checkpoint_every) == (0.5, 0.6, 0)
    assert summary["steps"] == 4 and summary["seeds"] == [3, 4]
    assert pd.read_csv(tmp_path / "run" / "metrics.csv").step.max() <= 4
    with pytest.raises(AttributeError):
        settings.steps = 5  # frozen: what was checked is what runs
    bad = compose_config(["task=tabular_single", "trainer.solved_below=0.5", "trainer.relapse_above=0.4"])
    with pytest.raises(ConfigError, match=r"^trainer.relapse_above=0.4 is not valid"):
        run_settings(bad)
