"""The W&B workspace of a preset's mirrored runs (harness/report/wandb_workspace.py), read back offline from the spec
wandb-workspaces builds (what ``.save()`` uploads): x-axis ``step``, one panel per metric of the preset's figures,
runs grouped by W&B group (mean ± s.e. over seeds), each run and group in its algorithm's colour from the figures,
only the runs listed; and the command line's one-line refusals, which never reach W&B."""

from __future__ import annotations

import pytest
import wandb
import wandb_workspaces.workspaces as ws
from wandb_workspaces.workspaces._run_color_groups import parse_run_color_group_key

from harness.report.__main__ import main
from harness.report.figures import ALGORITHM_STYLE
from harness.report.wandb_workspace import build_workspace
from harness.tracking import STEP_METRIC

T3 = "table3_terminal/token_reversal"
RUNS = [("a1", f"{T3}/tpo/H=7,match=prompts"), ("a2", f"{T3}/tpo/H=7,match=prompts"),
        ("b1", f"{T3}/grpo/H=7,match=prompts"), ("c1", f"{T3}/tpo/H=8,match=prompts")]
ALGORITHM = {"a1": "tpo", "a2": "tpo", "b1": "grpo", "c1": "tpo"}


def spec(workspace: ws.Workspace) -> dict:
    """The view as the library uploads it."""
    return workspace._to_model().model_dump(by_alias=True, exclude_none=True)


def panels(view: dict) -> dict[str, dict]:
    """Section name → the config of its one panel."""
    sections = view["spec"]["section"]["panelBankConfig"]["sections"]
    assert all(len(section["panels"]) == 1 for section in sections)
    return {section["name"]: section["panels"][0]["config"] for section in sections}


def test_a_preset_workspace_plots_each_metric_against_step_grouped_by_configuration():
    """Each panel draws its metric against the mirror's ``step`` (not W&B's ``_step``, which counts rows), as the mean
    of each W&B group with a standard-error band; the runset is grouped by group and holds the listed runs only.
    Bugs caught: wandb_workspace.py:build_workspace — ``x="Step"`` (W&B's ``_step``), the runset's or the panel's
    grouping dropped, another band, a workspace name without the preset."""
    view = spec(build_workspace("me", "tpo-bench", RUNS))
    assert view["entity"] == "me" and view["project"] == "tpo-bench"
    assert "table3_terminal" in view["displayName"]
    section = view["spec"]["section"]
    assert STEP_METRIC == "step"
    assert section["settings"]["xAxis"] == STEP_METRIC  # the workspace's, every section's, every panel's
    assert [s["localPanelSettings"]["xAxis"] for s in section["panelBankConfig"]["sections"]] == [STEP_METRIC]
    plots = panels(view)
    assert list(plots) == ["error"]  # Fig 7, the preset's figure, draws the error only
    plot = plots["error"]
    assert plot["xAxis"] == STEP_METRIC and plot["metrics"] == ["error"] and plot["xAxisTitle"] == "Episode"
    assert (plot["groupBy"], plot["groupAgg"], plot["groupArea"], plot["aggregate"]) == ("group", "mean", "stderr",
                                                                                         True)
    (runset,) = section["runSets"]
    assert runset["grouping"] == [{"section": "run", "name": "group"}]
    (only,) = runset["filters"]["filters"]  # the listed runs, by id
    assert (only["key"], only["op"], sorted(only["value"])) == ({"section": "run", "name": "name"}, "IN",
                                                                 ["a1", "a2", "b1", "c1"])
    assert section["settings"]["maxRuns"] == 3  # every configuration drawn
    assert runset["runFeed"]["columnOrder"] == ["run:displayName", "summary:final/error"]


def test_every_run_and_group_has_its_algorithm_colour_from_the_figures():
    """Every run, and every group (the line drawn once runs are grouped), has its algorithm's colour in the figures.
    Bugs caught: wandb_workspace.py:build_workspace — colouring by the task's part of the group, or the groups'
    colours dropped."""
    view = spec(build_workspace("me", "tpo-bench", RUNS))
    colours = view["spec"]["section"]["customRunColors"]
    assert ALGORITHM_STYLE["tpo"][0] != ALGORITHM_STYLE["grpo"][0]
    runs = {key: value for key, value in colours.items() if not key.startswith("run-color-group:")}
    assert runs == {run_id: ALGORITHM_STYLE[algorithm][0] for run_id, algorithm in ALGORITHM.items()}
    runset_id = view["spec"]["section"]["runSets"][0]["id"]
    groups = {}
    for key, value in colours.items():
        if (parsed := parse_run_color_group_key(key)) is not None:
            assert parsed["runset_id"] == runset_id
            (entry,) = parsed["path"]
            assert entry["key"] == "run:group"
            groups[entry["value"]] = value
    assert groups == {group: ALGORITHM_STYLE[group.split("/")[2]][0] for _, group in RUNS}
    # and the library reads them back as it wrote them
    back = ws.Workspace._from_model(build_workspace("me", "tpo-bench", RUNS)._to_model())
    assert back.runset_settings.group_colors == groups
    assert {run_id: s.color for run_id, s in back.runset_settings.run_settings.items()} == runs


