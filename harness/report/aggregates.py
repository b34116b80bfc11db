"""Across tasks with rliable (Agarwal et al. 2021), for ``compare``: IQM, optimality gap and probability of
improvement with stratified bootstrap intervals, performance profiles and the IQM against the step, from the
tasks' normalised scores (``compare``'s docstring defines tasks, scores and windows). Imported only where a
comparison is made: rliable brings arch and seaborn, a second of start-up for every report otherwise.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from absl import logging as absl_logging
from rliable import library as rly
from rliable import metrics, plot_utils
from tabulate import tabulate

from harness.report import stats
from harness.report.compare import CONFIG_KEY, WINDOWS, Comparison, task_text, text, with_interval
from harness.report.figures import BAND_RESAMPLES, caption, series_style, wrapped_title
from harness.report.load import warn
from harness.report.specs import Figure, Series, axis_labels
from harness.report.tables import Report, write_file

# rliable imports absl.logging, whose handler holds the sys.stderr of that moment and closes it when the logging
# handlers are shut down (logging.config.dictConfig does: Hydra's composition) unless it is the process's own; under a
# notebook's or pytest's captured stderr, that closes the capture. Point it at the process's own stderr.
absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__

TAUS = np.linspace(0.0, 1.0, 101)  # performance-profile thresholds over the score's whole range
CURVE_POINTS = 50  # steps of the sample-efficiency curve: its bootstrap costs resamples × points IQMs per value
AGGREGATES, PROFILES, SAMPLE_EFFICIENCY = "compare_aggregates", "compare_profiles", "compare_sample_efficiency"


@contextlib.contextmanager
def global_seed(seed: int):
    """numpy's global generator seeded with ``seed`` for the block, then put back as it was. rliable 1.2 draws its
    bootstrap indices there (``np.random.choice`` in ``StratifiedBootstrap.update_indices``) whatever
    ``random_state`` it is given (one ``RandomState(0)`` passed twice gives two intervals), and its performance
    profiles take no generator at all."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def iqm_and_gap(scores: np.ndarray) -> np.ndarray:
    return np.array([metrics.aggregate_iqm(scores), metrics.aggregate_optimality_gap(scores)])


def iqm_per_step(scores: np.ndarray) -> np.ndarray:
    """The IQM at each step of (runs × tasks × steps) scores."""
    return np.array([metrics.aggregate_iqm(scores[..., step]) for step in range(scores.shape[-1])])


def estimate(data: np.ndarray | tuple[np.ndarray, ...], func: Callable, resamples: int,
             seed: int) -> tuple[np.ndarray, np.ndarray]:
    """rliable's point estimate of ``func`` on ``data`` (one score matrix, or a tuple resampled independently) and
    its 95% stratified percentile-bootstrap interval (2 × …), from the generator seeded ``seed``."""
    with global_seed(seed):
        points, intervals = rly.get_interval_estimates({"": data}, func, reps=resamples)
    return np.atleast_1d(points[""]), np.asarray(intervals[""]).reshape(2, -1)


def balanced(per_task: list[np.ndarray]) -> np.ndarray:
    """(runs × tasks …) from each task's rows (seeds): the first n of each, n the fewest any task has."""
    runs = min(len(rows) for rows in per_task)
    return np.stack([rows[:runs] for rows in per_task], axis=1)


MIN_VERDICT_SEEDS = 2  # one paired seed gives a zero-width interval: no verdict from it


def stratified_mean(columns: list[np.ndarray], resamples: int, seed: int) -> tuple[float, float, float]:
    """The mean over tasks of each task's mean (``columns``: each task's values, any count) and its 95% percentile
    bootstrap interval, each task's values resampled within the task, every value kept: a task with fewer seeds
    counts as much as one with more, and none is cut to the fewest."""
    rng = np.random.default_rng(seed)
    draws = np.zeros(resamples)
    for values in columns:
        draws += values[rng.integers(0, len(values), (resamples, len(values)))].mean(1)
    low, high = np.percentile(draws / len(columns), [2.5, 97.5])
    return float(np.mean([values.mean() for values in columns])), float(low), float(high)


