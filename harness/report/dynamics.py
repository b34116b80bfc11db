"""Seed dynamics: how each seed of a cell gets where it ends, not only where the seed mean ends (README "Beyond the
paper"): the definitions below, and the commands that read cell folders into them (each folder: the runs of one
configuration; ``relapses`` prints its three tables with the folders side by side, under their algorithms' labels):

    python -m harness.report.dynamics relapses results/runs/table3_terminal/prompts_h7_tpo ...
    python -m harness.report.dynamics endings results/runs/beyond_amplification/noise0.01_grpo ...
    python -m harness.report.dynamics paper --paper-npz PATH

The events along one curve are summary.json's (``harness.rundir.summary``).

Events along one curve (``relapse_events``): a seed *solves* when, unsolved, its error falls below ``SOLVED``
(2%); it *relapses* when, solved, its error rises above ``RELAPSE`` (20%), and may then solve again. A non-finite
error (the seed diverged) ends its curve, in every analysis here.

A cell's per-seed dynamics (``seed_dynamics``), the report's section beside the paper's Fig 1b seeds. For sparse
rewards the seed mean hides seeds that solve early, seeds that never do, and seeds that solve and relapse:

* mean error at chosen episodes (seed mean, as the paper's Fig 1b summary);
* per seed, the first episode with error below ``HALF`` (50%): how fast learning starts;
* solved and relapsed seeds (the events above); per seed, its relapse count and its mean error over the second half
  of the run (the late phase, where relapses decide the mean);
* the late phase's two sources of error, told apart: seeds *stuck late* (late-phase mean error above ``HALF``: never
  solved, or solved only near the end; or diverged before the late phase) and, per solved seed, the share of its
  episodes from the first solve on with error above ``RELAPSE`` (how long relapses last, not only how many);
* where the runs log ``frac_zero_var`` (ours; the paper's data has only errors), seeds that end *locked*: over the
  last ``LOCK_TAIL`` of the episodes, on average at least ``LOCK_ZERO_VAR`` of their groups have zero variance while
  their error stays above ``RELAPSE``. A policy deterministic on wrong answers, or one that never found the reward,
  gets an exactly zero group-relative gradient there, so nothing in the loss pulls it out.

``distribution_tests(ours, paper)`` compares two sets of seeds distribution against distribution: two-sided
Mann–Whitney U on the per-seed final errors, first episodes below 50%, late-phase means, relapse counts and
post-solve relapse shares of solved seeds, and Fisher's exact test on the solved and stuck counts (p-values,
uncorrected for the seven tests).

Relapse onsets and optimizer drift (``relapse_summary``), per seed and logged episode of ``RELAPSE_METRICS``. A
zero-gradient episode is one whose groups all have zero variance (``frac_zero_var`` = 1): every group-relative loss
here then has an exactly zero first-epoch gradient.

* onsets: a solved seed rises above ``RELAPSE`` again (a relapse event); the climb is the number of episodes since
  it was last below ``SOLVED``.
* risk by zero-gradient streak: every episode of a solved seed that is still calm (error at most ``RELAPSE``) is an
  episode at risk; its streak is the number of zero-gradient episodes in a row that end with it. The risk is the
  share of those episodes followed directly by an onset. If drift along old momentum while the gradient is zero set
  relapses off, the risk would grow with the streak. (Comparing the episodes before onsets with those before calm
  ones instead would be confounded: the error is measured on the episode's own rollouts, so a solved episode is
  zero-gradient exactly when its error is 0.)
* drift: per seed, the mean update norm in zero-gradient episodes over that in the others, for the parameters Muon
  updates and those Adam updates. An optimizer whose step followed the gradient would give 0; a step of fixed size, 1.
* by gradient norm: episodes binned by their first-epoch gradient norm (exactly 0, then decades), with each bin's
  share of the episodes, mean update norms and mean error. A vanishing gradient that still takes a full step shows
  here even when it is not exactly zero.

How each seed ends (``ending``): learned, stuck where no gradient leads out, or still moving. A seed's first-epoch
gradient vanishes (``grad_norm`` below ``VANISHING``: float rounding) when no group can move it: every group is
either all wrong or all right (zero variance), or made of K copies of one sequence, whose gradients are equal while
the group's weights (GRPO's advantages, TPO's p_θ − q) sum to zero. Under reward noise a group's scores always vary,
so only the copies are left: a seed whose gradient vanishes while its error is high has collapsed onto wrong
answers, deterministic on every prompt, and no loss here leads it out. A stuck seed is the counterpart of a locked
one, read from the gradient because under noise no group has zero variance. Per seed, over its last ``last`` logged
episodes: the mean error, the share of episodes whose gradient vanishes and the mean share of all-wrong groups; its
first episode below ``reach`` and its last logged episode (a seed shorter than the others ends earlier). Its
ending: ``learned`` (mean error below ``learned``), ``stuck`` (not, with the gradient vanishing in at least
``STUCK`` of those episodes), ``moving`` (not, otherwise), ``diverged`` (its error became NaN).

``python -m harness.report.dynamics paper --paper-npz PATH`` computes the per-seed dynamics from the paper's own
per-seed data for Fig 1b (``assets/token_reversal_sparse_reward_results.npz`` in the reference repository, github
JeanKaddour/tpo) and writes them to ``results/paper/fig1b_seed_dynamics.json``, which the report sets beside ours.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from harness import cli, locations
from harness.report.load import episodes
from harness.report.seedwise import markdown
from harness.report.specs import label
from harness.rundir.outputs import summary_files
from harness.rundir.summary import relapse_events, until_diverged

SOLVED, RELAPSE, HALF = 0.02, 0.20, 0.50
EPISODES = (100, 200, 300, 400, 500, 1000, 1500, 1999)
LOCK_TAIL, LOCK_ZERO_VAR = 0.1, 0.98  # locked: the last 10% of episodes, >= 98% of groups zero-variance
PAPER_FILE = locations.PAPER / "fig1b_seed_dynamics.json"
RELAPSE_METRICS = ("error", "frac_zero_var", "grad_norm", "update_muon", "update_adam")
GRADIENT_EDGES = (1e-3, 1e-2, 1e-1, 1.0)  # bins: exactly 0, (0, 1e-3), [1e-3, 1e-2), ..., ≥ 1
STREAK_BINS = ((0, 0), (1, 2), (3, 10), (11, None))  # zero-gradient episodes in a row, inclusive ranges
ENDING_METRICS = ("error", "grad_norm", "all_fail")
VANISHING = 1e-6  # a gradient norm below this is rounding (an exactly zero gradient logs 1e-13 to 1e-10)
STUCK = 0.9  # share of the last episodes with a vanishing gradient that makes a failing seed stuck
ENDINGS = ("learned", "stuck", "moving", "diverged")


# A cell's per-seed dynamics, and the paper's seeds against ours


def seed_dynamics(errors: np.ndarray, steps: np.ndarray, episodes=EPISODES, solved: float = SOLVED,
                  relapse: float = RELAPSE, half: float = HALF, zero_var: np.ndarray | None = None) -> dict:
    """The per-seed dynamics (module docstring) of ``errors`` (seeds × steps, logged at ``steps``); NaN entries
    (diverged) never count as below a threshold. ``zero_var`` (the same shape: each episode's share of
    zero-variance groups) adds the locked seeds."""
    errors = np.asarray(errors, dtype=float)
    steps = np.asarray(steps)
    below_half = [_first_step(row < half, steps) for row in errors]
    late_mean = _late_means(errors, steps)
    run_mean = _run_means(errors)
    events = [relapse_events(steps, row, solved, relapse) for row in errors]
    post_solve = [_post_solve_share(row, solved, relapse) for row in errors]
    relapsed = [seed["relapses"] > 0 for seed in events]
    n_solved = sum(seed["solved"] > 0 for seed in events)
    return {
        "seeds": int(errors.shape[0]),
        "mean_at": _means_at(errors, steps, episodes),
        "first_below_half": below_half,
        "median_first_below_half": _median_step(below_half),
        "never_below_half": int(sum(step is None for step in below_half)),
        "solved": n_solved,
        "relapsed": int(sum(relapsed)),
        "final_per_seed": [float(v) for v in errors[:, -1]],
        "relapses_per_seed": [seed["relapses"] if seed["solved"] else None for seed in events],
        "late_mean_per_seed": late_mean,  # None: diverged before the late phase
        "run_mean_per_seed": run_mean,  # the area under the seed's curve over its logged episodes
        "stuck_late": int(sum(mean is None or mean > half for mean in late_mean)),  # diverged before it: stuck
        "post_solve_relapse_share_per_seed": post_solve,  # None: never solved
        **_locks(errors, zero_var, relapse),
        "thresholds": {"solved": solved, "relapse": relapse, "half": half},
    }


def _means_at(errors: np.ndarray, steps: np.ndarray, episodes) -> dict[str, float]:
    """The seed-mean error at each of ``episodes`` that was logged."""
    index = {int(step): i for i, step in enumerate(steps)}
    return {str(e): float(np.nanmean(errors[:, index[e]])) for e in episodes if e in index}


def _late_means(errors: np.ndarray, steps: np.ndarray) -> list[float | None]:
    """Per seed, its mean error over the second half of the steps (its finite part); None where it has none."""
    late = errors[:, steps >= steps[len(steps) // 2]]
    return [float(row[np.isfinite(row)].mean()) if np.isfinite(row).any() else None for row in late]


def _run_means(errors: np.ndarray) -> list[float | None]:
    """Per seed, its mean error over every logged episode; None where it diverged."""
    return [float(row.mean()) if np.isfinite(row).all() else None for row in errors]


def _median_step(steps: list[int | None]) -> float | None:
    """The median of the steps that are there (None: never), or None without any."""
    reached = [step for step in steps if step is not None]
    return float(np.median(reached)) if reached else None


def _locks(errors: np.ndarray, zero_var: np.ndarray | None, relapse: float) -> dict:
    """The locked seeds, per seed and counted (nothing without ``zero_var``)."""
    if zero_var is None:
        return {}
    locked = _locked_seeds(errors, zero_var, relapse)
    return {"locked_per_seed": locked, "locked": int(sum(bool(seed) for seed in locked))}


def _first_step(mask: np.ndarray, steps: np.ndarray) -> int | None:
    return int(steps[np.argmax(mask)]) if mask.any() else None


def _post_solve_share(row: np.ndarray, solved: float, relapse: float) -> float | None:
    """Share of a seed's logged episodes, from its first below ``solved`` on, with error above ``relapse``; None
    if it never solves."""
    curve = until_diverged(row)
    below = curve < solved
    return float((curve[np.argmax(below):] > relapse).mean()) if below.any() else None


def _locked_seeds(errors: np.ndarray, zero_var: np.ndarray, relapse: float) -> list[bool | None]:
    """Per seed, whether it ends locked (module docstring); None where its last episodes are not finite."""
    tail = max(1, round(LOCK_TAIL * errors.shape[1]))
    locked = []
    for error, share in zip(errors[:, -tail:], np.asarray(zero_var, dtype=float)[:, -tail:]):
        finite = np.isfinite(error).all() and np.isfinite(share).all()
        locked.append(bool(share.mean() >= LOCK_ZERO_VAR and error.mean() > relapse) if finite else None)
    return locked


TESTS = (("final error", "final_per_seed"), ("first episode < 50%", "first_below_half"),
         ("late-phase mean error", "late_mean_per_seed"), ("relapses per solved seed", "relapses_per_seed"),
         ("post-solve share > 20%", "post_solve_relapse_share_per_seed"))
COUNTS = (("seeds solved", "solved"), ("seeds stuck late", "stuck_late"))


def distribution_tests(ours: dict, paper: dict) -> dict[str, float | None]:
    """Two-sided p-values of ours against the paper's seeds (module docstring); None where a side lacks the data."""
    from scipy import stats as scipy_stats

    p = {}
    for name, key in TESTS:
        a, b = ([v for v in side.get(key) or () if v is not None] for side in (ours, paper))
        p[name] = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue) if a and b else None
    for name, key in COUNTS:
        table = [[side[key], side["seeds"] - side[key]] for side in (ours, paper)]
        p[name] = float(scipy_stats.fisher_exact(table).pvalue)
    return p


