"""The report's inputs and outputs when they are not what they should be: duplicated or seedless W&B runs, runs whose
rows contradict their summary, damaged files, a seed in two run folders, overlapping paths, leftover partial exports,
nonsense resample counts and seeds, an --out folder holding files the report did not write, a disk that fills up and
a report killed while moving its files in."""

from __future__ import annotations

import errno
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from harness.rundir import outputs
from harness.report import synthetic
from harness.report.__main__ import main
from harness.report.build import GENERATED, MARKER, claim_out, listed_files, results_table, write_report
from harness.report.load import load_runs
from harness.report.tables import Report

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "inputs_check"  # no preset of that name: budgets come from the test
STEPS = np.arange(0, 40)


def _config(seeds: int = 2, offset: int = 0, **params) -> dict:
    return synthetic.make_config(EXPERIMENT, "token_reversal", "tpo", seeds, 40, seed_offset=offset, **params)


def _run(folder: Path, seeds: int = 2, offset: int = 0, value: float = 0.5, gz: bool = False) -> Path:
    synthetic.write_run(folder, _config(seeds, offset), {"error": np.full((seeds, len(STEPS)), value)}, steps=STEPS)
    if gz:
        (folder / "metrics.csv.gz").write_bytes(gzip.compress((folder / "metrics.csv").read_bytes()))
        (folder / "metrics.csv").unlink()
    return folder


def _one_line_warnings(text: str) -> list[str]:
    assert "Traceback" not in text
    return [line for line in text.splitlines() if line.startswith("warning: ")]


# 1. W&B: duplicate seeds are a conflict, seedless runs are skipped ------------------------------------------------

class FakeRun:
    def __init__(self, config: dict, error: float, name: str, steps=STEPS):
        self.config, self.state, self.summary = config, "finished", {"status": "completed"}
        self.name, self.id = name, f"id-{name}"
        self.group = f"{EXPERIMENT}/token_reversal/tpo"
        self._rows = [{"_step": int(s), "error": error} for s in steps]

    def scan_history(self):
        return iter(self._rows)


class FakeApi:
    def __init__(self, runs):
        self._runs = runs

    def runs(self, path, filters=None):
        return list(self._runs)


def _cell(runs, curves, seeds: int = 2):
    report = Report(runs, curves, resamples=100)
    resolved = report.resolve(EXPERIMENT, {"algorithm.name": "tpo"}, (seeds, 40, "paper"))
    return report, resolved


@pytest.mark.parametrize("order", [1, -1])
def test_two_wandb_runs_of_one_seed_are_a_conflict_whatever_the_api_order(order, capsys):
    """Two W&B runs of one seed make the cell a conflict, never a merge or a pick, whichever the API lists first.
    Bug caught: harness/report/load.py:load_wandb — `for k, part in enumerate(copies):` →
    `for k, part in enumerate(copies[:1]):` (the second copy dropped)."""
    config = {**_config(), "trainer": {"steps": 40}}
    fake = [FakeRun({**config, "seed": 0}, 0.9, "first"), FakeRun({**config, "seed": 0}, 0.1, "again"),
            FakeRun({**config, "seed": 1}, 0.5, "other")][::order]
    runs, curves = load_runs(wandb=["me/tpo"], wandb_api=FakeApi(fake))
    _, resolved = _cell(runs, curves)
    assert resolved.status == "conflict" and not resolved.usable  # no number: neither 0.1 nor 0.9
    assert resolved.flags[0].startswith("conflict: seed 0 is in more than one run")  # as for run folders
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert "seed 0 logged by 2 runs" in line and "first (id-first)" in line and "again (id-again)" in line


def test_a_wandb_run_without_a_seed_is_skipped_with_a_warning_naming_it(capsys):
    """A W&B run whose config has no seed is skipped with one warning naming it.
    Bug caught: harness/report/load.py:load_wandb — `int(config["seed"])` → `int(config.get("seed", 0))`."""
    config = {**_config(), "trainer": {"steps": 40}}
    fake = [FakeRun({**config, "seed": 0}, 0.2, "good0"), FakeRun({**config, "seed": 1}, 0.2, "good1"),
            FakeRun(dict(config), 0.9, "seedless")]
    runs, curves = load_runs(wandb=["me/tpo"], wandb_api=FakeApi(fake))
    assert list(runs.seed_ids) == [(0, 1)] and set(curves.value) == {0.2}
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert "seedless (id-seedless)" in line and "skipped" in line