def family_deltas(comparison: Comparison, families: dict[str, list[int]], window: str,
                  candidate_first: bool = False) -> pd.DataFrame:
    """Per family (name → its task indices) and non-baseline value: the mean over the family's tasks of the mean
    paired Δ of ``window``'s score, value − baseline (baseline − value with ``candidate_first``: the scorecard's
    candidate is its comparison's baseline), with a stratified bootstrap interval (``stratified_mean``: paired seeds
    resampled within each task) and a verdict: ahead (interval above 0), behind (below), level (across 0). Only
    tasks with at least ``MIN_VERDICT_SEEDS`` paired seeds count (one seed gives no spread); without any the verdict
    is undecided. ``seeds``: the fewest paired seeds of a counted task."""
    stat, baseline = WINDOWS[window], comparison.baseline
    rows = []
    for family, indices in families.items():
        for value in comparison.values[1:]:
            columns = []
            for index in indices:
                if (index, value) not in comparison.scores:
                    continue
                theirs, ours = (comparison.scores[index, value], comparison.scores[index, baseline])
                first, second = (ours, theirs) if candidate_first else (theirs, ours)
                delta = (pd.Series(stats.per_seed(stat, first), first.seeds)
                         - pd.Series(stats.per_seed(stat, second), second.seeds)).dropna()
                columns.append(delta.to_numpy())
            if not columns:
                continue
            counted = [column for column in columns if len(column) >= MIN_VERDICT_SEEDS]
            if not counted:
                rows.append({"family": family, "value": value, "cells": 0, "seeds": max(map(len, columns)),
                             "diff": np.nan, "diff_low": np.nan, "diff_high": np.nan, "verdict": "undecided"})
                continue
            point, low, high = stratified_mean(counted, comparison.resamples, comparison.seed)
            rows.append({"family": family, "value": value, "cells": len(counted), "seeds": min(map(len, counted)),
                         "diff": point, "diff_low": low, "diff_high": high,
                         "verdict": "ahead" if low > 0 else "behind" if high < 0 else "level"})
    return pd.DataFrame(rows, columns=["family", "value", "cells", "seeds", "diff", "diff_low", "diff_high",
                                       "verdict"])


@dataclass
class Selection:
    """What an aggregate covers: the tasks where the baseline has a score, the values with one in each of them
    (the baseline first) and their (runs × tasks …) scores (``balanced``), and the values left out, in words."""

    tasks: list[int]
    scores: dict[object, np.ndarray]
    left_out: list[str]


def select(comparison: Comparison, rows: dict[tuple[int, object], np.ndarray], what: str) -> Selection:
    """``rows``: each cell's scored seeds (task index, value) → (seeds …). A value without rows in some task is left
    out (rliable's aggregates compare values over the same tasks), and so is every value when fewer than two
    remain; a warning line says which, and one per value whose tasks hold more seeds than ``balanced`` keeps."""
    key, baseline = comparison.key, comparison.baseline
    tasks = [index for index in range(len(comparison.tasks)) if len(rows.get((index, baseline), ()))]
    if not tasks:  # every baseline seed diverged, or none was run: nothing to compare against
        warn(f"--compare {key}: {what}: the baseline {text(key, baseline)} has no score in any task; no aggregates")
        return Selection([], {}, [text(key, value) for value in comparison.values])
    values, left_out = [], []
    for value in comparison.values:
        missing = sum(not len(rows.get((index, value), ())) for index in tasks)
        if missing:
            left_out.append(f"{text(key, value)} (no score in {missing} of {len(tasks)} task(s))")
        else:
            values.append(value)
    if left_out:
        warn(f"--compare {key}: {what}: left out of the aggregates: {'; '.join(left_out)}")
    if len(values) < 2:
        return Selection(tasks, {}, left_out)
    counts = {value: [len(rows[index, value]) for index in tasks] for value in values}
    fewer = [f"{text(key, value)} {min(n)} ({sum(n) - min(n) * len(n)} seed(s) left out)"
             for value, n in counts.items() if max(n) > min(n)]
    if fewer:
        warn(f"--compare {key}: {what}: runs per task, the fewest of any task: {'; '.join(fewer)}")
    return Selection(tasks, {value: balanced([rows[index, value] for index in tasks]) for value in values}, left_out)


