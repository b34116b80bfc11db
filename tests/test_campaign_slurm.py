"""The campaign on SLURM (``--launcher slurm``): each seed range a SLURM job of exactly the local command, recorded
beside its run folder; a runner stopped and started again re-attaches to its jobs that still run instead of
submitting them twice, and exports each run once, to the numbers of a local campaign. The end-to-end test runs on
the one-node test cluster (tests/slurm_cluster.py); the others fake squeue and need no SLURM."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import ROOT
from harness import campaign, rundir
from harness.cli import Refusal
from harness.campaign import cli as campaign_cli
from harness.campaign import reports as campaign_reports
from harness.campaign import runner as campaign_runner
from harness.campaign import slurm as campaign_slurm

pytest_plugins = ["slurm_cluster"]

CELLS = [  # two presets, tiny; the second with resources of its own
    {"priority": "P1", "preset": "fig2_tabular_single", "name": "tpo", "seeds": 2, "cost": 0.001,
     "overrides": ["algorithm=tpo", "task.steps=150"]},
    {"priority": "P1", "preset": "fig3_tabular_multi", "name": "tpo", "seeds": 2, "cost": 0.001, "cpus": 2,
     "time_min": 7, "overrides": ["algorithm=tpo", "task.steps=100"]},
]


def write_queue(tmp_path: Path, cells: list[dict], chunk: int = 2) -> Path:
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump({"chunk": chunk, "cells": cells}))
    return path


def jobs_of(cells: list[dict], chunk: int = 2) -> list[campaign.Job]:
    return [job for job, _ in campaign.plan({"chunk": chunk, "cells": cells}, Path("/nonexistent"))[0]]


def record(launcher: campaign.SlurmLauncher, job: campaign.Job, job_id: str, command: list[str] | None = None):
    """The record of ``job_id`` submitted for ``job`` (its own command unless ``command``)."""
    job.work_dir(launcher.work).mkdir(parents=True, exist_ok=True)
    launcher.record_path(job).write_text(json.dumps({"job_id": job_id, "submitted": "2024-01-01 00:00:00",
                                                     "command": command or launcher.command(job)}))


def no_submission(*args, **kwargs):
    raise AssertionError("submitted")


@pytest.mark.parametrize("change, message", [
    ({"cpus": 0}, "cells[1].cpus=0 is not valid; expected an integer >= 1 (CPUs per job, default 1)"),
    ({"mem_gb": "4G"}, "cells[1].mem_gb='4G' is not valid; expected a number > 0 (GB of memory per job, default 4)"),
    ({"time_min": 1.5}, "cells[1].time_min=1.5 is not valid; expected an integer >= 1 (minutes per job; default: "),
    ({"gpus": 2}, "cells[1].gpus=2 is not valid; expected 0 or 1 (a GPU cell's jobs get one GPU each; default 0)"),
    ({"gpu": 1}, ("cells[1] has an unknown key 'gpu'; valid keys: priority, preset, name, seeds, cost, overrides, "
                  "chunk, cpus, mem_gb, time_min, gpus, gpu_hours")),
    ({"chunk": 0},
     "cells[1].chunk=0 is not valid; expected an integer >= 1 (seeds per job; default: the queue's chunk)"),
    ({"gpus": 1}, "cells[1] has gpus: 1 but no override device=cuda; a GPU cell has both, a CPU cell neither"),
    ({"overrides": [*CELLS[1]["overrides"], "device=cuda"]},
     "cells[1] has gpus: 0 but the override device=cuda; a GPU cell has both, a CPU cell neither"),
    ({"gpu_hours": 2}, "cells[1].gpu_hours is for a GPU cell (gpus: 1, device=cuda)"),
], ids=["cpus", "mem_gb", "time_min", "gpus", "unknown key", "chunk", "gpu without cuda", "cuda without gpu",
        "gpu_hours on a cpu cell"])
def test_a_cell_with_bad_resources_is_refused_naming_the_key_and_its_valid_values(tmp_path, change, message):
    """Refused in one line before anything runs, not by sbatch after the jobs before it were submitted (nor, a
    misspelt key, ignored).

    Bug caught: ``check_resources`` with ``v in (0, 1)`` dropped from the gpus check (two GPUs per job asked)."""
    path = write_queue(tmp_path, [CELLS[0], {**CELLS[1], **change}])
    with pytest.raises(SystemExit, match="^Error: " + re.escape(f"queue.yaml: {message}")) as refused:
        campaign.main([str(path), "--dry-run", "--launcher", "slurm", "--work", str(tmp_path / "work"),
                       "--results", str(tmp_path / "results")])
    assert "\n" not in str(refused.value)


def test_a_restarted_runner_reattaches_only_to_recorded_jobs_squeue_lists_with_their_command(tmp_path, capsys):
    """Of four jobs: one recorded and still running its command is re-attached; one whose recorded job ended is
    left to submit (its run folder decides: export or resume); one whose recorded job runs another command (the
    cell's configuration changed) is not re-attached but claims its folder; one never submitted is left to submit.

    Bug caught: ``attach`` testing ``record`` instead of ``state`` (an ended job re-attached: its run never resumes)."""
    cells = [dict(CELLS[0], name=name) for name in ("running", "ended", "other", "new")]
    running, ended, other, new = jobs_of(cells)
    launcher = campaign.SlurmLauncher(tmp_path / "work", cells,
                                      active_jobs=lambda: {"11": "RUNNING", "13": "PENDING", "99": "RUNNING"})
    record(launcher, running, "11")
    record(launcher, ended, "12")
    record(launcher, other, "13", command=[*other.command(launcher.work), "task.alpha=0.5"])
    attached = launcher.attach([running, ended, other, new])
    assert list(attached) == [running] and attached[running].job_id == "11"
    assert attached[running].log == tmp_path / "work" / ".submitit" / "11" / "11_0_log.out"
    assert "attach fig2_tabular_single/running/seeds0-1 → SLURM job 11 (RUNNING), submitted 2024-01-01 00:00:00" \
        in capsys.readouterr().out
    assert [launcher.claim(job) for job in (ended, other, new)] == [None, "SLURM job 13 (PENDING) runs it", None]


def test_squeue_failing_at_the_start_submits_nothing_and_says_so_in_one_line(tmp_path, monkeypatch):
    """Without squeue's answer a recorded job may still run: submitting could run it twice.

    Bug caught: ``attach`` catching ``OSError`` instead of ``SlurmError`` (squeue's failure escapes as a traceback)."""
    import submitit

    def squeue_down():
        raise campaign.SlurmError("slurm_load_jobs error: Unable to contact slurm controller")

    monkeypatch.setattr(submitit.AutoExecutor, "submit", no_submission)
    launcher = campaign.SlurmLauncher(tmp_path / "work", CELLS, active_jobs=squeue_down)
    with pytest.raises(SystemExit, match=r"^Error: cannot tell which recorded SLURM jobs still run \(slurm_load_jobs "
                                         r"error: Unable to contact slurm controller\); nothing was submitted: run the "
                                         r"same command again once squeue answers$"):
        campaign.run(jobs_of(CELLS), 2, launcher.work, tmp_path / "results", launcher=launcher)


class FakeLauncher(campaign.Launcher):
    """Jobs already running at the start (re-attached) and jobs started: each ends, completed, when polled."""

    def __init__(self, work: Path, attached: set[str]):
        self.work, self.attached, self.started, self.stopped = work, attached, [], []

    def attach(self, jobs):
        return {job: job.cell for job in jobs if job.cell in self.attached}

    def start(self, job, slot):
        self.started.append(job.cell)
        return job.cell

    def poll(self, handle, job):
        folder = job.work_dir(self.work)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps({"status": "completed"}))
        return campaign.Ended(True, "exit 0", folder / "log")

    def stop(self, handles):
        self.stopped.append(handles)


def test_the_runner_polls_reattached_jobs_and_starts_only_the_others(tmp_path, monkeypatch):
    """The shared loop with a fake launcher: the re-attached job is exported when it ends, never started again.

    Bug caught: ``run`` without ``pending = [job for job in pending if job not in attached]`` (started twice)."""
    exported = []
    monkeypatch.setattr(campaign_runner, "export", lambda job, work, results: exported.append(job.cell))
    monkeypatch.setattr(campaign_reports, "report", lambda preset, results: [])
    monkeypatch.setattr(campaign_runner.time, "sleep", lambda _: None)
    cells = [dict(CELLS[0], name=name) for name in ("a", "b", "c")]
    launcher = FakeLauncher(tmp_path / "work", {"b"})
    assert campaign.run(jobs_of(cells), 2, tmp_path / "work", tmp_path / "results", launcher=launcher) == 0
    assert launcher.started == ["a", "c"] and sorted(exported) == ["a", "b", "c"] and launcher.stopped == [[]]


def test_a_freed_slot_is_refilled_while_the_reports_are_written_and_each_export_is_noted_until_reported(
        tmp_path, monkeypatch):
    """A job's end: the next job starts in the freed slot at once, then the run is exported (an export waits while
    a report holds the results lock) and its reports (seconds to a minute each) are regenerated in the runner's
    reporter thread; the runner returns once they are written. Each export notes its preset as stale until its
    report clears it, so a runner stopped in between leaves it to the next campaign.

    Bug caught: ``exported_now`` calling ``report`` itself (the next job waits for the report: here, for ever)."""
    import threading

    events, third_started = [], threading.Event()
    monkeypatch.setattr(campaign_runner, "export", lambda job, work, results: events.append(("export", job.cell)))

    def slow_report(preset, results):  # returns only once the last job has started
        assert third_started.wait(timeout=30), "the runner waited for a report before refilling its slot"
        events.append(("report", preset))
        return []

    monkeypatch.setattr(campaign_reports, "report", slow_report)
    monkeypatch.setattr(campaign_runner.time, "sleep", lambda _: None)

    class Recording(FakeLauncher):
        def start(self, job, slot):
            events.append(("start", job.cell))
            if job.cell == "c":
                third_started.set()
            return super().start(job, slot)

    cells = [dict(CELLS[0], name=name) for name in ("a", "b", "c")]
    assert campaign.run(jobs_of(cells), 1, tmp_path / "work", tmp_path / "results",
                        launcher=Recording(tmp_path / "work", set())) == 0
    assert [event for event in events if event[0] != "report"] == [  # each freed slot refilled before the export
        ("start", "a"), ("start", "b"), ("export", "a"), ("start", "c"), ("export", "b"), ("export", "c")]
    reports = [index for index, event in enumerate(events) if event[0] == "report"]
    assert reports and max(reports) > events.index(("export", "c"))  # the last export reported before returning
    assert campaign_reports.note_stale_reports(tmp_path / "results") == ["fig2_tabular_single"]  # (the fake left it)


def test_a_claimed_run_folder_is_refused_in_one_line_and_not_submitted(tmp_path, monkeypatch, capsys):
    """A run folder whose run.lock a live process holds (a local campaign, a run started by hand), or whose
    recorded SLURM job squeue still lists, is not submitted to: one REFUSED line each, counted as failed.

    Bug caught: ``claim`` reading ``holder = None`` instead of the run.lock's holder."""
    import submitit

    monkeypatch.setattr(submitit.AutoExecutor, "submit", no_submission)
    cells = [dict(CELLS[0], name=name) for name in ("locked", "queued")]
    locked, queued = jobs_of(cells)
    launcher = campaign.SlurmLauncher(tmp_path / "work", cells, active_jobs=lambda: {"7": "PENDING"})
    locked.work_dir(launcher.work).mkdir(parents=True)
    (locked.work_dir(launcher.work) / rundir.LOCK_FILE).write_text(f"{os.getpid()} {socket.gethostname()}\n")
    record(launcher, queued, "7", command=["python", "-m", "harness", "another command"])
    assert launcher.attach([locked, queued]) == {}
    assert campaign.run([locked, queued], 2, launcher.work, tmp_path / "results", launcher=launcher) == 2
    lock = locked.work_dir(launcher.work) / rundir.LOCK_FILE
    by_lock = (f"REFUSED fig2_tabular_single/locked/seeds0-1: not submitted, {lock.parent.resolve()} is claimed: "
               f"process {os.getpid()} on {socket.gethostname()} holds its run.lock (a lock left by a crash on another "
               f"host: delete {lock})")
    by_job = (f"REFUSED fig2_tabular_single/queued/seeds0-1: not submitted, {queued.work_dir(launcher.work).resolve()} "
              "is claimed: SLURM job 7 (PENDING) runs it")
    assert [line.split(" ", 1)[1] for line in capsys.readouterr().out.splitlines()] == [by_lock, by_job]


@pytest.mark.parametrize("client", [True, False])
def test_dry_run_on_slurm_prints_each_jobs_resources_and_whether_it_is_reattached_or_submitted(tmp_path, client,
                                                                                                monkeypatch, capsys):
    """Each job to run with its cpus, memory, time limit (given, or its cell's cost × seeds × steps × 2, at least
    10 min) and GPUs, and what the run would do with it; nothing is submitted; on a machine without SLURM's client
    too (``client=False``: planning a submission before logging in to the cluster).

    Bugs caught: ``resources`` without ``TIME_MARGIN`` (a time limit of the bare estimate: a slower node cuts it
    off); ``sbatch --test-only`` asked through submitit's executor where there is no srun (its RuntimeError)."""
    import shutil

    import submitit

    if not client:
        monkeypatch.setattr(shutil, "which", lambda name, *args, **kwargs: None)
    monkeypatch.setattr(submitit.AutoExecutor, "submit", no_submission)
    monkeypatch.setattr(campaign_slurm, "slurm_active_jobs", lambda: {"21": "RUNNING"})
    cells = [dict(CELLS[0], name="slow", cost=12.0),  # 12 s × 150: 0.5 h a seed
             dict(CELLS[1], mem_gb=8, gpus=1, overrides=[*CELLS[1]["overrides"], "device=cuda"])]
    attached = jobs_of(cells, chunk=1)[2]
    record(campaign.SlurmLauncher(tmp_path / "work", cells), attached, "21")
    path = write_queue(tmp_path, cells, chunk=1)
    with pytest.raises(SystemExit) as exit_:
        campaign.main([str(path), "--dry-run", "--launcher", "slurm", "--max-jobs", "3", "--work",
                       str(tmp_path / "work"), "--results", str(tmp_path / "results")])
    assert exit_.value.code == 0
    plan = [line.split("CPU-h  ", 1)[1] for line in capsys.readouterr().out.splitlines() if "CPU-h  " in line]
    assert plan == [
        "to run (cost estimated); cpus 1, mem 4 GB, time 60 min, gpus 0; to submit",
        "to run (cost estimated); cpus 1, mem 4 GB, time 60 min, gpus 0; to submit",
        "to run (cost estimated); cpus 2, mem 8 GB, time 7 min, gpus 1; SLURM job 21 (RUNNING): re-attach",
        "to run (cost estimated); cpus 2, mem 8 GB, time 7 min, gpus 1; to submit"]
    assert not (tmp_path / "results").exists()


def exported_runs(results: Path) -> dict[str, tuple[str, dict]]:
    """Each exported run: its metrics, decompressed, and its summary's final numbers."""
    return {str(folder.relative_to(results)): (
        gzip.decompress((folder / "metrics.csv.gz").read_bytes()).decode(),
        {key: json.loads((folder / "summary.json").read_text())[key] for key in ("status", "seeds", "final")})
        for folder in sorted(path.parent for path in (results / "runs").rglob("summary.json"))}


def start_runner(cluster, tmp_path: Path, queue: Path, name: str, *args: str) -> tuple[subprocess.Popen, Path]:
    """A campaign runner of ``queue`` on the test cluster, in the background, its folders and output under
    ``tmp_path/<name>``; (the process, its output file)."""
    output = tmp_path / f"{name}.out"
    env = {**cluster.env, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    with open(output, "a") as stdout:
        return subprocess.Popen([sys.executable, "-m", "harness.campaign", str(queue), *args, "--work",
                                 str(tmp_path / name / "work"), "--results", str(tmp_path / name / "results")],
                                cwd=tmp_path, env=env, stdout=stdout, stderr=subprocess.STDOUT), output


def submitted_job(work: Path) -> str | None:
    """The SLURM job id of the first record under ``work`` that has one (a record holds only its submission's mark
    until sbatch answers)."""
    return next((record["job_id"] for path in work.rglob("*.slurm.json")
                 if "job_id" in (record := json.loads(path.read_text()))), None)


def wait_for(condition, process: subprocess.Popen, output: Path, what: str, timeout: float = 120):
    deadline = time.monotonic() + timeout
    while not (found := condition()):
        assert process.poll() is None, f"the runner ended before {what}: {output.read_text()}"
        assert time.monotonic() < deadline, f"no {what} within {timeout:.0f} s: {output.read_text()}"
        time.sleep(0.1)
    return found


def test_a_stop_names_a_job_submitted_before_the_runner_took_it_in(tmp_path, capsys):
    """A stop signal can land after sbatch answered and the job was said submitted, before the runner holds its
    handle: the stop still names every job that goes on, once each. Bug caught: ``stop`` naming only the runner's
    handles (a loaded machine's stop said nothing of the job it left running)."""
    launcher = campaign.SlurmLauncher(tmp_path / "work", CELLS, active_jobs=lambda: {})
    held = launcher._run("12")
    launcher._run("9")  # submitted, not yet in the runner's list
    launcher.stop([held])
    assert capsys.readouterr().out.endswith(" stopped: 2 SLURM jobs go on (9, 12); the same command re-attaches to "
                                            "them\n")


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_slurm_campaign_stopped_and_started_again_submits_each_job_once_to_the_numbers_of_a_local_one(
        slurm_cluster, tmp_path, stop):
    """Two presets, one SLURM job at a time. The runner is stopped (SIGTERM, or SIGHUP: the login session's end)
    once it has submitted the first job,
    held pending meanwhile (the node drained) whatever the machine's load: the job goes on and the runner says so
    in one line. The same command started again re-attaches to it (no second submission), exports it when it ends
    and submits the other. Each job was submitted once (SLURM's own list of jobs, the records agree), with its
    cell's resources; each run was exported once, byte-identical to the same queue run locally.

    Bug caught: ``run`` with ``attached = {}`` (the still-running job is refused as claimed, never exported)."""
    path = write_queue(tmp_path, CELLS)

    def runner(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        return start_runner(slurm_cluster, tmp_path, path, name, *args)

    local, local_output = runner("local", "--jobs", "2")  # the reference, meanwhile
    slurm_args = ("--launcher", "slurm", "--partition", slurm_cluster.partition, "--max-jobs", "1")
    node = slurm_cluster.run("sinfo", "--noheader", "--format=%N").split()[0]
    slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=drain", "reason=held by a test")
    try:  # the node drained: the first job waits, pending, however fast or loaded the machine
        first, output = runner("slurm", *slurm_args)
        work = tmp_path / "slurm" / "work"
        job_id = wait_for(lambda: submitted_job(work), first, output, "submission")
        first.send_signal(stop)
        assert first.wait(timeout=60) == 130, output.read_text()
        left = [path for path in (tmp_path / "slurm").rglob("*.lock") if path.name != "results.lock"]  # (flock's)
        assert not left, f"the runner left its locks: {left}"
        assert f"stopped: 1 SLURM jobs go on ({job_id}); the same command re-attaches to them" in output.read_text()
        assert job_id in slurm_cluster.jobs()
        again, _ = runner("slurm", *slurm_args)
        wait_for(lambda: f"→ SLURM job {job_id} (PENDING)" in output.read_text(), again, output, "re-attach")
    finally:
        slurm_cluster.run("scontrol", "update", f"nodename={node}", "state=resume")
    assert again.wait(timeout=240) == 0, output.read_text()
    assert local.wait(timeout=240) == 0, local_output.read_text()

    records = {json.loads(path.read_text())["job_id"] for path in work.rglob("*.slurm.json")}
    submitted = [line.split("|") for line in slurm_cluster.run(
        "squeue", "--noheader", "--states=all", "--format=%i|%j|%C|%l").split() if line.split("|")[0] in records]
    assert sorted((name, cpus, limit) for _, name, cpus, limit in submitted) == [
        ("fig2_tabular_single/tpo/seeds0-1", "1", "10:00"), ("fig3_tabular_multi/tpo/seeds0-1", "2", "7:00")]
    text = output.read_text()
    assert len(re.findall(r" submit \S+ → SLURM job ", text)) == 2, text  # each job submitted once
    for run in ("fig2_tabular_single/tpo/seeds0-1", "fig3_tabular_multi/tpo/seeds0-1"):
        assert len(re.findall(rf"(?:done  |exported ){run}\b", text)) == 1, text
    runs = exported_runs(tmp_path / "slurm" / "results")
    assert list(runs) == ["runs/fig2_tabular_single/tpo/seeds0-1", "runs/fig3_tabular_multi/tpo/seeds0-1"]
    assert runs == exported_runs(tmp_path / "local" / "results")


def test_a_gpu_cell_batches_its_seeds_in_one_job_waits_for_a_cluster_here_and_asks_its_gpu_hours(tmp_path,
                                                                                               monkeypatch, capsys):
    """A GPU cell (``gpus: 1``, ``device=cuda``) with its own ``chunk`` is one job of all its seeds; a local
    campaign on a machine without a GPU leaves it to the cluster (not run, not counted in the CPU-hours to go); on
    SLURM its time limit is its projected GPU-hours × the margin.

    Bug caught: ``plan`` reading ``queue.get("chunk", 5)`` instead of the cell's ``chunk`` (three jobs of 2 seeds)."""
    import submitit

    monkeypatch.setattr(submitit.AutoExecutor, "submit", no_submission)
    monkeypatch.setattr(campaign_slurm, "slurm_active_jobs", lambda: {})
    monkeypatch.setattr(campaign_cli, "_cuda_here", lambda: False)
    gpu = dict({key: value for key, value in CELLS[1].items() if key != "time_min"}, name="gpu", seeds=6, chunk=6,
               gpus=1, gpu_hours=1.5, overrides=[*CELLS[1]["overrides"], "device=cuda"])
    path = write_queue(tmp_path, [CELLS[0], gpu], chunk=2)
    assert [(job.cell, job.name) for job in jobs_of([CELLS[0], gpu])] == [("tpo", "seeds0-1"), ("gpu", "seeds0-5")]

    def dry_run(*launcher: str) -> list[str]:
        with pytest.raises(SystemExit) as exit_:
            campaign.main([str(path), "--dry-run", *launcher, "--work", str(tmp_path / "work"), "--results",
                           str(tmp_path / "results")])
        assert exit_.value.code == 0
        return capsys.readouterr().out.splitlines()

    local = dry_run()
    assert [line.split("-h  ", 1)[1] for line in local if "-h  " in line] == [
        "to run (cost estimated)", "GPU cell: for --launcher slurm (no GPU here)"]
    assert "  1.50 GPU-h  GPU cell" in [line for line in local if "seeds0-5" in line][0]
    assert "1 runs to go" in "\n".join(local)
    slurm = dry_run("--launcher", "slurm")
    assert [line for line in slurm if "seeds0-5" in line][0].endswith("cpus 2, mem 4 GB, time 180 min, gpus 1; "
                                                                       "to submit")
    assert "GPU jobs to go: 1, 1.5 GPU-hours projected (cells' gpu_hours), one GPU each" in slurm


LONG = {"priority": "P1", "preset": "fig1b_sparse", "name": "long", "seeds": 1, "cost": 0.001, "time_min": 2,
        "overrides": ["algorithm=tpo", "task.H=4", "task.batch_size=8", "task.K=4", "task.steps=700"]}


@pytest.mark.parametrize("interruption", ["time limit", "preemption"])
def test_a_job_cut_short_is_checkpointed_requeued_and_finished_in_one_invocation(slurm_cluster, tmp_path,
                                                                                 interruption):
    """A run longer than its job's 2-minute limit: SLURM's warning (SIGUSR2, 90 s before the limit) has the run save
    a checkpoint at its next step and stop, and submitit requeue the job, which resumes it; likewise a preemption
    (the same signal, sent by hand, to a job whose limit is far). One invocation of the runner finishes the run,
    under the one job id it submitted, to the numbers of a local run.

    Bug caught: ``SlurmLauncher.start`` submitting a plain ``CommandFunction`` (not checkpointable: the job is
    killed at its limit, "no summary")."""
    cell = LONG if interruption == "time limit" else {**LONG, "time_min": 30}
    path = write_queue(tmp_path, [cell], chunk=1)

    def runner(name: str, *args: str) -> tuple[subprocess.Popen, Path]:
        return start_runner(slurm_cluster, tmp_path, path, name, *args)

    local, local_output = runner("local", "--jobs", "1")
    slurm, output = runner("slurm", "--launcher", "slurm", "--partition", slurm_cluster.partition)
    work = tmp_path / "slurm" / "work"
    if interruption == "preemption":
        job_id = wait_for(lambda: submitted_job(work), slurm, output, "submission")
        wait_for(lambda: (work / "fig1b_sparse" / "long" / "seeds0" / "metrics.csv").exists(), slurm, output,
                 "training")
        slurm_cluster.run("scancel", "--signal=USR2", job_id)
    assert slurm.wait(timeout=540) == 0, output.read_text()
    assert local.wait(timeout=240) == 0, local_output.read_text()
    records = [json.loads(path.read_text())["job_id"] for path in work.rglob("*.slurm.json")]
    assert len(records) == 1 and output.read_text().count("submit ") == 1, output.read_text()
    summary = json.loads((tmp_path / "slurm" / "results" / "runs" / "fig1b_sparse" / "long" / "seeds0" /
                          "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from"], summary  # it was cut short, and resumed
    log = "".join(path.read_text(errors="replace") for path in (work / ".submitit").rglob("*.out"))
    assert "Requeued" in log or "requeu" in log.lower(), log[-3000:]
    assert exported_runs(tmp_path / "slurm" / "results") == exported_runs(tmp_path / "local" / "results")


def fake_squeue(tmp_path: Path, monkeypatch, script: str) -> None:
    """``squeue`` on PATH as the shell ``script`` (its arguments in $@)."""
    folder = tmp_path / "bin"
    folder.mkdir(exist_ok=True)
    (folder / "squeue").write_text(f"#!/bin/sh\n{script}\n")
    (folder / "squeue").chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("lock, squeue, holder", [
    ("123 node01 77\n", "exit 0", None),  # its job ended: squeue lists it no more
    ("123 node01 77\n", "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1", None),  # long over
    ("123 node01 77\n", "echo 77", "123 on node01 (SLURM job 77)"),  # still queued or running
    ("123 node01 77\n", "echo 'slurm_load_jobs error: Socket timed out' >&2; exit 1", "123 on node01 (SLURM job 77)"),
    ("123 node01\n", "exit 0", "123 on node01"),  # no job recorded: nothing tells when it ended
    ("123 node01 78\n", "echo 78", None),  # this process's own job, requeued: its earlier run is over
], ids=["ended", "purged", "running", "squeue failing", "no job", "own job requeued"])
def test_a_lock_from_another_host_is_live_while_its_slurm_job_is(tmp_path, monkeypatch, lock, squeue, holder):
    """Bug caught: ``lock_holder`` deciding by the host name alone (a run whose job died on node01 refused from
    everywhere until someone deletes its lock)."""
    fake_squeue(tmp_path, monkeypatch, squeue)
    monkeypatch.setenv("SLURM_JOB_ID", "78")
    (tmp_path / rundir.LOCK_FILE).write_text(lock)
    assert rundir.lock_holder(tmp_path / rundir.LOCK_FILE) == holder


def test_a_run_in_a_slurm_job_records_its_job_in_its_lock(tmp_path, monkeypatch):
    """Bug caught: ``slurm_job_id`` returning ``SLURM_JOB_ID`` in an array task (a number squeue never prints: the
    lock of a running task would count as its job's end)."""
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    with rundir.lock_file(tmp_path / rundir.LOCK_FILE, lambda holder, path: RuntimeError(holder)):
        assert (tmp_path / rundir.LOCK_FILE).read_text() == f"{os.getpid()} {socket.gethostname()} 4242\n"
        here = f"{os.getpid()} on {socket.gethostname()}"
        assert rundir.lock_holder(tmp_path / rundir.LOCK_FILE) == f"{here} (SLURM job 4242)"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "4240")  # a task of a job array: squeue names it 4240_2, not 4242
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "2")
    with rundir.lock_file(tmp_path / rundir.LOCK_FILE, lambda holder, path: RuntimeError(holder)):
        assert (tmp_path / rundir.LOCK_FILE).read_text() == f"{os.getpid()} {socket.gethostname()} 4240_2\n"
    for name in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(name)
    with rundir.lock_file(tmp_path / rundir.LOCK_FILE, lambda holder, path: RuntimeError(holder)):
        assert (tmp_path / rundir.LOCK_FILE).read_text() == f"{os.getpid()} {socket.gethostname()}\n"


def test_a_lock_left_on_another_node_by_an_ended_job_does_not_block_the_campaign(slurm_cluster, tmp_path):
    """A run's lock from node01 whose SLURM job has ended (a job of this cluster, finished): the campaign submits
    the run and finishes it; with a job that still runs (held), the run is refused in one line naming the job."""
    ended = slurm_cluster.run("sbatch", "--parsable", "--output=/dev/null", "--wrap", "true").strip()
    deadline = time.monotonic() + 60
    while ended in slurm_cluster.jobs():
        assert time.monotonic() < deadline
        time.sleep(0.2)
    held = slurm_cluster.run("sbatch", "--parsable", "--hold", "--output=/dev/null", "--wrap", "true").strip()
    try:
        cells = [dict(CELLS[0], name="ended"), dict(CELLS[0], name="running")]
        path = write_queue(tmp_path, cells)
        for name, job in (("ended", ended), ("running", held)):
            folder = tmp_path / "work" / "fig2_tabular_single" / name / "seeds0-1"
            folder.mkdir(parents=True)
            (folder / rundir.LOCK_FILE).write_text(f"12345 node01 {job}\n")
        env = {**slurm_cluster.env, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
        done = subprocess.run([sys.executable, "-m", "harness.campaign", str(path), "--launcher", "slurm",
                               "--partition", slurm_cluster.partition, "--work", str(tmp_path / "work"),
                               "--results", str(tmp_path / "results")], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=300)
    finally:
        slurm_cluster.run("scancel", held)
    assert done.returncode == 1, done.stdout + done.stderr  # the held job's run: refused, counted as failed
    assert (tmp_path / "results" / "runs" / "fig2_tabular_single" / "ended" / "seeds0-1" / "summary.json").exists()
    refused = [line for line in done.stdout.splitlines() if "REFUSED" in line]
    assert len(refused) == 1 and "running/seeds0-1" in refused[0] and f"(SLURM job {held})" in refused[0], refused


def test_sbatch_refusals_are_one_line_each_in_the_dry_run_and_the_run_and_the_runner_goes_on(slurm_cluster,
                                                                                           tmp_path):
    """A cell asking for more CPUs than any node has (sbatch takes it, and it would pend for ever), one asking for a
    GPU the cluster does not have, and --partition nosuch: ``--dry-run`` says sbatch would refuse each
    (``sbatch --test-only``, nothing submitted). The run prints one REJECTED line for the GPU job with sbatch's
    reason, no traceback, runs the other cell and exits 1.

    Bug caught: ``SlurmLauncher.start`` without its ``except`` (a 44-line traceback, the other cells never run)."""
    too_big = dict(CELLS[0], name="too_big", cpus=256)
    gpu = dict(CELLS[0], name="gpu", gpus=1, gpu_hours=0.1, overrides=[*CELLS[0]["overrides"], "device=cuda"])
    fits = dict(CELLS[0], name="fits")
    env = {**slurm_cluster.env, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}

    def campaign_run(cells: list[dict], *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "harness.campaign", str(write_queue(tmp_path, cells)),
                               "--launcher", "slurm", *args, "--work", str(tmp_path / "work"), "--results",
                               str(tmp_path / "results")], cwd=tmp_path, env=env, capture_output=True, text=True,
                              timeout=300)

    jobs_before = slurm_cluster.jobs()
    planned = campaign_run([too_big, gpu, fits], "--dry-run", "--partition", slurm_cluster.partition)
    assert planned.returncode == 0, planned.stderr
    lines = {line.split()[2]: line for line in planned.stdout.splitlines() if line.startswith("P1 ")}
    assert "; sbatch would refuse it: " in lines["too_big"] and "; sbatch would refuse it: " in lines["gpu"], lines
    assert lines["fits"].endswith("; to submit")
    nowhere = campaign_run([fits], "--dry-run", "--partition", "nosuch")
    (line,) = [line for line in nowhere.stdout.splitlines() if line.startswith("P1 ")]
    assert "sbatch would refuse it: " in line and "partition" in line.lower(), nowhere.stdout
    assert slurm_cluster.jobs() == jobs_before  # a dry run submits nothing
    ran = campaign_run([gpu, fits], "--partition", slurm_cluster.partition)
    assert ran.returncode == 1 and "Traceback" not in ran.stdout + ran.stderr, ran.stdout + ran.stderr
    rejected = [line for line in ran.stdout.splitlines() if "REJECTED" in line]
    assert len(rejected) == 1 and "gpu/seeds0-1: sbatch refused it (cpus 1, mem 4 GB, " in rejected[0], rejected
    assert "gres" in rejected[0].split("): ", 1)[1].lower(), rejected  # sbatch's own words
    assert (tmp_path / "results" / "runs" / "fig2_tabular_single" / "fits" / "seeds0-1" / "summary.json").exists()


def test_a_job_pending_too_long_is_named_once_with_squeues_reason(tmp_path, monkeypatch, capsys):
    fake_squeue(tmp_path, monkeypatch, 'echo "PartitionConfig"')
    (job,) = jobs_of([CELLS[0]])
    launcher = campaign.SlurmLauncher(tmp_path / "work", [CELLS[0]], active_jobs=lambda: {"7": "PENDING"})
    launcher.pending_warn_s = 0.2
    run = campaign.SlurmRun("7", tmp_path / "7.out", tmp_path / "7.pkl")
    assert launcher.poll(run, job) is None and capsys.readouterr().out == ""  # first seen pending now
    time.sleep(0.3)
    launcher._asked = -1e9  # squeue asked again
    assert launcher.poll(run, job) is None and launcher.poll(run, job) is None
    (line,) = capsys.readouterr().out.splitlines()
    assert line.split(" ", 1)[1] == ("PENDING fig2_tabular_single/tpo/seeds0-1: SLURM job 7 has waited 0 min: "
                                     "PartitionConfig; it may never start: scancel 7, then fix the cell's cpus, "
                                     "mem_gb, time_min or gpus, or the sbatch options")


def test_sbatch_options_reach_the_job_script_and_cpus_its_threads(tmp_path, monkeypatch, capsys):
    """--account, --qos, --constraint and --sbatch OPTION=VALUE become #SBATCH lines; a cell's cpus its run's
    threads; a malformed or a campaign-owned --sbatch, or --stop-after (the jobs outlive the runner), is refused in
    one line."""
    cells = [CELLS[1]]
    (job,) = jobs_of(cells)
    launcher = campaign.SlurmLauncher(tmp_path / "work", cells, sbatch={"account": "lab", "qos": "long",
                                                                        "constraint": "avx512", "exclude": "n07"})
    script = launcher.executor([job], "tpo-bench:0a1b")._executor._make_submission_file_text("true", "uid")
    for line in ("#SBATCH --account=lab", "#SBATCH --qos=long", "#SBATCH --constraint=avx512",
                 "#SBATCH --exclude=n07", "#SBATCH --cpus-per-task=2", "#SBATCH --comment=tpo-bench:0a1b"):
        assert line in script.splitlines(), script
    assert "threads=2" in launcher.command(job) and "threads=1" not in launcher.command(job)
    for bad, message in ((["--sbatch", "exclude"], "--sbatch 'exclude' is not valid; expected OPTION=VALUE"),
                         (["--sbatch", "time=10"], "--sbatch 'time=10': time is set by the campaign"),
                         (["--sbatch", "comment=x"], "--sbatch 'comment=x': comment is set by the campaign"),
                         (["--stop-after", "1"], "--stop-after is for the local launcher"),
                         (["--account", "lab"], None)):
        with pytest.raises(SystemExit) as exit_:
            campaign.main([str(write_queue(tmp_path, cells)), "--dry-run", *bad, "--work", str(tmp_path / "w")]
                          + ([] if message is None else ["--launcher", "slurm"]))
        said = capsys.readouterr().err.strip().splitlines()[-1]
        assert exit_.value.code == 2 and (message in said if message else "--account is for --launcher slurm" in said)


def test_an_ended_jobs_result_is_looked_for_a_while_before_the_job_counts_as_killed(tmp_path):
    """On a shared file system a finished job's result file can show up seconds after squeue stops listing the
    job: the runner looks again for ``result_grace_s`` before saying it ended without a result."""
    from submitit.core.utils import cloudpickle_dump

    (job,) = jobs_of([CELLS[0]])
    launcher = campaign.SlurmLauncher(tmp_path / "work", [CELLS[0]], active_jobs=lambda: {})
    launcher.result_grace_s = 0.3
    run = campaign.SlurmRun("7", tmp_path / "7.out", tmp_path / "7_result.pkl")
    assert launcher.poll(run, job) is None  # not there yet: asked again later
    cloudpickle_dump(("success", None), run.result)
    assert launcher.poll(run, job).clean
    late = campaign.SlurmRun("8", tmp_path / "8.out", tmp_path / "8_result.pkl")
    assert launcher.poll(late, job) is None
    time.sleep(0.4)
    ended = launcher.poll(late, job)
    assert not ended.clean and "SLURM job 8 ended without a result" in ended.how


def test_the_jobs_that_start_together_are_one_sbatch_call_per_resources_each_task_running_its_own_run(
        slurm_cluster, tmp_path):
    """Five jobs, three of one resources and two of another, all startable at once: two sbatch calls, each a job
    array. Each array task ran the run its record names (its log holds that run's folder), every run was exported
    once, to the numbers of the same queue run locally.

    Bug caught: ``submit`` pairing the records with the submitted jobs in another order than the submissions (a run
    polled through another run's task), or ``start_all`` submitting each job alone (five calls)."""
    path = write_queue(tmp_path, [dict(CELLS[0], seeds=3), CELLS[1]], chunk=1)
    local, local_output = start_runner(slurm_cluster, tmp_path, path, "local", "--jobs", "2")
    runner, output = start_runner(slurm_cluster, tmp_path, path, "arrays", "--launcher", "slurm", "--partition",
                                  slurm_cluster.partition, "--max-jobs", "5")
    assert runner.wait(timeout=300) == 0, output.read_text()
    assert local.wait(timeout=300) == 0, local_output.read_text()
    work = tmp_path / "arrays" / "work"
    records = {path: json.loads(path.read_text()) for path in work.rglob("*.slurm.json")}
    arrays = {record["job_id"].partition("_")[0] for record in records.values()}
    assert len(records) == 5 and len(arrays) == 2, records
    for path, record in records.items():
        log = next((work / campaign.SUBMITIT / record["job_id"]).glob("*_log.out")).read_text()
        assert f"{path.name.removesuffix(campaign.SLURM_RECORD)}" in log and str(path.parent) in log, record
    text = output.read_text()
    assert len(re.findall(r" submit \S+ → SLURM job \d+_\d+ ", text)) == 5, text
    runs = exported_runs(tmp_path / "arrays" / "results")
    assert len(runs) == 5 and runs == exported_runs(tmp_path / "local" / "results"), text


class Killed(BaseException):
    """A runner's death (``kill -9``) at a chosen line: nothing after it runs."""


def test_a_runner_killed_before_it_recorded_its_submission_reattaches_to_the_jobs_by_their_mark(slurm_cluster,
                                                                                                 tmp_path, monkeypatch):
    """The runner dies after sbatch answered and before the job ids were written: the runner started again finds
    the submitted jobs by the mark their records and SLURM comments share, re-attaches to each, and submits
    nothing; a mark that squeue no longer lists leaves the job to be judged by its run folder (submitted again).

    Bug caught: ``attach`` without ``found_by_mark`` (each job submitted a second time), or ``found_by_mark``
    matching an array task by its array id alone (every run attached to task 0)."""
    cells = [dict(CELLS[0], seeds=3)]
    jobs = jobs_of(cells, chunk=1)
    for name in ("SLURM_CONF", "PATH"):
        monkeypatch.setenv(name, slurm_cluster.env[name])
    launcher = campaign.SlurmLauncher(tmp_path / "work", cells, slurm_cluster.partition, sbatch={"hold": True})
    recorded = launcher._write_record

    def killed_once_submitted(job, record):
        if "job_id" in record:
            raise Killed
        recorded(job, record)

    launcher._write_record = killed_once_submitted
    try:
        with pytest.raises(Killed):
            launcher.start_all([(job, slot) for slot, job in enumerate(jobs)])
        assert all("job_id" not in launcher._read_record(job) for job in jobs)
        submitted = slurm_cluster.jobs()
        again = campaign.SlurmLauncher(tmp_path / "work", cells, slurm_cluster.partition)
        attached = again.attach(jobs)
        assert set(attached) == set(jobs) and slurm_cluster.jobs() == submitted, submitted
        assert sorted(run.job_id for run in attached.values()) == sorted(submitted)
        for job, run in attached.items():
            assert again.record(job)["job_id"] == run.job_id == f"{submitted[0].partition('_')[0]}_{jobs.index(job)}"
        slurm_cluster.run("scancel", *submitted)
        assert again.record(jobs[0])["job_id"] not in campaign.slurm_active_jobs()
        again._write_record(jobs[0], {key: value for key, value in again.record(jobs[0]).items() if key != "job_id"})
        assert not campaign.SlurmLauncher(tmp_path / "work", cells).attach(jobs[:1])  # not listed: not attached
    finally:
        if slurm_cluster.jobs():
            slurm_cluster.run("scancel", *slurm_cluster.jobs())


def test_jobs_run_the_nodes_interpreter_and_a_node_without_the_checkout_fails_in_one_line(tmp_path, monkeypatch):
    """``--node-python`` is the interpreter of the run and of submitit's job script; a job on a node that does not
    see the checkout at its path stops before its run, and the runner's FAILED line quotes why from its log.

    Bug caught: ``slurm_setup`` testing a path that always exists (the job fails later with a long traceback), or
    ``poll`` ignoring the log's line."""
    (job,) = jobs_of([CELLS[0]])
    launcher = campaign.SlurmLauncher(tmp_path / "work", [CELLS[0]], python="/opt/node/bin/python3",
                                      active_jobs=lambda: {})
    assert launcher.command(job)[0] == "/opt/node/bin/python3" and launcher.command(job)[1:] == job.command(
        launcher.work)[1:]
    executor = launcher.executor([job], "tpo-bench:0a1b")._executor  # the command its job script runs:
    assert executor._submitit_command_str.startswith("/opt/node/bin/python3 -u -m submitit.core._submit ")

    def setup(root: Path) -> subprocess.CompletedProcess:
        monkeypatch.setattr(campaign_slurm, "ROOT", root)
        return subprocess.run(["bash", "-c", "\n".join([*campaign.slurm_setup(), "echo started"])],
                              capture_output=True, text=True, timeout=30)

    assert setup(ROOT).stdout == "started\n"
    checkout = tmp_path / 'a "check$HOME out'  # a quote and a $ in the path: said as they are
    elsewhere = setup(checkout)
    said = elsewhere.stderr.strip()
    assert elsewhere.returncode == 1 and not elsewhere.stdout and "\n" not in said, elsewhere
    assert said.startswith(f"{campaign.MARK} {checkout} is not on "), said
    log = tmp_path / "9_0_log.out"
    log.write_text(f"submitit INFO starting\n{said}\n")
    launcher.result_grace_s = 0.0
    ended = launcher.poll(campaign.SlurmRun("9", log, tmp_path / "9_result.pkl"), job)
    assert not ended.clean and ended.how == f"SLURM job 9 ended without a result ({said})"


def test_a_group_of_more_jobs_than_an_array_holds_is_submitted_in_several_arrays(tmp_path, monkeypatch):
    """Bug caught: ``start_all`` submitting a whole resources group in one call (SLURM refuses an array beyond its
    MaxArraySize: every job of the group REJECTED)."""
    monkeypatch.setattr(campaign_slurm, "MAX_ARRAY_TASKS", 2)
    jobs = jobs_of([dict(CELLS[0], seeds=5)], chunk=1)
    launcher = campaign.SlurmLauncher(tmp_path / "work", [CELLS[0]], active_jobs=lambda: {})
    calls = []
    monkeypatch.setattr(launcher, "submit", lambda resources, chunk: calls.append([j.name for j in chunk]) or [
        campaign.SlurmRun(j.name, tmp_path / "log", tmp_path / "result") for j in chunk])
    handles = launcher.start_all([(job, slot) for slot, job in enumerate(jobs)])
    assert calls == [["seeds0", "seeds1"], ["seeds2", "seeds3"], ["seeds4"]]
    assert [handle.job_id for handle in handles] == [job.name for job in jobs]


def test_squeue_failing_with_a_submission_cut_short_is_one_line_not_a_traceback(tmp_path, capsys):
    """A record holding only its submission's mark, and squeue not answering: the runner refuses to start in one
    line (submitting could run the job twice); the dry run says the job's state is unknown.

    Bug caught: ``attach`` calling ``found_by_mark`` outside its ``SlurmError`` guard."""
    def squeue_down():
        raise campaign.SlurmError("slurm_load_jobs error: Unable to contact slurm controller")

    (job,) = jobs_of([CELLS[0]])
    launcher = campaign.SlurmLauncher(tmp_path / "work", [CELLS[0]], active_jobs=lambda: {}, marked_jobs=squeue_down)
    job.work_dir(launcher.work).mkdir(parents=True)
    launcher.record_path(job).write_text(json.dumps({"mark": "tpo-bench:0a1b", "index": 0, "submitted": "now",
                                                     "command": launcher.command(job)}))
    with pytest.raises(Refusal, match="^Error: cannot tell which recorded SLURM jobs still run"):
        launcher.attach([job])
    assert "a submission cut short: whether squeue lists its job is unknown (slurm_load_jobs error" in (
        launcher.describe(job))


def test_a_stop_while_jobs_are_submitted_waits_for_their_records_though_the_reporter_thread_runs(tmp_path,
                                                                                                monkeypatch):
    """SIGTERM during a submission is held to its end, with the reporter's thread alive (a signal a thread's mask
    blocks goes to another thread, and Python runs its handler in the main thread at once), then handled.

    Bug caught: ``signals_held`` by a signal mask of the main thread only (the handler runs inside the block)."""
    monkeypatch.setattr(campaign_reports, "report", lambda preset, results: [])
    reporter = campaign_reports.Reporter(tmp_path)
    seen: list[str] = []
    previous = signal.signal(signal.SIGTERM, lambda *args: seen.append("handled"))
    try:
        with campaign_slurm.signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.3)
            seen.append("block ended")
        time.sleep(0.1)
    finally:
        signal.signal(signal.SIGTERM, previous)
        reporter.finish()
    assert seen == ["block ended", "handled"]
