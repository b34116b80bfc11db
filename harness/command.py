"""``tpo-bench``, the command an installed package gives (pyproject.toml's ``[project.scripts]``): ``tpo-bench
<overrides>`` trains, as ``python -m harness <overrides>`` does in a checkout (``-m`` sweeps, ``--help`` lists the
config groups and, from conf/hydra/help/harness.yaml, these tools); ``tpo-bench <tool> …`` runs one of ``TOOLS``, as
``python -m harness.<module> …``; ``tpo-bench --version`` prints the installed version."""

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
    if argv == ["--version"]:
        from importlib.metadata import version

        print(f"tpo-bench {version('tpo-bench')}")
        return
    if argv and not argv[0].startswith(("-", "+", "~")) and "=" not in argv[0]:  # a word: a tool's name mistyped
        from common.checks import did_you_mean

        near = did_you_mean(argv[0], TOOLS)
        hint = f" did you mean {near}?" if near else ""
        print(f"Error: {argv[0]} is neither a tool nor an override (key=value);{hint} tools: {', '.join(TOOLS)} "
              "(tpo-bench <tool> --help)", file=sys.stderr)
        sys.exit(2)
    process.exit_at_once_on_stop("Interrupted before the run started")  # while torch and Hydra load
    from harness.__main__ import launch

    launch(argv)
