"""The contract between an RLVR task and the TRL trainer (``harness/llm``).

A task yields rows (a ``prompt`` as chat messages plus the columns its scorer needs) for training and for the
held-out evaluation, and scores one completion of one row in [0, 1]. The trainer owns generation, losses and logs.
"""

from __future__ import annotations

from typing import Any, ClassVar

from omegaconf import DictConfig

from algorithms import Rollout
from common.checks import ConfigError, check_number, check_positive_int
from tasks.base import Task

# error = 1 − reward_mean, the same training-rollout error the token tasks log, so every report table reads LLM runs.
METRICS = ("error", "reward_mean", "frac_solved", "frac_zero_var", "test_accuracy", "completion_length",
           "truncated", "loss", "grad_norm", "kl_ref")


class LLMTask(Task):
    """An RLVR task: subclasses set ``name`` and ``columns`` and implement the row builders and ``score``."""

    trainer = "trl"
    rollouts = frozenset({Rollout.GROUP})
    multi_epoch = True  # TRL's num_iterations (harness/trainers/trl.py)
    metric_names = METRICS
    columns: ClassVar[tuple[str, ...]] = ()  # dataset columns ``score`` reads besides the prompt
    whole_eval_split: ClassVar[bool] = False  # task.eval_size=null means the whole held-out split

    def __init__(self, cfg: DictConfig, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        for key in ("K", "batch_size", "micro_batch_groups", "max_completion_length"):
            check_positive_int(f"task.{key}", cfg[key])
        if cfg.K < 2:
            raise ConfigError(f"task.K={cfg.K} is not valid; a group needs at least 2 completions")
        if not isinstance(cfg.eval_every, int) or cfg.eval_every < 0:
            raise ConfigError(f"task.eval_every={cfg.eval_every!r} is not valid; expected 0 (never) or a positive "
                              "integer")
        check_positive_int("task.eval_batch_size", cfg.eval_batch_size)
        check_number("task.eval_size", cfg.eval_size, low=1, integer=True, optional=self.whole_eval_split)

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
