"""Paper tables from runs: each cell's runs → its statistic with a bootstrap interval, the paired difference to the
table's reference (TPO) and the paper's number beside ours.

Which runs fill a cell: runs of the cell's preset (``experiment``, or a preset whose runs it shares, specs'
``SHARED_RUNS``) whose config matches every key of the cell. Runs that failed are never used. Runs that trained the
preset's full step budget are preferred; shorter ones are then ignored (and listed), never averaged in. The seed
ranges of the remaining runs merge into one cell (runs of 5 seeds each, say) when they ran one configuration and
no seed twice; otherwise the cell is a *conflict*: no number, and a message naming the differing keys or the
duplicated seed. A cell is complete when it has the preset's seeds and steps, else it is *partial* and flagged; a
cell with no runs is *missing* and comes with the command that fills it.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import pandas as pd

from algorithms.registry import get_algorithm
from common.checks import ConfigError
from harness import locations
from harness.rundir.outputs import atomic_write_bytes
from harness.report import paper, stats
from harness.report.load import epochs_for
from harness.identity import BUDGET, IGNORED
from harness.report.specs import SHARED_RUNS, Stat, Table, fmt_value, label
from tasks import get_task

CONF = locations.CONF
DONE = ("completed", "diverged")


@functools.cache
def preset_config(preset: str, conf: Path = CONF, task: str | None = None):
    """conf/experiment/<preset>.yaml composed (with its Hydra sweep), or None when it is absent or does not compose;
    ``task``: with that task (a preset that sweeps the task, as demo_tabular does, runs each with its own steps)."""
    if not (conf / "experiment" / f"{preset}.yaml").exists():
        return None
    from hydra import compose, initialize_config_dir

    overrides = [f"experiment={preset}", "logger=none", *([f"task={task}"] if task else [])]
    try:
        with initialize_config_dir(version_base="1.3", config_dir=str(conf)):
            return compose("config", overrides=overrides, return_hydra_config=True)
    except Exception:  # noqa: BLE001 - a preset being edited must not break the report
        return None


def preset_budget(preset: str, conf: Path = CONF) -> tuple[int, int] | None:
    """(seeds, steps) the preset asks for, or None when conf/experiment/<preset>.yaml is absent or does not compose."""
    cfg = preset_config(preset, conf)
    return None if cfg is None else _budget(cfg)


def _budget(cfg) -> tuple[int, int]:
    """(seeds, steps) of a composed preset: an LLM preset trains one seed a run and sweeps ``seed_offset``, so its
    seeds are its runs' times the offsets it sweeps."""
    offsets = (cfg.hydra.sweeper.params or {}).get("seed_offset")
    return int(cfg.seeds) * (len(str(offsets).split(",")) if offsets is not None else 1), int(cfg.task.steps)


def one_seed_runs(preset: str) -> bool:
    """Whether the preset's runs are one seed each, its sweep over ``seed_offset`` (an LLM preset's)."""
    from harness.config import preset_sweep

    try:
        return "seed_offset" in preset_sweep(preset)
    except ConfigError:
        return False


def task_budget(preset: str, task: str | None, conf: Path = CONF) -> tuple[int, int] | None:
    """(seeds, steps) of the preset's runs of ``task`` where the preset sweeps the task (demo_tabular: 150 steps on
    the single-context bandit, 1,000 on the multi-context one), else None."""
    cfg = preset_config(preset, conf)
    if cfg is None or not task or "task" not in cfg.hydra.sweeper.params:
        return None
    if task not in [value.strip() for value in str(cfg.hydra.sweeper.params["task"]).split(",")]:
        return None
    cfg = preset_config(preset, conf, task)
    return None if cfg is None else _budget(cfg)


def outside_grid(preset: str, key: dict) -> list[str] | None:
    """The keys of a cell that the preset neither sweeps over nor sets to the cell's value ([] = the cell is a point
    of the preset's sweep); None when the preset does not compose."""
    cfg = preset_config(preset)
    if cfg is None:
        return None
    sweep = {name: [norm(_number(v)) for v in str(values).split(",")]
             for name, values in cfg.hydra.sweeper.params.items()}
    outside = []
    for name, value in key.items():
        if name in ("experiment", "metric"):
            continue
        swept = GROUP_CHOICE.get(name, name)
        if not (norm(value) in sweep[swept] if swept in sweep else norm(_preset_value(cfg, name, key)) == norm(value)):
            outside.append(name)
    return outside


def _preset_value(cfg, name: str, key: dict):
    """The value a preset's runs of the cell ``key`` hold for ``name``; a null ``algorithm.epochs`` as the number
    of updates it stands for (``load.as_current``)."""
    from omegaconf import OmegaConf

    own = OmegaConf.select(cfg, name)
    if name == "algorithm.epochs" and own is None:
        return epochs_for(cfg.task.name, key.get("algorithm.name", cfg.algorithm.name))
    return own


