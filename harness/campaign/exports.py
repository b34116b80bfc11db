"""The exported runs under results/runs: the seeds that count as done and their cost; an export written whole."""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from harness import rundir
from harness.campaign import cells as composed
from harness.campaign.jobs import Job
from harness.campaign.locks import results_lock
from harness.campaign.records import DONE, damaged_record, differences, recorded_identity
from harness.identity import BUDGET, IGNORED
from harness.campaign.text import shown

EXPORT_TMP = re.compile(r"^seeds\d+(?:-\d+)?(?:\.\d+-[0-9a-f]+)?(?:\.old)?\.tmp$")  # export's temporaries only
CHECKED_FILES = tuple(dict.fromkeys((*rundir.EXPORTED_FILES, rundir.outputs.METRICS_FILE, *rundir.CONFIG_FILES)))
# (every file a check of an exported run reads)
RENAME_TRIES = 10  # an export renamed into place while other exporters of the same run replace it, at most


def _exported_ignores() -> tuple[str, ...]:
    """What an exported run may differ in from its cell: its seed range and step budget (compared apart) and the
    keys that never distinguish results (the report ignores them when it merges runs into a cell)."""
    return (*BUDGET, *IGNORED)


_warned: set[str] = set()  # damaged runs already warned about (a running campaign re-plans after every run)


def _warn(path: Path, problem: str) -> None:
    key = f"{path}: {problem}"
    if key not in _warned:
        _warned.add(key)
        print(f"warning: skipped {shown(path)}: {problem}", file=sys.stderr, flush=True)


def _metrics_problem(path: str, stamp: list[int]) -> str | None:
    """Why the metrics file at ``path`` cannot be read whole (a gzip file is decompressed to its end, which checks
    its length and CRC), or None; read once per version of the file (``stamp``: size, modification and change
    times, inode; ``CellCache``)."""
    return composed.CELLS.get(["metrics", path, stamp], lambda: {"problem": _read_metrics_problem(path)})["problem"]


def _read_metrics_problem(path: str) -> str | None:
    try:
        if path.endswith(".gz"):
            with gzip.open(path, "rb") as packed:
                header = packed.readline()
                while packed.read(1 << 20):
                    pass
        else:
            with open(path, "rb") as raw:
                header = raw.readline()
    except (OSError, EOFError, ValueError) as error:
        return f"{type(error).__name__}: {str(error) or 'truncated'}"
    return None if header.startswith(b"step,seed") else "no step,seed header"


def _read_run(summary: Path) -> dict | None:
    """The finished run's summary.json, or None (with a one-line warning) when it or its metrics are damaged: one
    bad file never blocks a queue."""
    record = _read_summary(summary)
    if record is None or record.get("status") not in DONE:
        return record
    metrics = next((summary.parent / name for name in (rundir.EXPORTED_METRICS, rundir.outputs.METRICS_FILE)
                    if (summary.parent / name).exists()), None)
    if metrics is None:
        _warn(summary.parent, "a finished run without metrics.csv.gz")
        return None
    stat = metrics.stat()
    problem = _metrics_problem(str(metrics), [stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns, stat.st_ino])
    if problem:
        _warn(metrics, f"unreadable ({problem})")
        return None
    return record


def _read_summary(summary: Path) -> dict | None:
    """The run's summary.json, a finished run's with seeds and steps of the right types; None (with a one-line
    warning) otherwise."""
    try:
        record = json.loads(summary.read_text())
        if not isinstance(record, dict):
            raise ValueError("not a JSON object")
        if record.get("status") in DONE:
            seeds, steps = record["seeds"], record["steps"]
            if not (isinstance(seeds, list) and all(isinstance(seed, int) for seed in seeds)
                    and isinstance(steps, int)):
                raise ValueError("seeds or steps of the wrong type")
    except (OSError, ValueError, KeyError, TypeError) as error:
        _warn(summary, f"unreadable ({type(error).__name__}: {(str(error) or 'empty').splitlines()[0]})")
        return None
    return record


@dataclass
class CellRuns:
    """What ``exported`` found below a cell's folder."""

    seeds: set[int]  # of the finished runs that count as done
    spent: dict[str, tuple[float, int]]  # per CPU model: CPU-seconds, seed-episodes
    stale: list[tuple[Path, list[str]]] = field(default_factory=list)  # runs of another configuration, how they differ

    def count(self, record: dict, steps: int) -> None:
        """Count a finished run of the cell's configuration: its seeds when it ran ``steps`` episodes or more, its
        cost when it trained on a CPU (a GPU run's CPU seconds say nothing of a CPU's)."""
        if record["steps"] >= steps:
            self.seeds.update(record["seeds"])
        seconds = record.get("cpu_seconds") or record.get("wall_seconds")  # wall: runs from before cpu_seconds
        hardware = record.get("hardware") or {}
        if seconds and hardware.get("device", "cpu") == "cpu":
            model = hardware.get("cpu") or ""
            total, work = self.spent.get(model, (0.0, 0))
            self.spent[model] = (total + seconds, work + len(record["seeds"]) * record["steps"])