# 2. a run whose rows stop before its summary's last step is damaged, never complete ---------------------------------

def _cut_rows(folder: Path, last: int) -> None:
    """Keep the rows up to ``last`` (the summary still says completed at step 39)."""
    lines = (folder / "metrics.csv").read_text().splitlines(keepends=True)
    kept = [lines[0]] + [line for line in lines[1:] if int(line.split(",")[0]) <= last]
    (folder / "metrics.csv").write_text("".join(kept))


def test_rows_that_stop_short_of_the_summary_make_the_run_damaged_not_a_final_at_step_40(tmp_path, capsys):
    """A run whose rows stop before its summary's last step is damaged: ignored beside a full run, flagged alone.
    Bug caught: harness/report/load.py:load_local — `record["status"] = "damaged"` deleted (kept as completed)."""
    full = _run(tmp_path / "cell" / "seeds0-1", offset=0, value=0.1)
    short = _run(tmp_path / "cell" / "seeds2-3", offset=2, value=0.9)
    _cut_rows(short, 9)
    runs, curves = load_runs([tmp_path])
    capsys.readouterr()
    by_dir = runs.set_index("run_dir")
    damaged = by_dir.loc[str(short)]
    assert damaged.status == "damaged" and damaged.last_step == 9 and "step 9" in damaged.error
    assert by_dir.loc[str(full)].status == "completed"
    report, resolved = _cell(runs, curves, seeds=4)
    matrix = report.matrix(resolved, "error")
    assert resolved.status == "partial" and "ignored 1 shorter run(s)" in resolved.flags
    assert list(matrix.seeds) == [0, 1] and matrix.steps[-1] == 39  # the final is step 39's, not step 9's
    assert "damaged" in " ".join(results_table(report)["flags"])  # the per-run table flags it

    alone, _ = load_runs([short])  # with nothing longer, it is a partial cell, flagged as stopping at step 9
    out = capsys.readouterr().err
    (line,) = _one_line_warnings(out)
    assert str(short) in line and "rows stop at step 9" in line and "39" in line
    assert alone.status.tolist() == ["damaged"]


def test_a_seed_the_summary_lists_but_the_rows_lack_is_flagged(tmp_path, capsys):
    """A seed the summary lists but the rows lack makes the run damaged, with a warning naming the seed.
    Bug caught: harness/report/load.py:cross_check — `claimed - rows_seeds` → `rows_seeds - claimed`."""
    run = _run(tmp_path / "seeds0-2", seeds=3)
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    (run / "metrics.csv").write_text("".join(line for line in lines if not line.split(",")[1] == "2"))
    runs, _ = load_runs([tmp_path])
    assert runs.status.tolist() == ["damaged"] and runs.seed_ids.tolist() == [(0, 1)]
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert "no rows for seed(s) 2" in line


def test_an_error_outside_0_1_makes_the_run_damaged(tmp_path, capsys):
    """-inf in the error column (a fraction; NaN where a seed diverged): damaged, with a warning naming the value, not
    a complete cell averaging the other seeds. Bug caught: load.py:cross_check without its range check."""
    run = _run(tmp_path / "seeds0-2", seeds=3)
    lines = (run / "metrics.csv").read_text().splitlines(keepends=True)
    cells = lines[-1].rstrip("\n").split(",")
    lines[-1] = ",".join([*cells[:2], "-inf", *cells[3:]]) + "\n"
    (run / "metrics.csv").write_text("".join(lines))
    runs, _ = load_runs([tmp_path])
    assert runs.status.tolist() == ["damaged"]
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert lines[0].split(",")[2].strip() == "error" and "error holds -inf, outside [0, 1]" in line


