"""What happens around a relapse, and how far the optimizer moves when the gradient vanishes (README
"Beyond the paper").

For every seed of the given runs (``metrics.csv``: error, frac_zero_var, grad_norm, update_muon, update_adam),
episode by logged episode. A zero-gradient episode is one whose groups all have zero variance (``frac_zero_var`` =
1): every group-relative loss here then has an exactly zero first-epoch gradient.

* onsets: a solved seed (error < ``solved``) rises above ``relapse`` again; the climb is the number of episodes
  since it was last below ``solved``. A seed's events are those of ``harness.outputs.relapse_events`` (its curve
  ends at its first NaN: diverged).
* risk by zero-gradient streak: every episode of a solved seed that is still calm (error at most ``relapse``) is
  an episode at risk; its streak is the number of zero-gradient episodes in a row that end with it. The risk is
  the share of those episodes followed directly by an onset. If drift along old momentum while the gradient is zero
  set relapses off, the risk would grow with the streak. (Comparing the episodes before onsets with those before
  calm ones instead would be confounded: the error is measured on the episode's own rollouts, so a solved episode
  is zero-gradient exactly when its error is 0.)
* drift: per seed, the mean update norm in zero-gradient episodes over that in the others, for the parameters
  Muon updates and those Adam updates. An optimizer whose step followed the gradient would give 0; a step of fixed
  size, 1.
* by gradient norm: episodes binned by their first-epoch gradient norm (exactly 0, then decades), with each bin's
  share of the episodes, mean update norms and mean error. A vanishing gradient that still takes a full step shows
  here even when it is not exactly zero.

``python -m harness.report.relapses results/runs/table3_terminal/prompts_h7_tpo ...`` prints one row per folder
(each folder: the runs of one configuration), then the risk and gradient-norm tables of each.
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
GRADIENT_EDGES = (1e-3, 1e-2, 1e-1, 1.0)  # bins: exactly 0, (0, 1e-3), [1e-3, 1e-2), ..., ≥ 1
STREAK_BINS = ((0, 0), (1, 2), (3, 10), (11, None))  # zero-gradient episodes in a row, inclusive ranges


@dataclass
class Onsets:
    """A seed's (or several seeds') relapse onsets and the episodes at risk of one."""

    climbs: list[int] = field(default_factory=list)  # episodes from the last one below ``solved`` to the onset
    streaks: list[int] = field(default_factory=list)  # per episode at risk: zero-gradient episodes in a row to it
    followed: list[bool] = field(default_factory=list)  # per episode at risk: is the next episode an onset?


def onsets(errors: np.ndarray, zero_gradient: np.ndarray, solved: float = SOLVED, relapse: float = RELAPSE,
           into: Onsets | None = None) -> Onsets:
    """One seed's onsets and episodes at risk (module docstring), added to ``into`` when given."""
    found = into if into is not None else Onsets()
    last_solved, streak, at_risk = None, 0, False
    for t, error in enumerate(errors):
        if not np.isfinite(error):
            break  # diverged: the curve ends here, as in relapse_events
        onset = last_solved is not None and error > relapse
        if at_risk:  # the previous episode was a calm one of a solved seed
            found.followed.append(onset)
        if error < solved:
            last_solved = t
        if onset:
            found.climbs.append(t - last_solved)
            last_solved = None  # the next onset needs a new solve
        streak = streak + 1 if zero_gradient[t] else 0
        at_risk = last_solved is not None and error <= relapse
        if at_risk:
            found.streaks.append(streak)
    del found.streaks[len(found.followed):]  # the last episode at risk has no next episode
    return found


def drift(update: np.ndarray, zero_gradient: np.ndarray) -> float:
    """Mean update norm in zero-gradient episodes over that in the others, over the episodes that log it (NaN
    without both kinds, or without the diagnostic)."""
    update = np.asarray(update, dtype=float)
    logged = np.isfinite(update)
    zero, other = update[logged & zero_gradient], update[logged & ~zero_gradient]
    return float(zero.mean() / other.mean()) if zero.size and other.size else float("nan")


def episodes(path: Path, metrics: tuple[str, ...] = METRICS) -> pd.DataFrame:
    """Every logged episode of every seed under ``path`` (one configuration): one row per (seed, step), one column
    per metric. Runs of different configurations, or a seed in two runs, are refused: they would be pooled."""
    runs, curves = load_runs([path], metrics=list(metrics))
    if runs.signature.nunique() > 1:
        raise SystemExit(f"{path}: runs of {runs.signature.nunique()} configurations; give one cell's folder")
    seeds = [seed for ids in runs.seed_ids for seed in ids]
    if len(seeds) != len(set(seeds)):
        raise SystemExit(f"{path}: a seed is in more than one run; keep one copy of each seed")
    return curves.astype({"metric": str}).pivot(index=["seed", "step"], columns="metric", values="value")