def _left_at_default(preset: str, key: dict) -> set[str]:
    """The keys of ``key`` a command for ``preset`` leaves out: an ``algorithm.epochs`` the preset neither sweeps
    nor sets, at the number its null stands for (so the runs hold null, like the preset's others)."""
    from omegaconf import OmegaConf

    cfg = preset_config(preset)
    if cfg is None or "algorithm.epochs" not in key or "algorithm.epochs" in cfg.hydra.sweeper.params:
        return set()
    at_default = OmegaConf.select(cfg, "algorithm.epochs") is None and norm(key["algorithm.epochs"]) == norm(
        _preset_value(cfg, "algorithm.epochs", key))
    return {"algorithm.epochs"} if at_default else set()


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def norm(value):
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return None if math.isnan(value) else float(value)
    return str(value)


@functools.cache
def inert_keys(task: str, algorithm: str) -> frozenset[str]:
    """The config keys a run of ``algorithm`` on ``task`` does not depend on (``Task.inert_keys``); none for a name
    the registries do not know."""
    try:
        return get_task(task).inert_keys(get_algorithm(algorithm))
    except (ConfigError, ValueError):  # ConfigError: an unknown task; ValueError: an unknown algorithm
        return frozenset()


GROUP_CHOICE = {"algorithm.name": "algorithm", "model.name": "model", "task.name": "task"}  # a group's file name


def command(preset: str, key: dict, have: Iterable[int] = (), seeds: int = 0) -> str:
    """The exact sweep command that produces the runs of one cell: in the preset whose runs the cell shares
    (``SHARED_RUNS``, followed on) when the cell is a point of that preset's sweep, so that no seed is run twice;
    overrides in one order (the algorithm, then by name), so cells over the same runs get the same command. A cell
    that has some of its ``seeds`` (ids ``have``, from runs of its full length) gets one command per missing range
    (``seeds=n seed_offset=a``, joined by ``; ``): the runs that complete it, which the report merges with the ones
    there."""
    own = key.get("experiment", preset)
    key = one_configuration(own, key)
    point = {name: value for name, value in key.items() if name != "experiment"}
    for _ in SHARED_RUNS:  # to the preset that runs it: Fig 8's H = 10 is Table 3's, whose H = 10 is Fig 1b's
        own, before = next((shared for shared in SHARED_RUNS.get(own, ()) if outside_grid(shared, point) == []),
                           own), own
        if own == before:
            break
    names = sorted((name for name in key if name not in ("experiment", "metric", *_left_at_default(own, key))),
                   key=lambda name: (name != "algorithm.name", name))
    base = " ".join(["python -m harness -m", f"experiment={own}",
                     *(f"{GROUP_CHOICE.get(name, name)}={fmt_value(key[name])}" for name in names)])
    have = set(have)
    missing = [seed for seed in range(seeds) if seed not in have] if have else []  # none there: the plain sweep
    return seeds_command(base, missing, one_seed_runs(own)) or base


def one_configuration(preset: str, key: dict) -> dict:
    """``key`` with every key its method's runs do not depend on (``inert_keys``) at the preset's own value, so that
    the cells of one configuration (a grouped method's prompt- and interaction-matched cells) share one command."""
    from omegaconf import OmegaConf

    cfg = preset_config(preset, task=key.get("task.name"))
    if cfg is None:
        return key
    inert = inert_keys(str(cfg.task.name), str(key.get("algorithm.name", cfg.algorithm.name)))
    own = {name: OmegaConf.select(cfg, name) for name in inert}
    return {name: own[name] if own.get(name) is not None else value for name, value in key.items()}


def seeds_command(base: str, seeds: Iterable[int], one_seed: bool) -> str:
    """``base`` for these seed ids: one run per contiguous range (``seeds=n seed_offset=a``, joined by ``; ``), or,
    for a preset whose runs are one seed each, one sweep over their offsets (``seeds=1 seed_offset=a,b``); "" for
    none."""
    seeds = sorted(set(seeds))
    if one_seed:
        return f"{base} seeds=1 seed_offset={','.join(map(str, seeds))}" if seeds else ""
    return "; ".join(f"{base} seeds={stop - start} seed_offset={start}" for start, stop in _ranges(seeds))


def _ranges(missing: Iterable[int]) -> list[tuple[int, int]]:
    """Seed ids as contiguous [start, stop) ranges."""
    ranges: list[list[int]] = []
    for seed in sorted(set(missing)):
        if ranges and seed == ranges[-1][1]:
            ranges[-1][1] += 1
        else:
            ranges.append([seed, seed + 1])
    return [(start, stop) for start, stop in ranges]


def fill_command(preset: str, key: dict, resolved: Resolved, budget: tuple[int, int, str]) -> str:
    """``command`` for a resolved cell: seed ranges only where the seed count is the preset's (or the paper's),
    counting the seeds of full-length runs (an interrupted run's seeds are run again by a full one)."""
    known = budget[2] != "largest run" and not {"seeds", "seed_offset"} & set(key)
    have = resolved.finished_seeds if resolved.fill_seeds is None else resolved.fill_seeds
    return command(preset, key, have if known else (), budget[0] if known else 0)


_RANGE = re.compile(r"^(?P<base>.*) seeds=(?P<n>\d+) seed_offset=(?P<a>\d+(?:,\d+)*)$")


