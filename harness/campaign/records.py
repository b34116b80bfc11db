"""Whether a run folder holds its cell's run: the configuration it records, its damage, how it differs."""

from __future__ import annotations

import copy
import json
import shutil
import time
from pathlib import Path

from omegaconf import OmegaConf

from harness.campaign.cells import cell_identity
from harness.campaign.jobs import Job
from harness.campaign.text import shown
from harness.identity import BUDGET

DONE = ("completed", "diverged")
REPLACED = ".replaced"  # under --work: where --replace moves runs of another configuration
CONFIGS = ("config.yaml", ".hydra/config.yaml")  # a run's composed configuration: exported, in its work folder


def _strip(config: dict, keys: tuple[str, ...]) -> dict:
    """A copy of the identity ``config`` without the dotted ``keys``."""
    config = copy.deepcopy(config)
    for dotted in keys:
        *parents, leaf = dotted.split(".")
        node = config
        for parent in parents:
            node = node.get(parent, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(leaf, None)
    return config


def recorded_identity(folder: Path) -> dict | None:
    """The identity a run folder records: ``identity.json``'s config, else (runs older than it) its composed
    ``config.yaml``, through ``harness.rundir`` as a launch reads it; None when it has neither readable."""
    from harness import rundir

    try:
        record = json.loads((folder / rundir.IDENTITY_FILE).read_text())
        if isinstance(record, dict) and isinstance(record.get("config"), dict):
            return rundir._without_volatile(record["config"])  # as rundir.plan_run reads a recorded identity
    except (OSError, ValueError):
        pass
    for name in CONFIGS:
        if (folder / name).is_file():
            try:
                return rundir.identity(OmegaConf.load(folder / name))
            except Exception:  # noqa: BLE001 - damaged or unresolvable: not a configuration to trust
                return None
    return None


def damaged_record(folder: Path) -> tuple[str, str] | None:
    """(file, what is wrong) when the run's record of its configuration is damaged: an ``identity.json`` that is not
    tpo-bench's JSON record, or (runs older than it) a ``config.yaml`` that does not load as a whole configuration
    (a file cut short may still parse, as fewer keys); None when it is readable or absent."""
    from harness import rundir

    path = folder / rundir.IDENTITY_FILE
    if path.exists():
        try:
            record = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            return rundir.IDENTITY_FILE, f"unreadable ({type(error).__name__})"
        return None if isinstance(record, dict) and isinstance(record.get("config"), dict) else (
            rundir.IDENTITY_FILE, "not a run's identity record")
    name = next((name for name in CONFIGS if (folder / name).is_file()), None)
    return None if name is None else _damaged_config(folder, name)


def _damaged_config(folder: Path, name: str) -> tuple[str, str] | None:
    """(``name``, what is wrong) when the run's composed configuration does not load as a whole one, else None."""
    try:
        config = OmegaConf.load(folder / name)
    except Exception as error:  # noqa: BLE001 - YAML and OmegaConf raise many kinds
        return name, f"unreadable ({type(error).__name__})"
    missing = [key for key in ("task", "algorithm", "seeds", "trainer") if key not in config]
    return (name, f"not a whole configuration (no {', '.join(missing)})") if missing else None


def differences(recorded: dict | None, expected: dict, ignore: tuple[str, ...] = ()) -> list[str]:
    """``key: recorded → expected`` for every identity key that differs, less the dotted ``ignore`` prefixes
    (``["no readable identity.json or config.yaml"]`` where nothing is recorded; [] when they match)."""
    from harness import rundir

    if recorded is None:
        return ["no readable identity.json or config.yaml"]
    if rundir.fingerprint(recorded) == rundir.fingerprint(expected):
        return []
    changes = rundir.differing_keys(recorded, expected)
    return [change for change in changes
            if not any(key == prefix or key.startswith(prefix + ".") for key in [change.split(":", 1)[0]]
                       for prefix in ignore)]


def work_mismatch(job: Job, work: Path) -> list[str]:
    """How the run in the job's work folder differs from the job (its identity composed, seeds and steps included);
    [] when it matches or the folder holds no recorded run yet."""
    from harness import rundir

    folder = job.work_dir(work)
    if not (folder / rundir.IDENTITY_FILE).exists() and not (folder / "summary.json").exists():
        return []  # nothing recorded: a fresh start (or a launch that failed before recording anything)
    if not (folder / rundir.IDENTITY_FILE).exists():
        status = rundir._status(folder)
        if status == "failed" and not rundir.has_results(folder):
            return []  # a launch that failed before any work: the harness starts it afresh
    expected = _strip(cell_identity(job.preset, job.overrides), BUDGET)
    expected.update(seeds=job.seeds, seed_offset=job.offset)
    expected["task"]["steps"] = job.steps
    return differences(recorded_identity(folder), expected)


def finished(job: Job, work: Path) -> str | None:
    """The status of the job's run when it already finished in its work folder (e.g. the runner was stopped
    between the run's end and its export), else None; a run of another configuration (``work_mismatch``), with an
    unreadable summary, or one the report would not take whole (``damaged_finish``) is not finished for the job."""
    status = summary_status(job, work)
    return status if status in DONE and not work_mismatch(job, work) and not damaged_finish(job, work) else None


def summary_status(job: Job, work: Path) -> str | None:
    """The status the summary.json of the job's work folder records; None without a readable one."""
    summary = job.work_dir(work) / "summary.json"
    try:
        return json.loads(summary.read_text()).get("status") if summary.exists() else None
    except (OSError, ValueError, AttributeError):
        return None


def damaged_finish(job: Job, work: Path) -> str | None:
    """Why the job's run, whose summary says it finished, is not a run the report takes whole (a file cut short or
    missing, rows short of the summary: ``harness.report.load.finished_run_problem``), in one line; None otherwise.
    Such a run is never exported: ``set_aside_damaged`` moves it aside and its seeds run again."""
    from harness.report.load import finished_run_problem

    if summary_status(job, work) not in DONE:
        return None
    return finished_run_problem(job.work_dir(work))


def set_aside_damaged(job: Job, work: Path) -> None:
    """Move a damaged finished run (``damaged_finish``) to ``<name>.damaged-<time>`` beside it, saying so in one line,
    so that the job starts over (its files are kept for a look)."""
    problem = damaged_finish(job, work)
    if problem is None:
        return
    folder = job.work_dir(work)
    aside = folder.with_name(f"{folder.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
    folder.rename(aside)
    print(f"DAMAGED {job.preset}/{job.cell}/{job.name}: {problem}; moved aside to {shown(aside)}, its seeds run "
          "again", flush=True)


def replace_stale(stale: list[tuple[Path, str, list[str]]], work: Path, results: Path) -> Path:
    """Move each stale run folder to ``<work>/.replaced/<time>/{results,work}/<its path there>`` (a run recorded
    straight in its cell's folder, beside seed-range folders: its files only); returns that folder."""
    aside = work / REPLACED / time.strftime("%Y%m%d-%H%M%S")
    for folder, _, _ in stale:
        folder = folder.resolve()
        base, kind = ((results.resolve(), "results") if folder.is_relative_to(results.resolve())
                      else (work.resolve(), "work"))
        destination = aside / kind / folder.relative_to(base)
        destination.parent.mkdir(parents=True, exist_ok=True)
        if kind == "results" and folder.parent.parent == base / "runs":  # a cell folder: its own files only
            destination.mkdir(exist_ok=True)
            for entry in folder.iterdir():
                if not entry.is_dir() or entry.name == ".hydra":
                    shutil.move(str(entry), str(destination / entry.name))
        else:
            shutil.move(str(folder), str(destination))
    return aside
