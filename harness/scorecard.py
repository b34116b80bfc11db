"""``python -m harness.scorecard algorithm=<id> [algorithm.<key>=<value> ...] [--suite full]``: where a new algorithm
stands against the committed baselines, on a fixed suite, paired per seed.

A suite (``conf/scorecard/<quick|full>.yaml``, with a ``version``; ``--suite``, quick by default) lists cells: a
task configuration (overrides on top of the suite's preset, which only names the runs' experiment), its seeds (0 ..
n-1, all in one run) and its episodes, a few per task family (tabular bandits, MNIST bandit, dense and terminal
token reversal). The candidate's runs are the suite's cells with ``algorithm=<id>`` and its ``algorithm.*``
overrides; nothing else may be given (a task, trainer or seed key would make the runs another configuration than the
baselines': refused in one line). They run through the campaign (``harness.campaign``: resumable, ``--jobs`` at a
time, ``--finish-within``, a run of another configuration in their folders refused) into
``results/runs/<preset>/<cell>/<label>/``, beside the baselines' (``--baselines`` runs those, the same way). It
takes the campaign's per-cell locks, so it runs beside a campaign of other cells (the paper's queue) or another
candidate's scorecard, in the same folders. Every algorithm starts each seed from the same parameters and sees the
same prompt stream (counter-based RNG), so a cell compares the candidate with a baseline on the seeds both have,
paired.

The scorecard (``results/scorecards/<suite>/<label>/``): per cell and baseline the candidate's score and Δ =
candidate − baseline with 95% paired bootstrap intervals and P(better) (``harness.report.compare``); across the
suite rliable's IQM and optimality gap of every algorithm and the probability that the candidate improves on each
baseline, with stratified bootstrap intervals (``harness.report.aggregates``); per task family one verdict line:
the baselines the candidate is ahead of, behind, or level with, by the family's mean paired Δ of the mean score
(its 95% stratified bootstrap interval above 0, below 0, or across it). Score = 1 − error (``compare``); final =
each seed's score at its last logged step, mean = its mean over the run (fast learners score higher). A candidate
that is one of the suite's baselines, with no overrides, has the baselines' runs: it is compared with the others.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import yaml

from harness import campaign, cli, locations
from harness.campaign import MAX_HOURS, MAX_PARALLEL
from harness.process import running
from common.checks import did_you_mean

SUITES = locations.CONF / "scorecard"
ALGORITHMS = locations.CONF / "algorithm"
OUT = locations.HOME / "results" / "scorecards"
SUITE_KEYS = ("version", "preset", "baselines", "cells")
CELL_KEYS = ("name", "family", "seeds", "cost", "overrides")
WINDOWS = ("mean", "final")  # the verdicts read the first
VERDICT = "mean"
DEFAULT_SUITE = "quick"  # the suite a plain command runs: the full one is hours
TITLE = "# Scorecard: "  # how every scorecard.md starts: a folder holding another file of that name is not ours
FILES = ("scorecard.md", "scorecard_cells.csv", "scorecard_aggregates.csv", "scorecard_families.csv",
         "scorecard.png")


class ScorecardError(ValueError):
    """A request the suite cannot answer: one line naming the argument and the valid choices."""


@dataclass(frozen=True)
class Cell:
    name: str
    family: str
    seeds: int
    cost: float
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class Suite:
    name: str
    version: int
    preset: str
    baselines: tuple[str, ...]
    cells: tuple[Cell, ...]
    digest: str  # of the suite file: the scorecard names the exact suite it read

    @property
    def families(self) -> list[str]:
        return list(dict.fromkeys(cell.family for cell in self.cells))


@dataclass(frozen=True)
class Candidate:
    """An algorithm id and its ``algorithm.<key>=<value>`` overrides; ``label`` names its runs' folders."""

    algorithm: str
    overrides: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        return ",".join([self.algorithm, *(override.removeprefix("algorithm.") for override in self.overrides)])

    @property
    def arguments(self) -> list[str]:
        return [f"algorithm={self.algorithm}", *self.overrides]


def suite_names() -> list[str]:
    return sorted(path.stem for path in SUITES.glob("*.yaml"))


