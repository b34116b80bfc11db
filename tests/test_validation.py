"""Every configuration value is validated before any work: a ConfigError of one line naming the key, the value and
the valid range or choices. One row per key; LLM-only keys are in tests/test_llm_configs.py, same style."""

from __future__ import annotations

import re

import pytest
import yaml

import algorithms
from algorithms import ALGORITHMS
from algorithms.registry import declarations
from conftest import CONF, compose_config, run_cli
from harness.config import build_task, experiment_presets
from harness.config import compose_config as harness_compose
from tasks.base import RUN_KEYS
from common.checks import ConfigError

TOKEN, MNIST = "task=token_reversal", "task=mnist_bandit"
SINGLE, MULTI = "task=tabular_single", "task=tabular_multi"

# (overrides, expected message fragment): the fragment is "<key>=<value> is not valid" unless noted
BAD_VALUES = [
    # top level and trainer (harness/config.py build_task)
    (["seeds=0"], "seeds=0 is not valid"),
    (["seed_offset=-1"], "seed_offset=-1 is not valid"),
    (["task.steps=0"], "task.steps=0 is not valid"),
    ([SINGLE, "task.checkpoint_every=-1"], "task.checkpoint_every=-1 is not valid; expected an integer >= 0"),
    ([SINGLE, "task.checkpoint_every=1.5"], "task.checkpoint_every=1.5 is not valid"),
    ([SINGLE, "task.steps_to=[0.1,1.5]"], "task.steps_to=1.5 is not valid; expected a number in [0, 1]"),
    (["device=tpu"], "device='tpu' is not valid; valid choices: cpu, cuda"),
    (["cpu_matmul=mkl"], "cpu_matmul='mkl' is not valid; valid choices: auto, onednn, blas"),
    ([SINGLE, "flush_denormal=maybe"], "flush_denormal='maybe' is not valid; valid choices: true, false"),
    ([SINGLE, "experiment_name=null"], "experiment_name=None is not valid; expected a non-empty name"),
    ([SINGLE, "logger.name=tensorbord"],
     "logger.name='tensorbord' is not valid; valid choices: wandb, tensorboard, none"),
    ([MNIST, "task.steps=5"], "task.steps=5 is not valid with task.eval_every=200"),
    ([TOKEN, "task.dedup=1"], "task.dedup=1 is not valid"),  # 1 is not true
    # logger (harness/tracking.py check_logger_config)
    ([SINGLE, "logger=wandb", "logger.init_timeout=0"], "logger.init_timeout=0 is not valid; expected a number > 0"),
    ([SINGLE, "logger=wandb", "logger.init_timeout=-5"], "logger.init_timeout=-5 is not valid"),
    ([SINGLE, "logger=wandb", "logger.mode=sometimes"], "logger.mode='sometimes' is not valid; valid choices: auto"),
    # algorithm hyperparameters (their declarations in algorithms/), whichever task reads them
    ([SINGLE, "algorithm=tpo", "algorithm.eta=0"], "algorithm.eta=0 is not valid; expected a number >= 1e-06"),
    # beyond float32: every seed ran to NaN (β, α), or the first step failed to convert the value (ε, σ floor)
    *[([TOKEN, f"algorithm={name}", f"{key}=1e300"], f"{key}=1e+300 is not valid; expected a number within float32's "
       "range (|x| <= 3.403e+38)")
      for name, key in (("grpo", "algorithm.beta"), ("ppo", "algorithm.clip_eps"), ("tpo", "algorithm.std_floor"),
                        ("tpo", "algorithm.std_prior"), ("cispo", "algorithm.is_clip"),
                        ("dapo", "algorithm.clip_eps_high"))],
    ([SINGLE, "task.alpha=1e308"], "task.alpha=1e+308 is not valid; expected a number within float32's range"),
    ([SINGLE, "algorithm=tpo", "algorithm.eta=-1"], "algorithm.eta=-1 is not valid"),
    ([MULTI, "algorithm=dg", "algorithm.eta=0"], "algorithm.eta=0 is not valid"),
    ([MNIST, "algorithm=tpo", "algorithm.eta=0"], "algorithm.eta=0 is not valid"),
    ([MNIST, "algorithm=group_pg", "algorithm.eta=-0.5"], "algorithm.eta=-0.5 is not valid"),
    ([TOKEN, "algorithm=tpo", "algorithm.eta=nan"], "algorithm.eta=nan is not valid"),
    ([TOKEN, "algorithm=tpo", "algorithm.eta=inf"], "algorithm.eta=inf is not valid"),
    ([TOKEN, "algorithm=tpo_token", "algorithm.eta=0"], "algorithm.eta=0 is not valid"),
    ([TOKEN, "algorithm=tpo_no_anchor", "algorithm.eta=abc"], "algorithm.eta='abc' is not valid"),
    ([TOKEN, "algorithm=dg", "algorithm.eta=0"], "algorithm.eta=0 is not valid"),
    ([TOKEN, "algorithm=grpo", "algorithm.clip_eps=-1"], "algorithm.clip_eps=-1 is not valid; expected a number > 0"),
    ([TOKEN, "algorithm=grpo_token", "algorithm.clip_eps=0"], "algorithm.clip_eps=0 is not valid"),
    ([TOKEN, "algorithm=grpo_masked", "algorithm.clip_eps=-0.2"], "algorithm.clip_eps=-0.2 is not valid"),
    ([TOKEN, "algorithm=grpo_no_kl", "algorithm.clip_eps=0"], "algorithm.clip_eps=0 is not valid"),
    ([TOKEN, "algorithm=ppo", "algorithm.clip_eps=-1"], "algorithm.clip_eps=-1 is not valid"),
    ([MNIST, "algorithm=grpo", "algorithm.clip_eps=0"], "algorithm.clip_eps=0 is not valid"),
    ([TOKEN, "algorithm=grpo", "algorithm.beta=-0.04"], "algorithm.beta=-0.04 is not valid; expected a number >= 0"),
    ([TOKEN, "algorithm=grpo", "algorithm.log_ratio_clip=0"], "algorithm.log_ratio_clip=0 is not valid"),
    ([TOKEN, "algorithm=dg", "algorithm.surprisal_clip=0"],
     "algorithm.surprisal_clip=0 is not valid; expected null or a number > 0"),
    ([MNIST, "algorithm=dg", "algorithm.surprisal_clip=-1"], "algorithm.surprisal_clip=-1 is not valid"),
    ([TOKEN, "algorithm=tpo", "algorithm.epochs=0"], "algorithm.epochs=0 is not valid"),
    ([TOKEN, "algorithm=tpo", "algorithm.epochs=1.5"], "algorithm.epochs=1.5 is not valid"),
    ([TOKEN, "algorithm=grpo", "algorithm.aggregation=mean"],
     "algorithm.aggregation='mean' is not valid; valid choices: groups, informative_groups, sequences, tokens, "
     "constant"),
    ([TOKEN, "algorithm=dapo", "algorithm.beta=-1"], "algorithm.beta=-1 is not valid; expected a number >= 0"),
    ([TOKEN, "algorithm=tpo", "algorithm.zero_variance=maybe"],
     "algorithm.zero_variance='maybe' is not valid; valid choices: centered, zero"),
    ([TOKEN, "algorithm=grpo", "algorithm.zero_variance_guard=maybe"],
     "algorithm.zero_variance_guard='maybe' is not valid; valid choices: true, false"),
    # token reversal (tasks/token_reversal.py) and its model and optimizer
    ([TOKEN, "task.V=1"], "task.V=1 is not valid; expected an integer >= 2"),
    ([TOKEN, "task.H=0"], "task.H=0 is not valid"),
    ([TOKEN, "algorithm=tpo", "task.K=1"], "task.K=1 is not valid for algorithm=tpo"),
    ([TOKEN, "algorithm=grpo", "task.K=1"], "task.K=1 is not valid for algorithm=grpo"),
    ([TOKEN, "algorithm=group_pg", "task.K=1"], "task.K=1 is not valid for algorithm=group_pg"),
    ([TOKEN, "algorithm=tpo_token", "task.K=1"], "task.K=1 is not valid for algorithm=tpo_token"),
    ([TOKEN, "algorithm=ppo", "task.K=0"], "task.K=0 is not valid"),  # single samples: K ≥ 1 (match=interactions)
    ([TOKEN, "task.batch_size=0"], "task.batch_size=0 is not valid"),
    ([TOKEN, "model.d_model=0"], "model.d_model=0 is not valid"),
    ([TOKEN, "model.heads=0"], "model.heads=0 is not valid"),
    ([TOKEN, "model.layers=0"], "model.layers=0 is not valid"),
    ([TOKEN, "model.ffn=0"], "model.ffn=0 is not valid"),
    ([TOKEN, "optim.lr=0"], "optim.lr=0 is not valid; expected a number > 0"),
    ([TOKEN, "optim.lr=-0.001"], "optim.lr=-0.001 is not valid"),
    ([TOKEN, "optim.guard=clip"], "optim.guard='clip' is not valid; valid choices: none, skip, scale"),
    ([TOKEN, "optim.guard_tau=-1"], "optim.guard_tau=-1 is not valid; expected a number >= 0"),
    ([TOKEN, "optim=adam", "optim.guard_tau=-1"], "optim.guard_tau=-1 is not valid"),
    ([TOKEN, "optim=adam", "optim.lr=0"], "optim.lr=0 is not valid"),
    ([TOKEN, "task.reward_noise=-0.1"], "task.reward_noise=-0.1 is not valid; expected a number >= 0"),
    ([TOKEN, "task.reward=terminal", "task.partial_credit=1"], "task.partial_credit=1 is not valid; expected a number "
                                                               "in [0, 1)"),
    ([TOKEN, "trainer.solved_below=2"], "trainer.solved_below=2 is not valid; expected a number in [0, 1]"),
    ([TOKEN, "trainer.relapse_above=1.5"], "trainer.relapse_above=1.5 is not valid"),
    ([TOKEN, "algorithm=tpo", "algorithm.std_floor=-1"], "algorithm.std_floor=-1 is not valid; expected a number >= 0"),
    ([TOKEN, "algorithm=grpo", "algorithm.std_shrinkage=-1"], "algorithm.std_shrinkage=-1 is not valid"),
    ([TOKEN, "algorithm=group_pg", "algorithm.std_prior=0"],
     "algorithm.std_prior=0 is not valid; expected a number > 0"),
    ([TOKEN, "algorithm=dapo", "algorithm.rank_scores=maybe"], "algorithm.rank_scores='maybe' is not valid"),
    # MNIST bandit (tasks/mnist_bandit.py), before the data loads
    ([MNIST, "task.eval_every=0"], "task.eval_every=0 is not valid; expected a positive integer"),
    ([MNIST, "task.eval_every=-200"], "task.eval_every=-200 is not valid"),
    ([MNIST, "task.batch_size=0"], "task.batch_size=0 is not valid"),
    ([MNIST, "task.lr=0"], "task.lr=0 is not valid; expected a number > 0"),
    ([MNIST, "task.lr=-0.001"], "task.lr=-0.001 is not valid"),
    ([MNIST, "task.eval_step_label=later"], "task.eval_step_label='later' is not valid; valid choices: reference"),
    ([MNIST, "task.source=usb"], "task.source='usb' is not valid; valid choices: auto, idx"),
    ([MNIST, "task.mechanism=maybe"], "task.mechanism='maybe' is not valid; valid choices: true, false"),
    ([MNIST, "algorithm.epochs=4"], "algorithm.epochs=4 is not valid for task=mnist_bandit"),
    # tabular bandits (tasks/tabular.py)
    ([SINGLE, "task.arms=1"], "task.arms=1 is not valid; expected an integer >= 2"),
    ([SINGLE, "task.batch_size=0"], "task.batch_size=0 is not valid"),
    ([SINGLE, "task.alpha=0"], "task.alpha=0 is not valid; expected a number > 0"),
    ([MULTI, "task.contexts=0"], "task.contexts=0 is not valid"),
    ([MULTI, "task.arms=1"], "task.arms=1 is not valid"),
    ([MULTI, "task.alpha=-0.1"], "task.alpha=-0.1 is not valid"),
]

