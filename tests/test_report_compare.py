"""``python -m harness.report ... --compare KEY --baseline VALUE`` on synthetic runs of a sweep that is no preset: the
numbers it writes are rliable's and ``stats``' own, recomputed here from the errors the runs were written with."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from rliable import library as rly
from rliable import metrics

from harness.report import stats
from harness.report.__main__ import main
from harness.report.specs import TABLES, Stat
from harness.report.synthetic import make_config, write_run
from harness.report.tables import CONF

EXPERIMENT = "compare_synthetic"  # no preset, no table: an ad-hoc sweep, each task's budget its largest run's
TASKS = ("tabular_multi", "tabular_single", "token_reversal")  # the order the command sorts them in
ALGORITHMS = ("tpo", "dg", "grpo")  # the baseline first, then the paper's order
SEEDS, STEPS, RESAMPLES, SEED = 6, 12, 200, 3
TPO_SEEDS = {"token_reversal": 8}  # more seeds than the others there: the aggregates keep TPO's first 6
WINDOWS = {"final": lambda errors: errors[:, -1], "mean": lambda errors: errors.mean(1)}


def errors() -> dict[tuple[str, str], np.ndarray]:
    """(task, algorithm) → seeds × steps errors in thousandths (exact through metrics.csv): GRPO lower than TPO and
    DG higher on average, so a probability of improvement swapped or an error taken for a score shows."""
    rng = np.random.default_rng(7)
    shift = {"tpo": 0, "dg": 150, "grpo": -200}
    values = {}
    for task in TASKS:
        for algorithm in ALGORITHMS:
            seeds = TPO_SEEDS.get(task, SEEDS) if algorithm == "tpo" else SEEDS
            values[task, algorithm] = np.clip(rng.integers(0, 1001, (seeds, STEPS)) + shift[algorithm], 0, 1000) / 1000
    return values


def write_sweep(root: Path) -> Path:
    for (task, algorithm), values in errors().items():
        write_run(root / task / algorithm, make_config(EXPERIMENT, task, algorithm, len(values), STEPS),
                  {"error": values})
    for algorithm in ("dg", "grpo"):  # a task without TPO: left out, with a warning
        write_run(root / "mnist_bandit" / algorithm, make_config(EXPERIMENT, "mnist_bandit", algorithm, SEEDS, STEPS),
                  {"error": np.full((SEEDS, STEPS), 0.5)})
    return root


def run(argv: list, stdout: io.StringIO | None = None) -> str:
    """The command's stderr (its warnings); what it prints goes to ``stdout``."""
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(stdout or io.StringIO()):
        main([str(arg) for arg in argv])
    return stderr.getvalue()


@pytest.fixture(scope="module")
def sweep(tmp_path_factory) -> Path:
    return write_sweep(tmp_path_factory.mktemp("compare") / "runs")


PRINTED = io.StringIO()  # what the compared fixture's command printed


@pytest.fixture(scope="module")
def compared(sweep) -> tuple[Path, str]:
    out = sweep.parent / "out"
    warnings = run([sweep, "--out", out, "--figures", "none", "--compare", "algorithm", "--baseline", "tpo",
                    "--windows", "final,mean", "--resamples", RESAMPLES, "--seed", SEED], PRINTED)
    return out, warnings


def scores(window: str, algorithm: str) -> np.ndarray:
    """(runs × tasks) scores built by hand: each task's first 6 seeds, 1 − the window's error."""
    return np.stack([1 - WINDOWS[window](errors()[task, algorithm][:SEEDS]) for task in TASKS], axis=1)


def iqm_and_gap(matrix: np.ndarray) -> np.ndarray:
    return np.array([metrics.aggregate_iqm(matrix), metrics.aggregate_optimality_gap(matrix)])


def rliable_estimate(data, func) -> tuple[np.ndarray, np.ndarray]:
    np.random.seed(SEED)  # rliable 1.2 resamples from numpy's global generator
    points, intervals = rly.get_interval_estimates({"x": data}, func, reps=RESAMPLES)
    return np.atleast_1d(points["x"]), np.asarray(intervals["x"]).reshape(2, -1)


