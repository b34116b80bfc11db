"""``--compare KEY --baseline VALUE``: every value of one config key against a baseline value, per task (paired
over seeds) and across tasks (rliable's aggregates, Agarwal et al. 2021), for any set of runs.

* Tasks: the distinct values of every other identity key of the runs (experiment, task, algorithm, and each task.*,
  algorithm.* or model.name key the runs vary); comparing ``algorithm``, the algorithm.* keys are the algorithms'
  own and do not split tasks. Each run belongs to one task; its runs resolve as a paper table's cell does
  (``Report.resolve_runs``: full-length runs preferred, seed ranges of one configuration merged, a conflict never
  averaged). Tasks without usable runs of the baseline are left out with a warning naming them.
* Normalised score = 1 − ``error``, so 1 is solved. ``error`` lies in [0, 1] on every task (docs/reproduction.md
  §7): tabular_single 1 − π(y*) before each step; tabular_multi 1 − mean over contexts of π(y*) after each step;
  mnist_bandit the greedy test error on the 10k test images; token_reversal the error on the episode's sampled
  rollouts (token error under bag-of-tokens, 1 − the prefix-correct share under sequential, exact-match error
  under terminal reward); the LLM tasks 1 − the mean reward (in [0, 1]) of the training completions. Scores of
  different tasks are therefore comparable without per-task reference scores.
* Windows (``stats``): final = each seed's score at the last logged step; mean = each seed's mean score over every
  logged step (the area under the curve per step).
* Per task: each value's score [95% percentile bootstrap over seeds] and value − baseline, paired on the seed ids
  both have (seeds share initial parameters and prompt streams across algorithms), with P(better): ``stats``.
* Across tasks, with rliable (``aggregates``): IQM and optimality gap (γ = 1) of the (runs × tasks) score
  matrix, the probability of improvement of each value over the baseline (Mann–Whitney, per task, averaged; runs
  unpaired, as rliable defines it), performance profiles (fraction of runs with score > τ) and the IQM against the
  step, all with stratified bootstrap intervals (runs resampled within each task). They compare values over the
  same tasks: a value without a score in one of them is left out (a warning names it). rliable needs as many runs
  in every task, so each value keeps, per task, its first n seeds in id order with a finite score, n the fewest any
  task has (a warning says when seeds are left out). The IQM against the step is drawn at up to
  ``aggregates.CURVE_POINTS`` steps every task logged (up to the shortest task's last; none when the tasks share
  fewer than 2). Each value's estimate is seeded on its own (``aggregates.global_seed``): the same runs, resamples
  and seed give the same numbers, whichever other values are compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from harness.report import stats
from harness.report.load import warn
from harness.report.specs import ALGORITHM_LABEL, KEY_LABEL, TASK_LABEL, Stat, algorithm_rank, fmt_value
from harness.report.tables import GROUP_CHOICE, Report, Resolved, _number, norm, write_file

WINDOWS = {"final": Stat("final", higher_is_better=True), "mean": Stat("mean", higher_is_better=True)}
CONFIG_KEY = {"algorithm": "algorithm.name", "task": "task.name"}  # the runs frame's columns for the config's keys
ALIAS = {name: column for column, name in CONFIG_KEY.items()}
TASKS = "compare_tasks"


class CompareError(ValueError):
    """A comparison that cannot be made from these runs: one line naming the option, the key and the choices."""


@dataclass(frozen=True)
class Request:
    """``--compare KEY --baseline VALUE --windows W,...`` as given."""

    key: str
    baseline: str
    windows: tuple[str, ...] = ("final",)


@dataclass
class Comparison:
    """The tasks (each a dict of its identity keys), the compared values (baseline first) and every usable cell's
    scores (1 − error, seeds × steps), by (task index, value)."""

    key: str
    values: list
    tasks: list[dict]
    cells: dict[tuple[int, object], Resolved]
    scores: dict[tuple[int, object], stats.SeedMatrix]
    windows: tuple[str, ...]
    resamples: int
    seed: int

    @property
    def baseline(self):
        return self.values[0]


def _sort_key(value) -> tuple:
    """Numbers by value, then text, then absent."""
    if value is None:
        return 2, 0.0, ""
    return (0, value, "") if isinstance(value, float) else (1, 0.0, str(value))


def text(key: str, value) -> str:
    """A key's value as a reader knows it: "TPO", "η=0.5", "H=7", "single-context bandit", "table3_terminal"."""
    if key == "algorithm":
        return ALGORITHM_LABEL.get(value, str(value))
    if key == "task":
        return TASK_LABEL.get(value, str(value))
    if key == "experiment":
        return str(value)
    return f"{KEY_LABEL.get(key, GROUP_CHOICE.get(key, key.split('.', 1)[-1]))}={fmt_value(value)}"


