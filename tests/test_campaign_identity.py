"""The campaign trusts nothing it did not verify: a run counts, is exported or is skipped only when its recorded
configuration and step budget are its cell's; reports that fail, leftover export temporaries, a second campaign on
the same cells, unknown ``--only`` names, overrides that do not compose and damaged result files are each
refused or handled in one line. Every test works in ``tmp_path`` only."""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

from conftest import ROOT
from harness import campaign, rundir
from harness.campaign import locks as campaign_locks
from harness.campaign import reports as campaign_reports
from harness.config import compose_config

PRESET = "fig3_tabular_multi"
FIXED = ("logger=none", "threads=1", "trainer.resume=auto", "trainer.progress=false")  # as Job.command adds them


def cell(alpha: float = 0.1, steps: int = 40, seeds: int = 2, **extra) -> dict:
    return {"priority": "P1", "preset": PRESET, "name": "tpo", "seeds": seeds, "cost": 0.001,
            "overrides": ["algorithm=tpo", f"task.alpha={alpha}", f"task.steps={steps}"], **extra}


def fake_run(folder: Path, overrides: list[str], seeds: int, offset: int = 0, layout: str = "work",
             status: str = "completed") -> None:
    """A run folder as the harness (layout "work") or ``export`` (layout "results") leaves it, its identity computed
    by ``harness.rundir`` from the config the campaign's command composes."""
    cfg = compose_config([f"experiment={PRESET}", *overrides, f"seeds={seeds}", f"seed_offset={offset}",
                          *FIXED])
    identity = rundir.identity(cfg)
    folder.mkdir(parents=True)
    (folder / "identity.json").write_text(json.dumps({"fingerprint": rundir.fingerprint(identity), "uid": "u",
                                                      "config": identity}))
    (folder / "summary.json").write_text(json.dumps({
        "status": status, "seeds": list(range(offset, offset + seeds)), "steps": int(cfg.task.steps),
        "cpu_seconds": 1.0}))
    rows = "step,seed,error\n" + "".join(f"{s},{offset + i},0.5\n" for s in range(3) for i in range(seeds))
    if layout == "work":
        (folder / ".hydra").mkdir()
        (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        (folder / "metrics.csv").write_text(rows)
    else:
        (folder / "config.yaml").write_text(OmegaConf.to_yaml(cfg))
        (folder / "metrics.csv.gz").write_bytes(gzip.compress(rows.encode()))


def write_queue(tmp_path: Path, *cells: dict, chunk: int = 2) -> Path:
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump({"chunk": chunk, "cells": list(cells)}))
    return path


def main(tmp_path: Path, *args: str) -> int:
    """``campaign.main`` in-process on tmp_path's folders; its exit code."""
    with pytest.raises(SystemExit) as exit_:
        campaign.main([*args, "--work", str(tmp_path / "work"), "--results", str(tmp_path / "results")])
    code = exit_.value.code
    return code if isinstance(code, int) else (0 if code is None else code)


def states(jobs: list) -> list[str]:
    return [state.split(" (")[0] for _, state in jobs]


def job(queue_cell: dict, offset: int = 0, seeds: int = 2) -> campaign.Job:
    overrides = tuple(queue_cell["overrides"])
    return campaign.Job("P1", PRESET, queue_cell["name"], overrides, offset, seeds,
                        campaign.preset_steps(PRESET, overrides), 0.001)


# 1. identity and step budget ---------------------------------------------------------------------------------------

