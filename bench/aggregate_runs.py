"""Report aggregation speed: 1,000 synthetic run directories × 2,000 steps → tidy frame → tables.

    python bench/aggregate_runs.py [--runs 1000] [--steps 2000] [--seeds 10] [--metrics error|all]

Writes the run directories into a temporary folder (not timed): token-task format, ``error`` plus the seven
Section 4 diagnostics per row; each metrics.csv is a copy of one of a few templates, since content does not change
parsing cost. The first 56 runs fill the Table 1 and Table 3 grids, the rest are an extra sweep. Then times
``load_runs`` (pandas C parser, a thread per core, a numpy melt, one concatenation), the per-run table (final
error with its bootstrap interval, steps to 5%/1%) and Tables 1 and 3 (bootstrap intervals for every cell,
paired comparisons).
BLAS runs single-threaded, as in ``python -m harness.report``. A measurement, not a test; the target is 30 s.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import tempfile
import time
from pathlib import Path

for _name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # as `python -m harness.report` does

import numpy as np  # noqa: E402

from harness.report.build import results_table  # noqa: E402
from harness.report.load import load_runs  # noqa: E402
from harness.report.specs import TABLES  # noqa: E402
from harness.report.synthetic import learning_curves, make_config, write_run  # noqa: E402
from harness.report.tables import Report  # noqa: E402

DIAGNOSTICS = ("grad_norm", "frac_success", "all_fail", "frac_zero_var", "weight_winners", "weight_losers",
               "target_entropy")


def configs(count: int, seeds: int, steps: int) -> list[dict]:
    """Table 1 and Table 3 cells first, then an algorithm × H × V × K × η sweep."""
    out = []
    for table in (TABLES["table1"], TABLES["table3"]):
        for _, _, key in table.cells():
            params = {k: v for k, v in key.items() if k != "algorithm.name"}
            out.append(make_config(table.preset, "token_reversal", key["algorithm.name"], seeds, steps, **params))
    grid = itertools.product(("tpo", "grpo", "ppo", "dg", "grpo_no_kl"), (5, 6, 7, 8, 9, 10), (2, 4, 8, 16),
                             (4, 8, 16, 32, 64), (0.5, 1.0, 2.0))
    for algorithm, h, v, k, eta in grid:
        if len(out) == count:
            break
        out.append(make_config("bench", "token_reversal", algorithm, seeds, steps, **{
            "task.H": h, "task.V": v, "task.K": k, "algorithm.eta": eta}))
    return out[:count]


def write_sweep(root: Path, count: int, seeds: int, steps: int, templates: int = 8) -> None:
    rng = np.random.default_rng(0)
    files = []
    for index in range(templates):
        floor, rate = rng.choice([0.0, 0.02, 0.5]), 10 ** rng.uniform(-3, -2)
        values = {"error": learning_curves(rng, seeds, steps, 1.0, floor, rate)}
        values |= {name: rng.random((seeds, steps)).astype(np.float32) for name in DIAGNOSTICS}
        config = make_config("template", "token_reversal", "tpo", seeds, steps)
        files.append(write_run(root / "templates" / str(index), config, values) / "metrics.csv")
    for index, config in enumerate(configs(count, seeds, steps)):
        write_run(root / "sweep" / f"{index:04d}", config, metrics_file=files[index % templates])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--metrics", choices=("error", "all"), default="error",
                        help="columns read: error (what the tables use) or all eight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        start = time.perf_counter()
        write_sweep(root, args.runs, args.seeds, args.steps)
        written = time.perf_counter() - start
        size = sum(p.stat().st_size for p in (root / "sweep").rglob("metrics.csv")) / 1e9

        timings = {}

        def timed(name, work):
            wall, cpu = time.perf_counter(), time.process_time()
            result = work()
            timings[name] = (time.perf_counter() - wall, time.process_time() - cpu)
            return result

        runs, curves = timed("load_runs (tidy frame)", lambda: load_runs(
            [root / "sweep"], metrics=None if args.metrics == "all" else ["error"]))
        report = timed("index", lambda: Report(runs, curves))
        table = timed("per-run table (final with bootstrap CI, steps to 5%/1%)", lambda: results_table(report))
        timed("Tables 1 and 3 (paired)", lambda: [report.evaluate(TABLES[name]) for name in ("table1", "table3")])

    wall, cpu = (sum(t[i] for t in timings.values()) for i in (0, 1))
    print(f"{len(runs)} runs × {args.steps} steps × {args.seeds} seeds ({size:.2f} GB of metrics.csv, written in "
          f"{written:.0f} s, not timed); metrics read: {args.metrics}; tidy rows: {len(curves):,}; "
          f"per-run rows: {len(table)}")
    print(f"  {'':<56} {'wall':>7} {'cpu':>7}")
    for name, (seconds, cpu_seconds) in timings.items():
        print(f"  {name:<56} {seconds:6.1f}s {cpu_seconds:6.1f}s")
    print(f"  {'total':<56} {wall:6.1f}s {cpu:6.1f}s   (target: under 30 s wall)")
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
