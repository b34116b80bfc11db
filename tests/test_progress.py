"""Progress a run shows: lines in a log (a pipe, nohup, SLURM), a bar on a terminal."""

from __future__ import annotations

import pytest

import io
import re

import numpy as np

from conftest import run_cli
from harness import progress

LINE = re.compile(r"^\w+/tpo: episode ([\d,]+)/([\d,]+) \((\d+)%\)(?:, error [\d.e+-]+)?, [\d.e+-]+ "
                  r"episodes/s, (\d\d:\d\d:\d\d|\?) left$")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_every_5_percent_no_faster_than_the_gap_and_once_at_the_end():
    """Bugs caught: the milestone test (``done % every``) or the gap test dropped (a line per episode), the last
    line missing, the ETA from episodes done rather than left."""
    clock, stream = Clock(), io.StringIO()
    shown = progress.Progress("run", 200, 0, "lines", stream, clock)
    for episode in range(200):
        clock.now += 1.0 if episode < 100 else 0.01  # 1 s per episode, then 100 per second
        shown.advance(np.array([0.5, np.nan, 0.25]) if episode % 2 else None)
    shown.close()
    lines = stream.getvalue().splitlines()
    episodes = [int(line.split("episode ")[1].split("/")[0]) for line in lines]
    assert episodes == [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200]  # then within 5 s: only the last line
    assert "(5%), error 0.375, 1 episodes/s, 00:03:10 left" in lines[0]  # diverged seed left out of the mean
    assert lines[-1].endswith("(100%), error 0.375, 1.98 episodes/s, 00:00:00 left")


def test_a_resumed_run_counts_from_its_checkpoint_and_false_shows_nothing():
    clock, stream = Clock(), io.StringIO()
    shown = progress.Progress("run", 100, 60, "lines", stream, clock)
    for _ in range(40):
        clock.now += 1.0
        shown.advance()
    shown.close()
    first = stream.getvalue().splitlines()[0]
    assert first.startswith("run: episode 65/100 (65%), 1 episodes/s, 00:00:35 left")
    quiet = io.StringIO()
    silent = progress.Progress("run", 10, 0, False, quiet, clock)
    for _ in range(10):
        clock.now += 10
        silent.advance()
    silent.close()
    assert quiet.getvalue() == ""


@pytest.mark.parametrize("task, episodes, extra", [
    ("tabular_single", 400, []),
    ("token_reversal", 200, ["task.H=4", "task.batch_size=8"]),  # the token trainer: its own episode loop
])
def test_a_piped_run_logs_progress_lines(task, episodes, extra, tmp_path):
    """``trainer.progress=auto`` with stdout and stderr pipes (as under nohup or SLURM): lines on stdout, not
    silence, for a bandit and a 200-episode token run. Bug caught: auto meaning "a bar on a terminal, else
    nothing"; a trainer that never reports its episodes."""
    result = run_cli([f"task={task}", "algorithm=tpo", "seeds=2", f"task.steps={episodes}", "logger=none",
                      "hydra.run.dir=run", *extra], tmp_path)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith(f"{task}/tpo: episode")]
    assert lines and all(LINE.match(line) for line in lines), result.stdout
    assert lines[-1].startswith(f"{task}/tpo: episode {episodes}/{episodes} (100%)")
