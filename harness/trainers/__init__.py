"""Trainers: what runs a task's steps inside the run lifecycle of ``harness/run.py``.

A task names its trainer (``tasks.base.Task.trainer``); the registry maps the name to a class, imported only when a
run needs it (TRL is slow to import):

* ``group``: the batched group trainer: rollout → freeze ℓ_old and the signal → E epochs of loss and optimizer
  step → metrics, for every batched task (``batched.py``);
* ``closed_form``: a task whose update is an expected direction in closed form (no sample to fit);
* ``trl``: LLM tasks on TRL's GRPOTrainer with the project's losses (``trl.py``).
"""

from __future__ import annotations

import importlib

from common.checks import ConfigError
from harness.trainers.base import Trainer
from tasks.base import StepOutput, Task

TRAINERS: dict[str, str] = {
    "group": "harness.trainers.batched:GroupTrainer",
    "closed_form": "harness.trainers.batched:ClosedFormTrainer",
    "trl": "harness.trainers.trl:TRLTrainer",
}
EXTRAS = {"trl": "llm"}  # the optional dependencies (pyproject.toml's extras) a trainer imports


def trainer_class(task_cls: type[Task]) -> type[Trainer]:
    """The trainer class a task declares."""
    if task_cls.trainer not in TRAINERS:
        raise ConfigError(f"task={task_cls.name} declares trainer={task_cls.trainer!r}; valid choices: "
                          f"{', '.join(TRAINERS)}")
    module, attribute = TRAINERS[task_cls.trainer].split(":")
    try:
        return getattr(importlib.import_module(module), attribute)
    except ModuleNotFoundError as error:
        if task_cls.trainer not in EXTRAS or (error.name or "").partition(".")[0] in ("harness", "tasks",
                                                                                      "algorithms", "common"):
            raise  # no extra of ours would install it
        extra = EXTRAS[task_cls.trainer]
        raise ConfigError(f"task={task_cls.name} needs the `{extra}` extra ({error.name} is not installed): "
                          f"pip install 'tpo-bench[{extra}]', or make install in a checkout") from None


def episode(task: Task, step: int) -> StepOutput:
    """One step of a built batched task, as its trainer runs it (for benches and tests that drive a task)."""
    return trainer_class(type(task)).episode(task, step)