# boundary values that are valid and must still build
GOOD_VALUES = [
    [SINGLE, "task.checkpoint_every=0"],
    [SINGLE, "task.steps_to=[0.0,1.0]"],
    [SINGLE, "logger=wandb", "logger.init_timeout=0.5"],
    [TOKEN, "algorithm=grpo", "algorithm.beta=0"],
    [TOKEN, "algorithm=grpo", "algorithm.log_ratio_clip=inf"],
    [TOKEN, "algorithm=dg", "algorithm.surprisal_clip=null"],
    [TOKEN, "algorithm=dg", "algorithm.surprisal_clip=5"],
    [TOKEN, "algorithm=ppo", "task.K=1"],  # one sample per prompt: K is not a group size
    [TOKEN, "algorithm=ppo", "task.K=1", "task.match=interactions"],
    [TOKEN, "algorithm=tpo", "task.K=2", "task.V=2", "task.H=1", "algorithm.epochs=1", "algorithm.eta=1e-3"],
]


@pytest.mark.parametrize("overrides, fragment", BAD_VALUES, ids=lambda value: " ".join(value)
                         if isinstance(value, list) else None)
def test_bad_value_fails_before_any_work_and_names_key_and_value(overrides, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)) as raised:
        build_task(compose_config(overrides))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("overrides", GOOD_VALUES, ids=" ".join)