def test_exported_runs_of_another_alpha_are_not_done_and_are_refused_naming_the_key(tmp_path, capsys):
    """An exported run of another task.alpha is not counted as done and is refused in one line naming the key.
    Bug caught: harness/campaign/records.py:differences —
    `if rundir.fingerprint(recorded) == rundir.fingerprint(expected):` → `if True:`."""
    fake_run(tmp_path / "results" / "runs" / PRESET / "tpo" / "seeds0-1", cell(0.1)["overrides"], 2, layout="results")
    queue = write_queue(tmp_path, cell(0.5))
    assert main(tmp_path, str(queue), "--dry-run") == 2
    captured = capsys.readouterr()
    assert "done: seeds" not in captured.out and "0 runs done" in captured.out
    assert captured.out.splitlines()[0].startswith("1 runs to go")  # the summary first, then the queue
    errors = [line for line in captured.err.splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "task.alpha: 0.1 → 0.5" in errors[0] and "--replace" in errors[0]
    stale: list = []
    jobs, _ = campaign.plan({"chunk": 2, "cells": [cell(0.5)]}, tmp_path / "results", stale=stale)
    assert states(jobs) == ["to run"]  # not "done: seeds 0-1"
    assert [(folder.name, changes) for folder, _, changes in stale] == [("seeds0-1", ["task.alpha: 0.1 → 0.5"])]
    # the same configuration counts as done
    jobs, _ = campaign.plan({"chunk": 2, "cells": [cell(0.1)]}, tmp_path / "results")
    assert states(jobs) == ["done: seeds 0-1"]


def test_a_stale_export_of_a_cell_not_selected_blocks_neither_a_priority_nor_a_cell_selection(tmp_path, capsys):
    """A run of another alpha exported under cell P1 is refused when P1 is selected, and ignored when only P2 is,
    whether by priority or as ``<preset>/<cell>``. Bug caught: harness/campaign/planning.py:_listings — ``if stale is
    not None and selected(cell, only):`` → ``if stale is not None:`` (P1's stale run stops a campaign of P2)."""
    first, second = cell(0.5), {**cell(alpha=0.3), "priority": "P2", "name": "tpo_alpha0.3"}
    fake_run(tmp_path / "results" / "runs" / PRESET / "tpo" / "seeds0-1", cell(0.1)["overrides"], 2, layout="results")
    queue = write_queue(tmp_path, first, second)
    assert main(tmp_path, str(queue), "--dry-run", "--only", "P1") == 2
    for only in ("P2", f"{PRESET}/tpo_alpha0.3"):
        assert main(tmp_path, str(queue), "--dry-run", "--only", only) == 0
    out = capsys.readouterr().out
    assert f"{PRESET} tpo_alpha0.3" in " ".join(out.split())


def test_a_finished_work_run_of_another_alpha_is_not_exported_and_replace_moves_it_aside(tmp_path, capsys):
    """A finished work-folder run of another alpha is refused, never exported; --replace moves it aside, not deleted.
    Bug caught: harness/campaign/records.py:finished — `status in DONE and not work_mismatch(job, work)` →
    `status in DONE`."""
    work, results = tmp_path / "work", tmp_path / "results"
    fake_run(work / PRESET / "tpo" / "seeds0-1", cell(0.1)["overrides"], 2)
    new = job(cell(0.5))
    assert campaign.finished(new, work) is None
    assert campaign.run([new], 1, work, results, hours=0) == 1  # refused, counted as failed
    assert "REFUSED fig3_tabular_multi/tpo/seeds0-1" in capsys.readouterr().out
    assert not (results / "runs").exists()  # nothing exported
    queue = write_queue(tmp_path, cell(0.5))
    assert main(tmp_path, str(queue), "--hours", "0") == 2  # refused before anything runs
    assert "task.alpha: 0.1 → 0.5" in capsys.readouterr().err and not (results / "runs").exists()
    assert main(tmp_path, str(queue), "--hours", "0", "--replace") == 0
    out = capsys.readouterr().out
    assert "replaced" in out and "task.alpha: 0.1 → 0.5" in out
    assert not (work / PRESET / "tpo" / "seeds0-1").exists() and not (results / "runs").exists()
    moved = list((work / ".replaced").glob(f"*/work/{PRESET}/tpo/seeds0-1/summary.json"))
    assert len(moved) == 1  # aside, not deleted


def test_a_longer_cell_neither_reexports_the_shorter_run_nor_skips_the_longer_one(tmp_path, capsys):
    """steps 40 → 80 with the 40-step run finished in the work folder and exported: refused naming task.steps
    (the old code re-exported the 40-step run at every invocation and never ran the 80-step one).
    Bug caught: harness/campaign/exports.py:CellRuns.count — `if record["steps"] >= steps:` → `if True:` (the 40-step
    run counts as done for the 80-step cell)."""
    work, results = tmp_path / "work", tmp_path / "results"
    fake_run(work / PRESET / "tpo" / "seeds0-1", cell(steps=40)["overrides"], 2)
    campaign.export(job(cell(steps=40)), work, results)
    exported = results / "runs" / PRESET / "tpo" / "seeds0-1" / "summary.json"
    before = exported.read_bytes()
    longer = job(cell(steps=80))
    assert campaign.finished(longer, work) is None
    stale: list = []
    jobs, _ = campaign.plan({"chunk": 2, "cells": [cell(steps=80)]}, results, stale=stale)
    assert states(jobs) == ["to run"] and stale == []  # a shorter exported run: run again
    assert campaign.work_mismatch(longer, work) == ["task.steps: 40 → 80"]
    queue = write_queue(tmp_path, cell(steps=80))
    assert main(tmp_path, str(queue), "--hours", "0") == 2
    assert "task.steps: 40 → 80" in capsys.readouterr().err and exported.read_bytes() == before
    # a cell made shorter: the longer exported run is of another configuration, not done
    jobs, _ = campaign.plan({"chunk": 2, "cells": [cell(steps=20)]}, results, stale=stale)
    assert states(jobs) == ["to run"]
    assert [changes for _, _, changes in stale] == [["task.steps: 40 → 20"]]


def test_a_longer_cell_runs_again_end_to_end(tmp_path):
    """Real runs: 4 steps, then the queue's cell at 8: refused, then --replace runs the 8-step run and exports it;
    ``--work``/``--results`` relative to the caller's folder, as the runs see them too. Bug caught:
    harness/campaign/cli.py:main — the ``.resolve()`` of ``args.work`` dropped (the runs, started in the repository
    root, write elsewhere: FAILED, no summary). Also: harness/campaign/records.py:replace_stale —
    `shutil.move(str(folder), str(destination))` → `shutil.copytree(...)` (the 4-step run stays in the work folder:
    the replacing campaign is refused again)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}

    def campaign_cli(steps: int, *extra: str) -> subprocess.CompletedProcess:
        queue = write_queue(tmp_path, dict(cell(steps=steps, seeds=1), overrides=[
            "algorithm=tpo", f"task.steps={steps}", "task.contexts=4", "task.arms=3"]))
        return subprocess.run([sys.executable, "-m", "harness.campaign", str(queue), "--jobs", "1", "--work",
                               "work", "--results", "results", *extra],  # relative to the caller's folder
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)

    summary = tmp_path / "results" / "runs" / PRESET / "tpo" / "seeds0" / "summary.json"
    first = campaign_cli(4)
    assert first.returncode == 0, first.stdout + first.stderr
    assert json.loads(summary.read_text())["steps"] == 4
    refused = campaign_cli(8)
    assert refused.returncode == 2 and "task.steps: 4 → 8" in refused.stderr, refused.stdout + refused.stderr
    assert json.loads(summary.read_text())["steps"] == 4
    replaced = campaign_cli(8, "--replace")
    assert replaced.returncode == 0, replaced.stdout + replaced.stderr
    assert json.loads(summary.read_text())["steps"] == 8
    assert "exported" not in replaced.stdout  # the 4-step run was not exported again
    again = campaign_cli(8)
    assert again.returncode == 0 and "0 runs to go" in again.stdout


# 2. a report that fails ---------------------------------------------------------------------------------------------

def test_a_failed_report_is_named_and_the_campaign_exits_non_zero(tmp_path, monkeypatch, capsys):
    """A report that fails is named in one line with its last error line, and the campaign's exit code counts it.
    Bug caught: harness/campaign/runner.py:run — after exporting a run finished earlier,
    `failed += len(report(job.preset, results) or ())` → `report(job.preset, results)`."""
    real_run = subprocess.run

    def failing(command, **kwargs):
        if command[1:3] == ["-m", "harness.report"]:
            return subprocess.CompletedProcess(command, 1, stdout=None,
                                               stderr="Traceback (most recent call last):\nEOFError: truncated\n")
        return real_run(command, **kwargs)

    monkeypatch.setattr(campaign_reports.subprocess, "run", failing)
    assert campaign.report(PRESET, tmp_path / "results") == [PRESET]
    line = capsys.readouterr().out.strip()
    assert "REPORT FAILED fig3_tabular_multi" in line and "EOFError: truncated" in line and "\n" not in line
    work = tmp_path / "work"
    fake_run(work / PRESET / "tpo" / "seeds0-1", cell()["overrides"], 2)  # finished, to be exported
    queue = write_queue(tmp_path, cell())
    assert main(tmp_path, str(queue), "--hours", "0") == 1
    out = capsys.readouterr().out
    assert "exported fig3_tabular_multi/tpo/seeds0-1" in out and "REPORT FAILED fig3_tabular_multi" in out


# 3. export temporaries left by a kill ------------------------------------------------------------------------------

def test_export_temporaries_left_by_a_kill_are_removed_at_start_and_nothing_else(tmp_path, capsys):
    """At its start a campaign removes the export temporaries a kill left (EXPORT_TMP names only), nothing else.
    Bug caught: harness/campaign/exports.py:EXPORT_TMP — the exact `^seeds...tmp$` pattern → `re.compile(r".*[.]tmp$")`
    (notes.tmp goes)."""
    cell_dir = tmp_path / "results" / "runs" / PRESET / "tpo"
    leftovers = [cell_dir / name for name in ("seeds0-1.tmp", "seeds2.123-abcdef12.tmp", "seeds4-5.9-0a1b2c3d.old.tmp")]
    kept = [cell_dir / "notes.tmp", cell_dir / "seeds6-7", tmp_path / "results" / "runs" / PRESET / "seeds0.tmp"]
    for folder in leftovers + kept:
        folder.mkdir(parents=True)
        (folder / "summary.json").write_text('{"status": "failed"}')
    fake_run(tmp_path / "work" / PRESET / "tpo" / "seeds0-1.tmp", cell()["overrides"], 2)  # the harness's to clean
    queue = write_queue(tmp_path, cell(seeds=1))
    main(tmp_path, str(queue), "--hours", "0")
    assert [folder for folder in leftovers if folder.exists()] == []
    assert all(folder.exists() for folder in kept) and (tmp_path / "work" / PRESET / "tpo" / "seeds0-1.tmp").exists()
    assert capsys.readouterr().out.count("an export cut short") == 3


# 4. two campaigns ----------------------------------------------------------------------------------------------------

def cell_lock(folder: Path, preset: str = PRESET, name: str = "tpo") -> Path:
    """The lock a campaign holds on one of its cells in ``folder`` (its --work or --results)."""
    return folder / ".campaign-locks" / preset / f"{name}.lock"


def test_a_second_campaign_on_the_same_cells_refuses_and_a_dead_ones_lock_is_taken_over(tmp_path):
    """A live campaign's lock on a cell, in either folder, refuses a second campaign of that cell in one line naming
    it; a dead one's lock is taken over. Bug caught: harness/campaign/locks.py:campaign_lock — ``for folder in (work,
    results)`` → ``for folder in (work,)``."""
    queue = write_queue(tmp_path, cell(seeds=1))
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for folder in (tmp_path / "work", tmp_path / "results"):
            lock = cell_lock(folder)
            lock.parent.mkdir(parents=True, exist_ok=True)
            lock.write_text(f"{holder.pid} {os.uname().nodename}\n")
            with pytest.raises(SystemExit, match=f"^Error: another campaign \\(process {holder.pid} on .*\\) runs "
                                                 f"{PRESET}/tpo in {folder};"):
                campaign.main([str(queue), "--hours", "0", "--work", str(tmp_path / "work"), "--results",
                               str(tmp_path / "results")])
            assert lock.exists()
            lock.unlink()
    finally:
        holder.kill()
        holder.wait()
    cell_lock(tmp_path / "work").write_text(f"{holder.pid} {os.uname().nodename}\n")  # now dead
    assert main(tmp_path, str(queue), "--hours", "0") == 0
    assert not cell_lock(tmp_path / "work").exists()  # taken over, then released
    assert not cell_lock(tmp_path / "results").exists()


@pytest.mark.parametrize("only", ["P2", f"{PRESET}/tpo_alpha0.3"])
def test_campaigns_of_other_cells_share_the_folders_and_each_cleans_only_its_own_cells(tmp_path, capsys, only):
    """While a live campaign holds cell P1's locks in both folders, a campaign of P2 (selected by its priority or as
    ``<preset>/<cell>``) in the same folders exports its finished run and regenerates its report; it removes the
    export temporaries of its own cell, not of P1's (whose export may be under way), and leaves P1's locks alone.
    Without --only the queue's P1 cell is refused. Bug caught: harness/campaign/cli.py:_locked_campaign —
    ``queue_cells(queue, only)`` → ``queue_cells(queue)`` (a whole-queue lock refuses P2),
    harness/campaign/exports.py:clean_exports globbing every cell (P1's temporary removed), or
    harness/campaign/queue.py:selected without its ``<preset>/<cell>`` clause (nothing exported)."""
    first, second = cell(), {**cell(alpha=0.3), "priority": "P2", "name": "tpo_alpha0.3"}
    queue = write_queue(tmp_path, first, second)
    work, results = tmp_path / "work", tmp_path / "results"
    held = [cell_lock(work), cell_lock(results)]
    for lock in held:
        lock.parent.mkdir(parents=True, exist_ok=True)
        lock.write_text(f"{os.getpid()} {os.uname().nodename}\n")  # this process: alive
    theirs = results / "runs" / PRESET / "tpo" / "seeds0-1.77-0a1b2c3d.tmp"
    ours = results / "runs" / PRESET / "tpo_alpha0.3" / "seeds0-1.tmp"
    for folder in (theirs, ours):
        folder.mkdir(parents=True)
    fake_run(work / PRESET / "tpo_alpha0.3" / "seeds0-1", second["overrides"], 2)  # finished, to be exported
    with pytest.raises(SystemExit, match=f"runs {PRESET}/tpo in "):
        campaign.main([str(queue), "--hours", "0", "--work", str(work), "--results", str(results)])
    assert main(tmp_path, str(queue), "--only", only, "--hours", "0") == 0
    out = capsys.readouterr().out
    assert f"exported {PRESET}/tpo_alpha0.3/seeds0-1" in out
    assert (results / "runs" / PRESET / "tpo_alpha0.3" / "seeds0-1" / "summary.json").exists()
    assert (results / PRESET / "README.md").exists()  # the report, written while P1's campaign holds its cell
    assert theirs.exists() and not ours.exists()
    assert all(lock.read_text().split()[0] == str(os.getpid()) for lock in held)
    assert not cell_lock(work, name="tpo_alpha0.3").exists() and not cell_lock(results, name="tpo_alpha0.3").exists()


def test_a_report_is_written_holding_the_results_lock_that_campaigns_sharing_results_wait_on(tmp_path,
                                                                                              monkeypatch):
    """Campaigns of different cells share ``results``, and one's new runs may regenerate a report folder another's
    regenerates too (shared runs): the report subprocess runs while ``results.lock`` is held, so a second taker
    would wait; it is released after. Bug caught: harness/campaign/reports.py:report — its
    ``with results_lock(results):`` dropped."""
    import fcntl

    real_run, held = subprocess.run, []
    lock = tmp_path / "results" / campaign.LOCKS / "results.lock"

    def check_lock(command, **kwargs):
        if command[1:3] == ["-m", "harness.report"]:
            with open(lock) as other:
                try:
                    fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # another open file: conflicts while held
                    held.append(False)
                except BlockingIOError:
                    held.append(True)
            return subprocess.CompletedProcess(command, 0, stdout=None, stderr="")
        return real_run(command, **kwargs)

    monkeypatch.setattr(campaign_reports.subprocess, "run", check_lock)
    lock.parent.mkdir(parents=True)
    lock.touch()
    assert campaign.report(PRESET, tmp_path / "results") == []
    assert held == [True]
    with open(lock) as other:  # released after the report
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)


def test_the_results_lock_waits_for_another_process_saying_so_and_nests_in_one_process(tmp_path, monkeypatch):
    """A child process holds the results lock; taking it here says once which process it waits for (the holder's
    pid, written in the lock file), then gets it when the child lets go. Taken again inside, in the same process,
    it does not wait on itself (an export inside a report's hold would hang otherwise). Bug caught:
    harness/campaign/locks.py:results_lock — the ``_HELD`` re-entry branch dropped (the nested take blocks: the thread
    is still alive after 20 s)."""
    import threading

    child = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from harness import campaign\n"
         f"with campaign.results_lock(Path({str(tmp_path)!r})):\n    print('held', flush=True); sys.stdin.read()"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    said = []

    def noted(*args, **kwargs):  # the waiting line: record it, then let the child go
        said.append(" ".join(map(str, args)))
        child.stdin.close()

    try:
        assert child.stdout.readline().strip() == "held"
        monkeypatch.setattr(campaign_locks, "print", noted, raising=False)
        done = threading.Event()

        def take_twice():
            with campaign.results_lock(tmp_path):
                with campaign.results_lock(tmp_path):
                    done.set()

        worker = threading.Thread(target=take_twice, daemon=True)
        worker.start()
        worker.join(20)
        assert done.is_set() and not worker.is_alive()
    finally:
        child.kill()
        child.wait()
    assert len(said) == 1 and f"waiting for process {child.pid} " in said[0], said


def test_a_live_campaign_of_an_earlier_version_holding_a_whole_folder_refuses(tmp_path):
    """Campaigns before per-cell locks held ``<folder>/.campaign.lock`` and knew nothing of cells: while one lives,
    a campaign refuses in one line rather than clean or export beside it; a dead one's lock is ignored. Bug caught:
    harness/campaign/locks.py:_refuse_old_lock — its ``OLD_LOCK`` check dropped (the campaign runs and exits 0)."""
    queue = write_queue(tmp_path, cell(seeds=1))
    (tmp_path / "results").mkdir()
    old = tmp_path / "results" / campaign.OLD_LOCK
    old.write_text(f"{os.getpid()} {os.uname().nodename}\n")
    with pytest.raises(SystemExit, match="^Error: a campaign of an earlier version \\(process "):
        campaign.main([str(queue), "--hours", "0", "--work", str(tmp_path / "work"), "--results",
                       str(tmp_path / "results")])
    holder = subprocess.Popen([sys.executable, "-c", "pass"])
    holder.wait()
    old.write_text(f"{holder.pid} {os.uname().nodename}\n")  # its process is gone
    assert main(tmp_path, str(queue), "--hours", "0") == 0


def test_a_scan_of_results_passes_over_a_folder_renamed_away_while_it_walks(tmp_path, monkeypatch):
    """Another campaign's export renames its temporary folder into place while this one's plan (``exported``) or a
    report (``find_run_dirs``) walks the cell: listed, then gone. Simulated by a scandir that finds the folder gone.
    Both scans go on with the runs that are there. Bug caught: ``summary_files`` written with ``Path.rglob`` (it
    raises FileNotFoundError)."""
    from harness.report.load import find_run_dirs

    cell_dir = tmp_path / "results" / "runs" / PRESET / "tpo"
    fake_run(cell_dir / "seeds0-1", cell()["overrides"], 2, layout="results")
    fake_run(cell_dir / "seeds2-3.77-0a1b2c3d.tmp", cell()["overrides"], 2, offset=2, layout="results")
    gone, real_scandir = cell_dir / "seeds2-3.77-0a1b2c3d.tmp", os.scandir

    def scandir(path="."):
        if Path(path) == gone:
            raise FileNotFoundError(2, "No such file or directory", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    assert campaign.exported(cell_dir, 40).seeds == {0, 1}
    assert find_run_dirs([cell_dir]) == [cell_dir / "seeds0-1"]


def _export_many(work: str, results: str, count: int) -> None:
    queue_cell = cell()
    exported = campaign.Job("P1", PRESET, "tpo", tuple(queue_cell["overrides"]), 0, 2, 40, 0.001)
    for _ in range(count):
        campaign.export(exported, Path(work), Path(results))


def test_exports_of_the_same_run_at_the_same_time_never_fail_nor_leave_a_partial_folder(tmp_path):
    """Three processes exporting the same run at once all succeed and leave exactly one complete folder.
    Bug caught: harness/campaign/exports.py:_export — the per-call temporary `f"{target.name}.{stamp}{suffix}.tmp"` →
    `f"{target.name}{suffix}.tmp"` (concurrent exporters collide on one temporary folder)."""
    work, results = tmp_path / "work", tmp_path / "results"
    fake_run(work / PRESET / "tpo" / "seeds0-1", cell()["overrides"], 2)
    context = multiprocessing.get_context("fork")
    exporters = [context.Process(target=_export_many, args=(str(work), str(results), 30)) for _ in range(3)]
    for process in exporters:
        process.start()
    for process in exporters:
        process.join(120)
    assert [process.exitcode for process in exporters] == [0, 0, 0]
    target = results / "runs" / PRESET / "tpo"
    assert sorted(p.name for p in target.iterdir()) == ["seeds0-1"]  # no temporary left
    assert sorted(p.name for p in (target / "seeds0-1").iterdir()) == [
        "config.yaml", "identity.json", "metrics.csv.gz", "summary.json"]


# 5. --only and overrides --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("only", ["p1", "P9", "P1,P2", f"{PRESET}/nope", "tpo"])
def test_an_unknown_only_priority_is_refused_with_the_valid_ones(tmp_path, only):
    """An --only name that is neither a priority of the queue (case-sensitive) nor one of its cells as
    ``<preset>/<cell>`` is refused, listing the valid priorities. Bug caught: harness/campaign/queue.py:check_only —
    `{item.strip() for ...}` → `{item.strip().upper() for ...}` (p1 accepted as P1)."""
    queue = write_queue(tmp_path, cell())
    with pytest.raises(SystemExit, match=r"^Error: --only .* is neither a priority nor a cell \(<preset>/<cell>\) of "
                                         r"queue\.yaml; valid priorities \(case-sensitive\): P1$"):
        campaign.main([str(queue), "--dry-run", "--only", only, "--results", str(tmp_path / "results")])


def test_an_override_that_does_not_compose_is_refused_naming_the_cell(tmp_path):
    """A cell whose overrides do not compose is refused before anything runs, in one line naming the cell and the key.
    Bug caught: harness/campaign/text.py:one_line — the joined lines → `text = str(error) or type(error).__name__`
    (Hydra's multi-line message)."""
    queue = write_queue(tmp_path, cell(), dict(cell(), name="typo", overrides=["algorithm=tpo", "task.alhpa=0.5"]))
    with pytest.raises(SystemExit) as error:
        campaign.main([str(queue), "--dry-run", "--results", str(tmp_path / "results")])
    message = str(error.value)
    assert message.startswith("Error: queue.yaml: cells[1] (fig3_tabular_multi/typo) does not compose: ")
    assert "task.alhpa" in message and "\n" not in message


# 6. damaged files under results/runs ------------------------------------------------------------------------------

def test_damaged_result_files_are_skipped_with_a_warning_naming_them(tmp_path, capsys):
    """Damaged summary.json and metrics.csv.gz files under results/runs are skipped, each named in one warning line.
    Bug caught: harness/campaign/exports.py:_read_metrics_problem — `except (OSError, EOFError, ValueError)` →
    `except (OSError, ValueError)` (a cut gzip's EOFError stops the plan)."""
    runs = tmp_path / "results" / "runs"
    empty = runs / PRESET / "tpo" / "seeds0-1"
    fake_run(empty, cell()["overrides"], 2, layout="results")
    (empty / "summary.json").write_text("")
    truncated = runs / PRESET / "tpo" / "seeds2-3"
    fake_run(truncated, cell()["overrides"], 2, offset=2, layout="results")
    packed = (truncated / "metrics.csv.gz").read_bytes()
    (truncated / "metrics.csv.gz").write_bytes(packed[: len(packed) // 2])
    fine = runs / PRESET / "tpo" / "seeds4-5"
    fake_run(fine, cell()["overrides"], 2, offset=4, layout="results")
    elsewhere = runs / "another_preset" / "x" / "seeds0"  # any cell's, read by the cost calibration
    elsewhere.mkdir(parents=True)
    (elsewhere / "summary.json").write_text('{"status": "comp')
    jobs, _ = campaign.plan({"chunk": 2, "cells": [cell(seeds=6)]}, tmp_path / "results")
    assert [(job.name, state.split(" (")[0]) for job, state in jobs] == [
        ("seeds4-5", "done: seeds 4-5"), ("seeds0-1", "to run"), ("seeds2-3", "to run")]
    warnings = capsys.readouterr().err.splitlines()
    assert any(f"{empty / 'summary.json'}: unreadable (JSONDecodeError" in line for line in warnings), warnings
    assert any(f"{truncated / 'metrics.csv.gz'}: unreadable (EOFError" in line for line in warnings), warnings
    assert any(f"{elsewhere / 'summary.json'}: unreadable" in line for line in warnings), warnings
    assert all(line.startswith("warning: skipped ") for line in warnings)


def test_a_damaged_record_of_a_runs_configuration_is_skipped_with_a_warning_not_called_another_configuration(
        tmp_path, capsys):
    """An exported run whose identity.json is cut short (or, a run older than it, whose config.yaml is cut short
    and still parses, as fewer keys) is a damaged file, named in one warning and not counted; it is no run of
    another configuration (which blocks the whole queue until --replace). Bug caught:
    harness/campaign/exports.py:_damaged_export — the ``damaged_record`` check dropped."""
    runs = tmp_path / "results" / "runs" / PRESET / "tpo"
    cut = runs / "seeds0-1"
    fake_run(cut, cell()["overrides"], 2, layout="results")
    (cut / "identity.json").write_text((cut / "identity.json").read_text()[:50])
    old = runs / "seeds2-3"
    fake_run(old, cell()["overrides"], 2, offset=2, layout="results")
    (old / "identity.json").unlink()
    (old / "config.yaml").write_text("".join((old / "config.yaml").read_text().splitlines(True)[:2]))  # parses
    queue = write_queue(tmp_path, cell(seeds=4))
    assert main(tmp_path, str(queue), "--dry-run") == 0
    captured = capsys.readouterr()
    warnings = captured.err.splitlines()
    assert any(f"{cut / 'identity.json'}: unreadable (JSONDecodeError)" in line for line in warnings), warnings
    assert any(f"{old / 'config.yaml'}: not a whole configuration" in line for line in warnings), warnings
    assert "another configuration" not in captured.err and "2 runs to go" in captured.out


def test_a_value_the_run_would_refuse_is_refused_before_anything_runs_dry_run_too(tmp_path, capsys):
    """A cell whose overrides compose but hold a value its task refuses (``task.alpha=abc``) is named in one line
    before any run starts, by --dry-run too; nothing is created. Bug caught: harness/campaign/cli.py:_refused_cells —
    the ``cell_refusal`` check dropped (every job of the cell starts and fails, leaving empty work folders)."""
    queue = write_queue(tmp_path, dict(cell(), overrides=["algorithm=tpo", "task.alpha=abc", "task.steps=4"]))
    for extra in (("--dry-run",), ()):
        assert main(tmp_path, str(queue), *extra) == 2
        error = capsys.readouterr().err.strip()
        assert error.startswith(f"Error: cell {PRESET}/tpo would be refused at its start: task.alpha='abc' is not "
                                "valid") and "\n" not in error, error
    assert not (tmp_path / "work" / PRESET).exists()


def test_a_report_that_failed_is_regenerated_by_the_next_campaign(tmp_path, monkeypatch, capsys):
    """A failed report leaves its folder listed as out of date; the next campaign regenerates it before anything
    else, and a success clears the list. Bug caught: harness/campaign/cli.py:_locked_campaign — the
    ``retry_stale_reports`` call dropped (the next campaign says 0 runs to go, exits 0, and the folder stays out of
    date)."""
    real_run, calls = subprocess.run, []

    def report_fails_once(command, **kwargs):
        if command[1:3] == ["-m", "harness.report"]:
            calls.append(command)
            return subprocess.CompletedProcess(command, 1 if len(calls) == 1 else 0, stdout=None,
                                               stderr="OSError: [Errno 28] No space left on device\n")
        return real_run(command, **kwargs)

    monkeypatch.setattr(campaign_reports.subprocess, "run", report_fails_once)
    results = tmp_path / "results"
    assert campaign.report(PRESET, results) == [PRESET]
    assert json.loads((results / campaign.STALE_REPORTS).read_text()) == [PRESET]
    queue = write_queue(tmp_path, cell(seeds=2))
    fake_run(results / "runs" / PRESET / "tpo" / "seeds0-1", cell()["overrides"], 2, layout="results")
    assert main(tmp_path, str(queue)) == 0
    assert f"report {PRESET} again: it failed before" in capsys.readouterr().out and len(calls) == 2
    assert not (results / campaign.STALE_REPORTS).exists()


# 7. one rule for a finished run ------------------------------------------------------------------------------------

@pytest.mark.parametrize("damage", ["rows cut", "metrics.csv missing", "config cut"])
def test_a_finished_run_the_report_would_reject_is_moved_aside_and_run_again(tmp_path, damage, capsys):
    """A run whose summary says completed but whose metrics.csv stops at step 9 of 39, is missing, or whose config
    is cut short: never exported or counted done (the report calls such a run damaged or skips it); --dry-run says
    so, and the campaign moves it aside and runs its seeds again to the full run. Bugs caught: campaign.finished
    trusting summary.json alone (exported, "0 runs to go"); export raising FileNotFoundError before anything else."""
    queue_cell = cell()
    queue = write_queue(tmp_path, queue_cell)
    folder = tmp_path / "work" / PRESET / "tpo" / "seeds0-1"
    command = job(queue_cell).command(tmp_path / "work")
    subprocess.run(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True, capture_output=True)
    full = (folder / "metrics.csv").read_text()
    if damage == "rows cut":
        (folder / "metrics.csv").write_text("".join(full.splitlines(keepends=True)[:21]))  # steps 0-9 of 0-39
    elif damage == "metrics.csv missing":
        (folder / "metrics.csv").unlink()
    else:
        text = (folder / ".hydra" / "config.yaml").read_text()
        (folder / ".hydra" / "config.yaml").write_text(text[:300])
    assert main(tmp_path, str(queue), "--dry-run") == 0
    assert "damaged" in capsys.readouterr().out
    assert main(tmp_path, str(queue)) == 0
    out = capsys.readouterr().out
    assert f"DAMAGED {PRESET}/tpo/seeds0-1" in out and "moved aside" in out
    exported = tmp_path / "results" / "runs" / PRESET / "tpo" / "seeds0-1"
    assert gzip.decompress((exported / "metrics.csv.gz").read_bytes()).decode() == full
    assert [p.name.split(".damaged-")[0] for p in folder.parent.glob("seeds0-1.damaged-*")] == ["seeds0-1"]


def test_an_exported_run_cut_short_is_not_counted_done(tmp_path, capsys):
    """An exported run whose metrics.csv.gz lacks a seed's rows: its seeds are to run again, with one warning. Bug
    caught: exported counting the summary's seeds without reading the rows."""
    queue_cell = cell()
    exported = tmp_path / "results" / "runs" / PRESET / "tpo" / "seeds0-1"
    fake_run(exported, queue_cell["overrides"], 2, layout="results")
    assert campaign.exported(exported.parent, 40, campaign.cell_identity(PRESET, tuple(queue_cell["overrides"]))
                             ).seeds == {0, 1}
    rows = gzip.decompress((exported / "metrics.csv.gz").read_bytes()).decode().splitlines(keepends=True)
    (exported / "metrics.csv.gz").write_bytes(gzip.compress("".join(r for r in rows if not r.startswith(("0,1",
                                                                                                     "1,1", "2,1")))
                                                            .encode()))
    found = campaign.exported(exported.parent, 40, campaign.cell_identity(PRESET, tuple(queue_cell["overrides"])))
    assert found.seeds == set()
    assert "no rows for seed(s) 1" in capsys.readouterr().err


def test_a_launch_into_a_damaged_finished_run_is_refused_in_one_line(tmp_path):
    """``python -m harness`` applies the same rule: a completed run whose rows stop short is not "already finished,
    nothing to do" but refused, naming the problem. Bug caught: rundir.plan_run trusting summary.json alone."""
    command = job(cell()).command(tmp_path / "work")
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run(command, cwd=ROOT, env=environment, check=True, capture_output=True)
    metrics = tmp_path / "work" / PRESET / "tpo" / "seeds0-1" / "metrics.csv"
    metrics.write_text("".join(metrics.read_text().splitlines(keepends=True)[:21]))
    again = subprocess.run(command, cwd=ROOT, env=environment, capture_output=True, text=True)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    (line,) = [line for line in again.stderr.splitlines() if line.startswith("Error:")]
    assert "holds a completed run that is damaged" in line and "rows stop at step 9" in line
