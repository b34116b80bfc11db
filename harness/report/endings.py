"""How each seed of a cell ends: learned, stuck where no gradient leads out, or still moving (README
"Beyond the paper").

A seed's first-epoch gradient vanishes (``grad_norm`` below ``VANISHING``: float rounding) when no group can move
it: every group is either all wrong or all right (zero variance), or made of K copies of one sequence, whose
gradients are equal while the group's weights (GRPO's advantages, TPO's p_θ − q) sum to zero. Under reward noise
a group's scores always vary, so only the copies are left: a seed whose gradient vanishes while its error is high has
collapsed onto wrong answers, deterministic on every prompt, and no loss here leads it out. A stuck seed is the
counterpart of ``harness.report.dynamics``' locked one, read from the gradient because under noise no group has zero
variance.

Per seed, over its last ``last`` logged episodes: the mean error, the share of episodes whose gradient vanishes and
the mean share of all-wrong groups; its first episode below ``reach`` and its last logged episode (a seed shorter
than the others ends earlier). Its ending: ``learned`` (mean error below ``learned``), ``stuck`` (not, with the
gradient vanishing in at least ``STUCK`` of those episodes), ``moving`` (not, otherwise), ``diverged`` (its error
became NaN: its curve ends at its last finite error, as ``harness.outputs.relapse_events`` ends it).

``python -m harness.report.endings results/runs/beyond_amplification/noise0.01_grpo ...`` prints one row per folder
(each folder: the runs of one configuration), then each folder's seeds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from harness.report.relapses import episodes

METRICS = ("error", "grad_norm", "all_fail")
VANISHING = 1e-6  # a gradient norm below this is rounding (an exactly zero gradient logs 1e-13 to 1e-10)
STUCK = 0.9  # share of the last episodes with a vanishing gradient that makes a failing seed stuck
ENDINGS = ("learned", "stuck", "moving", "diverged")


def first_column(reach: float) -> str:
    """The name of the column of a seed's first episode below ``reach``."""
    return f"first episode < {reach:g}"


def ending(steps: np.ndarray, errors: np.ndarray, grad_norms: np.ndarray, all_fail: np.ndarray, last: int = 100,
           reach: float = 0.05, learned: float = 0.05) -> dict:
    """One seed's ending (module docstring) from its logged episodes, in step order."""
    errors, grad_norms = np.asarray(errors, dtype=float), np.asarray(grad_norms, dtype=float)
    finite = np.flatnonzero(~np.isfinite(errors))
    end = int(finite[0]) if finite.size else len(errors)  # a diverged curve ends at its first NaN
    below = np.flatnonzero(errors[:end] < reach)
    tail = slice(max(end - last, 0), end)
    error, vanishing = float(errors[tail].mean()), float(np.mean(grad_norms[tail] < VANISHING))
    kind = ("diverged" if end < len(errors) else "learned" if error < learned
            else "stuck" if vanishing >= STUCK else "moving")
    return {"ending": kind, "error": error, "vanishing gradient": vanishing,
            "all-wrong groups": float(np.mean(np.asarray(all_fail, dtype=float)[tail])),
            first_column(reach): int(steps[below[0]]) if below.size else None,
            "last episode": int(steps[end - 1])}


def endings(path: Path, last: int = 100, reach: float = 0.05, learned: float = 0.05) -> pd.DataFrame:
    """Every seed under ``path`` (one configuration): one row each, indexed by seed."""
    wide = episodes(path, METRICS)
    rows = {seed: ending(frame.index.get_level_values("step").to_numpy(), frame["error"].to_numpy(),
                         frame["grad_norm"].to_numpy(), frame["all_fail"].to_numpy(), last, reach, learned)
            for seed, frame in wide.groupby(level="seed")}
    seeds = pd.DataFrame.from_dict(rows, orient="index").rename_axis("seed")
    return seeds.astype({first_column(reach): "Int64"})  # "never" stays missing, not NaN beside floats


def summary(path: Path, seeds: pd.DataFrame, reach: float = 0.05) -> dict:
    """A folder's row: its seeds, how many end each way, and how many never get below ``reach``."""
    counts = seeds["ending"].value_counts()
    return {"runs": str(path), "seeds": len(seeds), **{kind: int(counts.get(kind, 0)) for kind in ENDINGS},
            f"never < {reach:g}": int(seeds[first_column(reach)].isna().sum())}


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
    first = first_column(args.reach)
    for path, seeds in tables.items():
        shown = seeds.astype({first: object}).fillna({first: "never"})
        print(f"\n{path}: last {args.last} episodes\n\n" + shown.to_markdown(floatfmt=".3f"))


if __name__ == "__main__":
    main()
