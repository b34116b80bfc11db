"""``python -m harness.report PATH... --out DIR``: run directories (and W&B projects) → tables, figures, README.

Reads every run directory (one holding ``summary.json``) below the given paths, e.g. one or more Hydra sweep
folders ``multirun/<experiment>/<time>``. Writes, under ``--out``: ``README.md`` (every run, every table, every
figure), ``runs.csv``, per paper table ``<table>.md|.csv|.tex`` (ours with a 95% bootstrap interval, the paper's
number, paired difference to TPO), per figure ``<fig>.png|.pdf|.caption.md``, and ``missing.json`` (the commands
that fill missing or partial cells).

With ``--compare KEY --baseline VALUE [--windows final,mean]`` it also compares every value of a config key
(``algorithm``, ``algorithm.eta``, ``experiment``, ...) with the baseline value on each task (the distinct values
of the runs' other keys), on the normalised score 1 − error: per task paired over seeds, ``compare_tasks.md|.csv``;
across tasks with rliable (IQM, optimality gap, probability of improvement), ``compare_aggregates.md|.csv``; and
rliable's performance profiles and IQM against the step, ``compare_profiles`` and ``compare_sample_efficiency``
(png, pdf, caption). Tasks without usable runs of the baseline are left out with a warning
(``harness/report/compare.py``).

``python -m harness.report --wandb-workspace ENTITY/PROJECT --preset NAME`` writes no report: it saves a W&B workspace
of the project's mirrored runs of the preset (or of ``--wandb-filters``), one section per metric against ``step``, a
line per W&B group (mean ± s.e. over its seeds) in the figures' algorithm colours
(``harness/report/wandb_workspace.py``).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # many small matrix products: threaded BLAS only adds contention

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # files only, never a window

from harness import cli  # noqa: E402
from harness.report import compare, stats  # noqa: E402
from harness.report.build import write_report  # noqa: E402
from harness.report.specs import FIGURES, TABLES  # noqa: E402

MIN_RESAMPLES = 100  # an interval from fewer is noise
MAX_RESAMPLES = 100_000  # each resample is a (seeds × steps) draw; more would only cost memory


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.report", description=__doc__,
                        details='docs/usage.md, "The report" and "Comparing any set of runs"',
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", type=Path, help="sweep folders or run directories")
    parser.add_argument("--out", type=Path, default=Path("reports/latest"),
                        help="output folder: new, empty, or one an earlier report wrote (its README.md generated); "
                             "tables and figures that report listed and this one does not write are removed, "
                             "hand-written files are never replaced")
    parser.add_argument("--tables", default="auto",
                        help=f"auto (those whose preset has runs) | all | none | comma list of: {', '.join(TABLES)}")
    parser.add_argument("--figures", default="auto",
                        help=f"auto | all | none | generic (only the per-preset curves drawn for runs no paper "
                             f"figure covers) | comma list of: {', '.join(FIGURES)}")
    parser.add_argument("--smooth", type=cli.number(int, low=1, high=100_000), default=1,
                        help="causal moving-average window for figures that do not fix their own (Fig 1b: 40)")
    parser.add_argument("--resamples", type=cli.number(int, low=MIN_RESAMPLES, high=MAX_RESAMPLES),
                        default=stats.RESAMPLES, help="bootstrap resamples")
    parser.add_argument("--seed", type=cli.number(int, low=0, high=2**32 - 1), default=stats.SEED,
                        help="bootstrap generator seed")
    parser.add_argument("--wandb", action="append", default=[], metavar="ENTITY/PROJECT",
                        help="also read runs from this W&B project (full histories via scan_history)")
    parser.add_argument("--wandb-filters", type=json.loads, default=None,
                        help='MongoDB-style W&B run filter as JSON, e.g. \'{"group": {"$regex": "^table3"}}\' '
                             '(the runs --wandb reads, or those --wandb-workspace shows)')
    parser.add_argument("--wandb-workspace", metavar="ENTITY/PROJECT",
                        help="instead of a report, save a W&B workspace of this project's runs of --preset (and/or "
                             "--wandb-filters): a section per metric against step, a line per group (mean ± s.e. "
                             "over seeds) in the figures' algorithm colours")
    parser.add_argument("--preset", metavar="NAME",
                        help="with --wandb-workspace: the experiment preset (conf/experiment/NAME.yaml) whose runs "
                             "it shows")
    parser.add_argument("--compare", metavar="KEY",
                        help="also compare every value of this config key (algorithm, algorithm.eta, experiment, "
                             "task.V, ...) with --baseline on each task (the distinct values of the other keys) and "
                             "across tasks (rliable), on the score 1 − error")
    parser.add_argument("--baseline", metavar="VALUE", help="with --compare: the value the others are compared with")
    parser.add_argument("--windows", metavar="W,...",
                        help=f"with --compare: comma list of {', '.join(compare.WINDOWS)} (the score at the last "
                             "logged step; its mean over the run); default final")
    args = parser.parse_args(argv)
    if args.wandb_workspace is not None:
        save_workspace(parser, args)
        return
    if args.preset is not None:
        parser.refuse("--preset chooses the runs of --wandb-workspace; a report reads every run of "
                      "its run folders (or --wandb projects)")
    if not args.paths and not args.wandb:
        parser.error("give at least one run folder, --wandb ENTITY/PROJECT, or --wandb-workspace ENTITY/PROJECT")
    comparison = comparison_request(parser, args)
    if args.wandb:
        check_wandb(parser, args.wandb)
    try:
        table = write_report(args.paths, args.out, smooth=args.smooth, tables=args.tables, figures=args.figures,
                             wandb=args.wandb, wandb_filters=args.wandb_filters, resamples=args.resamples,
                             seed=args.seed, comparison=comparison)
    except compare.CompareError as error:
        parser.refuse(str(error))
    print(table.attrs.get("verdict") or table.to_string(index=False))  # a comparison: its verdict, not every run
    print(f"\nwritten to {args.out}/")


def check_wandb(parser: cli.Parser, projects: list[str]) -> None:
    """``--wandb``: refused in one line (exit 2, before any run is read) for a malformed ENTITY/PROJECT or when W&B
    has no API key (``wandb login``)."""
    import wandb

    from harness.report.wandb_workspace import PROJECT_PATH

    for project in projects:
        if not PROJECT_PATH.fullmatch(project):
            parser.refuse(f"--wandb {project!r}: expected ENTITY/PROJECT (e.g. my-team/tpo-bench)")
    try:
        wandb.Api()
    except wandb.errors.UsageError as error:  # no API key
        parser.refuse(f"--wandb {projects[0]}: {error}")


def comparison_request(parser: cli.Parser, args: argparse.Namespace) -> compare.Request | None:
    """``--compare``/``--baseline``/``--windows`` as a request, or None; refused in one line (exit 2, before any run
    is read) when one of the first two comes without the other or a window is not one of ``compare.WINDOWS``."""
    if args.compare is None and args.baseline is None and args.windows is None:
        return None
    if args.compare is None or args.baseline is None:
        parser.refuse("--compare KEY and --baseline VALUE go together (--windows only with them)")
    windows = tuple(dict.fromkeys(args.windows.split(","))) if args.windows is not None else ("final",)
    unknown = [window for window in windows if window not in compare.WINDOWS]
    if unknown:
        parser.refuse(f"--windows {args.windows}: unknown {', '.join(unknown)}; choose from "
                      f"{', '.join(compare.WINDOWS)}")
    return compare.Request(args.compare, args.baseline, windows)


def save_workspace(parser: cli.Parser, args: argparse.Namespace) -> None:
    """``--wandb-workspace``: refused in one line (exit 2, nothing saved) with run folders or ``--wandb``, which it
    does not read, and for what ``wandb_workspace.save_workspace`` refuses."""
    if args.paths or args.wandb:
        parser.refuse("--wandb-workspace shows the runs of its own W&B project: give no run folders "
                      "or --wandb")
    from harness.report import wandb_workspace  # wandb only where it is used: the report reads run folders

    try:
        workspace = wandb_workspace.save_workspace(args.wandb_workspace, args.preset, args.wandb_filters)
    except wandb_workspace.WorkspaceError as error:
        parser.refuse(str(error))
    print(f"saved W&B workspace {workspace.name!r} in {args.wandb_workspace}")


if __name__ == "__main__":
    main()
