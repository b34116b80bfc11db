"""The training loop: build the task, step it, write outputs, checkpoint, mirror to W&B."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig

from harness import outputs, rundir
from harness.config import build_task, set_threads
from harness.session import Session
from tasks.base import Task
from tasks.models import linear

log = logging.getLogger(__name__)


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