def by_gradient_norm(wide: pd.DataFrame) -> pd.DataFrame:
    """Episodes binned by gradient norm (``GRADIENT_EDGES``). The share and the error are over every episode with a
    gradient norm; each update norm over those that also log it (runs older than the diagnostic do not)."""
    wide = wide[np.isfinite(wide["grad_norm"])]
    edges = np.array(GRADIENT_EDGES)
    names = ["0", f"(0, {edges[0]:g})", *(f"[{a:g}, {b:g})" for a, b in zip(edges[:-1], edges[1:])),
             f"≥ {edges[-1]:g}"]
    norm = wide["grad_norm"].to_numpy()
    index = np.where(norm == 0, 0, 1 + np.searchsorted(edges, norm, side="right"))
    columns = [name for name in ("update_muon", "update_adam", "error") if name in wide]
    table = wide[columns].groupby(index).mean()
    table.insert(0, "share of episodes", pd.Series(index).value_counts(normalize=True).sort_index())
    table.index = pd.Index([names[i] for i in table.index], name="gradient norm")
    return table


def risk_by_streak(found: Onsets) -> pd.DataFrame:
    """Per zero-gradient streak (``STREAK_BINS``): episodes at risk, onsets that followed, and their ratio."""
    streaks, followed = np.array(found.streaks), np.array(found.followed, dtype=bool)
    rows = []
    for low, high in STREAK_BINS:
        inside = (streaks >= low) & (streaks <= (np.inf if high is None else high))
        count, hits = int(inside.sum()), int(followed[inside].sum())
        rows.append({"zero-gradient episodes in a row": f"{low}" if low == high else
                     f"{low}–{high}" if high is not None else f"≥ {low}",
                     "episodes at risk": count, "onsets next": hits,
                     "risk per episode": hits / count if count else float("nan")})
    return pd.DataFrame(rows)


def summarize(path: Path, wide: pd.DataFrame | None = None) -> tuple[dict, Onsets]:
    """The onsets and drift of every seed under ``path``: one row, and the pooled onsets."""
    wide = episodes(path) if wide is None else wide
    found, ratios, with_onsets = Onsets(), {"update_muon": [], "update_adam": []}, 0
    seeds = list(wide.groupby(level="seed"))
    for _, seed in seeds:
        zero_gradient = seed["frac_zero_var"].to_numpy() >= 1.0  # NaN: not known to be zero
        before = len(found.climbs)
        onsets(seed["error"].to_numpy(), zero_gradient, into=found)
        with_onsets += len(found.climbs) > before
        for name in ratios:
            if name in seed:
                ratios[name].append(drift(seed[name].to_numpy(), zero_gradient))
    climbs = np.array(found.climbs)

    def spread(values: list[float]) -> str:
        values = np.array(values)[np.isfinite(values)]
        return f"{np.median(values):.2f} [{values.min():.2f}, {values.max():.2f}] ({len(values)})" if len(values) \
            else "–"

    row = {"runs": str(path), "seeds": len(seeds), "onsets": len(climbs), "seeds with onsets": with_onsets,
           "median climb": float(np.median(climbs)) if len(climbs) else None,
           "climb ≤ 3": f"{np.mean(climbs <= 3):.2f}" if len(climbs) else "–",
           "Muon drift, median [range] (seeds)": spread(ratios["update_muon"]),
           "Adam drift": spread(ratios["update_adam"])}
    return row, found


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.report.relapses", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="run folders, one cell each (e.g. under results/runs)")
    args = parser.parse_args(argv)
    tables = {path: episodes(path) for path in args.paths}
    summaries = {path: summarize(path, wide) for path, wide in tables.items()}
    print(pd.DataFrame([row for row, _ in summaries.values()]).to_markdown(index=False))
    for path, wide in tables.items():
        print(f"\n{path}: relapse risk by zero-gradient streak\n\n"
              + risk_by_streak(summaries[path][1]).to_markdown(index=False, floatfmt=".4f"))
        print(f"\n{path}: episodes by gradient norm\n\n" + by_gradient_norm(wide).to_markdown(floatfmt=".4f"))


if __name__ == "__main__":
    main()
