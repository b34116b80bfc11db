"""The installed package, not the checkout: a wheel built from the repository's files, installed into a fresh venv,
trains and reports through its ``tpo-bench`` command from a folder outside any checkout."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

from conftest import ROOT

SOURCES = ("pyproject.toml", "setup.py", "README.md", "harness", "tasks", "common", "algorithms", "conf",
           "results/paper")


def run(command: list, cwd: Path) -> subprocess.CompletedProcess:
    done = subprocess.run([str(part) for part in command], cwd=cwd, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_a_wheel_in_a_fresh_venv_trains_and_reports_from_any_folder(tmp_path):
    """Bugs caught: conf/ not packed into the wheel (``Primary config directory not found``); ``harness.locations``
    reading the checkout's conf/ in an installed package; no ``[project.scripts]`` entry; a run of the installed
    package recording a commit (of whatever repository holds its venv) or no version."""
    source = tmp_path / "source"  # a copy: the build writes build/ and *.egg-info beside its sources
    for name in SOURCES:
        copy = shutil.copytree if (ROOT / name).is_dir() else shutil.copyfile
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        copy(ROOT / name, source / name, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                           if (ROOT / name).is_dir() else {}))
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation", ".", "-w",
         tmp_path / "dist"], source)
    (wheel,) = (tmp_path / "dist").glob("tpo_bench-*.whl")

    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    python = venv / "bin" / "python"
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path)
                .stdout.strip())
    # the dependencies (torch, Hydra, ...) from this environment, without its editable install of the checkout
    (site / "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run([sys.executable, "-m", "pip", "--python", python, "install", "--quiet", "--no-deps", "--no-index", wheel],
        tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = run([python, "-c", "import harness.locations as l; print(l.CONF)"], elsewhere).stdout.strip()
    assert where == str(site / "harness" / "conf")
    command = venv / "bin" / "tpo-bench"
    run([command, "task=tabular_single", "algorithm=tpo", "seeds=2", "task.steps=30", "logger=none",
         "hydra.run.dir=run"], elsewhere)
    summary = json.loads((elsewhere / "run" / "summary.json").read_text())
    assert summary["commit"] is None and summary["version"] == re.search(  # no checkout: the version names the code
        r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    report = run([command, "report", "run", "--out", "report"], elsewhere)
    assert "tpo" in report.stdout and (elsewhere / "report" / "README.md").exists()
    refused = subprocess.run([command, "task=nope"], cwd=elsewhere, capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and refused.stderr.startswith("Error: ") and "tabular_single" in refused.stderr
