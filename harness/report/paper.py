"""The paper's published numbers (``results/paper/paper_numbers.csv``) and how a cell finds its own.

One CSV row per number, as printed: ``artefact`` (table name in specs.TABLES), ``stat`` (Stat.name), ``cell``
(space-separated ``key=value`` pairs; a subset of the cell's key), ``value`` (as printed: "6.9", "never", "−"),
``low``/``high`` (bounds when the paper gives a range or an inequality), ``unit`` (% | steps | value), ``source``
and ``note``. A printed value stands for its rounding interval (6.9% → [6.85, 6.95]%), so "inside a rerun's interval"
means the two intervals overlap.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from harness import locations

PAPER_FILE = locations.PAPER / "paper_numbers.csv"


@dataclass(frozen=True)
class PaperValue:
    text: str
    low: float  # in the report's units: fractions for %, steps, raw values
    high: float
    note: str

    def overlaps(self, low: float, high: float) -> bool | None:
        if math.isnan(low) or math.isnan(high):
            return None
        return self.low <= high and self.high >= low


def parse_cell(text: str) -> dict:
    pairs = (item.split("=", 1) for item in text.split())
    return {key: _number(value) for key, value in pairs}


def _number(text: str):
    try:
        return float(text)
    except ValueError:
        return text


def _bounds(text: str, unit: str, rounded: bool = True) -> tuple[float, float]:
    """The interval a printed number stands for (its rounding interval unless it is a stated bound), report units."""
    if text == "never":
        return math.inf, math.inf
    scale = 0.01 if unit == "%" else 1.0
    decimals = len(text.split(".")[1]) if "." in text else 0
    half = 0.5 * 10.0 ** -decimals if rounded and unit != "steps" else 0.0
    value = float(text)
    return (value - half) * scale, (value + half) * scale


def _value(row: pd.Series) -> PaperValue:
    low_text, high_text, value = row["low"], row["high"], row["value"]
    if low_text or high_text:
        low = _bounds(low_text, row["unit"], rounded=False)[0] if low_text else -math.inf
        high = _bounds(high_text, row["unit"], rounded=False)[1] if high_text else math.inf
        text = value or (f"{low_text}–{high_text}" if low_text and high_text else
                         f"> {low_text}" if low_text else f"< {high_text}")
    else:
        low, high = _bounds(value, row["unit"])
        text = value
    return PaperValue(text, low, high, row["note"])


@functools.cache
def paper_numbers(path: Path = PAPER_FILE) -> pd.DataFrame:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False, comment="#")
    frame["key"] = frame["cell"].map(parse_cell)
    return frame


def artefacts(path: Path = PAPER_FILE) -> set[str]:
    """The tables the paper publishes numbers for (a preset of one runs the paper's seeds and steps)."""
    return set(paper_numbers(path).artefact) if path.exists() else set()


def _same(a, b) -> bool:
    return a == b or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and float(a) == float(b))


def lookup(artefact: str, stat: str, key: dict, path: Path = PAPER_FILE) -> PaperValue | None:
    """The published number for a cell: the row of this artefact and stat whose keys all equal the cell's."""
    if not path.exists():
        return None
    frame = paper_numbers(path)
    rows = frame[(frame.artefact == artefact) & (frame.stat == stat)]
    for _, row in rows.iterrows():
        if all(name in key and _same(key[name], value) for name, value in row["key"].items()):
            return _value(row)
    return None