def merge_commands(commands: Iterable[str]) -> list[str]:
    """Distinct commands, in order; the seed-range commands of one configuration merged into one set of ranges
    (the union of what every cell over those runs misses: cells reading one preset's runs may want 10 or 20
    seeds), which replaces a plain sweep of that configuration, so no seed is listed twice."""
    missing: dict[str, set[int]] = {}
    one_seed: set[str] = set()  # the bases written as a sweep over offsets (``seeds_command``)
    for text in commands:
        for part in text.split("; "):
            found = _RANGE.match(part)
            base = found["base"] if found else part
            missing.setdefault(base, set())
            if found and one_seed_runs(_preset_of(base)):
                one_seed.add(base)
                missing[base].update(map(int, found["a"].split(",")))
            elif found:
                missing[base].update(range(int(found["a"]), int(found["a"]) + int(found["n"])))
    return [part for base, ids in missing.items()
            for part in (seeds_command(base, ids, base in one_seed).split("; ") if ids else [base])]


def _preset_of(command: str) -> str:
    found = re.search(r"experiment=(\S+)", command)
    return found[1] if found else ""


def key_text(key: dict) -> str:
    return " ".join(f"{k}={fmt_value(v)}" for k, v in key.items())


@dataclass
class Resolved:
    """The runs behind one cell and what to say about them."""

    status: str  # ok | partial | missing | failed | conflict (runs of several configurations, or a seed twice)
    owners: dict[int, list[int]] = field(default_factory=dict)  # run id → the seed ids taken from it
    finished_seeds: list[int] = field(default_factory=list)  # the seed ids of runs that reached the budget's steps
    flags: list[str] = field(default_factory=list)
    run_dirs: list[str] = field(default_factory=list)
    fill_seeds: list[int] | None = None  # the finished seeds of the cell's one configuration, where they differ

    @property
    def usable(self) -> bool:
        return bool(self.owners)


