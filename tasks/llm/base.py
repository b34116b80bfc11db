"""The contract between an RLVR task and the TRL trainer (``harness/llm``).

A task yields rows (a ``prompt`` as chat messages plus the columns its scorer needs) for training and for the
held-out evaluation, and scores one completion of one row in [0, 1]. The trainer owns generation, losses and logs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from algorithms import Rollout
from common.checks import ConfigError, check_positive_int
from common.declared import required
from tasks.base import Task


def check_group_size(key: str, value: Any) -> int:
    check_positive_int(key, value)
    if value < 2:
        raise ConfigError(f"{key}={value} is not valid; a group needs at least 2 completions")
    return value

# error = 1 − reward_mean, the same training-rollout error the token tasks log, so every report table reads LLM runs.
METRICS = ("error", "reward_mean", "frac_solved", "frac_zero_var", "test_accuracy", "completion_length",
           "truncated", "loss", "grad_norm", "kl_ref")


class LLMTask(Task):
    """An RLVR task: subclasses set ``name`` and ``columns`` and implement the row builders and ``score``."""

    trainer = "trl"
    rollouts = frozenset({Rollout.GROUP})
    multi_epoch = True  # TRL's num_iterations (harness/trainers/trl.py)
    # Updates per rollout batch when algorithm.epochs is null: the trainer's, not the algorithm's default_epochs (the
    # paper does not say; verl's default), so an LLM run reads its epochs from one place
    default_epochs: ClassVar[int] = 1
    metric_names = METRICS
    columns: ClassVar[tuple[str, ...]] = ()  # dataset columns ``score`` reads besides the prompt

    @classmethod
    def epochs_for(cls, algorithm) -> int:
        return cls.default_epochs if algorithm.hp.epochs is None else algorithm.hp.epochs

    @dataclass(frozen=True)
    class Settings(Task.Settings):
        """conf/task/llm/common.yaml: what every LLM task's run reads (the TRL trainer, harness/trainers/trl.py)."""

        K: int = required("completions per prompt", check=check_group_size)
        batch_size: int = required("prompts per step, over all devices", check=check_positive_int)
        micro_batch_groups: int = required("prompt groups per forward/backward and device", check=check_positive_int)
        max_completion_length: int = required("tokens", check=check_positive_int)
        temperature: float = required("sampling temperature (0 is not a distribution)", low=0, low_open=True)
        sequence_logprob: str = required("sum: ℓ = Σ_t log π(y_t) (the paper) | mean: over the completion's length",
                                         choices=("sum", "mean"))
        loss_impl: str = required("project: the losses of algorithms/ | trl: TRL's own GRPO loss",
                                  choices=("project", "trl"))
        ref_kl: float = required("λ of a k3 KL to the initial model (the LoRA base); 0 = none", low=0)
        lora_rank: int = required("0 = full fine-tuning; > 0 = LoRA on every linear layer but the LM head", low=0,
                                  integer=True)
        lora_alpha: int = required("LoRA's α", check=check_positive_int)
        eval_every: int = required("held-out test accuracy every N steps and at the last step (0 = never)", low=0,
                                   integer=True)
        eval_size: int = required("held-out prompts (greedy decoding)", low=1, integer=True)
        eval_batch_size: int = required("held-out prompts per generation batch", check=check_positive_int)
        vllm: bool = required("generate with vLLM (colocated; needs the llm-gpu extra and CUDA)")

    def train_rows(self, seed: int, count: int) -> list[dict[str, Any]]:
        """``count`` training rows for run seed ``seed`` (paired runs with one seed see the same prompts)."""
        raise NotImplementedError

    def eval_rows(self) -> list[dict[str, Any]]:
        """The held-out rows, the same for every run."""
        raise NotImplementedError

    def score(self, completion: str, row: dict[str, Any]) -> float:
        """Reward of one completion for one row (its ``columns``), in [0, 1]."""
        raise NotImplementedError


def chat(user: str, system: str | None = None) -> list[dict[str, str]]:
    """A prompt as chat messages; the model's chat template renders it."""
    messages = [{"role": "system", "content": system}] if system else []
    return [*messages, {"role": "user", "content": user}]