def load_suite(name: str, folder: Path = SUITES) -> Suite:
    """The suite of ``<folder>/<name>.yaml``; ScorecardError (one line) for a missing file or a missing, unknown
    or malformed key."""
    path = folder / f"{name}.yaml"
    if not path.exists():
        raise ScorecardError(f"suite {name!r} not found; valid choices: {', '.join(suite_names())}")
    text = path.read_text()
    data = yaml.safe_load(text) or {}
    for key in data:
        if key not in SUITE_KEYS:
            raise ScorecardError(f"{path.name}: unknown key {key!r}; valid keys: {', '.join(SUITE_KEYS)}")
    for key in SUITE_KEYS:
        if key not in data:
            raise ScorecardError(f"{path.name}: no {key}; a suite needs {', '.join(SUITE_KEYS)}")
    cells = [suite_cell(cell, f"{path.name}: cells[{index}]") for index, cell in enumerate(data["cells"] or ())]
    if len({cell.name for cell in cells}) < len(cells) or not cells:
        raise ScorecardError(f"{path.name}: cells must be at least one, each name once")
    return Suite(name, int(data["version"]), str(data["preset"]), tuple(map(str, data["baselines"])), tuple(cells),
                 hashlib.sha256(text.encode()).hexdigest()[:12])


def suite_cell(cell: dict, where: str) -> Cell:
    """A suite's cell (``where`` names it in a refusal); ScorecardError for a missing, unknown or malformed key."""
    unknown = [key for key in cell if key not in CELL_KEYS]
    missing = [key for key in CELL_KEYS if key not in cell]
    if unknown or missing:
        raise ScorecardError(f"{where}: {'unknown key ' + repr(unknown[0]) if unknown else 'no ' + missing[0]}; "
                             f"a cell has {', '.join(CELL_KEYS)}")
    if not re.fullmatch(r"[a-z0-9_]+", str(cell["name"])):
        raise ScorecardError(f"{where}.name={cell['name']!r}: expected lower-case letters, digits and _")
    if not isinstance(cell["seeds"], int) or isinstance(cell["seeds"], bool) or cell["seeds"] < 1:
        raise ScorecardError(f"{where}.seeds={cell['seeds']!r}: expected an integer >= 1")
    if any(not str(o).startswith("task") for o in cell["overrides"]):
        raise ScorecardError(f"{where}.overrides: only task=<task> and task.<key>=<value> (the algorithm is the "
                             "candidate's)")
    return Cell(cell["name"], str(cell["family"]), cell["seeds"], float(cell["cost"]),
                tuple(map(str, cell["overrides"])))


def algorithm_ids() -> list[str]:
    return sorted(path.stem for path in ALGORITHMS.glob("*.yaml"))


def parse_candidate(arguments: list[str], suite: Suite) -> Candidate:
    """The candidate from ``algorithm=<id> [algorithm.<key>=<value> ...]``; ScorecardError naming the first
    argument that is anything else (a task, trainer or seed key would make its runs another configuration than the
    baselines'), a missing or repeated ``algorithm=``, an unknown id (with the nearest one), or a key the algorithm
    lacks (as ``python -m harness`` refuses it, with the nearest key)."""
    algorithm, overrides = None, []
    for argument in arguments:
        key, equals, value = argument.partition("=")
        if key == "algorithm" and equals and algorithm is None:
            algorithm = value
        elif key.startswith("algorithm.") and equals and value:
            if re.search(r"[\s/,]", argument):
                raise ScorecardError(f"{argument}: a value with a space, / or , cannot name the runs' folder")
            overrides.append(argument)
        elif key == "algorithm" and equals:
            raise ScorecardError(f"{argument}: give one algorithm=<id> (a scorecard is of one algorithm)")
        else:
            raise ScorecardError(f"{argument}: the {suite.name} suite (v{suite.version}) pins the task, the trainer "
                                 "and the seeds; give algorithm=<id> and algorithm.<key>=<value> only")
    if algorithm is None:
        raise ScorecardError(f"no algorithm=<id>; valid choices: {', '.join(algorithm_ids())}")
    if algorithm not in algorithm_ids():
        near = did_you_mean(algorithm, algorithm_ids())
        raise ScorecardError(f"algorithm={algorithm} is not valid;{f' did you mean {near}?' if near else ''} valid "
                             f"choices: {', '.join(algorithm_ids())}")
    candidate = Candidate(algorithm, tuple(overrides))
    from harness.__main__ import check_launch
    from common.checks import ConfigError

    try:
        check_launch([f"experiment={suite.preset}", *suite.cells[0].overrides, *candidate.arguments])
    except ConfigError as error:
        raise ScorecardError(str(error)) from None
    return candidate


