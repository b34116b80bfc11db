"""Task registry: Hydra ``task=<id>`` → task class. Modules load lazily so a tabular run never imports MNIST code."""

from __future__ import annotations

import importlib

from common.checks import ConfigError
from tasks.base import Task

TASKS: dict[str, str] = {
    "tabular_single": "tasks.tabular:TabularSingle",
    "tabular_multi": "tasks.tabular:TabularMulti",
    "token_reversal": "tasks.token_reversal:TokenReversal",
    "mnist_bandit": "tasks.mnist_bandit:MnistBandit",
    "gsm8k": "tasks.llm.gsm8k:Gsm8k",
    "graph_colouring": "tasks.llm.gym_tasks:GraphColouring",
    "knights_knaves": "tasks.llm.gym_tasks:KnightsKnaves",
}


def get_task(name: str) -> type[Task]:
    if name not in TASKS:
        raise ConfigError(f"task={name!r} is unknown; valid choices: {', '.join(TASKS)}")
    module, attribute = TASKS[name].split(":")
    return getattr(importlib.import_module(module), attribute)
