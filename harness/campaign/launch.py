"""What the runner asks of a launcher and learns of a run's end, and what every run gets: its environment."""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from harness.campaign.jobs import Job
from harness.campaign.text import ROOT

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)  # the runner's: Ctrl-C, a kill, a login session's end
RUN_ENV = {"WANDB_MODE": "disabled", "OMP_NUM_THREADS": "1"}  # every run's, either launcher (and ``run_environment``)


def run_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """A local run's environment: ``environ`` with ``RUN_ENV`` and this repository first on ``PYTHONPATH``. Paths
    already there stay after it: packages a machine provides outside the project's environment (``make gpu-site``'s
    on a GPU machine) reach the runs as they reach the campaign."""
    earlier = environ.get("PYTHONPATH")
    return {**environ, **RUN_ENV, "PYTHONPATH": os.pathsep.join([str(ROOT), *([earlier] if earlier else [])])}


@dataclass(frozen=True)
class Ended:
    """How a launched run's command ended; ``run`` judges the run by this and its summary.json."""

    clean: bool  # its command exited 0
    how: str  # for the FAILED line: "exit 1", "SLURM job 12: <its last error line>"
    log: Path  # what the run printed


class Launcher:
    """What ``run`` asks of a launcher: ``attach``, ``start_all``, ``poll``, ``stop``."""

    def start_all(self, starts: list[tuple[Job, int]]) -> list:
        """Start each (job, slot): its handle, or None when it was refused (in a line of the launcher's)."""
        return [self.start(job, slot) for job, slot in starts]
