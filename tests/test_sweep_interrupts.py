"""A joblib sweep stopped by Ctrl-C (SIGINT to its process group) or by ``kill`` (SIGTERM to the launching process
alone) stops every running job at its last checkpoint with its summary written, ends in one line per stopped job
and exit 130, leaves no worker behind, and the command those lines name continues the sweep."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import ROOT, run_cli
from harness import interrupts, rundir
from harness.rundir import outputs

SWEEP = ["-m", "task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=6000", "task.checkpoint_every=50",
         "logger=none", "seed_offset=0,100", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2",
         "hydra.sweep.dir=sweep"]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def start_training_sweep(tmp_path: Path, output) -> tuple[subprocess.Popen, Path, set[int]]:
    """``SWEEP`` launched in its own session, once both jobs train in their workers past a checkpoint: the launching
    process, the sweep folder and the workers' pids (from the jobs' locks)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *SWEEP], cwd=tmp_path, env=env, text=True,
                               stdout=output, stderr=output, start_new_session=True)
    sweep = tmp_path / "sweep"
    deadline = time.time() + 180
    while time.time() < deadline and len(list(sweep.glob(f"*/{outputs.CHECKPOINT_FILE}"))) < 2:
        time.sleep(0.05)
    workers = {int(lock.read_text().split()[0]) for lock in sweep.glob(f"*/{rundir.LOCK_FILE}")}
    assert len(workers) == 2, "both jobs should be training in their workers"
    return process, sweep, workers


