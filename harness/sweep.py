"""A sweep's closing report: every job records how it ended, and a sweep with a failed job exits non-zero.

Hydra runs each job of a multirun in isolation (a job's error stays in its folder and the other jobs go on) and
exits 0 whatever happened. ``SweepReport`` (a Hydra callback, registered in conf/config.yaml) gives each job a
record folder before the first job starts; after the last job it prints one line per failed job (folder, error)
and exits 1 if there was any. What stops a sweep before its first job (an unknown choice, preset or key in any
job: harness/__main__.py's one line, exit 2; another composition error: Hydra's, exit 1) never reaches this report.

``LaunchFolders`` (a Hydra callback too) notes, before Hydra makes a launch's run or sweep folder, which folders
of its path do not exist yet: a single run refused before any work, or a sweep stopped before its first job,
removes those of them it left empty (``remove_new_folders``), and nothing that existed before the launch.

A sweep job that SLURM runs again continues the run it started (``continue_if_requeued``).

``SweepPlan`` (a Hydra callback too) prints, before the first job, the sweep's size and its estimated CPU-hours
(``sweep_plan``): a preset can be hours of work, and a user should know before it starts.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

RECORDS_ENV = "TPO_BENCH_SWEEP_RECORDS"  # inherited by the jobs, in this process or a launcher's workers
RECORDS_DIR = ".tpo-bench-jobs"
log = logging.getLogger(__name__)


def record_job(number: int, run_dir: Path, status: str, error: str | None) -> None:
    """Record one job's outcome for the sweep's report (nothing outside a sweep started by SweepReport)."""
    folder = os.environ.get(RECORDS_ENV)
    if folder:
        payload = {"job": number, "dir": str(run_dir), "status": status, "error": error}
        Path(folder, f"{number}.json").write_text(json.dumps(payload) + "\n")


def continue_if_requeued(cfg: DictConfig) -> None:
    """A sweep job that SLURM runs again (``SLURM_RESTART_COUNT``) continues the run it started, from its last
    checkpoint (or from the start if it has none): its command, the same as the first time, would refuse that run.

    The SLURM launcher's jobs are requeued by submitit at SLURM's USR2 (``--signal``, ``signal_delay_s`` before the
    time limit; up to ``max_num_timeout`` times, conf/hydra/launcher/), or by SLURM itself at a preemption. The run
    is interrupted wherever it is and resumes from its last checkpoint, so it repeats the steps since then and ends
    with the numbers of an uninterrupted run."""
    restarts = int(os.environ.get("SLURM_RESTART_COUNT", "0"))
    if restarts:
        log.info("SLURM runs this job again (restart %d): trainer.resume=auto continues its run", restarts)
        cfg.trainer.resume, cfg.trainer.overwrite = "auto", False


_new_folders: dict[str, list[Path]] = {}  # "run" / "sweep": the launch folder and its parents it creates, deepest first


def new_folders(folder: Path) -> list[Path]:
    """``folder`` and its parents that do not exist now, deepest first."""
    folder = Path(os.path.abspath(folder))
    return [path for path in (folder, *folder.parents) if not path.exists()]


def launch_folders(kind: str) -> list[Path] | None:
    """The folders this process's launch (``kind``: run or sweep) created, as ``LaunchFolders`` noted before it did;
    None when nothing was noted (the callback is not configured)."""
    return _new_folders.get(kind)


def remove_new_folders(folders: list[Path]) -> None:
    """Remove the empty ones of ``folders`` (deepest first), up to the first that is not empty: only empty folders
    that did not exist before the launch go, never a file."""
    for folder in folders:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


class LaunchFolders(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _new_folders["run"] = new_folders(Path(str(config.hydra.run.dir)))  # the job's folder: ${now:} is cached

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        _new_folders["sweep"] = created = new_folders(sweep_dir)
        if created:  # a sweep stopped before its first job (Hydra's checks of every job's composition) leaves none
            atexit.register(_remove_unstarted_sweep, Path(os.path.abspath(sweep_dir)), created)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        atexit.unregister(_remove_unstarted_sweep)


def _remove_unstarted_sweep(sweep_dir: Path, created: list[Path]) -> None:
    """At exit of a sweep that did not end (an error, Ctrl-C): if no job has a folder in the new sweep folder (it
    holds only Hydra's multirun.yaml and SweepReport's empty records folder), remove it and its new parents."""
    if not sweep_dir.is_dir():
        return
    records = sweep_dir / RECORDS_DIR
    if any(path.name not in ("multirun.yaml", RECORDS_DIR) for path in sweep_dir.iterdir()):
        return
    if records.is_dir() and any(records.iterdir()):
        return
    if records.is_dir():
        records.rmdir()
    (sweep_dir / "multirun.yaml").unlink(missing_ok=True)
    remove_new_folders(created)


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        records = Path(str(config.hydra.sweep.dir)).resolve() / RECORDS_DIR
        shutil.rmtree(records, ignore_errors=True)  # a sweep re-run into its folder reports its own jobs only
        records.mkdir(parents=True)
        os.environ[RECORDS_ENV] = str(records)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        records = Path(os.environ.pop(RECORDS_ENV))
        jobs = sorted((json.loads(path.read_text()) for path in records.glob("*.json")), key=lambda job: job["job"])
        failed = [job for job in jobs if job["status"] == "failed"]
        counts = {status: sum(job["status"] == status for job in jobs) for status in {j["status"] for j in jobs}}
        print(f"sweep: {len(jobs)} jobs ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})",
              file=sys.stderr)
        for job in failed:
            print(f"FAILED job #{job['job']} {job['dir']}: {job['error']}", file=sys.stderr)
        if failed:
            sys.exit(1)


class SweepPlan(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            line = sweep_plan(config)
        except Exception as error:  # noqa: BLE001 - an estimate never stops a sweep
            line = f"sweep: no estimate ({type(error).__name__}: {error})"
        print(line, flush=True)  # stdout, with Hydra's launch lines: stderr is for what went wrong


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """The jobs' overrides as Hydra's basic sweeper expands them: the preset's ``hydra.sweeper.params``, then the
    command line's overrides (a key in both: the command line's), their cartesian product."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{key}={value}" for key, value in (config.hydra.sweeper.get("params") or {}).items()]
    overrides = OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task])
    return [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def _same(recorded: Any, value: str) -> bool:
    """A recorded config value equals an override's text (``1`` = ``1.0``, ``true`` = True)."""
    if isinstance(recorded, bool) or recorded is None:
        return json.dumps(recorded) == value.lower()
    if isinstance(recorded, (int, float)):
        try:
            return float(value) == float(recorded)
        except ValueError:
            return False
    return str(recorded) == value


def _measured(runs: Path, experiment: str, job: dict[str, str], task: str, algorithm: str) -> float | None:
    """CPU-seconds per seed and step of the committed runs (``runs``: results/runs) of this job's configuration in
    ``experiment`` (every override the job sets, as recorded in their config.yaml), else of its task and algorithm
    in any preset; None without any."""
    import yaml

    from harness import rundir

    def rate(summaries) -> float | None:
        seconds = work = 0.0
        for summary in summaries:
            record = json.loads(summary.read_text())
            cost = record.get("cpu_seconds") or record.get("wall_seconds")
            if cost and (record.get("hardware") or {}).get("device", "cpu") == "cpu":
                seconds, work = seconds + cost, work + len(record.get("seeds") or ()) * (record.get("steps") or 0)
        return seconds / work if work else None

    def matches(summary: Path) -> bool:
        config = summary.parent / "config.yaml"
        flat = rundir.flatten(yaml.safe_load(config.read_text())) if config.exists() else {}
        return all(_same(flat.get(key if key in flat else f"{key}.name"), value) for key, value in job.items()
                   if not key.startswith(NOT_MATCHED))

    same = [path for path in (runs / experiment).rglob("summary.json") if matches(path)]
    if (found := rate(same)) is not None:
        return found
    kin = [path for path in runs.glob("*/**/summary.json")
           if (record := json.loads(path.read_text())).get("task") == task and record.get("algorithm") == algorithm]
    return rate(kin)


NOT_MATCHED = ("experiment", "seeds", "seed_offset", "threads", "device", "logger", "hydra", "trainer.resume",
               "trainer.overwrite", "trainer.progress", "task.checkpoint_every", "task.steps")
# ^ keys a committed run's cost per seed and step does not depend on (or, the steps, that it is measured per)


def _job_steps(config: DictConfig, job: dict[str, str]) -> int:
    """The job's episodes: its own override, else its task's (a sweep over ``task=`` has one each), else the
    launch's."""
    if "task.steps" in job:
        return int(job["task.steps"])
    if job.get("task", str(config.task.name)) != str(config.task.name):
        from harness import locations

        return int(OmegaConf.load(locations.CONF / "task" / f"{job['task']}.yaml").steps)
    return int(config.task.steps)


def sweep_plan(config: DictConfig, runs: Path | None = None) -> str:
    """One line: the sweep's jobs, seeds and steps, and its CPU-hours estimated from committed runs' measured cost
    per seed and step (``_measured``; jobs without any are counted apart)."""
    from harness import locations

    runs = runs if runs is not None else locations.HOME / "results" / "runs"
    jobs = [dict(override.lstrip("+").split("=", 1) for override in job if not override.startswith("~"))
            for job in sweep_jobs(config)]
    hours, unknown, seed_steps = 0.0, 0, 0
    for job in jobs:
        seeds = int(job.get("seeds", config.seeds))
        steps = _job_steps(config, job)
        seed_steps += seeds * steps
        rate = _measured(runs, str(config.experiment_name), job, job.get("task", str(config.task.name)),
                         job.get("algorithm", str(config.algorithm.name)))
        if rate is None:
            unknown += 1
        else:
            hours += rate * seeds * steps / 3600
    estimate = (f"about {hours:.3g} CPU-hours" if hours >= 1 else f"about {60 * hours:.2g} CPU-minutes"
                if hours >= 1 / 60 else "under a CPU-minute") + (
        f" for {len(jobs) - unknown} of them (the other {unknown}: no committed run of their task and algorithm "
        "to measure)" if unknown else "")
    return (f"sweep {config.experiment_name}: {len(jobs)} job(s), {seed_steps:,} seed-steps in all; {estimate}, as "
            "committed runs of the same configuration (else task and algorithm) measured, on their CPUs")
