"""A run's configuration: composed as ``python -m harness`` composes it, validated, and built into its task; and the
process-wide settings a run applies once at its start. Every trainer (``harness/trainers``) builds its task here."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import algorithms
from common.checks import (
    ConfigError, check_bool, check_choice, check_non_negative, check_number, check_positive_int, check_seed_ids,
    did_you_mean)
from harness import locations
from harness.artefacts import PRESETS, presets as experiment_presets, without_declaration
from harness.identity import RENAMED
from harness.tracking import check_logger_config
from tasks import get_task
from tasks.base import Task
from tasks.memory import check_memory
from tasks.models import linear

CONFIG_DIR = locations.CONF


EXPERIMENT_NAME_RULE = ("a non-empty name that is one folder name: letters, digits, _ - . only (no path separators, "
                        "no spaces), not starting with '.'")
_EXPERIMENT_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*")


def check_experiment_name(name) -> str:
    """``experiment_name`` names the run's folders (``outputs/<experiment_name>/...``, ``multirun/<name>/...``)
    and its W&B group: one safe folder name, so that no name writes outside ``outputs/``; ConfigError otherwise."""
    if not isinstance(name, str) or not _EXPERIMENT_NAME.fullmatch(name):
        raise ConfigError(f"experiment_name={name!r} is not valid; expected {EXPERIMENT_NAME_RULE}")
    return name


def _check_experiment_name_overrides(parsed: list) -> None:
    """Every value an ``experiment_name=`` override sets (each of a sweep's) passes ``check_experiment_name``; run
    before Hydra makes the folders the name is part of."""
    for override in parsed:
        if override.key_or_group != "experiment_name" or override.is_delete():
            continue
        try:
            names = list(override.sweep_string_iterator()) if override.is_sweep_override() else [override.value()]
        except Exception:  # noqa: BLE001 - an interval or range sweep: numbers, not names
            raise ConfigError(f"{override.input_line} is not valid; expected {EXPERIMENT_NAME_RULE}") from None
        for name in names:
            check_experiment_name(str(name) if isinstance(name, (int, float)) and not isinstance(name, bool) else name)


def preset_sweep(preset: str) -> dict[str, list[str]]:
    """The sweep of ``conf/experiment/<preset>.yaml`` (``hydra.sweeper.params``) as each axis's values, in the
    preset's order and as its text spells them (``algorithm.eta: 1.0`` stays ``1.0``): what ``-m`` expands, read
    without composing; ConfigError for a missing preset or an axis that is not a comma list."""
    import yaml

    path = PRESETS / f"{preset}.yaml"
    if not path.exists():
        raise ConfigError(f"experiment={preset} is not a preset; valid choices: {', '.join(experiment_presets())}")
    params = ((yaml.safe_load(path.read_text()) or {}).get("hydra") or {}).get("sweeper", {}).get("params") or {}
    sweep = {}
    for axis, values in params.items():
        text = str(values).lower() if isinstance(values, bool) else str(values)
        if re.search(r"[()\[\]{}]", text):
            raise ConfigError(f"{path.name}: hydra.sweeper.params.{axis}={text!r} is not valid here; expected a comma "
                              "list of values (a campaign expands the sweep itself)")
        sweep[axis] = [value.strip() for value in text.split(",")]
    return sweep


def sweep_value(value):
    """A sweep value as a run's config holds it: ``"8"`` → 8, ``"1.0"`` → 1.0, other text as it is (a YAML bool as
    Hydra spells it), so that a queue's 1.0 is the preset's ``1.0`` and a table's 7 a run's ``7``."""
    text = str(value).lower() if isinstance(value, bool) else str(value)
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def check_experiment_overrides(overrides: list[str]) -> None:
    """Raise a ConfigError naming the preset and listing the valid ones if an ``experiment=`` override names no
    ``conf/experiment/*.yaml``: every value of a sweep (``experiment=a,b``, ``choice(...)``, ``glob(...)``) is
    checked, so that a sweep fails before Hydra launches its first job. ``+experiment=`` and ``++experiment=`` are
    refused too (conf/config.yaml's defaults already have the experiment slot), and so is ``experiment=null``
    (no preset: leave the override out, or ``~experiment``). An override Hydra cannot parse is left to Hydra.
    ``experiment_name=`` values are checked too (``check_experiment_name``): the name is a folder of the run's path."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ValueType

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception:  # noqa: BLE001 - a syntax error: Hydra reports it with its own message
        return
    _check_experiment_name_overrides(parsed)
    presets = experiment_presets()
    valid = f"valid choices (conf/experiment/*.yaml): {', '.join(presets)}"
    for override in parsed:
        if override.key_or_group != "experiment" or override.is_delete():
            continue
        value = override.value()
        if override.is_add() or override.is_force_add():
            choice = override.input_line.lstrip("+").split("=", 1)[-1]
            raise ConfigError(f"{override.input_line} is not valid: conf/config.yaml already has the experiment "
                              f"slot; write experiment={choice}; {valid}")
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            if not value.filter(presets):
                raise ConfigError(f"{override.input_line} matches no experiment preset; {valid}")
            continue
        try:
            names = list(override.sweep_string_iterator()) if override.is_sweep_override() else (
                value if isinstance(value, list) else [value])
        except Exception:  # noqa: BLE001 - an interval sweep: not a list of names
            raise ConfigError(f"{override.input_line} is not valid; {valid}") from None
        for name in names:
            if name is None or name == "null":
                raise ConfigError(f"experiment=null is not valid: for no preset leave experiment= out (or write "
                                  f"~experiment); {valid}")
            if name not in presets:
                near = did_you_mean(name, presets)
                hint = f"did you mean {near}? " if near else ""
                raise ConfigError(f"experiment={name!r} is not valid; {hint}{valid}")


def compose_config(overrides: list[str], with_hydra: bool = False) -> DictConfig:
    """The config exactly as ``python -m harness <overrides>`` composes it and runs it (less the preset's
    ``artefact`` block, which a run drops), for scripts, benches and tests; an unknown experiment preset raises a
    ConfigError (``check_experiment_overrides``)."""
    check_experiment_overrides(overrides)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return without_declaration(compose("config", overrides=list(overrides), return_hydra_config=with_hydra))


@dataclass(frozen=True)
class RunSettings:
    """What a run of any task reads from its config besides its task's and its algorithm's settings (the algorithm's
    are typed by ``algorithms/hyperparameters.py``), typed and checked once (``run_settings``). Trainers, the session
    and summary.json read these, never the config again: ``steps`` is the run's budget (``task.steps``: a task's
    YAML sets its default), ``seeds`` its seed count. The config stays the record of what ran (``identity.json``);
    the launch options (``trainer.resume``, ``trainer.overwrite``) and the experiment's name, which a resumed run
    keeps from its folder, are the run folder's (``harness.rundir.plan_run``).
    """

    seeds: int  # trained together as one batched computation (an LLM run: 1)
    seed_offset: int  # the seed ids are seed_offset .. seed_offset + seeds - 1
    steps: int  # updates (bandits) or episodes (sequence tasks)
    checkpoint_every: int  # steps between checkpoints; 0 = only at the end
    steps_to: tuple[float, ...]  # the error thresholds summary.json reports the first step below
    solved_below: float  # summary.json's events: a seed solves when its error falls below this
    relapse_above: float  # ... and relapses when, solved, its error rises above this
    progress: bool | str  # auto | bar | lines | true | false
    device: str  # cpu | cuda[:n]
    flush_denormal: bool

    @property
    def seed_ids(self) -> range:
        return range(self.seed_offset, self.seed_offset + self.seeds)


def run_settings(cfg: DictConfig) -> RunSettings:
    """The run settings of a composed config, each key checked once (ConfigError, one line naming the key)."""
    trainer = cfg.trainer
    for old, new in RENAMED.items():  # a preset or a test's config may still set one: it would be read by nothing
        if OmegaConf.select(cfg, old) is not None:
            raise ConfigError(f"{old} is not a config key; it is {new} now (set {new} instead)")
    check_positive_int("seeds", cfg.seeds)
    if not isinstance(cfg.seed_offset, int) or cfg.seed_offset < 0:
        raise ConfigError(f"seed_offset={cfg.seed_offset!r} is not valid; expected a non-negative integer")
    check_seed_ids(cfg.seeds, cfg.seed_offset, llm=cfg.task.get("kind") == "llm")
    thresholds = cfg.task.get("steps_to")
    if not OmegaConf.is_list(thresholds):
        raise ConfigError(f"task.steps_to={thresholds!r} is not valid; expected a list of error thresholds in [0, 1]")
    solved_below = check_number("trainer.solved_below", trainer.solved_below, low=0, high=1)
    check_choice("device", str(cfg.device).split(":")[0], ("cpu", "cuda"))
    check_experiment_name(cfg.experiment_name)
    return RunSettings(
        seeds=int(cfg.seeds),
        seed_offset=int(cfg.seed_offset),
        steps=check_positive_int("task.steps", cfg.task.steps),
        checkpoint_every=int(check_non_negative("task.checkpoint_every", cfg.task.checkpoint_every, integer=True)),
        steps_to=tuple(check_number("task.steps_to", value, low=0, high=1) for value in thresholds),
        solved_below=float(solved_below),
        relapse_above=float(check_number("trainer.relapse_above", trainer.relapse_above, low=solved_below, high=1)),
        progress=check_choice("trainer.progress", trainer.progress, ("auto", "bar", "lines", True, False)),
        device=str(cfg.device),
        flush_denormal=check_bool("flush_denormal", cfg.flush_denormal))


def build_task(cfg: DictConfig, device: torch.device | None = None) -> Task:
    """Validate the composition and construct the task; every error here comes before any training work.

    ``device`` overrides ``cfg.device`` without its checks: the tests build tasks on PyTorch's ``meta`` device,
    where any tensor made on the host fails, to check on a CPU-only machine that the GPU path makes every tensor on
    the task's device. The memory estimate (tasks/memory.py ``check_memory``, as ``python -m harness`` checks it before
    launching) refuses a run over ``memory_cap_gb`` here too; on the ``meta`` device, which allocates nothing, it is
    not checked."""
    algorithm = algorithms.build(cfg.algorithm)  # its hyperparameters checked and typed
    task_cls = get_task(cfg.task.name)
    rollout = algorithm.rollout_for(task_cls.rollouts)
    if rollout is None or not task_cls.supports(type(algorithm)):
        needs = ", ".join(shape.value for shape in algorithm.rollouts)
        raise ConfigError(f"algorithm={algorithm.id} cannot run on task={task_cls.name} (it needs a rollout of "
                          f"shape {needs}); valid algorithms for {task_cls.name}: "
                          f"{', '.join(task_cls.supported_algorithms())}")
    algorithm.check(rollout)
    settings = run_settings(cfg)
    check_logger_config(cfg.logger)
    task_cls.check_steps(cfg.task, settings.steps)
    check_choice("cpu_matmul", cfg.cpu_matmul, linear.BACKENDS)
    if str(cfg.device).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={cfg.device} requested but CUDA is not available; valid choices here: cpu")
    device = torch.device(cfg.device) if device is None else device
    if device.type != "meta":
        check_memory(cfg)
    seeds = torch.arange(settings.seed_offset, settings.seed_offset + settings.seeds, dtype=torch.int64, device=device)
    return task_cls(cfg.task, algorithm, rollout, seeds, device, model=cfg.get("model"), optim=cfg.get("optim"))


def apply_process_settings(cfg: DictConfig) -> None:
    """The process-wide settings of a run, applied once at its start (``harness/run.py``): torch's intra-op threads
    (``threads``) and the CPU matmul library (``cpu_matmul``, tasks/models/linear.py). Both change only float
    rounding, never what a run computes, so neither is part of a run's identity; summary.json records them."""
    set_threads(cfg.threads)
    linear.set_backend(check_choice("cpu_matmul", cfg.cpu_matmul, linear.BACKENDS))


def set_threads(threads) -> None:
    """``threads``: torch's intra-op threads (null or 0: torch's default)."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 0):
        raise ConfigError(f"threads={threads!r} is not valid; expected null, 0 (torch's default) or a positive integer")
    if threads:
        torch.set_num_threads(threads)
