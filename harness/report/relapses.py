"""``python -m harness.report.relapses results/runs/table3_terminal/prompts_h7_tpo ...``: relapse onsets and
optimizer drift of each cell's seeds (each folder: the runs of one configuration; definitions in
``harness.report.dynamics``). Prints one row per folder, then each folder's relapse risk by zero-gradient streak
and its episodes by gradient norm.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from harness.report.dynamics import RELAPSE_METRICS, Onsets, by_gradient_norm, relapse_summary, risk_by_streak
from harness.report.load import episodes


def summarize(path: Path, wide: pd.DataFrame | None = None) -> tuple[dict, Onsets]:
    """The folder's row (``relapse_summary`` of its episodes, ``wide`` when already read) and its pooled onsets."""
    row, found = relapse_summary(episodes(path, RELAPSE_METRICS) if wide is None else wide)
    return {"runs": str(path), **row}, found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.report.relapses", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run folders, one cell each (e.g. under results/runs)")
    args = parser.parse_args(argv)
    tables = {path: episodes(path, RELAPSE_METRICS) for path in args.paths}
    summaries = {path: summarize(path, wide) for path, wide in tables.items()}
    print(pd.DataFrame([row for row, _ in summaries.values()]).to_markdown(index=False))
    for path, wide in tables.items():
        print(f"\n{path}: relapse risk by zero-gradient streak\n\n"
              + risk_by_streak(summaries[path][1]).to_markdown(index=False, floatfmt=".4f"))
        print(f"\n{path}: episodes by gradient norm\n\n" + by_gradient_norm(wide).to_markdown(floatfmt=".4f"))


if __name__ == "__main__":
    main()
