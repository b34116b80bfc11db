"""Paper figures from runs: seed mean ± s.e. bands, one fixed colour and line style per algorithm everywhere, and a
caption file recording where every line came from (runs, configs, seeds, steps, hardware, commit, date)."""

from __future__ import annotations

import datetime
import json
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from algorithms import ALGORITHMS
from harness.outputs import git_commit
from harness.report import paper, stats
from harness.report.specs import KEY_LABEL, Figure, Panel, Series, Stat, label
from harness.report.tables import Report, Resolved, fill_command

# One fixed colour and line style per algorithm across every figure, from the registry.
ALGORITHM_STYLE = {name: algorithm.style for name, algorithm in ALGORITHMS.items()}
TITLE_CHARS_PER_INCH = 12  # a figure title wraps at this many characters per inch of figure width (10 pt)
METRIC_STYLE = ("-", "--", ":")  # panels with several metrics (Fig 10b): line style marks the metric
LOG_FLOOR = 1e-7
MECHANISM_BINS = ("[0, .25)", "[.25, .5)", "[.5, .75)", "[.75, 1]")
MECHANISM_METRICS = tuple(f"mech_surplus_bin{b}" for b in range(len(MECHANISM_BINS)))
FINAL, AT_2000 = Stat("final"), Stat("at_step", step=2000, percent=False)


def _paper_point(published: paper.PaperValue | None) -> float:
    """Where to draw a published number: its midpoint, if it is a number rather than an inequality."""
    if published is None or not (np.isfinite(published.low) and np.isfinite(published.high)):
        return np.nan
    return (published.low + published.high) / 2


def smooth(values: np.ndarray, window: int, centred: bool = False) -> np.ndarray:
    """Moving average. Causal: left-padded with the first value (spec §6.7); centred: edge-padded (spec §6.9)."""
    if window <= 1 or values.size == 0:
        return values
    if centred:
        left = window // 2
        padded = np.pad(values, (left, window - 1 - left), mode="edge")
    else:
        padded = np.concatenate([np.full(window - 1, values[0]), values])
    cumulative = np.cumsum(np.insert(padded, 0, 0.0))
    return (cumulative[window:] - cumulative[:-window]) / window


def series_style(series: Series, index: int, count: int) -> tuple[str, str]:
    """Explicit style, else the algorithm's; a series that varies another key (K, epochs, η, a variant preset) gets
    a viridis colour and its algorithm's line style."""
    if series.style:
        return series.style
    algorithm = series.key.get("algorithm.name")
    if set(series.key) - {"algorithm.name"}:
        line = ALGORITHM_STYLE.get(algorithm, (None, "-"))[1]
        return matplotlib.colors.to_hex(plt.get_cmap("viridis")(index / max(1, count - 1) * 0.9)), line
    return ALGORITHM_STYLE.get(algorithm, ("#333333", "-"))


def wrapped_title(title: str, width_inches: float) -> str:
    """A figure title in lines that fit the figure's width (a long one on a two-panel figure was cut off)."""
    return textwrap.fill(title, int(TITLE_CHARS_PER_INCH * width_inches))


def _series_label(series: Series, panel: Panel) -> str:
    return series.label or label({k: v for k, v in series.key.items() if k not in panel.where})


