"""Runs → one tidy frame → the paper's tables and figures, beside the paper's own numbers.

    python -m harness.report multirun/table3_terminal/<time> [more sweep folders] --out results/table3

Modules: ``load`` (run directories and W&B → frames), ``stats`` (docs/reproduction.md §7 rules, bootstrap, paired
comparisons), ``specs`` (every table and figure as data), ``paper`` (published numbers), ``tables``, ``figures``,
``build`` (``write_report``), ``synthetic`` (fake run directories for tests, the bench and the notebook),
``dynamics`` (how each seed gets where it ends: solve and relapse events, relapse onsets, endings; its commands over
cell folders are ``relapses`` and ``endings``), ``wandb_workspace`` (a saved W&B workspace of the live mirror's runs:
``--wandb-workspace``). Names below are imported lazily so that ``python -m harness.report`` can pin BLAS threads
before numpy loads.
"""

import importlib

_EXPORTS = {
    "write_report": "build", "results_table": "build", "mechanism_table": "build", "ALGORITHM_STYLE": "figures",
    "Drawer": "figures", "write_figure": "figures", "load_runs": "load", "load_wandb": "load", "FIGURES": "specs",
    "TABLES": "specs", "Stat": "specs", "SeedMatrix": "stats", "paired": "stats", "summarize": "stats",
    "Report": "tables",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'harness.report' has no attribute {name!r}")
    return getattr(importlib.import_module(f"harness.report.{_EXPORTS[name]}"), name)
