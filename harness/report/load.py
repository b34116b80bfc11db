"""Run directories (or W&B runs) → ``runs`` (one row per run) and ``curves`` (one tidy row per seed, step, metric).

``curves`` columns: run, experiment, task, algorithm, every config key that varies between the loaded runs
(``task.V``, ``algorithm.eta``, ...), seed, step, metric, value; keys are categoricals so a million-row frame stays
small. ``runs`` holds the rest: status, seed ids, configured steps, the flattened resolved config, hardware.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import io
import json
import re
import sys
import zlib
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from algorithms.registry import neutral_hyperparameters
from common.checks import ConfigError
from harness import cli
from harness.identity import BUDGET, IGNORED, NEUTRAL_DEFAULTS, RENAMED, RETIRED, RETIRED_INTO
from harness.rundir import CONFIG_FILES, EXPORTED_METRICS
from harness.rundir.outputs import METRICS_FILE, SUMMARY_FILE, summary_files
from harness.tracking import SEED_IDS, STEP_METRIC, TRL_PREFIX, TRL_STEP

ID_COLUMNS = ["run", "experiment", "task", "algorithm"]
Metrics = Iterable[str] | Callable[[str], Iterable[str]] | None  # all; these; or these per experiment name


def _wanted(metrics: Metrics, experiment: str) -> set[str] | None:
    if metrics is None:
        return None
    return set(metrics(experiment) if callable(metrics) else metrics)
_REF = re.compile(r"\$\{([\w.]+)\}")


def flatten(tree: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in tree.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = tuple(value) if isinstance(value, list) else value
    return out


def _resolve(flat: dict) -> dict:
    """Resolve plain ``${a.b}`` interpolations (all a Hydra config of this repo holds) without OmegaConf's cost."""
    for _ in range(8):
        pending = {k: v for k, v in flat.items() if isinstance(v, str) and "${" in v}
        if not pending:
            break
        for key, value in pending.items():
            whole = _REF.fullmatch(value)
            if whole and whole.group(1) in flat:
                flat[key] = flat[whole.group(1)]
            else:
                flat[key] = _REF.sub(lambda m: str(flat.get(m.group(1), m.group(0))), value)
    return flat


def _config_path(run_dir: Path) -> Path | None:
    return next((run_dir / name for name in CONFIG_FILES if (run_dir / name).exists()), None)