def window_scores(comparison: Comparison, window: str) -> Selection:
    """Each value's scores in ``window``: per task its seeds in id order with a finite score (``select``)."""
    stat = WINDOWS[window]
    finite = {}
    for cell, matrix in comparison.scores.items():
        column = stats.per_seed(stat, matrix)
        finite[cell] = column[np.isfinite(column)]
    return select(comparison, finite, window)


def curve_scores(comparison: Comparison) -> tuple[np.ndarray, Selection]:
    """The steps at which every cell of the values with runs in every task logged its error (at most
    ``CURVE_POINTS``, evenly spread, the last included) and the values' (runs × tasks × steps) scores there, seeds
    scored at every one of those steps (``select``)."""
    tasks = range(len(comparison.tasks))
    values = [value for value in comparison.values if all((index, value) in comparison.scores for index in tasks)]
    logged = [matrix.steps[np.isfinite(matrix.values).any(0)]
              for matrix in (comparison.scores[index, value] for index in tasks for value in values)]
    common = logged[0]
    for steps in logged[1:]:
        common = np.intersect1d(common, steps)
    if len(values) < 2 or len(common) < 2:
        return common, Selection(list(tasks), {}, [])
    steps = common[np.unique(np.linspace(0, len(common) - 1, min(CURVE_POINTS, len(common))).round().astype(int))]
    rows = {}
    for index in tasks:
        for value in values:
            matrix = comparison.scores[index, value]
            at = matrix.values[:, np.searchsorted(matrix.steps, steps)]
            rows[index, value] = at[np.isfinite(at).all(1)]
    return steps, select(comparison, rows, "IQM against the step")


def aggregate(comparison: Comparison) -> tuple[pd.DataFrame, dict[str, tuple[Selection, dict, dict]]]:
    """Per window and value: IQM, optimality gap and (but for the baseline) the probability of improvement over the
    baseline, each with its interval (one row each); and per window what it covers and the values' performance
    profiles with their intervals (by label)."""
    rows, windows = [], {}
    key, baseline = comparison.key, comparison.baseline
    for window in comparison.windows:
        selection = window_scores(comparison, window)
        profiles, bands = {}, {}
        for value, matrix in selection.scores.items():
            shared = {"window": window, key: value, "tasks": len(selection.tasks), "runs_per_task": len(matrix)}
            point, interval = estimate(matrix, iqm_and_gap, comparison.resamples, comparison.seed)
            rows += [{**shared, "statistic": statistic, "over": "", "estimate": point[j], "low": interval[0, j],
                      "high": interval[1, j]} for j, statistic in enumerate(("iqm", "optimality_gap"))]
            if value != baseline:
                point, interval = estimate((matrix, selection.scores[baseline]), metrics.probability_of_improvement,
                                           comparison.resamples, comparison.seed)
                rows.append({**shared, "statistic": "probability_of_improvement", "over": baseline,
                             "estimate": point[0], "low": interval[0, 0], "high": interval[1, 0]})
            with global_seed(comparison.seed):
                profile, band = rly.create_performance_profile({text(key, value): matrix}, TAUS,
                                                               reps=comparison.resamples)
            profiles.update(profile)
            bands.update(band)
        windows[window] = (selection, profiles, bands)
    columns = ["window", key, "tasks", "runs_per_task", "statistic", "over", "estimate", "low", "high"]
    return pd.DataFrame(rows, columns=columns), windows