def test_the_sweep_is_no_preset():
    assert not (CONF / "experiment" / f"{EXPERIMENT}.yaml").exists()
    assert all(table.preset != EXPERIMENT for table in TABLES.values())


@pytest.mark.parametrize("window", WINDOWS)
def test_the_aggregates_are_rliables_on_the_score_matrix_built_by_hand(window, compared):
    """IQM, optimality gap and P(X > TPO) with their intervals equal rliable's on (runs × tasks) matrices of
    1 − error built here, with the same seed. Bugs caught: the matrix transposed (tasks × runs: same IQM, other
    intervals), the error taken for the score, TPO and X swapped in the probability of improvement (1 − P), the
    final window read for the mean."""
    out, _ = compared
    frame = pd.read_csv(out / "compare_aggregates.csv", keep_default_na=False)
    frame = frame[frame.window == window].set_index(["algorithm", "statistic"])
    for algorithm in ALGORITHMS:
        matrix = scores(window, algorithm)
        point, interval = rliable_estimate(matrix, iqm_and_gap)
        for j, statistic in enumerate(("iqm", "optimality_gap")):
            row = frame.loc[(algorithm, statistic)]
            assert (row.tasks, row.runs_per_task) == (len(TASKS), SEEDS)
            assert [row.estimate, row.low, row.high] == pytest.approx([point[j], *interval[:, j]], rel=1e-9)
        if algorithm != "tpo":
            point, interval = rliable_estimate((matrix, scores(window, "tpo")), metrics.probability_of_improvement)
            row = frame.loc[(algorithm, "probability_of_improvement")]
            assert row.over == "tpo"
            assert [row.estimate, row.low, row.high] == pytest.approx([point[0], *interval[:, 0]], rel=1e-9)
    assert ("tpo", "probability_of_improvement") not in frame.index


@pytest.mark.parametrize("window", WINDOWS)
def test_each_tasks_difference_is_stats_paired_on_the_scores(window, compared):
    """Per task, each algorithm's score and its difference to TPO on the seeds both have equal ``stats.summarize``
    and ``stats.paired`` on 1 − error (higher is better), TPO's two extra seeds of token reversal unpaired."""
    out, _ = compared
    frame = pd.read_csv(out / "compare_tasks.csv").set_index(["task", "algorithm", "window"])
    assert sorted(frame.index.get_level_values("task").unique()) == list(TASKS)
    stat = Stat(window, higher_is_better=True)
    for task in TASKS:
        values = {algorithm: errors()[task, algorithm] for algorithm in ALGORITHMS}
        matrices = {algorithm: stats.SeedMatrix(np.arange(len(v)), np.arange(STEPS), 1 - v)
                    for algorithm, v in values.items()}
        for algorithm in ALGORITHMS:
            row = frame.loc[(task, algorithm, window)]
            summary = stats.summarize(stat, matrices[algorithm], RESAMPLES, SEED)
            assert [row.score, row.score_low, row.score_high] == pytest.approx([summary.value, summary.low,
                                                                                summary.high], rel=1e-12)
            if algorithm == "tpo":
                assert np.isnan(row["diff"])
                continue
            paired = stats.paired(stat, matrices[algorithm], matrices["tpo"], RESAMPLES, SEED)
            assert row.paired_seeds == paired.seeds == SEEDS
            assert [row["diff"], row.diff_low, row.diff_high, row.p_better] == pytest.approx(
                [paired.diff, paired.low, paired.high, paired.p_better], rel=1e-12)
    assert frame.loc[("token_reversal", "grpo", window)].status == "partial"  # 6 of the task's 8 seeds


def test_a_task_without_the_baseline_is_left_out_with_one_warning(compared):
    out, warnings = compared
    assert "mnist_bandit" not in pd.read_csv(out / "compare_tasks.csv").task.to_list()
    lines = [line for line in warnings.splitlines() if line.startswith("warning: --baseline")]
    assert lines == ["warning: --baseline tpo: no usable runs in 1 task(s), left out: "
                     f"{EXPERIMENT}, MNIST bandit (no runs)"]