def exported(cell_dir: Path, steps: int, expected: dict | None = None) -> CellRuns:
    """Seeds of the finished runs of ``steps`` episodes already below ``cell_dir`` (any seed-range layout, earlier
    runs included) whose configuration is ``expected`` (a cell's identity; None: not checked), and what those runs
    cost: per recorded CPU model ("" where none was recorded), CPU-seconds (wall seconds for runs older than
    ``cpu_seconds``) and seed-episodes, of the runs trained on a CPU (a GPU run's seeds count, its cost does not). A
    shorter run's seeds are run again (the report ignores it beside full ones) but its cost counts; a run of another
    configuration (a longer one too) counts for nothing and is listed in ``stale``; a damaged one is skipped with a
    warning."""
    from harness.rundir.outputs import summary_files

    found = CellRuns(set(), {})
    for summary in summary_files(cell_dir):
        if summary.parent.name.endswith(".tmp"):  # an export cut short (``export`` writes there, then renames)
            continue
        record = _read_run(summary)
        if record is None or record.get("status") not in DONE:
            continue
        if expected is not None:
            if _damaged_export(summary.parent):
                continue
            changes = _changes(summary.parent, record, steps, expected)
            if changes:
                found.stale.append((summary.parent, changes))
                continue
        found.count(record, steps)
    return found


def _damaged_export(folder: Path) -> bool:
    """Whether the exported run's record of its configuration is damaged, or the report would not take it whole
    (warned about once: its seeds are not counted)."""
    damage = damaged_record(folder)
    if damage:
        _warn(folder / damage[0], damage[1])
        return True
    problem = _exported_problem(folder)
    if problem:
        if problem not in _warned:
            _warned.add(problem)
            print(f"warning: {problem}; its seeds are not counted as done", file=sys.stderr, flush=True)
        return True
    return False


def _changes(folder: Path, record: dict, steps: int, expected: dict) -> list[str]:
    """How the exported run differs from its cell (``expected``, ``steps``): its identity, less what exported runs
    may differ in, else a longer step budget; [] when it is the cell's."""
    changes = differences(recorded_identity(folder), expected, _exported_ignores())
    if not changes and record["steps"] > steps:
        changes = [f"task.steps: {record['steps']} → {steps}"]
    return changes


def _exported_problem(folder: Path) -> str | None:
    """``finished_run_problem`` of an exported run, read once per version of its files (``CellCache``: a campaign
    plans again after every run, and at every start)."""
    from harness.report.load import finished_run_problem

    stamp = [[(info := path.stat()).st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino] if path.exists()
             else None for path in (folder / name for name in CHECKED_FILES)]
    return composed.CELLS.get(["run", str(folder.resolve()), stamp],
                              lambda: {"problem": finished_run_problem(folder)})["problem"]


def export(job: Job, work: Path, results: Path) -> None:
    """``_export`` holding ``results_lock``: a report of a campaign sharing ``results`` never reads a folder while
    it is renamed into place."""
    with results_lock(results):
        _export(job, work, results)


def _export(job: Job, work: Path, results: Path) -> None:
    """Copy a finished run's committed files into results/runs: written to a temporary folder of this call's own
    (``seeds<a>-<b>.<pid>-<id>.tmp``), then renamed into place; a run already there is first renamed aside
    (``….old.tmp``) and removed after. Safe against another exporter of the same run at the same time: the last
    rename wins and neither sees a half-written folder."""
    source, target = job.work_dir(work), job.result_dir(results)
    stamp = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp, old = (target.with_name(f"{target.name}.{stamp}{suffix}.tmp") for suffix in ("", ".old"))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp.mkdir()
    try:
        rundir.write_export(source, tmp)
        _rename_into_place(tmp, target, old)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing left where the rename happened
        shutil.rmtree(old, ignore_errors=True)


def _rename_into_place(tmp: Path, target: Path, old: Path) -> None:
    """Rename the written ``tmp`` to ``target``, moving a run there aside to ``old`` (and removing it) first; OSError
    when other exporters keep replacing it."""
    for _ in range(RENAME_TRIES):
        try:
            os.rename(tmp, target)  # atomic; fails while a non-empty target is there
            return
        except OSError as error:
            if not isinstance(error, FileExistsError) and error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
        try:
            os.rename(target, old)  # the run there (an older export of these seeds) aside, then try again
        except FileNotFoundError:
            pass  # another exporter moved it meanwhile
        shutil.rmtree(old, ignore_errors=True)
    raise OSError(f"{target} keeps being replaced by another exporter; not exported")


def clean_exports(results: Path, cells: list[tuple[str, str]]) -> list[Path]:
    """Remove the export temporaries (``EXPORT_TMP`` names, in results/runs/<preset>/<cell>/) that a campaign cut
    short left behind in ``cells`` ((preset, cell) pairs); called holding their locks, so no export of theirs is
    under way (another campaign's cells are its own). Returns what was removed."""
    removed = []
    for folder in sorted(path for preset, cell in cells for path in (results / "runs" / preset / cell).glob("*")):
        if EXPORT_TMP.match(folder.name) and folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed
