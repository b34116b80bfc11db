"""A sweep's closing report: every job records how it ended, and a sweep with a failed job exits non-zero.

Hydra runs each job of a multirun in isolation (a job's error stays in its folder and the other jobs go on) and
exits 0 whatever happened. ``SweepReport`` (a Hydra callback, registered in conf/config.yaml) gives each job a
record folder before the first job starts; after the last job it prints one line per failed job (folder, error)
and exits 1 if there was any. What stops a sweep before its first job (an unknown option or key: Hydra's error,
exit 1; an unknown experiment preset: ours, exit 2) never reaches this report.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

RECORDS_ENV = "TPO_BENCH_SWEEP_RECORDS"  # inherited by the jobs, in this process or a launcher's workers
RECORDS_DIR = ".tpo-bench-jobs"


def record_job(number: int, run_dir: Path, status: str, error: str | None) -> None:
    """Record one job's outcome for the sweep's report (nothing outside a sweep started by SweepReport)."""
    folder = os.environ.get(RECORDS_ENV)
    if folder:
        payload = {"job": number, "dir": str(run_dir), "status": status, "error": error}
        Path(folder, f"{number}.json").write_text(json.dumps(payload) + "\n")


class SweepReport(Callback):
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        records = Path(str(config.hydra.sweep.dir)).resolve() / RECORDS_DIR
        shutil.rmtree(records, ignore_errors=True)  # a sweep re-run into its folder reports its own jobs only
        records.mkdir(parents=True)
        os.environ[RECORDS_ENV] = str(records)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        records = Path(os.environ.pop(RECORDS_ENV))
        jobs = sorted((json.loads(path.read_text()) for path in records.glob("*.json")), key=lambda job: job["job"])
        failed = [job for job in jobs if job["status"] == "failed"]
        counts = {status: sum(job["status"] == status for job in jobs) for status in {j["status"] for j in jobs}}
        print(f"sweep: {len(jobs)} jobs ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})",
              file=sys.stderr)
        for job in failed:
            print(f"FAILED job #{job['job']} {job['dir']}: {job['error']}", file=sys.stderr)
        if failed:
            sys.exit(1)