def task_text(task: dict) -> str:
    return ", ".join(text(key, value) for key, value in task.items() if value is not None)


def identity_keys(runs: pd.DataFrame) -> list[str]:
    """The keys that tell runs' configurations apart: experiment, task, algorithm and the keys ``load`` found
    varying (``_param_columns``)."""
    return ["experiment", "task", "algorithm",
            *sorted(c for c in runs.columns if c.startswith(("task.", "algorithm.")) or c == "model.name")]


def prepare(report: Report, request: Request) -> Comparison:
    """Tasks, values and each cell's runs; ``CompareError`` for a key the runs do not vary, a baseline they lack,
    fewer than two values, or no task with usable runs of the baseline."""
    runs = report.runs
    keys = identity_keys(runs)
    key = ALIAS.get(request.key, request.key)
    if key not in keys:
        raise CompareError(f"--compare {request.key}: not a key these runs vary; choose one of {', '.join(keys)}")
    present = _present_values(runs, key, request.key)
    baseline = _baseline_value(present, key, request.baseline)
    task_keys = _task_keys(keys, key)
    groups = _runs_by_task_and_value(runs, task_keys, key)

    values = [baseline, *(value for value in present if value != baseline)]
    tasks, cells, scores, dropped = [], {}, {}, []
    for identity in _task_order(groups):
        task = dict(zip(task_keys, identity))
        found = _resolve_values(report, runs, groups, identity, task, key, values)
        matrices = _usable_matrices(report, found)
        if baseline not in matrices:
            dropped.append(f"{task_text(task)} ({found[baseline].status if baseline in found else 'no runs'})")
            continue
        _warn_left_out(key, task, found, matrices)
        index = len(tasks)
        tasks.append(task)
        cells.update({(index, value): resolved for value, resolved in found.items()})
        scores.update({(index, value): stats.SeedMatrix(matrix.seeds, matrix.steps, 1.0 - matrix.values)
                       for value, matrix in matrices.items()})
    if not tasks:
        raise CompareError(f"--baseline {request.baseline}: no task has usable runs of it ({'; '.join(dropped)})")
    if dropped:
        warn(f"--baseline {request.baseline}: no usable runs in {len(dropped)} task(s), left out: {'; '.join(dropped)}")
    return Comparison(key, values, tasks, cells, scores, request.windows, report.resamples, report.seed)


def _present_values(runs: pd.DataFrame, key: str, asked: str) -> list:
    """The values of ``key`` the runs hold, in display order (algorithms the paper's); ``CompareError`` for fewer
    than two (``asked``: the key as given)."""
    present = sorted({norm(value) for value in runs[key]} - {None},
                     key=algorithm_rank if key == "algorithm" else _sort_key)
    if len(present) < 2:
        raise CompareError(f"--compare {asked}: the runs have {len(present)} value of it "
                           f"({', '.join(map(fmt_value, present))}); a comparison needs at least 2")
    return present


def _baseline_value(present: list, key: str, baseline: str):
    """The value of ``present`` that ``--baseline`` names, as shown or as a number; ``CompareError`` for none."""
    found = next((value for value in present if fmt_value(value) == baseline or value == norm(_number(baseline))),
                 None)
    if found is None:
        raise CompareError(f"--baseline {baseline}: no runs with {key}={baseline}; present: "
                           f"{', '.join(map(fmt_value, present))}")
    return found


