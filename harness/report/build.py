"""``write_report``: runs → README.md with every run's summary, the paper tables and figures the runs support, and
the commands for the cells still missing."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd

from harness import cli
from harness.process import running
from harness.rundir.outputs import SUMMARY_FILE, temporary_path
from harness.report import compare, dynamics, stats
from harness.report.figures import MECHANISM_BINS, MECHANISM_METRICS, conflict_note, write_figure
from harness.report.load import load_runs
from harness.report.specs import (
    FIGURES, SHARED_RUNS, TABLES, Figure, Panel, Stat, Table, algorithm_rank, by_algorithm, fmt_value, label,
    preset_title)
from harness.report.tables import (
    DONE, GROUP_CHOICE, Report, Resolved, _ranges, fmt, missing_commands, write_file, write_table)

BANDITS = {"tabular_single", "tabular_multi", "mnist_bandit"}
GENERIC_METRICS = {"error", "misalignment"}  # what the per-run table and the generic figures read
FINAL = Stat("final")


def _steps(value: float) -> str:
    return "never" if np.isinf(value) else f"{value:.0f}"


def _mean_se_text(summary: stats.Summary) -> str:
    if np.isnan(summary.value):
        return "n/a"
    return f"{100 * summary.value:.3g} ± {100 * summary.se:.2g}"


def results_table(report: Report) -> pd.DataFrame:
    """One row per run: final error (%) mean ± s.e. and 95% bootstrap interval, steps to each of the task's
    thresholds, and flags for runs that are not comparable (failed, interrupted, partial, in conflict). Partial: a
    run short of the budget's steps, or one whose configuration's finished full-length runs, their seed ranges merged
    as a table's cell merges them, hold fewer seeds than the budget (a seed range of a complete cell is not partial).
    The paper tables carry intervals for steps-to as well."""
    runs = report.runs
    params = [c for c in runs.columns if c.startswith(("task.", "algorithm.")) or c == "model.name"]
    largest = runs.groupby(["experiment", "task"])[["seeds", "steps"]].max().fillna(0)
    duplicated = seed_conflicts(report, largest)
    records = runs.to_dict("records")
    budgets = [report.budget(run["experiment"], *map(int, largest.loc[(run["experiment"], run["task"])]),
                             task=run["task"])[:2] for run in records]
    merged: dict[tuple, set] = {}  # per configuration: the seeds of its full-length runs, as a cell merges them
    for run, (_, steps) in zip(records, budgets):
        if run["status"] in DONE and (run["steps"] or 0) >= steps:  # an interrupted run's steps are its budget's
            merged.setdefault(_configuration(run), set()).update(run["seed_ids"])
    rows = []
    for run, (seeds, steps) in zip(records, budgets):
        flags = [] if run["status"] == "completed" else [run["status"]]
        if run["status"] != "failed" and ((run["steps"] or 0) < steps
                                          or len(merged.get(_configuration(run), ())) < seeds):
            flags.append("partial")
        if run["run"] in duplicated:
            flags.append(duplicated[run["run"]])
        row = {"experiment": run["experiment"], "task": run["task"], "algorithm": run["algorithm"],
               "params": " ".join(f"{GROUP_CHOICE.get(c, c.split('.', 1)[1])}={fmt_value(run[c])}" for c in params
                                  if not pd.isna(run[c])),
               "seeds": run["seeds"], "steps": run["steps"]}
        if run["run"] in report.with_data:
            matrix = report.matrix(Resolved("ok", {run["run"]: list(run["seed_ids"])}), "error")
            final = stats.summarize(FINAL, matrix, report.resamples, report.seed)
            row["final error % (mean ± s.e.)"] = _mean_se_text(final)
            row["final 95% CI"] = f"[{fmt(FINAL, final.low)}, {fmt(FINAL, final.high)}]"
            for threshold in run["config"].get("task.steps_to", ()):
                row[f"steps to {float(threshold):g}"] = _steps(stats.point(Stat("steps_to", threshold=threshold),
                                                                           matrix))
        row["CPU s"] = run["cpu_seconds"]
        row["wall s"] = run["wall_seconds"]
        row["flags"] = ", ".join(flags)
        rows.append(row)
    return pd.DataFrame(rows)


def _configuration(run: dict) -> tuple:
    return run["experiment"], run["task"], run["algorithm"], run["signature"]


def seed_conflicts(report: Report, largest: pd.DataFrame) -> dict[int, str]:
    """Run id → "conflict: seed(s) … also in <run folders>" for each run that holds a seed another run of its
    configuration (experiment, task, algorithm, signature) holds too, among the runs a cell would merge (not failed;
    those of the budget's steps where some are, as ``Report.resolve`` picks): every cell over them is a conflict,
    and their rows in the per-run table would otherwise look alike. ``largest``: (seeds, steps) per experiment and
    task, for ``Report.budget``."""
    runs = report.runs
    usable = runs[(runs.status != "failed") & runs.run.isin(report.with_data)]
    flags = {}
    for (experiment, task, _, _), group in usable.groupby(["experiment", "task", "algorithm", "signature"],
                                                          sort=False, dropna=False):
        steps = report.budget(experiment, *map(int, largest.loc[(experiment, task)]), task=task)[1]
        full = group[group.status.isin(DONE) & (group.steps.fillna(0) >= steps)]
        used = full if not full.empty else group
        holders: dict[int, list[str]] = {}
        for run_dir, seed_ids in zip(used.run_dir, used.seed_ids):
            for seed in seed_ids:
                holders.setdefault(seed, []).append(run_dir)
        for run, run_dir, seed_ids in zip(used.run, used.run_dir, used.seed_ids):
            shared = [seed for seed in seed_ids if len(holders[seed]) > 1]
            if shared:
                seeds = ", ".join(str(a) if b == a + 1 else f"{a}-{b - 1}" for a, b in _ranges(shared))
                others = dict.fromkeys(other for seed in shared for other in holders[seed] if other != run_dir)
                flags[run] = f"conflict: seed{'s' if len(shared) > 1 else ''} {seeds} also in {' '.join(others)}"
    return flags


def mechanism_table(curves: pd.DataFrame, step: int = 2000) -> pd.DataFrame:
    """Appendix C / Fig 4b: surplus (exact − scalar first-order gain) per concentration bin at ``step``,
    seed mean ± s.e. over seeds with a non-empty bin."""
    rows = []
    data = curves[(curves.step == step) & curves.metric.astype(str).str.startswith("mech_surplus_bin")]
    for (algorithm, metric), group in data.groupby(["algorithm", "metric"], observed=True):
        values = group["value"].dropna().to_numpy()
        if values.size:
            rows.append({"algorithm": algorithm, "bin": MECHANISM_BINS[int(str(metric)[-1])],
                         "surplus": values.mean(), "se": values.std() / np.sqrt(values.size), "seeds": values.size})
    return pd.DataFrame(rows)


def _presets(spec: Table | Figure, shared: bool = False) -> set[str]:
    """The presets a table or figure names; with ``shared``, also those whose runs they read (``SHARED_RUNS``)."""
    if isinstance(spec, Table):
        own = {spec.preset} | {k["experiment"] for k in (*spec.rows, *spec.cols) if "experiment" in k}
    else:
        own = {p.preset for p in spec.panels} | {s.key["experiment"] for p in spec.panels for s in p.series
                                                 if "experiment" in s.key}
    return own | {other for name in own for other in SHARED_RUNS.get(name, ())} if shared else own


def metrics_needed(table_specs: dict[str, Table], figure_specs: dict[str, Figure]) -> dict[str, set[str]]:
    """Per preset, the metric columns some table or figure reads (the rest of metrics.csv is not loaded)."""
    needed: dict[str, set[str]] = {}
    for table in table_specs.values():
        metrics = ({s.metric for s in table.stats} | {s.when[0] for s in table.stats if s.when}
                   | {k["metric"] for k in (*table.rows, *table.cols) if "metric" in k}
                   | ({"frac_zero_var"} if table.name in SEED_DYNAMICS else set()))  # its locked seeds
        for preset in _presets(table, shared=True):
            needed.setdefault(preset, set()).update(metrics)
    for figure in figure_specs.values():
        for panel in figure.panels:
            metrics = set(panel.metrics) | (set(MECHANISM_METRICS) if panel.kind == "mechanism" else set())
            for preset in _presets(Figure("", "", (panel,)), shared=True):
                needed.setdefault(preset, set()).update(metrics)
    return needed


def _select(specs: dict, choice: str, experiments: set[str]) -> list:
    """auto: specs whose presets have runs; all; none (generic: none, but figures keep the generic ones); or a
    comma-separated list of names."""
    if choice == "auto":
        return [s for s in specs.values() if _presets(s) & experiments]
    if choice == "all":
        return list(specs.values())
    if choice in ("none", "generic"):
        return []
    unknown = set(choice.split(",")) - set(specs)
    if unknown:
        raise cli.Refusal(f"unknown name(s): {', '.join(sorted(unknown))}; valid: {', '.join(specs)}")
    return [specs[name] for name in choice.split(",")]


def _generic_figures(runs: pd.DataFrame, covered: set[str]) -> list[Figure]:
    """Error (and misalignment) curves per experiment and task that no paper figure covers: named
    ``<experiment>_<task>`` (a word both end and start with said once: demo_tabular + tabular_multi →
    demo_tabular_multi), titled in words (``specs.preset_title``), methods in the paper's order."""
    figures = []
    for (experiment, task), part in runs.groupby(["experiment", "task"], sort=True):
        if experiment in covered:
            continue
        metrics = ["error"] + (["misalignment"] if task.startswith("tabular") else [])
        series = by_algorithm(*sorted(part.algorithm.unique(), key=algorithm_rank))
        panels = tuple(Panel(experiment, series, title=f"({tag}) {GENERIC_TITLE[metric]}" if len(metrics) > 1
                             else GENERIC_TITLE[metric], where={"task.name": task}, metrics=(metric,),
                             logy=task in BANDITS, ylabel="" if metric == "error" else "Misalignment (1 − cos)")
                       for tag, metric in zip("ab", metrics))
        figures.append(Figure(_generic_name(experiment, task), preset_title(experiment, task), panels))
    return figures


GENERIC_TITLE = {"error": "Error", "misalignment": "Misalignment"}


def _generic_name(experiment: str, task: str) -> str:
    last = experiment.rsplit("_", 1)[-1]
    return f"{experiment}{task[len(last):]}" if task.startswith(f"{last}_") else f"{experiment}_{task}"


CONCLUSIONS = "conclusions.md"  # a hand-written reading of a report folder's tables, linked from its README
# tables whose cells get per-seed dynamics: beside the paper's own seeds where its per-seed data exists (a file), ours
# only where the paper gives just the table's numbers (None)
SEED_DYNAMICS: dict[str, Path | None] = {"fig1b": dynamics.PAPER_FILE, "table3": None}


def seed_dynamics_section(spec: Table, report: Report, out: Path) -> str:
    """Per-seed dynamics of each cell of ``spec`` that has runs (ours, from the runs used in it), beside the
    paper's seeds where ``SEED_DYNAMICS`` names their file."""
    ours = {}
    for row, col, key in spec.cells():
        budget = report.budget(key.get("experiment", spec.preset), task=key.get("task.name"))  # as the table's
        resolved = report.resolve(spec.preset, key, budget)
        matrix, zero_var = report.matrix(resolved, "error"), report.matrix(resolved, "frac_zero_var")
        logged = np.array_equal(zero_var.seeds, matrix.seeds) and np.array_equal(zero_var.steps, matrix.steps)
        name = label({**row, **col})
        assert name not in ours, f"two cells of {spec.name} are both labelled {name!r}"
        if len(matrix.seeds):  # locked seeds only where every seed's every episode logs the zero-variance share
            ours[name] = dynamics.seed_dynamics(matrix.values, matrix.steps,
                                                zero_var=zero_var.values if logged else None)
    paper_file = SEED_DYNAMICS[spec.name]
    paper = ({} if paper_file is None else
             {label({"algorithm.name": name}): value for name, value in json.loads(paper_file.read_text()).items()})
    write_file(out / f"{spec.name}_dynamics.json", json.dumps(ours, indent=1) + "\n")
    source = (f"Paper: its own per-seed data ({paper_file.name}, from the reference repository's Fig 1b asset). "
              if paper_file else
              "The paper publishes no per-seed data for these cells: ours only, partial cells included (see seeds). ")
    return "\n".join([
        f"### {spec.title.split(' — ')[0]} — per-seed dynamics" + (" against the paper's seeds\n" if paper else "\n"),
        "Seed-mean error (%) at episodes; median over seeds of the first episode below 50% error (seeds that never "
        "get there listed apart); seeds that ever fall below 2% (solved) and, of those, the ones that later rise "
        f"above 20% at least once; seeds stuck late (mean error above 50% over the second half); the solved seeds' "
        "median share of episodes above 20% from their first solve on; seeds locked at the end (ours only: over "
        f"the last {100 * dynamics.LOCK_TAIL:g}% of episodes at least {100 * dynamics.LOCK_ZERO_VAR:g}% of groups "
        "have zero variance, so the group-relative gradient is zero, while the error stays above 20%). " + source +
        f"Ours per seed: [{spec.name}_dynamics.json]({spec.name}_dynamics.json).\n",
        dynamics.seed_dynamics_markdown(ours, {name: value for name, value in paper.items()
                                               if name in ours or not ours}), ""])


def write_report(paths: list[Path], out: Path, smooth: int = 1, tables: str = "auto", figures: str = "auto",
                 wandb: list[str] = (), wandb_api=None, wandb_filters: dict | None = None,
                 resamples: int = stats.RESAMPLES,
                 seed: int = stats.SEED, table_specs: dict[str, Table] = TABLES,
                 figure_specs: dict[str, Figure] = FIGURES, comparison: compare.Request | None = None) -> pd.DataFrame:
    """Write README.md, one md/csv/tex per paper table and png/pdf/caption per figure under ``out``, and the
    ``comparison``'s tables and figures where one is asked for (``compare.CompareError``, before anything is
    written, when the runs cannot give it), whole or not at all (``staged``); return the per-run table. ``out``
    must be new, empty (but for a hand-written ``conclusions.md``) or a folder an earlier report wrote
    (``claim_out``). With a comparison, the table's ``attrs["verdict"]`` holds what the terminal shows of it
    (``aggregates.terminal_summary``)."""
    _select(table_specs, tables, set())  # a name that is no table or figure: refused before any run is read
    _select(figure_specs, figures, set())
    previous = claim_out(out)
    needed = metrics_needed(table_specs, figure_specs)
    runs, curves = load_runs(paths, metrics=lambda experiment: GENERIC_METRICS | needed.get(experiment, set()),
                             wandb=wandb, wandb_api=wandb_api, wandb_filters=wandb_filters)
    if runs.empty:
        raise cli.Refusal(f"no run directories (with {SUMMARY_FILE}) found under: {', '.join(map(str, paths))}")
    report = Report(runs, curves, resamples, seed)
    compared = compare.prepare(report, comparison) if comparison is not None else None
    command = _report_command(paths, wandb, out, tables, figures, comparison)
    experiments = set(runs.experiment)

    with staged(out, previous) as stage:
        table = results_table(report).sort_values(["experiment", "task", "algorithm", "params"], kind="stable")
        write_file(stage / "runs.csv", table.to_csv(index=False))
        sections = [GENERATED_TITLE, f"Generated by `{command}`.\n"]
        if (out / CONCLUSIONS).exists():
            sections.append(f"What these tables say, read by hand (not regenerated): [{CONCLUSIONS}]({CONCLUSIONS}).\n")
        sections += _runs_section(table)

        records = []
        for spec in _select(table_specs, tables, experiments):
            cells = report.evaluate(spec)
            records.append(_table_records(spec, cells))
            sections += _write_table_section(spec, cells, report, stage)

        chosen = _select(figure_specs, figures, experiments)
        if figures != "none":
            chosen += _generic_figures(runs, set().union(*(_presets(f) for f in figure_specs.values())))
        figure_sections, figure_records = _write_figures(chosen, report, stage, smooth, command)
        sections += figure_sections
        records += figure_records

        if compared is not None:
            from harness.report import aggregates  # rliable only where a comparison is made (see its docstring)

            per_task, tasks = compare.write(compared, stage)
            across, aggregated = aggregates.write(compared, report, stage, command, compare.intro(compared))
            sections.append("\n".join([per_task, *across]))
            table.attrs["verdict"] = aggregates.terminal_summary(compared, tasks, aggregated)

        records = pd.concat(records) if records else pd.DataFrame(columns=RECORD)
        commands = missing_commands(records)
        sections += _missing_section(commands) + conflicts_section(records)
        write_file(stage / "missing.json", json.dumps(commands, indent=1) + "\n")
        files = {path.name for path in stage.iterdir()} | {README}
        write_file(stage / README, "\n".join(sections) + marker_line(files))
    return table


def _report_command(paths: list[Path], wandb: list[str], out: Path, tables: str, figures: str,
                    comparison: compare.Request | None) -> str:
    """The command that writes this report, as its README and captions show it: the runs' sources, ``--out`` and
    every option not left at its default."""
    sources = " ".join([*map(str, paths), *(f"--wandb {w}" for w in wandb)])
    selection = "".join(f" --{kind} {choice}" for kind, choice in (("tables", tables), ("figures", figures))
                        if choice != "auto")
    if comparison is not None:
        selection += (f" --compare {comparison.key} --baseline {comparison.baseline} "
                      f"--windows {','.join(comparison.windows)}")
    return f"python -m harness.report {sources} --out {out}{selection}"


def _runs_section(table: pd.DataFrame) -> list[str]:
    """The README's per-run tables, one per experiment and task, TPO first."""
    sections = ["## Runs\n",
                "Every run directory: final error (seed mean ± s.e. with population std, 95% bootstrap "
                "interval over seeds) and steps to the task's thresholds (first step whose seed-mean error is "
                "strictly below). Flags: failed runs (never in a table); interrupted or shorter runs (in a table "
                "only while their cell has no full-length run, and then marked †); diverged runs; partial runs "
                "(fewer steps than the preset, or a configuration whose runs, their seed ranges merged as a "
                "table merges them, hold fewer seeds than the preset: its cells are marked †). CPU s: the run's "
                "cost, every process of it (a resumed run's too); wall s: its last process alone.\n"]
    for (experiment, task), part in table.groupby(["experiment", "task"], sort=True):
        part = part.iloc[sorted(range(len(part)), key=lambda i: algorithm_rank(part.algorithm.iloc[i]))]  # TPO 1st
        shown = part.drop(columns=["experiment", "task"]).dropna(axis=1, how="all")
        sections += [f"### {experiment} — {task}\n", shown.to_markdown(index=False), ""]
    return sections


def _table_records(spec: Table, cells: pd.DataFrame) -> pd.DataFrame:
    """A paper table's cells as README records (``RECORD``), each named by the table, its row and its column."""
    where = [f"{spec.name} {', '.join(p for p in (row, col) if p)}" for row, col in zip(cells.row, cells.col)]
    return cells.assign(where=where)[RECORD]


def _write_table_section(spec: Table, cells: pd.DataFrame, report: Report, stage: Path) -> list[str]:
    """Write a paper table's files (and its per-seed dynamics, ``SEED_DYNAMICS``) into ``stage``; return its README
    section."""
    sections = [write_table(spec, cells, stage),
                f"Files: [{spec.name}.csv]({spec.name}.csv), [{spec.name}.tex]({spec.name}.tex)\n"]
    if spec.name in SEED_DYNAMICS:
        sections.append(seed_dynamics_section(spec, report, stage))
    return sections


def _write_figures(chosen: list[Figure], report: Report, stage: Path, smooth: int,
                   command: str) -> tuple[list[str], list[pd.DataFrame]]:
    """Write each figure's files into ``stage`` (``write_figure``); return the README's section on the figures drawn
    and every line's records (``RECORD``), one frame per figure."""
    written, records = [], []
    for figure in chosen:
        drawn, lines = write_figure(figure, report, stage, smooth, command)
        records.append(pd.DataFrame(lines, columns=RECORD))
        if drawn is not None:
            written.append(drawn)
    if not written:
        return [], records
    return ["## Figures\n", *(f"### {figure.title}\n\n![{figure.name}]({figure.name}.png)\n\n"
                               f"Caption and provenance: [{figure.name}.caption.md]({figure.name}.caption.md)\n"
                               for figure in written)], records


def _missing_section(commands: list[str]) -> list[str]:
    """The README's commands for the cells and figure lines still missing or incomplete (none: nothing)."""
    if not commands:
        return []
    return ["## Missing or incomplete cells\n", "Run these, then rerun the report with the new sweep folders added:\n",
            "```bash", *commands, "```", ""]
RECORD = ["preset", "status", "command", "where", "flags", "runs"]  # a table cell or a figure line, for the README


def conflicts_section(records: pd.DataFrame) -> list[str]:
    """The README's list of cells and figure lines in conflict (no number, not drawn): what overlaps, where, and
    the runs to choose from, instead of a command: running more would only add another copy."""
    conflicts = records[records.status == "conflict"]
    if conflicts.empty:
        return []
    lines = ["## Conflicts\n", "These cells have no number and these lines are not drawn: their runs overlap under "
             "the report's paths. Remove the extra runs from those paths (or pass fewer paths), then rerun the "
             "report:\n"]
    for (flags, runs), part in conflicts.groupby(["flags", "runs"], sort=False):
        lines.append("- " + conflict_note(", ".join(dict.fromkeys(part["where"])), flags, runs.split(" ")))
    return [*lines, ""]


README = "README.md"
GENERATED_TITLE = "# Results\n"
GENERATED = GENERATED_TITLE + "\nGenerated by `python -m harness.report "  # how every generated README.md starts
MARKER = "<!-- harness.report wrote: "  # the README's last line: the files this report wrote (JSON list)


def marker_line(files: set[str]) -> str:
    return f"\n{MARKER}{json.dumps(sorted(files))} -->\n"


STAGE = ".report"  # a report writes into out/.report.<pid>.tmp (``temporary_path``), then moves the files out
_STAGED = re.compile(r"\.report\.(\d+)\.tmp")


@contextlib.contextmanager
def staged(out: Path, previous: set[str]):
    """A folder inside ``out`` to write a report's files into; once all are written they replace those in ``out``,
    README.md last, and what the earlier report listed (``previous``) and this one did not write goes
    (``remove_stale``), as do the folders of reports killed while writing. A failure (a full disk) leaves ``out``
    as it was, and no temporary, and is one line: the file and why."""
    created = not out.exists()
    stage = temporary_path(out / STAGE)
    shutil.rmtree(stage, ignore_errors=True)  # left by a killed process whose id this one now has
    try:
        stage.mkdir(parents=True)
        yield stage
        written = {path.name for path in stage.iterdir()}
        for name in [*sorted(written - {README}), README]:
            os.replace(stage / name, out / name)
        remove_stale(out, previous, written)
        for leftover in leftover_stages(out):
            if not running(int(_STAGED.fullmatch(leftover.name)[1])):  # the stage of a report still writing stays
                shutil.rmtree(leftover, ignore_errors=True)
    except OSError as error:
        failed = Path(error.filename or out)
        shown = out / failed.name if failed.parent == stage else failed
        raise cli.Refusal(f"Error: could not write the report into {out}: {shown}: {error.strerror or error}"
                         ) from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if created and out.is_dir() and not any(out.iterdir()):
            out.rmdir()


def leftover_stages(out: Path) -> list[Path]:
    """The folders of reports into ``out`` killed before they moved their files in (or still writing)."""
    return [path for path in out.iterdir()
            if _STAGED.fullmatch(path.name) and path.is_dir() and not path.is_symlink()]


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def claim_out(out: Path) -> set[str]:
    """May a report write into ``out``? Yes when it does not exist yet (it is created), holds nothing but a
    hand-written ``conclusions.md``, or holds a README.md a report generated (it starts with ``GENERATED``). The
    files the earlier report listed are returned, the ones this one may remove as stale (none for a README written
    before the list was kept), with those a report killed while moving its files in had listed (the README in its
    ``leftover_stages``; without it, they would read as files no report wrote). Otherwise, and for a README.md
    written by hand, refuse in one line: a report never replaces or removes files it did not write."""
    if not out.exists():
        return set()
    if not out.is_dir():
        raise cli.Refusal(f"--out {out}: not a folder")
    leftovers = leftover_stages(out)
    moving = set().union(*(listed_files(_read_text(stage / README)) for stage in leftovers))
    readme = out / README
    if readme.exists():
        text = _read_text(readme)
        if not text.startswith(GENERATED):
            raise cli.Refusal(f"--out {out}: refusing to write there, its {README} was not generated by "
                             "`python -m harness.report` (hand-written files are never replaced); choose a new or "
                             "empty folder")
        return listed_files(text) | moving
    others = sorted(path.name for path in out.iterdir()
                    if path.name != CONCLUSIONS and path not in leftovers and path.name not in moving)
    if others:
        raise cli.Refusal(f"--out {out}: refusing to write there, it holds files no report wrote "
                         f"({', '.join(others[:3])}{', …' if len(others) > 3 else ''}) and no generated {README}; "
                         "choose a new or empty folder")
    return moving


def listed_files(readme: str) -> set[str]:
    """The files a generated README's marker line lists (empty where it has none)."""
    for line in reversed(readme.rstrip("\n").splitlines()[-3:]):
        if line.startswith(MARKER) and line.endswith(" -->"):
            try:
                names = json.loads(line[len(MARKER):-len(" -->")])
            except json.JSONDecodeError:
                return set()
            return {name for name in names if isinstance(name, str) and name == Path(name).name}
    return set()


def remove_stale(out: Path, previous: set[str], written: set[str]) -> None:
    """Delete what the earlier report wrote into ``out`` (its README's list) and this one did not (a table or figure
    no longer chosen, or no longer drawn), so a folder never shows a stale table beside fresh ones: a report folder
    belongs to one selection of tables and figures. Files no report listed (conclusions.md, a user's table) stay."""
    for name in sorted(previous - written - {README, CONCLUSIONS}):
        path = out / name
        if path.is_file() and not path.is_symlink():
            path.unlink()
