"""Sweeps on SLURM (hydra/launcher=submitit_slurm_cpu), run for real on a one-node test cluster
(tests/slurm_cluster.py): each job runs as a SLURM job, a failed job is reported as under a local launcher, and a
job cancelled, or requeued at its time limit, continues its run to the numbers of an uninterrupted one."""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import ROOT, run_config

pytest_plugins = ["slurm_cluster"]

STEPS = 6000  # with a checkpoint every 1000: stopped after its first checkpoint, a few seconds in, it has more to do
RESUMABLE = ["task=tabular_single", "algorithm=tpo", "seeds=1", "logger=none", f"task.steps={STEPS}",
             "task.checkpoint_every=1000"]


def sweep_args(cluster, sweep_dir: Path, *overrides: str) -> list[str]:
    return ["-m", *overrides, "hydra/launcher=submitit_slurm_cpu", f"hydra.launcher.partition={cluster.partition}",
            f"hydra.sweep.dir={sweep_dir}"]


@contextlib.contextmanager
def running_sweep(cluster, args: list[str], output: Path) -> Iterator[subprocess.Popen]:
    """``python -m harness <args>`` on ``cluster``, its stderr into ``output``; killed if it still runs at the end
    of the block (a test that failed)."""
    with open(output, "w") as stderr:
        sweep = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=output.parent, stdout=subprocess.DEVNULL,
                                 stderr=stderr, env={**cluster.env, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"})
    try:
        yield sweep
    finally:
        if sweep.poll() is None:
            sweep.kill()
            sweep.wait()


def finish(sweep: subprocess.Popen, output: Path) -> tuple[int, str]:
    return sweep.wait(timeout=240), output.read_text()


def run_sweep(cluster, args: list[str], output: Path) -> tuple[int, str]:
    with running_sweep(cluster, args, output) as sweep:
        return finish(sweep, output)


def first_checkpoint(sweep: subprocess.Popen, output: Path, sweep_dir: Path) -> Path:
    """The folder of the sweep's one job, once it wrote its first checkpoint."""
    deadline = time.monotonic() + 120
    while not (found := list(sweep_dir.glob("*/checkpoint.pt"))):
        assert sweep.poll() is None, f"the sweep ended before its job's first checkpoint: {output.read_text()}"
        assert time.monotonic() < deadline, "no checkpoint within 120 s"
        time.sleep(0.05)
    return found[0].parent


def only_job(cluster) -> str:
    jobs = cluster.jobs()
    assert len(jobs) == 1, jobs
    return jobs[0]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> bytes:
    """metrics.csv of RESUMABLE run in one go."""
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    run_config(RESUMABLE, run_dir)
    return (run_dir / "metrics.csv").read_bytes()


def assert_resumed(job_dir: Path, uninterrupted: bytes) -> None:
    """The job finished after resuming from a checkpoint before its end, to the uninterrupted run's metrics."""
    summary = json.loads((job_dir / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert len(summary["resumed_from"]) == 1 and 0 < summary["resumed_from"][0] < STEPS, summary["resumed_from"]
    assert (job_dir / "metrics.csv").read_bytes() == uninterrupted


def test_slurm_sweep_runs_each_job_and_reports_the_failed_one(slurm_cluster, tmp_path):
    """Each job of a sweep runs as a SLURM job and writes its metrics; a job that fails (an algorithm the task
    cannot run) is reported as under a local launcher: after every job ran, one FAILED line naming its folder and
    error, and exit 1.

    Bug caught: conf/hydra/launcher/submitit_slurm_cpu.yaml asking for gpus_per_node: 1 (a CPU node has none)."""
    sweep_dir = tmp_path / "sweep"
    code, err = run_sweep(slurm_cluster, sweep_args(slurm_cluster, sweep_dir, "task=tabular_single", "seeds=1",
                                                    "task.steps=20", "algorithm=tpo,grpo,tpo_token", "logger=none"),
                          tmp_path / "sweep.err")
    assert code == 1, err
    jobs = {path.name.split(",")[0].removeprefix("algorithm="): path for path in sweep_dir.glob("algorithm=*")}
    assert sorted(jobs) == ["grpo", "tpo", "tpo_token"]
    for algorithm in ("tpo", "grpo"):
        assert json.loads((jobs[algorithm] / "summary.json").read_text())["status"] == "completed"
        assert (jobs[algorithm] / "metrics.csv").read_text().splitlines()[-1].startswith("19,0,")
    assert "sweep: 3 jobs (2 completed, 1 failed)" in err
    assert f"FAILED job #2 {jobs['tpo_token']}: algorithm=tpo_token cannot run on task=tabular_single" in err
    assert len(list(sweep_dir.glob(".submitit/*/*_log.out"))) == 3  # SLURM's logs of the three jobs


def test_slurm_job_cancelled_mid_run_resumes_when_the_sweep_is_run_again(slurm_cluster, tmp_path, uninterrupted):
    """A job cancelled while it trains (scancel: SIGTERM) writes its summary and keeps its last checkpoint; the sweep
    fails with submitit's error, which holds the job's one line naming the command that continues it (the same
    sweep with trainer.resume=auto). That command resumes the job from its checkpoint to metrics byte-identical to
    an uninterrupted run.

    Bug caught: harness/session.py not turning SIGTERM into an interruption (the job runs on, then is killed)."""
    sweep_dir = tmp_path / "sweep"
    args = sweep_args(slurm_cluster, sweep_dir, *RESUMABLE)
    with running_sweep(slurm_cluster, args, tmp_path / "first.err") as sweep:
        job_dir = first_checkpoint(sweep, tmp_path / "first.err", sweep_dir)
        slurm_cluster.run("scancel", only_job(slurm_cluster))
        code, err = finish(sweep, tmp_path / "first.err")
    assert code == 1 and "state: CANCELLED" in err, err
    assert json.loads((job_dir / "summary.json").read_text())["status"] == "interrupted"
    line = f"Interrupted: sweep job {job_dir}; it keeps its last checkpoint; re-run the sweep to continue it: "
    assert line in err, err
    again = shlex.split(err.split(line, 1)[1].splitlines()[0])
    assert again == ["python", "-m", "harness", *args, "trainer.resume=auto"]

    code, err = run_sweep(slurm_cluster, again[3:], tmp_path / "again.err")
    assert code == 0, err
    assert_resumed(job_dir, uninterrupted)


def test_slurm_job_at_its_time_limit_is_requeued_and_resumes(slurm_cluster, tmp_path, uninterrupted):
    """SLURM's USR2 before a job's time limit (sent here by scancel; with timeout_min=2 submitit takes any USR2 as
    the time limit) makes submitit requeue the job with the same command; the requeued job continues the run from
    its last checkpoint to metrics byte-identical to an uninterrupted run, and the sweep, which waited for it,
    exits 0. (submitit logs "Requeued job" only after ``scontrol requeue`` returns, and SLURM may end the job
    before that line is written: the requeued run's own line is the evidence.)

    Bug caught: conf/hydra/launcher/submitit_slurm_cpu.yaml with max_num_timeout: 0 (the job is not requeued)."""
    sweep_dir = tmp_path / "sweep"
    args = sweep_args(slurm_cluster, sweep_dir, *RESUMABLE, "hydra.launcher.timeout_min=2",
                      "hydra.launcher.signal_delay_s=10")  # SLURM's own USR2 comes 50 s in at the earliest
    with running_sweep(slurm_cluster, args, tmp_path / "sweep.err") as sweep:
        job_dir = first_checkpoint(sweep, tmp_path / "sweep.err", sweep_dir)
        job = only_job(slurm_cluster)
        slurm_cluster.run("scancel", "--signal=USR2", job)
        code, err = finish(sweep, tmp_path / "sweep.err")
    assert code == 0, err
    assert "sweep: 1 jobs (1 completed)" in err
    log = (sweep_dir / ".submitit" / job / f"{job}_0_log.out").read_text()  # both runs of the job
    assert "this job is timed-out" in log, log
    assert "SLURM runs this job again (restart 1): trainer.resume=auto continues its run" in log, log
    assert_resumed(job_dir, uninterrupted)
