"""Every paper table and figure as data: which preset's runs, which cells or panels, which statistic.

A table is declared in its preset (``conf/experiment/<preset>.yaml``, ``artefact.tables``: harness/artefacts.py) and
read here into a ``Table`` (``declared_table``); figures, which often draw several presets, are declared below. A cell
key maps config keys of the runs (``algorithm.name``, ``task.V``, ...) to values; the pseudo-key ``experiment``
overrides the spec's preset for that cell and ``metric`` overrides the statistic's metric.
``tests/test_report_specs.py`` checks that every cell lies in its preset's sweep grid.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from itertools import product

from algorithms import ALGORITHMS
from common.checks import ConfigError, check_bool
from common.palette import VERMILLION
from harness import artefacts
from harness.config import preset_sweep, sweep_value
from tasks import TASKS


@dataclass(frozen=True)
class Stat:
    """A per-cell statistic over seeds (docs/reproduction.md §7). ``kind``: final (seed mean at the last step),
    steps_to (first step whose seed mean is strictly below ``threshold``), at_step (seed mean at ``step``), mean
    (seed mean of each seed's mean over every logged step: the area under the curve per step, which a late relapse
    cannot hide),
    solved (fraction of seeds whose error ever fell below ``threshold``), relapsed (fraction of seeds that, once
    solved, rose above ``relapse_above``; ``harness.report.dynamics.relapse_events``), relapses (relapse events per
    seed, 0 for a seed that never solved: how often, where relapsed says only whether). ``when = (metric, value)`` keeps
    only the steps where that metric has that value (e.g. episodes whose groups all have zero variance)."""

    kind: str
    threshold: float | None = None
    step: int | None = None
    metric: str = "error"
    relapse_above: float | None = None
    when: tuple[str, float] | None = None
    percent: bool = True  # shown ×100 (steps_to ignores it)
    dash_above: float | None = None  # shown as "−" above this value (Table 3: > 95%)
    higher_is_better: bool = False  # for paired P(better); errors and steps: lower is better

    @property
    def name(self) -> str:
        if self.kind == "steps_to":
            return f"steps_to_{self.threshold:g}"
        if self.kind in ("solved", "relapsed", "relapses"):
            return f"{self.kind}_{self.threshold:g}" + (f"_{self.relapse_above:g}" if self.relapse_above else "")
        if self.when is not None:
            return f"{self.kind}_{self.metric}_when_{self.when[0]}_{self.when[1]:g}"
        return f"at_step_{self.step}" if self.kind == "at_step" else self.kind

    @property
    def label(self) -> str:
        unit = " (%)" if self.percent else ""
        if self.kind == "steps_to":
            return f"steps to {100 * self.threshold:g}%"
        share = "%" if self.percent else "fraction"
        if self.kind == "solved":
            return f"solved seeds ({share}; error < {100 * self.threshold:g}%)"
        if self.kind == "relapsed":
            return f"relapsed seeds ({share}; > {100 * self.relapse_above:g}% after solving)"
        if self.kind == "relapses":
            return f"relapses per seed (> {100 * (self.relapse_above or 1.0):g}% after < {100 * self.threshold:g}%)"
        if self.kind == "mean" and self.when is not None:
            return f"mean {self.metric} where {self.when[0]} = {self.when[1]:g}"
        if self.kind == "mean":
            return f"mean {self.metric} over the run{unit}"
        return f"{self.metric} at step {self.step}{unit}" if self.kind == "at_step" else f"final {self.metric}{unit}"


FINAL = Stat("final")
MEAN = Stat("mean")
TO_1 = Stat("steps_to", threshold=0.01)
TO_5 = Stat("steps_to", threshold=0.05)
# Solve/relapse events are recomputed from the error curves at the table's thresholds (the trainer's defaults), so
# every cell counts alike and runs recorded before summary.json had events count too; a run's own summary.json
# counts at its trainer.solved_below / relapse_above
SOLVED = Stat("solved", threshold=0.02)
RELAPSED = Stat("relapsed", threshold=0.02, relapse_above=0.2)
RELAPSES = Stat("relapses", threshold=0.02, relapse_above=0.2, percent=False)


@dataclass(frozen=True)
class Table:
    """A paper table: cells = rows × cols (dicts of config values) ∪ ``where``; one column per stat per col. Its
    runs' seeds and steps are its preset's (``conf/experiment/<preset>.yaml``, the paper's budget), and rows or
    columns that are a preset's sweep axes take their values from it (``swept``): the table says how to lay the
    preset out, never its values again."""

    name: str
    title: str
    preset: str
    rows: tuple[dict, ...]
    cols: tuple[dict, ...] = ({},)
    stats: tuple[Stat, ...] = (FINAL,)
    where: dict = field(default_factory=dict)
    reference: dict = field(default_factory=dict)  # a cell's paired reference = the cell with these values
    note: str = ""
    drawn_only: bool = False  # the paper draws it and prints no value: its budget is the paper's, no paper column

    def cells(self) -> list[tuple[dict, dict, dict]]:
        """(row, col, full key) for every cell, row-major."""
        return [(row, col, {**self.where, **row, **col}) for row in self.rows for col in self.cols]


@dataclass(frozen=True)
class Series:
    """One line (or bar group) of a panel: the runs matching ``key``; ``style`` = (colour, line style) override."""

    key: dict
    label: str = ""
    style: tuple[str, str] | None = None


@dataclass(frozen=True)
class Panel:
    """One axes. kind: curves (seed mean over steps with its 95% bootstrap band over seeds), seeds (each seed's own
    curve, thin, under the seed mean: what a mean's spikes are made of), final (final value vs config key ``x``),
    bars (final value per series), mechanism (Fig 4b surplus by concentration bin at step 2,000).
    An empty ``ylabel`` or ``xlabel`` is the task's (``axis_labels``)."""

    preset: str
    series: tuple[Series, ...]
    title: str = ""
    where: dict = field(default_factory=dict)
    kind: str = "curves"
    metrics: tuple[str, ...] = ("error",)  # curves: several metrics = one line style each (Fig 10b)
    x: str | None = None
    xs: tuple = ()
    logy: bool = False
    logx: bool = False
    ylim: tuple[float, float] | None = None
    ylabel: str = ""
    xlabel: str = ""
    smooth: int | None = None  # window; None = the report's --smooth
    centred: bool = False  # centred instead of causal moving average (docs/reproduction.md §6.9)
    paper: str | None = None  # table whose published values are drawn as markers


@dataclass(frozen=True)
class Figure:
    name: str
    title: str
    panels: tuple[Panel, ...]
    ncols: int = 0  # 0 = all panels in one row
    caption: str = ""


ALGORITHM_LABEL = {name: algorithm.label for name, algorithm in ALGORITHMS.items()}  # from the registry
# The paper's order of methods, TPO (its highlighted method) first: legends, bars and the runs' listing follow it
ALGORITHM_ORDER = ("tpo", "tpo_token", "tpo_no_anchor", "dg", "grpo", "grpo_token", "grpo_no_kl", "grpo_masked",
                   "group_pg", "pg", "ppo", "ce", "rloo", "dr_grpo", "dapo", "gspo", "cispo")
TASK_LABEL = {name: entry.label for name, entry in TASKS.items()}  # from the registry
PRESET_TITLE = {"demo_tabular": "Demo", "demo_mnist": "Demo", "demo_sparse": "Demo", "demo_llm": "LLM demo",
                "beyond_amplification_scale": "Beyond the paper — GRPO, σ with the scale guard",
                "beyond_amplification_floor_scale": "Beyond the paper — GRPO, σ floor with the scale guard"}


def algorithm_rank(name) -> tuple[int, str]:
    """Sort key of an algorithm id: the paper's order, others after it by name."""
    return (ALGORITHM_ORDER.index(name), "") if name in ALGORITHM_ORDER else (len(ALGORITHM_ORDER), str(name))


def axis_labels(task: str | None, reward: str | None = None) -> tuple[str, str]:
    """(x, y) labels of an error curve of ``task``, as its registry entry (``tasks.TASKS``) names them: sequence tasks
    count episodes, bandits training steps; the token task's error is the exact-match error under terminal reward,
    the token error under bag-of-tokens."""
    entry = TASKS.get(task)
    if entry is None:
        return "Step", "Error"
    return entry.step, entry.error_by_reward.get(reward, entry.error)


def preset_title(preset: str, task: str | None = None) -> str:
    """A human title for a preset's runs of ``task`` ("Demo: MNIST bandit"), for figures no paper figure names."""
    head = PRESET_TITLE.get(preset, preset.replace("_", " "))
    return f"{head}: {TASK_LABEL.get(task, task)}" if task else head
KEY_LABEL = {"task.V": "V", "task.H": "H", "task.K": "K", "algorithm.eta": "η", "algorithm.epochs": "epochs",
             "task.reward_noise": "noise"}
VALUE_LABEL = {
    "prompts": "Prompt", "interactions": "Interact.", "bag_of_tokens": "Bag of tokens", "sequential": "Sequential",
    "terminal": "Terminal", "copy": "Copy", "flip": "Flip", "reverse_copy": "Rev. copy", "reverse_flip": "Rev. flip",
    "fig10_diagnostics_tpo_1ep": "1 ep", "beyond_terminal_baselines_kl": "KL β = 0.04",
    "mech_surplus_bin0": "[0, .25)", "mech_surplus_bin1": "[.25, .5)",
    "mech_surplus_bin2": "[.5, .75)", "mech_surplus_bin3": "[.75, 1]",
    "beyond_relapse": "Muon", "beyond_relapse_skip": "Muon + skip", "beyond_relapse_scale": "Muon + scale",
    "beyond_relapse_adam": "Adam", "beyond_amplification": "σ", "beyond_amplification_floor": "σ floor",
    "beyond_amplification_shrinkage": "shrunk σ", "beyond_amplification_rank": "ranks",
    "beyond_amplification_scale": "σ + scale", "beyond_amplification_floor_scale": "σ floor + scale",
}


def fmt_value(value) -> str:
    """3 → "3", 3.0 → "3", 0.25 → "0.25"."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# presets whose table cells also read another preset's runs of the same configuration (the config fingerprints
# agree; only the experiment's name differs): Fig 1b is Table 3's prompt-matched H = 10 column, the modern
# baselines' comparison reads TPO and GRPO from Table 3's prompt-matched H = 7 column, and Fig 8's TPO, GRPO and
# GRPO (no KL) rows are Table 3's prompt-matched runs (H = 10 TPO and GRPO: Fig 1b's); Section 4's sweeps (Figs 12,
# 13, 15) read their K = 32 cells of TPO and GRPO with 4 epochs, and TPO with 1, from Fig 10's runs, the same
# regime (docs/reproduction.md §6.10); Fig 6's prompt-matched PPO and DG and Fig 17's DG with 1 epoch are Table 2's
# (PPO and DG sample one answer per prompt under either grouping). Sharing is not transitive:
# a preset lists every one it reads. A sharing table pins the keys that tell the shared runs apart (Fig 8:
# task.match=prompts, or Table 3's interaction-matched runs of the same H would join its cells).
PROMPT_MATCHED = {"task.match": "prompts"}
SHARED_RUNS = {"table3_terminal": ("fig1b_sparse",), "beyond_terminal_baselines": ("table3_terminal",),
               "beyond_relapse": ("table3_terminal",), "fig8_ablations": ("table3_terminal", "fig1b_sparse"),
               "fig12_k_sweep": ("fig10_diagnostics",), "fig13_masking": ("fig10_diagnostics",),
               "fig15_epoch_sweep": ("fig10_diagnostics", "fig10_diagnostics_tpo_1ep"),
               "fig6_variations": ("table2_variations",), "fig17_dg_epochs": ("table2_variations",)}
K32 = {"task.K": 32}  # Figs 13 and 15 are Section 4's regime at K = 32


def report_sources(preset: str) -> list[str]:
    """The presets whose runs the report of ``preset`` reads: itself, the presets its tables' cells name
    (``experiment`` keys), those of every panel of a figure it draws a panel of (Fig 1's MNIST panel beside its
    sparse-reward one), and the runs each of them shares (``SHARED_RUNS``)."""
    named = [preset]
    for spec in TABLES.values():
        if spec.preset == preset:
            named += [key["experiment"] for _, _, key in spec.cells() if "experiment" in key]
            named += [spec.reference["experiment"]] if "experiment" in spec.reference else []
    for figure in FIGURES.values():
        if any(panel.preset == preset for panel in figure.panels):
            for panel in figure.panels:
                named += [panel.preset, *(series.key["experiment"] for series in panel.series
                                          if "experiment" in series.key)]
    return list(dict.fromkeys(name for own in named for name in (own, *SHARED_RUNS.get(own, ()))))


def report_specs(preset: str) -> tuple[list[str], list[str]]:
    """The tables and figures of ``preset``'s report folder: the tables it owns and the figures with a panel of it.
    A folder shows only these, although it reads more runs (``report_sources``): beyond_relapse reads Table 3's runs
    for its Muon row and must not redraw Table 3."""
    tables = [name for name, spec in TABLES.items() if spec.preset == preset]
    figures = [name for name, figure in FIGURES.items() if any(panel.preset == preset for panel in figure.panels)]
    return tables, figures


def label(key: dict) -> str:
    """Human label of a cell key: {"algorithm.name": "tpo", "task.H": 7} → "TPO, H=7"."""
    parts = []
    for name, value in key.items():
        if name == "experiment" and value not in VALUE_LABEL:
            continue  # the preset itself needs no label
        if name == "algorithm.name":
            parts.append(ALGORITHM_LABEL.get(value, value))
        elif name in KEY_LABEL:
            parts.append(f"{KEY_LABEL[name]}={fmt_value(value)}")
        else:
            parts.append(VALUE_LABEL.get(value, fmt_value(value)))
    return ", ".join(parts)



def grid(**axes) -> tuple[dict, ...]:
    """grid(**{"task.match": [...], "task.H": [...]}) → every combination, first axis slowest."""
    keys = list(axes)
    return tuple(dict(zip(keys, values)) for values in product(*axes.values()))


def swept(preset: str, *axes: str) -> tuple[dict, ...]:
    """The grid of some axes of a preset's sweep, with the preset's values in its order (``algorithm`` as the runs'
    ``algorithm.name``): ``swept("table3_terminal", "task.match", "task.H")``."""
    sweep = preset_sweep(preset)
    return grid(**{"algorithm.name" if axis == "algorithm" else axis: [sweep_value(value) for value in sweep[axis]]
                   for axis in axes})


def values_of(preset: str, axis: str) -> tuple:
    """One axis of a preset's sweep: its values, typed as a run's config holds them."""
    return tuple(sweep_value(value) for value in preset_sweep(preset)[axis])


def by_algorithm(*names: str) -> tuple[Series, ...]:
    return tuple(Series({"algorithm.name": name}) for name in names)


def by_value(key: str, values, **where) -> tuple[Series, ...]:
    return tuple(Series({**where, key: value}) for value in values)


def by_swept(preset: str, axis: str) -> tuple[Series, ...]:
    """One line per value of a preset's sweep axis, in its order."""
    return tuple(Series(key) for key in swept(preset, axis))


# The lines of the paper's Section 4 figures (Figs 10, 11, 14), each panel with the methods the paper's own panel
# draws (docs/reproduction.md §6.9): one run of six methods, of which each panel shows some
_S4 = {"tpo": Series({"algorithm.name": "tpo"}, "TPO (4 ep)"),
       "tpo_1ep": Series({"experiment": "fig10_diagnostics_tpo_1ep", "algorithm.name": "tpo"}, "TPO (1 ep)",
                         style=(VERMILLION, ":")),
       "grpo": Series({"algorithm.name": "grpo"}), "grpo_no_kl": Series({"algorithm.name": "grpo_no_kl"}),
       "ppo": Series({"algorithm.name": "ppo"}), "dg": Series({"algorithm.name": "dg"}, "DG (1 ep)")}


def section4(*names: str) -> tuple[Series, ...]:
    return tuple(_S4[name] for name in names)


LLM_LEARN = (("llm_cpu_learn", "CPU, 4 prompts × K = 8, 50 steps, 64 held-out puzzles"),
             ("llm_gpu_learn", "GPU, 16 prompts × K = 16, 100 steps, 256 held-out puzzles"))


def _llm_learn_figure(preset: str, size: str) -> Figure:
    return Figure(preset, f"SmolLM2-135M on one-digit products ({size})", (
        Panel(preset, by_swept(preset, "algorithm"), title="(a) Held-out greedy success", metrics=("test_accuracy",),
              ylabel="Success rate", ylim=(0.0, 1.0), smooth=1),
        Panel(preset, by_swept(preset, "algorithm"), title="(b) Training rollouts' mean score",
              metrics=("reward_mean",), ylabel="Mean score", ylim=(0.0, 1.0), smooth=5)),
        caption="Seed mean of each method's runs; (b) smoothed by a 5-step causal moving average.")


NAMED_STATS = {stat.name: stat for stat in (FINAL, MEAN, TO_1, TO_5, SOLVED, RELAPSED, RELAPSES)}
TABLE_KEYS = ("name", "title", "rows", "cols", "stats", "where", "reference", "note", "drawn_only")


def _cells(preset: str, cells, where: str) -> tuple[dict, ...]:
    """A table's rows or columns as declared: axes of the preset's sweep (``[algorithm]``: its grid, in the
    preset's order) or cell keys as written (``[{algorithm.name: tpo, experiment: ...}]``)."""
    if not isinstance(cells, list) or not (all(isinstance(cell, str) for cell in cells)
                                           or all(isinstance(cell, dict) for cell in cells)):
        raise ConfigError(f"{where}={cells!r} is not valid; expected a list of the preset's sweep axes or a list of "
                          "cell keys (mappings)")
    if all(isinstance(cell, str) for cell in cells):
        sweep = preset_sweep(preset)
        outside = [axis for axis in cells if axis not in sweep]
        if outside:
            raise ConfigError(f"{where}={outside[0]!r} is not an axis of the preset's sweep; valid "
                              f"axes: {', '.join(sweep) or 'none'}")
        return swept(preset, *cells)
    return tuple(dict(cell) for cell in cells)


def _stat(declared, where: str) -> Stat:
    """``final``, ``steps_to_0.01``, ... (NAMED_STATS) or Stat's fields (``{kind: final, dash_above: 0.95}``)."""
    if isinstance(declared, str):
        if declared not in NAMED_STATS:
            raise ConfigError(f"{where}={declared!r} is not a named statistic; valid choices: "
                              f"{', '.join(NAMED_STATS)}, or a mapping of Stat's fields")
        return NAMED_STATS[declared]
    fields = [field.name for field in dataclasses.fields(Stat)]
    unknown = [key for key in declared if key not in fields] if isinstance(declared, dict) else ["(not a mapping)"]
    if unknown or "kind" not in declared:
        raise ConfigError(f"{where} has {unknown[0] if unknown else 'no kind'}; a statistic is a named one "
                          f"({', '.join(NAMED_STATS)}) or a mapping of: {', '.join(fields)}")
    when = declared.get("when")
    return Stat(**{**declared, **({"when": tuple(when)} if when is not None else {})})


def declared_table(preset: str, declared: dict) -> Table:
    """The Table a preset's ``artefact.tables`` entry declares (harness/artefacts.py)."""
    where = f"{preset}.yaml: artefact.tables[{declared.get('name')}]"
    unknown = [key for key in declared if key not in TABLE_KEYS]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not valid; valid choices: {', '.join(TABLE_KEYS)}")
    missing = [key for key in ("name", "title", "rows") if key not in declared]
    if missing:
        raise ConfigError(f"{where} has no {missing[0]}; a table needs name, title and rows")
    return Table(declared["name"], declared["title"], preset, rows=_cells(preset, declared["rows"], f"{where}.rows"),
                 cols=_cells(preset, declared.get("cols") or [{}], f"{where}.cols"),
                 stats=tuple(_stat(stat, f"{where}.stats") for stat in declared.get("stats") or ["final"]),
                 where=dict(declared.get("where") or {}), reference=dict(declared.get("reference") or {}),
                 note=declared.get("note", ""), drawn_only=check_bool(f"{where}.drawn_only",
                                                                      declared.get("drawn_only", False)))


def tables_of(declared: list[tuple[str, dict]]) -> dict[str, Table]:
    """Name → Table of every (preset, declaration); a name declared twice is refused, naming both presets."""
    tables: dict[str, Table] = {}
    for preset, table in declared:
        built = declared_table(preset, table)
        if built.name in tables:
            raise ConfigError(f"{preset}.yaml: artefact.tables[{built.name}] repeats a table name of "
                              f"{tables[built.name].preset}.yaml; a table's name is its files' and must be unique")
        tables[built.name] = built
    return tables


TABLES: dict[str, Table] = tables_of(artefacts.declared_tables())


def row_values(table: str, key: str) -> tuple:
    """The values of ``key`` in a declared table's rows, in their order, each once: a figure of the same comparison
    draws the methods or variants its table declares, not a second list of them."""
    return tuple(dict.fromkeys(row[key] for row in TABLES[table].rows if key in row))


BASELINES = values_of("beyond_terminal_baselines", "algorithm")  # the methods its table compares
RELAPSE_VARIANTS = row_values("beyond_relapse", "experiment")  # the optimizers its table pairs
SPREAD_VARIANTS = row_values("beyond_amplification", "experiment")  # the standardisation variants its table pairs


def panels(preset: str, rows: tuple[dict, ...], cols: tuple[dict, ...], series, where: dict | None = None,
           **kwargs) -> tuple[Panel, ...]:
    """A grid of curve panels, one per (row, col), titled by their keys; ``where`` pins keys of every panel (not in
    its title)."""
    return tuple(Panel(preset, series, title=label({**row, **col}), where={**(where or {}), **row, **col}, **kwargs)
                 for row in rows for col in cols)


def _sweep_figure(name: str, title: str, preset: str, key: str, caption: str, **where) -> Figure:
    """Figs 12/15: TPO and GRPO learning curves across the preset's ``key`` and the final error against it."""
    values = values_of(preset, key)
    curves = tuple(Panel(preset, by_value(key, values), title=f"({tag}) {ALGORITHM_LABEL[a]}",
                         where={"algorithm.name": a, **where}) for tag, a in (("a", "tpo"), ("b", "grpo")))
    final = Panel(preset, by_algorithm("tpo", "grpo"), title="(c) Final error", kind="final", x=key, xs=values,
                  where=where, logx=True, logy=True, paper=name, ylabel="Final exact-match error")
    return Figure(name, title, (*curves, final), caption=caption)


FIG9_MODELS = (("qwen3_1_7b", "Qwen3-1.7B"), ("r1_distill_qwen_1_5b", "R1-Distill-Qwen-1.5B"))
FIG9_TASKS = (("fig9_gsm8k", "GSM8K", "test_accuracy", "Test accuracy"),
              ("fig9_graph_colouring", "graph colouring", "reward_mean", "Mean score"),
              ("fig9_knights_knaves", "Knights & Knaves", "reward_mean", "Mean score"))
DEMO_TABULAR = ("tpo", "dg", "grpo", "pg")  # conf/experiment/demo_tabular.yaml's sweep
DEMO_MNIST = ("tpo", "dg", "group_pg", "grpo", "pg")  # conf/experiment/demo_mnist.yaml's sweep


def _tabular_figure(name: str, title: str, preset: str, series: tuple[Series, ...], misaligned_to: str,
                    caption: str, **where) -> Figure:
    """Figs 2-3 and the demo's bandits: error and misalignment curves, both on log axes."""
    return Figure(name, title, (
        Panel(preset, series, title="(a) Error", where=where, logy=True),
        Panel(preset, series, title=f"(b) Misalignment to {misaligned_to}", where=where, metrics=("misalignment",),
              logy=True, ylabel="Misalignment (1 − cos)")), caption=caption)


FIGURES: dict[str, Figure] = {f.name: f for f in (
    Figure("fig1", "Fig 1 — TPO matches baselines on easy tasks and wins under sparse reward", (
        Panel("fig4_mnist", by_algorithm("tpo", "grpo", "dg"), title="(a) MNIST contextual bandit", logy=True,
              ylabel="Test error"),
        Panel("fig1b_sparse", by_algorithm("tpo", "grpo", "dg"), title="(b) Token reversal, terminal reward",
              ylim=(0.0, 1.05), ylabel="Exact-match error", smooth=40)),
           caption="(a) on a log axis, so that GRPO's first steps show beside TPO's and DG's end; (b) each seed's "
                   "curve smoothed by a 40-episode causal moving average left-padded with its first value "
                   "(docs/reproduction.md §6.7)."),
    _tabular_figure("fig2", "Fig 2 — single-context bandit (K=100, B=100)", "fig2_tabular_single",
                    by_algorithm("tpo", "dg", "grpo", "pg"), "the PG oracle",
                    "Error and misalignment logged before each step (docs/reproduction.md §6.1)."),
    _tabular_figure("fig3", "Fig 3 — multi-context bandit (N=100, K=10, exact)", "fig3_tabular_multi",
                    by_algorithm("tpo", "dg", "grpo", "pg", "ce"), "CE",
                    "Error logged after each step; misalignment at the pre-step policy (docs/reproduction.md §6.2)."),
    Figure("fig4", "Fig 4 — MNIST contextual bandit", (
        Panel("fig4_mnist", by_algorithm("tpo", "dg", "group_pg", "grpo", "pg"), title="(a) Learning curves",
              logy=True, ylabel="Test error"),
        Panel("fig4_mnist", by_algorithm("tpo", "dg"), title="(b) Surplus gain at step 2,000", kind="mechanism",
              ylabel="Surplus (exact − scalar)", paper="fig4b")),
           caption="(b) misclassified test examples binned by wrong-class concentration (docs/reproduction.md "
                   "§6.4); PG and Group PG are not drawn: their update is the scalar one, so their surplus is 0 by "
                   "construction."),
    Figure("fig5", "Fig 5 — token reversal, bag-of-tokens, K=8 token candidates",
           panels("table1_vocab_sweep", ({},), swept("table1_vocab_sweep", "task.V"),
                  by_swept("table1_vocab_sweep", "algorithm"), ylabel="Token error")),
    Figure("fig6", "Fig 6 — task variations, prompt- and interaction-matched",
           panels("fig6_variations", swept("fig6_variations", "task.match", "task.reward"),
                  swept("fig6_variations", "task.target"), by_swept("fig6_variations", "algorithm")),
           ncols=4),
    Figure("fig7", "Fig 7 — terminal reward, prompt- and interaction-matched",
           panels("table3_terminal", swept("table3_terminal", "task.match"), swept("table3_terminal", "task.H"),
                  by_swept("table3_terminal", "algorithm"), ylabel="Exact-match error"),
           ncols=4),
    Figure("fig8", "Fig 8 — anchor and target-matching ablations (prompt-matched)",
           panels("fig8_ablations", ({},), swept("fig8_ablations", "task.H"),
                  by_swept("fig8_ablations", "algorithm"), where=PROMPT_MATCHED,
                  ylabel="Exact-match error")),
    Figure("fig10", "Fig 10 — TPO's gradient self-extinguishes; GRPO's does not (H=8, K=32)", (
        Panel("fig10_diagnostics", section4("tpo", "tpo_1ep", "grpo", "ppo", "dg"),
              title="(a) First-epoch gradient norm (log scale)", metrics=("grad_norm",), ylabel="‖g‖₂", logy=True),
        Panel("fig10_diagnostics", section4("tpo", "tpo_1ep", "grpo"), title="(b) Weight: winners (solid), losers "
              "(dashed)", metrics=("weight_winners", "weight_losers"), ylabel="Weight proxy", smooth=50, centred=True)),
           caption="(a) On a log scale, so that TPO's spikes and their decay show beside GRPO's larger norms. "
                   "(b) TPO: mean target mass q; GRPO: mean |A|; centred 50-episode moving average "
                   "(docs/reproduction.md §6.9). Line style marks the metric here, not the algorithm."),
    Figure("fig11", "Fig 11 — informative groups are rare early; TPO removes all-fail groups fastest", (
        Panel("fig10_diagnostics", section4("tpo", "tpo_1ep", "grpo", "grpo_no_kl"), title="(a) All-fail groups",
              metrics=("all_fail",), ylabel="Fraction", smooth=50, centred=True),
        Panel("fig10_diagnostics", section4(*_S4), title="(b) Prompts with a success", metrics=("frac_success",),
              ylabel="Fraction", smooth=50, centred=True)),
           caption="All-fail = 1 − frac_success for grouped methods (docs/reproduction.md §14.9); for PPO and "
                   "DG, (b) is the fraction of successful rollouts; centred 50-episode average."),
    _sweep_figure("fig12", "Fig 12 — group size K (H=8, 4 epochs)", "fig12_k_sweep", "task.K",
                  "(c) final error vs K; crosses: paper values."),
    Figure("fig13", "Fig 13 — zero-variance masking (H=8, K=32, 4 epochs)", (
        Panel("fig13_masking", by_algorithm("tpo", "grpo", "grpo_masked"), title="(a) Learning curves", where=K32,
              ylabel="Exact-match error"),
        Panel("fig13_masking", by_algorithm("tpo", "grpo", "grpo_masked"), title="(b) Final error", kind="bars",
              where=K32, logy=True, paper="fig13", ylabel="Final exact-match error")),
           caption="(b) crosses: paper values."),
    Figure("fig14", "Fig 14 — multi-epoch extraction (H=8, K=32)", tuple(
        Panel("fig10_diagnostics", section4("tpo", "tpo_1ep", "dg"), title=title, metrics=(metric,),
              logy=metric == "error", ylabel=ylabel)
        for title, metric, ylabel in (("(a) Error", "error", "Exact-match error"),
                                      ("(b) Gradient norm", "grad_norm", "‖g‖₂"))),
           caption="TPO (1 ep) is the fig10_diagnostics_tpo_1ep preset, drawn dotted in TPO's colour. GRPO, GRPO "
                   "(no KL) and PPO, rows of the table beside it, are not drawn: the paper's Fig 14 draws TPO (4 ep), "
                   "TPO (1 ep) and DG only (docs/reproduction.md §6.9); their gradient norms are in Fig 10(a), their "
                   "success fractions in Fig 11(b)."),
    Figure("fig14_seeds", "Fig 14, seed by seed — each seed's error under the seed mean (H=8, K=32)", tuple(
        Panel("fig10_diagnostics", section4(name), title=title, kind="seeds", ylabel="Exact-match error")
        for name, title in (("tpo", "(a) TPO (4 ep)"), ("tpo_1ep", "(b) TPO (1 ep)"), ("dg", "(c) DG (1 ep)"))),
           caption="Thin lines: one seed each; thick line: the seed mean, the curve of Fig 14(a). Not a figure of "
                   "the paper: the per-seed view of its Fig 14."),
    _sweep_figure("fig15", "Fig 15 — epochs per batch (H=8, K=32)", "fig15_epoch_sweep", "algorithm.epochs",
                  "(c) final error vs epochs; crosses: paper values.", **K32),
    Figure("fig16", "Fig 16 — TPO temperature η (reverse copy, bag-of-tokens, V=2, H=10)", (
        Panel("table5_eta_sweep", by_swept("table5_eta_sweep", "algorithm.eta"), title="(a) Learning curves",
              where={"algorithm.name": "tpo"}, ylabel="Token error"),
        Panel("table5_eta_sweep", by_algorithm("tpo"), title="(b) Final error", kind="final", x="algorithm.eta",
              xs=values_of("table5_eta_sweep", "algorithm.eta"), logx=True, paper="table5",
              ylabel="Final token error")),
           caption="(b) crosses: paper values (Table 5)."),
    Figure("beyond_terminal", "Beyond the paper — TPO and modern group-RL baselines (terminal reward, "
           "prompt-matched H = 7)", (
        Panel("beyond_terminal_baselines", by_algorithm(*BASELINES), title="(a) Exact-match error",
              where={"task.H": 7, "task.match": "prompts"}, ylim=(0.0, 1.05), ylabel="Exact-match error",
              smooth=20),
        Panel("beyond_terminal_baselines", by_algorithm(*BASELINES), title="(b) Final error", kind="bars",
              where={"task.H": 7, "task.match": "prompts"}, ylabel="Final exact-match error")),
           caption="(a) each seed's curve smoothed by a 20-episode causal moving average; (b) at the last episode. "
                   "TPO and GRPO are Table 3's prompt-matched H = 7 runs (same seeds)."),
    Figure("beyond_relapse", "Beyond the paper — relapse after convergence: optimizer guards vs Muon (terminal "
           "reward, prompt-matched H = 7)", tuple(
        Panel("beyond_relapse", by_value("experiment", RELAPSE_VARIANTS), title=f"({tag}) {ALGORITHM_LABEL[name]}",
              where={"algorithm.name": name, "task.H": 7, "task.match": "prompts"}, ylim=(0.0, 1.05),
              ylabel="Exact-match error", smooth=20) for tag, name in (("a", "tpo"), ("b", "grpo"))),
           caption="Each seed's curve smoothed by a 20-episode causal moving average. Muon is the reference "
                   "optimizer (Table 3's runs, same seeds); the guards and Adam change only the optimizer."),
    Figure("beyond_amplification", "Beyond the paper — low-variance groups: standardisation variants under "
           "reward noise (terminal reward, H = 6)",
           panels("beyond_amplification", swept("beyond_amplification", "algorithm"),
                  swept("beyond_amplification", "task.reward_noise"),
                  by_value("experiment", SPREAD_VARIANTS), ylim=(0.0, 1.05), ylabel="Exact-match error", smooth=20),
           ncols=3, caption="Each seed's curve smoothed by a 20-episode causal moving average. Noise: N(0, σ²) on "
                            "every score the algorithm reads; the error is measured on the clean reward."),
    Figure("fig9", "Fig 9 — LLM RLVR: TPO vs GRPO (K=16, batch 16, AdamW 1e-5)", tuple(
        Panel(preset, by_algorithm("tpo", "grpo"), title=f"{task} — {model_label}", where={"model.name": model},
              metrics=(metric,), ylabel=ylabel, ylim=(0.0, 1.0))
        for model, model_label in FIG9_MODELS for preset, task, metric, ylabel in FIG9_TASKS), ncols=3,
           caption="GSM8K: greedy held-out test accuracy every 5 steps; graph colouring and Knights & Knaves: mean "
                   "score of the step's training rollouts (docs/reproduction.md §6.13)."),
    *(_llm_learn_figure(preset, size) for preset, size in LLM_LEARN),
    Figure("demo_llm", "LLM CPU demo — SmolLM2-135M, graph colouring (4 vertices), K=4", (
        Panel("demo_llm", by_algorithm("tpo", "grpo"), title="(a) Mean score", metrics=("reward_mean",),
              ylabel="Mean score"),
        Panel("demo_llm", by_algorithm("tpo", "grpo"), title="(b) Zero-variance groups", metrics=("frac_zero_var",),
              ylabel="Fraction"),
        Panel("demo_llm", by_algorithm("tpo", "grpo"), title="(c) First-update gradient norm",
              metrics=("grad_norm",), ylabel="‖g‖₂ (before clipping)")),
           caption="Training rollouts of each step; one seed (make demo-llm)."),
    # the main job (make demo): conf/experiment/demo_tabular.yaml, demo_mnist.yaml and demo_sparse.yaml
    _tabular_figure("demo_tabular_single", "Demo: single-context bandit (K=100, B=100)", "demo_tabular",
                    by_algorithm(*DEMO_TABULAR), "the PG oracle", "The reduced Fig 2 of `make demo` (the paper: 100 "
                    "seeds).", **{"task.name": "tabular_single"}),
    _tabular_figure("demo_tabular_multi", "Demo: multi-context bandit (N=100, K=10, exact)", "demo_tabular",
                    by_algorithm(*DEMO_TABULAR), "CE", "The reduced Fig 3 of `make demo` (the paper: 100 seeds).",
                    **{"task.name": "tabular_multi"}),
    Figure("demo_mnist_bandit", "Demo: MNIST bandit", (
        Panel("demo_mnist", by_algorithm(*DEMO_MNIST), title="Learning curves", logy=True, ylabel="Test error"),),
           caption="The reduced Fig 4a of `make demo` (the paper: 20 seeds × 10,000 steps)."),
    Figure("demo_sparse_token_reversal", "Demo: token reversal, terminal reward (H = 6)", (
        Panel("demo_sparse", by_algorithm("tpo", "grpo", "dg"), title="Learning curves", ylim=(0.0, 1.05),
              ylabel="Exact-match error"),),
           caption="The reduced Fig 1b of `make demo` (the paper: H = 10, 20 seeds × 2,000 episodes)."),
)}