def test_the_tables_and_figures_are_written_and_listed_in_the_readme(compared, sweep):
    """Beside the report's own files, which stay; rerun without --compare, the comparison's files go as stale."""
    out, _ = compared
    readme = (out / "README.md").read_text()
    listed = json.loads(readme.rstrip().splitlines()[-1].removeprefix("<!-- harness.report wrote: ").removesuffix(
        " -->"))
    names = [f"{stem}.{ext}" for stem in ("compare_tasks", "compare_aggregates") for ext in ("md", "csv")]
    names += [f"{stem}.{ext}" for stem in ("compare_profiles", "compare_sample_efficiency")
              for ext in ("png", "pdf", "caption.md")]
    for name in names:
        assert (out / name).stat().st_size > 0 and name in listed
    assert {"runs.csv", "missing.json"} <= set(listed)
    for figure in ("compare_profiles", "compare_sample_efficiency"):
        assert f"![{figure}]({figure}.png)" in readme
        assert "## Provenance" in (out / f"{figure}.caption.md").read_text()
    assert "## Comparison: algorithm, against TPO" in readme
    assert "--compare algorithm --baseline tpo --windows final,mean" in readme

    again = sweep.parent / "again"
    run([sweep, "--out", again, "--figures", "none", "--compare", "algorithm", "--baseline", "tpo", "--resamples",
         100])
    run([sweep, "--out", again, "--figures", "none", "--resamples", 100])
    assert not any(again.glob("compare_*")) and "Comparison" not in (again / "README.md").read_text()


def test_a_temperature_sweep_compares_a_numeric_key_and_a_value_missing_a_task_stays_out_of_the_aggregates(
        tmp_path):
    """``--compare algorithm.eta --baseline 1`` over TPO runs at η = 0.5, 1, 2 on two tasks and η = 4 on one: the
    tasks are the tasks, η = 1 (the config's 1.0) is the baseline; η = 4 is compared on its task, and left out of
    the aggregates (which compare values over the same tasks) with a warning."""
    rng = np.random.default_rng(0)
    for task, etas in (("tabular_single", (0.5, 1.0, 2.0, 4.0)), ("token_reversal", (0.5, 1.0, 2.0))):
        for eta in etas:
            write_run(tmp_path / "runs" / task / f"eta{eta}",
                      make_config(EXPERIMENT, task, "tpo", 4, 5, **{"algorithm.eta": eta}),
                      {"error": rng.integers(0, 1001, (4, 5)) / 1000})
    warnings = run([tmp_path / "runs", "--out", tmp_path / "out", "--figures", "none", "--tables", "none",
                    "--compare", "algorithm.eta", "--baseline", "1", "--resamples", 100])
    frame = pd.read_csv(tmp_path / "out" / "compare_tasks.csv")
    assert frame.groupby("task")["algorithm.eta"].apply(list).to_dict() == {
        "tabular_single": [1.0, 0.5, 2.0, 4.0], "token_reversal": [1.0, 0.5, 2.0]}
    assert frame[frame["algorithm.eta"] == 1.0]["diff"].isna().all()
    assert frame[frame["algorithm.eta"] != 1.0]["diff"].notna().all()
    aggregates = pd.read_csv(tmp_path / "out" / "compare_aggregates.csv")
    assert set(aggregates["algorithm.eta"]) == {0.5, 1.0, 2.0} and set(aggregates.tasks) == {2}
    assert set(aggregates[aggregates.statistic == "probability_of_improvement"]["algorithm.eta"]) == {0.5, 2.0}
    assert ("warning: --compare algorithm.eta: final: left out of the aggregates: η=4 (no score in 1 of 2 task(s))"
            in warnings.splitlines())


