"""Task registry: Hydra ``task=<id>`` → task class. Modules load lazily so a tabular run never imports MNIST code."""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field

from common.checks import ConfigError
from tasks.base import Task

@dataclass(frozen=True)
class TaskEntry:
    """A task as the registry knows it without importing it: where its class is, and how reports name it."""

    path: str  # module:Class, imported only when a run needs the class
    label: str  # in figure titles and tables
    step: str = "Step"  # what one training step is, the x label of its curves: an episode for sequence tasks
    error: str = "Error"  # the y label of its error curves
    error_by_reward: dict[str, str] = field(default_factory=dict)  # where the reward changes what the error counts


TASKS: dict[str, TaskEntry] = {
    "tabular_single": TaskEntry("tasks.tabular:TabularSingle", "single-context bandit"),
    "tabular_multi": TaskEntry("tasks.tabular:TabularMulti", "multi-context bandit"),
    "token_reversal": TaskEntry("tasks.token_reversal:TokenReversal", "token reversal", step="Episode",
                                error="Exact-match error",
                                error_by_reward={"bag_of_tokens": "Token error",
                                                 "sequential": "Error (sequential reward)"}),
    "mnist_bandit": TaskEntry("tasks.mnist_bandit:MnistBandit", "MNIST bandit", error="Test error"),
    "gsm8k": TaskEntry("tasks.llm.gsm8k:Gsm8k", "GSM8K", step="Episode"),
    "graph_colouring": TaskEntry("tasks.llm.gym_tasks:GraphColouring", "graph colouring", step="Episode"),
    "knights_knaves": TaskEntry("tasks.llm.gym_tasks:KnightsKnaves", "Knights & Knaves", step="Episode"),
    "reasoning_gym": TaskEntry("tasks.llm.gym_tasks:ReasoningGym", "Reasoning Gym", step="Episode"),
}


def get_task(name: str) -> type[Task]:
    if name not in TASKS:
        raise ConfigError(f"task={name!r} is unknown; valid choices: {', '.join(TASKS)}")
    module, attribute = TASKS[name].path.split(":")
    return getattr(importlib.import_module(module), attribute)
