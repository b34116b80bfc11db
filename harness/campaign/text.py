"""How the campaign's lines name things: paths as committed reports print them, errors in one line."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent  # the repository, where runs and reports start


def shown(path: Path) -> str:
    """A path as committed reports print it (their command and run folders): relative to the repository when inside
    it, so the text does not depend on where the clone lives."""
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def one_line(error: BaseException) -> str:
    """``error`` in one line: its lines joined (else its type's name), and its cause's first line after it."""
    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip()) or type(error).__name__
    cause = error.__cause__ or error.__context__
    if cause is not None and str(cause).strip():
        text += f" ({str(cause).strip().splitlines()[0]})"
    return text