class Drawer:
    """Draws a Figure spec from a Report; remembers the runs behind each line for the caption."""

    def __init__(self, report: Report, default_smooth: int = 1):
        self.report, self.default_smooth = report, default_smooth
        self.used: list[tuple[str, str, Resolved]] = []
        self.records: list[dict] = []  # preset, command, status of every line, for the missing-runs list

    def resolve(self, panel: Panel, key: dict) -> Resolved:
        full = {**panel.where, **key}
        budget = self.report.budget(full.get("experiment", panel.preset))
        resolved = self.report.resolve(panel.preset, full, budget)
        self.records.append({"preset": full.get("experiment", panel.preset), "status": resolved.status,
                             "command": fill_command(panel.preset, full, resolved, budget)})
        if resolved.usable:
            self.used.append((panel.title, label({**panel.where, **key}), resolved))
        return resolved

    def curves(self, ax, panel: Panel) -> bool:
        drawn = False
        window = panel.smooth if panel.smooth is not None else self.default_smooth
        for index, series in enumerate(panel.series):
            resolved = self.resolve(panel, series.key)
            if not resolved.usable:
                continue
            colour, line = series_style(series, index, len(panel.series))
            for m_index, metric in enumerate(panel.metrics):
                matrix = self.report.matrix(resolved, metric)
                logged = np.isfinite(matrix.values).any(0)  # a metric logged every N steps (held-out accuracy)
                matrix = stats.SeedMatrix(matrix.seeds, matrix.steps[logged], matrix.values[:, logged])
                if matrix.values.size == 0:
                    continue
                mean, se = stats.mean_se(matrix)
                mean, se = smooth(mean, window, panel.centred), smooth(se, window, panel.centred)
                style = METRIC_STYLE[m_index] if len(panel.metrics) > 1 else line
                name = _series_label(series, panel) + ("†" if resolved.status == "partial" else "")
                on_top = 3 if getattr(ALGORITHMS.get(series.key.get("algorithm.name")), "target", False) else 2
                ax.plot(matrix.steps, mean, style, color=colour, linewidth=1.4, zorder=on_top,
                        label=name if m_index == 0 else None)
                ax.fill_between(matrix.steps, mean - se, mean + se, color=colour, alpha=0.2, linewidth=0)
                drawn = True
        ax.set_xlabel("step")
        return drawn

    def finals(self, ax, panel: Panel) -> bool:
        """Final value per series (bars) or against ``panel.x`` (lines), ± s.e., paper values as crosses."""
        drawn = False
        xs = panel.xs if panel.kind == "final" else (None,)
        for index, series in enumerate(panel.series):
            colour, line = series_style(series, index, len(panel.series))
            points = []
            for x in xs:
                key = {**series.key, **({panel.x: x} if panel.x else {})}
                resolved = self.resolve(panel, key)
                matrix = self.report.matrix(resolved, panel.metrics[0]) if resolved.usable else None
                published = (paper.lookup(panel.paper, "final", {"experiment": panel.preset, **panel.where, **key})
                             if panel.paper else None)
                points.append((index if x is None else x, stats.point(FINAL, matrix) if matrix is not None else np.nan,
                               stats.standard_error(FINAL, matrix) if matrix is not None else np.nan,
                               _paper_point(published)))
            at, value, se, target = map(np.asarray, zip(*points))
            # on log axes a whisker below zero would run off the plot: stop it just above zero instead
            yerr = np.vstack([np.minimum(se, value * 0.99), se]) if panel.logy else se
            if panel.kind == "bars":
                ax.bar(at, value, yerr=yerr, color=colour, capsize=3)
                ax.plot(at, target, "x", color="black", markersize=8, markeredgewidth=2)
            else:
                ax.errorbar(at, value, yerr=yerr, fmt=line, marker="o", color=colour,
                            label=_series_label(series, panel), capsize=3)
                ax.plot(at, target, "x", color=colour, markersize=8, markeredgewidth=2)
            drawn |= bool(np.isfinite(value).any())
        if panel.kind == "bars":
            ax.set_xticks(range(len(panel.series)), [_series_label(s, panel) for s in panel.series], fontsize=7)
        else:
            ax.set_xlabel(KEY_LABEL.get(panel.x, panel.x))
            ax.set_xticks(panel.xs, [str(x) for x in panel.xs])
        return drawn

    def mechanism(self, ax, panel: Panel) -> bool:
        """Fig 4b: surplus gain per concentration bin at step 2,000, bars ± s.e. over seeds."""
        width = 0.8 / len(panel.series)
        drawn = False
        for index, series in enumerate(panel.series):
            resolved = self.resolve(panel, series.key)
            if not resolved.usable:
                continue
            values, errors, targets = [], [], []
            for b in range(len(MECHANISM_BINS)):
                matrix = self.report.matrix(resolved, MECHANISM_METRICS[b])
                published = paper.lookup(panel.paper, AT_2000.name, {"experiment": panel.preset, **series.key,
                                                                     "metric": MECHANISM_METRICS[b]})
                values.append(stats.point(AT_2000, matrix))
                errors.append(stats.standard_error(AT_2000, matrix))
                targets.append(_paper_point(published))
            at = np.arange(len(MECHANISM_BINS)) + (index - (len(panel.series) - 1) / 2) * width
            colour = series_style(series, index, len(panel.series))[0]
            ax.bar(at, values, width, yerr=errors, color=colour, label=_series_label(series, panel))
            ax.plot(at, targets, "x", color="black", markersize=7)
            drawn |= bool(np.isfinite(values).any())
        ax.axhline(0.0, color="black", linewidth=0.8)
        ax.set_xticks(np.arange(len(MECHANISM_BINS)), MECHANISM_BINS, fontsize=7)
        ax.set_xlabel("wrong-class concentration")
        return drawn

    def draw(self, figure: Figure) -> plt.Figure | None:
        count = len(figure.panels)
        ncols = figure.ncols or count
        nrows = -(-count // ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(max(6.0, 3.6 * ncols), 2.9 * nrows), squeeze=False)
        drawn = False
        for ax, panel in zip(axes.flat, figure.panels):
            kind = {"curves": self.curves, "final": self.finals, "bars": self.finals, "mechanism": self.mechanism}
            has_data = kind[panel.kind](ax, panel)
            drawn |= has_data
            ax.set_title(panel.title, fontsize=9)
            ax.set_ylabel(panel.ylabel)
            ax.grid(alpha=0.3)
            if not has_data:
                ax.text(0.5, 0.5, f"no runs\n(experiment={panel.preset})", ha="center", va="center",
                        transform=ax.transAxes, color="grey", fontsize=8)
                continue
            if panel.logy:
                ax.set_yscale("log")
                ax.set_ylim(bottom=max(LOG_FLOOR, ax.get_ylim()[0]))  # float noise around 0 is not information
            if panel.logx:
                ax.set_xscale("log", base=2)
                ax.set_xticks(panel.xs, [str(x) for x in panel.xs])
            if panel.ylim:
                ax.set_ylim(*panel.ylim)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(frameon=False, fontsize=7)
        for ax in list(axes.flat)[count:]:
            ax.set_visible(False)
        fig.suptitle(wrapped_title(figure.title, fig.get_figwidth()), fontsize=10)
        fig.tight_layout()
        if not drawn:
            plt.close(fig)
            return None
        return fig


def caption(figure: Figure, used: list[tuple[str, str, Resolved]], runs: pd.DataFrame, command: str) -> str:
    """Markdown caption with provenance: every line's runs, their configs, seeds, steps and hardware."""
    by_dir = runs.set_index("run_dir")
    lines = [f"# {figure.title}\n", figure.caption + "\n" if figure.caption else "",
             f"Generated {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC} by `{command}` at commit "
             f"{git_commit() or 'unknown'}. Bands: seed mean ± s.e. (population std / √n).\n",
             "| panel | line | status | seeds | steps | runs | hardware | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    configs = {}
    for panel, line, resolved in used:
        rows = by_dir.loc[resolved.run_dirs]
        seeds = sum(len(s) for s in resolved.owners.values())
        steps = ", ".join(sorted({str(s) for s in rows.steps}))
        hardware = "; ".join(sorted({_hardware(h) for h in rows.hardware}))
        wall = ", ".join(f"{w:.1f}" for w in rows.wall_seconds.dropna())
        status = resolved.status + (f" ({'; '.join(resolved.flags)})" if resolved.flags else "")
        lines.append(f"| {panel} | {line} | {status} | {seeds} | {steps} | {'<br>'.join(resolved.run_dirs)} | "
                     f"{hardware} | {wall} |")
        for run_dir in resolved.run_dirs:
            configs[run_dir] = by_dir.loc[run_dir, "config"]
    lines += ["", "Resolved configs:", "", "```json", json.dumps(configs, indent=1, default=str, sort_keys=True),
              "```", ""]
    return "\n".join(lines)


def _hardware(text) -> str:
    if not isinstance(text, str):
        return "unknown"
    info = json.loads(text)
    cpu = f", {info['cpu']}" if info.get("cpu") else ""
    return f"{info.get('device')} ×{info.get('threads')} threads on {info.get('host')}{cpu}"


def write_figure(figure: Figure, report: Report, out: Path, default_smooth: int = 1,
                 how: str = "") -> tuple[bool, list[dict]]:
    """<name>.png, <name>.pdf and <name>.caption.md (nothing when no panel has runs); also every line's
    (preset, status, command) record."""
    drawer = Drawer(report, default_smooth)
    fig = drawer.draw(figure)
    if fig is None:
        return False, drawer.records
    fig.savefig(out / f"{figure.name}.png", dpi=150)
    fig.savefig(out / f"{figure.name}.pdf", metadata={"CreationDate": None})  # same figure, same bytes
    plt.close(fig)
    (out / f"{figure.name}.caption.md").write_text(caption(figure, drawer.used, report.runs, how))
    return True, drawer.records

