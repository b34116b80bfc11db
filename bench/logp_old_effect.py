"""What the reference's ℓ_old rounding does to training (docs/reproduction.md §14.19): the runs of
``experiment=beyond_logp_old`` (each algorithm with ``task.logp_old=exact`` and ``sampled``, the same seeds, prompts
and samples), compared seed by seed.

    python -m harness -m experiment=beyond_logp_old hydra.sweep.dir=results/runs/beyond_logp_old
    python bench/logp_old_effect.py results/runs/beyond_logp_old [--out results/beyond_logp_old/effect.md]

Per seed: the episodes without any success (error exactly 1), the first episode whose error is below 0.5 (``never``
within the run counts as the run's length), the mean error over the run, and the mean error over its last 100
episodes. Each row gives the seed mean of both settings and sampled − exact with a paired percentile-bootstrap 95%
interval over seeds (2,000 resamples from ``default_rng(0)``, the report's rule), and the fraction of seeds on which
sampled is lower.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.report.load import read_config  # noqa: E402

RESAMPLES, SEED = 2000, 0


def curves(run_dir: Path) -> np.ndarray:
    """Error per (seed, episode) of one run, seeds in id order."""
    path = next(p for p in (run_dir / "metrics.csv", run_dir / "metrics.csv.gz") if p.exists())
    frame = pd.read_csv(path)
    return frame.pivot(index="seed", columns="step", values="error").sort_index().to_numpy()


def per_seed(errors: np.ndarray) -> dict[str, np.ndarray]:
    episodes = errors.shape[1]
    below = errors < 0.5
    first = np.where(below.any(1), below.argmax(1), episodes).astype(float)
    return {"episodes without a success": (errors == 1).sum(1).astype(float),
            "first episode below 50% error": first,
            "mean error over the run": errors.mean(1),
            "mean error, last 100 episodes": errors[:, -100:].mean(1)}


def paired_interval(difference: np.ndarray) -> tuple[float, float]:
    counts = np.random.default_rng(SEED).multinomial(len(difference), np.full(len(difference), 1 / len(difference)),
                                                      size=RESAMPLES)
    means = counts @ difference / len(difference)
    return tuple(np.quantile(means, [0.025, 0.975], method="inverted_cdf"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    found: dict[tuple[str, str], np.ndarray] = {}
    for metrics in sorted(args.runs.rglob("metrics.csv*")):
        flat = read_config(metrics.parent)
        found[flat["algorithm.name"], flat["task.logp_old"]] = curves(metrics.parent)
    lines = [f"<!-- computed by: python bench/logp_old_effect.py {args.runs} -->",
             "| algorithm | per seed | seeds | exact | sampled | sampled − exact [95% CI] | sampled lower |",
             "|---|---|---|---|---|---|---|"]
    for algorithm in sorted({a for a, _ in found}):
        exact, sampled = found.get((algorithm, "exact")), found.get((algorithm, "sampled"))
        if exact is None or sampled is None:
            continue
        assert exact.shape == sampled.shape, (algorithm, exact.shape, sampled.shape)
        a, b = per_seed(exact), per_seed(sampled)
        for name in a:
            difference = b[name] - a[name]
            low, high = paired_interval(difference)
            lower = float(((b[name] < a[name]) + 0.5 * (b[name] == a[name])).mean())
            lines.append(f"| {algorithm} | {name} | {len(difference)} | {a[name].mean():.3g} | {b[name].mean():.3g} "
                         f"| {difference.mean():+.3g} [{low:+.3g}, {high:+.3g}] | {lower:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text)


if __name__ == "__main__":
    main()