def test_boundary_values_are_valid(overrides):
    build_task(compose_config([*overrides, "seeds=1"]))


def test_every_algorithm_hyperparameter_has_a_valid_range():
    """Every declaration says what is valid (choices, true/false, or a range); each algorithm's YAML defaults pass
    (that every YAML key is declared: tests/test_algorithms.py)."""
    for name, cls in ALGORITHMS.items():
        for key, field in declarations(cls).items():
            valid = field.metadata["choices"] is not None or isinstance(field.default, bool) or field.metadata["bounds"]
            assert valid, f"algorithm={name}: {key} declares no valid values"
        algorithms.build(compose_config([f"algorithm={name}"]).algorithm)


TOY_CONFIGS = {"tabular_single": SINGLE, "tabular_multi": MULTI, "mnist_bandit": MNIST, "token_reversal": TOKEN}


@pytest.mark.parametrize("task", sorted(TOY_CONFIGS))
def test_every_numeric_task_key_has_a_row(task):
    """A numeric key added to a toy task's yaml needs its check and a row above (LLM tasks: test_llm_configs.py)."""
    files = [CONF / "task" / f"{task}.yaml"]
    if task == "token_reversal":
        files += [CONF / "model" / "transformer.yaml", CONF / "optim" / "muon.yaml", CONF / "optim" / "adam.yaml"]
    keys = [(override.split("=")[0], overrides) for overrides, _ in BAD_VALUES for override in overrides]
    run_keys = {f"task.{name}" for name in RUN_KEYS}  # checked alike for every task (harness.config.run_settings)
    covered = {key for key, overrides in keys if TOY_CONFIGS[task] in overrides or key.startswith("trainer.")
               or key in run_keys}
    for path in files:
        group = "task" if path.parent.name == "task" else path.parent.name
        for key, value in yaml.safe_load(path.read_text()).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert f"{group}.{key}" in covered, f"{path.name}: no BAD_VALUES row for {group}.{key}"