def cell_folder(cell: Cell, label: str) -> str:
    """The campaign's cell name of one algorithm's runs of ``cell``: results/runs/<preset>/<this>/seeds0-<n-1>."""
    return f"{cell.name}/{label}"


def queue(suite: Suite, candidates: list[Candidate]) -> dict:
    """A campaign queue (``harness.campaign``) of every cell of the suite for each candidate, all its seeds in
    one run; cell by cell, so that a campaign stopped early has whole cells."""
    cells = [{"priority": "S", "preset": suite.preset, "name": cell_folder(cell, candidate.label),
              "seeds": cell.seeds, "chunk": cell.seeds, "cost": cell.cost,
              "overrides": [*cell.overrides, *candidate.arguments]}
             for cell in suite.cells for candidate in candidates]
    for index, cell in enumerate(cells):
        campaign.check_resources(cell, f"suite {suite.name}: cells[{index}]")
    return {"chunk": max(cell.seeds for cell in suite.cells), "cells": cells}


def run_cells(suite: Suite, candidates: list[Candidate], args: argparse.Namespace) -> int:
    """Run (or, with ``--dry-run``, plan) the candidates' cells through the campaign; its exit code."""
    plan = queue(suite, candidates)
    campaign.check_cells(plan, f"scorecard_{suite.name}.yaml")
    options = argparse.Namespace(jobs=args.jobs, dry_run=args.dry_run, breadth=False, replace=args.replace, hours=None,
                                 all=True, finish_within=args.finish_within, launcher="local", partition=None,
                                 max_jobs=campaign.MAX_JOBS, work=args.work, results=args.results, stop_at=None)
    if args.dry_run:
        return campaign.campaign(plan, options, None)
    with campaign.campaign_lock(args.work, args.results, campaign.queue_cells(plan)):
        return campaign.campaign(plan, options, None)


# ---- the scorecard -----------------------------------------------------------------------------------------------

def _shown(run: Path, results: Path) -> str:
    """A run folder as the report shows it, from the results folder's parent (results/runs/...): committed
    scorecards name no folder of the machine that wrote them."""
    return str(run.relative_to(results.parent)) if run.is_relative_to(results.parent) else str(run)


def _runs(suite: Suite, labels: list[str], results: Path):
    """(Report, runs' cell and label per run) of every run folder of the suite's cells for ``labels``."""
    from harness.report.load import load_runs
    from harness.report.tables import Report

    folders = [results / "runs" / suite.preset / cell_folder(cell, label)
               for cell in suite.cells for label in labels]
    runs, curves = load_runs([folder for folder in folders if folder.exists()], metrics=["error"])
    if runs.empty:
        return None
    where = runs.run_dir.map(lambda path: Path(path).parent)
    runs["cell"], runs["label"] = where.map(lambda path: path.parent.name), where.map(lambda path: path.name)
    return Report(runs, curves)


def resolve(suite: Suite, candidate: Candidate, values: list[str], results: Path):
    """Each cell's runs of ``values`` resolved against the suite's seeds and steps: ({(cell index, value):
    Resolved}, {(cell index, value): scores 1 − error}, {value: [cells without complete runs]})."""
    from harness.report import stats

    report = _runs(suite, values, results)
    cells, scores, missing = {}, {}, {}
    for index, cell in enumerate(suite.cells):
        steps = campaign.preset_steps(suite.preset, (*cell.overrides, *candidate.arguments))
        for value in values:
            resolved = None
            if report is not None:
                runs = report.runs[(report.runs.cell == cell.name) & (report.runs.label == value)]
                resolved = report.resolve_runs(runs, (cell.seeds, steps, "scorecard"))
            if resolved is None or resolved.status != "ok":
                missing.setdefault(value, []).append(cell.name)
                continue
            matrix = report.matrix(resolved, "error")
            cells[index, value] = resolved
            scores[index, value] = stats.SeedMatrix(matrix.seeds, matrix.steps, 1.0 - matrix.values)
    return cells, scores, missing