def failed_baseline(root: Path) -> Path:
    """TPO's only run failed: no task has usable runs of the baseline."""
    write_run(root / "tpo", make_config(EXPERIMENT, "tabular_single", "tpo", 2, 4), status="failed")
    write_run(root / "grpo", make_config(EXPERIMENT, "tabular_single", "grpo", 2, 4), {"error": np.zeros((2, 4))})
    return root


@pytest.mark.parametrize("argv, message", [
    (["--compare", "algo", "--baseline", "tpo"],
     "--compare algo: not a key these runs vary; choose one of experiment, task, algorithm"),
    (["--compare", "algorithm", "--baseline", "ppo"],
     "--baseline ppo: no runs with algorithm=ppo; present: tpo, dg, grpo"),
    (["--compare", "algorithm", "--baseline", "tpo", "--windows", "final,last"],
     "--windows final,last: unknown last; choose from final, mean"),
    (["--compare", "experiment", "--baseline", EXPERIMENT],
     f"--compare experiment: the runs have 1 value of it ({EXPERIMENT}); a comparison needs at least 2"),
    (["--baseline", "tpo"], "--compare KEY and --baseline VALUE go together (--windows only with them)"),
])
def test_bad_input_is_refused_in_one_line_before_anything_is_written(argv, message, sweep, tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main([str(sweep), "--out", str(tmp_path / "out"), *argv])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines() == [f"Error: python -m harness.report: {message}"]
    assert not (tmp_path / "out").exists()


def test_a_baseline_without_usable_runs_in_any_task_is_refused_naming_the_tasks(tmp_path, capsys):
    with pytest.raises(SystemExit) as refused:
        main([str(failed_baseline(tmp_path / "runs")), "--out", str(tmp_path / "out"), "--compare", "algorithm",
              "--baseline", "tpo"])
    assert refused.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        f"Error: python -m harness.report: --baseline tpo: no task has usable runs of it ({EXPERIMENT}, "
        "single-context bandit (failed))"]
    assert not (tmp_path / "out").exists()