def test_a_metrics_file_whose_last_line_is_cut_off_is_damaged_and_the_half_line_dropped(tmp_path, capsys):
    """A metrics.csv whose last line is cut off makes the run damaged, and the half line is dropped, not read.
    Bug caught: harness/report/load.py:_read_metrics — `io.BytesIO(data[:data.rfind(...) + 1])` →
    `io.BytesIO(data)` (the half line kept)."""
    run = _run(tmp_path / "seeds0-1")
    text = (run / "metrics.csv").read_text()
    (run / "metrics.csv").write_text(text[:-3])  # "39,1,0.5\n" → "39,1,0"
    runs, curves = load_runs([tmp_path])
    assert runs.status.tolist() == ["damaged"] and 0.0 not in set(curves.value)
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert "last line is cut off" in line


# 3. damaged files: one line naming the file, the run skipped --------------------------------------------------------

@pytest.mark.parametrize("damage", ["summary_cut", "summary_empty", "metrics_gz_cut", "config_bad", "metrics_text"])
def test_a_damaged_file_is_one_line_naming_it_and_its_run_is_skipped(damage, tmp_path, capsys):
    """Each kind of damaged file is one warning line naming it, and its run is skipped.
    Bug caught: harness/report/load.py:_read_metrics — `except (EOFError, OSError, ...)` → `except (OSError, ...)`
    (a cut gzip's EOFError escapes)."""
    good = _run(tmp_path / "cell" / "seeds0-1")
    bad = _run(tmp_path / "cell" / "seeds2-3", offset=2, gz=True)
    path = {"summary_cut": bad / "summary.json", "summary_empty": bad / "summary.json",
            "metrics_gz_cut": bad / "metrics.csv.gz", "config_bad": bad / ".hydra" / "config.yaml",
            "metrics_text": bad / "metrics.csv.gz"}[damage]
    data = path.read_bytes()
    path.write_bytes({"summary_cut": data[:len(data) // 2], "summary_empty": b"", "metrics_gz_cut": data[:-20],
                      "config_bad": b"task: {name: [unclosed\n", "metrics_text": b"\x00\x01 not gzip"}[damage])
    runs, _ = load_runs([tmp_path])
    assert runs.run_dir.tolist() == [str(good)]
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert line.startswith(f"warning: {path}: ") and f"run {bad} skipped" in line


def test_the_cli_reports_a_damaged_summary_without_a_traceback(tmp_path, capsys):
    """The report's CLI reports an invalid summary.json in one warning line, without a traceback.
    Bug caught: harness/report/load.py:load_local — `except Damaged as error:` → `except OSError as error:`."""
    _run(tmp_path / "runs" / "a")
    (tmp_path / "runs" / "b").mkdir()
    (tmp_path / "runs" / "b" / "summary.json").write_text('{"status": "comp')
    main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), "--tables", "none", "--figures", "none",
          "--resamples", "100"])
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert str(tmp_path / "runs" / "b" / "summary.json") in line and "not valid JSON" in line


def _exported(folder: Path, offset: int = 0) -> Path:
    """A run as results/runs holds it: summary.json, identity.json, config.yaml, metrics.csv.gz."""
    run = _run(folder, offset=offset, gz=True)
    (run / ".hydra" / "config.yaml").rename(run / "config.yaml")
    (run / ".hydra").rmdir()
    (run / "identity.json").write_text(json.dumps({"fingerprint": "0" * 16, "config": {}}) + "\n")
    return run