def read_config(run_dir: Path) -> dict:
    """The run's resolved config, flattened to dotted keys ({} when the run directory has none); a key added after
    the run was recorded reads as its neutral default (``harness.identity.NEUTRAL_DEFAULTS``) wherever its section
    exists."""
    path = _config_path(run_dir)
    if path is None:
        return {}
    with open(path) as handle:
        return as_current(
            _resolve(flatten(yaml.load(handle, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {})))


def as_current(flat: dict) -> dict:
    """``flat`` with its ``RENAMED`` keys under their new names, every absent ``NEUTRAL_DEFAULTS`` key whose section
    (``optim.``, ``task.``) it has, and without the algorithm's neutral hyperparameters at their default
    (``algorithms.registry.neutral_hyperparameters``) or a ``RETIRED`` key at its value (at another: as
    ``RETIRED_INTO`` says), so that runs from before and
    after a key joined, was renamed or left the configs read alike (as ``harness.rundir`` reads their identity); a
    null ``algorithm.epochs`` reads as the updates per batch the run made (``Task.epochs_for``), so that a cell
    naming the number (Fig 15's 4 epochs, Fig 17's 1) finds the runs that left it at the default."""
    for old, new in RENAMED.items():
        if old in flat:
            flat[new] = flat.pop(old)
    for key, value in RETIRED.items():
        if key in flat and _value_text(flat[key]) == _value_text(value):
            del flat[key]
    for old, new in RETIRED_INTO.items():
        if old in flat:
            value = flat.pop(old)
            if flat.get(new) is None:
                flat[new] = value
    sections = {key.split(".", 1)[0] for key in flat if "." in key}
    for key, value in NEUTRAL_DEFAULTS.items():
        if key.split(".", 1)[0] in sections:
            flat.setdefault(key, value)
    for key, value in neutral_hyperparameters(flat.get("algorithm.name")).items():
        if f"algorithm.{key}" in flat and _value_text(flat[f"algorithm.{key}"]) == _value_text(value):
            del flat[f"algorithm.{key}"]
    if "algorithm.epochs" in flat and flat["algorithm.epochs"] is None:
        flat["algorithm.epochs"] = epochs_for(flat.get("task.name"), flat.get("algorithm.name"))
    return flat


@functools.cache
def epochs_for(task, algorithm) -> int | None:
    """The updates per batch of a run of ``algorithm`` on ``task`` with a null ``algorithm.epochs``; None for a
    name the registries do not know."""
    from algorithms.registry import get_algorithm
    from tasks import get_task

    try:
        return get_task(str(task)).epochs_for(get_algorithm(str(algorithm))())
    except (ConfigError, ValueError):  # ConfigError: an unknown task; ValueError: an unknown algorithm
        return None


def _value_text(value) -> str:
    """A config value as text, numbers by value (``0`` and ``0.0`` run the same numbers, as rundir's fingerprint
    counts them)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    elif isinstance(value, (list, tuple)):
        return "[" + ",".join(_value_text(v) for v in value) + "]"
    return json.dumps(value, default=str)


def signature(config: dict) -> str:
    """Hash of everything in a config that could change results (not the budget, not where it ran)."""
    kept = {k: _value_text(v) for k, v in config.items()
            if not k.startswith(IGNORED) and k not in BUDGET and k != "seed"}
    return hashlib.sha1(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]


def warn(message: str) -> None:
    """One line on stderr: a run the report skips or flags, and why."""
    print(f"warning: {' '.join(str(message).split())}", file=sys.stderr)


class Damaged(Exception):
    """A run's file that cannot be read as what it claims to be; the message names the file and what is wrong."""


def _partial_export(path: Path) -> bool:
    """A campaign export cut short: ``seeds<a>-<b>.tmp`` (``campaign.export`` writes there, then renames)."""
    return path.name.endswith(".tmp")


def find_run_dirs(paths: Iterable[Path]) -> list[Path]:
    """Every run folder under ``paths``, in natural order (seeds5-9 before seeds10-14, eta0.25 before eta0.5), so
    tables and captions list a cell's seed ranges and values as they count. A folder found twice (overlapping
    paths, a link) is listed once, where first found; partial exports (``seeds0-4.tmp``) are left out."""
    found, seen = [], set()
    for path in paths:
        for run_dir in sorted((p.parent for p in summary_files(Path(path))), key=_natural):
            resolved = run_dir.resolve()
            if resolved in seen:
                continue
            seen.add(resolved)
            if _partial_export(run_dir):
                warn(f"{run_dir}: a partial export (.tmp folder), not a run; ignored")
            else:
                found.append(run_dir)
    return found


def _natural(path: Path) -> tuple[list, str]:
    """Text and numbers alternate (re.split with a group), numbers compared as numbers; the path breaks ties
    (s5 and s05)."""
    parts = re.split(r"([0-9]+(?:\.[0-9]+)?)", str(path))
    return [float(part) if i % 2 else part for i, part in enumerate(parts)], str(path)


def _metrics_path(run_dir: Path) -> Path | None:
    return next((p for p in (run_dir / METRICS_FILE, run_dir / EXPORTED_METRICS) if p.exists()), None)


def _describe(error: BaseException) -> str:
    if isinstance(error, EOFError):
        return "cut short (the compressed stream ends before its end marker)"
    if isinstance(error, pd.errors.EmptyDataError):
        return "empty"
    return f"unreadable ({type(error).__name__}: {error})"


def _read_metrics(path: Path, metrics: set[str] | None) -> tuple[pd.DataFrame, bool]:
    """The metric columns of ``path`` and whether its last line was cut off (then dropped: a write cut short);
    raises ``Damaged`` naming the file."""
    wanted = None if metrics is None else (lambda column: column in metrics or column in ("step", "seed"))
    source, cut = path, False
    try:
        if path.suffix != ".gz":
            with open(path, "rb") as handle:
                handle.seek(max(0, path.stat().st_size - 1))
                cut = handle.read(1) not in (b"\n", b"")
            if cut:  # rare: read it whole, less its unfinished last line
                data = path.read_bytes()
                source = io.BytesIO(data[:data.rfind(b"\n") + 1])
        frame = pd.read_csv(source, usecols=wanted, dtype={"step": np.int64, "seed": np.int64})
    except (EOFError, OSError, zlib.error, gzip.BadGzipFile, ValueError, UnicodeDecodeError,
            pd.errors.ParserError, pd.errors.EmptyDataError) as error:
        raise Damaged(f"{path}: {_describe(error)}") from error
    absent = [c for c in ("step", "seed") if c not in frame.columns]
    if absent:
        raise Damaged(f"{path}: no {' or '.join(absent)} column")
    return frame, cut


def _read_summary(run_dir: Path) -> dict:
    path = run_dir / SUMMARY_FILE
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise Damaged(f"{path}: {_describe(error)}") from error
    if not text.strip():
        raise Damaged(f"{path}: empty")
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as error:
        raise Damaged(f"{path}: not valid JSON, cut short? ({error.msg}: line {error.lineno} column "
                      f"{error.colno})") from error
    if not isinstance(summary, dict) or "status" not in summary:
        raise Damaged(f"{path}: no status")
    seeds = summary.get("seeds")
    if summary["status"] != "failed" and not (isinstance(seeds, list) and seeds
                                              and all(type(seed) is int for seed in seeds)):
        # (a run writes its summary whole, seeds included, once it ends: a failed one has none to list)
        raise Damaged(f"{path}: no seeds (a {summary['status']} run's summary lists the seeds it ran)")
    return summary


# Keys every run's config holds. The harness writes a config whole, trainer.progress last: one that lacks a key was
# cut at the end of a line (one cut mid-line has no newline at its end)
CONFIG_KEYS = ("experiment_name", "task.name", "algorithm.name", "seeds", "task.steps", "trainer.progress")


def _read_config_checked(run_dir: Path) -> dict:
    """``read_config``; ``Damaged`` naming the file when it is unreadable, not YAML, empty or cut short."""
    path = _config_path(run_dir)
    if path is None:
        return {}
    try:
        config = read_config(run_dir)
        unfinished = not path.read_bytes().endswith(b"\n")
    except (OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError, TypeError) as error:
        raise Damaged(f"{path}: {_describe(error) if not isinstance(error, yaml.YAMLError) else 'not valid YAML'}"
                      ) from error
    if not config:
        raise Damaged(f"{path}: empty")
    if unfinished:
        raise Damaged(f"{path}: cut short (its last line is unfinished)")
    absent = [key for key in CONFIG_KEYS if key not in config]
    if absent:
        raise Damaged(f"{path}: cut short? (no {', '.join(absent)}, which every run's config holds)")
    return config


def _run_record(run_dir: Path) -> dict:
    summary = _read_summary(run_dir)
    config = _read_config_checked(run_dir)
    steps = summary.get("steps", config.get("task.steps"))
    return {
        "run_dir": str(run_dir), "source": "local",
        "experiment": summary.get("experiment") or config.get("experiment_name", "default"),
        "task": summary.get("task") or config.get("task.name"),
        "algorithm": summary.get("algorithm") or config.get("algorithm.name"),
        "status": summary["status"], "seed_ids": tuple(summary.get("seeds", ())), "steps": steps,
        "last_step": summary.get("last_step"), "cpu_seconds": summary.get("cpu_seconds"),
        "wall_seconds": summary.get("wall_seconds"),
        "hardware": json.dumps(summary.get("hardware")) if summary.get("hardware") else None,
        "error": summary.get("error"), "mtime": (run_dir / SUMMARY_FILE).stat().st_mtime,
        "config": config,
    }


def _ranges(values: Iterable[int]) -> str:
    values = sorted(values)
    return ", ".join(map(str, values[:8])) + (f", … ({len(values)} in all)" if len(values) > 8 else "")


def cross_check(record: dict, frame: pd.DataFrame, cut: bool = False) -> str | None:
    """What the rows read contradict in the summary (its seeds, its last step; every seed logs every step up to
    the last), or None. A run so damaged keeps the seeds and steps its rows hold and is never complete."""
    problems = ["its last line is cut off"] if cut else []
    last_per_seed = frame.groupby("seed", sort=True)["step"].max() if len(frame) else pd.Series(dtype=np.int64)
    rows_seeds, claimed = set(last_per_seed.index.tolist()), set(record["seed_ids"])
    last = record["last_step"]
    if not rows_seeds and (last is not None or record["status"] in ("completed", "diverged")):
        problems.append("no rows")  # (a run interrupted before its first logged step has none, and says so)
    problems += _seed_problems(rows_seeds, claimed)
    if rows_seeds:
        problems += _step_problems(last_per_seed, last, record["status"])
    problems += _error_range_problems(frame)
    if not problems:
        return None
    record["seed_ids"] = tuple(sorted(rows_seeds & claimed if claimed else rows_seeds))
    record["last_step"] = int(last_per_seed.min()) if rows_seeds else None
    record["error"] = "; ".join(problems)
    return "; ".join(problems)


def _seed_problems(rows_seeds: set[int], claimed: set[int]) -> list[str]:
    """The seeds the rows hold that the summary does not list (``claimed``), and the reverse where there are rows."""
    problems = []
    if claimed and claimed - rows_seeds and rows_seeds:
        problems.append(f"no rows for seed(s) {_ranges(claimed - rows_seeds)} of the summary's")
    if claimed and rows_seeds - claimed:
        problems.append(f"rows for seed(s) {_ranges(rows_seeds - claimed)} the summary does not list")
    return problems


def _step_problems(last_per_seed: pd.Series, last: int | None, status: str) -> list[str]:
    """Where the seeds' rows stop (``last_per_seed``, not empty) against the summary's last step and each other."""
    problems = []
    reached, furthest = int(last_per_seed.min()), int(last_per_seed.max())
    if last is not None and reached < int(last):
        short = last_per_seed.index[last_per_seed < int(last)].tolist()
        problems.append(f"rows stop at step {reached} (seed(s) {_ranges(short)}) but the summary's last step is "
                        f"{int(last)}")
    elif furthest > reached:
        problems.append(f"seeds stop at different steps ({reached} to {furthest})")
    if last is not None and furthest > int(last) and status in ("completed", "diverged"):
        # (an interrupted run's rows may go on: a resume in progress appends before it writes a summary)
        problems.append(f"rows go on to step {furthest}, past the summary's last step {int(last)}")
    return problems


def _error_range_problems(frame: pd.DataFrame) -> list[str]:
    """The first error logged outside [0, 1], if any."""
    if "error" in frame and len(frame):  # a fraction, NaN where a seed diverged (other metrics may overflow: a KL)
        error = pd.to_numeric(frame["error"], errors="coerce").to_numpy(dtype=float)
        outside = error[~np.isnan(error) & ((error < 0) | (error > 1))]
        if len(outside):
            return [f"error holds {outside[0]:g}, outside [0, 1]"]
    return []


def load_run(run_dir: Path, metrics: Metrics = None) -> tuple[dict | None, pd.DataFrame | None, str | None]:
    """(record, wide metric frame, problem) of one run folder. A damaged file (cut short, empty, not what it claims)
    gives no record and the problem naming the file; rows that contradict the summary (``cross_check``) give the
    record marked ``damaged`` and the problem; a failed run has no frame."""
    try:
        record = _run_record(run_dir)
        path = _metrics_path(run_dir)
        if record["status"] == "failed":
            return record, None, None
        if path is None:
            if record["status"] not in ("completed", "diverged"):
                return record, None, None  # (interrupted before its first row)
            raise Damaged(f"{run_dir / METRICS_FILE}: missing, although the summary says {record['status']}")
        frame, cut = _read_metrics(path, _wanted(metrics, record["experiment"]))
    except Damaged as error:
        return None, None, str(error)
    problem = cross_check(record, frame, cut)
    if problem is None:
        return record, frame, None
    record["status"] = "damaged"
    return record, frame, f"{path}: {problem}"


def finished_run_problem(run_dir: Path) -> str | None:
    """Why ``run_dir`` is not a finished run the report takes whole, in one line (None when it is): its summary
    says completed or diverged, and every file reads and agrees with it. The one rule by which the campaign and the
    scorecard count a run done."""
    record, _, problem = load_run(run_dir, metrics=("error",))
    if problem is None and record["status"] not in ("completed", "diverged"):
        problem = f"{run_dir / SUMMARY_FILE}: status {record['status']}"
    return problem


def load_local(paths: Iterable[Path], metrics: Metrics = None,
               workers: int = 4) -> tuple[list[dict], list[pd.DataFrame | None]]:
    """Records and wide metric frames (None for failed runs) of every run directory below ``paths``. A run with a
    damaged file (cut short, empty, not what it claims: a config without the keys every run's holds, a summary of a
    run that did not fail without its seeds) is skipped, one warning line naming the file; one whose rows contradict
    its summary (fewer seeds or steps) is kept as ``damaged``, never complete, with a warning."""
    run_dirs = find_run_dirs(paths)

    def read(run_dir: Path) -> tuple[dict | None, pd.DataFrame | None, str | None]:
        record, frame, problem = load_run(run_dir, metrics)
        if record is None:
            return None, None, f"{problem}; run {run_dir} skipped"
        if problem is None:
            return record, frame, None
        return record, frame, f"{problem}; run {run_dir} reported as damaged (partial, never a complete cell)"

    with ThreadPoolExecutor(max(1, workers)) as pool:  # the C parser releases the GIL
        triples = list(pool.map(read, run_dirs))
    for _, _, message in triples:
        if message:
            warn(message)
    kept = [t for t in triples if t[0] is not None]
    return [t[0] for t in kept], [t[1] for t in kept]


WANDB_STATUS = {"finished": "completed", "crashed": "failed", "failed": "failed", "killed": "interrupted",
                "running": "interrupted", "preempted": "interrupted"}


def load_wandb(path: str, api=None, filters: dict | None = None,
               metrics: Metrics = None) -> tuple[list[dict], list[pd.DataFrame | None]]:
    """W&B runs (one per seed, or one for a configuration's seeds: see harness/tracking.py) regrouped into one
    record per configuration; a configuration's run reads as the runs of its seeds would (``SeedOfRun``).

    Full histories come from ``run.scan_history()`` (``run.history()`` is sampled). ``api`` defaults to
    ``wandb.Api()``; tests pass a fake with the same ``runs(path, filters=...)`` interface. A run without a seed is
    skipped (one warning line naming it). Two runs of one configuration and seed are never merged: the second copy
    of each seed goes into a record of its own, so the tables report the cell as a conflict, as for run folders.
    A finished run's history is checked against its summary as a run folder's rows are (``cross_check``: every
    seed's history reaches the summary's ``last_step``); one that falls short, or whose summary counts rows the
    mirror dropped (``dropped_rows``: W&B could not keep up), is ``damaged``, with a warning."""
    if api is None:
        import wandb

        api = wandb.Api()
    groups: dict[str, list] = {}
    for whole in api.runs(path, filters=filters):
        config = as_current(_resolve(flatten(dict(whole.config))))
        for run, config in _seed_runs(whole, config):
            _add_member(groups, path, run, config)
    records, frames = [], []
    for members in groups.values():
        for k, part in enumerate(_seed_copies(path, members)):
            record, frame = _wandb_record(path, part, metrics, "" if k == 0 else f"~copy{k + 1}")
            problem = _wandb_problem(record, frame, part)
            if problem:
                record["status"] = "damaged"
                record["error"] = record["error"] or problem
                warn(f"W&B {path}: {', '.join(_wandb_name(m[0]) for m in part)}: {problem}; reported as damaged "
                     "(partial, never a complete cell)")
            records.append(record)
            frames.append(frame)
    return records, frames


def _seed_copies(path: str, members: list) -> list[list]:
    """One configuration's runs (``members``, sorted here by seed) as copies: the k-th holds the k-th run logged for
    each seed, in the API's order; more than one copy is warned about (the cell is a conflict)."""
    members.sort(key=lambda member: member[2])
    copies: list[list] = []  # copies[k]: the (k+1)-th run logged for each seed, in the API's order
    count: dict[int, int] = {}
    for member in members:
        k = count[member[2]] = count.get(member[2], 0) + 1
        if k > len(copies):
            copies.append([])
        copies[k - 1].append(member)
    if len(copies) > 1:  # never silently merged: each copy is a run of its own, so the cell is a conflict
        twice = {seed: [_wandb_name(m[0]) for m in members if m[2] == seed] for seed, n in count.items() if n > 1}
        warn(f"W&B {path}: " + "; ".join(f"seed {seed} logged by {len(names)} runs ({', '.join(names)})"
                                         for seed, names in twice.items())
             + f" of {members[0][0].group}; conflict: seed in more than one run, keep one copy of each seed")
    return copies


def _wandb_problem(record: dict, frame: pd.DataFrame | None, part: list) -> str | None:
    """What makes a W&B record damaged, or None: its history against its summary (``cross_check``), rows W&B
    dropped, rows missing from its history."""
    # (a run still logging is read as it is: its seeds' histories may be at different steps)
    problem = cross_check(record, frame) if frame is not None and record["status"] != "interrupted" else None
    dropped = sum(int(member[0].summary.get("dropped_rows") or 0) for member in part)
    problem = problem or (f"{dropped} rows dropped from W&B (the run folders hold them)" if dropped else None)
    gaps = record.pop("history_gaps", None)
    return problem or gaps


def _add_member(groups: dict[str, list], path: str, run, config: dict) -> None:
    """File one seed's W&B run under its configuration; a run without a seed is skipped, one warning line."""
    try:
        seed = int(config["seed"])
    except (KeyError, TypeError, ValueError):
        warn(f"W&B {path}: run {_wandb_name(run)} has no seed in its config "
             f"({'seed=' + repr(config['seed']) if 'seed' in config else 'no seed key'}); skipped")
        return
    groups.setdefault(signature(config) + str(config.get("experiment_name")), []).append((run, config, seed))


SEED_KEY = re.compile(r"(.+)/seed(\d+)")  # a configuration's run: <key>/seed<N>, seed N's value of <key>


def _seed_runs(run, config: dict) -> list[tuple]:
    """(run, config) of each seed ``run`` holds: itself, or each seed of a configuration's run (its config's
    ``seed_ids``) as a run of its own, config with ``seed``."""
    if "seed" in config or not isinstance(config.get(SEED_IDS), tuple):
        return [(run, config)]
    shared = {k: v for k, v in config.items() if k != SEED_IDS}
    history: list = []  # read once, by the first seed that asks
    return [(SeedOfRun(run, int(seed), history), {**shared, "seed": seed}) for seed in config[SEED_IDS]]


class SeedOfRun:
    """One seed of a configuration's W&B run, as its own run would read: history and summary keys
    ``<key>/seed<N>`` under ``<key>``, other seeds' and the seed means left out."""

    def __init__(self, run, seed: int, history: list):
        self.run, self.seed, self._history = run, seed, history
        self.name, self.id = f"{getattr(run, 'name', None)}/seed{seed}", getattr(run, "id", None)
        self.group, self.state = run.group, run.state
        self.summary = self._one_seed(dict(run.summary.items()))

    def _one_seed(self, row: dict) -> dict:
        mine, shared, per_seed = {}, {}, set()
        for key, value in row.items():
            match = SEED_KEY.fullmatch(key)
            if match is None:
                shared[key] = value
                continue
            per_seed.add(match.group(1))
            if int(match.group(2)) == self.seed:
                mine[match.group(1)] = value
        return {**{k: v for k, v in shared.items() if k not in per_seed}, **mine}

    def history_frame(self) -> pd.DataFrame:
        if not self._history:
            self._history.append(pd.DataFrame(list(self.run.scan_history())))
        whole = self._history[0]
        keys = {column: SEED_KEY.fullmatch(column) for column in whole.columns}
        per_seed = {match.group(1) for match in keys.values() if match}
        mine = {column: match.group(1) for column, match in keys.items() if match and int(match.group(2)) == self.seed}
        shared = [column for column, match in keys.items() if match is None and column not in per_seed]
        return whole[[*shared, *mine]].rename(columns=mine)


def _wandb_name(run) -> str:
    """A W&B run as its user finds it: name (id), else its group."""
    name, run_id = getattr(run, "name", None), getattr(run, "id", None)
    shown = f"{name} ({run_id})" if name and run_id else name or run_id
    return str(shown) if shown else f"of group {getattr(run, 'group', '?')}"


def _wandb_record(path: str, members: list, metrics: Metrics, suffix: str) -> tuple[dict, pd.DataFrame | None]:
    """One record (and wide frame) from W&B runs of one configuration, one seed each."""
    run, config, _ = members[0]
    wanted = _wanted(metrics, config.get("experiment_name", "default"))
    statuses, rows, seeds, last_steps, gaps, twice = [], [], [], [], [], []
    for member, _, seed in members:
        status = member.summary.get("status") or WANDB_STATUS.get(member.state, "interrupted")
        statuses.append(status)
        if status == "failed":
            continue
        seeds.append(seed)
        if member.summary.get("last_step") is not None:  # runs logged before it was recorded have none
            last_steps.append(int(member.summary["last_step"]))
        frame, repeated, missing = _seed_history(member, seed, wanted)
        twice += repeated
        gaps += missing
        if frame is not None:
            rows.append(frame)
    frame = pd.concat(rows, ignore_index=True).sort_values(["step", "seed"], kind="stable") if rows else None
    record = {
        "run_dir": f"wandb:{path}/{run.group}#{signature(config)}{suffix}", "source": "wandb",
        "experiment": config.get("experiment_name", "default"), "task": config.get("task.name"),
        "algorithm": config.get("algorithm.name"), "status": _combined_status(statuses),
        "seed_ids": () if frame is None else tuple(sorted(seeds)),
        "steps": config.get("task.steps"),
        "last_step": None if frame is None else max(last_steps) if last_steps else int(frame["step"].max()),
        "cpu_seconds": None, "wall_seconds": None, "hardware": None, "error": None, "mtime": 0.0,
        "config": {k: v for k, v in config.items() if k != "seed"},
    }
    if twice:
        warn(f"W&B {path}: {'; '.join(twice)} and possibly more logged twice (a resume logged them again); each "
             "step's last copy is read")
    if gaps:
        record["history_gaps"] = "; ".join(gaps)
    return record, frame


def _combined_status(statuses: list[str]) -> str:
    """A configuration's status from its seeds' runs': failed only when all failed; else interrupted, then diverged,
    where one is."""
    return ("failed" if all(s == "failed" for s in statuses) else
            "interrupted" if "interrupted" in statuses else
            "diverged" if "diverged" in statuses else "completed")


def _seed_history(member, seed: int, wanted: set[str] | None) -> tuple[pd.DataFrame | None, list[str], list[str]]:
    """One seed's rows as metrics.csv holds them (with its seed; None where its history has none), each step's last
    copy; and what is wrong with them, each a list of at most one line: a step logged twice, rows missing against
    the summary's count."""
    frame = _history_rows(member, wanted)
    if frame is None:
        return None, [], []
    twice, gaps = [], []
    # a run resumed before the mirror held every row exactly once logged again the steps after its checkpoint:
    # the last copy is metrics.csv's
    if frame["step"].duplicated().any():
        twice.append(f"{_wandb_name(member)}: step {int(frame['step'][frame['step'].duplicated()].iloc[0])}")
    frame = frame.drop_duplicates("step", keep="last")
    expected = member.summary.get("metrics_rows")  # runs logged before it was recorded have none
    if expected is not None and len(frame) < int(expected):
        gaps.append(f"{_wandb_name(member)} holds {len(frame)} of its {int(expected)} metrics.csv rows")
    frame.insert(1, "seed", seed)
    return frame, twice, gaps


def _history_rows(member, wanted: set[str] | None) -> pd.DataFrame | None:
    """A seed's W&B history, every row logged from metrics.csv: its step, then the metrics ``wanted`` (all: None);
    None where it has no such row."""
    history = (member.history_frame() if isinstance(member, SeedOfRun)
               else pd.DataFrame(list(member.scan_history())))
    if TRL_STEP in history:  # rows forwarded from TRL's own logging, not metrics.csv's
        history = history[history[TRL_STEP].isna()]
    if history.empty:
        return None
    # rows logged before the step metric existed carry W&B's own step, which was metrics.csv's (a run started
    # then and resumed since has both kinds)
    steps = history[STEP_METRIC].fillna(history["_step"]) if STEP_METRIC in history else history["_step"]
    keep = [c for c in history.columns if not c.startswith(("_", TRL_PREFIX)) and c != STEP_METRIC
            and (wanted is None or c in wanted)]
    return history[keep].assign(step=steps.astype(np.int64))[["step", *keep]]


def _param_columns(runs: pd.DataFrame) -> list[str]:
    """Scalar task/algorithm keys and the model name that differ between runs of the same experiment, task and
    algorithm (V in a vocabulary sweep, η in a temperature sweep, the LLM): the keys that tell curves apart."""
    varying = set()
    for _, group in runs.groupby(["experiment", "task", "algorithm"], dropna=False):
        configs = list(group["config"])
        for key in {k for c in configs for k in c}:
            if ((key.startswith(("task.", "algorithm.")) or key == "model.name") and not key.startswith(IGNORED)
                    and key not in BUDGET
                    and not any(isinstance(c.get(key), tuple) for c in configs)
                    and len({_value_text(c.get(key)) for c in configs}) > 1):
                varying.add(key)
    return sorted(varying)


def build_frames(records: list[dict], frames: list[pd.DataFrame | None]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) from per-run records and wide metric frames (melted with numpy, concatenated once)."""
    runs = pd.DataFrame(records)
    if runs.empty:
        return runs, pd.DataFrame(columns=[*ID_COLUMNS, "seed", "step", "metric", "value"])
    runs.insert(0, "run", np.arange(len(runs)))
    runs["seeds"] = runs["seed_ids"].map(len)
    runs["signature"] = runs["config"].map(signature)
    params = _param_columns(runs)
    for key in params:
        runs[key] = runs["config"].map(lambda c, key=key: c.get(key))

    columns = {"seed": [], "step": [], "metric": [], "value": []}
    metric_names = sorted({c for f in frames if f is not None for c in f.columns} - {"step", "seed"})
    codes = {m: i for i, m in enumerate(metric_names)}
    present, lengths = [], []
    for index, frame in enumerate(frames):  # melt each wide frame with numpy; concatenate once at the end
        if frame is None or frame.empty:
            continue
        names = sorted(c for c in frame.columns if c not in ("step", "seed"))  # (run, metric) blocks in order
        rows, k = len(frame), len(names)
        present.append(index)
        lengths.append(rows * k)
        columns["seed"].append(np.tile(frame["seed"].to_numpy(np.int32), k))
        columns["step"].append(np.tile(frame["step"].to_numpy(np.int32), k))
        columns["metric"].append(np.repeat(np.asarray([codes[c] for c in names], dtype=np.int16), rows))
        columns["value"].append(frame[names].to_numpy(np.float64).ravel(order="F"))
    if not present:
        return runs, pd.DataFrame(columns=[*ID_COLUMNS, *params, "seed", "step", "metric", "value"])
    data = {name: np.concatenate(parts) for name, parts in columns.items()}
    present = np.asarray(present)

    def per_run(values: np.ndarray) -> np.ndarray:  # one value per run → one per row (rows of a run are contiguous)
        return np.repeat(values[present], lengths)

    keys = {}
    for column in [*ID_COLUMNS[1:], *params]:
        categories = pd.Categorical(runs[column])
        keys[column] = pd.Categorical.from_codes(per_run(categories.codes), categories.categories)
    curves = pd.DataFrame({"run": per_run(np.arange(len(runs), dtype=np.int32)), **keys, "seed": data["seed"],
                           "step": data["step"], "metric": pd.Categorical.from_codes(data["metric"], metric_names),
                           "value": data["value"]}, copy=False)
    return runs, curves


def load_runs(paths: Iterable[Path] = (), metrics: Metrics = None, wandb: Iterable[str] = (),
              wandb_api=None, wandb_filters: dict | None = None, workers: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves) for every run directory below ``paths`` and every W&B project path in ``wandb``
    (``entity/project``). ``metrics`` limits which metric columns are read: all (None), a list, or a function of
    the experiment name."""
    records, frames = load_local(paths, metrics, workers)
    for project in wandb:
        more_records, more_frames = load_wandb(project, api=wandb_api, filters=wandb_filters, metrics=metrics)
        records += more_records
        frames += more_frames
    return build_frames(records, frames)


def episodes(path: Path, metrics: Metrics = None) -> pd.DataFrame:
    """Every logged episode of every seed under ``path`` (one configuration): one row per (seed, step), one column
    per metric. Runs of different configurations, or a seed in two runs, are refused: they would be pooled."""
    runs, curves = load_runs([path], metrics=None if metrics is None else list(metrics))
    if runs.empty:
        raise cli.Refusal(f"{path}: no run directories (with {SUMMARY_FILE}) under it")
    if runs.signature.nunique() > 1:
        raise cli.Refusal(f"{path}: runs of {runs.signature.nunique()} configurations; give one cell's folder")
    seeds = [seed for ids in runs.seed_ids for seed in ids]
    if len(seeds) != len(set(seeds)):
        raise cli.Refusal(f"{path}: a seed is in more than one run; keep one copy of each seed")
    return curves.astype({"metric": str}).pivot(index=["seed", "step"], columns="metric", values="value")
