"""Every command line of the project fed malformed, extreme and non-finite values: each is refused in one ``Error:``
line with exit status 2, before any work and without a traceback, and leaves no folder behind."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT
from harness import campaign, scorecard
from harness.report import __main__ as report
from harness.report import claims, dynamics, fixed_point, group_pull, quotes, seedwise

NOT_NUMBERS = ["nan", "inf", "-inf", "1e400", "abc", "", "0x10"]
NEGATIVE = ["-1", "-1e-9"]
HUGE_INT, HUGE_FLOAT = "99999999999999999999", "1e300"


def numeric(flag: str, kind: type, huge: bool = True, zero: bool = True) -> list[list[str]]:
    """A flag's invalid values: not finite numbers, negative, (non-integral for an integer flag), beyond its bound
    (``huge``) and 0 where 0 is refused."""
    values = NOT_NUMBERS + NEGATIVE + (["1.5"] if kind is int else []) + (["0"] if zero else [])
    values += [HUGE_INT if kind is int else HUGE_FLOAT] if huge else []
    return [[flag, value] for value in values]


SURFACES = {
    "campaign": (campaign.main, [
        *numeric("--jobs", int), *numeric("--hours", float, zero=False), *numeric("--finish-within", float, zero=False),
        *[["--launcher", "slurm", *case] for case in numeric("--max-jobs", int)],
        ["no_such_queue"], ["--only", "P99"], ["--launcher", "mars"], ["--max-jobs", "5"], ["--bogus"]]),
    "scorecard": (scorecard.main, [
        *[["algorithm=tpo", "--quick", *case] for case in numeric("--jobs", int) + numeric("--finish-within", float)],
        ["algorithm=nope", "--quick"], ["algorithm=tpo", "algorithm.etaa=0.5", "--quick"], ["--quick"],
        ["algorithm=tpo", "--quick", "--bogus"]]),
    "report": (report.main, [
        *[["runs", *case] for case in numeric("--smooth", int) + numeric("--resamples", int)
          + numeric("--seed", int, zero=False)],
        [], ["runs", "--tables", "bogus"], ["runs", "--figures", "bogus"], ["runs", "--wandb-filters", "{bad"],
        ["runs", "--compare", "algorithm"], ["no_such_folder"], ["runs", "--baseline", "tpo"], ["--wandb", "no-slash"],
        ["--preset", "table1"], ["runs", "--bogus"]]),
    "quotes": (quotes.main, [["resluts"], ["README.md"], ["a", "b"], ["--bogus"]]),
    "claims": (claims.main, [["nowhere"], ["a", "b"]]),
    "fixed_point": (fixed_point.main, [
        *numeric("--K", int), *numeric("--V", int), *[["--H", *case[1:]] for case in numeric("--H", int)],
        ["--V", "1"], ["--K", "1"], ["--H", "60", "--V", "4"], ["--algorithms", "nope"]]),
    "group_pull": (group_pull.main, [
        *numeric("--K", int), *numeric("--draws", int), *numeric("--noise", float),
        *numeric("--seed", int, zero=False), ["--algorithms", "nope"]]),
    "seedwise": (seedwise.main, [
        *[["relapses", "runs", *case] for case in numeric("--at", int, zero=False) + numeric("--resamples", int)],
        *[["methods", "runs", *case] for case in numeric("--threshold", float)],
        *[["relapses", "runs", "--at", "400", "--seeds", value] for value in ("0-999999999", "5-2", "x", "-3")],
        ["paired", "runs", "--windows", "bogus"], ["nope"], []]),
    "dynamics": (dynamics.main, [
        *[["endings", "runs", *case] for case in numeric("--last", int) + numeric("--reach", float, zero=False)],
        ["nope"], []]),
}
CASES = [pytest.param(main, argv, id=f"{name}:{' '.join(argv) or '(none)'}")
         for name, (main, cases) in SURFACES.items() for argv in cases]


@pytest.mark.parametrize("main, argv", CASES)
def test_bad_input_is_refused_in_one_line_with_exit_2(main, argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    if main in (campaign.main, scorecard.main):  # their folders here too, where a write would show
        argv = [*argv, "--work", "work", "--results", "results"]
    with pytest.raises(SystemExit) as refused:  # any other exception is a traceback: the test fails with it
        main(argv)
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert refused.value.code == 2, (refused.value.code, out, err)
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["runs"] and not any((tmp_path / "runs").iterdir())


HARNESS = [[f"algorithm.eta={value}"] for value in ("nan", "inf", "-inf", "1e400", "abc", "0", "-1")] + [
    [f"seeds={value}"] for value in ("0", "-1", "nan", "1.5", HUGE_INT)] + [
    [f"task.steps={value}"] for value in ("0", "-5", "inf")] + [
    ["task.alpha=1e308"], ["algorithm=nope"], ["task=nope"], ["trainer.stepz=5"], ["seed_offset=9223372036854775807"]]


def test_the_training_command_refuses_bad_values_in_one_line(tmp_path):
    """``python -m harness`` (Hydra's command line, so run as a process): every case of ``HARNESS`` on the smallest
    task. The processes run two at a time."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled"}

    def start(index: int, argv: list[str]) -> subprocess.Popen:
        folder = tmp_path / str(index)
        folder.mkdir()
        steps = [] if any(arg.startswith("task.steps=") for arg in argv) else ["task.steps=5"]
        return subprocess.Popen([sys.executable, "-m", "harness", "task=tabular_single", "algorithm=tpo",
                                 "logger=none", *steps, *argv], cwd=folder, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    cases = list(enumerate(HARNESS))
    failures = []
    for pair in (cases[start:start + 2] for start in range(0, len(cases), 2)):
        for (index, argv), process in [(case, start(*case)) for case in pair]:
            _, err = process.communicate(timeout=300)
            lines = err.strip().splitlines()
            if process.returncode != 2 or len(lines) != 1 or not lines[0].startswith("Error: ") \
                    or any((tmp_path / str(index)).iterdir()):
                failures.append((argv, process.returncode, err[-400:]))
    assert not failures, failures


@pytest.mark.parametrize("flag", ["--tables", "--figures"])
def test_an_unknown_table_or_figure_is_refused_before_any_run_is_read(flag, tmp_path, monkeypatch, capsys):
    """Bug caught: ``write_report`` checking the names only after loading the runs (and the figures after every
    table's bootstrap)."""
    loaded = []
    monkeypatch.setattr("harness.report.build.load_runs", lambda *args, **kwargs: loaded.append(args))
    with pytest.raises(SystemExit):
        report.main([str(tmp_path), "--out", str(tmp_path / "out"), flag, "bogus"])
    assert "unknown name(s): bogus" in capsys.readouterr().err and not loaded


def test_a_refusal_outside_a_tool_still_says_why(tmp_path):
    """A script of one's own calling the report's functions: the refusal's line is printed (by Python, exit 1), not
    a silent exit. Bug caught: ``cli.Refusal`` built as ``SystemExit(2)`` (Python prints nothing for an int)."""
    script = ("from pathlib import Path\nfrom harness.report.build import write_report\n"
              "write_report([Path('.')], Path('out'))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1 and done.stderr.strip().startswith("Error: no run directories"), done.stderr
