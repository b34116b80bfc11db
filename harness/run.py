"""The training loop: validate, build the task, step it, write outputs, checkpoint, mirror to W&B."""

from __future__ import annotations

import logging
import math
import re
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, OmegaConf

import algorithms
from algorithms.checks import (
    ConfigError, check_bool, check_choice, check_non_negative, check_number, check_positive_int, check_seed_ids,
    did_you_mean)
from harness import outputs, rundir
from harness.session import Session
from harness.tracking import check_logger_config
from tasks import get_task
from tasks.base import Task, check_memory
from tasks.models import linear

log = logging.getLogger(__name__)
CONFIG_DIR = Path(__file__).resolve().parent.parent / "conf"


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


def experiment_presets() -> list[str]:
    """The experiment presets, ``conf/experiment/<name>.yaml``."""
    return sorted(path.stem for path in (CONFIG_DIR / "experiment").glob("*.yaml"))


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
    """The config exactly as ``python -m harness <overrides>`` composes it, for scripts, benches and tests; an unknown
    experiment preset raises a ConfigError (``check_experiment_overrides``)."""
    check_experiment_overrides(overrides)
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        return compose("config", overrides=list(overrides), return_hydra_config=with_hydra)


def build_task(cfg: DictConfig, device: torch.device | None = None) -> Task:
    """Validate the composition and construct the task; every error here comes before any training work.

    ``device`` overrides ``cfg.device`` without its checks: the tests build tasks on PyTorch's ``meta`` device,
    where any tensor made on the host fails, to check on a CPU-only machine that the GPU path makes every tensor on
    the task's device. The memory estimate (tasks/base.py ``check_memory``, as ``python -m harness`` checks it before
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
    check_positive_int("seeds", cfg.seeds)
    check_positive_int("trainer.steps", cfg.trainer.steps)
    check_non_negative("trainer.checkpoint_every", cfg.trainer.checkpoint_every, integer=True)  # 0 = at the end
    if not isinstance(cfg.seed_offset, int) or cfg.seed_offset < 0:
        raise ConfigError(f"seed_offset={cfg.seed_offset!r} is not valid; expected a non-negative integer")
    check_seed_ids(cfg.seeds, cfg.seed_offset, llm=cfg.task.get("kind") == "llm")
    thresholds = cfg.task.get("steps_to")
    if not OmegaConf.is_list(thresholds):
        raise ConfigError(f"task.steps_to={thresholds!r} is not valid; expected a list of error thresholds in [0, 1]")
    for threshold in thresholds:
        check_number("task.steps_to", threshold, low=0, high=1)
    check_logger_config(cfg.logger)
    check_bool("flush_denormal", cfg.flush_denormal)
    check_choice("trainer.progress", cfg.trainer.progress, ("auto", True, False))
    check_number("trainer.solved_below", cfg.trainer.solved_below, low=0, high=1)
    check_number("trainer.relapse_above", cfg.trainer.relapse_above, low=cfg.trainer.solved_below, high=1)
    check_experiment_name(cfg.experiment_name)
    task_cls.check_steps(cfg.task, int(cfg.trainer.steps))
    check_choice("device", str(cfg.device).split(":")[0], ("cpu", "cuda"))
    linear.set_backend(check_choice("cpu_matmul", cfg.cpu_matmul, linear.BACKENDS))
    if str(cfg.device).startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError(f"device={cfg.device} requested but CUDA is not available; valid choices here: cpu")
    device = torch.device(cfg.device) if device is None else device
    if device.type != "meta":
        check_memory(cfg)
    seeds = torch.arange(cfg.seed_offset, cfg.seed_offset + cfg.seeds, dtype=torch.int64, device=device)
    return task_cls(cfg.task, cfg.algorithm, algorithm, rollout, seeds, device, model=cfg.get("model"),
                    optim=cfg.get("optim"))


def set_threads(threads) -> None:
    """``threads``: torch's intra-op threads (null or 0: torch's default)."""
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 0):
        raise ConfigError(f"threads={threads!r} is not valid; expected null, 0 (torch's default) or a positive integer")
    if threads:
        torch.set_num_threads(threads)


def _to_numpy(metrics: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    return {name: value.detach().to("cpu", torch.float64).numpy() for name, value in metrics.items()}


def train(cfg: DictConfig, run_dir: Path) -> dict[str, Any]:
    """Run one (task, algorithm) configuration for ``cfg.seeds`` seeds in one batched computation."""
    if cfg.task.get("kind") == "llm":  # RLVR on language models runs through TRL (harness/llm)
        from harness.llm.train import train_llm

        return train_llm(cfg, run_dir)
    started = time.time()
    set_threads(cfg.threads)
    task = build_task(cfg)
    with rundir.locked(run_dir):
        return _train(cfg, run_dir, task, started)


def _train(cfg: DictConfig, run_dir: Path, task: Task, started: float) -> dict[str, Any]:
    seeds = task.seeds.tolist()
    steps = int(cfg.trainer.steps)
    plan = rundir.plan_run(cfg, run_dir, lambda folder: (folder / outputs.CHECKPOINT_FILE).exists())
    if plan.finished is not None:
        log.info("%s already finished with this configuration (%s); nothing to do", run_dir, plan.finished["status"])
        return plan.finished
    checkpoint = outputs.load_checkpoint(run_dir, plan.fingerprint) if plan.resume else None
    if checkpoint is not None:
        if checkpoint["step"] > steps:
            raise outputs.CheckpointError(f"{run_dir / outputs.CHECKPOINT_FILE} is at step {checkpoint['step']}, "
                                          f"past trainer.steps={steps}; {outputs.CHECKPOINT_HELP}")
        try:
            task.load_state_dict(checkpoint["task"])
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise outputs.CheckpointError(f"{run_dir / outputs.CHECKPOINT_FILE} does not fit this task's state "
                                          f"({type(error).__name__}: {str(error).splitlines()[0]}); "
                                          f"{outputs.CHECKPOINT_HELP}") from None
        start, diverged = checkpoint["step"], checkpoint["diverged"]
        resumes, cpu_before = [*checkpoint["resumes"], start], checkpoint["cpu_seconds"]
        log.info("resuming %s from step %d", run_dir, start)
    else:
        start, diverged, resumes, cpu_before = 0, {}, [], 0.0
    session = Session(cfg, run_dir, task.metric_names, seeds, started, cpu_before, resumes)
    plan.apply(run_dir)
    session.open(checkpoint["rows"] if checkpoint else None, plan.uid)
    writer, tracker = session.writer, session.tracker
    # first step with a non-finite loss per seed: the steps' losses are kept on the device and checked only when
    # metrics are recorded or saved, so that no step waits for the device, or pays ~5 ops, to check for divergence
    losses: list[tuple[int, torch.Tensor]] = []  # (step, its per-seed loss) since the last check

    def read_diverged() -> None:
        if not losses:
            return
        bad = ~torch.isfinite(torch.stack([loss for _, loss in losses]))  # (steps, seeds)
        first = bad.to(torch.uint8).argmax(0)  # the first non-finite step per seed (0 where none)
        for index in bad.any(0).nonzero().flatten().tolist():
            diverged.setdefault(str(seeds[index]), losses[int(first[index])][0])
        losses.clear()

    def record(step: int, metrics: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
        read_diverged()
        values = _to_numpy(metrics)
        for index, seed in enumerate(seeds):
            if str(seed) in diverged:  # a diverged seed's numbers are meaningless from then on
                for column in values.values():
                    column[index] = math.nan
        writer.append(step, values)
        tracker.log(step, values)
        return values

    def save(step: int) -> None:
        read_diverged()
        writer.flush()
        outputs.save_checkpoint(run_dir, {"step": step, "task": task.state_dict(), "rows": writer.rows,
                                          "diverged": diverged, "resumes": resumes, "fingerprint": plan.fingerprint,
                                          "cpu_seconds": session.cpu_seconds()})
        tracker.flush()

    checkpoint_every = int(cfg.trainer.checkpoint_every)  # read once: an interpolated config lookup costs ~0.4 ms
    progress = _progress_bar(cfg, steps, start)
    with session.training(task.device):
        try:
            if start == 0 and (initial := task.initial_metrics()) is not None:
                record(*initial)
            for step in range(start, steps):
                out = task.step(step)
                if out.loss is not None:
                    losses.append((step, out.loss.detach().expand(len(seeds))))  # a view; (S,) or one for all
                    if len(losses) == 4096:  # a task that records rarely: bound what is kept
                        read_diverged()
                if out.metrics is not None:
                    values = record(out.log_step, out.metrics)
                    if progress is not None and "error" in values:
                        progress.set_postfix(error=f"{np.nanmean(values['error']):.4f}", refresh=False)
                if progress is not None:
                    progress.update(1)
                if checkpoint_every and (step + 1) % checkpoint_every == 0:
                    save(step + 1)
            save(steps)
        finally:
            read_diverged()
            if progress is not None:
                progress.close()
    if session.status == "interrupted":
        log.warning("interrupted; the last checkpoint in %s resumes with trainer.resume=true", run_dir)
    seed_status = {str(s): ("diverged" if str(s) in diverged else session.status) for s in seeds}
    return session.finish(seed_status, diverged, {"device": str(task.device), "cpu": linear.cpu_model(),
                                                      "cpu_matmul": linear.backend()})


def _progress_bar(cfg: DictConfig, steps: int, start: int):
    import sys

    show = cfg.trainer.progress
    if show == "auto":
        show = sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=steps, initial=start, desc=f"{cfg.task.name}/{cfg.algorithm.name}", dynamic_ncols=True)