def test_importing_the_aggregates_leaves_a_captured_stderr_open_through_a_logging_reconfiguration():
    """A captured stderr (a notebook cell's, a test phase's) survives ``logging.config.dictConfig`` (Hydra's
    composition) after the aggregates (rliable, so absl.logging) were imported under it. Bug caught:
    harness/report/aggregates.py without the line that points absl's handler at the process's own stderr (absl
    closes the captured one)."""
    child = ("import io, logging.config, sys\n"
             "sys.stderr = captured = io.StringIO()\n"
             "from harness.report import aggregates\n"
             "sys.stderr = io.StringIO()\n"  # as pytest moves from one capture to the next
             "logging.config.dictConfig({'version': 1})\n"
             "print(captured.closed)\n")
    result = subprocess.run([sys.executable, "-c", child], cwd=CONF.parent, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": str(CONF.parent)}, timeout=120)
    assert result.stdout.strip() == "False", result.stderr


def test_a_baseline_whose_every_seed_diverged_gives_no_aggregates_and_one_warning(tmp_path):
    """Every seed of the baseline NaN (diverged) in every task: the per-task table is written, the aggregates are
    left out with one warning. Bug caught: aggregates.select taking max() of no task's counts (a ValueError)."""
    root = tmp_path / "runs"
    for algorithm in ("tpo", "grpo"):
        values = np.full((3, STEPS), np.nan) if algorithm == "tpo" else np.full((3, STEPS), 0.5)
        write_run(root / "tabular_single" / algorithm, make_config(EXPERIMENT, "tabular_single", algorithm, 3, STEPS),
                  {"error": values})
    warnings = run([root, "--out", tmp_path / "out", "--figures", "none", "--compare", "algorithm", "--baseline",
                    "tpo", "--resamples", 100])
    assert "the baseline TPO has no score in any task; no aggregates" in warnings
    assert (tmp_path / "out" / "compare_tasks.csv").exists()


LABELS = {"tpo": "TPO", "dg": "DG", "grpo": "GRPO"}
TASK_WORDS = {"tabular_multi": "multi-context bandit", "tabular_single": "single-context bandit",
              "token_reversal": "token reversal"}


def test_the_terminal_shows_each_tasks_difference_the_aggregates_and_a_verdict_line_per_family(compared):
    """The command prints, for the first window (final): a row per task and algorithm with its Δ to TPO as the
    per-task table has it, each algorithm's IQM, and per family (here a task each) one verdict line whose verdict is
    recomputed here: the mean paired Δ (algorithm − TPO) with rliable's bootstrap interval, ahead when above 0.
    Bugs caught: the verdict's Δ taken as TPO − algorithm (ahead and behind swapped), the mean window read for the
    final one, the aggregates left out of the terminal."""
    out, _ = compared
    printed = PRINTED.getvalue().splitlines()
    tasks = pd.read_csv(out / "compare_tasks.csv")
    for row in tasks[(tasks.window == "final") & (tasks.algorithm != "tpo")].itertuples():
        delta = compare_text(row.diff, row.diff_low, row.diff_high)
        assert any(line.startswith(f"{EXPERIMENT}, {TASK_WORDS[row.task]}")
                   and re.search(rf"\s{LABELS[row.algorithm]}†?\s", line) and delta in line
                   for line in printed), (row.task, row.algorithm, delta)
    iqm = pd.read_csv(out / "compare_aggregates.csv").query("window == 'final' and statistic == 'iqm'")
    for row in iqm.itertuples():
        assert any(line.startswith(LABELS[row.algorithm]) and f"{row.estimate:.4f} [{row.low:.4f}, {row.high:.4f}]"
                   in line for line in printed)
    for task in TASKS:  # a family per task: its verdict reads as the per-task paired interval, where that is clear
        for row in tasks[(tasks.window == "final") & (tasks.task == task) & (tasks.algorithm != "tpo")].itertuples():
            if row.diff_low > 0.02:
                words = "ahead of TPO"
            elif row.diff_high < -0.02:
                words = "behind TPO"
            elif row.diff_low < -0.02 and row.diff_high > 0.02:
                words = "level with TPO"
            else:
                continue  # near an edge: two bootstraps may disagree
            line = next(line for line in printed if line.startswith(f"{EXPERIMENT}, {TASK_WORDS[task]}: "))
            assert re.search(rf"{words}: [^;]*\b{LABELS[row.algorithm]}\b", line), (line, row.algorithm, words)
    assert not any(line.startswith("warning:") for line in printed)  # 6 seeds and more in every cell


def compare_text(value: float, low: float, high: float) -> str:
    from harness.report.compare import with_interval

    return with_interval(value, low, high, difference=True)


def small_sweep(root: Path, seeds: dict[str, int], offsets: dict[str, float] | None = None) -> Path:
    """tabular_single runs, ``seeds`` per algorithm; each algorithm's errors are TPO's plus its offset."""
    rng = np.random.default_rng(1)
    base = rng.uniform(0.2, 0.8, (max(seeds.values()), STEPS))
    for algorithm, count in seeds.items():
        write_run(root / algorithm, make_config(EXPERIMENT, "tabular_single", algorithm, count, STEPS),
                  {"error": base[:count] + (offsets or {}).get(algorithm, 0.0)})
    return root


def printed_lines(root: Path, out: Path) -> list[str]:
    stdout = io.StringIO()
    run([root, "--out", out, "--figures", "none", "--compare", "algorithm", "--baseline", "tpo", "--resamples", 100],
        stdout)
    return stdout.getvalue().splitlines()


def test_cells_with_fewer_than_five_seeds_get_one_warning_line_naming_them(tmp_path):
    """TPO and GRPO at 5 seeds, DG at 4: one warning naming DG's cell only. Bugs caught: the boundary taken as
    ≤ 5 (TPO and GRPO named), no warning at all."""
    lines = printed_lines(small_sweep(tmp_path / "runs", {"tpo": 5, "dg": 4, "grpo": 5}), tmp_path / "out")
    warnings = [line for line in lines if line.startswith("warning:")]
    assert warnings == ["warning: 1 of 3 cells have fewer than 5 seeds (DG on compare_synthetic, single-context "
                        "bandit: 4): their intervals and verdicts say little; rerun with more seeds (seeds=20)"]


def test_one_paired_seed_gives_no_verdict(tmp_path):
    """At one seed the bootstrap interval has no width: the verdict is undecided, not ahead. Bug caught: the
    ``MIN_VERDICT_SEEDS`` guard removed (DG, better on its one seed, called ahead)."""
    lines = printed_lines(small_sweep(tmp_path / "runs", {"tpo": 1, "dg": 1}, {"dg": -0.1}), tmp_path / "out")
    assert f"{EXPERIMENT}, single-context bandit: undecided (no task with 2 paired seeds): DG" in lines
    assert "warning: every cell has fewer than 5 seeds (the fewest: 1)" in "\n".join(lines)


def test_algorithms_equal_seed_by_seed_are_named_in_a_note(tmp_path):
    """DG's errors are TPO's plus 1e-5 (one update rounded otherwise), GRPO's plus 1e-2: the note names TPO = DG
    and not GRPO. Bugs caught: exact equality demanded (no note), a tolerance that takes GRPO in."""
    lines = printed_lines(small_sweep(tmp_path / "runs", {"tpo": 5, "dg": 5, "grpo": 5}, {"dg": 1e-5, "grpo": 1e-2}),
                          tmp_path / "out")
    notes = [line for line in lines if line.startswith("note:")]
    assert len(notes) == 1 and "of the score at every step): TPO = DG (" in notes[0]
    assert "GRPO" not in notes[0]


def test_cells_of_other_lengths_are_never_called_equal(tmp_path):
    """DG's run is TPO's first half, interrupted: same seeds, fewer steps. The comparison is printed with no note.
    Bug caught: ``identical_note`` comparing matrices of other shapes (a ValueError that lost the whole report)."""
    root = small_sweep(tmp_path / "runs", {"tpo": 5})
    errors = np.random.default_rng(1).uniform(0.2, 0.8, (5, STEPS))[:, : STEPS // 2]
    write_run(root / "dg", make_config(EXPERIMENT, "tabular_single", "dg", 5, STEPS), {"error": errors},
              steps=np.arange(STEPS // 2), status="interrupted")
    lines = printed_lines(root, tmp_path / "out")
    assert any(line.startswith(f"{EXPERIMENT}, single-context bandit: ") for line in lines)
    assert not any(line.startswith("note:") for line in lines)


def test_a_familys_verdict_averages_each_tasks_own_mean_over_all_its_seeds(tmp_path):
    """One family, two tasks: at 10 arms DG is 0.3 ahead on seeds 0-1 and 0.4 behind on seeds 2-19 (its mean Δ
    −0.33), at 20 arms 0.1 ahead on its 2 seeds: the mean of the tasks' means is −0.115, and the verdict behind.
    Bug caught: every task cut to the fewest paired seeds (seeds 0-1 only: +0.2, ahead)."""
    runs = tmp_path / "runs"
    base = np.full((20, STEPS), 0.6)
    dg = base + np.where(np.arange(20) < 2, -0.3, 0.4)[:, None]  # errors: 0.3 lower on seeds 0-1, 0.4 higher after
    for algorithm, values in (("tpo", base), ("dg", dg)):
        write_run(runs / f"{algorithm}10", make_config(EXPERIMENT, "tabular_single", algorithm, 20, STEPS,
                                                       **{"task.arms": 10}), {"error": values})
        write_run(runs / f"{algorithm}20", make_config(EXPERIMENT, "tabular_single", algorithm, 2, STEPS,
                                                       **{"task.arms": 20}),
                  {"error": base[:2] - (0.1 if algorithm == "dg" else 0.0)})
    lines = printed_lines(runs, tmp_path / "out")
    assert f"{EXPERIMENT}, single-context bandit: behind TPO: DG" in lines
