"""Runs → one tidy frame → tables and figures.

    python -m harness.report multirun/demo --out results/demo

Reads every run directory (one holding ``summary.json``) below the given paths. For each (experiment, task) it
writes a markdown/CSV table of final errors (seed mean ± s.e., population std) and steps-to thresholds, and a
figure of the seed-mean error curves with ± s.e. bands. Runs that failed, were interrupted, or have fewer seeds
or steps than their siblings are listed as such, never averaged in silently.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from harness.outputs import METRICS_FILE, SUMMARY_FILE  # noqa: E402

# One fixed colour and line style per algorithm across every figure.
ALGORITHM_STYLE = {
    "tpo": ("#d62728", "-"), "tpo_token": ("#d62728", "-"), "tpo_no_anchor": ("#ff9896", "--"),
    "grpo": ("#1f77b4", "-"), "grpo_token": ("#1f77b4", "-"), "grpo_no_kl": ("#aec7e8", "--"),
    "grpo_masked": ("#17becf", ":"), "group_pg": ("#9467bd", "--"), "ppo": ("#2ca02c", "-"),
    "dg": ("#ff7f0e", "-"), "pg": ("#7f7f7f", "-"), "ce": ("#000000", ":"),
}
FIGURE_METRICS = ("error", "misalignment")
LOG_FLOOR = 1e-7
LOG_SCALE_TASKS = {"tabular_single", "tabular_multi", "mnist_bandit"}


def find_run_dirs(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found.extend(sorted(p.parent for p in Path(path).rglob(SUMMARY_FILE)))
    return found


def load_runs(paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, curves): one row per run directory, and the tidy per-seed curves of every metric."""
    runs, curves = [], []
    for run_dir in find_run_dirs(paths):
        summary = json.loads((run_dir / SUMMARY_FILE).read_text())
        runs.append({
            "run_dir": str(run_dir), "experiment": summary.get("experiment", "default"), "task": summary["task"],
            "algorithm": summary["algorithm"], "status": summary["status"], "seeds": len(summary.get("seeds", [])),
            "steps": summary.get("steps"), "last_step": summary.get("last_step"),
            "wall_seconds": summary.get("wall_seconds"), "error": summary.get("error"),
            "final": summary.get("final", {}), "steps_to": summary.get("steps_to", {}).get("error", {}),
        })
        metrics_path = next((p for p in (run_dir / METRICS_FILE, run_dir / f"{METRICS_FILE}.gz") if p.exists()), None)
        if summary["status"] != "failed" and metrics_path is not None:
            frame = pd.read_csv(metrics_path).melt(id_vars=["step", "seed"], var_name="metric", value_name="value")
            frame.insert(0, "run_dir", str(run_dir))
            curves.append(frame)
    runs_frame = pd.DataFrame(runs)
    curves_frame = pd.concat(curves, ignore_index=True) if curves else pd.DataFrame(
        columns=["run_dir", "step", "seed", "metric", "value"])
    if not runs_frame.empty and not curves_frame.empty:
        keys = runs_frame[["run_dir", "experiment", "task", "algorithm"]]
        curves_frame = curves_frame.merge(keys, on="run_dir")
    return runs_frame, curves_frame


def _format_mean_se(stats: dict) -> str:
    mean, se = stats.get("mean"), stats.get("se")
    if mean is None:
        return "n/a"
    return f"{100 * mean:.3g} ± {100 * se:.2g}"