def aggregate_markdown(comparison: Comparison, frame: pd.DataFrame, selections: dict[str, Selection]) -> str:
    """Per window: the tasks it covers, then one row per value: runs per task, IQM, optimality gap, P(improvement);
    the values left out."""
    key, baseline = comparison.key, text(comparison.key, comparison.baseline)
    header = [key, "runs per task", "IQM [95% CI]", "optimality gap [95% CI]", f"P(> {baseline}) [95% CI]"]
    parts = []
    for window, selection in selections.items():
        left_out = f"Left out: {'; '.join(selection.left_out)}." if selection.left_out else ""
        if not selection.scores:
            parts.append(f"**{window}**: fewer than 2 values have a score in every task: no aggregates. {left_out}")
            continue
        lines = [f"**{window}**, {len(selection.tasks)} task(s): "
                 + "; ".join(task_text(comparison.tasks[index]) for index in selection.tasks) + "\n",
                 "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        rows = frame[frame.window == window]
        for value, part in rows.groupby(key, sort=False):
            by_name = part.set_index("statistic")
            cells = [text(key, value), str(part.runs_per_task.iloc[0])]
            for statistic in ("iqm", "optimality_gap", "probability_of_improvement"):
                found = by_name.loc[statistic] if statistic in by_name.index else None
                cells.append("ref" if found is None else with_interval(found.estimate, found.low, found.high))
            lines.append("| " + " | ".join(cells) + " |")
        parts.append("\n".join(lines + ([f"\n{left_out}"] if left_out else [])))
    return "\n\n".join(parts)


# ---- figures -----------------------------------------------------------------------------------------------------

def colours(comparison: Comparison) -> dict[str, str]:
    """The report's colours: an algorithm's own; other values along viridis (``figures.series_style``)."""
    name = CONFIG_KEY.get(comparison.key, comparison.key)
    count = len(comparison.values)
    return {text(comparison.key, value): series_style(Series({name: value}), index, count)[0]
            for index, value in enumerate(comparison.values)}


def _legend(fig: plt.Figure, axes) -> None:
    """One legend below the panels, each label once."""
    handles: dict[str, object] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncols=min(len(handles), 6),
               frameon=False, fontsize=8)


def profile_figure(comparison: Comparison, profiles: dict[str, tuple[dict, dict]], title: str) -> plt.Figure:
    """One panel per window: rliable's performance profile of each value, with its 95% band."""
    fig, axes = plt.subplots(1, len(profiles), figsize=(max(6.0, 3.6 * len(profiles)), 3.6), squeeze=False,
                             layout="constrained")
    for ax, (window, (points, bands)) in zip(axes.flat, profiles.items()):
        plot_utils.plot_performance_profiles(points, TAUS, performance_profile_cis=bands, colors=colours(comparison),
                                             ax=ax, xlabel=f"{window} score τ",
                                             ylabel="Fraction of runs with score > τ", labelsize="medium",
                                             ticklabelsize="small", linewidth=1.4)
    _legend(fig, axes.flat)
    fig.suptitle(wrapped_title(title, fig.get_figwidth()), fontsize=10)
    return fig


def sample_efficiency_figure(comparison: Comparison, steps: np.ndarray, points: dict, intervals: dict, unit: str,
                             title: str) -> plt.Figure:
    """rliable's sample-efficiency plot: each value's IQM at ``steps`` with its 95% band."""
    fig, ax = plt.subplots(figsize=(6.0, 3.6), layout="constrained")
    plot_utils.plot_sample_efficiency_curve(steps, points, intervals, colors=colours(comparison), ax=ax,
                                            xlabel=unit, ylabel="IQM normalised score", labelsize="medium",
                                            ticklabelsize="small", marker="", linewidth=1.4)
    _legend(fig, [ax])
    fig.suptitle(wrapped_title(title, fig.get_figwidth()), fontsize=10)
    return fig


def save_figure(fig: plt.Figure, out: Path, name: str, text_caption: str) -> None:
    """<name>.png, .pdf and .caption.md, as ``figures.write_figure`` writes them."""
    png, pdf = io.BytesIO(), io.BytesIO()
    fig.savefig(png, format="png", dpi=150)
    fig.savefig(pdf, format="pdf", metadata={"CreationDate": None})
    plt.close(fig)
    write_file(out / f"{name}.png", png.getvalue())
    write_file(out / f"{name}.pdf", pdf.getvalue())
    write_file(out / f"{name}.caption.md", text_caption)


