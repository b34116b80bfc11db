"""``python -m harness.report.endings results/runs/beyond_amplification/noise0.01_grpo ...``: how each seed of each
cell ends, learned, stuck where no gradient leads out, still moving or diverged (each folder: the runs of one
configuration; definitions in ``harness.report.dynamics``). Prints one row per folder, then each folder's seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from harness.report.dynamics import ENDING_METRICS, ending_counts, first_reach_column, seed_endings
from harness.report.load import episodes


def endings(path: Path, last: int = 100, reach: float = 0.05, learned: float = 0.05) -> pd.DataFrame:
    """Every seed under ``path`` (one cell): one row each, indexed by seed (``seed_endings``)."""
    return seed_endings(episodes(path, ENDING_METRICS), last, reach, learned)


def summary(path: Path, seeds: pd.DataFrame, reach: float = 0.05) -> dict:
    """The folder's row: ``ending_counts`` of its ``seeds`` under its path."""
    return {"runs": str(path), **ending_counts(seeds, reach)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.report.endings", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run folders, one cell each (e.g. under results/runs)")
    parser.add_argument("--last", type=int, default=100, help="logged episodes a seed's ending is read from")
    parser.add_argument("--reach", type=float, default=0.05, help="error threshold of the first-episode column")
    parser.add_argument("--learned", type=float, default=0.05, help="mean error below this: learned")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}")
    tables = {path: endings(path, args.last, args.reach, args.learned) for path in args.paths}
    rows = [summary(path, seeds, args.reach) for path, seeds in tables.items()]
    print(pd.DataFrame(rows).to_markdown(index=False))
    first = first_reach_column(args.reach)
    for path, seeds in tables.items():
        shown = seeds.astype({first: object}).fillna({first: "never"})
        print(f"\n{path}: last {args.last} episodes\n\n" + shown.to_markdown(floatfmt=".3f"))


if __name__ == "__main__":
    main()