def baselines_of(suite: Suite, candidate: Candidate) -> list[str]:
    """The suite's baselines but the candidate itself (one of them, with no overrides)."""
    return [name for name in suite.baselines if name != candidate.label]


def missing_text(suite: Suite, candidate: Candidate, missing: dict[str, list[str]]) -> str:
    """One line: whose runs are missing in which cells, and the command that runs them."""
    flag = "" if suite.name == DEFAULT_SUITE else f" --suite {suite.name}"
    baselines = baselines_of(suite, candidate)
    return "; ".join(f"{value} in {', '.join(names)} (python -m harness.scorecard "
                     f"{'--baselines' if value in baselines else ' '.join(candidate.arguments)}{flag})"
                     for value, names in missing.items())


def check_baselines(suite: Suite, candidate: Candidate, results: Path) -> None:
    """ScorecardError when a baseline has no complete runs of a cell: checked before the candidate's runs start."""
    _, _, missing = resolve(suite, candidate, baselines_of(suite, candidate), results)
    if missing:
        raise ScorecardError(f"the {suite.name} suite's baselines are not all run: "
                             f"{missing_text(suite, candidate, missing)}")


def comparison(suite: Suite, candidate: Candidate, results: Path, resamples: int | None = None):
    """``compare.Comparison`` of the candidate (the first value) with the suite's baselines, one task per cell;
    ScorecardError naming the cells without complete runs of the candidate or a baseline, with the command that
    runs them."""
    from harness.report import compare, stats

    values = [candidate.label, *baselines_of(suite, candidate)]
    cells, scores, missing = resolve(suite, candidate, values, results)
    if missing:
        raise ScorecardError(f"no complete runs of {missing_text(suite, candidate, missing)}")
    return compare.Comparison("algorithm", values, [{"cell": cell.name} for cell in suite.cells], cells, scores,
                              WINDOWS, resamples or stats.RESAMPLES, stats.SEED)


def oriented(table: pd.DataFrame) -> pd.DataFrame:
    """``compare.task_table``'s rows turned to read candidate − the row's algorithm (the comparison's baseline is
    the candidate, so its Δ is the row's algorithm − candidate): Δ and its interval negated, P(better) = 1 −
    P(the row's algorithm better) (ties count ½ either way). The candidate's own rows have no Δ."""
    rows = table.copy()
    rows["diff"], rows["diff_low"], rows["diff_high"] = -rows["diff"], -rows["diff_high"], -rows["diff_low"]
    rows["p_better"] = 1.0 - rows["p_better"]
    return rows


def family_deltas(comparison, suite: Suite) -> pd.DataFrame:
    """Per family and baseline: the mean over the family's cells of the candidate's mean paired Δ (window
    ``VERDICT``), with a stratified bootstrap interval and the verdict (``aggregates.family_deltas``)."""
    from harness.report import aggregates

    families = {family: [index for index, cell in enumerate(suite.cells) if cell.family == family]
                for family in suite.families}
    return aggregates.family_deltas(comparison, families, VERDICT, candidate_first=True).rename(
        columns={"value": "baseline"})


def verdict_lines(families: pd.DataFrame) -> list[str]:
    """One line per family: the baselines the candidate is ahead of, behind, level with."""
    from harness.report.compare import text

    lines = []
    for family, rows in families.groupby("family", sort=False):
        parts = []
        for verdict, words in (("ahead", "ahead of"), ("behind", "behind"), ("level", "level with"),
                               ("undecided", "undecided (under 2 paired seeds) against")):
            names = [text("algorithm", name) for name in rows.baseline[rows.verdict == verdict]]
            if names:
                parts.append(f"{words} {', '.join(names)}")
        lines.append(f"- **{family}**: {'; '.join(parts)}.")
    return lines


def aggregate_frame(comparison) -> pd.DataFrame:
    """rliable's aggregates (``aggregates.aggregate``) with the probability of improvement turned to read
    P(candidate > baseline): the comparison's baseline is the candidate, so its rows hold P(baseline > candidate)."""
    from harness.report import aggregates

    frame, _ = aggregates.aggregate(comparison)
    turned = frame.statistic == "probability_of_improvement"
    frame.loc[turned, ["estimate", "low", "high"]] = 1.0 - frame.loc[turned, ["estimate", "high", "low"]].to_numpy()
    frame.loc[turned, "statistic"] = "candidate_improves"
    return frame