def _caption(comparison: Comparison, report: Report, name: str, title: str, lines: list[str],
             selections: list[Selection], command: str) -> str:
    """Two human lines, then ``figures.caption``'s provenance: the runs, configs, seeds and hardware of every cell
    drawn."""
    cells = {(index, value) for selection in selections for index in selection.tasks for value in selection.scores}
    used = [(task_text(comparison.tasks[index]), text(comparison.key, value), comparison.cells[index, value])
            for index in range(len(comparison.tasks)) for value in comparison.values if (index, value) in cells]
    return "\n".join([*lines, ""]) + "\n" + caption(Figure(name, title, ()), used, report.runs, command)


def write(comparison: Comparison, report: Report, out: Path, command: str,
          intro: str) -> tuple[list[str], pd.DataFrame]:
    """Write compare_aggregates.md|csv and the two figures (png, pdf, caption) into ``out``; return the README's
    lines for them and the aggregates. ``intro``: the comparison's definitions, which the markdown file repeats."""
    key, baseline = comparison.key, text(comparison.key, comparison.baseline)
    resampling = f"{comparison.resamples:,} resamples, generator seed {comparison.seed}"
    rules = ("rliable (Agarwal et al. 2021): interquartile mean and optimality gap (γ = 1) of the runs × tasks "
             f"scores; probability of improvement over {baseline} (per task P(X > Y) over unpaired runs, averaged "
             f"over tasks); 95% stratified bootstrap intervals (runs resampled within each task; {resampling}, set "
             "for each value). Tasks: those with the baseline's runs; a value without a score in one of them is "
             "left out. Each value keeps per task its first n seeds with a finite score, n the fewest any task "
             "has.\n")
    frame, windows = aggregate(comparison)
    write_file(out / f"{AGGREGATES}.csv", frame.to_csv(index=False))
    table = aggregate_markdown(comparison, frame, {window: selection for window, (selection, _, _) in windows.items()})
    write_file(out / f"{AGGREGATES}.md", "\n".join([f"# Across tasks: {key}, against {baseline}\n", intro, rules,
                                                     table, ""]))
    lines = ["### Across tasks\n", rules, table, "",
             f"Files: [{AGGREGATES}.md]({AGGREGATES}.md), [{AGGREGATES}.csv]({AGGREGATES}.csv)\n"]
    drawn = {window: entry for window, entry in windows.items() if entry[0].scores}
    if drawn:
        title = "Performance profiles: normalised score 1 − error"
        save_figure(profile_figure(comparison, {window: (profiles, bands) for window, (_, profiles, bands)
                                                in drawn.items()}, title), out, PROFILES, _caption(
            comparison, report, PROFILES, title,
            [f"**{title}.** Per window, the fraction of runs (seeds × tasks) whose score exceeds τ, each value with "
             f"its 95% stratified bootstrap band (rliable's `create_performance_profile`, {resampling}).",
             "Tasks, values and runs as in the aggregates table."], [entry[0] for entry in drawn.values()], command))
        lines += [f"### {title}\n", f"![{PROFILES}]({PROFILES}.png)\n",
                  f"Caption and provenance: [{PROFILES}.caption.md]({PROFILES}.caption.md)\n"]
    steps, selection = curve_scores(comparison)
    if selection.scores:
        unit = "/".join(dict.fromkeys(axis_labels(comparison.tasks[index].get("task"))[0]
                                      for index in selection.tasks))
        resamples = min(comparison.resamples, BAND_RESAMPLES)
        points, intervals = {}, {}
        for value, scores in selection.scores.items():
            points[text(key, value)], intervals[text(key, value)] = estimate(scores, iqm_per_step, resamples,
                                                                             comparison.seed)
        title = f"IQM of the normalised score 1 − error against the {unit.lower()}"
        save_figure(sample_efficiency_figure(comparison, steps, points, intervals, unit, title), out,
                    SAMPLE_EFFICIENCY, _caption(
                        comparison, report, SAMPLE_EFFICIENCY, title,
                        [f"**{title}.** At {len(steps)} {unit.lower()}s that every task logged (up to the shortest "
                         f"task's last), the IQM over runs and {len(selection.tasks)} task(s), with its 95% "
                         f"stratified bootstrap band (rliable, {resamples:,} resamples, generator seed "
                         f"{comparison.seed}, set for each value).",
                         "Runs per task: each value's first n seeds scored at every one of those steps, n the "
                         "fewest any task has; values without runs in every task are left out."], [selection],
                        command))
        lines += [f"### {title}\n", f"![{SAMPLE_EFFICIENCY}]({SAMPLE_EFFICIENCY}.png)\n",
                  f"Caption and provenance: [{SAMPLE_EFFICIENCY}.caption.md]({SAMPLE_EFFICIENCY}.caption.md)\n"]
    else:
        lines.append("No IQM against the step: fewer than 2 values have runs in every task, or the tasks share fewer "
                     "than 2 logged steps (their budgets or logging intervals differ).\n")
    return lines, frame