@pytest.mark.parametrize("damage", ["config_empty", "config_cut_mid_line", "config_cut_at_a_line", "summary_bare"])
def test_an_exported_run_with_an_empty_or_cut_config_or_a_bare_summary_is_skipped_naming_the_file(damage, tmp_path,
                                                                                                   capsys):
    """An exported run whose config.yaml is empty or cut short (mid-line, or at a line: both still valid YAML), or
    whose summary.json holds only a status, is one warning line naming the file, and its run is skipped, as for a
    damaged summary: read as it is, it was a configuration of its own (its line gone from the figure, listed as
    missing) or a row of 0 seeds.
    Bug caught: harness/report/load.py:_read_config_checked — `absent = [key for key in CONFIG_KEYS if key not in
    config]` → `absent = []` (a config cut at a line read as another configuration)."""
    good = _exported(tmp_path / "cell" / "seeds0-1")
    bad = _exported(tmp_path / "cell" / "seeds2-3", offset=2)
    path = bad / ("summary.json" if damage == "summary_bare" else "config.yaml")
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    path.write_text({"config_empty": "", "config_cut_mid_line": text[:-4],  # "  resume: false\n" → "  resume: fa"
                     "config_cut_at_a_line": "".join(lines[:len(lines) // 2]),
                     "summary_bare": '{"status": "completed"}'}[damage])
    runs, _ = load_runs([tmp_path])
    assert runs.run_dir.tolist() == [str(good)]
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert line.startswith(f"warning: {path}: ") and f"run {bad} skipped" in line


def test_a_seed_in_two_run_folders_is_a_conflict_named_in_the_caption_the_readme_and_runs_csv(tmp_path):
    """A run folder copied beside the original (a backup passed too) puts each of its seeds in two runs: its line is
    not drawn, and the figure's caption and the README say why, naming both folders and what to keep, with no
    command under "Missing" (another run would be one more copy); its two rows in runs.csv are flagged, each naming
    the other folder.
    Bug caught: harness/report/tables.py:missing_commands — `~part.status.isin(("ok", "conflict"))` →
    `part.status != "ok"` (the duplicated line's command listed as missing)."""
    original = _run(tmp_path / "runs" / "tpo" / "seeds0-1")
    config = synthetic.make_config(EXPERIMENT, "token_reversal", "grpo", 2, 40)
    synthetic.write_run(tmp_path / "runs" / "grpo", config, {"error": np.full((2, len(STEPS)), 0.3)}, steps=STEPS)
    backup = tmp_path / "backup" / "seeds0-1"
    shutil.copytree(original, backup)
    out = tmp_path / "out"
    main([str(tmp_path / "runs"), str(backup.parent), "--out", str(out), "--tables", "none", "--resamples", "100"])
    (caption,) = out.glob("*.caption.md")
    human = caption.read_text().split("## Provenance")[0]
    said = human[human.index("Not drawn, runs in conflict: "):]
    assert said.startswith("Not drawn, runs in conflict: TPO: seed 0 is in more than one run (the first two runs "
                           "listed); keep one copy of each seed (runs: ")
    assert f"`{original}`" in said and f"`{backup}`" in said and "GRPO" not in said
    readme = (out / "README.md").read_text()
    assert "## Missing" not in readme and json.loads((out / "missing.json").read_text()) == []
    conflicts = readme[readme.index("## Conflicts"):]
    assert "keep one copy of each seed" in conflicts and f"`{original}`" in conflicts and f"`{backup}`" in conflicts
    flags = pd.read_csv(out / "runs.csv").set_index("algorithm").loc["tpo", "flags"]
    assert sorted(flags) == sorted([f"conflict: seeds 0-1 also in {backup}", f"conflict: seeds 0-1 also in {original}"])


# 4. overlapping paths and partial exports ----------------------------------------------------------------------------

def test_overlapping_paths_read_each_run_once_and_partial_exports_are_ignored(tmp_path, capsys):
    """Overlapping paths read each run once, and a partial export (a *.tmp folder) is ignored with a warning.
    Bug caught: harness/report/load.py:find_run_dirs — `resolved = run_dir.resolve()` → `resolved = run_dir`."""
    _run(tmp_path / "runs" / "fig" / "tpo" / "seeds0-1")
    leftover = _run(tmp_path / "runs" / "fig" / "tpo" / "seeds2-3.tmp", offset=2)
    runs, curves = load_runs([tmp_path / "runs", tmp_path / "runs" / "fig" / "tpo",
                              tmp_path / "runs" / "fig" / ".." / "fig"])
    assert runs.run_dir.tolist() == [str(tmp_path / "runs" / "fig" / "tpo" / "seeds0-1")]
    assert set(curves.seed) == {0, 1}
    (line,) = _one_line_warnings(capsys.readouterr().err)
    assert str(leftover) in line and "partial export" in line


# 5. resamples and seeds ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag, value, message", [
    ("--resamples", "0", "'0' is not an integer >= 100 and <= 100000"),
    ("--resamples", "-5", "is not an integer >= 100"),
    ("--resamples", "99", "is not an integer >= 100"), ("--resamples", "10000000", "<= 100000"),
    ("--seed", "-1", "'-1' is not an integer >= 0"), ("--seed", "-20", "is not an integer >= 0")])