def figure(comparison, frame: pd.DataFrame, families: pd.DataFrame, title: str):
    """Left: each algorithm's IQM of the mean score across the suite [95% CI]; right: the candidate's family Δ
    against each baseline [95% CI], a marker per family."""
    import matplotlib.pyplot as plt

    from harness.report.aggregates import colours
    from harness.report.compare import text
    from harness.report.figures import ALGORITHM_MARKER

    palette = colours(comparison)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10.0, 0.45 * len(comparison.values) + 1.6),
                                      layout="constrained")
    iqm = frame[(frame.window == VERDICT) & (frame.statistic == "iqm")]
    names = [text("algorithm", value) for value in iqm.algorithm]
    for row, (value, name, estimate, low, high) in enumerate(zip(iqm.algorithm, names, iqm.estimate, iqm.low,
                                                                 iqm.high)):
        left.errorbar(estimate, row, xerr=[[estimate - low], [high - estimate]], color=palette[name],
                      fmt=ALGORITHM_MARKER.get(value, "o"))  # colour and marker: the palette repeats colours
    left.set_yticks(range(len(names)), names)
    left.invert_yaxis()
    left.set_xlabel(f"IQM of the {VERDICT} score across the suite [95% CI]")
    baselines = list(dict.fromkeys(families.baseline))
    markers = dict(zip(families.family.unique(), "osD^vP*X"))
    for offset, (family, rows) in enumerate(families.groupby("family", sort=False)):
        y = [baselines.index(name) + 0.15 * (offset - 1.5) for name in rows.baseline]
        diff, low, high = (rows[key].to_numpy() for key in ("diff", "diff_low", "diff_high"))  # arrays: a lone row
        right.errorbar(diff, y, xerr=[diff - low, high - diff], fmt=markers[family], label=family, ms=4)
    right.axvline(0.0, color="grey", linewidth=0.8)
    right.set_yticks(range(len(baselines)), [text("algorithm", name) for name in baselines])
    right.invert_yaxis()
    right.set_xlabel(f"{text('algorithm', comparison.baseline)} − baseline, {VERDICT} score, per family [95% CI]")
    right.legend(fontsize=7, loc="best")
    fig.suptitle(title, fontsize=10)
    return fig