@pytest.mark.parametrize("how", ["ctrl-c", "kill"])
def test_a_stopped_joblib_sweep_stops_its_jobs_at_their_checkpoints_and_continues(tmp_path, how):
    """Bug caught: interrupts.py:StopJobs.__call__ — ``raise KeyboardInterrupt`` first (joblib kills the workers
    before they write their summaries; under ``kill`` the workers go on training, orphaned)."""
    process, sweep, workers = start_training_sweep(tmp_path, subprocess.PIPE)
    if how == "ctrl-c":
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=180)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    lines = [line for line in stderr.splitlines() if "[INFO]" not in line and "[WARNING]" not in line]
    jobs = sorted(path.parent for path in sweep.glob(f"*/{outputs.SUMMARY_FILE}"))
    assert len(jobs) == 2 and sorted(line.split(";")[0] for line in lines) == [
        f"Interrupted: sweep job {job}" for job in jobs], stderr
    assert all(json.loads((job / outputs.SUMMARY_FILE).read_text())["status"] == "interrupted" for job in jobs)
    assert not list(sweep.glob(f"*/{rundir.LOCK_FILE}"))
    time.sleep(1)
    assert not [pid for pid in workers if _alive(pid)], "a worker outlived the sweep"
    # the command every line names (the launching process's, not the worker's) continues the sweep
    if how == "kill":
        return  # the same command and resume path as after Ctrl-C
    again = shlex.split(lines[0].split("continue it: ", 1)[1])
    assert again[:4] == ["python", "-m", "harness", "-m"] and "hydra/launcher=joblib" in again
    resumed = run_cli(again[3:], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    for job in jobs:
        summary = json.loads((job / outputs.SUMMARY_FILE).read_text())
        assert summary["status"] == "completed" and summary["resumed_from"] and summary["last_step"] == 5999


def test_a_stop_while_modules_load_ends_at_once_even_where_cleanup_would_fail():
    """The stop handler of a loading entry point ends the process where it stands: a signal that lands inside a
    library's ``finally`` whose cleanup fails (a half-built OmegaConf node did) still ends in the one line and 130.
    Bug caught: harness/process.py:exit_at_once_on_stop — ``sys.exit(130)`` in place of ``os._exit(130)`` unwinds
    into the failing cleanup and exits 1 with its traceback."""
    child = textwrap.dedent("""
        import os, signal, time
        from harness import process
        process.exit_at_once_on_stop("Interrupted before the run started")
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(30)
        finally:
            raise AttributeError("cleanup of a half-built object")
        """)
    result = subprocess.run([sys.executable, "-c", child], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr) == (130, "Interrupted before the run started\n")


def test_a_handled_stop_exits_130_even_where_it_passed_through_exec_of_a_string(tmp_path):
    """A stop that lands while dataclasses build a class's methods (``exec`` of a string) leaves CPython's flag
    "KeyboardInterrupt unhandled" set although the entry point handles it, and the interpreter then ends by SIGINT
    (returncode -2) instead of with the 130 it was asked for. Bug caught: harness/process.py:exit_interrupted
    without its ``exec("")`` (the child ends by SIGINT)."""
    (tmp_path / "stopped.py").write_text(textwrap.dedent("""
        from harness import process
        try:
            exec("raise KeyboardInterrupt")  # as a stop landing in a dataclass's generated __init__
        except KeyboardInterrupt:
            process.exit_interrupted()
        """))
    result = subprocess.run([sys.executable, "-m", "stopped"], cwd=tmp_path, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{tmp_path}"}, timeout=60)
    assert (result.returncode, result.stderr) == (130, "")


BUILDING_TASK = textwrap.dedent("""
    import runpy, sys, time
    from pathlib import Path
    import harness.run

    build = harness.run.get_task
    def get_task(name):  # the task's build, made slow and announced: a stop can be sent into it
        Path("building").touch()
        time.sleep(30)
        return build(name)

    harness.run.get_task = get_task
    sys.argv[0] = "harness"
    runpy.run_module("harness", run_name="__main__", alter_sys=True)
    """)


def test_an_interrupt_before_the_run_starts_is_one_line_and_leaves_no_folder(tmp_path):
    """Ctrl-C while the task is being built, while Hydra composes the launch, or while the modules load ends in one
    line and exit 130; the new run folder Hydra made goes. The first stop is sent into the task's build (made slow
    and announced by a file); the others are timed as fractions of how long the run folder's log took to appear, so
    they fall in the same phases on a fast or a slow machine (one that a loaded machine lets land after the start, or
    after the end, is sent again, sooner: at most three times). Bug caught: harness/__main__.py:main — the
    ``_remove_launch_files`` call of the interrupted-before-start branch dropped (the folder stays with an empty
    ``__main__.log``). The composing window is short: a stop lands in it only now and then."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    arguments = ["experiment=fig4_mnist", "algorithm=tpo", "seeds=1", "task.steps=200", "logger=none",
                 "hydra.run.dir=run"]  # a valid run: it is built, not refused

    def stopped(command: list[str], ready, may_finish: bool = False) -> str | None:
        """The stopped launch's stderr; None when ``may_finish`` and the run ended before the stop landed."""
        process = subprocess.Popen(command, cwd=tmp_path, env=env, text=True, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE)
        ready()
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
        if may_finish and process.returncode == 0:
            return None
        assert process.returncode == 130, stderr
        return stderr

    def when_built():
        while not (tmp_path / "building").exists():
            time.sleep(0.001)

    launched = time.time()
    stderr = stopped([sys.executable, "-c", BUILDING_TASK, *arguments], when_built)
    until_log = (tmp_path / "building").stat().st_mtime - launched  # the log appears just before the build
    (tmp_path / "building").unlink()
    assert [line for line in stderr.splitlines() if "[INFO]" not in line] == [
        "Interrupted before the run started"], stderr
    assert not (tmp_path / "run").exists()
    for fraction in (0.55, 0.3, 0.1):  # composing, loading
        delay = fraction * until_log
        for _ in range(4):
            stderr = stopped([sys.executable, "-m", "harness", *arguments], lambda: time.sleep(delay), True)
            if stderr is not None and "keeps its last checkpoint" not in stderr:  # else it landed in the run or
                break  # after its end (the first launch, timed under load, can be much slower than this one)
            shutil.rmtree(tmp_path / "run", ignore_errors=True)
            delay /= 2
        assert [line for line in stderr.splitlines() if "[INFO]" not in line] == [
            "Interrupted before the run started"], stderr
        assert not (tmp_path / "run").exists()


def test_a_stopped_sweep_s_child_processes_drop_only_the_pool_teardown_warnings(monkeypatch):
    """joblib's resource tracker (a child of the launching process) may warn, as a stopped sweep's pool goes, about a
    semaphore it then finds removed; those lines must not join the stop's own. Other warnings still show.
    Bug caught: a filter that matches no message (the stop ends with four lines of loky noise), or every one."""
    from harness import interrupts

    monkeypatch.setenv("PYTHONWARNINGS", "default::ResourceWarning")
    interrupts.quiet_pool_teardown()
    interrupts.quiet_pool_teardown()  # launching twice in one process adds the filter once
    assert os.environ["PYTHONWARNINGS"].split(",") == ["default::ResourceWarning",
                                                       "ignore:resource_tracker:UserWarning"]
    child = subprocess.run(
        [sys.executable, "-c", "import warnings; warnings.warn('resource_tracker: There appear to be 1 leaked semlock'"
         " ' objects to clean up at shutdown'); warnings.warn('a warning of the run itself')"],
        capture_output=True, text=True, check=True)
    assert "resource_tracker" not in child.stderr and "a warning of the run itself" in child.stderr


def test_a_sweep_launcher_killed_by_sigkill_leaves_no_worker_training(tmp_path):
    """``kill -9`` of a joblib sweep's launching process alone: each worker notices, stops its job at the last
    checkpoint with its summary written and its lock released, and ends; the same command continues the sweep.
    Bugs caught: ``interrupts.worker_job`` not used in ``main`` (the workers trained on with parent pid 1,
    holding run.lock, and the re-run was refused as "being written by process N"); ``main`` ending a stopped job
    with ``sys.exit`` when its launcher is gone (the pool caught it and the worker waited on, orphaned)."""
    launcher, sweep, workers = start_training_sweep(tmp_path, subprocess.DEVNULL)
    launcher.kill()
    launcher.wait()
    deadline = time.time() + 120
    while time.time() < deadline and [pid for pid in workers if _alive(pid)]:
        time.sleep(0.1)
    orphans = [pid for pid in workers if _alive(pid)]
    for pid in orphans:
        os.kill(pid, signal.SIGKILL)
    assert not orphans, "a worker trained on after its launcher died"
    jobs = sorted(path.parent for path in sweep.glob(f"*/{outputs.SUMMARY_FILE}"))
    assert len(jobs) == 2 and not list(sweep.glob(f"*/{rundir.LOCK_FILE}"))
    assert all(json.loads((job / outputs.SUMMARY_FILE).read_text())["status"] == "interrupted" for job in jobs)
    resumed = run_cli([*SWEEP, "trainer.resume=auto"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    for job in jobs:
        summary = json.loads((job / outputs.SUMMARY_FILE).read_text())
        assert summary["status"] == "completed" and summary["resumed_from"] and summary["last_step"] == 5999


WORKER = """
import multiprocessing, os, signal, socket, sys, time
from harness import interrupts, process

def job():
    with interrupts.worker_job():
{body}

if __name__ == "__main__":
    interrupts.record_launch_argv([])  # this process launches, as python -m harness -m does
{before}
    child = multiprocessing.get_context("fork").Process(target=job)  # a pool's worker
    child.start()
    child.join()
    print("exit", child.exitcode, flush=True)
"""


def worker(body: str, before: str = "") -> subprocess.CompletedProcess:
    """Run ``body`` as a sweep job in a worker process a launching process started; its stdout ends with the
    worker's exit code."""
    script = WORKER.format(body=textwrap.indent(textwrap.dedent(body), " " * 8),
                           before=textwrap.indent(textwrap.dedent(before), " " * 4))
    return subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_a_worker_whose_launcher_died_before_its_job_started_does_not_start_it():
    """A worker that reaches its job after its launcher was killed (loky unpickles a job for seconds): one line, exit
    130, the job not run; a process no pool started (a cluster's job, which outlives its launcher) runs it. Bug
    caught: ``worker_job`` watching only a worker whose parent is the live launcher (it trained to the end,
    orphaned)."""
    dead = "dead = __import__('subprocess').Popen([sys.executable, '-c', 'pass']); dead.wait()\n"
    done = worker("print('the job ran')", dead + "os.environ[interrupts.LAUNCHER_ENV] = f'{dead.pid} "
                                                  "{socket.gethostname()}'")
    assert done.stdout == "exit 130\n", (done.stdout, done.stderr)
    assert done.stderr.strip() == "Interrupted: the sweep's launching process is gone; job not started"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()  # its launcher died long ago, as a cluster's queued job's may
    env = {**os.environ, "PYTHONPATH": str(ROOT), interrupts.LAUNCHER_ENV: f"{gone.pid} {socket.gethostname()}"}
    job = "from harness import interrupts\nwith interrupts.worker_job():\n    print('the job ran')\n"
    alone = subprocess.run([sys.executable, "-c", job], env=env, capture_output=True, text=True, timeout=120)
    assert alone.returncode == 0 and alone.stdout == "the job ran\n"


def test_a_sigterm_outside_training_lets_a_workers_job_finish_then_ends_the_worker():
    """In a sweep's worker, a SIGTERM while the job builds its task or writes its summary (the watcher's, once the
    launcher is gone) is noted, not fatal: the job finishes what it writes, then the worker ends with 130. Bug
    caught: ``worker_job`` without its SIGTERM handler (the default action killed the job mid-write)."""
    done = worker("os.kill(os.getpid(), signal.SIGTERM)\ntime.sleep(0.2)\nprint('summary written', flush=True)")
    assert done.stdout == "summary written\nexit 130\n", (done.stdout, done.stderr)


def test_a_stop_while_a_workers_job_sets_up_stops_it_once_training_starts():
    """The launcher's SIGTERM to a job still building its task is noted, then delivered again until training's
    handler takes it: the job stops at its first checkpoint instead of training on. Bug caught: ``_note_stop``
    without ``_resend_while_in_job`` (the job trained to the end, then the pool was torn down under it)."""
    done = worker("""\
        os.kill(os.getpid(), signal.SIGTERM)
        signal.signal(signal.SIGTERM, process.stop_by_interrupt)  # training begins
        try:
            time.sleep(20)
            print('trained to the end', flush=True)
        except KeyboardInterrupt:
            print('stopped at the checkpoint', flush=True)""")
    assert done.stdout == "stopped at the checkpoint\nexit 130\n", (done.stdout, done.stderr)