def test_the_metrics_and_axes_follow_the_presets_figures():
    """The sections are the error, then each metric the presets' figures draw, on a log axis where they do; the x
    title is the tasks' (episodes, a bandit's steps). Bug caught: wandb_workspace.py:preset_metrics — the figures'
    log axes ignored."""
    runs = [("s1", "fig2_tabular_single/tabular_single/tpo"), ("s2", "fig2_tabular_single/tabular_single/pg"),
            ("e1", "fig1b_sparse/token_reversal/dg")]
    view = spec(build_workspace("me", "p", runs))
    assert "fig1b_sparse" in view["displayName"] and "fig2_tabular_single" in view["displayName"]
    plots = panels(view)
    assert list(plots) == ["error", "misalignment"]  # Fig 2's two panels, on log axes there
    assert all(plot["yLogScale"] for plot in plots.values())
    assert plots["error"]["xAxisTitle"] == "Episode / Step"
    view = spec(build_workspace("me", "p", [("g1", "fig10_diagnostics/token_reversal/grpo")]))
    assert list(panels(view)) == ["error", "grad_norm", "weight_winners", "weight_losers", "all_fail",
                                  "frac_success"]


class FakeRun:
    def __init__(self, run_id: str, group: str | None):
        self.id, self.group = run_id, group


class FakeApi:
    def __init__(self, runs):
        self._runs, self.calls = runs, []

    def runs(self, path, filters=None):
        self.calls.append((path, filters))
        return list(self._runs)


@pytest.fixture
def wandb_calls(monkeypatch):
    """The W&B API as a fake whose runs a test sets; ``saved``: every workspace saved."""
    calls = {"apis": 0, "saved": [], "runs": []}
    api = FakeApi(calls["runs"])

    def make_api():
        calls["apis"] += 1
        return api

    def save(self):
        calls["saved"].append(self)
        return self

    monkeypatch.setattr(wandb, "Api", make_api)
    monkeypatch.setattr(ws.Workspace, "save", save)
    calls["api"] = api
    return calls


def refusal(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("Error: python -m harness.report: ")
    return lines[0]


@pytest.mark.parametrize("argv, message", [
    (["--wandb-workspace", "me", "--preset", "table3_terminal"], "--wandb-workspace 'me': expected ENTITY/PROJECT"),
    (["--wandb-workspace", "me/p/x", "--preset", "table3_terminal"], "expected ENTITY/PROJECT"),
    (["--wandb-workspace", "/p", "--preset", "table3_terminal"], "expected ENTITY/PROJECT"),
    (["--wandb-workspace", "me/p", "--preset", "tabel3_terminal"],
     "--preset 'tabel3_terminal': no such preset; did you mean table3_terminal? valid choices (conf/experiment/*.yaml):"
     " beyond_amplification, "),
    (["--wandb-workspace", "me/p"], "choose its runs with --preset NAME or --wandb-filters JSON"),
    (["--wandb-workspace", "me/p", "--preset", "table3_terminal", "runs/"], "give no run folders or --wandb"),
    (["--preset", "table3_terminal", "runs/"], "--preset chooses the runs of --wandb-workspace"),
])
def test_a_bad_request_is_refused_in_one_line_before_any_w_and_b_call(argv, message, capsys, wandb_calls):
    """A malformed ENTITY/PROJECT, an unknown preset (with the nearest and the valid ones), no choice of runs, or
    options of the report mixed in: exit 2, one line, the W&B API never opened, nothing saved."""
    assert message in refusal(capsys, argv)
    assert wandb_calls["apis"] == 0 and wandb_calls["saved"] == []


def test_no_api_key_is_refused_in_one_line(capsys, wandb_calls, monkeypatch):
    def no_key():
        raise wandb.errors.UsageError("No API key configured. Use `wandb login` to log in.")

    monkeypatch.setattr(wandb, "Api", no_key)
    line = refusal(capsys, ["--wandb-workspace", "me/p", "--preset", "table3_terminal"])
    assert line.endswith("--wandb-workspace me/p: No API key configured. Use `wandb login` to log in.")
    assert wandb_calls["saved"] == []


def test_no_matching_runs_is_refused_and_nothing_is_saved(capsys, wandb_calls):
    """Runs listed by the server's group filter but of another preset, or with a group the mirror never writes, do
    not count: no runs left is refused in one line and nothing is saved."""
    wandb_calls["runs"] += [FakeRun("x1", "table3_terminal_old/token_reversal/tpo"),  # another preset
                            FakeRun("x2", "table3_terminal"), FakeRun("x3", None)]  # groups the mirror never writes
    line = refusal(capsys, ["--wandb-workspace", "me/p", "--preset", "table3_terminal"])
    assert "--wandb-workspace me/p: no runs of the W&B mirror match --preset table3_terminal; nothing saved" in line
    assert wandb_calls["api"].calls == [("me/p", {"group": {"$regex": "^table3_terminal/"}})]
    assert wandb_calls["saved"] == []


def test_the_command_saves_the_workspace_of_the_presets_runs(capsys, wandb_calls):
    """The preset's group prefix and --wandb-filters both filter the listing; the preset's runs only are saved.
    Bug caught: wandb_workspace.py:workspace_runs — keeping a run of another preset the server returned."""
    wandb_calls["runs"] += [FakeRun(run_id, group) for run_id, group in RUNS]
    wandb_calls["runs"] += [FakeRun("o1", "fig1b_sparse/token_reversal/tpo")]  # a regex the server read loosely
    main(["--wandb-workspace", "me/p", "--preset", "table3_terminal", "--wandb-filters", '{"state": "finished"}'])
    (saved,) = wandb_calls["saved"]
    assert wandb_calls["api"].calls == [
        ("me/p", {"$and": [{"group": {"$regex": "^table3_terminal/"}}, {"state": "finished"}]})]
    view = spec(saved)
    assert (view["entity"], view["project"]) == ("me", "p")
    assert sorted(view["spec"]["section"]["runSets"][0]["filters"]["filters"][0]["value"]) == ["a1", "a2", "b1", "c1"]
    assert f"saved W&B workspace {saved.name!r} in me/p" in capsys.readouterr().out
