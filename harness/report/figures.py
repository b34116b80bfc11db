"""Paper figures from runs: seed means with 95% bootstrap bands over seeds (the tables' intervals), one fixed colour,
line style and marker per algorithm everywhere (colour-blind safe), methods in the paper's order (TPO first), one
font, one legend beside the panels, only the panels that have data, y-axes that a single spike does not flatten, and
a caption file: a short human caption, then where every line came from (runs, configs, seeds, steps, hardware,
commit, date)."""

from __future__ import annotations

import dataclasses
import datetime
import io
import json
import textwrap
from collections.abc import Iterable
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D

from algorithms import ALGORITHMS
from harness.rundir.outputs import git_commit, package_version
from harness.report import paper, stats
from harness.report.specs import KEY_LABEL, Figure, Panel, Series, Stat, axis_labels, label
from harness.report.tables import Report, Resolved, fill_command, write_file

# One fixed colour, line style and marker per algorithm across every figure: its class's ``look``
ALGORITHM_STYLE = {name: algorithm.look[:2] for name, algorithm in ALGORITHMS.items()}
ALGORITHM_MARKER = {name: algorithm.look[2] for name, algorithm in ALGORITHMS.items()}
OTHER_STYLE = ("#666666", "-")  # an algorithm neither knows (a run's name no longer registered)
VALUE_MARKERS = ("o", "s", "^", "D", "v", "P", "X")  # lines that vary another key (K, η, a variant) by index
MARKS_PER_LINE = 8  # markers on a curve, offset from one line to the next so that they do not coincide
# Every figure's text in one font (a legend in a serif beside sans-serif axes looked like two figures pasted)
STYLE = {"font.family": "sans-serif", "font.sans-serif": ["DejaVu Sans"], "mathtext.fontset": "dejavusans"}
YLIM_QUANTILE, YLIM_HEADROOM = 0.99, 0.15  # linear y-axes: to this quantile of the seed-mean curves + headroom
YLIM_SUSTAINED = 0.01  # ... or beyond it, to where a curve stays for this share of its points
STRETCHED = 1.5  # ... where the bands or a spike made the axis this many times taller than that
TITLE_CHARS_PER_INCH = 12  # a figure title wraps at this many characters per inch of figure width (10 pt)
METRIC_STYLE = ("-", "--", ":")  # panels with several metrics (Fig 10b): line style marks the metric
LOG_FLOOR = 1e-7
MECHANISM_BINS = ("[0, .25)", "[.25, .5)", "[.5, .75)", "[.75, 1]")
MECHANISM_METRICS = tuple(f"mech_surplus_bin{b}" for b in range(len(MECHANISM_BINS)))
FINAL, AT_2000 = Stat("final"), Stat("at_step", step=2000, percent=False)
BAND_RESAMPLES = 1000  # per-step bands: the tables' percentile bootstrap and generator seed, fewer resamples
PARTIAL_NOTE = "† partial: fewer seeds or steps than the preset"
PAPER_LABEL = "Paper's value"


def _paper_point(published: paper.PaperValue | None) -> float:
    """Where to draw a published number: its midpoint, if it is a number rather than an inequality."""
    if published is None or not (np.isfinite(published.low) and np.isfinite(published.high)):
        return np.nan
    return (published.low + published.high) / 2