def markdown(suite: Suite, candidate: Candidate, comparison, cells: pd.DataFrame, frame: pd.DataFrame,
             families: pd.DataFrame, command: str, commit: str) -> str:
    from harness.report.compare import text, with_interval

    name = text("algorithm", candidate.label)
    cpu = sum(cpu_seconds(comparison, candidate.label)) / 3600
    lines = [f"{TITLE}{name} on the {suite.name} suite (v{suite.version})\n",
             f"Generated by `{command}` at commit {commit} from conf/scorecard/{suite.name}.yaml (sha256 "
             f"{suite.digest}…). Candidate: `{' '.join(candidate.arguments)}`; its runs: "
             f"results/runs/{suite.preset}/<cell>/{candidate.label}/ ({cpu:.2f} CPU-h). Baselines: "
             f"{', '.join(text('algorithm', value) for value in comparison.values[1:])}, on the same seeds.\n",
             "Score = 1 − error (1 = solved); mean = each seed's mean score over the run (speed and level), final "
             "= its score at the last logged step. Δ = candidate − baseline on the same seeds.\n",
             "## Verdict per task family\n",
             f"By the family's mean paired Δ of the {VERDICT} score over its cells, 95% stratified bootstrap "
             "interval (paired seeds resampled within each cell): ahead = interval above 0, behind = below 0, "
             "level = across 0.\n", *verdict_lines(families), "",
             "| family | baseline | cells | seeds | Δ mean score [95% CI] | verdict |", "|---|---|---|---|---|---|"]
    for row in families.itertuples():
        lines.append(f"| {row.family} | {text('algorithm', row.baseline)} | {row.cells} | {row.seeds} | "
                     f"{with_interval(row.diff, row.diff_low, row.diff_high, difference=True)} | {row.verdict} |")
    lines += ["", "## Across the suite (rliable)\n",
              "Interquartile mean and optimality gap (γ = 1) of every algorithm's runs × cells scores; P(improves) "
              "= the probability that a run of the candidate scores higher than one of the baseline (per cell, "
              "averaged over cells; unpaired, as rliable defines it). 95% stratified bootstrap intervals "
              f"({comparison.resamples:,} resamples, seed {comparison.seed}). Each algorithm keeps per cell its "
              "first n seeds, n the fewest any cell has.\n",
              "![scorecard](scorecard.png)\n"]
    for window in comparison.windows:
        part = frame[frame.window == window]
        lines += [f"**{window} score**\n", f"| algorithm | IQM [95% CI] | optimality gap [95% CI] | "
                  f"P({name} improves) [95% CI] |", "|---|---|---|---|"]
        for value, rows in part.groupby("algorithm", sort=False):
            by = rows.set_index("statistic")
            improve = by.loc["candidate_improves"] if "candidate_improves" in by.index else None
            lines.append("| " + " | ".join([
                text("algorithm", value), with_interval(by.loc["iqm"].estimate, by.loc["iqm"].low, by.loc["iqm"].high),
                with_interval(by.loc["optimality_gap"].estimate, by.loc["optimality_gap"].low,
                              by.loc["optimality_gap"].high),
                "–" if improve is None else with_interval(improve.estimate, improve.low, improve.high)]) + " |")
        lines.append("")
    lines += ["## Per cell\n", "Δ = candidate − baseline [95% paired bootstrap over seeds]; P(better) = share of "
              "the paired seeds on which the candidate scores higher (ties ½).\n"]
    header = ["cell", "baseline", "seeds"] + [part for window in comparison.windows
                                              for part in (f"{window} Δ [95% CI]", f"{window} P(better)")]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for (cell, baseline), rows in cells[cells["diff"].notna()].groupby(["cell", "algorithm"], sort=False):
        rows = rows.set_index("window")
        row = [cell, text("algorithm", baseline), str(int(rows.iloc[0].paired_seeds))]
        for window in comparison.windows:
            found = rows.loc[window]
            row += [with_interval(found["diff"], found.diff_low, found.diff_high, difference=True),
                    f"{found.p_better:.2f}"]
        lines.append("| " + " | ".join(row) + " |")
    lines += ["", "Every algorithm's scores per cell and Δ: [scorecard_cells.csv](scorecard_cells.csv); the "
              "aggregates: [scorecard_aggregates.csv](scorecard_aggregates.csv); the families' Δ: "
              "[scorecard_families.csv](scorecard_families.csv).", ""]
    return "\n".join(lines)


def cpu_seconds(comparison, value) -> list[float]:
    """The CPU seconds each of ``value``'s runs recorded (summary.json)."""
    import json

    folders = dict.fromkeys(folder for (_, name), resolved in comparison.cells.items() if name == value
                            for folder in resolved.run_dirs)
    return [float(json.loads((Path(folder) / "summary.json").read_text()).get("cpu_seconds") or 0.0)
            for folder in folders]


def claim(out: Path) -> None:
    """May the scorecard write into ``out``? When it is new, empty, or holds a scorecard.md this module wrote;
    otherwise refuse in one line (a file the project did not write is never replaced). The temporaries of a scorecard
    killed while writing (``[.]<file>.<pid>.tmp`` of a process no longer running) are removed first."""
    if out.exists() and not out.is_dir():
        raise ScorecardError(f"--out {out}: not a folder; choose a new or empty folder")
    if not out.exists():
        return
    for path in out.iterdir():
        own = re.fullmatch(rf"\.?({'|'.join(map(re.escape, FILES))})\.(\d+)\.tmp", path.name)
        if own and path.is_file():
            if running(int(own.group(2))):
                raise ScorecardError(f"--out {out}: another scorecard (process {own.group(2)}) is writing there")
            path.unlink()
    if not any(out.iterdir()):
        return
    ours = out / FILES[0]
    if not ours.exists() or not ours.read_text().startswith(TITLE):
        raise ScorecardError(f"--out {out}: holds files no scorecard wrote; choose a new or empty folder")