def _task_keys(keys: list[str], key: str) -> list[str]:
    """The identity keys that tell tasks apart: all but ``key`` (comparing ``algorithm``, the algorithm.* keys are
    the algorithms' own and do not split tasks)."""
    return [k for k in keys if k != key and not (key == "algorithm" and k.startswith("algorithm."))]


def _runs_by_task_and_value(runs: pd.DataFrame, task_keys: list[str], key: str) -> dict[tuple, list]:
    """Run indexes by (task identity, value of ``key``); runs without a value are left out, with a warning."""
    rows = runs[[*task_keys, key]].map(norm)
    groups: dict[tuple, list] = {}
    for index, (*task, value) in zip(runs.index, rows.itertuples(index=False, name=None)):
        if value is not None:
            groups.setdefault((tuple(task), value), []).append(index)
    unkeyed = int(rows[key].isna().sum())
    if unkeyed:
        warn(f"--compare {key}: {unkeyed} run(s) without {key} left out")
    return groups


def _task_order(groups: dict[tuple, list]) -> list[tuple]:
    """The task identities of ``groups``, sorted key by key (``_sort_key``)."""
    return sorted({task for task, _ in groups}, key=lambda task: [_sort_key(value) for value in task])


def _resolve_values(report: Report, runs: pd.DataFrame, groups: dict[tuple, list], identity: tuple, task: dict,
                    key: str, values: list) -> dict[object, Resolved]:
    """The cell of each value with runs in the task ``identity``, resolved as a table's (``Report.resolve_runs``)."""
    found = {}
    for value in values:
        if (identity, value) in groups:
            full = {**task, key: value}
            budget = report.budget(full["experiment"], task=full["task"])
            found[value] = report.resolve_runs(runs.loc[groups[identity, value]], budget)
    return found


def _usable_matrices(report: Report, found: dict[object, Resolved]) -> dict[object, stats.SeedMatrix]:
    """The error matrix of each usable cell that logs any."""
    matrices = {value: report.matrix(resolved, "error") for value, resolved in found.items() if resolved.usable}
    return {value: matrix for value, matrix in matrices.items() if matrix.values.size}


def _warn_left_out(key: str, task: dict, found: dict[object, Resolved], matrices: dict) -> None:
    """One warning per value of a kept task that has runs there but no score: why it is left out."""
    for value, resolved in found.items():
        if value not in matrices:
            why = "; ".join([resolved.status, *resolved.flags]) if not resolved.usable else "no error logged"
            warn(f"--compare {key}: {text(key, value)} in {task_text(task)}: {why}; left out")


# ---- per task ----------------------------------------------------------------------------------------------------

def task_table(comparison: Comparison) -> pd.DataFrame:
    """One row per task, value and window: the value's score with its interval and, but for the baseline, its
    paired difference to the baseline (``stats.summarize``, ``stats.paired`` on the scores)."""
    rows = []
    key = comparison.key
    for index, task in enumerate(comparison.tasks):
        reference = comparison.scores[index, comparison.baseline]
        for value in comparison.values:
            resolved, matrix = comparison.cells.get((index, value)), comparison.scores.get((index, value))
            if matrix is None:
                continue
            for window in comparison.windows:
                stat = WINDOWS[window]
                summary = stats.summarize(stat, matrix, comparison.resamples, comparison.seed)
                pair = (None if value == comparison.baseline else
                        stats.paired(stat, matrix, reference, comparison.resamples, comparison.seed))
                rows.append({"cell": task_text(task), **task, key: value, "window": window,
                             "status": resolved.status, "seeds": len(matrix.seeds), "score": summary.value,
                             "score_low": summary.low, "score_high": summary.high,
                             "diff": pair.diff if pair else np.nan, "diff_low": pair.low if pair else np.nan,
                             "diff_high": pair.high if pair else np.nan, "p_better": pair.p_better if pair else np.nan,
                             "paired_seeds": pair.seeds if pair else len(matrix.seeds),
                             "flags": "; ".join(resolved.flags), "runs": " ".join(resolved.run_dirs)})
    return pd.DataFrame(rows)


