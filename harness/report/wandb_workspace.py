"""A saved W&B workspace of the live mirror's runs (harness/tracking.py), laid out as the paper's figures read them:
``python -m harness.report --wandb-workspace ENTITY/PROJECT --preset NAME``.

- one section per metric: the error (every task logs it; the tables read it), then each metric the preset's figures
  draw (``specs.FIGURES``), on a log axis where a figure draws it so;
- the x-axis is ``step`` (``tracking.STEP_METRIC``, every metric's step in the mirror), not W&B's ``_step``, which
  counts rows: TRL's rows and a resumed run's replayed steps move it;
- the runs are grouped by their W&B group, one per configuration (``tracking.wandb_group``): one line per group,
  the mean over its seeds with a standard-error band (W&B has no bootstrap interval), hyperparameters apart;
- every run and group in its algorithm's colour from the figures (``figures.ALGORITHM_STYLE``);
- the runset holds the runs listed when the workspace is made (by run id): run the command again for runs since.

``build_workspace`` makes the object from plain inputs (tests read it back offline); ``save_workspace`` lists the
project's runs through ``wandb.Api()`` and saves it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

import wandb
import wandb_workspaces.reports.v2 as wr
import wandb_workspaces.workspaces as ws

from common.checks import did_you_mean
from harness.config import experiment_presets
from harness.report.figures import series_style
from harness.report.specs import FIGURES, Series, axis_labels
from harness.tracking import STEP_METRIC

MAIN_METRIC = "error"
GROUP = "Group"  # W&B's run attribute: the mirror's group
BAND = "stderr"  # the seeds' standard error around their mean
TITLE = "tpo-bench"
PROJECT_PATH = re.compile(r"[^/\s]+/[^/\s]+")


class WorkspaceError(ValueError):
    """A request refused before anything is saved (the command line prints it in one line, exit 2)."""


def group_path(group: str | None) -> tuple[str, str, str] | None:
    """(experiment, task, algorithm) a mirror's group begins with; None for a group the mirror does not write."""
    parts = (group or "").split("/")
    return (parts[0], parts[1], parts[2]) if len(parts) >= 3 and all(parts[:3]) else None


def preset_metrics(preset: str) -> dict[str, bool]:
    """Metric → log axis: the error, then every metric a curves panel of a figure draws for ``preset``'s runs."""
    metrics = {MAIN_METRIC: False}
    for figure in FIGURES.values():
        for panel in figure.panels:
            if panel.kind == "curves" and preset in (panel.preset, *(s.key.get("experiment") for s in panel.series)):
                for metric in panel.metrics:
                    metrics[metric] = metrics.get(metric, False) or panel.logy
    return metrics


def colour(algorithm: str) -> str:
    """The algorithm's colour in the figures (their grey for one outside the registry)."""
    return series_style(Series({"algorithm.name": algorithm}), 0, 1)[0]


def build_workspace(entity: str, project: str, runs: Iterable[tuple[str, str]]) -> ws.Workspace:
    """The workspace of ``runs``, (W&B run id, group) pairs of runs the mirror logged: its name, sections and
    colours follow from the groups (experiment, task, algorithm), so it names the presets it shows."""
    members = {run_id: (group, group_path(group)) for run_id, group in runs}
    groups = {group: colour(path[2]) for group, path in members.values()}
    experiments = sorted({path[0] for _, path in members.values()})
    metrics: dict[str, bool] = {}
    for experiment in experiments:
        for metric, log in preset_metrics(experiment).items():
            metrics[metric] = metrics.get(metric, False) or log
    x_title = " / ".join(sorted({axis_labels(path[1])[0] for _, path in members.values()}))  # Episode, Step
    sections = [ws.Section(
        name=metric, is_open=True, layout_settings=ws.SectionLayoutSettings(columns=1, rows=1),
        panel_settings=ws.SectionPanelSettings(x_axis=STEP_METRIC),
        panels=[wr.LinePlot(title=metric, x=STEP_METRIC, y=[metric], log_y=log or None, title_x=x_title,
                            title_y=metric, groupby=GROUP, groupby_aggfunc="mean", groupby_rangefunc=BAND)])
        for metric, log in metrics.items()]
    return ws.Workspace(
        entity=entity, project=project, name=f"{TITLE}: {', '.join(experiments)}", sections=sections,
        settings=ws.WorkspaceSettings(x_axis=STEP_METRIC, max_runs=len(groups)),  # every configuration drawn
        runset_settings=ws.RunsetSettings(
            filters=ws.And(ws.Metric("ID").isin(sorted(members))), groupby=[ws.Metric(GROUP)],
            run_settings={run_id: ws.RunSettings(color=groups[group]) for run_id, (group, _) in members.items()},
            group_colors=groups, pinned_columns=[f"summary:final/{metric}" for metric in metrics]))


def workspace_runs(path: str, preset: str | None, filters: dict | None, api) -> list[tuple[str, str]]:
    """(run id, group) of the mirror's runs in ``path`` of ``preset`` (group ``<preset>/...``) that match
    ``filters`` (W&B's MongoDB-style run filter), through ``api`` (``wandb.Api()`` or a test's fake)."""
    conditions = [{"group": {"$regex": f"^{re.escape(preset)}/"}}] if preset else []
    conditions += [filters] if filters else []
    query = conditions[0] if len(conditions) == 1 else {"$and": conditions}
    return [(run.id, run.group) for run in api.runs(path, filters=query)
            if (found := group_path(run.group)) and (preset is None or found[0] == preset)]


def save_workspace(path: str, preset: str | None, filters: dict | None) -> ws.Workspace:
    """Check the request, list its runs, build and save their workspace; WorkspaceError, before any W&B call where
    it can, for a malformed ENTITY/PROJECT, an unknown preset, no API key or no runs (nothing saved)."""
    if not PROJECT_PATH.fullmatch(path):
        raise WorkspaceError(f"--wandb-workspace {path!r}: expected ENTITY/PROJECT (e.g. my-team/tpo-bench)")
    if preset is None and not filters:
        raise WorkspaceError("--wandb-workspace: choose its runs with --preset NAME or --wandb-filters JSON")
    presets = experiment_presets()
    if preset is not None and preset not in presets:
        near = did_you_mean(preset, presets)
        raise WorkspaceError(f"--preset {preset!r}: no such preset; {f'did you mean {near}? ' if near else ''}"
                             f"valid choices (conf/experiment/*.yaml): {', '.join(presets)}")
    try:
        api = wandb.Api()
    except wandb.errors.UsageError as error:  # no API key: `wandb login`
        raise WorkspaceError(f"--wandb-workspace {path}: {error}") from None
    runs = workspace_runs(path, preset, filters, api)
    if not runs:
        chosen = [f"--preset {preset}"] if preset else []
        chosen += [f"--wandb-filters '{json.dumps(filters)}'"] if filters else []
        raise WorkspaceError(f"--wandb-workspace {path}: no runs of the W&B mirror match {' '.join(chosen)}; nothing "
                             "saved")
    entity, project = path.split("/")
    return build_workspace(entity, project, runs).save()