# ---- the terminal's verdict ---------------------------------------------------------------------------------------

SAME_ATOL = 1e-3  # scores this close at every seed and step: one update, its float32 rounding drifting apart
SAME_STEPS = 3  # fewer logged steps (the first is before any update) cannot tell two updates apart
FEW_SEEDS = 5  # below this many seeds a cell's interval is too wide, or too unstable, to read a verdict from


def families(comparison: Comparison) -> dict[str, list[int]]:
    """The tasks grouped by experiment and task (a sweep's points, e.g. each V, are one family), whichever of the
    two is not the compared key."""
    grouped: dict[str, list[int]] = {}
    for index, task in enumerate(comparison.tasks):
        named = {key: task[key] for key in ("experiment", "task") if key in task and key != comparison.key}
        grouped.setdefault(task_text(named) or task_text(task), []).append(index)
    return grouped


def verdict_lines(comparison: Comparison, frame: pd.DataFrame) -> list[str]:
    """One line per family: the values ahead of the baseline, level with it, behind it, undecided (their Δ is in
    the per-task table)."""
    key, baseline = comparison.key, text(comparison.key, comparison.baseline)
    words = {"ahead": f"ahead of {baseline}", "level": f"level with {baseline}", "behind": f"behind {baseline}",
             "undecided": "undecided (no task with 2 paired seeds)"}
    lines = []
    for family, rows in frame.groupby("family", sort=False):
        parts = [f"{phrase}: {', '.join(text(key, value) for value in rows.value[rows.verdict == verdict])}"
                 for verdict, phrase in words.items() if (rows.verdict == verdict).any()]
        lines.append(f"{family}: {'; '.join(parts)}")
    return lines


def few_seeds_warning(comparison: Comparison) -> str | None:
    """One line naming the cells with fewer than ``FEW_SEEDS`` seeds, or None."""
    few = {(index, value): len(matrix.seeds) for (index, value), matrix in comparison.scores.items()
           if len(matrix.seeds) < FEW_SEEDS}
    if not few:
        return None
    if len(few) == len(comparison.scores):
        which = f"every cell has fewer than {FEW_SEEDS} seeds (the fewest: {min(few.values())})"
    else:
        shown = "; ".join(f"{text(comparison.key, value)} on {task_text(comparison.tasks[index])}: {n}"
                          for (index, value), n in list(few.items())[:3])
        which = (f"{len(few)} of {len(comparison.scores)} cells have fewer than {FEW_SEEDS} seeds ({shown}"
                 f"{f' and {len(few) - 3} more' if len(few) > 3 else ''})")
    return f"warning: {which}: their intervals and verdicts say little; rerun with more seeds (seeds=20)"


def _plain(frame: pd.DataFrame) -> str:
    """A table for the terminal: columns left-aligned, cells as given."""
    return tabulate(frame, headers="keys", tablefmt="plain", showindex=False, disable_numparse=True)


