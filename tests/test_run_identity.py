"""Run identity, resume and overwrite rules, checkpoint integrity, whole-file outputs and sweep exit codes."""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import ROOT, compose_config, run_cli, run_config
from harness import rundir
from harness.rundir import outputs
from harness.trainers import trainer_class
from common.checks import ConfigError

TABULAR = ["task=tabular_single", "algorithm=tpo", "seeds=2", "task.steps=30", "task.checkpoint_every=10"]


def snapshot(run_dir: Path) -> dict[str, bytes]:
    """Every file of a run directory but Hydra's log, which each launch appends to."""
    return {str(path.relative_to(run_dir)): path.read_bytes() for path in run_dir.rglob("*")
            if path.is_file() and path.suffix != ".log"}


@pytest.fixture
def finished_run(tmp_path) -> Path:
    run_dir = tmp_path / "run"
    run_config(TABULAR, run_dir)
    return run_dir


def test_a_run_records_its_fingerprint_and_logging_keys_do_not_change_it(finished_run):
    record = json.loads((finished_run / rundir.IDENTITY_FILE).read_text())
    same = ["logger=wandb", "logger.mode=offline", "threads=2", "cpu_matmul=onednn", "trainer.progress=true",
            "task.checkpoint_every=5", "experiment_name=other", "task.steps_to=[0.5]", "algorithm.eta=1"]
    assert rundir.fingerprint(rundir.identity(compose_config([*TABULAR, *same]))) == record["fingerprint"]
    for change in ("algorithm.eta=3", "seeds=3", "task.steps=31", "flush_denormal=false", "task.alpha=0.2",
                   "seed_offset=2"):
        assert rundir.fingerprint(rundir.identity(compose_config([*TABULAR, change]))) != record["fingerprint"]
    assert (finished_run / ".hydra" / "config.yaml").exists()  # written by the fresh start, not by Hydra


@pytest.mark.parametrize("change, named", [
    ("algorithm=grpo", "algorithm.name: tpo → grpo"),
    ("algorithm.eta=3", "algorithm.eta: 1.0 → 3)"),
    ("seeds=3", "seeds: 2 → 3"),
])
def test_resuming_with_another_configuration_is_refused_naming_the_keys(finished_run, change, named):
    before = snapshot(finished_run)
    with pytest.raises(ConfigError, match="was run with another configuration") as error:
        run_config([*TABULAR, change, "trainer.resume=true"], finished_run)
    assert named in str(error.value) and "\n" not in str(error.value)
    assert snapshot(finished_run) == before


def test_resume_false_into_a_run_is_refused_and_overwrite_replaces_it(finished_run):
    before = snapshot(finished_run)
    with pytest.raises(ConfigError, match=r"already holds a run \(completed\).*trainer.overwrite=true"):
        run_config(TABULAR, finished_run)
    assert snapshot(finished_run) == before
    old_uid = json.loads((finished_run / rundir.IDENTITY_FILE).read_text())["uid"]
    summary = run_config([*TABULAR, "algorithm=grpo", "trainer.overwrite=true"], finished_run)
    assert summary["algorithm"] == "grpo" and summary["status"] == "completed"
    assert json.loads((finished_run / rundir.IDENTITY_FILE).read_text())["uid"] != old_uid  # new W&B run ids
    run_config([*TABULAR, "algorithm=grpo"], finished_run.parent / "fresh")  # nothing of the old run is left
    assert (finished_run / "metrics.csv").read_bytes() == (finished_run.parent / "fresh" / "metrics.csv").read_bytes()


def test_resume_true_without_a_checkpoint_is_refused_and_auto_starts(tmp_path):
    with pytest.raises(ConfigError, match="holds no run to resume"):
        run_config([*TABULAR, "trainer.resume=true"], tmp_path / "empty")
    assert not rundir.has_results(tmp_path / "empty")
    assert run_config([*TABULAR, "trainer.resume=auto"], tmp_path / "empty")["status"] == "completed"


