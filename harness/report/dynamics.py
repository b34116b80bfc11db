"""Per-seed dynamics of an error curve: how a cell's seeds get there, not only where the mean ends.

For sparse-reward cells the seed mean hides what matters: seeds that solve the task early, seeds that never do,
and seeds that solve it and relapse. For a seeds × episodes error matrix:

* mean error at chosen episodes (seed mean, as the paper's Fig 1b summary);
* per seed, the first episode with error below ``half`` (50%): how fast learning starts;
* solved: seeds whose error ever falls below ``solved`` (2%); relapsed: solved seeds whose error later rises above
  ``relapse`` (20%) at least once (``harness.outputs.relapse_events``, as in summary.json; a seed's curve ends where
  it diverged); per seed, its relapse count and its mean error over the second half of the run (the late phase,
  where relapses decide the mean);
* the late phase's two sources of error, told apart: seeds *stuck late* (late-phase mean error above ``half``: never
  solved, or solved only near the end; or diverged before the late phase) and, per solved seed, the share of its
  episodes from the first solve on with error above ``relapse`` (how long relapses last, not only how many);
* where the runs log ``frac_zero_var`` (ours; the paper's data has only errors), seeds that end *locked*: over the
  last ``LOCK_TAIL`` of the episodes, on average at least ``LOCK_ZERO_VAR`` of their groups have zero variance while
  their error stays above ``relapse``. A policy deterministic on wrong answers, or one that never found the reward,
  gets an exactly zero group-relative gradient there, so nothing in the loss pulls it out.

``distribution_tests(ours, paper)`` compares the two sets of seeds distribution against distribution: two-sided
Mann–Whitney U on the per-seed final errors, first episodes below 50%, late-phase means, relapse counts and
post-solve relapse shares of solved seeds, and Fisher's exact test on the solved and stuck counts (p-values,
uncorrected for the seven tests).

``python -m harness.report.dynamics --paper-npz PATH`` computes the same numbers from the paper's own per-seed data
for Fig 1b (``assets/token_reversal_sparse_reward_results.npz`` in the reference repository, github
JeanKaddour/tpo) and writes them to ``results/paper/fig1b_seed_dynamics.json``, which the report sets beside ours.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from harness.outputs import relapse_events

EPISODES = (100, 200, 300, 400, 500, 1000, 1500, 1999)
SOLVED, RELAPSE, HALF = 0.02, 0.20, 0.50
LOCK_TAIL, LOCK_ZERO_VAR = 0.1, 0.98  # locked: the last 10% of episodes, >= 98% of groups zero-variance
PAPER_FILE = Path(__file__).resolve().parents[2] / "results" / "paper" / "fig1b_seed_dynamics.json"


def seed_dynamics(errors: np.ndarray, steps: np.ndarray, episodes=EPISODES, solved: float = SOLVED,
                  relapse: float = RELAPSE, half: float = HALF, zero_var: np.ndarray | None = None) -> dict:
    """The summary above for ``errors`` (seeds × steps, logged at ``steps``); NaN entries (diverged) never count
    as below a threshold. ``zero_var`` (the same shape: each episode's share of zero-variance groups) adds the
    locked seeds."""
    errors = np.asarray(errors, dtype=float)
    steps = np.asarray(steps)
    index = {int(step): i for i, step in enumerate(steps)}
    below_half = [_first(row < half, steps) for row in errors]
    late = errors[:, steps >= steps[len(steps) // 2]]
    late_mean = [float(row[np.isfinite(row)].mean()) if np.isfinite(row).any() else None for row in late]
    run_mean = [float(row.mean()) if np.isfinite(row).all() else None for row in errors]  # None: it diverged
    events = [relapse_events(steps, row, solved, relapse) for row in errors]
    post_solve = [_post_solve_share(row, solved, relapse) for row in errors]
    relapsed = [seed["relapses"] > 0 for seed in events]
    n_solved = sum(seed["solved"] > 0 for seed in events)
    reached = [step for step in below_half if step is not None]
    locks = {}
    if zero_var is not None:
        locked = _locked(errors, zero_var, relapse)
        locks = {"locked_per_seed": locked, "locked": int(sum(bool(seed) for seed in locked))}
    return {
        "seeds": int(errors.shape[0]),
        "mean_at": {str(e): float(np.nanmean(errors[:, index[e]])) for e in episodes if e in index},
        "first_below_half": below_half,
        "median_first_below_half": float(np.median(reached)) if reached else None,
        "never_below_half": int(sum(step is None for step in below_half)),
        "solved": n_solved,
        "relapsed": int(sum(relapsed)),
        "final_per_seed": [float(v) for v in errors[:, -1]],
        "relapses_per_seed": [seed["relapses"] if seed["solved"] else None for seed in events],
        "late_mean_per_seed": late_mean,  # None: diverged before the late phase
        "run_mean_per_seed": run_mean,  # the area under the seed's curve over its logged episodes
        "stuck_late": int(sum(mean is None or mean > half for mean in late_mean)),  # diverged before it: stuck
        "post_solve_relapse_share_per_seed": post_solve,  # None: never solved
        **locks,
        "thresholds": {"solved": solved, "relapse": relapse, "half": half},
    }


def _locked(errors: np.ndarray, zero_var: np.ndarray, relapse: float) -> list[bool | None]:
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
    for name, field in TESTS:
        a, b = ([v for v in side.get(field) or () if v is not None] for side in (ours, paper))
        p[name] = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue) if a and b else None
    for name, field in COUNTS:
        table = [[side[field], side["seeds"] - side[field]] for side in (ours, paper)]
        p[name] = float(scipy_stats.fisher_exact(table).pvalue)
    return p


def _first(mask: np.ndarray, steps: np.ndarray) -> int | None:
    return int(steps[np.argmax(mask)]) if mask.any() else None


def _post_solve_share(row: np.ndarray, solved: float, relapse: float) -> float | None:
    """Share of a seed's logged episodes, from its first below ``solved`` on, with error above ``relapse``; None
    if it never solves. A non-finite error ends the curve, as in ``relapse_events``."""
    ended = ~np.isfinite(row)
    curve = row[:np.argmax(ended)] if ended.any() else row
    below = curve < solved
    return float((curve[np.argmax(below):] > relapse).mean()) if below.any() else None


def markdown(ours: dict[str, dict], paper: dict[str, dict]) -> str:
    """A table of ours against the paper's per-seed statistics, one row per (algorithm, source), in the order of
    ``ours`` (then the paper's others)."""
    header = ["algorithm", "source", "seeds", *(f"mean @{e}" for e in EPISODES), "median first < 50%",
              "never < 50%", "solved (< 2%)", "solved then > 20%", "stuck late (> 50%)",
              "post-solve > 20% (median share)", "locked at the end"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for algorithm in [*ours, *(name for name in paper if name not in ours)]:
        for source, table in (("ours", ours), ("paper", paper)):
            if algorithm not in table:
                continue
            d = table[algorithm]
            mean = [f"{100 * d['mean_at'][str(e)]:.1f}" if str(e) in d["mean_at"] else "–" for e in EPISODES]
            median = "–" if d["median_first_below_half"] is None else f"{d['median_first_below_half']:.0f}"
            stuck = f"{d['stuck_late']}/{d['seeds']}"
            shares = [v for v in d["post_solve_relapse_share_per_seed"] if v is not None]
            share = f"{100 * np.median(shares):.1f}%" if shares else "–"
            locked = f"{d['locked']}/{d['seeds']}" if "locked" in d else "–"  # the paper's data has no zero-var
            lines.append("| " + " | ".join([algorithm, source, str(d["seeds"]), *mean, median,
                                            str(d["never_below_half"]), f"{d['solved']}/{d['seeds']}",
                                            f"{d['relapsed']}/{d['solved']}", stuck, share, locked]) + " |")
    both = [name for name in ours if name in paper and ours[name]["seeds"] and paper[name]["seeds"]]
    compared = {algorithm: distribution_tests(ours[algorithm], paper[algorithm]) for algorithm in both}
    if compared:
        names = list(next(iter(compared.values())))
        lines += ["", "Ours against the paper's seeds, two-sided p (Mann–Whitney U; Fisher's exact test for seeds "
                  "solved and stuck; uncorrected for the seven tests; late phase = the second half of the episodes; "
                  "post-solve share = each solved seed's share of episodes above 20% from its first solve on):", "",
                  "| algorithm | " + " | ".join(names) + " |", "|" + "---|" * (len(names) + 1)]
        for algorithm, p in compared.items():
            lines.append(f"| {algorithm} | " + " | ".join("–" if p[n] is None else f"{p[n]:.2g}" for n in names) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.report.dynamics", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paper-npz", type=Path, required=True, help="token_reversal_sparse_reward_results.npz")
    parser.add_argument("--out", type=Path, default=PAPER_FILE)
    args = parser.parse_args(argv)
    data = np.load(args.paper_npz)
    result = {algorithm: seed_dynamics(data[f"{algorithm}_errors"], data["episodes"])
              for algorithm in ("tpo", "grpo", "dg")}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(markdown({}, result))


if __name__ == "__main__":
    main()
