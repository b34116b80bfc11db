"""One run of a campaign (``Job``): a cell's seed range, its folders and the command that runs it."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from pathlib import Path

FIXED = ("logger=none", "threads=1", "trainer.resume=auto", "trainer.progress=false")  # every run's, see Job.command


@dataclass(frozen=True)
class Job:
    """One run: ``seeds`` seeds from ``offset`` of one cell."""

    priority: str
    preset: str
    cell: str
    overrides: tuple[str, ...]
    offset: int
    seeds: int
    steps: int
    cost: float  # CPU-seconds per seed-episode
    gpu_hours: float | None = None  # a GPU cell's job: its seeds' share of the cell's projected GPU-hours

    @property
    def name(self) -> str:
        return f"seeds{self.offset}" + (f"-{self.offset + self.seeds - 1}" if self.seeds > 1 else "")

    def work_dir(self, work: Path) -> Path:
        return work / self.preset / self.cell / self.name

    def result_dir(self, results: Path) -> Path:
        return results / "runs" / self.preset / self.cell / self.name

    @property
    def cpu_hours(self) -> float:
        return self.cost * self.seeds * self.steps / 3600

    @property
    def hours(self) -> float:
        """The hours the job is expected to take on its device: a GPU cell's GPU-hours, else its CPU-hours."""
        return self.cpu_hours if self.gpu_hours is None else self.gpu_hours

    def command(self, work: Path) -> list[str]:
        return [sys.executable, "-m", "harness", f"experiment={self.preset}", *self.overrides, f"seeds={self.seeds}",
                f"seed_offset={self.offset}", *FIXED, f"hydra.run.dir={hydra_value(str(self.work_dir(work)))}"]


def hydra_value(text: str) -> str:
    """``text`` as the value of a Hydra override: as it is when Hydra's grammar reads it so, else quoted (a scorecard
    candidate's folder ``tpo,eta=0.5`` would otherwise be read as a list and a key)."""
    if re.fullmatch(r"[\w/.+\-:@%~]+", text):
        return text
    # inside quotes a backslash escapes only a quote or the backslashes before one (and before the closing quote)
    escaped = re.sub(r"(\\*)'", lambda m: m.group(1) * 2 + "\\'", text)
    return "'" + re.sub(r"(\\+)$", lambda m: m.group(1) * 2, escaped) + "'"
