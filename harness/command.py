"""``tpo-bench``, the command an installed package gives (pyproject.toml's ``[project.scripts]``): ``tpo-bench
<overrides>`` trains, as ``python -m harness <overrides>`` does in a checkout (``-m`` sweeps, ``--help`` lists the
config groups); ``tpo-bench <tool> …`` runs one of ``TOOLS``, as ``python -m harness.<module> …``."""

from __future__ import annotations

import importlib
import sys

from harness import process

TOOLS = {"report": "harness.report.__main__", "campaign": "harness.campaign", "scorecard": "harness.scorecard",
         "quotes": "harness.report.quotes", "claims": "harness.report.claims"}


def main() -> None:
    argv = sys.argv[1:]
    if argv and argv[0] in TOOLS:
        sys.argv = [f"tpo-bench {argv[0]}", *argv[1:]]
        sys.exit(importlib.import_module(TOOLS[argv[0]]).main(argv[1:]))
    process.exit_at_once_on_stop("Interrupted before the run started")  # while torch and Hydra load
    from harness.__main__ import launch

    launch(argv)
