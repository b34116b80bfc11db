"""The command lines of the project's tools share one way to refuse: a single ``Error:`` line naming the flag and
what it accepts, exit status 2, before any work (argparse's own refusal prints the whole usage first, and a value
it parses, such as ``nan`` or ``1e400`` for a float, would otherwise reach the work). ``number`` gives each numeric
flag its range."""

from __future__ import annotations

import argparse
import functools
import math
import sys
from typing import Callable, NoReturn


class Parser(argparse.ArgumentParser):
    """argparse with one-line refusals (its subcommands' parsers too, which argparse makes of the same class).
    ``details``: where the full description lives; ``--help`` then shows only the description's first paragraph
    and points there (a tool's module docstring is its reference, too long for a terminal)."""

    def __init__(self, *args, details: str | None = None, **kwargs):
        if details is not None and kwargs.get("description"):
            kwargs["description"] = f"{kwargs['description'].split(chr(10) * 2)[0].strip()}\n\nDetails: {details}."
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.refuse(f"{message} ({self.prog} --help lists the arguments)")

    def refuse(self, message: str) -> NoReturn:
        """Refuse this command line in one line, with exit status 2."""
        self.exit(2, f"Error: {self.prog}: {message}\n")


def number(kind: type = float, low: float | None = None, high: float | None = None,
           above: float | None = None) -> Callable[[str], int | float]:
    """An argparse ``type``: a finite ``kind`` (int or float) with ``low <= value <= high`` and ``value > above``
    where given; the refusal says the range."""
    def show(bound: float) -> str:
        return f"{bound:g}" if kind is float else str(int(bound))

    bounds = [f"> {show(above)}" if above is not None else f">= {show(low)}" if low is not None else "",
              f"<= {show(high)}" if high is not None else ""]
    wanted = ("an integer" if kind is int else "a finite number") + (" " + " and ".join(b for b in bounds if b)
                                                                     if any(bounds) else "")

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}") from None
        if (not math.isfinite(value) or (low is not None and value < low) or (high is not None and value > high)
                or (above is not None and value <= above)):
            raise argparse.ArgumentTypeError(f"{text!r} is not {wanted}")
        return value

    parse.__name__ = kind.__name__
    return parse


class Refusal(SystemExit):
    """A refusal raised where a tool reads its input (a queue file, a run folder, an output folder): ``str`` is the
    one ``Error:`` line. Inside a tool's ``main`` (``refusals_exit_2``) it ends the tool with exit status 2; raised
    from a script of one's own, Python prints the line and exits 1."""

    def __init__(self, message: str):
        super().__init__(message if message.startswith("Error: ") else f"Error: {message}")


class Refused(SystemExit):
    """How a tool's ``main`` ends on a ``Refusal``: exit status 2, ``str`` still the line (for callers in Python)."""

    def __init__(self, line: str):
        super().__init__(2)
        self.line = line

    def __str__(self) -> str:
        return self.line


def refusals_exit_2(main: Callable) -> Callable:
    """Decorate a tool's ``main``: a ``Refusal`` from anywhere inside it prints its line and exits 2."""

    @functools.wraps(main)
    def run(*args, **kwargs):
        try:
            return main(*args, **kwargs)
        except Refusal as refusal:
            print(refusal, file=sys.stderr)
            raise Refused(str(refusal)) from None

    return run
