"""One run's lifecycle, the same for every trainer: apply the process settings → build the trainer (every
ConfigError before the folder is touched) → lock the folder → plan (fresh, resume or already finished) → restore the
checkpoint → prepare → apply the plan → open the session (metrics writer, W&B) → fit → write summary.json."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from harness import rundir
from harness.artefacts import without_declaration
from harness.config import apply_process_settings
from harness.rundir.outputs import git_commit
from harness.session import Session
from harness.trainers import trainer_class
from tasks import get_task

log = logging.getLogger(__name__)


def train(cfg: DictConfig, run_dir: Path,
          finished_problem: Callable[[Path], str | None] = lambda run_dir: None) -> dict[str, Any]:
    """Run one (task, algorithm) configuration, all its seeds, with the trainer its task declares; return the
    summary written to summary.json (that of the earlier run when it already finished with this configuration).
    ``finished_problem``: why a finished run is damaged (``rundir.plan_run``); the command passes the report's rule."""
    started, commit = time.time(), git_commit()  # the code this process runs, not HEAD at its end
    cfg = without_declaration(cfg)
    apply_process_settings(cfg)
    trainer = trainer_class(get_task(cfg.task.name))(cfg)
    with trainer.lock(run_dir):
        plan = rundir.plan_run(cfg, run_dir, trainer.has_checkpoint, finished_problem)
        if plan.finished is not None:
            log.info("%s already finished with this configuration (%s); nothing to do", run_dir,
                     plan.finished["status"])
            return plan.finished
        start = trainer.resume(run_dir, plan.fingerprint) if plan.resume else None
        trainer.prepare(run_dir)
        trainer.apply(plan, run_dir)
        session = Session(cfg, trainer.settings, run_dir, trainer.metric_names, trainer.seeds, started,
                          start.cpu_seconds if start else 0.0, start.resumes if start else [], main=trainer.is_main,
                          fingerprint=plan.fingerprint, commit=commit)
        if start is not None:
            log.info("resuming %s from step %d", run_dir, start.step)
        session.open(start.rows if start else None, plan.uid)
        with session.training(trainer.device):
            trainer.fit(session, start)
        if session.status == "interrupted":
            log.warning("interrupted; %s", trainer.resume_hint(run_dir))
        seed_status = {str(s): "diverged" if str(s) in trainer.diverged else session.status for s in trainer.seeds}
        return session.finish(seed_status, trainer.diverged, trainer.hardware())
