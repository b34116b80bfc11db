"""Where the files the code reads at run time live. In a checkout: the repository's ``conf/`` and
``results/paper/``. In an installed wheel there is no repository, so pyproject.toml packs both inside the
``harness`` package (``harness/conf``, ``harness/paper``), and they are read from there."""

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
CHECKOUT = PACKAGE.parent  # the repository root, when the code runs from a checkout


def _shipped(packed: str, *in_checkout: str) -> Path:
    return PACKAGE / packed if (PACKAGE / packed).is_dir() else CHECKOUT.joinpath(*in_checkout)


CONF = _shipped("conf", "conf")  # Hydra's configs: algorithms, tasks, presets, campaign queues, scorecard suites
PAPER = _shipped("paper", "results", "paper")  # the paper's numbers (paper_numbers.csv) and per-seed curves
# Where the campaign and the scorecard keep runs and results by default: the checkout's runs/ and results/ (the
# committed runs), or the current folder's for an installed package.
HOME = Path.cwd() if (PACKAGE / "conf").is_dir() else CHECKOUT