def with_interval(value: float, low: float, high: float, difference: bool = False) -> str:
    """A score (or an aggregate of scores) to 4 decimals, a difference of two to 3 significant digits with its
    sign: near a score of 1 (errors of 1e-4) differences are small."""
    if np.isnan(value):
        return "n/a"
    if not difference:
        return f"{value:.4f} [{low:.4f}, {high:.4f}]"
    value_text, low_text, high_text = (f"{number:{sign}.3g}" if number else "0"
                                       for number, sign in ((value, "+"), (low, ""), (high, "")))
    return f"{value_text} [{low_text}, {high_text}]"


def task_markdown(comparison: Comparison, table: pd.DataFrame) -> str:
    """Rows task × value (baseline first), per window: score [CI], Δ to the baseline [CI] and P(better)."""
    baseline = text(comparison.key, comparison.baseline)
    header = ["task", comparison.key, "seeds"]
    for window in comparison.windows:
        header += [f"{window} score [95% CI]", f"{window} Δ vs {baseline} [95% CI]", f"{window} P(better)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (cell, value), rows in table.groupby(["cell", comparison.key], sort=False):
        rows = rows.set_index("window")
        first = rows.iloc[0]
        name = text(comparison.key, value) + ("†" if first.status == "partial" else "")
        row = [cell, name, str(first.seeds)]
        for window in comparison.windows:
            cell_row = rows.loc[window]
            fewer = f" n={cell_row.paired_seeds}" if cell_row.paired_seeds < cell_row.seeds else ""
            row += [with_interval(cell_row.score, cell_row.score_low, cell_row.score_high),
                    "ref" if value == comparison.baseline else
                    with_interval(cell_row["diff"], cell_row.diff_low, cell_row.diff_high, difference=True) + fewer,
                    "–" if np.isnan(cell_row.p_better) else f"{cell_row.p_better:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def intro(comparison: Comparison) -> str:
    """What is compared and how it is scored: the opening of the per-task and the across-task files."""
    return (f"Every value of `{comparison.key}` against {text(comparison.key, comparison.baseline)}, on "
            f"{len(comparison.tasks)} task(s): the distinct values of the runs' other keys. Normalised score = 1 − "
            "error (in [0, 1] on every task; 1 = solved); final = each seed's score at the last logged step, mean = "
            "its mean over every logged step (`harness/report/compare.py`).\n")


def write(comparison: Comparison, out: Path) -> tuple[str, pd.DataFrame]:
    """Write compare_tasks.md|csv into ``out``; return the README's section on it (``build`` adds the across-task
    one, ``aggregates.write``) and the per-task table."""
    key, baseline = comparison.key, text(comparison.key, comparison.baseline)
    rules = (f"Score [95% percentile bootstrap over seeds]; Δ = value − {baseline} on the seed ids both have [95% "
             "bootstrap, the same resampled seeds for both]; P(better) = share of those seeds on which the value "
             "scores higher (ties ½); n=k: k paired seeds; † partial (fewer seeds or steps than the budget). "
             f"{comparison.resamples:,} resamples, generator seed {comparison.seed}.\n")
    frame = task_table(comparison)
    write_file(out / f"{TASKS}.csv", frame.to_csv(index=False))
    table = task_markdown(comparison, frame)
    write_file(out / f"{TASKS}.md", "\n".join([f"# Per task: {key}, against {baseline}\n", intro(comparison), rules,
                                              table, ""]))
    return "\n".join([f"## Comparison: {key}, against {baseline}\n", intro(comparison), "### Per task\n", rules, table,
                      "", f"Files: [{TASKS}.md]({TASKS}.md), [{TASKS}.csv]({TASKS}.csv)\n"]), frame