def test_a_run_killed_before_its_first_checkpoint_restarts_only_with_auto(tmp_path, monkeypatch):
    _interrupted_run(tmp_path, monkeypatch, at=5)  # before the first checkpoint (step 10)
    with pytest.raises(ConfigError, match=r"no checkpoint to resume \(interrupted\)"):
        run_config([*TABULAR, "trainer.resume=true"], tmp_path / "run")
    run_config([*TABULAR, "trainer.resume=auto"], tmp_path / "run")
    run_config(TABULAR, tmp_path / "full")
    assert (tmp_path / "run" / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()


@pytest.mark.parametrize("at", [5, 25])  # killed before its first checkpoint / after one (step 20)
def test_a_run_recorded_before_a_key_left_its_identity_still_resumes(tmp_path, monkeypatch, at):
    """Identity files written when ``task.checkpoint_every`` still counted (as ``task.steps`` once did) must
    resume to the numbers of an uninterrupted run, not be refused as another configuration."""
    monkeypatch.setattr(rundir, "NOT_IDENTITY", tuple(k for k in rundir.NOT_IDENTITY if k != "task.checkpoint_every"))
    run_dir = _interrupted_run(tmp_path, monkeypatch, at=at)  # undoes the patch once interrupted
    assert json.loads((run_dir / rundir.IDENTITY_FILE).read_text())["config"]["task"]["checkpoint_every"] == 10
    run_config([*TABULAR, "trainer.resume=auto"], run_dir)
    run_config(TABULAR, tmp_path / "full")
    assert (run_dir / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()
    summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
    assert summary["status"] == "completed" and len(summary["resumed_from"]) == (at > 20)
    with pytest.raises(ConfigError, match="algorithm.eta: 1.0 → 2"):  # a real change is still refused
        run_config([*TABULAR, "algorithm.eta=2", "trainer.resume=true"], run_dir)


def _as_recorded_before_the_rename(run_dir: Path) -> None:
    """Rewrite the run's identity.json and config as runs recorded them when the budget and checkpoint spacing were
    ``trainer.steps`` and ``trainer.checkpoint_every`` (``task.steps`` then outside the identity); the fingerprint
    stays the one its checkpoints were written under."""
    import yaml

    record = json.loads((run_dir / rundir.IDENTITY_FILE).read_text())
    config = record["config"]
    config["trainer"] = {"steps": config["task"].pop("steps")}
    (run_dir / rundir.IDENTITY_FILE).write_text(json.dumps(record))
    composed = yaml.safe_load((run_dir / ".hydra" / "config.yaml").read_text())
    composed["trainer"] = {"steps": "${task.steps}", "checkpoint_every": "${task.checkpoint_every}",
                           **composed["trainer"]}
    (run_dir / ".hydra" / "config.yaml").write_text(yaml.safe_dump(composed, sort_keys=False))


@pytest.mark.parametrize("at", [5, 25])  # killed before its first checkpoint / after one (step 20)
def test_a_run_recorded_under_a_renamed_key_resumes_to_the_same_numbers(tmp_path, monkeypatch, at):
    """A run killed while its identity named its budget ``trainer.steps`` resumes under ``task.steps`` to the numbers
    of an uninterrupted run; a longer budget is still refused, naming the key by its new name. Bug caught: a renamed
    key read as a change of configuration (every run in a campaign's work folder refused at its next start)."""
    run_dir = _interrupted_run(tmp_path, monkeypatch, at=at)
    _as_recorded_before_the_rename(run_dir)
    with pytest.raises(ConfigError, match="task.steps: 30 → 40"):
        run_config([*TABULAR, "task.steps=40", "trainer.resume=true"], run_dir)
    run_config([*TABULAR, "trainer.resume=auto"], run_dir)
    run_config(TABULAR, tmp_path / "full")
    assert (run_dir / "metrics.csv").read_bytes() == (tmp_path / "full" / "metrics.csv").read_bytes()
    summary = json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
    assert summary["status"] == "completed" and len(summary["resumed_from"]) == (at > 20)


def test_a_config_that_still_sets_a_renamed_key_is_refused_and_no_preset_does():
    """A renamed key set anywhere (a preset's ``trainer: steps:`` block merges without complaint) is refused before
    the run, naming the new key; no preset sets one. Bug caught: a preset's ``trainer.steps`` left behind, read by
    nothing, so its run trained its task's default budget."""
    from harness.config import experiment_presets, run_settings
    from harness.identity import RENAMED

    with pytest.raises(ConfigError, match=r"^trainer.steps is not a config key; it is task.steps now"):
        run_settings(compose_config([*TABULAR, "+trainer.steps=5"]))
    for preset in experiment_presets():
        flat = rundir.flatten(OmegaConf.to_container(compose_config([f"experiment={preset}"])))
        assert not set(RENAMED) & set(flat), preset


def test_a_recorded_config_reads_its_renamed_key_resolved_as_the_run_ran_it(tmp_path):
    """An old run's config.yaml interpolates ``trainer.steps: ${task.steps}`` or overrides it (600 beside the task's
    1,000): the report and the campaign (a folder with no identity.json) read the run's own budget, 600. Bug caught:
    renaming before resolving (the interpolation's text as the budget) or keeping the task's 1,000."""
    import yaml

    from harness.campaign.records import recorded_identity
    from harness.report.load import read_config

    config = OmegaConf.to_container(compose_config(["task=token_reversal", "task.steps=1000"]))
    config["trainer"] = {"steps": 600, "checkpoint_every": "${task.checkpoint_every}", **config["trainer"]}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    flat = read_config(tmp_path)
    assert (flat["task.steps"], flat["task.checkpoint_every"]) == (600, 100) and "trainer.steps" not in flat
    assert recorded_identity(tmp_path)["task"]["steps"] == 600


def test_the_report_reads_a_renamed_key_under_its_new_name():
    """A run's config recorded with ``trainer.steps`` (``task.steps`` there being the task's default, which it
    overrode) reads as ``task.steps`` of the run's own budget, the old key gone, as a config written today would."""
    from omegaconf import OmegaConf

    from harness.report.load import as_current, flatten

    today = flatten(OmegaConf.to_container(compose_config([*TABULAR, "task.steps=7"]), resolve=True))
    recorded = {**today, "task.steps": 150, "trainer.steps": 7, "trainer.checkpoint_every": 10}
    assert as_current(recorded) == as_current(dict(today))


@pytest.mark.parametrize("task_epochs, algorithm_epochs, reads_as", [(1, None, None), (2, None, 2), (2, 3, 3)])
def test_a_run_recorded_with_a_retired_key_reads_as_the_run_that_computes_the_same(task_epochs, algorithm_epochs,
                                                                                  reads_as):
    """LLM runs recorded with ``task.epochs`` before an LLM run's epochs became ``algorithm.epochs`` alone (null: the
    TRL trainer's 1; the trainer read algorithm.epochs, else task.epochs): at 1 the key reads as absent, at another
    value as ``algorithm.epochs`` where that was null, to the run files (resume, the campaign's done) and to the
    report alike; never as another value."""
    from omegaconf import OmegaConf

    from harness.report.load import flatten, as_current

    def run(task_epochs, algorithm_epochs):
        config = OmegaConf.to_container(compose_config(["task=gsm8k", "algorithm=grpo"]), resolve=True)
        assert "epochs" not in config["task"] and config["algorithm"]["epochs"] is None
        task = {**config["task"], **({"epochs": task_epochs} if task_epochs is not None else {})}
        return OmegaConf.create({**config, "task": task, "algorithm": {**config["algorithm"],
                                                                       "epochs": algorithm_epochs}})

    recorded, current = run(task_epochs, algorithm_epochs), run(None, reads_as)
    assert rundir.identity(recorded) == rundir.identity(current)
    assert rundir.identity(recorded) != rundir.identity(run(None, 1 if reads_as is None else None))
    assert as_current(flatten(OmegaConf.to_container(recorded))) == as_current(flatten(OmegaConf.to_container(current)))


def run_config_task():
    from harness.config import build_task

    return build_task(compose_config(TABULAR))


def test_a_finished_run_is_not_trained_again(finished_run, monkeypatch):
    task_cls = type(run_config_task())
    monkeypatch.setattr(trainer_class(task_cls), "episode",
                        staticmethod(lambda task, step: pytest.fail("a finished run trained again")))
    before = snapshot(finished_run)
    for resume in ("true", "auto"):
        assert run_config([*TABULAR, f"trainer.resume={resume}"], finished_run)["status"] == "completed"
    assert snapshot(finished_run) == before


@pytest.mark.parametrize("value, message", [("maybe", "trainer.resume='maybe' is not valid"),
                                            ("1", "trainer.resume=1 is not valid")])
def test_resume_takes_only_its_three_choices(tmp_path, value, message):
    with pytest.raises(ConfigError, match=message):
        run_config([*TABULAR, f"trainer.resume={value}"], tmp_path)


def test_overwrite_with_resume_is_contradictory(tmp_path):
    with pytest.raises(ConfigError, match="contradictory"):
        run_config([*TABULAR, "trainer.resume=true", "trainer.overwrite=true"], tmp_path)


# --- checkpoint integrity -------------------------------------------------------------------------------------

def _interrupted_run(tmp_path: Path, monkeypatch, at: int = 25) -> Path:
    """A run interrupted at step ``at`` (checkpoints every 10 steps: the default leaves one at step 20)."""
    task_cls = type(run_config_task())
    trainer = trainer_class(task_cls)
    original = trainer.episode

    def die(task, step):
        if step == at:
            raise KeyboardInterrupt
        return original(task, step)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(die))
    with pytest.raises(KeyboardInterrupt):
        run_config(TABULAR, tmp_path / "run")
    monkeypatch.undo()
    return tmp_path / "run"


def _flip_64_bytes(data: bytes) -> bytes:
    damaged = bytearray(data)
    for index in random.Random(0).sample(range(len(outputs.CHECKPOINT_MAGIC), len(data)), 64):
        damaged[index] ^= 0xFF
    return bytes(damaged)


def _with_valid_header(payload: bytes) -> bytes:
    return outputs.CHECKPOINT_MAGIC + hashlib.sha256(payload).digest() + payload


class _RunsCode:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def _crafted() -> bytes:
    buffer = io.BytesIO()
    torch.save({"step": 1, "fingerprint": "x", "payload": _RunsCode()}, buffer)
    return _with_valid_header(buffer.getvalue())


@pytest.mark.parametrize("damage, problem", [
    (_flip_64_bytes, "is damaged or truncated"),
    (lambda data: data[: len(data) // 2], "is damaged or truncated"),
    (lambda data: b"garbage\n", "is not a tpo-bench checkpoint"),
    (lambda data: data[len(outputs.CHECKPOINT_MAGIC) + 32:], "is not a tpo-bench checkpoint"),  # plain torch.save
    (lambda data: _with_valid_header(b"not a zip archive"), "cannot be read"),
    (lambda data: _crafted(), "holds objects other than tensors"),
])
def test_a_bad_checkpoint_is_refused_in_one_line_and_the_run_files_stay(tmp_path, monkeypatch, damage, problem):
    run_dir = _interrupted_run(tmp_path, monkeypatch)
    checkpoint = run_dir / outputs.CHECKPOINT_FILE
    checkpoint.write_bytes(damage(checkpoint.read_bytes()))
    before = snapshot(run_dir)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(outputs.CheckpointError) as error:
        run_config([*TABULAR, "trainer.resume=true"], run_dir)
    message = str(error.value)
    assert message.startswith(str(checkpoint)) and problem in message and "\n" not in message
    assert "trainer.overwrite=true" in message
    assert snapshot(run_dir) == before
    assert not (tmp_path / "pwned").exists()


def test_a_checkpoint_of_another_run_is_refused(tmp_path, monkeypatch):
    run_dir = _interrupted_run(tmp_path, monkeypatch)
    run_config([*TABULAR, "algorithm.eta=2"], tmp_path / "other")
    (run_dir / outputs.CHECKPOINT_FILE).write_bytes((tmp_path / "other" / outputs.CHECKPOINT_FILE).read_bytes())
    with pytest.raises(outputs.CheckpointError, match="belongs to another run"):
        run_config([*TABULAR, "trainer.resume=true"], run_dir)


def test_resume_continues_from_the_checkpoint_without_recomputing(tmp_path, monkeypatch):
    run_dir = _interrupted_run(tmp_path, monkeypatch)
    checkpoint = outputs.load_checkpoint(run_dir, json.loads((run_dir / rundir.IDENTITY_FILE).read_text())[
        "fingerprint"])
    assert 0 < checkpoint["step"] == 20 < 30
    task_cls = type(run_config_task())
    original, stepped = trainer_class(task_cls).episode, []

    def counted(task, step):
        stepped.append(step)
        return original(task, step)

    monkeypatch.setattr(trainer_class(task_cls), "episode", staticmethod(counted))
    summary = run_config([*TABULAR, "trainer.resume=true"], run_dir)
    assert stepped == list(range(20, 30)) and summary["resumed_from"] == [20]
    monkeypatch.undo()
    run_config(TABULAR, tmp_path / "full")
    assert (tmp_path / "full" / "metrics.csv").read_bytes() == (run_dir / "metrics.csv").read_bytes()


# --- whole files for concurrent readers ---------------------------------------------------------------------

def _check_whole(text: str, columns: int) -> None:
    assert text, "empty metrics.csv"
    assert text.endswith("\n"), "torn last row"
    for line in text.splitlines():
        assert line.count(",") == columns - 1, f"torn row {line!r}"


def test_a_concurrent_reader_never_sees_a_torn_row_or_an_empty_file(tmp_path):
    columns = ("error", "a", "b", "c")
    seeds = list(range(40))
    writing = threading.Event()

    def write() -> None:
        writer = outputs.MetricsWriter(tmp_path, columns, seeds, None, publish_every=0.0)
        values = {name: np.linspace(0, 1, len(seeds)) / 3 for name in columns}
        for step in range(300):
            writer.append(step, values)
        writer.flush()
        for _ in range(20):  # resume: the file is cut back to the checkpoint's rows, whole
            writer = outputs.MetricsWriter(tmp_path, columns, seeds, 150 * len(seeds), publish_every=0.0)
            for step in range(150, 160):
                writer.append(step, values)
        writer.close()
        writing.set()

    thread = threading.Thread(target=write)
    thread.start()
    reads = 0
    while not writing.is_set():
        path = tmp_path / outputs.METRICS_FILE
        if path.exists():
            _check_whole(path.read_text(), 2 + len(columns))
            reads += 1
    thread.join()
    assert reads > 50


def test_a_reader_of_a_real_run_sees_whole_files(tmp_path):
    """metrics.csv and summary.json read repeatedly while a separate process trains and checkpoints."""
    run_dir = tmp_path / "run"
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=400", "task.checkpoint_every=20",
            "logger=none", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    process = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen, header = set(), None
    while process.poll() is None:
        path = run_dir / outputs.METRICS_FILE
        if path.exists():
            text = path.read_text()
            header = header or text.splitlines()[0]
            _check_whole(text, header.count(",") + 1)
            seen.add(text.count("\n"))
        if (run_dir / outputs.SUMMARY_FILE).exists():
            json.loads((run_dir / outputs.SUMMARY_FILE).read_text())
        time.sleep(0.001)
    assert process.returncode == 0
    assert len(seen) > 2  # the file grew while it was read


# --- sweeps ---------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("launcher", [[], ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"]])
def test_a_sweep_with_a_failed_job_runs_every_job_then_exits_non_zero(tmp_path, launcher):
    sweep = tmp_path / "sweep"
    args = ["-m", "task=tabular_single", "algorithm=tpo,grpo", "task.steps=5", "logger=none",
            f"hydra.sweep.dir={sweep}", *launcher]
    first = run_cli(args, tmp_path)
    assert first.returncode == 0, first.stderr
    assert "sweep: 2 jobs (2 completed)" in first.stderr
    (sweep / "algorithm=tpo,task.steps=5,task=tabular_single" / outputs.SUMMARY_FILE).unlink()
    # the same sweep again without resume: both jobs refused (their folders hold runs), nothing overwritten
    before = snapshot(sweep / "algorithm=grpo,task.steps=5,task=tabular_single")
    again = run_cli(args, tmp_path)
    assert again.returncode == 1
    failed = [line for line in again.stderr.splitlines() if line.startswith("FAILED job")]
    assert len(failed) == 2 and all("already holds a run" in line for line in failed)
    assert snapshot(sweep / "algorithm=grpo,task.steps=5,task=tabular_single") == before
    # with resume=auto the finished job is skipped and the other resumes from its final checkpoint
    resumed = run_cli([*args, "trainer.resume=auto"], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "sweep: 2 jobs (2 completed)" in resumed.stderr


@pytest.mark.parametrize("bad, message", [("trainer.resume=true", "Error: trainer.resume=true but"),
                                          ("trainer.progress=maybe", "Error: trainer.progress='maybe' is not valid")])
def test_a_refused_single_run_exits_2_and_leaves_no_folder(tmp_path, bad, message):
    result = run_cli([*TABULAR, bad, f"hydra.run.dir={tmp_path / 'nothing'}"], tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith(message)
    assert not (tmp_path / "nothing").exists()


def test_a_sweep_with_a_bad_value_in_one_job_reports_it_and_runs_the_others(tmp_path):
    result = run_cli(["-m", "task=tabular_single", "algorithm.eta=1,0", "task.steps=5", "logger=none",
                      f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert result.returncode == 1
    assert "sweep: 2 jobs (1 completed, 1 failed)" in result.stderr
    failed = [line for line in result.stderr.splitlines() if line.startswith("FAILED job")]
    assert len(failed) == 1 and "algorithm.eta=0" in failed[0] and "algorithm.eta=0 is not valid" in failed[0]
    good = json.loads((tmp_path / "sweep" / "algorithm.eta=1,task.steps=5,task=tabular_single" /
                       outputs.SUMMARY_FILE).read_text())
    bad = tmp_path / "sweep" / "algorithm.eta=0,task.steps=5,task=tabular_single"
    assert good["status"] == "completed"
    assert json.loads((bad / outputs.SUMMARY_FILE).read_text())["status"] == "failed"
    assert not (bad / outputs.METRICS_FILE).exists()


def test_a_folder_that_only_records_a_failure_starts_again(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    outputs.write_json(run_dir / outputs.SUMMARY_FILE, {"status": "failed", "error": "ConfigError: ..."})
    (run_dir / outputs.ERROR_FILE).write_text("ConfigError: ...\n")
    assert not rundir.has_results(run_dir)
    assert run_config([*TABULAR, "trainer.resume=auto"], run_dir)["status"] == "completed"
    assert not (run_dir / outputs.ERROR_FILE).exists()


@pytest.mark.parametrize("value", ["-1", "1.5", "two"])
def test_threads_is_validated(tmp_path, value):
    with pytest.raises(ConfigError, match=f"threads={value!r}|threads={value} is not valid"):
        run_config([*TABULAR, f"threads={value}"], tmp_path)


def test_a_sweep_killed_mid_way_finishes_with_the_same_command_and_numbers(tmp_path):
    """kill -9 of a running sweep (launcher and jobs), then the same command: finished jobs are skipped, the
    interrupted one resumes from its checkpoint, and every metrics.csv equals an uninterrupted sweep's."""
    def command(sweep: Path) -> list[str]:
        return [sys.executable, "-m", "harness", "-m", "task=tabular_multi", "algorithm=tpo,grpo", "seeds=50",
                "task.steps=2000", "task.checkpoint_every=50", "logger=none", "trainer.resume=auto",
                f"hydra.sweep.dir={sweep}"]

    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    full = subprocess.run(command(tmp_path / "full"), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    killed = tmp_path / "killed"
    process = subprocess.Popen(command(killed), cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(killed.rglob("checkpoint.pt")):
        time.sleep(0.02)
    os.killpg(process.pid, 9)
    process.wait()
    assert any(not (p.parent / outputs.SUMMARY_FILE).exists() for p in killed.rglob("checkpoint.pt"))
    again = subprocess.run(command(killed), cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr
    for path in (tmp_path / "full").rglob("metrics.csv"):
        assert (killed / path.relative_to(tmp_path / "full")).read_bytes() == path.read_bytes()
    resumed = [json.loads(p.read_text())["resumed_from"] for p in killed.rglob(outputs.SUMMARY_FILE)]
    assert sorted(map(len, resumed)) == [0, 1] and all(0 < s < 2000 for r in resumed for s in r)


# --- what the review found ----------------------------------------------------------------------------------

def _rewrite_checkpoint(run_dir: Path, change) -> None:
    path = run_dir / outputs.CHECKPOINT_FILE
    data = path.read_bytes()
    state = torch.load(io.BytesIO(data[len(outputs.CHECKPOINT_MAGIC) + 32:]), weights_only=True)
    change(state)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    path.write_bytes(_with_valid_header(buffer.getvalue()))


@pytest.mark.parametrize("change, problem", [
    (lambda state: state.pop("task"), "has no valid task"),
    (lambda state: state.update(rows=-5), "has no valid rows"),
    (lambda state: state.update(step=10_000), "past task.steps=30"),
    (lambda state: state["task"].pop("logits"), "does not fit this task's state (KeyError"),
])
def test_a_well_formed_checkpoint_of_the_wrong_shape_is_refused(tmp_path, monkeypatch, change, problem):
    run_dir = _interrupted_run(tmp_path, monkeypatch)
    _rewrite_checkpoint(run_dir, change)
    before = snapshot(run_dir)
    with pytest.raises(outputs.CheckpointError, match=re.escape(problem)):
        run_config([*TABULAR, "trainer.resume=true"], run_dir)
    assert snapshot(run_dir) == before


def test_an_exported_run_without_identity_counts_as_a_run(tmp_path):
    folder = tmp_path / "exported"
    folder.mkdir()
    outputs.write_json(folder / outputs.SUMMARY_FILE, {"status": "completed", "seeds": [0]})
    assert rundir.has_results(folder)
    with pytest.raises(ConfigError, match="already holds a run"):
        run_config(TABULAR, folder)


def test_a_refused_or_failed_launch_leaves_an_earlier_runs_files_as_they_were(tmp_path):
    run_dir = tmp_path / "run"
    assert run_cli([*TABULAR, f"hydra.run.dir={run_dir}"], tmp_path).returncode == 0
    (run_dir / rundir.IDENTITY_FILE).unlink()  # as a run from before identity.json
    before = snapshot(run_dir)
    for args in (["algorithm=dg"], ["algorithm=dg", "trainer.resume=true"], ["threads=-1"]):
        result = run_cli([*TABULAR, *args, f"hydra.run.dir={run_dir}"], tmp_path)
        assert result.returncode == 2, result.stderr
        assert snapshot(run_dir) == before  # .hydra/config.yaml too: Hydra no longer rewrites it at launch


def test_nothing_to_do_leaves_the_launch_record_alone(finished_run, tmp_path):
    before = snapshot(finished_run)
    result = run_cli([*TABULAR, "trainer.resume=true", "experiment_name=foo", f"hydra.run.dir={finished_run}"],
                     tmp_path)
    assert result.returncode == 0, result.stderr
    assert snapshot(finished_run) == before


def test_a_second_launch_into_a_running_run_is_refused(tmp_path):
    run_dir = tmp_path / "run"
    args = ["task=tabular_multi", "algorithm=grpo", "seeds=50", "task.steps=3000", "task.checkpoint_every=50",
            "logger=none", f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}
    first = subprocess.Popen([sys.executable, "-m", "harness", *args], cwd=tmp_path, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline and not (run_dir / outputs.CHECKPOINT_FILE).exists():
            time.sleep(0.05)
        first.send_signal(signal.SIGSTOP)  # paused mid-run, lock held: it cannot finish before the second launch
        assert first.poll() is None, "the first run ended before the second launch"
        second = run_cli([*args, "trainer.resume=auto"], tmp_path)
        assert second.returncode == 2
        assert f"is being written by process {first.pid}" in second.stderr
    finally:
        first.kill()
        first.wait()
    # the lock of a process that died is stale: a resume takes it over
    assert run_cli([*args, "trainer.resume=true", "task.steps=3000"], tmp_path).returncode == 0


def test_a_sweep_over_two_presets_keeps_their_jobs_apart(tmp_path):
    result = run_cli(["-m", "experiment=fig2_tabular_single,fig3_tabular_multi", "algorithm=tpo", "seeds=2",
                      "task.steps=5", "logger=none", f"hydra.sweep.dir={tmp_path / 'sweep'}"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "sweep: 2 jobs (2 completed)" in result.stderr


def test_one_lock_file_function_refuses_a_live_holder_takes_over_a_dead_one_and_removes_only_its_own(tmp_path):
    """The run lock and the campaign lock are this one function. Bug caught: leaving the lock with an unconditional
    ``path.unlink()`` (deletes the lock another process took over)."""
    path = tmp_path / "run.lock"

    def busy(holder: str, lock: Path) -> Exception:
        return RuntimeError(f"held by {holder} ({lock.name})")

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    path.write_text(f"{dead.pid} {socket.gethostname()}\n")  # a lock left by a process that is gone: taken over
    with rundir.lock_file(path, busy):
        assert path.read_text().split()[0] == str(os.getpid())
        with pytest.raises(RuntimeError, match=rf"^held by {os.getpid()} on {socket.gethostname()} \(run.lock\)$"):
            with rundir.lock_file(path, busy):
                pass
        assert path.exists(), "a refused lock removed its holder's file"
        live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        path.write_text(f"{live.pid} {socket.gethostname()}\n")  # another process took it over meanwhile
    try:
        assert path.read_text().split()[0] == str(live.pid), "the lock of another process was removed"
    finally:
        live.kill()
        live.wait()
    path.unlink()
    with rundir.lock_file(path, busy):
        pass
    assert not path.exists()