def results_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Final error (%) and steps-to thresholds per run, with flags for runs that are not comparable."""
    rows = []
    for _, run in runs.iterrows():
        expected_seeds = runs.loc[runs.task == run.task, "seeds"].max()
        expected_steps = runs.loc[runs.task == run.task, "steps"].max()
        flags = [] if run.status == "completed" else [run.status]
        if run.status != "failed" and (run.seeds < expected_seeds or (run.steps or 0) < expected_steps):
            flags.append("partial")
        row = {"experiment": run.experiment, "task": run.task, "algorithm": run.algorithm,
               "seeds": run.seeds, "steps": run.steps,
               "final error % (mean ± s.e.)": _format_mean_se(run.final.get("error", {})) if run.final else "n/a"}
        for threshold, step in (run.steps_to or {}).items():
            row[f"steps to {float(threshold):g}"] = "never" if step is None else step
        row["wall s"] = run.wall_seconds
        row["flags"] = ", ".join(flags) or ""
        rows.append(row)
    return pd.DataFrame(rows)


def plot_curves(curves: pd.DataFrame, title: str, path: Path, metric: str = "error", smooth: int = 1) -> None:
    """Seed-mean curves with ± s.e. bands (population std), optional causal moving average."""
    data = curves[curves.metric == metric]
    fig, ax = plt.subplots(figsize=(6, 4))
    for algorithm, group in data.groupby("algorithm", sort=True):
        per_step = group.groupby("step")["value"]
        mean = per_step.mean()
        se = per_step.std(ddof=0) / np.sqrt(per_step.count())
        if smooth > 1:
            mean = mean.rolling(smooth, min_periods=1).mean()
            se = se.rolling(smooth, min_periods=1).mean()
        colour, style = ALGORITHM_STYLE.get(algorithm, (None, "-"))
        ax.plot(mean.index, mean.values, style, color=colour, label=algorithm, linewidth=1.6)
        ax.fill_between(mean.index, (mean - se).values, (mean + se).values, color=colour, alpha=0.2, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    if data["task"].iloc[0] in LOG_SCALE_TASKS and (data["value"] > 0).any():
        ax.set_yscale("log")
        ax.set_ylim(bottom=max(LOG_FLOOR, ax.get_ylim()[0]))  # float32 noise around 0 is not information
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=150)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)


MECHANISM_BINS = ("[0, .25)", "[.25, .5)", "[.5, .75)", "[.75, 1]")


def mechanism_table(curves: pd.DataFrame, step: int = 2000) -> pd.DataFrame:
    """Appendix C / Fig 4b: surplus (exact − scalar first-order gain) per concentration bin at ``step``,
    seed mean ± s.e. over seeds with a non-empty bin."""
    rows = []
    data = curves[(curves.step == step) & curves.metric.str.startswith("mech_surplus_bin")]
    for (algorithm, metric), group in data.groupby(["algorithm", "metric"]):
        values = group["value"].dropna().to_numpy()
        if values.size:
            rows.append({"algorithm": algorithm, "bin": MECHANISM_BINS[int(metric[-1])], "surplus": values.mean(),
                         "se": values.std() / np.sqrt(values.size), "seeds": values.size})
    return pd.DataFrame(rows)


def plot_mechanism(table: pd.DataFrame, title: str, path: Path) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.5))
    algorithms = sorted(table.algorithm.unique())
    width = 0.8 / len(algorithms)
    for index, algorithm in enumerate(algorithms):
        part = table[table.algorithm == algorithm].set_index("bin").reindex(MECHANISM_BINS)
        positions = np.arange(len(MECHANISM_BINS)) + (index - (len(algorithms) - 1) / 2) * width
        ax.bar(positions, part["surplus"], width, yerr=part["se"], label=algorithm,
               color=ALGORITHM_STYLE.get(algorithm, (None,))[0])
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(np.arange(len(MECHANISM_BINS)), MECHANISM_BINS)
    ax.set_xlabel("wrong-class concentration of misclassified test examples")
    ax.set_ylabel("surplus gain (exact − scalar)")
    ax.set_title(title)
    ax.legend(frameon=False, fontsize=8)
    fig.tight_layout()
    fig.savefig(path.with_suffix(".png"), dpi=150)
    fig.savefig(path.with_suffix(".pdf"))
    plt.close(fig)


def write_report(paths: list[Path], out: Path, smooth: int = 1) -> pd.DataFrame:
    runs, curves = load_runs(paths)
    if runs.empty:
        raise SystemExit(f"no run directories (with {SUMMARY_FILE}) found under: {', '.join(map(str, paths))}")
    out.mkdir(parents=True, exist_ok=True)
    table = results_table(runs).sort_values(["experiment", "task", "algorithm"])
    sections = ["# Results\n", f"Generated by `python -m harness.report {' '.join(map(str, paths))}`.\n"]
    for (experiment, task), part in table.groupby(["experiment", "task"], sort=True):
        stem = f"{experiment}_{task}"
        part = part.dropna(axis=1, how="all")
        part.to_csv(out / f"{stem}.csv", index=False)
        sections += [f"\n## {experiment} — {task}\n", part.drop(columns=["experiment", "task"]).to_markdown(index=False),
                     "\n"]
        task_curves = curves[(curves.experiment == experiment) & (curves.task == task)]
        if not task_curves.empty:
            seeds = int(part["seeds"].max())
            for metric in FIGURE_METRICS:
                if (task_curves.metric == metric).any():
                    name = stem if metric == "error" else f"{stem}_{metric}"
                    plot_curves(task_curves, f"{task} ({seeds} seeds)", out / name, metric=metric, smooth=smooth)
                    sections.append(f"\n![{name}]({name}.png)\n")
            mechanism = mechanism_table(task_curves)
            if not mechanism.empty:
                mechanism.to_csv(out / f"{stem}_mechanism.csv", index=False)
                plot_mechanism(mechanism, f"{task}: mechanism at step 2000", out / f"{stem}_mechanism")
                wide = mechanism.assign(cell=[f"{m:.4f} ± {e:.4f}" for m, e in zip(mechanism.surplus, mechanism.se)])
                wide = wide.pivot(index="algorithm", columns="bin", values="cell").reindex(columns=MECHANISM_BINS)
                sections += ["\nMechanism (Appendix C, Fig 4b): surplus gain by wrong-class concentration bin at step "
                             "2000, misclassified test examples\n", wide.fillna("–").to_markdown(),
                             f"\n![{stem}_mechanism]({stem}_mechanism.png)\n"]
    (out / "README.md").write_text("\n".join(sections))
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", type=Path, help="sweep folders or run directories")
    parser.add_argument("--out", type=Path, default=Path("results/report"), help="output folder")
    parser.add_argument("--smooth", type=int, default=1, help="causal moving-average window for figures")
    args = parser.parse_args(argv)
    table = write_report(args.paths, args.out, args.smooth)
    print(table.to_string(index=False))
    print(f"\nwritten to {args.out}/")


if __name__ == "__main__":
    main()
