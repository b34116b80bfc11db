"""What happens around a relapse, and how far the optimizer moves when the gradient is zero (issue 17, README
"Beyond the paper").

For every seed of the given runs (``metrics.csv``: error, frac_zero_var, update_muon, update_adam), episode by
logged episode:

* onsets: a seed that has solved the task (error < ``solved``) rises above ``relapse`` again. Per onset, the climb
  (episodes since the seed was last below ``solved``) and the share of zero-gradient episodes (every group
  zero-variance) among the ``window`` episodes before it; beside that, the same share before every calm episode of
  a solved seed (at or below ``relapse``). If relapses were set off by the optimizer drifting along old momentum
  while the gradient is zero, zero-gradient episodes would crowd the windows before onsets.
* drift: per seed, the mean update norm in zero-gradient episodes over that in the others, for the parameters
  Muon updates and those Adam updates. An optimizer whose step followed the gradient would give 0; a step of fixed
  size, 1.
* by gradient norm: episodes binned by their first-epoch gradient norm (0, then decades), with each bin's share of
  the episodes, mean update norms and mean error. A vanishing gradient that still takes a full step shows here even
  when it is not exactly zero.

``python -m harness.report.relapses results/runs/table3_terminal/prompts_h7_tpo ...`` prints one row per folder,
then one gradient-norm table per folder.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness.report.dynamics import RELAPSE, SOLVED
from harness.report.load import load_runs

METRICS = ("error", "frac_zero_var", "grad_norm", "update_muon", "update_adam")
GRADIENT_BINS = (0.0, 1e-3, 1e-2, 1e-1, 1.0)  # the first bin is exactly 0; the rest are [edge, next edge), last open


@dataclass
class Onsets:
    climbs: list[int] = field(default_factory=list)  # episodes from the last one below ``solved`` to the onset
    before_onset: list[float] = field(default_factory=list)  # zero-gradient share of the window before each onset
    before_calm: list[float] = field(default_factory=list)  # the same before each calm episode of a solved seed


def onsets(errors: np.ndarray, zero_gradient: np.ndarray, solved: float = SOLVED, relapse: float = RELAPSE,
           window: int = 10, into: Onsets | None = None) -> Onsets:
    """One seed's relapse onsets (one per excursion above ``relapse`` after being below ``solved``) and the
    zero-gradient shares of the windows before onsets and before calm episodes; windows that would start before
    the first episode are left out. NaN errors (diverged) neither solve nor relapse."""
    found = into if into is not None else Onsets()
    last_solved = None
    for t, error in enumerate(errors):
        if error < solved:
            last_solved = t
        if last_solved is None:
            continue
        share = float(zero_gradient[t - window:t].mean()) if t >= window else None
        if error > relapse:
            found.climbs.append(t - last_solved)
            if share is not None:
                found.before_onset.append(share)
            last_solved = None  # the next onset needs a new solve
        elif error <= relapse and share is not None:  # a NaN error is neither
            found.before_calm.append(share)
    return found


def drift(update: np.ndarray, zero_gradient: np.ndarray) -> float:
    """Mean update norm in zero-gradient episodes over that in the others (NaN without both, or without the
    diagnostic)."""
    update = np.asarray(update, dtype=float)
    if not zero_gradient.any() or zero_gradient.all() or not np.isfinite(update).all():
        return float("nan")
    return float(update[zero_gradient].mean() / update[~zero_gradient].mean())


def episodes(path: Path) -> pd.DataFrame:
    """Every logged episode of every seed under ``path``: one row per (run, seed, step), one column per metric."""
    _, curves = load_runs([path], metrics=list(METRICS))
    return curves.astype({"metric": str}).pivot(index=["run", "seed", "step"], columns="metric", values="value")


def by_gradient_norm(wide: pd.DataFrame) -> pd.DataFrame:
    """Episodes binned by gradient norm (``GRADIENT_BINS``): share, mean update norms and mean error per bin."""
    wide = wide[np.isfinite(wide["grad_norm"])]
    edges = np.array(GRADIENT_BINS[1:])
    names = ["0", f"(0, {edges[0]:g})", *(f"[{a:g}, {b:g})" for a, b in zip(edges[:-1], edges[1:])),
             f"≥ {edges[-1]:g}"]
    norm = wide["grad_norm"].to_numpy()
    index = np.where(norm == 0, 0, 1 + np.searchsorted(edges, norm, side="right"))
    columns = [name for name in ("update_muon", "update_adam", "error") if name in wide]
    table = wide[columns].groupby(index).mean()
    table.insert(0, "share of episodes", pd.Series(index).value_counts(normalize=True).sort_index())
    table.index = pd.Index([names[i] for i in table.index], name="gradient norm")
    return table


def summarize(path: Path, window: int = 10, wide: pd.DataFrame | None = None) -> dict:
    """The onsets and drift of every seed under ``path``, in one row."""
    wide = episodes(path) if wide is None else wide
    found, ratios = Onsets(), {"update_muon": [], "update_adam": []}
    for _, seed in wide.groupby(level=["run", "seed"]):
        zero_gradient = seed["frac_zero_var"].to_numpy() >= 1.0
        onsets(seed["error"].to_numpy(), zero_gradient, window=window, into=found)
        for name in ratios:
            if name in seed:
                ratios[name].append(drift(seed[name].to_numpy(), zero_gradient))
    climbs = np.array(found.climbs)

    def spread(values: list[float]) -> str:
        values = np.array(values)[np.isfinite(values)]
        return f"{np.median(values):.2f} [{values.min():.2f}, {values.max():.2f}] ({len(values)})" if len(values) \
            else "–"

    return {"runs": str(path), "seeds": int(wide.groupby(level=["run", "seed"]).ngroups), "onsets": len(climbs),
            "median climb": float(np.median(climbs)) if len(climbs) else None,
            "climb ≤ 3": f"{np.mean(climbs <= 3):.2f}" if len(climbs) else "–",
            f"zero-gradient share, {window} before an onset": f"{np.mean(found.before_onset):.2f}"
            if found.before_onset else "–",
            "… before a calm episode": f"{np.mean(found.before_calm):.2f}" if found.before_calm else "–",
            "Muon drift, median [range] (seeds)": spread(ratios["update_muon"]),
            "Adam drift": spread(ratios["update_adam"])}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.report.relapses", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run folders (e.g. one cell of results/runs)")
    parser.add_argument("--window", type=int, default=10, help="episodes before an onset or a calm episode")
    args = parser.parse_args(argv)
    tables = {path: episodes(path) for path in args.paths}
    print(pd.DataFrame([summarize(path, args.window, wide) for path, wide in tables.items()]).to_markdown(index=False))
    for path, wide in tables.items():
        print(f"\n{path}\n\n" + by_gradient_norm(wide).to_markdown(floatfmt=".4f"))


if __name__ == "__main__":
    main()