def write(suite: Suite, candidate: Candidate, results: Path, out: Path, command: str,
          resamples: int | None = None) -> Path:
    """Compare, then write the scorecard's files into ``out`` (each written whole, then renamed into place)."""
    import matplotlib.pyplot as plt

    from harness.report.compare import task_table, text
    from harness.report.tables import write_file
    from harness.rundir.outputs import git_commit

    claim(out)
    commit = git_commit() or "unknown"  # before this scorecard rewrites its own files
    compared = comparison(suite, candidate, results, resamples)
    table = task_table(compared)
    cells = oriented(table)
    cells["runs"] = cells.runs.map(lambda runs: " ".join(_shown(Path(run), results) for run in runs.split()))
    frame = aggregate_frame(compared)
    families = family_deltas(compared, suite)
    fig = figure(compared, frame, families, f"Scorecard: {text('algorithm', candidate.label)}, {suite.name} suite "
                                            f"v{suite.version}")
    png = out / FILES[4]
    out.mkdir(parents=True, exist_ok=True)
    temporary = png.with_name(f".{png.name}.{os.getpid()}.tmp")
    fig.savefig(temporary, format="png", dpi=150, metadata={"Software": None})
    plt.close(fig)
    os.replace(temporary, png)
    write_file(out / FILES[1], cells.to_csv(index=False))
    write_file(out / FILES[2], frame.to_csv(index=False))
    write_file(out / FILES[3], families.to_csv(index=False))
    write_file(out / FILES[0], markdown(suite, candidate, compared, cells, frame, families, command, commit))
    return out / FILES[0]


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.scorecard", description=__doc__,
                        details='docs/usage.md, "The scorecard", and harness/scorecard.py',
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help="algorithm=<id> [algorithm.<key>=<value> ...]")
    parser.add_argument("--suite", choices=suite_names(), default=DEFAULT_SUITE,
                        help=f"conf/scorecard/<suite>.yaml (default {DEFAULT_SUITE}: under an hour of one core; full: "
                             "paper lengths, about 2.5 CPU-hours)")
    # the flag of earlier versions, in the commands committed scorecards record
    parser.add_argument("--quick", action="store_const", const="quick", dest="suite", help=argparse.SUPPRESS)
    parser.add_argument("--baselines", action="store_true", help="run the suite's baselines (no scorecard)")
    parser.add_argument("--jobs", type=cli.number(int, low=1, high=MAX_PARALLEL), default=2,
                        help="runs at a time (one core each)")
    parser.add_argument("--finish-within", type=cli.number(float, above=0, high=MAX_HOURS), default=None,
                        metavar="HOURS",
                        help="start only runs expected to end within this many hours")
    parser.add_argument("--dry-run", action="store_true", help="print the runs and their cost, run nothing")
    parser.add_argument("--replace", action="store_true",
                        help="move runs of another configuration than the suite's aside and run their seeds again")
    parser.add_argument("--out", type=Path, default=None, help="default: results/scorecards/<suite>/<label>")
    parser.add_argument("--work", type=Path, default=locations.HOME / "runs" / "campaign",
                        help="run directories")
    parser.add_argument("--results", type=Path, default=locations.HOME / "results",
                        help="where finished runs are copied")
    args = parser.parse_args(argv)
    args.work, args.results = args.work.resolve(), args.results.resolve()
    try:
        suite = load_suite(args.suite)
        if args.baselines:
            if args.overrides:
                raise ScorecardError(f"{args.overrides[0]}: --baselines runs the suite's baselines only")
            sys.exit(run_cells(suite, [Candidate(name) for name in suite.baselines], args))
        candidate = parse_candidate(args.overrides, suite)
        out = args.out or OUT / suite.name / candidate.label
        claim(out)  # before an hour of the candidate's runs
        check_baselines(suite, candidate, args.results)  # likewise
        code = run_cells(suite, [candidate], args)
        if code or args.dry_run:
            sys.exit(code)
        command = " ".join(["python -m harness.scorecard", *candidate.arguments,
                            *([] if suite.name == DEFAULT_SUITE else ["--suite", suite.name])])
        print(f"wrote {write(suite, candidate, args.results, out, command)}")
    except ScorecardError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