class Report:
    """Runs and curves indexed for fast per-cell access."""

    def __init__(self, runs: pd.DataFrame, curves: pd.DataFrame, resamples: int = stats.RESAMPLES,
                 seed: int = stats.SEED):
        pairs = zip(runs.get("task", ()), runs.get("algorithm", ()))  # a Report of no runs has no columns
        self.runs = runs.assign(inert=[inert_keys(task, name) for task, name in pairs])
        self.inert_names = frozenset().union(*self.runs.inert)  # the keys some run does not depend on
        self.curves, self.resamples, self.seed = curves, resamples, seed
        self._index = self._blocks(curves)
        self.with_data = {run for run, _ in self._index}
        self._resolved: dict[tuple, Resolved] = {}

    def _blocks(self, curves: pd.DataFrame) -> dict[tuple[int, str], slice]:
        """(run, metric) → slice of the (run, metric)-sorted arrays; load_runs already writes them in that order,
        so usually this is one linear pass and no sort."""
        metric = pd.Categorical(curves["metric"])
        key = curves["run"].to_numpy(np.int64) * max(1, len(metric.categories)) + metric.codes
        order = None if np.all(key[1:] >= key[:-1]) else np.argsort(key, kind="stable")
        take = (lambda column: column) if order is None else (lambda column: column[order])
        self._seed, self._step = take(curves["seed"].to_numpy()), take(curves["step"].to_numpy())
        self._value = take(curves["value"].to_numpy(dtype=float))
        key = take(key)
        starts = np.flatnonzero(np.r_[True, key[1:] != key[:-1]]) if len(key) else np.zeros(0, dtype=int)
        stops = np.r_[starts[1:], len(key)]
        categories = metric.categories
        return {(int(k // max(1, len(categories))), categories[k % max(1, len(categories))]): slice(a, b)
                for k, a, b in zip(key[starts].tolist(), starts.tolist(), stops.tolist())}

    def budget(self, preset: str, seeds: int = 0, steps: int = 0, task: str | None = None) -> tuple[int, int, str]:
        """(seeds, steps, where from): the preset's (for ``task``, where the preset sweeps the task), else the given
        (the paper's), else the largest run's (of ``task``, where given)."""
        found = preset_budget(preset)
        if found:
            return (*(task_budget(preset, task) or found), "preset")
        if seeds and steps:
            return seeds, steps, "paper"
        mine = self.runs[(self.runs.experiment == preset) & ((self.runs.task == task) if task else True)]
        if mine.empty:  # a figure's series of a preset nothing has run yet
            return 0, 0, "largest run"
        return int(mine.seeds.max() or 0), int(mine.steps.max() or 0), "largest run"

    def matching(self, preset: str, key: dict, inert: bool = False) -> pd.DataFrame:
        """The runs of the cell ``key``: with every value of the key; ``inert``: or differing only in keys their run
        does not depend on (``Task.inert_keys``: a grouped method's ``task.match``)."""
        runs = self.runs
        own = key.get("experiment", preset)
        experiments = [own, *SHARED_RUNS.get(own, ())]
        mask = runs.experiment.isin(experiments).to_numpy().copy()
        for name, value in key.items():
            if name in ("experiment", "metric"):
                continue
            column = {"algorithm.name": "algorithm", "task.name": "task"}.get(name)
            values = runs[column] if column else runs["config"].map(lambda c, name=name: c.get(name))
            same = (values.map(norm) == norm(value)).to_numpy()
            mask &= same | np.fromiter((name in keys for keys in runs.inert), bool, len(runs)) if inert else same
        return runs[mask]

    def resolve(self, preset: str, key: dict, budget: tuple[int, int, str]) -> Resolved:
        """The cell's runs: those of its one configuration (``one_configuration``: a grouped method's interaction-
        matched cell reads the prompt-matched runs), else of its own values, else of any value of the keys its runs
        do not depend on; flagged where they hold another value than the cell's. Its command completes the one
        configuration (``fill_seeds``)."""
        cache_key = (preset, key_text(key), budget)
        if cache_key not in self._resolved:
            one = one_configuration(key.get("experiment", preset), key)
            tries = [(one, False), *([(key, False)] if one != key else []),
                     *([(key, True)] if self.inert_names & set(key) else [])]  # else the same runs again
            tried = []
            for cell, inert in tries:
                candidates = self.matching(preset, cell, inert)
                tried.append(self.resolve_runs(candidates, budget))
                if tried[-1].usable:
                    break
            resolved = tried[-1]
            if resolved.usable:
                held = candidates[candidates.run.isin(resolved.owners)].config.iloc[0]
                read = {name: held.get(name) for name, value in key.items() if norm(held.get(name)) != norm(value)
                        and name not in ("experiment", "metric", "algorithm.name", "task.name")}
                if read:
                    resolved.flags.insert(0, f"the {key_text(read)} runs (the same configuration here)")
            resolved.fill_seeds = tried[0].finished_seeds
            self._resolved[cache_key] = resolved
        return self._resolved[cache_key]

    def resolve_runs(self, candidates: pd.DataFrame, budget: tuple[int, int, str]) -> Resolved:
        """The cell over ``candidates``, the runs matching its key, by the module docstring's rules."""
        seeds_wanted, steps_wanted, source = budget
        if candidates.empty:
            return Resolved("missing")
        usable = candidates[(candidates.status != "failed") & candidates.run.isin(self.with_data)]
        if usable.empty:
            return _failed(candidates)
        flags = []
        full = usable[usable.status.isin(DONE) & (usable.steps.fillna(0) >= steps_wanted)]
        if not full.empty and len(full) < len(usable):  # superseded, whatever configuration they ran
            flags.append(f"ignored {len(usable) - len(full)} shorter run(s)")
        used = full if not full.empty else usable
        if used.signature.nunique() > 1:  # seed ranges merge only when they ran the same configuration
            return _configurations_conflict(used)
        used = used.sort_values("mtime")
        owner, conflict = _seed_owners(used)
        if conflict is not None:
            return conflict
        if source == "preset" and len(owner) > seeds_wanted:  # the preset's seeds, so a table's cells compare alike
            flags.append(f"first {seeds_wanted} of {len(owner)} seeds (the preset's)")
            owner = dict(sorted(owner.items())[:seeds_wanted])
        owners = _seeds_by_run(owner)
        used = used[used.run.isin(owners)]
        complete = not full.empty and len(owner) >= seeds_wanted
        flags += _shortfall_flags(used, not full.empty, len(owner), seeds_wanted, steps_wanted)
        finished = sorted(owner) if not full.empty else []
        return Resolved("ok" if complete else "partial", owners, finished, flags, list(used.run_dir))

    def matrix(self, resolved: Resolved, metric: str, when: tuple[str, float] | None = None) -> stats.SeedMatrix:
        """One metric of a cell's seeds; ``when = (other, value)``: NaN wherever ``other`` is not ``value``."""
        if when is not None:
            values, condition = self.matrix(resolved, metric), self.matrix(resolved, when[0])
            values, condition = values.align(condition)
            return stats.SeedMatrix(values.seeds, values.steps, np.where(condition.values == when[1], values.values,
                                                                         np.nan))
        seed, step, value = [], [], []
        for run, seeds in resolved.owners.items():
            block = self._index.get((run, metric))
            if block is None:
                continue
            keep = np.isin(self._seed[block], seeds)
            seed.append(self._seed[block][keep])
            step.append(self._step[block][keep])
            value.append(self._value[block][keep])
        if not seed:
            return stats.seed_matrix(np.zeros(0, int), np.zeros(0, int), np.zeros(0))
        return stats.seed_matrix(np.concatenate(seed), np.concatenate(step), np.concatenate(value))

    def evaluate(self, table: Table) -> pd.DataFrame:
        """One row per (cell, stat): ours with interval, flags, the paper's value, paired difference to reference."""
        rows = []
        for row, col, key in table.cells():
            budget = self.budget(key.get("experiment", table.preset), task=key.get("task.name"))
            resolved = self.resolve(table.preset, key, budget)
            ref_key = {**key, **table.reference}
            is_reference = {"experiment": table.preset, **key} == {"experiment": table.preset, **ref_key}
            ref_budget = self.budget(ref_key.get("experiment", table.preset), task=ref_key.get("task.name"))
            ref = None if is_reference else self.resolve(table.preset, ref_key, ref_budget)
            for stat in table.stats:
                rows.append(self._cell(table, stat, row, col, key, resolved, ref, ref_key, budget))
        return pd.DataFrame(rows)

    def _cell(self, table: Table, stat: Stat, row: dict, col: dict, key: dict, resolved: Resolved,
              ref: Resolved | None, ref_key: dict, budget) -> dict:
        """One row of ``evaluate``: the cell's statistic, the paper's value, the difference to the reference cell
        and the cell's runs."""
        metric = key.get("metric", stat.metric)
        preset = key.get("experiment", table.preset)
        published = paper.lookup(table.name, stat.name, {"experiment": preset, **key})
        matrix = self.matrix(resolved, metric, stat.when) if resolved.usable else None
        summary = stats.summarize(stat, matrix, self.resamples, self.seed) if matrix is not None else None
        comparison = self._paired_with_reference(stat, metric, matrix, ref)
        return {
            "table": table.name, "row": label(row), "col": label(col), "stat": stat.name,
            **_summary_columns(summary), **_paper_columns(published, summary),
            "reference": label({k: ref_key[k] for k in table.reference}) if ref is not None else "reference",
            **_paired_columns(comparison),
            "seeds": summary.seeds if summary else 0,
            "seeds_run": sum(len(seeds) for seeds in resolved.owners.values()),  # the cell's, with the metric or not
            "last_step": _last_step(matrix),
            "status": resolved.status, "flags": "; ".join(resolved.flags),
            "budget": f"{budget[0]} seeds × {budget[1]:,} steps ({budget[2]})", "preset": preset,
            "cell": key_text(key), "runs": " ".join(resolved.run_dirs),
            "command": fill_command(table.preset, key, resolved, budget),
            # for the markdown only (write_table leaves it out of the csv): seeds whose own curve gets below X
            "_reached": _seeds_reaching(stat, matrix),
        }

    def _paired_with_reference(self, stat: Stat, metric: str, matrix: stats.SeedMatrix | None,
                               ref: Resolved | None) -> stats.Paired | None:
        """The cell's paired difference to its reference cell (``stats.paired``), None where either has no values."""
        if ref is not None and ref.usable and matrix is not None:
            return stats.paired(stat, matrix, self.matrix(ref, metric, stat.when), self.resamples, self.seed)
        return None


def _failed(candidates: pd.DataFrame) -> Resolved:
    """A cell whose runs all failed (or logged no metrics), with their errors."""
    errors = sorted({str(e) for e in candidates.error.dropna()}) or ["no metrics"]
    return Resolved("failed", flags=[f"failed: {'; '.join(errors)}"], run_dirs=list(candidates.run_dir))


def _configurations_conflict(used: pd.DataFrame) -> Resolved:
    """A cell whose runs ran more than one configuration, naming the keys they differ in."""
    return Resolved("conflict", flags=[
        f"conflict: {used.signature.nunique()} configurations (differ in "
        f"{', '.join(_differing(used.config))}); keep one configuration's runs under the report's paths"],
        run_dirs=list(used.run_dir))


def _seed_owners(used: pd.DataFrame) -> tuple[dict[int, int], Resolved | None]:
    """Each seed id → the run it comes from (``used`` in the order to take them); a conflict instead where a seed is
    in two runs."""
    owner: dict[int, int] = {}
    for run, seed_ids in zip(used.run, used.seed_ids):
        for seed in seed_ids:
            if seed in owner:  # never silently preferred: two copies of a seed mean a run was duplicated
                both = list(used.run_dir[used.run.isin([owner[seed], run])])
                return owner, Resolved("conflict", flags=[
                    f"conflict: seed {seed} is in more than one run (the first two runs listed); keep one copy "
                    "of each seed"], run_dirs=both + [d for d in used.run_dir if d not in both])
            owner[seed] = run
    return owner, None


def _seeds_by_run(owner: dict[int, int]) -> dict[int, list[int]]:
    """Seed id → run, turned into run id → its seed ids, both in order."""
    owners: dict[int, list[int]] = {}
    for seed, run in sorted(owner.items()):
        owners.setdefault(int(run), []).append(seed)
    return owners


def _shortfall_flags(used: pd.DataFrame, any_full: bool, seeds: int, seeds_wanted: int,
                     steps_wanted: int) -> list[str]:
    """What a cell's runs (``used``, holding ``seeds`` seeds) fall short of: seeds, and steps where none of them is
    full-length (runs that ended short, runs interrupted); and whether some seeds diverged."""
    flags = []
    if seeds < seeds_wanted:
        flags.append(f"{seeds}/{seeds_wanted} seeds")
    if not any_full:
        done = used[used.status.isin(DONE)]
        if not done.empty:
            flags.append(f"{int(done.steps.min())}/{steps_wanted} steps")
        for last in used[~used.status.isin(DONE)].last_step:
            flags.append(f"interrupted at step {int(last)} of {steps_wanted}")
    if (used.status == "diverged").any():
        flags.append("some seeds diverged (NaN after divergence; means skip them)")
    return flags


def _summary_columns(summary: stats.Summary | None) -> dict:
    """A cell's statistic with its standard error and 95% interval (NaN without one)."""
    if summary is None:
        return {"ours": np.nan, "se": np.nan, "ci_low": np.nan, "ci_high": np.nan}
    return {"ours": summary.value, "se": summary.se, "ci_low": summary.low, "ci_high": summary.high}


def _paper_columns(published: paper.PaperValue | None, summary: stats.Summary | None) -> dict:
    """The paper's value beside the interval a rerun of ours would give (``paper_in_rerun``: whether they overlap)."""
    rerun_low, rerun_high = (summary.rerun_low, summary.rerun_high) if summary else (np.nan, np.nan)
    return {
        "paper": published.text if published else "", "rerun_low": rerun_low, "rerun_high": rerun_high,
        "paper_in_rerun": published.overlaps(rerun_low, rerun_high) if published and summary else None,
        "paper_low": published.low if published else np.nan, "paper_high": published.high if published else np.nan,
        "paper_note": published.note if published else "",
    }


def _paired_columns(comparison: stats.Paired | None) -> dict:
    """The paired difference to the reference with its interval, P(better) and the paired seeds (none: NaN, 0)."""
    if comparison is None:
        return {"diff": np.nan, "diff_low": np.nan, "diff_high": np.nan, "p_better": np.nan, "paired_seeds": 0}
    return {"diff": comparison.diff, "diff_low": comparison.low, "diff_high": comparison.high,
            "p_better": comparison.p_better, "paired_seeds": comparison.seeds}


def _last_step(matrix: stats.SeedMatrix | None) -> float:
    """The last step a cell's values reach (NaN without any)."""
    return int(matrix.steps[-1]) if matrix is not None and matrix.steps.size else np.nan


def _seeds_reaching(stat: Stat, matrix: stats.SeedMatrix | None) -> float:
    """For steps to a threshold: the seeds whose own curve gets below it (NaN for other statistics)."""
    if stat.kind == "steps_to" and matrix is not None and matrix.values.size:
        return int(np.isfinite(stats.per_seed(stat, matrix)).sum())
    return np.nan


def _differing(configs: pd.Series) -> list[str]:
    keys = sorted({k for c in configs for k in c if not k.startswith(IGNORED) and k not in BUDGET})
    return [k for k in keys if len({str(c.get(k)) for c in configs}) > 1]


def missing_commands(records: pd.DataFrame) -> list[str]:
    """Commands for the cells (or figure lines) of ``records`` (preset, status, command) that are not complete; a
    preset without any runs collapses to one command. A conflict has none: its runs are there, in more than one
    copy or configuration, and running more would add another."""
    commands = []
    for preset, part in records.groupby("preset", sort=False):
        if (part.status == "missing").all():
            commands.append(f"python -m harness -m experiment={preset}")
        else:
            commands += list(part.command[~part.status.isin(("ok", "conflict"))])
    return merge_commands(commands)


# ---- rendering ------------------------------------------------------------------------------------------------

def fmt(stat: Stat, value: float) -> str:
    """A number as the paper prints it: steps as integers ("−" = never), errors in % with 1 decimal (2 significant
    digits below 1%), "−" above ``dash_above``, counts per seed with 2 decimals, raw values with 4."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if stat.kind == "steps_to":
        return "−" if math.isinf(value) else f"{value:.0f}"
    if stat.kind == "relapses":
        return f"{value:.2f}"
    if not stat.percent:
        return f"{value:.4f}"
    if stat.dash_above is not None and value > stat.dash_above:
        return "−"
    percent = 100 * value
    return f"{percent:.1f}" if abs(percent) >= 1 or percent == 0 else f"{percent:.2g}"


def _interval(stat: Stat, low: float, high: float) -> str:
    plain = replace(stat, dash_above=None)  # the interval shows numbers even where the value shows "−"
    if stat.kind == "steps_to":  # a resample whose seed mean never gets below X: the interval ends at "never"
        return "[" + ", ".join("never" if math.isinf(v) else fmt(plain, v) for v in (low, high)) + "]"
    return f"[{fmt(plain, low)}, {fmt(plain, high)}]"


def cell_text(stat: Stat, cell: pd.Series) -> str:
    """"58 [52, 66] (58 ✓)": ours [95% CI] (paper, ✓ inside / ✗ outside a rerun's interval); † partial; a
    threshold the seed mean never gets below: "never (k/n seeds reach it)", k the seeds whose own curve does."""
    paper_part = ""
    if cell.paper:
        mark = {True: " ✓", False: " ✗"}.get(cell.paper_in_rerun, "")
        paper_part = f" ({cell.paper}{mark})"
    if cell.status in ("missing", "failed", "conflict"):
        return f"{cell.status}{paper_part}"
    if math.isnan(cell.ours):
        return f"n/a{paper_part}"
    dagger = "†" if cell.status == "partial" else ""
    fewer = f" n={cell.seeds}" if cell.seeds < cell.seeds_run else ""
    if stat.kind == "steps_to" and math.isinf(cell.ours):
        reached = cell.get("_reached", np.nan)
        who = "" if pd.isna(reached) else f" ({int(reached)}/{cell.seeds} seeds reach it)"
        interval = "" if math.isinf(cell.ci_low) else " " + _interval(stat, cell.ci_low, cell.ci_high)
        return f"never{dagger}{interval}{who}{fewer}{paper_part}"
    return f"{fmt(stat, cell.ours)}{dagger} {_interval(stat, cell.ci_low, cell.ci_high)}{fewer}{paper_part}"


OPEN = "*"  # marks a paired interval that a resample never reaching the threshold leaves open
OPEN_NOTE = ("* Open interval: in some bootstrap resamples one side's seed mean never gets below the threshold "
             "within the run, so the difference has no bound on that side (∞).")


def paired_text(stat: Stat, cell: pd.Series) -> str:
    """"Δ [95% CI] P=p"; steps to a threshold that one side never reaches: "not reached (ref. is)" or "reached
    (ref. is not)" with no interval, and an interval one resample leaves open ends at ∞ (marked ``OPEN``)."""
    if cell.reference == "reference":
        return "ref"
    if not cell.paired_seeds:
        return "–"
    signed = replace(stat, dash_above=None)
    probability = "n/a" if math.isnan(cell.p_better) else f"{cell.p_better:.2f}"
    fewer = f" n={cell.paired_seeds}" if cell.paired_seeds < cell.seeds_run else ""
    low, high = cell.diff_low, cell.diff_high
    opened = math.isinf(low) or math.isinf(high)
    interval = _difference_interval(signed, low, high, opened)
    neither = stat.kind == "steps_to" and cell["diff"] == 0 and math.isinf(cell.ours)  # never − never counts as 0
    if neither and not opened:
        interval = ""  # [0, 0]: every resample neither
    diff = _difference_words(stat, signed, cell["diff"], neither)
    return " ".join(p for p in (diff, interval, f"P={probability}{fewer}") if p)


def _difference_interval(signed: Stat, low: float, high: float, opened: bool) -> str:
    """"[low, high]", a side that some resample leaves open ending at ∞ (``opened``: marked ``OPEN``)."""
    if math.isinf(low) and math.isinf(high) and low == high:
        return ""  # every resample one-sided: nothing to add to the words
    return (("(−∞" if math.isinf(low) else f"[{fmt(signed, low)}") + ", " +
            ("∞)" if math.isinf(high) else f"{fmt(signed, high)}]") + (OPEN if opened else ""))


def _difference_words(stat: Stat, signed: Stat, diff: float, neither: bool) -> str:
    """The paired difference: in words where a side never reaches the threshold (``neither``: both), else signed."""
    if stat.kind == "steps_to" and math.isinf(diff):
        return "not reached (ref. is)" if diff > 0 else "reached (ref. is not)"
    if neither:
        return "neither reaches it"
    return "0" if diff == 0 else fmt(signed, diff)


def pivot(table: Table, cells: pd.DataFrame, text) -> pd.DataFrame:
    """The paper's layout: rows × (cols × stats), each cell rendered by ``text(stat, row)``."""
    stats_by_name = {s.name: s for s in table.stats}
    multi = len(table.stats) > 1
    frame = cells.assign(text=[text(stats_by_name[c.stat], c) for _, c in cells.iterrows()])
    frame["column"] = [" ".join(p for p in (c.col, stats_by_name[c.stat].label if multi else "") if p)
                       or stats_by_name[c.stat].label for _, c in frame.iterrows()]
    wide = frame.pivot(index="row", columns="column", values="text")
    return wide.reindex(index=list(dict.fromkeys(frame.row)), columns=list(dict.fromkeys(frame.column)))


LATEX = {"∞": r"$\infty$",
         "—": "---", "✓": r"\checkmark", "✗": r"$\times$", "†": r"$^\dagger$", "−": "--", "η": r"$\eta$", "%": r"\%",
         "_": r"\_", "&": r"\&", "#": r"\#", "–": "--", "Δ": r"$\Delta$", "≤": r"$\le$"}


def latex(frame: pd.DataFrame, caption: str) -> str:
    def escape(text: str) -> str:
        return "".join(LATEX.get(ch, ch) for ch in str(text))

    header = " & ".join(escape(c) for c in [frame.index.name or "", *frame.columns])
    body = [" & ".join(escape(v) for v in [index, *row]) + r" \\" for index, row in frame.iterrows()]
    return "\n".join([r"\begin{table}[t]", r"\centering", rf"\caption{{{escape(caption)}}}",
                      rf"\begin{{tabular}}{{l{'r' * len(frame.columns)}}}", r"\toprule", header + r" \\",
                      r"\midrule", *body, r"\bottomrule", r"\end{tabular}", r"\end{table}", ""])


RULES = ("Cells: ours [95% percentile bootstrap over seeds] (paper ✓ / ✗: inside / outside the 95% interval of "
         "a rerun of as many seeds, ours plus the difference of two independent resamples, the rerun_low and "
         "rerun_high columns of the CSV; rounding included). Final = seed mean at the last step; steps to X = "
         "first step whose seed-mean error is strictly below X; never = the seed mean never gets below X "
         "within the run (k/n: the seeds whose own curve does), an interval ending at never: some resamples "
         "never get there; \"−\" = above 95% where the paper uses that, and the paper's own never; † = partial "
         "(fewer seeds or steps than the preset); n=k: the value averages k of the cell's seeds (the others "
         "diverged or lack the metric).")
PAIRED = ("Paired with {ref} on the same seed ids: Δ = ours − reference [95% bootstrap, same resampled seeds for "
          "both], P = fraction of paired seeds on which this cell beats the reference (per-seed values; ties ½); n=k: "
          "only k seeds have a value on both sides.")


def write_file(path: Path, data: str | bytes) -> None:
    """Replace ``path`` whole (``atomic_write_bytes``): a full disk or a kill leaves the old file or none, never a cut
    one. Its ``OSError`` names ``path`` (a write that fails names no file)."""
    try:
        atomic_write_bytes(path, data.encode() if isinstance(data, str) else data)
    except OSError as error:
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error


def write_table(table: Table, cells: pd.DataFrame, out: Path) -> str:
    """Write <name>.csv (long, every field), <name>.md and <name>.tex; return the markdown."""
    write_file(out / f"{table.name}.csv",
               cells.drop(columns=[c for c in cells.columns if c.startswith("_")]).to_csv(index=False))
    main = pivot(table, cells, cell_text)
    main.index.name = ""
    write_file(out / f"{table.name}.tex", latex(main, table.title))
    budget = cells.budget.iloc[0]
    in_paper = table.drawn_only or table.name in paper.artefacts()
    paper_budget = preset_budget(table.preset) if in_paper else None
    published = f"paper: {paper_budget[0]} seeds × {paper_budget[1]:,} steps" if paper_budget else "not in the paper"
    published += ", drawn as curves without printed values" if paper_budget and table.drawn_only else ""
    lines = [f"## {table.title}\n", f"Preset `{table.preset}`; expected {budget}; {published}. {RULES}"
             + (f" {table.note}" if table.note else "") + "\n",
             main.to_markdown(), ""]
    lines += _paper_notes(cells)
    if table.reference:
        lines += _paired_section(table, cells)
    lines += _complete_cell_notes(cells) + _incomplete_cells(cells)
    text = "\n".join(lines)
    write_file(out / f"{table.name}.md", text)
    return text


def _paper_notes(cells: pd.DataFrame) -> list[str]:
    """The paper's notes on its values: a note several cells share once, any other with its cell."""
    notes = cells[cells.paper_note != ""].drop_duplicates("cell")
    if notes.empty:
        return []
    counts = notes.paper_note.value_counts()
    parts = [n.paper_note if counts[n.paper_note] > 1 else f"{n.row} {n.col}".strip() + f": {n.paper_note}"
             for _, n in notes.iterrows()]
    return ["Paper values: " + "; ".join(dict.fromkeys(parts)) + ".", ""]


def _paired_section(table: Table, cells: pd.DataFrame) -> list[str]:
    """The table of paired differences to the reference, and the note on open intervals where it has one."""
    reference = label(table.reference)
    paired_frame = pivot(table, cells, paired_text)
    lines = [PAIRED.format(ref=reference) + "\n", paired_frame.to_markdown(), ""]
    if paired_frame.map(lambda text: str(text).split(" P=")[0].endswith(OPEN)).to_numpy().any():
        lines += [OPEN_NOTE, ""]
    return lines


def _complete_cell_notes(cells: pd.DataFrame) -> list[str]:
    """The flags of complete cells whose runs needed a word: more seeds than the preset's, shorter runs ignored."""
    flagged = cells.drop_duplicates("cell")
    noted = flagged[(flagged.status == "ok") & (flagged["flags"] != "")]
    if noted.empty:
        return []
    return ["Notes: " + "; ".join(f"{', '.join(p for p in (c.row, c.col) if p)}: {c['flags']}"
                                  for _, c in noted.iterrows()) + ".", ""]


def _incomplete_cells(cells: pd.DataFrame) -> list[str]:
    """The cells not complete, each with its status, flags and the command that fills it; one line of commands
    instead when no cell has runs yet."""
    flagged = cells.drop_duplicates("cell")
    flagged = flagged[flagged.status != "ok"]
    if (flagged.status == "missing").all() and len(flagged) == cells.cell.nunique():
        return ["No runs yet: " + ", ".join(f"`{c}`" for c in missing_commands(cells)) + "\n"]
    if flagged.empty:
        return []
    lines = ["Not complete:\n"]
    for _, cell in flagged.iterrows():
        where = ", ".join(p for p in (cell.row, cell.col) if p)
        detail = f" ({cell['flags']})" if cell["flags"] else ""
        lines.append(f"- {where}: **{cell.status}**{detail} — `{cell.command}`")
    return [*lines, ""]