def terminal_summary(comparison: Comparison, tasks: pd.DataFrame, aggregates: pd.DataFrame) -> str:
    """What ``--compare`` prints: per task each value's score and paired Δ to the baseline with P(better); across
    tasks rliable's IQM and P(improvement); one verdict line per family (``family_deltas``); the small-n warning.
    Every interval is a 95% bootstrap interval; the first window decides the verdicts."""
    key, baseline = comparison.key, text(comparison.key, comparison.baseline)
    window = comparison.windows[0]
    rows = tasks[tasks.window == window]
    per_task = pd.DataFrame({
        "task": rows.cell, key: [text(key, value) + ("†" if status == "partial" else "")
                                 for value, status in zip(rows[key], rows.status)],
        "seeds": rows.seeds,
        "score": [with_interval(*numbers) for numbers in zip(rows.score, rows.score_low, rows.score_high)],
        f"Δ vs {baseline}": ["ref" if value == comparison.baseline else with_interval(*numbers, difference=True)
                             for value, *numbers in zip(rows[key], rows["diff"], rows.diff_low, rows.diff_high)],
        "P(better)": ["–" if np.isnan(p) else f"{p:.2f}" for p in rows.p_better]})
    lines = [f"{key} against {baseline}: score = 1 − error, {window} window, [95% bootstrap interval]; "
             "† partial cell", "", _plain(per_task)]
    across = aggregates[aggregates.window == window]
    if not across.empty:
        shown = []
        for value, part in across.groupby(key, sort=False):
            by_name = part.set_index("statistic")
            improvement = by_name.loc["probability_of_improvement"] if "probability_of_improvement" in by_name.index \
                else None
            shown.append({key: text(key, value), "IQM": with_interval(*by_name.loc["iqm", ["estimate", "low", "high"]]),
                          f"P(> {baseline})": "ref" if improvement is None else
                          with_interval(improvement.estimate, improvement.low, improvement.high)})
        lines += ["", f"Across {int(across.tasks.iloc[0])} task(s) (rliable, stratified bootstrap):",
                  _plain(pd.DataFrame(shown))]
    verdicts = family_deltas(comparison, families(comparison), window)
    lines += ["", f"Verdict ({window} score; mean paired Δ over each family's tasks, ahead or behind when its "
                  "95% interval is clear of 0):", *verdict_lines(comparison, verdicts)]
    notes = [note for note in (identical_note(comparison), few_seeds_warning(comparison)) if note]
    return "\n".join([*lines, *notes])


def identical_note(comparison: Comparison) -> str | None:
    """One line naming the values whose scores equal another's seed by seed at every step (within ``SAME_ATOL``) in
    every task they share: a task can make two algorithms one update (docs/algorithms.md, "When two algorithms give
    the same numbers"). Only cells with the same seeds and steps, every score finite, and at least ``SAME_STEPS``
    steps are compared: a diverged seed or a run of one or two logged steps says nothing of the update."""
    def comparable(first: stats.SeedMatrix, second: stats.SeedMatrix) -> bool:
        return (np.array_equal(first.seeds, second.seeds) and np.array_equal(first.steps, second.steps)
                and len(first.steps) >= SAME_STEPS and np.isfinite(first.values).all()
                and np.isfinite(second.values).all())

    same: dict[object, list] = {}
    for value in comparison.values:
        shared = [index for index in range(len(comparison.tasks)) if (index, value) in comparison.scores]
        for first in same if shared else ():
            if all((index, first) in comparison.scores
                   and comparable(comparison.scores[index, first], comparison.scores[index, value])
                   and np.allclose(comparison.scores[index, first].values, comparison.scores[index, value].values,
                                   rtol=0.0, atol=SAME_ATOL) for index in shared):
                same[first].append(value)
                break
        else:
            same[value] = [value]
    groups = [" = ".join(text(comparison.key, value) for value in members)
              for members in same.values() if len(members) > 1]
    if not groups:
        return None
    return (f"note: equal seed by seed (within {SAME_ATOL:g} of the score at every step): {'; '.join(groups)} "
            "(the task makes them one update: docs/algorithms.md, \"When two algorithms give the same numbers\")")