def seed_dynamics_markdown(ours: dict[str, dict], paper: dict[str, dict]) -> str:
    """A table of ours against the paper's per-seed dynamics, one row per (algorithm, source), in the order of
    ``ours`` (then the paper's others), and the p-values of ``distribution_tests`` where both sides have seeds."""
    header = ["algorithm", "source", "seeds", *(f"mean @{e}" for e in EPISODES), "median first < 50%",
              "never < 50%", "solved (< 2%)", "solved then > 20%", "stuck late (> 50%)",
              "post-solve > 20% (median share)", "locked at the end"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for algorithm in [*ours, *(name for name in paper if name not in ours)]:
        for source, table in (("ours", ours), ("paper", paper)):
            if algorithm in table:
                lines.append(_dynamics_row(algorithm, source, table[algorithm]))
    return "\n".join(lines + _tests_lines(ours, paper))


def _dynamics_row(algorithm: str, source: str, d: dict) -> str:
    """One row of ``seed_dynamics_markdown``'s table: one source's seeds of one algorithm (``seed_dynamics``)."""
    mean = [f"{100 * d['mean_at'][str(e)]:.1f}" if str(e) in d["mean_at"] else "–" for e in EPISODES]
    median = "–" if d["median_first_below_half"] is None else f"{d['median_first_below_half']:.0f}"
    stuck = f"{d['stuck_late']}/{d['seeds']}"
    shares = [v for v in d["post_solve_relapse_share_per_seed"] if v is not None]
    share = f"{100 * np.median(shares):.1f}%" if shares else "–"
    locked = f"{d['locked']}/{d['seeds']}" if "locked" in d else "–"  # the paper's data has no zero-var
    return "| " + " | ".join([algorithm, source, str(d["seeds"]), *mean, median, str(d["never_below_half"]),
                              f"{d['solved']}/{d['seeds']}", f"{d['relapsed']}/{d['solved']}", stuck, share,
                              locked]) + " |"


def _tests_lines(ours: dict[str, dict], paper: dict[str, dict]) -> list[str]:
    """The p-values of ``distribution_tests`` for each algorithm with seeds on both sides, under a blank line (none
    without such an algorithm)."""
    both = [name for name in ours if name in paper and ours[name]["seeds"] and paper[name]["seeds"]]
    compared = {algorithm: distribution_tests(ours[algorithm], paper[algorithm]) for algorithm in both}
    if not compared:
        return []
    names = list(next(iter(compared.values())))
    lines = ["", "Ours against the paper's seeds, two-sided p (Mann–Whitney U; Fisher's exact test for seeds "
             "solved and stuck; uncorrected for the seven tests; late phase = the second half of the episodes; "
             "post-solve share = each solved seed's share of episodes above 20% from its first solve on):", "",
             "| algorithm | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
    for algorithm, p in compared.items():
        lines.append(f"| {algorithm} | " + " | ".join("–" if p[n] is None else f"{p[n]:.2g}" for n in names) + " |")
    return lines


# Relapse onsets and optimizer drift


@dataclass
class Onsets:
    """A seed's (or several seeds') relapse onsets and the episodes at risk of one."""

    climbs: list[int] = field(default_factory=list)  # episodes from the last one below ``solved`` to the onset
    streaks: list[int] = field(default_factory=list)  # per episode at risk: zero-gradient episodes in a row to it
    followed: list[bool] = field(default_factory=list)  # per episode at risk: is the next episode an onset?


def onsets(errors: np.ndarray, zero_gradient: np.ndarray, solved: float = SOLVED, relapse: float = RELAPSE,
           into: Onsets | None = None) -> Onsets:
    """One seed's onsets and episodes at risk (module docstring), added to ``into`` when given. Its onsets are its
    relapse events."""
    found = into if into is not None else Onsets()
    last_solved, streak, at_risk = None, 0, False
    for t, error in enumerate(until_diverged(errors)):
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


def gradient_bins() -> list[str]:
    """The names of ``by_gradient_norm``'s bins, in order."""
    edges = GRADIENT_EDGES
    return ["0", f"(0, {edges[0]:g})", *(f"[{a:g}, {b:g})" for a, b in zip(edges[:-1], edges[1:])),
            f"≥ {edges[-1]:g}"]


def by_gradient_norm(wide: pd.DataFrame) -> pd.DataFrame:
    """Episodes binned by gradient norm (``GRADIENT_EDGES``). The share and the error are over every episode with a
    gradient norm; each update norm over those that also log it (runs older than the diagnostic do not)."""
    wide = wide[np.isfinite(wide["grad_norm"])]
    edges, names = np.array(GRADIENT_EDGES), gradient_bins()
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


def relapse_summary(wide: pd.DataFrame) -> tuple[dict, Onsets]:
    """The onsets and drift of every seed of one cell (``wide``: one row per seed and step, one column per metric of
    ``RELAPSE_METRICS``): one row, and the pooled onsets."""
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
    row = {"seeds": len(seeds), "onsets": len(climbs), "seeds with onsets": with_onsets,
           "median climb": float(np.median(climbs)) if len(climbs) else None,
           "climb ≤ 3": float(np.mean(climbs <= 3)) if len(climbs) else None,
           "Muon drift, median [range] (seeds)": _median_and_range(ratios["update_muon"]),
           "Adam drift": _median_and_range(ratios["update_adam"])}
    return row, found


def _median_and_range(values: list[float]) -> str:
    """``median [min, max] (count)`` of the finite values, or – without any."""
    values = np.array(values)[np.isfinite(values)]
    return f"{np.median(values):.2f} [{values.min():.2f}, {values.max():.2f}] ({len(values)})" if len(values) else "–"


# How each seed ends


def first_reach_column(reach: float) -> str:
    """The name of the column of a seed's first episode below ``reach``."""
    return f"first episode < {reach:g}"


def ending(steps: np.ndarray, errors: np.ndarray, grad_norms: np.ndarray, all_fail: np.ndarray, last: int = 100,
           reach: float = 0.05, learned: float = 0.05) -> dict:
    """One seed's ending (module docstring) from its logged episodes, in step order."""
    errors, grad_norms = np.asarray(errors, dtype=float), np.asarray(grad_norms, dtype=float)
    end = len(until_diverged(errors))
    below = np.flatnonzero(errors[:end] < reach)
    tail = slice(max(end - last, 0), end)
    error, vanishing = float(errors[tail].mean()), float(np.mean(grad_norms[tail] < VANISHING))
    kind = ("diverged" if end < len(errors) else "learned" if error < learned
            else "stuck" if vanishing >= STUCK else "moving")
    return {"ending": kind, "error": error, "vanishing gradient": vanishing,
            "all-wrong groups": float(np.mean(np.asarray(all_fail, dtype=float)[tail])),
            first_reach_column(reach): int(steps[below[0]]) if below.size else None,
            "last episode": int(steps[end - 1])}


def seed_endings(wide: pd.DataFrame, last: int = 100, reach: float = 0.05, learned: float = 0.05) -> pd.DataFrame:
    """Every seed of one cell (``wide``: one row per seed and step, one column per metric of ``ENDING_METRICS``):
    one row each, indexed by seed."""
    rows = {seed: ending(frame.index.get_level_values("step").to_numpy(), frame["error"].to_numpy(),
                         frame["grad_norm"].to_numpy(), frame["all_fail"].to_numpy(), last, reach, learned)
            for seed, frame in wide.groupby(level="seed")}
    seeds = pd.DataFrame.from_dict(rows, orient="index").rename_axis("seed")
    return seeds.astype({first_reach_column(reach): "Int64"})  # "never" stays missing, not NaN beside floats


def ending_counts(seeds: pd.DataFrame, reach: float = 0.05) -> dict:
    """A cell's seeds (``seed_endings``), how many end each way, and how many never get below ``reach``."""
    counts = seeds["ending"].value_counts()
    return {"seeds": len(seeds), **{kind: int(counts.get(kind, 0)) for kind in ENDINGS},
            f"never < {reach:g}": int(seeds[first_reach_column(reach)].isna().sum())}


def cell_relapses(path: Path, wide: pd.DataFrame | None = None) -> tuple[dict, Onsets]:
    """A cell folder's row (``relapse_summary`` of its episodes, ``wide`` when already read) and its pooled onsets."""
    row, found = relapse_summary(episodes(path, RELAPSE_METRICS) if wide is None else wide)
    return {"runs": str(path), **row}, found


def cell_endings(path: Path, last: int = 100, reach: float = 0.05, learned: float = 0.05) -> pd.DataFrame:
    """Every seed of a cell folder: one row each, indexed by seed (``seed_endings``)."""
    return seed_endings(episodes(path, ENDING_METRICS), last, reach, learned)


def percent(share: float) -> str:
    """A share as a percentage to two significant digits (0.4017 → 40%, 0.0308 → 3.1%, 0.0003 → 0.03%); 0 and –
    (no episodes) as such."""
    if not np.isfinite(share):
        return "–"
    if share == 0:
        return "0"
    return f"{100 * share:.0f}%" if share >= 0.1 else f"{100 * share:.2g}%"


def cell_labels(paths: list[Path]) -> list[str]:
    """Each cell folder's algorithm label (``TPO``), or its path where two folders share one."""
    labels = [label({"algorithm.name": json.loads(summary_files(path)[0].read_text())["algorithm"]})
              for path in paths]
    return labels if len(set(labels)) == len(labels) else [str(path) for path in paths]


def relapses_markdown(cells: dict[str, tuple[dict, Onsets, pd.DataFrame]]) -> str:
    """The ``relapses`` command's three tables, cells side by side (``cells``: label → its ``cell_relapses`` row,
    pooled onsets and episodes): onsets and drift per cell; episodes by gradient norm; risk by zero-gradient
    streak."""
    summary = [[name, str(row["seeds"]), f"{row['onsets']:,}", str(row["seeds with onsets"]),
                "–" if row["median climb"] is None else f"{row['median climb']:g}",
                "–" if row["climb ≤ 3"] is None else percent(row["climb ≤ 3"]),
                row["Muon drift, median [range] (seeds)"], row["Adam drift"]]
               for name, (row, _, _) in cells.items()]
    binned = {name: by_gradient_norm(wide) for name, (_, _, wide) in cells.items()}
    def norm(value: float) -> str:
        return f"{value:.3f}" if np.isfinite(value) else "–"

    columns = {"share of episodes": percent, "update_muon": norm, "update_adam": norm, "error": percent}
    headers = {"share of episodes": "share of episodes", "update_muon": "Muon ‖Δθ‖", "update_adam": "Adam ‖Δθ‖",
               "error": "error"}
    shown = {name: [column for column in columns if column in table] for name, table in binned.items()}
    norms = [[bin_name, *(columns[column](binned[name].loc[bin_name, column]) if bin_name in binned[name].index
                          else "–" for name in cells for column in shown[name])] for bin_name in gradient_bins()]
    risks = {name: risk_by_streak(found) for name, (_, found, _) in cells.items()}
    streaks = [[streak, *(cell for name in cells for cell in (
                   f"{risks[name].loc[index, 'episodes at risk']:,}", f"{risks[name].loc[index, 'onsets next']:,}",
                   percent(risks[name].loc[index, "risk per episode"])))]
               for index, streak in enumerate(risks[next(iter(cells))]["zero-gradient episodes in a row"])]
    return "\n\n".join([
        markdown(["", "seeds", "onsets", "seeds with onsets", "median climb (episodes)", "climbs ≤ 3 episodes",
                  "Muon drift, median [range] (seeds)", "Adam drift, median [range] (seeds)"], summary),
        markdown(["gradient norm", *(f"{name}: {headers[column]}" for name in cells for column in shown[name])],
                 norms),
        markdown(["zero-gradient episodes in a row", *(f"{name}: {what}" for name in cells
                                                       for what in ("episodes at risk", "onsets next", "risk"))],
                 streaks)])


def _print_relapses(args: argparse.Namespace) -> None:
    if len({path.resolve() for path in args.paths}) < len(args.paths):
        raise cli.Refusal("relapses: a folder is given twice; give each cell's folder once")
    tables = [episodes(path, RELAPSE_METRICS) for path in args.paths]  # refuses a folder without runs first
    print(relapses_markdown({name: (*cell_relapses(path, wide), wide)
                             for name, path, wide in zip(cell_labels(args.paths), args.paths, tables)}))


def _print_endings(args: argparse.Namespace) -> None:
    tables = {path: cell_endings(path, args.last, args.reach, args.learned) for path in args.paths}
    print(pd.DataFrame([{"runs": str(path), **ending_counts(seeds, args.reach)}
                        for path, seeds in tables.items()]).to_markdown(index=False))
    first = first_reach_column(args.reach)
    for path, seeds in tables.items():
        shown = seeds.assign(**{first: ["never" if pd.isna(step) else step for step in seeds[first]]})
        print(f"\n{path}: last {args.last} episodes\n\n" + shown.to_markdown(floatfmt=".3f"))


def _write_paper(args: argparse.Namespace) -> None:
    data = np.load(args.paper_npz)
    result = {algorithm: seed_dynamics(data[f"{algorithm}_errors"], data["episodes"])
              for algorithm in ("tpo", "grpo", "dg")}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(seed_dynamics_markdown({}, result))


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.report.dynamics", description=__doc__,
                        details="harness/report/dynamics.py",
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    folders = {"nargs": "+", "type": Path, "help": "run folders, one cell each (e.g. under results/runs)"}
    relapses = commands.add_parser("relapses", help="relapse onsets, risk by zero-gradient streak, optimizer drift")
    relapses.add_argument("paths", **folders)
    relapses.set_defaults(action=_print_relapses)
    endings = commands.add_parser("endings", help="how each seed ends: learned, stuck, moving or diverged")
    endings.add_argument("paths", **folders)
    endings.add_argument("--last", type=cli.number(int, low=1, high=10**9), default=100,
                         help="logged episodes a seed's ending is read from")
    endings.add_argument("--reach", type=cli.number(float, low=0, high=1), default=0.05,
                         help="error threshold of the first-episode column")
    endings.add_argument("--learned", type=cli.number(float, low=0, high=1), default=0.05,
                         help="mean error below this: learned")
    endings.set_defaults(action=_print_endings)
    paper = commands.add_parser("paper", help="the paper's Fig 1b seeds (its per-seed npz) → " + PAPER_FILE.name)
    paper.add_argument("--paper-npz", type=Path, required=True, help="token_reversal_sparse_reward_results.npz")
    paper.add_argument("--out", type=Path, default=PAPER_FILE)
    paper.set_defaults(action=_write_paper)
    args = parser.parse_args(argv)
    args.action(args)


if __name__ == "__main__":
    main()