# ---- experiment presets ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("overrides, fragment", [
    (["experiment=nosuch"], "experiment='nosuch' is not valid; valid choices (conf/experiment/*.yaml): "
                            "beyond_amplification, beyond_amplification_floor"),
    (["experiment=table3_terminnal"], "experiment='table3_terminnal' is not valid"),
    (["experiment=fig4_mnist,nosuch"], "experiment='nosuch' is not valid"),  # every value of a sweep
    (["experiment=choice(fig4_mnist,nosuch)"], "experiment='nosuch' is not valid"),
    (["experiment=glob(nosuch*)"], "experiment=glob(nosuch*) matches no experiment preset"),
    (["+experiment=fig4_mnist"], "+experiment=fig4_mnist is not valid: conf/config.yaml already has the experiment "
                                 "slot; write experiment=fig4_mnist"),
    (["++experiment=nosuch"], "++experiment=nosuch is not valid"),
    (["experiment=null"], "experiment=null is not valid: for no preset leave experiment= out"),
    (["experiment="], "experiment='' is not valid"),
])
def test_compose_config_refuses_an_unknown_preset(overrides, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)) as raised:
        harness_compose(overrides)
    message = str(raised.value)
    assert "\n" not in message and all(preset in message for preset in experiment_presets())


def test_known_presets_and_no_preset_compose():
    assert harness_compose(["experiment=fig4_mnist"]).experiment_name == "fig4_mnist"
    assert harness_compose([]).experiment_name == "default"
    assert harness_compose(["~experiment"]).experiment_name == "default"
    assert experiment_presets() == sorted(p.stem for p in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("args", [
    ["experiment=nosuch", "hydra.run.dir={tmp}/run"],
    ["-m", "experiment=nosuch", "hydra.sweep.dir={tmp}/sweep"],
    ["-m", "experiment=fig2_tabular_single,nosuch", "hydra.sweep.dir={tmp}/sweep"],
])
def test_cli_refuses_an_unknown_preset_before_any_job(args, tmp_path):
    result = run_cli([arg.format(tmp=tmp_path) for arg in args] + ["logger=none"], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: experiment="), result.stderr
    assert "is not valid; valid choices (conf/experiment/*.yaml): " in lines[0]
    assert all(preset in lines[0] for preset in experiment_presets())
    assert list(tmp_path.iterdir()) == []  # no run or sweep directory, no outputs/ or multirun/


def test_cli_refuses_a_bad_value_without_writing_metrics(tmp_path):
    result = run_cli(["task=mnist_bandit", "algorithm.eta=0", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"],
                     tmp_path)
    assert result.returncode == 2, result.stderr
    assert "Error: algorithm.eta=0 is not valid; expected a number >= 1e-06" in result.stderr
    assert not list(tmp_path.rglob("metrics.csv")) and not list(tmp_path.rglob("checkpoint.pt"))
