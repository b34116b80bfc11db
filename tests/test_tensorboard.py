"""``logger=tensorboard`` (harness/tracking.py ``TensorBoardTracker``): event files under ``<run dir>/tensorboard/
seed<N>/`` that TensorBoard reads (TFRecord framing, CRCs right) hold every metrics.csv row of their seed, once, also
after an interrupted launch is resumed and whatever the kill cut short."""

from __future__ import annotations

import struct
from collections import Counter
from pathlib import Path

import numpy as np
import pandas as pd
from tensorboardX.proto.event_pb2 import Event
from tensorboardX.record_writer import masked_crc32c

from conftest import run_config, run_killed_at
from tasks import get_task

OVERRIDES = ["task=tabular_single", "seeds=3", "trainer.progress=false", "logger=tensorboard"]


def read_events(path: Path) -> list[Event]:
    """The events of ``path`` as TensorBoard reads them: each record's length and data checked against their masked
    CRC-32C; a record cut off (a killed writer's last) ends the file."""
    data, position, events = path.read_bytes(), 0, []
    while position + 12 <= len(data):
        header = data[position:position + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[position + 8:position + 12])[0] == masked_crc32c(header), path
        body = data[position + 12:position + 12 + length]
        if position + 16 + length > len(data):
            break
        assert struct.unpack("<I", data[position + 12 + length:position + 16 + length])[0] == masked_crc32c(body)
        event = Event()
        event.ParseFromString(body)
        events.append(event)
        position += 16 + length
    return events


def scalars(run_dir: Path) -> dict[int, list[tuple[int, dict[str, float]]]]:
    """Per seed, (step, tag → value) of every summary event in all of its files."""
    found = {}
    for folder in sorted((run_dir / "tensorboard").glob("seed*")):
        found[int(folder.name[4:])] = [(event.step, {value.tag: value.simple_value for value in event.summary.value})
                                       for path in sorted(folder.glob("events.out.tfevents.*"))
                                       for event in read_events(path) if event.WhichOneof("what") == "summary"]
    return found


def assert_every_row_once(run_dir: Path) -> None:
    """Each seed's events hold each metrics.csv row of that seed exactly once, with its values (float32, as
    TensorBoard stores them, which metrics.csv's 9 digits round-trip)."""
    frame = pd.read_csv(run_dir / "metrics.csv")
    found = scalars(run_dir)
    assert sorted(found) == sorted(frame.seed.unique())
    for seed, events in found.items():
        mine = frame[frame.seed == seed].sort_values("step")
        counts = Counter(step for step, _ in events)
        assert sorted(counts) == mine.step.tolist() and set(counts.values()) == {1}, f"seed {seed}: {counts}"
        by_step = dict(events)
        for metric in ("error", "misalignment"):
            logged = np.float32([by_step[step][metric] for step in mine.step])
            np.testing.assert_array_equal(logged, np.float32(mine[metric]), err_msg=f"seed {seed} {metric}")


def test_event_files_hold_every_row_of_each_seed(tmp_path):
    """Bugs caught (tracking.py ``TensorBoardTracker``): a seed's values in another seed's file (seeds × names read
    as names × seeds), a row missing or written twice, a wrong CRC (TensorBoard drops the record)."""
    summary = run_config([*OVERRIDES, "task.steps=8"], tmp_path)
    assert summary["status"] == "completed"
    assert sorted(path.name for path in (tmp_path / "tensorboard").iterdir()) == ["seed0", "seed1", "seed2"]
    assert all(len(list(folder.glob("events.out.tfevents.*"))) == 1 for folder in (tmp_path / "tensorboard").iterdir())
    assert_every_row_once(tmp_path)
    events = read_events(next((tmp_path / "tensorboard" / "seed0").glob("events.out.tfevents.*")))
    assert events[0].file_version == "brain.Event:2"  # what TensorBoard takes for an event file
    assert events[1].session_log.status == events[1].session_log.START and events[1].step == 0  # the purge


def test_a_resumed_run_holds_each_row_once_whatever_the_kill_cut_short(tmp_path):
    """Ctrl-C at step 8 with checkpoints every 5, then the interrupted launch's file of seed 0 cut in the middle of a
    record (as a kill during a write leaves it): after the resume each seed's files hold every row once. Bugs
    caught: the resume not writing the kept rows (the cut file lacks some), or leaving the earlier launch's files
    (rows 0-7 twice)."""
    overrides = [*OVERRIDES, "task.steps=20", "task.checkpoint_every=5"]
    run_killed_at(overrides, tmp_path, get_task("tabular_single"), 8)
    (cut,) = (tmp_path / "tensorboard" / "seed0").glob("events.out.tfevents.*")
    cut.write_bytes(cut.read_bytes()[:len(cut.read_bytes()) // 2])
    assert len(scalars(tmp_path)[0]) < 8 and len(scalars(tmp_path)[1]) == 8
    run_config([*overrides, "trainer.resume=auto"], tmp_path)
    assert_every_row_once(tmp_path)


def test_nan_is_left_out_and_trl_rows_are_not_written(tmp_path):
    """A NaN (a metric evaluated every few steps, a diverged seed's) is no point of the seed's curve, and TRL's own
    rows are W&B's only. Bugs caught: tracking.py ``TensorBoardTracker`` writing NaN (TensorBoard draws a marker for
    each), or writing TRL's rows at metrics.csv's steps."""
    from harness.tracking import TRL_STEP, TensorBoardTracker

    tracker = TensorBoardTracker(tmp_path, [3, 4])
    tracker.log(0, {"error": np.array([0.5, np.nan]), "test_accuracy": np.array([np.nan, np.nan])})
    tracker.log(0, {"trl/loss": np.array([1.0, 2.0]), TRL_STEP: np.array([1.0, 1.0])})
    tracker.finish({})
    assert scalars(tmp_path) == {3: [(0, {"error": 0.5})], 4: [(0, {})]}