def test_too_few_resamples_or_a_negative_seed_are_refused_in_one_line(flag, value, message, tmp_path, capsys):
    """--resamples below 100, or --seed below 0 (numpy refuses it deep in the first bootstrap), exits 2 with one
    line, before an output folder is made. Bug caught: harness/report/__main__.py:main —
    ``--resamples``'s ``low=MIN_RESAMPLES`` → ``low=1`` (or no ``high``: ten million resamples ran out of memory);
    ``--seed``'s ``low=0`` dropped."""
    _run(tmp_path / "runs" / "a")
    with pytest.raises(SystemExit) as exit:
        main([str(tmp_path / "runs"), "--out", str(tmp_path / "out"), flag, value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"argument {flag}: " in err and message in err
    assert not (tmp_path / "out").exists()


# 6. --out: only a folder the report owns; hand-written files stay ---------------------------------------------------

def _write(runs: Path, out: Path, **kwargs) -> None:
    write_report([runs], out, **{"tables": "none", "figures": "none", "resamples": 20, **kwargs})


def test_out_refuses_a_folder_with_a_hand_written_readme_and_keeps_every_file(tmp_path):
    """--out refuses a folder with a hand-written README.md or files no report wrote, and changes nothing there.
    Bug caught: harness/report/build.py:claim_out — `text.startswith(GENERATED)` →
    `text.startswith(GENERATED_TITLE)` (the hand-written index starts with "# Results" too)."""
    _run(tmp_path / "runs" / "a")
    out = tmp_path / "copy"
    out.mkdir()
    shutil.copyfile(ROOT / "results" / "README.md", out / "README.md")
    (out / "table1.md").write_text("my own table\n")
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(SystemExit, match="README.md was not generated"):
        _write(tmp_path / "runs", out, tables="table1")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    other = tmp_path / "mine"
    other.mkdir()
    (other / "table1.md").write_text("my own table\n")
    with pytest.raises(SystemExit, match="holds files no report wrote"):
        _write(tmp_path / "runs", other)
    assert [p.name for p in other.iterdir()] == ["table1.md"]


def test_out_results_itself_is_refused_and_the_committed_preset_folders_are_recognised():
    """--out results/ (the hand-written index) is refused; committed preset folders, written before the marker line
    existed, are still recognised as generated.
    Bug caught: harness/report/build.py:claim_out — `if not text.startswith(GENERATED):` → `if MARKER not in text:`."""
    with pytest.raises(SystemExit, match="README.md was not generated"):
        claim_out(ROOT / "results")  # the hand-curated index
    presets = [p.parent for p in (ROOT / "results").glob("*/README.md") if p.parent.name != "paper"]
    assert presets
    for folder in presets:  # generated before the marker existed: still regenerable (read-only check)
        assert (folder / "README.md").read_text().startswith(GENERATED), folder
        claim_out(folder)


def test_a_legacy_report_folder_is_regenerated_with_a_marker_and_stale_files_go_only_when_listed(tmp_path):
    """A report folder without a marker is regenerated with one listing only the report's files; a file goes as stale
    only when the earlier marker listed it; a README rewritten by hand is never overwritten.
    Bug caught: harness/report/build.py:write_report — `files = {path.name for path in stage.iterdir()} | {README}`
    → `files = {path.name for path in out.iterdir()} | {README}` (fig2.png and conclusions.md listed as written)."""
    _run(tmp_path / "runs" / "a")
    out = tmp_path / "fig2_tabular_single"
    out.mkdir()
    committed = (ROOT / "results" / "fig2_tabular_single" / "README.md").read_text()  # without its list: legacy
    (out / "README.md").write_text("".join(line for line in committed.splitlines(keepends=True)
                                           if not line.startswith(MARKER)))
    (out / "conclusions.md").write_text("read by hand\n")
    (out / "fig2.png").write_bytes(b"an old figure")
    _write(tmp_path / "runs", out, tables="table3")
    readme = (out / "README.md").read_text()
    assert readme.startswith(GENERATED) and "[conclusions.md](conclusions.md)" in readme
    listed = listed_files(readme)
    assert {"README.md", "runs.csv", "missing.json", "table3.md", "table3.csv", "table3.tex"} <= listed
    assert "conclusions.md" not in listed and "fig2.png" not in listed
    assert (out / "fig2.png").exists()  # no earlier list: nothing is removed as stale

    (out / "table1.md").write_text("my own table, written after the report\n")
    _write(tmp_path / "runs", out)  # table3 no longer chosen: its files (listed) go, the others stay
    names = {p.name for p in out.iterdir()}
    assert not {"table3.md", "table3.csv", "table3.tex"} & names
    assert {"table1.md", "conclusions.md", "fig2.png", "README.md", "runs.csv"} <= names
    assert (out / "table1.md").read_text() == "my own table, written after the report\n"
    assert (out / "conclusions.md").read_text() == "read by hand\n"

    (out / "README.md").write_text("# My notes on these runs\n")  # replaced by hand: never overwritten
    with pytest.raises(SystemExit, match="README.md was not generated"):
        _write(tmp_path / "runs", out)
    assert (out / "README.md").read_text() == "# My notes on these runs\n"


def test_a_new_or_empty_out_folder_is_written_and_claimed(tmp_path):
    """A new (nested) or empty --out folder is written, and a later report claims it as its own.
    Bug caught: harness/report/build.py:staged — `stage.mkdir(parents=True)` → `stage.mkdir()`."""
    _run(tmp_path / "runs" / "a")
    empty = tmp_path / "empty"
    empty.mkdir()
    _write(tmp_path / "runs", empty)
    _write(tmp_path / "runs", tmp_path / "new" / "deeper")
    for out in (empty, tmp_path / "new" / "deeper"):
        assert listed_files((out / "README.md").read_text()) == {"README.md", "runs.csv", "missing.json"}
        claim_out(out)
    assert json.loads((empty / "missing.json").read_text()) == []


# 7. a full disk, a kill: the folder keeps a whole report and stays the report's own ---------------------------------

class FullDisk:
    """A disk with ``room`` bytes left for the files ``outputs.atomic_write_text`` writes (all the report writes): a
    write past it stores what fits and raises ENOSPC, as a full disk does."""

    def __init__(self, room: int):
        self.room = room

    def open(self, path, mode="r", **kwargs):
        disk, handle = self, open(path, mode, **kwargs)

        class Filling:
            def __enter__(self):
                return self

            def __exit__(self, *error):
                handle.close()

            def __getattr__(self, name):
                return getattr(handle, name)

            def writelines(self, chunks):
                for chunk in chunks:
                    fits = chunk[:max(0, disk.room)]
                    disk.room -= len(fits)
                    handle.write(fits)
                    if len(fits) < len(chunk):
                        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return Filling()


def _report(paths: list[Path], out: Path) -> None:
    main([*map(str, paths), "--out", str(out), "--tables", "none", "--resamples", "100"])


def _entries(folder: Path) -> dict | None:
    """Everything in ``folder`` (temporaries, folders: their entries) → its bytes; None when there is no folder."""
    if not folder.exists():
        return None
    return {path.name: path.read_bytes() if path.is_file() else _entries(path) for path in folder.iterdir()}


def _as_written_into(folder: Path) -> dict[str, bytes]:
    """``_entries`` with the folder's own name and the caption's time replaced: what two reports of the same runs
    into two folders share."""
    return {name: re.sub(rb"Generated \d{4}-\d\d-\d\d \d\d:\d\d UTC", b"Generated",
                         data.replace(str(folder).encode(), b"<out>"))
            for name, data in _entries(folder).items()}


@pytest.mark.parametrize("fill", [0.0, 0.5, 0.999])
def test_a_full_disk_is_one_line_leaves_out_as_it_was_and_a_rerun_writes_what_an_unbroken_run_writes(
        fill, tmp_path, monkeypatch):
    """A disk that fills up while the report writes (at its first file, halfway, at its README, the last) fails in
    one line naming the file and why, and leaves --out as it was: no folder where there was none, else the earlier
    report, whole, and no temporary (a cut figure and no README would leave a folder no report may claim again).
    Run again with room, the report is what one that never failed writes.
    Bug caught: harness/report/build.py:staged — `shutil.rmtree(stage, ignore_errors=True)` in `finally` deleted (the
    failed report's files stay in out/.report.<pid>.tmp)."""
    runs = tmp_path / "runs"
    _run(runs / "tpo")
    synthetic.write_run(runs / "grpo", synthetic.make_config(EXPERIMENT, "token_reversal", "grpo", 2, 40),
                        {"error": np.full((2, len(STEPS)), 0.3)}, steps=STEPS)
    unbroken = tmp_path / "unbroken"
    _report([runs], unbroken)
    out = tmp_path / "out"
    if fill:
        _report([runs / "tpo"], out)  # an earlier report, of the TPO run alone
    before = _entries(out)
    monkeypatch.setattr(outputs, "open", FullDisk(int(fill * sum(map(len, _entries(unbroken).values())))).open,
                        raising=False)
    with pytest.raises(SystemExit) as failed:
        _report([runs], out)
    assert re.fullmatch(rf"Error: could not write the report into {re.escape(str(out))}: "
                        rf"{re.escape(str(out))}/[\w.]+: No space left on device", str(failed.value))
    assert failed.value.code == 2
    assert _entries(out) == before
    monkeypatch.undo()
    _report([runs], out)
    assert _as_written_into(out) == _as_written_into(unbroken)


def test_a_report_killed_while_moving_its_files_in_leaves_a_folder_the_next_one_claims(tmp_path):
    """A report killed after moving some of its files into a new --out folder, before its README (moved last), left
    them beside its stage (out/.report.<pid>.tmp, with the rest and the README that lists them all): the next report
    claims the folder, writes it whole and removes the dead report's stage.
    Bug caught: harness/report/build.py:claim_out — `and path.name not in moving` deleted (the moved files read as
    files no report wrote: the folder is refused for good)."""
    runs = tmp_path / "runs"
    _run(runs / "tpo")
    unbroken = tmp_path / "unbroken"
    _report([runs], unbroken)
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    out = tmp_path / "out"
    stage = out / f".report.{dead.pid}.tmp"
    stage.mkdir(parents=True)
    names = sorted(path.name for path in unbroken.iterdir())
    moved = [name for name in names if name != "README.md"][:2]
    for name in names:
        shutil.copyfile(unbroken / name, (out if name in moved else stage) / name)
    _report([runs], out)
    assert sorted(path.name for path in out.iterdir()) == names  # the stage gone
    assert listed_files((out / "README.md").read_text()) == set(names)


def test_wandb_without_an_api_key_or_with_a_malformed_project_is_one_line(tmp_path):
    """Bug caught: report's main reading --wandb without checking (a 10-frame UsageError traceback)."""
    environment = {k: v for k, v in os.environ.items() if k != "WANDB_API_KEY"}
    for project, message in (("me/proj", "--wandb me/proj: No API key configured"),
                             ("meproj", "--wandb 'meproj': expected ENTITY/PROJECT")):
        done = subprocess.run([sys.executable, "-m", "harness.report", "--wandb", project, "--out",
                               str(tmp_path / "out")], cwd=tmp_path, capture_output=True, text=True,
                              env={**environment, "HOME": str(tmp_path), "PYTHONPATH": str(ROOT),
                                   "WANDB_MODE": "online"})
        assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr
        assert not (tmp_path / "out").exists()
