"""W&B runs (one per seed, or one for all seeds above logger.seed_runs; see harness/tracking.py) convert to the
same frames as run directories."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.report.load import flatten, load_runs
from harness.report.synthetic import make_config, write_run
from harness.tracking import TRL_STEP


class FakeRun:
    def __init__(self, config: dict, steps: np.ndarray, values: dict[str, np.ndarray], state="finished",
                 status="completed"):
        self.config, self.state, self.summary = config, state, {"status": status}
        self.group = f"{config['experiment_name']}/{config['task']['name']}/{config['algorithm']['name']}"
        self._rows = [{"_step": int(s), "_runtime": 1.0, **{m: float(v[i]) for m, v in values.items()}}
                      for i, s in enumerate(steps)]

    def scan_history(self):
        return iter(self._rows)

    def history(self, *args, **kwargs):
        raise AssertionError("history() is sampled; the loader must use scan_history()")


class FakeApi:
    def __init__(self, runs: list[FakeRun]):
        self._runs, self.calls = runs, []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        return list(self._runs)


def test_wandb_runs_convert_like_run_directories(tmp_path):
    rng = np.random.default_rng(0)
    steps = np.arange(0, 40, 10)
    fake = []
    for algorithm, eta in (("tpo", 0.5), ("tpo", 2.0), ("grpo", 1.0)):
        config = make_config("table5_eta_sweep", "token_reversal", algorithm, 3, 40, **{"algorithm.eta": eta})
        error, entropy = rng.random((3, len(steps))), rng.random((3, len(steps)))
        write_run(tmp_path / f"{algorithm}{eta}", config, {"error": error, "target_entropy": entropy}, steps=steps)
        for seed in range(3):
            seeded = {**config, "trainer": {"steps": 40}, "seed": seed}
            fake.append(FakeRun(seeded, steps, {"error": error[seed], "target_entropy": entropy[seed]}))
    api = FakeApi(fake[::-1])  # order must not matter
    runs_w, curves_w = load_runs(wandb=["me/tpo"], wandb_api=api, wandb_filters={"group": "x"})
    runs_l, curves_l = load_runs([tmp_path])
    assert api.calls == [("me/tpo", {"group": "x"})]

    key = ["experiment", "algorithm", "algorithm.eta", "seed", "step", "metric"]
    for frame in (curves_w, curves_l):
        assert "algorithm.eta" in frame.columns  # the distinguishing parameter is a column of the tidy frame
    left = curves_w.astype({c: str for c in key}).sort_values(key).reset_index(drop=True)
    right = curves_l.astype({c: str for c in key}).sort_values(key).reset_index(drop=True)
    pd.testing.assert_frame_equal(left[key + ["value"]], right[key + ["value"]])
    summary = ["experiment", "task", "algorithm", "status", "seed_ids", "steps", "signature"]
    assert (runs_w[summary].sort_values("signature").to_dict("records")
            == runs_l[summary].sort_values("signature").to_dict("records"))


def test_failed_and_running_seeds_are_not_silently_complete():
    config = make_config("fig1b_sparse", "token_reversal", "tpo", 3, 20)
    steps = np.arange(5)
    runs = [FakeRun({**config, "seed": 0}, steps, {"error": np.zeros(5)}),
            FakeRun({**config, "seed": 1}, steps[:2], {"error": np.zeros(2)}, state="running", status=None),
            FakeRun({**config, "seed": 2}, steps[:0], {"error": np.zeros(0)}, state="crashed", status=None)]
    frame, curves = load_runs(wandb=["me/tpo"], wandb_api=FakeApi(runs))
    run = frame.iloc[0]
    assert run.status == "interrupted" and run.seed_ids == (0, 1)
    assert set(curves.seed) == {0, 1}
    assert flatten({"a": {"b": 1}, "c": [1, 2]}) == {"a.b": 1, "c": (1, 2)}


def test_a_finished_wandb_history_that_stops_short_of_its_summary_is_damaged_not_complete(capsys):
    """A finished W&B run whose history stops at step 9 while its summary records last step 39 (an upload cut
    short) is reported as damaged and short, as a run folder whose rows stop early; a run still logging is not
    checked. Bug caught: load.py:load_wandb — dropping the ``cross_check`` call on W&B records."""
    steps, config = np.arange(0, 40), make_config("inputs_check", "token_reversal", "tpo", 2, 40)

    def run(seed: int, last: int, state: str = "finished", status: str | None = "completed") -> FakeRun:
        fake = FakeRun({**config, "trainer": {"steps": 40}, "seed": seed}, steps[: last + 1],
                       {"error": np.full(last + 1, 0.5)}, state=state, status=status)
        fake.summary["last_step"] = 39 if status else None
        return fake

    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run(0, 39), run(1, 9)]))
    assert runs.status.tolist() == ["damaged"] and runs.last_step.tolist() == [9]
    assert "rows stop at step 9 (seed(s) 1) but the summary's last step is 39" in runs.error.iloc[0]
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning: ")]
    assert "me/tpo" in line and "damaged" in line

    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run(0, 39), run(1, 39)]))
    assert runs.status.tolist() == ["completed"] and runs.last_step.tolist() == [39]
    live = [run(0, 12, "running", None), run(1, 9, "running", None)]  # read while logging: seeds at different steps
    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi(live))
    assert runs.status.tolist() == ["interrupted"] and "warning" not in capsys.readouterr().err


def test_live_mirror_histories_are_read_by_their_step_without_trl_rows_or_replayed_steps(capsys):
    """The live mirror (harness/tracking.py) logs ``step`` in every row (W&B's ``_step`` then counts rows), TRL's
    own metrics in rows of their own (``trl/global_step``), and a resumed run's steps after its checkpoint twice:
    the report reads the step column, skips TRL's rows, keeps each step's last copy (metrics.csv's), and reports a
    run whose mirror dropped rows as damaged. Bugs caught: load.py:_wandb_record reading ``_step``, keeping the
    TRL rows, or the first copy of a replayed step; load_wandb ignoring ``dropped_rows``."""
    config = {**make_config("inputs_check", "token_reversal", "tpo", 1, 4), "trainer": {"steps": 4}, "seed": 0}

    def run(dropped: int) -> FakeRun:
        fake = FakeRun(config, np.arange(0), {})
        fake.summary.update(last_step=3, dropped_rows=dropped)
        fake._rows = [{"_step": 0, "step": 0, "error": 0.9}, {"_step": 1, "step": 0, TRL_STEP: 1, "trl/loss": 5.0},
                      {"_step": 2, "step": 1, "error": 0.75}, {"_step": 3, "step": 1, "error": 0.8},
                      {"_step": 4, "step": 2, "error": 0.6}, {"_step": 5, "step": 3, "error": 0.5}]
        return fake

    runs, curves = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run(0)]))
    assert runs.status.tolist() == ["completed"] and runs.last_step.tolist() == [3]
    assert set(curves.metric) == {"error"}
    assert curves.sort_values("step")[["step", "value"]].values.tolist() == [[0, 0.9], [1, 0.8], [2, 0.6], [3, 0.5]]
    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run(2)]))
    assert runs.status.tolist() == ["damaged"] and "2 rows dropped from W&B" in capsys.readouterr().err


def test_a_history_missing_a_row_its_summary_counts_is_damaged_and_a_step_logged_twice_is_named(capsys):
    """The mirror records each seed's metrics.csv row count (``metrics_rows``): a history holding fewer distinct steps
    (a row lost in the middle, which the last step cannot show) is damaged; a step logged twice is named in a
    warning. Bugs caught: load.py:_wandb_record not comparing with ``metrics_rows``, or not naming the duplicate."""
    config = {**make_config("inputs_check", "token_reversal", "tpo", 1, 4), "trainer": {"steps": 4}, "seed": 0}

    def run(steps: list[int]) -> FakeRun:
        fake = FakeRun(config, np.arange(0), {})
        fake.summary.update(last_step=3, metrics_rows=4)
        fake._rows = [{"_step": i, "step": step, "error": 0.5} for i, step in enumerate(steps)]
        return fake

    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run([0, 1, 2, 3])]))
    assert runs.status.tolist() == ["completed"] and "warning" not in capsys.readouterr().err
    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run([0, 2, 3])]))
    assert runs.status.tolist() == ["damaged"] and "holds 3 of its 4 metrics.csv rows" in runs.error.iloc[0]
    runs, _ = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([run([0, 1, 1, 2, 3])]))
    assert runs.status.tolist() == ["completed"] and "step 1 and possibly more logged twice" in capsys.readouterr().err


def test_a_run_started_before_the_step_metric_and_resumed_after_reads_both_kinds_of_rows():
    """A W&B run begun by a version that logged with W&B's own step (no ``step`` column) and resumed by one that
    logs ``step`` (its ``_step`` counting on): the old rows are read by ``_step``, the new by ``step``. Bug caught:
    load.py:_wandb_record casting a ``step`` column with NaN in its old rows (IntCastingNaNError)."""
    config = {**make_config("inputs_check", "token_reversal", "tpo", 1, 4), "trainer": {"steps": 4}, "seed": 0}
    fake = FakeRun(config, np.arange(0), {})
    fake.summary.update(last_step=3)
    fake._rows = [{"_step": 0, "error": 0.9}, {"_step": 1, "error": 0.8},  # the old version's rows
                  {"_step": 2, "step": 2, "error": 0.6}, {"_step": 3, "step": 3, "error": 0.5}]
    runs, curves = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([fake]))
    assert runs.status.tolist() == ["completed"]
    assert curves.sort_values("step")[["step", "value"]].values.tolist() == [[0, 0.9], [1, 0.8], [2, 0.6], [3, 0.5]]


def test_one_run_for_a_configurations_seeds_reads_as_a_run_per_seed():
    """A configuration's run (harness/tracking.py, above ``logger.seed_runs`` seeds: ``<key>/seed<N>`` columns and
    summary keys beside their seed means, the seed ids in its config) gives the frames a run per seed gives, a failed
    seed (``status/seed1``) left out as its own failed run is. Bugs caught: load.py ``SeedOfRun`` taking another
    seed's summary key or the run's status for a seed's, reading the seed means as a seed."""
    rng = np.random.default_rng(1)
    steps, config = np.arange(0, 40, 10), make_config("inputs_check", "token_reversal", "tpo", 3, 40)
    error, entropy = rng.random((3, len(steps))), rng.random((3, len(steps)))
    status = {0: "completed", 1: "failed", 2: "completed"}
    per_seed = []
    for seed in range(3):
        run = FakeRun({**config, "trainer": {"steps": 40}, "seed": seed}, steps,
                      {"error": error[seed], "target_entropy": entropy[seed]}, status=status[seed])
        run.summary.update(last_step=30, metrics_rows=4)
        per_seed.append(run)
    one = FakeRun({**config, "trainer": {"steps": 40}, "seed_ids": [0, 1, 2]}, steps,
                  {"error": error.mean(0), "target_entropy": entropy.mean(0)})
    for seed in range(3):
        for index, row in enumerate(one._rows):
            row.update({"step": int(steps[index]), f"error/seed{seed}": float(error[seed, index]),
                        f"target_entropy/seed{seed}": float(entropy[seed, index])})
        one.summary[f"status/seed{seed}"] = status[seed]
    one.summary.update(status="completed", last_step=30, metrics_rows=4)
    runs_per_seed, curves_per_seed = load_runs(wandb=["me/tpo"], wandb_api=FakeApi(per_seed))
    runs_one, curves_one = load_runs(wandb=["me/tpo"], wandb_api=FakeApi([one]))
    assert runs_one.seed_ids.tolist() == [(0, 2)] and set(curves_one.metric) == {"error", "target_entropy"}
    key = ["seed", "step", "metric"]
    pd.testing.assert_frame_equal(curves_one.sort_values(key).reset_index(drop=True),
                                  curves_per_seed.sort_values(key).reset_index(drop=True))
    columns = ["status", "seed_ids", "steps", "last_step", "signature"]
    assert runs_one[columns].to_dict("records") == runs_per_seed[columns].to_dict("records")
