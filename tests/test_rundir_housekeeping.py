"""What a launch may remove from a run directory (only what tpo-bench wrote), the experiment_name a run keeps, which
experiment names are valid, a full disk, and how an interrupted run ends (harness.rundir and its outputs)."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from conftest import ROOT, compose_config, run_cli, run_config, run_killed_at
from harness import rundir
from harness.rundir import outputs
from harness.trainers import trainer_class
from harness.config import build_task
from common.checks import ConfigError

TABULAR = ["task=tabular_single", "algorithm=tpo", "seeds=2", "task.steps=30", "task.checkpoint_every=10"]
FOREIGN = {"notes.txt": "n", "draft.tmp": "d", "backup.tmp/file": "b", "wandb/offline-run-123/run.wandb": "w"}


def tree(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def make(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def kept(folder: Path, files: dict[str, str]) -> bool:
    return all((folder / name).read_text() == text for name, text in files.items())


# --- 1. a fresh start removes only what tpo-bench wrote ------------------------------------------------------------

def test_a_fresh_start_into_a_foreign_folder_is_refused_and_touches_nothing(tmp_path):
    """The reported case: before, exit 0 and draft.tmp, backup.tmp/, wandb/ and the user's .hydra/ were gone.
    Bug caught: harness.rundir.housekeeping — `if is_own_temporary(entry) or ...` →
    `if entry.endswith(".tmp") or ...` (the user's draft.tmp and backup.tmp/ removed)."""
    user = tmp_path / "userdir"
    make(user, {**FOREIGN, ".hydra/config.yaml": "mine"})
    before = tree(user)
    args = ["task=tabular_single", "task.steps=3", "logger=none", "hydra.run.dir=userdir"]
    result = run_cli(args, tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "is not empty and holds no run" in result.stderr
    assert tree(user) == before  # Hydra's __main__.log of the refused launch too is gone
    # overwrite runs beside foreign files, but not over a foreign file where a run writes its own
    result = run_cli([*args, "trainer.overwrite=true"], tmp_path)
    assert result.returncode == 2 and ".hydra/config.yaml, not written by tpo-bench" in result.stderr
    assert tree(user) == before
    (user / ".hydra" / "config.yaml").unlink()
    result = run_cli([*args, "trainer.overwrite=true"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert kept(user, FOREIGN) and (user / "summary.json").exists() and (user / ".hydra" / "config.yaml").exists()


def test_a_folder_holding_only_this_launchs_hydra_log_counts_as_empty(tmp_path):
    """A new folder holding only this launch's Hydra log (__main__.log) counts as empty: the run starts there.
    Bug caught: harness.rundir._launch_files — `names.add(f"{HydraConfig.get().job.name}.log")` →
    `names.add(HydraConfig.get().job.name)`."""
    result = run_cli(["task=tabular_single", "task.steps=3", "logger=none", "hydra.run.dir=new"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "new" / "__main__.log").exists() and (tmp_path / "new" / "summary.json").exists()


def test_overwrite_keeps_foreign_files_in_a_run_directory_and_removes_only_its_own(tmp_path):
    """trainer.overwrite removes only what tpo-bench wrote: entries recorded as foreign and new foreign files stay,
    in wandb/ and .hydra/ too. Bug caught: harness.rundir.housekeeping — `... and entry not in kept` dropped (the
    recorded foreign wandb/offline-run-123 is removed); also `entry in own_wandb` → `True` (wandb/mynotes.txt goes)."""
    run_dir = tmp_path / "run"
    make(run_dir, FOREIGN)
    with pytest.raises(ConfigError, match="is not empty and holds no run"):
        run_config(TABULAR, run_dir)
    assert tree(run_dir) == {name: text.encode() for name, text in FOREIGN.items()}
    run_config([*TABULAR, "trainer.overwrite=true"], run_dir)
    record = json.loads((run_dir / rundir.IDENTITY_FILE).read_text())
    assert record["foreign"] == ["backup.tmp", "draft.tmp", "notes.txt", "wandb/offline-run-123"]
    # a run's own leftovers (its seeds' W&B run folders, named by their ids, and W&B's files of the folder; a
    # temporary of a killed process) go; foreign files added since stay, in wandb/ and .hydra/ too
    own = rundir.wandb_run_id(run_dir, record["uid"], 1)
    added = {"later.txt": "l", "metrics.csv.tmp": "not ours", "checkpoint.pt.1.2.tmp": "not ours",
             "wandb/offline-run-20261203_000000-abc/run-abc.wandb": "theirs", "wandb/mynotes.txt": "m",
             ".hydra/mynotes.txt": "h"}
    make(run_dir, {f"wandb/offline-run-20261203_000000-{own}/run.wandb": "o", "wandb/debug.log": "o",
                   "metrics.csv.4242.tmp": "", ".hydra/config.yaml.7.tmp": "", **added})
    run_config([*TABULAR, "algorithm.eta=2", "trainer.overwrite=true"], run_dir)
    assert kept(run_dir, {**FOREIGN, **added})
    for gone in (f"wandb/offline-run-20261203_000000-{own}", "wandb/debug.log", "metrics.csv.4242.tmp",
                 ".hydra/config.yaml.7.tmp"):
        assert not (run_dir / gone).exists(), gone
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "completed"
    # a run started in an empty folder owns the W&B folders of its seeds: overwrite removes them, and wandb/ if empty
    clean = tmp_path / "clean"
    run_config(TABULAR, clean)
    uid = json.loads((clean / rundir.IDENTITY_FILE).read_text())["uid"]
    make(clean, {f"wandb/run-20261203_000000-{rundir.wandb_run_id(clean, uid, seed)}/run.wandb": "o"
                 for seed in (0, 1)})
    run_config([*TABULAR, "trainer.overwrite=true"], clean)
    assert not (clean / "wandb").exists()


@pytest.mark.parametrize("entry", ["metrics.csv", ".hydra/config.yaml", "trl/checkpoint-5/x", "identity.json"])
def test_a_foreign_file_where_a_run_writes_is_refused_even_with_overwrite(tmp_path, entry):
    """A foreign entry where a run writes its own is refused even with overwrite, in one line, touching nothing.
    Bug caught: harness.rundir.Housekeeping.in_the_way — `entry.split("/")[0] in RESULT_FILES` →
    `entry in RESULT_FILES` (.hydra/config.yaml no longer in the way)."""
    folder = tmp_path / "folder"
    make(folder, {entry: "mine"})
    before = tree(folder)
    with pytest.raises(ConfigError) as error:
        run_config([*TABULAR, "trainer.overwrite=true"], folder)
    assert "not written by tpo-bench" in str(error.value) and "\n" not in str(error.value)
    assert tree(folder) == before


def test_own_temporaries_are_recognised_by_their_exact_name():
    """Only ``<file>.<pid>.tmp`` beside a file tpo-bench writes is its temporary; any other *.tmp is foreign.
    Bug caught: harness.rundir.is_own_temporary — `_TEMPORARY.fullmatch(entry)` → `_TEMPORARY.match(entry)`."""
    for name in ("metrics.csv.123.tmp", "checkpoint.pt.1.tmp", "summary.json.99.tmp", ".hydra/config.yaml.5.tmp"):
        assert rundir.is_own_temporary(name), name
    for name in ("draft.tmp", "backup.tmp", "metrics.csv.tmp", "checkpoint.pt.x.tmp", "notes.txt.12.tmp",
                 "metrics.csv.12.tmp.bak", "sub/metrics.csv.1.tmp", "config.yaml.5.tmp"):
        assert not rundir.is_own_temporary(name), name


# --- 2. a resumed run keeps its experiment_name ---------------------------------------------------------------------

def _killed(run_dir: Path, name: str) -> None:
    overrides = [*TABULAR, f"experiment_name={name}"]
    run_killed_at(overrides, run_dir, type(build_task(compose_config(overrides))), 25)


def test_resuming_under_another_experiment_name_keeps_the_runs_own(tmp_path, caplog):
    """A resume under another experiment_name keeps the run's own name, with a warning naming both.
    Bug caught: harness.rundir.plan_run — `_keep_experiment_name(cfg, run_dir, recorded)` deleted on the resume
    path."""
    run_dir = tmp_path / "run"
    _killed(run_dir, "fig4_mnist")
    with caplog.at_level(logging.WARNING, logger="harness.rundir"):
        summary = run_config([*TABULAR, "experiment_name=default", "trainer.resume=true"], run_dir)
    assert summary["experiment"] == "fig4_mnist" and summary["status"] == "completed"
    assert json.loads((run_dir / "summary.json").read_text())["experiment"] == "fig4_mnist"
    assert "experiment_name=fig4_mnist" in caplog.text and "experiment_name=default" in caplog.text
    again = run_config([*TABULAR, "experiment_name=other", "trainer.resume=true"], run_dir)  # finished: as it was
    assert again["experiment"] == "fig4_mnist"


def test_a_run_recorded_before_identity_kept_its_name_keeps_it_from_its_summary(tmp_path):
    """A run whose identity.json does not record experiment_name keeps the name its summary.json records.
    Bug caught: harness.rundir._keep_experiment_name — `recorded_experiment_name(run_dir, record)` →
    `record.get("experiment_name")`."""
    run_dir = tmp_path / "run"
    _killed(run_dir, "fig4_mnist")
    record = json.loads((run_dir / rundir.IDENTITY_FILE).read_text())
    del record["experiment_name"]
    outputs.write_json(run_dir / rundir.IDENTITY_FILE, record)
    summary = run_config([*TABULAR, "trainer.resume=true"], run_dir)
    assert summary["experiment"] == "fig4_mnist"


# --- 3. experiment_name is one safe folder name ---------------------------------------------------------------------

@pytest.mark.parametrize("name", ["../../x", "a/b", ".hidden", "..", "a b", "/abs"])
def test_an_unsafe_experiment_name_is_refused(tmp_path, name):
    """An experiment_name that is not one safe folder name is refused before anything is written.
    Bug caught: harness/config.py:check_experiment_name — `_EXPERIMENT_NAME.fullmatch(name)` →
    `_EXPERIMENT_NAME.match(name)` (a/b accepted)."""
    with pytest.raises(ConfigError, match=r"experiment_name=.* is not valid; expected .*folder name"):
        run_config([*TABULAR, f"experiment_name='{name}'"], tmp_path / "run")
    assert not (tmp_path / "run" / "summary.json").exists()


@pytest.mark.parametrize("name", ["fig4_mnist", "v1.2-test", "2nd_try"])
def test_a_safe_experiment_name_is_accepted(name):
    """Folder names of letters, digits, _ - and . are accepted as experiment_name.
    Bug caught: harness/config.py:_EXPERIMENT_NAME — `[A-Za-z0-9_.-]*` → `[A-Za-z0-9_-]*` (v1.2-test refused)."""
    assert build_task(compose_config([*TABULAR, f"experiment_name={name}"])) is not None


def test_an_experiment_name_outside_outputs_is_refused_before_hydra_makes_a_folder(tmp_path):
    """An experiment_name leading out of outputs/ (a single run's, or any value of a -m sweep) exits 2 before Hydra
    makes a folder.
    Bug caught: harness/config.py:_check_experiment_name_overrides — `names = list(override.sweep_string_iterator()) if
    ... else [override.value()]` → `names = [override.value()]` (the sweep is checked as one ChoiceSweep value)."""
    cwd = tmp_path / "a" / "b"
    cwd.mkdir(parents=True)
    for flags, name in (([], "../../x"), (["-m"], "ok,../../x")):
        result = run_cli([*flags, "task=tabular_single", "task.steps=3", "logger=none", f"experiment_name={name}"],
                         cwd)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("Error: experiment_name='../../x' is not valid")
        assert result.stderr.count("\n") == 1 and "path separators" in result.stderr
        assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == ["a", "a/b"]


# --- 4. a full disk --------------------------------------------------------------------------------------------------

def _disk_full(monkeypatch, full: dict) -> None:
    """Every durable write fails with ENOSPC half-way (after its temporary is created) while ``full["on"]``."""
    real = os.fsync

    def fsync(descriptor):
        if full["on"]:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(descriptor)

    monkeypatch.setattr(os, "fsync", fsync)


def _disk_fills_at_step_15(monkeypatch, full: dict) -> tuple[type, Callable]:
    """``full["on"]`` turns true as TABULAR's task takes step 15, after the checkpoint of step 10 (the disk fills up
    there); returns the task class and its trainer's own ``episode``, to put back."""
    task_cls = type(build_task(compose_config(TABULAR)))
    trainer = trainer_class(task_cls)
    original = trainer.episode

    def step(task, at):
        full["on"] = full["on"] or at == 15
        return original(task, at)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(step))
    return task_cls, original


def test_a_full_disk_leaves_no_temporary_and_the_run_resumes(tmp_path, monkeypatch):
    """A full disk fails the run without leaving a temporary (the best-effort failure record does not raise over
    it); the resume removes a killed process's temporaries (exact names only) and ends as an uninterrupted run.
    Bug caught: harness.rundir.plan_run — `RunStart(..., resume=True, ..., _remove=orphans)` → without
    `_remove=orphans`."""
    run_config(TABULAR, tmp_path / "full")
    run_dir = tmp_path / "run"
    full = {"on": False}
    _disk_full(monkeypatch, full)
    task_cls, original = _disk_fills_at_step_15(monkeypatch, full)
    with pytest.raises(OSError) as error:
        run_config(TABULAR, run_dir)
    assert error.value.errno == errno.ENOSPC
    assert not [path.name for path in run_dir.rglob("*.tmp")]  # each failed write removed its temporary
    # the failure record is best effort: it never raises over the run's own error
    assert outputs.record_failure(run_dir, {"status": "failed", "error": "OSError"}, "traceback\n") is False
    assert not (run_dir / outputs.ERROR_FILE).exists() and not [path.name for path in run_dir.rglob("*.tmp")]
    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(original))
    full["on"] = False
    # a killed process's temporaries (exact name) go at the resume; a foreign *.tmp stays
    make(run_dir, {f"checkpoint.pt.{2**22 + 1}.tmp": "x" * 100, "metrics.csv.77.tmp": "", "summary.json.78.tmp": "",
                   "draft.tmp": "mine"})
    summary = run_config([*TABULAR, "trainer.resume=auto"], run_dir)
    assert summary["status"] == "completed" and summary["resumed_from"] == [10]
    assert sorted(path.name for path in run_dir.rglob("*.tmp")) == ["draft.tmp"]
    assert (tmp_path / "full" / "metrics.csv").read_bytes() == (run_dir / "metrics.csv").read_bytes()


def test_a_fresh_start_writes_its_identity_first_so_a_kill_at_any_point_leaves_a_run_that_resumes(tmp_path,
                                                                                                   monkeypatch):
    """identity.json is the first file a fresh start writes; a process killed right after it leaves a folder that
    resume=auto starts afresh, to the same numbers. (Written last, a kill between the .hydra files and it left files
    a relaunch refuses as not tpo-bench's.) Bug caught: harness.rundir.RunStart.apply writing .hydra/config.yaml
    before identity.json."""
    clean = tmp_path / "clean"
    written, real = [], outputs.atomic_write_text
    monkeypatch.setattr(outputs, "atomic_write_text", lambda path, *args, **kwargs: (
        written.append(Path(path).relative_to(clean).as_posix()) if clean in Path(path).parents else None,
        real(path, *args, **kwargs))[1])
    run_config(TABULAR, clean)
    assert written[0] == rundir.IDENTITY_FILE and ".hydra/config.yaml" in written
    killed = tmp_path / "killed"  # as a kill just after identity.json leaves it (a temporary of the next write too)
    make(killed, {rundir.IDENTITY_FILE: (clean / rundir.IDENTITY_FILE).read_text(),
                  f".hydra/config.yaml.{os.getpid() + 1}.tmp": "half"})
    summary = run_config([*TABULAR, "trainer.resume=auto"], killed)
    assert summary["status"] == "completed" and not list(killed.rglob("*.tmp"))
    assert (killed / "metrics.csv").read_bytes() == (clean / "metrics.csv").read_bytes()


def test_a_write_that_fails_removes_its_temporary(tmp_path, monkeypatch):
    """A durable write that fails leaves the old file whole and no temporary beside it.
    Bug caught: harness/rundir/outputs.py:atomic_write_text — `except BaseException:` → `except KeyboardInterrupt:`."""
    _disk_full(monkeypatch, {"on": True})
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"old")
    with pytest.raises(OSError):
        outputs.atomic_write_bytes(target, b"new" * 1000)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["checkpoint.pt"] and target.read_bytes() == b"old"


# --- 5. SIGTERM ends in one line ---------------------------------------------------------------------------------

@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_sigterm_ends_in_one_line_and_the_run_resumes(tmp_path, stop):
    """SIGTERM (a kill, a scheduler) or SIGHUP (an SSH session's end) ends a single run with exit 130, one
    ``Interrupted:`` line and an interrupted summary; resume=auto finishes it.
    Bug caught: harness/__main__.py:main — the single run's `sys.exit(130)` → `raise` (the interrupt escapes
    main(): not one line)."""
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=3000", "task.checkpoint_every=50",
            "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "run" / outputs.CHECKPOINT_FILE).exists():
        time.sleep(0.05)
    process.send_signal(stop)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    lines = [line for line in stderr.splitlines() if "[INFO]" not in line and "[WARNING]" not in line]
    assert len(lines) == 1 and lines[0].startswith("Interrupted: ") and "trainer.resume=auto" in lines[0]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"
    resumed = run_cli([*args, "trainer.resume=auto"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"


@pytest.mark.parametrize("when", ["training", "loading"])
def test_a_schedulers_checkpoint_signal_saves_at_the_next_step_and_the_run_resumes_to_the_same_numbers(tmp_path,
                                                                                                       when):
    """SIGUSR2 (SLURM's warning before a time limit or a preemption, as submitit asks for it) stops a run at its next
    step with a checkpoint there, although the run checkpoints only at its end (tabular's ``checkpoint_every: 0``):
    the job loses nothing, and the run resumed gives the numbers of a run never stopped. Sent while the modules load,
    the signal is kept until the first step.
    Bug caught: harness/trainers/batched.py — the checkpoint before the stop dropped (the resume starts from 0)."""
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=20", "task.steps=3000", "logger=none"]
    clean = run_cli([*args, f"hydra.run.dir={tmp_path / 'clean'}"], tmp_path)
    assert clean.returncode == 0, clean.stderr
    run = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *args, f"hydra.run.dir={run}"], cwd=tmp_path,
                               env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    if when == "training":
        while time.time() < deadline and not (run / "metrics.csv").exists():
            time.sleep(0.05)
        time.sleep(0.5)
    else:  # as soon as the process handles the signal (its SigCgt mask), while torch and Hydra load
        caught = 1 << (signal.SIGUSR2 - 1)
        while time.time() < deadline and not int(re.search(r"SigCgt:\s*([0-9a-f]+)", Path(
                f"/proc/{process.pid}/status").read_text())[1], 16) & caught:
            time.sleep(0.005)
        assert not (run / "metrics.csv").exists()  # not training yet
    process.send_signal(signal.SIGUSR2)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert json.loads((run / "summary.json").read_text())["status"] == "interrupted"
    resumed = run_cli([*args, f"hydra.run.dir={run}", "trainer.resume=auto"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    step = int(re.search(rf"resuming {re.escape(str(run))} from step (\d+)", (run / "__main__.log").read_text())[1])
    assert 0 < step < 3000  # the checkpoint the signal asked for, not the start
    assert (run / "metrics.csv").read_bytes() == (tmp_path / "clean" / "metrics.csv").read_bytes()


SECOND_STOP_IN_THE_CLOSING = """
import os, runpy, signal, sys
from harness import session
real = session.run_summary
def summary_after_a_second_stop(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGTERM)  # the parent's death signal again, while the first stop is being closed
    for _ in range(10000):  # a pending signal's handler runs between bytecodes
        pass
    return real(*args, **kwargs)
session.run_summary = summary_after_a_second_stop
runpy.run_module("harness", run_name="__main__")
"""


def test_a_second_sigterm_during_the_closing_does_not_cost_the_summary(tmp_path):
    """A parent that dies by ``kill -9`` sends its death signal once per thread it had, so a run may get a second
    SIGTERM while it closes after the first; the run still ends in one line with its summary ("interrupted").
    Bug caught: harness/process.py:stop_by_interrupt without ``signal.signal(SIGTERM, SIG_IGN)`` (no summary.json:
    the campaign's runner-killed test failed so about once in 15 under load)."""
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=2", "task.steps=100000", "task.checkpoint_every=50",
            "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-c", SECOND_STOP_IN_THE_CLOSING, *args], cwd=tmp_path, env=env,
                               text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not (tmp_path / "run" / outputs.CHECKPOINT_FILE).exists():
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "interrupted"


@pytest.mark.parametrize("fail", ["metrics", "checkpoint"])
def test_a_full_disk_raises_its_error_once(tmp_path, monkeypatch, fail):
    """The write that fails (the rows' flush, or the checkpoint just after it) raises; the writer's close on the way
    out does not raise the same error again over it (no 'During handling of the above exception').
    Bug caught: harness.rundir.outputs.MetricsWriter.close — `if not self._failed and self.rows != self._durable_rows:`
    → `if self.rows != self._durable_rows:`."""
    real = outputs.atomic_write_text

    def write(path, chunks, durable=True):
        if path.name == (outputs.METRICS_FILE if fail == "metrics" else outputs.CHECKPOINT_FILE) and full["on"]:
            full["on"] = "always"
        if full["on"] == "always":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, chunks, durable)

    full = {"on": False}
    monkeypatch.setattr(outputs, "atomic_write_text", write)
    _disk_fills_at_step_15(monkeypatch, full)
    with pytest.raises(OSError) as error:
        run_config(TABULAR, tmp_path / "run")
    assert error.value.errno == errno.ENOSPC
    assert error.value.__context__ is None  # the first error, not a second one raised while handling it


# --- 6. a refused launch removes only what it made; its words match what is there ----------------------------------

def _launch_log(path: Path, name: str):
    """A launch's Hydra file handler on the shared ``path`` (its logger ``name``) and its LaunchLog."""
    from harness.__main__ import LaunchLog

    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("[%(name)s] %(message)s"))
    logger = logging.getLogger(name)
    logger.addHandler(handler)
    logger.propagate = False
    return logger, handler, LaunchLog(path, [handler])


def test_a_refused_launch_removes_the_shared_log_only_when_it_alone_wrote_it(tmp_path):
    """A refused launch removes the shared Hydra log only when no other launch holds it and it holds only its lines.
    Bug caught: harness/__main__.py:LaunchLog.remove_if_own — `fcntl.LOCK_EX | fcntl.LOCK_NB` →
    `fcntl.LOCK_SH | fcntl.LOCK_NB`."""
    path = tmp_path / "__main__.log"
    winner, winner_handler, winner_log = _launch_log(path, "test.winner")
    loser, loser_handler, loser_log = _launch_log(path, "test.loser")
    loser.warning("refused")
    assert not loser_log.remove_if_own() and path.exists()  # the winner holds it (and nothing is written yet)
    winner_handler.close()
    # the winner's lines, the winner gone: kept
    _, again_handler, again_log = _launch_log(path, "test.again")
    winner_handler.stream = None
    path.write_text("[test.winner] started\n")
    assert not again_log.remove_if_own() and path.read_text() == "[test.winner] started\n"
    for handler in (loser_handler, again_handler):
        handler.close()
    # alone, with only its own lines (or none): removed
    path.unlink()
    alone, alone_handler, alone_log = _launch_log(path, "test.alone")
    alone.warning("a warning of its own")
    assert alone_log.remove_if_own() and not path.exists()
    alone_handler.close()


def test_a_launch_refused_by_another_launchs_lock_leaves_that_launchs_log(tmp_path):
    """The race: two launches into one new folder, the second refused (it found nothing there when it started, so
    it cleans up after itself): before, it removed the winner's __main__.log too.
    Bug caught: harness/__main__.py:LaunchLog.remove_if_own — the own-lines check
    `if self.path.read_text(errors="replace") != "".join(self._lines):` → `if False:`."""
    import fcntl

    run_dir = tmp_path / "race"
    run_dir.mkdir()
    (run_dir / rundir.LOCK_FILE).write_text(f"{os.getpid()} {__import__('socket').gethostname()}\n")
    log_file = run_dir / "__main__.log"
    log_file.write_text("[2024-01-01][harness][INFO] - the winner's line\n")
    with open(log_file, "a") as held:  # the winner holds its log
        fcntl.flock(held, fcntl.LOCK_SH)
        result = run_cli(["task=tabular_single", "task.steps=3", "logger=none", "hydra.run.dir=race"], tmp_path)
    assert result.returncode == 2 and "is being written by process" in result.stderr, result.stderr
    assert log_file.read_text() == "[2024-01-01][harness][INFO] - the winner's line\n"
    # the winner gone, its lines still there: kept too
    result = run_cli(["task=tabular_single", "task.steps=3", "logger=none", "hydra.run.dir=race"], tmp_path)
    assert result.returncode == 2 and log_file.read_text() == "[2024-01-01][harness][INFO] - the winner's line\n"


def test_a_stop_before_main_removes_an_empty_log_it_holds_itself_but_not_one_another_launch_holds(tmp_path):
    """A stop before ``main`` handles stops: the log Hydra created is removed when empty, even while this process's
    own LaunchLog already holds its shared lock (the stop came just after ``main`` made it); kept while another
    process holds it, or when it has lines. Bug caught: harness/__main__.py:_remove_empty_log without the loop that
    drops this process's own locks (the log stays, and with it the run folder)."""
    import fcntl

    from harness.__main__ import _remove_empty_log

    path = tmp_path / "__main__.log"
    path.touch()
    with open(path, "a") as own:  # as main's LaunchLog holds it
        fcntl.flock(own, fcntl.LOCK_SH)
        _remove_empty_log(path)
        assert not path.exists()
    path.touch()
    other = subprocess.Popen([sys.executable, "-c", "import fcntl, sys; f = open(sys.argv[1], 'a'); "
                              "fcntl.flock(f, fcntl.LOCK_SH); print('held', flush=True); sys.stdin.read()", str(path)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert other.stdout.readline().strip() == "held"
        _remove_empty_log(path)
        assert path.exists()  # another launch holds it
    finally:
        other.stdin.close()
        other.wait()
    path.write_text("[harness][INFO] - a line\n")
    _remove_empty_log(path)
    assert path.read_text() == "[harness][INFO] - a line\n"


@pytest.mark.parametrize("summary", ["{", '{"note": 1}', "[1]"])
def test_a_run_whose_summary_records_no_status_is_described_as_it_is(tmp_path, summary):
    """A run whose summary.json is unreadable or records no status is refused naming that, not as having no summary.
    Bug caught: harness.rundir._status — `except (OSError, ValueError) as error:` → `except OSError as error:`."""
    run_dir = tmp_path / "run"
    run_config(TABULAR, run_dir)
    (run_dir / "summary.json").write_text(summary)
    with pytest.raises(ConfigError) as error:
        run_config(TABULAR, run_dir)
    assert "no summary" not in str(error.value) and "its summary.json" in str(error.value)
    (run_dir / "summary.json").unlink()
    with pytest.raises(ConfigError, match=r"already holds a run \(running or killed: no summary\)"):
        run_config(TABULAR, run_dir)


@pytest.mark.parametrize("resume", ["false", "auto", "true"])
def test_a_foreign_metrics_csv_is_refused_as_files_tpo_bench_did_not_write(tmp_path, resume):
    """A metrics.csv tpo-bench did not write is refused as a foreign file, whatever trainer.resume, not as a run.
    Bug caught: harness.rundir.plan_run — `if overwrite or not has_results(run_dir) or not
    is_run_directory(run_dir):` → `if overwrite or not has_results(run_dir):`."""
    folder = tmp_path / "folder"
    make(folder, {"metrics.csv": "a,b\n1,2\n", "notes.txt": "n"})
    before = tree(folder)
    with pytest.raises(ConfigError) as error:
        run_config([*TABULAR, f"trainer.resume={resume}"], folder)
    message = str(error.value)
    assert "did not write" in message and "metrics.csv" in message and "already holds a run" not in message
    assert "\n" not in message and "overwrite=true" not in message
    assert tree(folder) == before


def test_an_interrupted_sweep_job_ends_in_one_line_naming_its_folder_and_how_to_resume(tmp_path):
    """SIGTERM ends a sweep job in one line naming its folder and a command that continues the sweep, and that
    command does.
    Bug caught: harness/__main__.py:_sweep_resume_hint — `Path(str(hydra_cfg.sweep.dir)).resolve()` →
    `Path(str(hydra_cfg.sweep.dir))`."""
    args = ["-m", "task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=3000", "task.checkpoint_every=50",
            "logger=none", "seed_offset=0,100", "hydra.sweep.dir=sweep"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline and not list((tmp_path / "sweep").glob(f"*/{outputs.CHECKPOINT_FILE}")):
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr
    lines = [line for line in stderr.splitlines() if "[INFO]" not in line and "[WARNING]" not in line]
    [job] = [path.parent for path in (tmp_path / "sweep").glob(f"*/{outputs.CHECKPOINT_FILE}")]
    assert len(lines) == 1 and lines[0].startswith(f"Interrupted: sweep job {job};"), stderr
    assert f"hydra.sweep.dir={tmp_path / 'sweep'} trainer.resume=auto" in lines[0] and " -m " in lines[0]
    assert json.loads((job / "summary.json").read_text())["status"] == "interrupted"
    assert not list((tmp_path / "sweep").glob("*seed_offset=100*"))  # the sweep stopped
    # the command it names continues the sweep: the interrupted job resumes, the other one starts
    again = shlex.split(lines[0].split("continue it: ", 1)[1])
    assert again[:3] == ["python", "-m", "harness"]
    resumed = run_cli(again[3:], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads((job / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["resumed_from"]
    assert len(list((tmp_path / "sweep").glob("*/summary.json"))) == 2


def _run_failing_main(entry, run_dir: Path, monkeypatch) -> None:
    """``python -m harness`` in this process for a tabular run into ``run_dir`` whose training fails (the caller
    patched it): Hydra's exit expected, the root logger's handlers and level restored afterwards."""
    monkeypatch.setattr(sys, "argv", ["harness", "task=tabular_single", "logger=none", f"hydra.run.dir={run_dir}"])
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        with pytest.raises(SystemExit):
            entry.main()
    finally:
        for handler in root.handlers:
            if handler not in handlers:
                handler.close()
        root.handlers[:], root.level = handlers, level


def test_a_failure_that_cannot_be_recorded_is_not_said_to_be_recorded(tmp_path, monkeypatch):
    """When a failure cannot be recorded, the log says so instead of pointing at an error.txt that is not there.
    Bug caught: harness/__main__.py:main — `f"; traceback in ..." if written else` → `... if recorded else`."""
    import harness.__main__ as entry

    run_dir = tmp_path / "run"

    def fail(cfg, folder, *_):
        rundir._started.add(folder.resolve())  # it began writing there
        raise RuntimeError("boom")

    monkeypatch.setattr(entry, "train", fail)
    monkeypatch.setattr(outputs, "record_failure", lambda *args: False)
    _run_failing_main(entry, run_dir, monkeypatch)
    text = (run_dir / "__main__.log").read_text()
    assert "run failed" in text and "error.txt" not in text and "could not be recorded" in text


def test_a_run_that_fails_before_it_writes_says_why_once_and_leaves_no_folder(tmp_path, monkeypatch, capfd):
    """A single run that fails before writing anything: its folder and log go, and its error is printed once (by
    Hydra), not followed by a second traceback or a logging error from a log file removed under its handler.
    Bugs caught: ``LaunchLog.remove_if_own`` closing its handler without detaching it (the next record reopened the
    file in the removed folder); ``_failed`` logging the traceback of an error it then raises."""
    import harness.__main__ as entry

    run_dir = tmp_path / "run"

    def fail(cfg, folder, *_):
        raise RuntimeError("boom")

    monkeypatch.setattr(entry, "train", fail)
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    _run_failing_main(entry, run_dir, monkeypatch)
    printed = capfd.readouterr()
    text = printed.out + printed.err  # Hydra's console log is stdout, its error report stderr
    assert "RuntimeError: boom" in text and text.count("Traceback") == 1, text
    assert "Logging error" not in text and "FileNotFoundError" not in text, text
    assert not run_dir.exists()


def test_build_task_checks_the_memory_estimate_but_not_on_the_meta_device():
    """build_task refuses a run over memory_cap_gb, but not on the meta device, which allocates nothing.
    Bug caught: harness/config.py:build_task — `if device.type != "meta":` → `if cfg.device != "meta":`."""
    import torch

    from tasks.memory import GB, estimate_memory

    overrides = ["task=tabular_multi", "seeds=50"]
    need = estimate_memory(compose_config(overrides))[0]
    cfg = compose_config([*overrides, f"+memory_cap_gb={need / GB / 2}"])
    with pytest.raises(ConfigError, match="over memory_cap_gb"):
        build_task(cfg)
    assert build_task(cfg, device=torch.device("meta")) is not None  # the meta device allocates nothing