def smooth(values: np.ndarray, window: int, centred: bool = False) -> np.ndarray:
    """Moving average along the last axis (one curve, or one per seed), skipping non-finite values (NaN where no
    value in the window). Causal: left-padded with the first value (docs/reproduction.md §6.7); centred:
    edge-padded (docs/reproduction.md §6.9)."""
    values = np.asarray(values, dtype=float)
    if window <= 1 or values.shape[-1] == 0:
        return values
    left, right = (window // 2, window - 1 - window // 2) if centred else (window - 1, 0)
    pad = [(0, 0)] * (values.ndim - 1) + [(left, right)]
    padded = np.pad(values, pad, mode="edge")
    finite = np.isfinite(padded)
    zeros = np.zeros(values.shape[:-1] + (1,))
    total = np.cumsum(np.concatenate([zeros, np.where(finite, padded, 0.0)], axis=-1), axis=-1)
    count = np.cumsum(np.concatenate([zeros, finite.astype(float)], axis=-1), axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (total[..., window:] - total[..., :-window]) / (count[..., window:] - count[..., :-window])


def series_style(series: Series, index: int, count: int) -> tuple[str, str]:
    """Explicit style, else the algorithm's; a series that varies another key (K, epochs, η, a variant preset) gets
    a viridis colour and its algorithm's line style."""
    if series.style:
        return series.style
    algorithm = series.key.get("algorithm.name")
    if set(series.key) - {"algorithm.name"}:
        line = ALGORITHM_STYLE.get(algorithm, OTHER_STYLE)[1]
        return matplotlib.colors.to_hex(plt.get_cmap("viridis")(index / max(1, count - 1) * 0.85)), line
    return ALGORITHM_STYLE.get(algorithm, OTHER_STYLE)


def series_marker(series: Series, index: int) -> str:
    """The algorithm's marker; a series that varies another key gets one by its index, as its colour."""
    if set(series.key) - {"algorithm.name"} and not series.style:
        return VALUE_MARKERS[index % len(VALUE_MARKERS)]
    return ALGORITHM_MARKER.get(series.key.get("algorithm.name"), "o")


def plot_line(ax, x, y, colour: str, line: str, marker: str, index: int, label: str | None) -> None:
    """The ``index``-th main line of a panel: solid lines wider and underneath, dashed and dotted ones narrower and
    on top, among each the paper's first methods (TPO) on top, markers every few points (a line with one point is
    its marker), so that a line lying on another stays visible."""
    every = max(1, len(x) // MARKS_PER_LINE)
    solid = line == "-"
    ax.plot(x, y, line, color=colour, linewidth=1.6 if solid else 1.2, zorder=(2.0 if solid else 2.5) - index / 100,
            marker=marker, markersize=4, markevery=(index * every // 3 % every, every), label=label)


def robust_ylim(curves: Iterable[np.ndarray], bands: Iterable[np.ndarray] = (), quantile: float = YLIM_QUANTILE,
                headroom: float = YLIM_HEADROOM, sustained: float = YLIM_SUSTAINED) -> tuple[float, float]:
    """(bottom, top) that hold the bulk of ``curves`` (the plotted seed means): their ``quantile`` and
    1 − ``quantile``, or further where a curve or a band's edge (``bands``) stays there for a ``sustained`` share of
    its points (a learning curve's start, a wide band over few seeds), widened by ``headroom`` of that span, never
    beyond the values themselves; a spike does not set the axis (a 700 among values below 250 flattened every other
    line)."""
    curves = [np.asarray(c, dtype=float).ravel() for c in curves]
    bands = [np.asarray(b, dtype=float).ravel() for b in bands]
    values = np.concatenate(curves)
    values = values[np.isfinite(values)]
    low, high = np.quantile(values, [1 - quantile, quantile])
    for curve in [*curves, *bands]:
        window = max(3, int(sustained * len(curve)))
        if len(curve) >= window:
            runs = np.lib.stride_tricks.sliding_window_view(curve, window)
            whole = np.isfinite(runs).all(1)
            if whole.any():
                high = max(high, runs[whole].min(1).max())
                low = min(low, runs[whole].max(1).min())
    room = headroom * (high - low)
    edges = np.concatenate([values, *(band[np.isfinite(band)] for band in bands)])
    return max(edges.min(), low - room), min(edges.max(), high + room)


def wrapped_title(title: str, width_inches: float) -> str:
    """A figure title in lines that fit the figure's width (a long one on a two-panel figure was cut off)."""
    return textwrap.fill(title, int(TITLE_CHARS_PER_INCH * width_inches))


def _series_label(series: Series, panel: Panel) -> str:
    return series.label or label({k: v for k, v in series.key.items() if k not in panel.where})


def _keys(panel: Panel) -> list[dict]:
    """Every cell key a panel reads: each series, at each x of a final-vs-x panel."""
    xs = panel.xs if panel.kind == "final" else (None,)
    return [{**series.key, **({panel.x: x} if panel.x and x is not None else {})}
            for series in panel.series for x in xs]


def _whiskers(value: np.ndarray, low: np.ndarray, high: np.ndarray, log: bool) -> np.ndarray:
    """Error bars from an interval; on log axes a whisker at or below zero stops just above zero."""
    below, above = value - low, high - value
    if log:
        below = np.minimum(below, value * 0.99)
    return np.vstack([np.maximum(below, 0), np.maximum(above, 0)])


class Drawer:
    """Draws a Figure spec from a Report; remembers the runs behind each line for the caption."""

    def __init__(self, report: Report, default_smooth: int = 1, band_resamples: int = BAND_RESAMPLES):
        self.report, self.default_smooth = report, default_smooth
        self.band_resamples = min(band_resamples, report.resamples)
        self.used: list[tuple[str, str, Resolved]] = []
        self.records: list[dict] = []  # preset, command, status of every line, for the missing-runs list
        self.missing_panels: list[str] = []  # titles of the panels that have no runs (not drawn)
        self.empty_panels: list[tuple[str, str]] = []  # (title, what its runs do not log) of panels not drawn
        self.cut: list[str] = []  # what a robust y-axis cut off, per panel, for the caption
        self.shown: list[tuple[str, int, int, Resolved]] = []  # (preset, budget seeds, budget steps, runs) per line
        self.unrun: list[tuple[str, str]] = []  # (panel, line) of every line the figure declares without runs
        self.conflicts: dict[tuple[str, str], Resolved] = {}  # (line, flag) → its runs: not drawn, the runs overlap
        self.conflict_panels: set[str] = set()  # titles of the panels with such a line
        self.partial = False  # some drawn line is partial (†)
        self.paper_drawn = False  # some published value is drawn (a legend entry)
        self.units: list[str] = []  # the x unit of each drawn curves panel (episode, step)

    def _budget(self, panel: Panel, full: dict) -> tuple[int, int, str]:
        return self.report.budget(full.get("experiment", panel.preset), task=full.get("task.name"))

    def _resolve(self, panel: Panel, key: dict) -> tuple[dict, tuple[int, int, str], Resolved]:
        full = {**panel.where, **key}
        budget = self._budget(panel, full)
        return full, budget, self.report.resolve(panel.preset, full, budget)

    def record(self, panel: Panel, figure: str) -> bool:
        """Record the preset, status, command, place (``figure`` and the line), flags and runs of every line of the
        panel, and its conflicts; whether some line has runs."""
        found = False
        for key in _keys(panel):
            full, budget, resolved = self._resolve(panel, key)
            line = label({k: v for k, v in key.items() if k not in panel.where})
            self.records.append({"preset": full.get("experiment", panel.preset), "status": resolved.status,
                                 "command": fill_command(panel.preset, full, resolved, budget),
                                 "where": f"{figure} {line}", "flags": "; ".join(resolved.flags),
                                 "runs": " ".join(resolved.run_dirs)})
            if not resolved.usable and resolved.status != "conflict":
                self.unrun.append((panel.title or panel.preset, label(full)))
            if resolved.status == "conflict":
                self.conflicts[line, resolved.flags[0]] = resolved
                self.conflict_panels.add(panel.title or panel.preset)
            found |= resolved.usable
        return found

    def resolve(self, panel: Panel, key: dict) -> Resolved:
        """A line's runs, remembered for the caption (and whether the figure is shortened) when it has some."""
        full, budget, resolved = self._resolve(panel, key)
        if resolved.usable:
            self.used.append((panel.title, label({**panel.where, **key}), resolved))
            self.shown.append((full.get("experiment", panel.preset), budget[0], budget[1], resolved))
        return resolved

    def has_data(self, panel: Panel) -> bool:
        """Whether some line of the panel has a value to draw: a finite value of its metric (the mechanism's: at
        step 2,000, which a run shorter than that never logs)."""
        for key in _keys(panel):
            resolved = self._resolve(panel, key)[2]
            if not resolved.usable:
                continue
            for metric in MECHANISM_METRICS if panel.kind == "mechanism" else panel.metrics:
                matrix = self.report.matrix(resolved, metric)
                values = matrix.values[:, matrix.steps == AT_2000.step] if panel.kind == "mechanism" else \
                    matrix.values
                if np.isfinite(values).any():
                    return True
        return False

    def _steps(self, resolved: Resolved) -> int:
        """The steps a line's runs were asked for (the longest of its runs)."""
        runs = self.report.runs
        return int(np.nan_to_num(runs[runs.run_dir.isin(resolved.run_dirs)].steps.max()))

    def _task(self, resolved: Resolved) -> tuple[str | None, str | None]:
        """(task, reward) of a cell's runs, for the axis labels."""
        runs = self.report.runs
        rows = runs[runs.run.isin(list(resolved.owners))]
        if rows.empty:
            return None, None
        config = rows.iloc[0]["config"]
        return rows.iloc[0]["task"], config.get("task.reward")

    def _label(self, series: Series, panel: Panel, resolved: Resolved) -> str:
        partial = resolved.status == "partial"
        self.partial |= partial
        return _series_label(series, panel) + ("†" if partial else "")

    def curves(self, ax, panel: Panel) -> bool:
        drawn = False
        window = panel.smooth if panel.smooth is not None else self.default_smooth
        task = None
        means: dict[str, tuple[np.ndarray, ...]] = {}  # line → (steps, seed mean, band), for the y-axis
        lengths = []  # each line's runs' steps, for the x-axis of a panel with one evaluation
        for index, series in enumerate(panel.series):
            resolved = self.resolve(panel, series.key)
            if not resolved.usable:
                continue
            task = task or self._task(resolved)
            lengths.append(self._steps(resolved))
            colour, line = series_style(series, index, len(panel.series))
            marker = series_marker(series, index)
            for m_index, metric in enumerate(panel.metrics):
                matrix = self.report.matrix(resolved, metric)
                logged = np.isfinite(matrix.values).any(0)  # a metric logged every N steps (held-out accuracy)
                matrix = stats.SeedMatrix(matrix.seeds, matrix.steps[logged], matrix.values[:, logged])
                if matrix.values.size == 0:
                    continue
                values = smooth(matrix.values, window, panel.centred)  # each seed's curve; the mean is linear
                mean = stats._nanmean(values)
                low, high = stats.mean_interval(values, self.band_resamples, self.report.seed)
                style = METRIC_STYLE[m_index] if len(panel.metrics) > 1 else line
                plot_line(ax, matrix.steps, mean, colour, style, marker, index,
                          self._label(series, panel, resolved) if m_index == 0 else None)
                ax.fill_between(matrix.steps, low, high, color=colour, alpha=0.15, linewidth=0, zorder=1)
                means[_series_label(series, panel) + (f" ({metric})" if len(panel.metrics) > 1 else "")] = \
                    matrix.steps, mean, low, high
                drawn = True
        x, y = axis_labels(*(task or (None, None)))
        ax.set_xlabel(panel.xlabel or x)
        ax.set_ylabel(panel.ylabel or y)
        if drawn:
            self.units.append((panel.xlabel or x).lower())
            logged = np.unique(np.concatenate([steps for steps, *_ in means.values()]))
            if len(logged) == 1:  # one evaluation (a run shorter than the evaluation interval): the run's length
                right = max(max(lengths), logged[0] + 1)
                ax.set_xlim(min(0, logged[0]) - 0.03 * right, right)
                ax.margins(y=0.1)  # room for the markers of the highest and lowest points
            if not panel.logy and panel.ylim is None:
                self._robust_axis(ax, panel, means, (panel.xlabel or x).lower())
        return drawn

    def _robust_axis(self, ax, panel: Panel, means: dict[str, tuple[np.ndarray, ...]], unit: str) -> None:
        """Narrow a linear y-axis to the bulk of the panel's seed means and bands (``robust_ylim``) where spikes
        stretched it to more than ``STRETCHED`` times that, and say in the caption which lines it cuts and how far
        they go."""
        bottom, top = robust_ylim([mean for _, mean, _, _ in means.values()],
                                  [edge for _, _, *band in means.values() for edge in band])
        auto_bottom, auto_top = ax.get_ylim()
        margin = 0.05 * (top - bottom)
        bottom, top = max(auto_bottom, bottom - margin), min(auto_top, top + margin)
        if not top > bottom or auto_top - auto_bottom <= STRETCHED * (top - bottom):
            return
        ax.set_ylim(bottom, top)
        cut = []
        for name, (steps, mean, _, _) in means.items():
            finite = np.isfinite(mean)
            if (mean[finite] > top).any():
                at = int(np.nanargmax(mean))
                cut.append(f"{name} (up to {mean[at]:.3g} at {unit} {steps[at]:,})")
            if (mean[finite] < bottom).any():
                at = int(np.nanargmin(mean))
                cut.append(f"{name} (down to {mean[at]:.3g} at {unit} {steps[at]:,})")
        middle = 100 * (2 * YLIM_QUANTILE - 1)
        self.cut.append(f"{panel.title or panel.preset}: the y-axis spans the middle {middle:g}% of the seed-mean "
                        f"values (more where a line or its band stays beyond for {100 * YLIM_SUSTAINED:g}% of its "
                        f"points) plus {100 * YLIM_HEADROOM:g}% of that span on each side" +
                        (f"; cut off: {', '.join(cut)}" if cut else "; only brief spikes of the bands reach beyond it"))

    def seeds(self, ax, panel: Panel) -> bool:
        """Each seed's own curve of the panel's one series, thin, with the seed mean over them."""
        drawn = False
        for index, series in enumerate(panel.series):
            resolved = self.resolve(panel, series.key)
            if not resolved.usable:
                continue
            colour, _ = series_style(series, index, len(panel.series))
            matrix = self.report.matrix(resolved, panel.metrics[0])
            values = smooth(matrix.values, panel.smooth or 1, panel.centred)
            for row_index, row in enumerate(values):
                ax.plot(matrix.steps, row, "-", color=colour, linewidth=0.6, alpha=0.45, zorder=2,
                        label="one seed" if row_index == 0 else None)
            partial = "†" if resolved.status == "partial" else ""
            self.partial |= bool(partial)
            ax.plot(matrix.steps, stats._nanmean(values), "-", color="black", linewidth=1.4, zorder=3,
                    label=f"seed mean{partial}")  # the panel's title names the method
            drawn = True
        ax.set_xlabel(panel.xlabel or "Episode")
        ax.set_ylabel(panel.ylabel)
        if drawn:
            self.units.append((panel.xlabel or "episode").lower())
        return drawn

    def _final(self, resolved: Resolved, metric: str, stat: Stat) -> tuple[float, float, float]:
        """Point value and the tables' 95% bootstrap interval of one cell."""
        if not resolved.usable:
            return np.nan, np.nan, np.nan
        summary = stats.summarize(stat, self.report.matrix(resolved, metric), self.report.resamples,
                                  self.report.seed)
        return summary.value, summary.low, summary.high

    def finals(self, ax, panel: Panel) -> bool:
        """Final value per series (bars) or against ``panel.x`` (lines) with its 95% bootstrap interval, paper
        values as crosses."""
        drawn = False
        xs = panel.xs if panel.kind == "final" else (None,)
        task = None
        for index, series in enumerate(panel.series):
            colour, line = series_style(series, index, len(panel.series))
            points, partial = [], None
            for x in xs:
                key = {**series.key, **({panel.x: x} if panel.x else {})}
                resolved = self.resolve(panel, key)
                if resolved.usable:
                    task = task or self._task(resolved)
                    partial = resolved if partial is None or resolved.status == "partial" else partial
                published = (paper.lookup(panel.paper, "final", {"experiment": panel.preset, **panel.where, **key})
                             if panel.paper else None)
                points.append((index if x is None else x, *self._final(resolved, panel.metrics[0], FINAL),
                               _paper_point(published)))
            at, value, low, high, target = map(np.asarray, zip(*points))
            yerr = _whiskers(value, low, high, panel.logy)
            name = self._label(series, panel, partial) if partial is not None else _series_label(series, panel)
            if panel.kind == "bars":
                ax.bar(at, value, yerr=yerr, color=colour, capsize=3, label=name)
                ax.plot(at, target, "x", color="black", markersize=8, markeredgewidth=2)
            else:
                ax.errorbar(at, value, yerr=yerr, fmt=line, marker=series_marker(series, index), color=colour,
                            label=name, capsize=3)
                ax.plot(at, target, "x", color=colour, markersize=8, markeredgewidth=2)
            self.paper_drawn |= bool(np.isfinite(target).any())
            drawn |= bool(np.isfinite(value).any())
        if panel.kind == "bars":
            ax.set_xticks(range(len(panel.series)), [_series_label(s, panel) for s in panel.series], fontsize=7,
                          rotation=35, ha="right", rotation_mode="anchor")
        else:
            ax.set_xlabel(panel.xlabel or KEY_LABEL.get(panel.x, panel.x))
            ax.set_xticks(panel.xs, [str(x) for x in panel.xs])
        ax.set_ylabel(panel.ylabel or "Final " + axis_labels(*(task or (None, None)))[1].lower())
        return drawn

    def mechanism(self, ax, panel: Panel) -> bool:
        """Fig 4b: surplus gain per concentration bin at step 2,000, bars with the tables' 95% bootstrap interval."""
        width = 0.8 / len(panel.series)
        drawn = False
        for index, series in enumerate(panel.series):
            resolved = self.resolve(panel, series.key)
            if not resolved.usable:
                continue
            values, lows, highs, targets = [], [], [], []
            for b in range(len(MECHANISM_BINS)):
                published = paper.lookup(panel.paper, AT_2000.name, {"experiment": panel.preset, **series.key,
                                                                     "metric": MECHANISM_METRICS[b]})
                value, low, high = self._final(resolved, MECHANISM_METRICS[b], AT_2000)
                values.append(value)
                lows.append(low)
                highs.append(high)
                targets.append(_paper_point(published))
            at = np.arange(len(MECHANISM_BINS)) + (index - (len(panel.series) - 1) / 2) * width
            colour = series_style(series, index, len(panel.series))[0]
            values = np.asarray(values)
            ax.bar(at, values, width, yerr=_whiskers(values, np.asarray(lows), np.asarray(highs), False),
                   color=colour, capsize=2, label=self._label(series, panel, resolved))
            ax.plot(at, targets, "x", color="black", markersize=7, markeredgewidth=2, zorder=4)
            self.paper_drawn |= bool(np.isfinite(targets).any())
            drawn |= bool(np.isfinite(values).any())
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(MECHANISM_BINS)), MECHANISM_BINS, fontsize=7)
        ax.set_xlabel(panel.xlabel or "Wrong-class concentration")
        ax.set_ylabel(panel.ylabel or "Surplus")
        return drawn

    def draw(self, figure: Figure) -> plt.Figure | None:
        """The figure in ``STYLE`` with only the panels that have data (those without runs recorded in
        ``missing_panels`` and their lines' commands in ``records``, those whose runs log nothing to draw in
        ``empty_panels``), one legend below them; None when no panel has data."""
        with plt.rc_context(STYLE):
            return self._draw(figure)

    def _draw(self, figure: Figure) -> plt.Figure | None:
        with_runs = [panel for panel in figure.panels if self.record(panel, figure.name)]
        self.missing_panels = [panel.title or panel.preset for panel in figure.panels if panel not in with_runs]
        active = [panel for panel in with_runs if self.has_data(panel)]
        self.empty_panels = [(panel.title or panel.preset, _reads(panel)) for panel in with_runs
                             if panel not in active]
        if not active:
            return None
        count = len(active)
        ncols = min(figure.ncols or count, count)
        nrows = -(-count // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.0, 3.6 * ncols), 2.9 * nrows + 0.9), squeeze=False,
                                 layout="constrained")
        drawn = False
        kind = {"curves": self.curves, "seeds": self.seeds, "final": self.finals, "bars": self.finals,
                "mechanism": self.mechanism}
        for ax, panel in zip(axes.flat, active):
            drawn |= kind[panel.kind](ax, panel)
            ax.set_title(panel.title, fontsize=9)
            ax.grid(alpha=0.3)
            if panel.logy:
                ax.set_yscale("log")
                ax.set_ylim(bottom=max(LOG_FLOOR, ax.get_ylim()[0]))  # float noise around 0 is not information
            if panel.logx:
                ax.set_xscale("log", base=2)
                ax.set_xticks(panel.xs, [str(x) for x in panel.xs])
            if panel.ylim:
                ax.set_ylim(*panel.ylim)
        for ax in list(axes.flat)[count:]:
            ax.set_visible(False)
        if not drawn:
            plt.close(fig)
            return None
        self._legend(fig, axes.flat)
        fig.suptitle(wrapped_title(self.title(figure), fig.get_figwidth()), fontsize=10)
        return fig

    def title(self, figure: Figure) -> str:
        """The figure's title, or, where no drawn line has its preset's seeds and steps, what was run instead: a
        shortened run does not show what the paper's claim looks like."""
        if not self.shown or any(resolved.status != "partial" for *_, resolved in self.shown):
            return figure.title
        parts = {}
        for preset, seeds, steps, resolved in self.shown:
            ran_steps = self._steps(resolved)
            ran_seeds = sum(len(s) for s in resolved.owners.values())
            old = parts.get(preset, (0, 0, seeds, steps))
            parts[preset] = (max(old[0], ran_steps), max(old[1], ran_seeds), seeds, steps)
        return f"{figure.name}: " + "; ".join(
            f"{preset} (shortened: {ran_steps:,} of {steps:,} steps, {ran_seeds:,} of {seeds:,} seeds)"
            for preset, (ran_steps, ran_seeds, seeds, steps) in parts.items())

    def _legend(self, fig: plt.Figure, axes) -> None:
        """One legend for the whole figure, below the panels: each label once, in the panels' order (the paper's,
        TPO first), the paper's marker and the † of partial lines explained."""
        handles: dict[str, object] = {}
        for ax in axes:
            for handle, text in zip(*ax.get_legend_handles_labels()):
                handles.setdefault(text, handle)
        if self.paper_drawn:
            handles[PAPER_LABEL] = Line2D([], [], marker="x", linestyle="none", color="black", markersize=7,
                                          markeredgewidth=2)
        if not handles:
            return
        labels, artists = list(handles), list(handles.values())
        widths = [0.55 + 0.065 * len(text) for text in labels]  # inches at 8 pt, with the handle and the gap
        per_row = len(labels) if sum(widths) <= 0.95 * fig.get_figwidth() else \
            max(1, int(0.95 * fig.get_figwidth() / max(widths)))
        rows = -(-len(labels) // per_row)
        blank = rows * per_row - len(labels)  # a full grid, filled row by row (matplotlib fills columns)
        labels, artists = labels + [""] * blank, artists + [Line2D([], [], linestyle="none")] * blank
        order = [row * per_row + column for column in range(per_row) for row in range(rows)]
        fig.legend([artists[i] for i in order], [labels[i] for i in order], loc="outside lower center",
                   ncols=per_row, frameon=False, fontsize=8, handlelength=1.8, columnspacing=1.2,
                   title=PARTIAL_NOTE if self.partial else None, title_fontsize=8)


def _reads(panel: Panel) -> str:
    """What a panel draws, in words, for the caption's list of panels whose runs log none of it."""
    if panel.kind == "mechanism":
        return f"{MECHANISM_METRICS[0][:-1]}0–{len(MECHANISM_METRICS) - 1} at step {AT_2000.step:,}"
    return ", ".join(panel.metrics)


def _count_text(values: list[int], unit: str) -> str:
    values = sorted(set(values))
    if not values:
        return ""
    text = f"{values[0]:,}" if len(values) == 1 else f"{values[0]:,}–{values[-1]:,}"
    return f"{text} {unit if values == [1] else '/'.join(part + 's' for part in unit.split('/'))}"


def human_caption(figure: Figure, drawer: Drawer, runs: pd.DataFrame) -> list[str]:
    """Two lines: what is shown, over how many seeds and episodes (steps); then what the bands and bars are, the
    figure's own notes, the panels without runs and what † marks."""
    by_dir = runs.set_index("run_dir")
    seeds = [sum(len(s) for s in resolved.owners.values()) for _, _, resolved in drawer.used]
    steps = [int(s) for _, _, resolved in drawer.used for s in by_dir.loc[resolved.run_dirs].steps.dropna()]
    unit = "/".join(dict.fromkeys(drawer.units)) or "step"  # Fig 1: MNIST steps beside token episodes
    hidden = {*drawer.missing_panels, *(title for title, _ in drawer.empty_panels)}
    kinds = {panel.kind for panel in figure.panels if (panel.title or panel.preset) not in hidden}
    size = ", ".join(p for p in (_count_text(seeds, "seed"), _count_text(steps, unit)) if p)
    what = "; ".join(_what_is_shown(kinds, unit))
    first = f"**{drawer.title(figure)}.** {what[:1].upper() + what[1:]} ({size} per line)."
    band = _bands_and_bars(kinds, unit, drawer)
    second = "; ".join(band) + "." if band else ""
    if band:
        second = second[0].upper() + second[1:]
    if figure.caption:
        second = f"{second} {figure.caption}".strip()
    return [first, second + _caption_notes(drawer)]


def _what_is_shown(kinds: set[str], unit: str) -> list[str]:
    """What the drawn panels' kinds show, for the caption's first line."""
    shown = []
    if "curves" in kinds:
        shown.append(f"lines: seed mean per {unit}")
    if "seeds" in kinds:
        shown.append(f"lines: each seed's own curve and the seed mean, per {unit}")
    if kinds & {"final", "bars"}:
        shown.append(f"{'bars' if 'bars' in kinds else 'points'}: seed mean at the last {unit}")
    if "mechanism" in kinds:
        shown.append("bars: seed-mean surplus at step 2,000")
    return shown


def _bands_and_bars(kinds: set[str], unit: str, drawer: Drawer) -> list[str]:
    """What the shaded bands and the error bars of the drawn panels' kinds are."""
    band = []
    if "curves" in kinds:
        band.append(f"Shaded bands: 95% percentile bootstrap interval of the seed mean over seeds at each {unit} "
                    f"({drawer.band_resamples:,} resamples, generator seed {drawer.report.seed}), the tables' rule")
    if kinds & {"final", "bars", "mechanism"}:
        band.append(f"error bars: the tables' 95% percentile bootstrap interval over seeds "
                    f"({drawer.report.resamples:,} resamples)")
    return band


def _caption_notes(drawer: Drawer) -> str:
    """The caption's sentences on what the figure leaves out, and why (axis limits, panels and lines without runs or
    with runs in conflict), and on what † marks; each starts with a space."""
    text = ""
    if drawer.cut:
        text += f" Axis limits: {'; '.join(drawer.cut)}."
    if drawer.empty_panels:
        text += (" Not drawn, their runs log nothing to draw: "
                 + "; ".join(f"{title} (no {reads})" for title, reads in drawer.empty_panels) + ".")
    unrun = [title for title in drawer.missing_panels if title not in drawer.conflict_panels]
    if unrun:
        text += f" Not drawn, no runs yet: {'; '.join(unrun)} (commands in the README)."
    lines_unrun = [line for panel, line in drawer.unrun if panel not in drawer.missing_panels]
    if lines_unrun:
        text += (f" Lines without runs yet: {', '.join(dict.fromkeys(lines_unrun))} (the provenance lists each "
                 "as missing; commands in the README).")
    if drawer.conflicts:
        text += (" Not drawn, runs in conflict: "
                 + "; ".join(conflict_note(line, flag, resolved.run_dirs)
                             for (line, flag), resolved in drawer.conflicts.items()) + ".")
    if drawer.partial:
        text += " † marks a partial line: fewer seeds or steps than its preset asks for."
    return text


def conflict_note(where: str, flag: str, run_dirs: Iterable[str]) -> str:
    """A conflict in words: where, what overlaps and what to keep (``flag``), and the runs in question."""
    return f"{where}: {flag.removeprefix('conflict: ')} (runs: {', '.join(f'`{d}`' for d in run_dirs)})"


def caption(figure: Figure, used: list[tuple[str, str, Resolved]], runs: pd.DataFrame, command: str,
            drawer: Drawer | None = None) -> str:
    """Markdown caption: two human lines (``human_caption``), then the provenance: every line's runs, their configs,
    seeds, steps, hardware, CPU seconds (every process of a run) and wall seconds (its last process), and every
    declared line without runs (status missing), so that the caption says whether the figure is complete."""
    by_dir = runs.set_index("run_dir")
    lines = []
    if drawer is not None:
        lines += [*human_caption(figure, drawer, runs), ""]
    lines += ["## Provenance\n",
              f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by `{command}` at commit "
              f"{git_commit() or 'unknown'} (tpo-bench {package_version() or 'uninstalled'}).\n",
              "| panel | line | status | seeds | steps | runs | hardware | CPU s | wall s |",
              "|---|---|---|---|---|---|---|---|---|"]
    configs = {}
    for panel, line, resolved in used:
        rows = by_dir.loc[resolved.run_dirs]
        seeds = sum(len(s) for s in resolved.owners.values())
        steps = ", ".join(sorted({str(s) for s in rows.steps}))
        hardware = "; ".join(sorted({_hardware(h) for h in rows.hardware}))
        cpu, wall = (", ".join(f"{s:.1f}" for s in rows[column].dropna())
                     for column in ("cpu_seconds", "wall_seconds"))
        status = resolved.status + (f" ({'; '.join(resolved.flags)})" if resolved.flags else "")
        lines.append(f"| {panel} | {line} | {status} | {seeds} | {steps} | {'<br>'.join(resolved.run_dirs)} | "
                     f"{hardware} | {cpu} | {wall} |")
        for run_dir in resolved.run_dirs:
            configs[run_dir] = by_dir.loc[run_dir, "config"]
    for panel, line in drawer.unrun if drawer is not None else ():
        lines.append(f"| {panel} | {line} | missing | 0 |  |  |  |  |  |")
    lines += ["", "Resolved configs:", "", "```json", json.dumps(configs, indent=1, default=str, sort_keys=True),
              "```", ""]
    return "\n".join(lines)


def _hardware(text) -> str:
    """The device, its threads and the CPU a run ran on (not the machine's host name)."""
    if not isinstance(text, str):
        return "unknown"
    info = json.loads(text)
    threads = info.get("threads")
    cpu = f", {info['cpu']}" if info.get("cpu") else ""
    return f"{info.get('device')} ×{threads} thread{'' if threads == 1 else 's'}{cpu}"


def write_figure(figure: Figure, report: Report, out: Path, default_smooth: int = 1,
                 how: str = "") -> tuple[Figure | None, list[dict]]:
    """<name>.png, <name>.pdf and <name>.caption.md (nothing when no panel has data); the figure as drawn (its
    title a shortened run's, ``Drawer.title``), None when nothing was; also every line's (preset, status, command)
    record."""
    drawer = Drawer(report, default_smooth)
    with plt.rc_context(STYLE):  # tick labels are made while saving
        fig = drawer.draw(figure)
        if fig is None:
            return None, drawer.records
        png, pdf = io.BytesIO(), io.BytesIO()  # in memory: on a full disk matplotlib buries the OSError in its own
        fig.savefig(png, format="png", dpi=150)
        fig.savefig(pdf, format="pdf", metadata={"CreationDate": None})  # same figure, same bytes
    plt.close(fig)
    write_file(out / f"{figure.name}.png", png.getvalue())
    write_file(out / f"{figure.name}.pdf", pdf.getvalue())
    write_file(out / f"{figure.name}.caption.md", caption(figure, drawer.used, report.runs, how, drawer))
    return dataclasses.replace(figure, title=drawer.title(figure)), drawer.records
