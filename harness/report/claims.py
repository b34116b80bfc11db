"""Check what the hand-written summaries claim about their tables: the README's status labels, and every sentence
that counts paper values inside our intervals.

``python -m harness.report.claims [ROOT]`` (ROOT: the checkout, default the current folder) reads ``README.md`` and
every ``results/<preset>/conclusions.md`` and prints each claim its tables contradict as ``file:line: why``; exit 1
if there is any.

Status labels (the README's status table, one row per paper artefact, its results folder linked in the row). The
artefact's generated file in that folder (``Fig 10`` → ``fig10.caption.md``, ``Fig 4a`` → ``fig4.caption.md``;
a table named after a figure only where there is no caption; ``Table 1`` → ``table1.md``) says which of its lines or
cells are complete: a figure caption's provenance table gives each line's status, a table marks a short cell † and
an absent one ``missing``. One rule:

* ``reproduced at paper scale``: the file exists and every line and cell is complete (the presets are the paper's
  seeds × steps, so complete is paper scale);
* ``partial``: the file exists and at least one line or cell is not complete;
* ``not run``: no line or cell has runs.

Counts of paper values inside our intervals: "every paper value is inside our interval(s)", "N of M paper values
are inside" (the words between may name the values: "every MNIST paper value"). They are counted in the marks of
the tables the sentence summarises: the report's "(paper ✓)" / "(paper ✗)" cells, or an ``inside?`` column's
yes/no. A sentence of a ``conclusions.md`` counts the tables of its own section (from its heading to the next
heading of the same or a higher level, the heading's own claim included); a section without marks, and a README
line, count the generated tables of the results folder they link or live in. "every … inside … but …" cannot be
counted: write how many ("11 of 12 paper values inside; the exception: …").
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from harness import cli
from harness.report.quotes import generated_files, parse_tables

EVERY = re.compile(r"\b(?:every|all)\b(?:\s+[\w-]+){0,2}?\s+paper values?\b[^.;|]{0,40}?\binside\b", re.I)
COUNTED = re.compile(r"\b(\d+) of (\d+)\b(?:\s+[\w-]+){0,2}?\s+paper values?\b[^.;|]{0,40}?\binside\b", re.I)
BUT = re.compile(r"^[^.;|]{0,80}?\b(?:but|except)\b", re.I)
MARK = re.compile(r"\((?:[^()]*?)\s([✓✗])\)")
HEADING = re.compile(r"^(#+)\s")
LINKED_FOLDER = re.compile(r"\]\((?:\./)?results/([\w.-]+)/")
ARTEFACT = re.compile(r"^(Fig|Table)\s+(\d+)([a-z]?)$")
LABELS = ("reproduced at paper scale", "partial", "not run")
INCOMPLETE = ("partial", "missing", "failed", "conflict")


@dataclass(frozen=True)
class Problem:
    path: Path
    line: int
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.why}"


def marks(text: str) -> list[bool]:
    """Inside (True) / outside (False) of every paper value the markdown tables of ``text`` mark."""
    found = []
    for table in parse_tables(text):
        headers = [header.strip().lower() for header in table.header]
        column = headers.index("inside?") if "inside?" in headers else None
        for _, row in table.rows:
            if column is not None and column < len(row) and row[column].strip().lower() in ("yes", "no"):
                found.append(row[column].strip().lower() == "yes")
            found += [mark == "✓" for cell in row[1:] for mark in MARK.findall(cell)]
    return found


def folder_marks(folder: Path) -> list[bool]:
    """The marks of a results folder's generated tables (not its README, which repeats them)."""
    return [mark for path in generated_files(folder) if path.name != "README.md" for mark in marks(path.read_text())]


def count_claims(line: str) -> list[tuple[int | None, int | None, str]]:
    """(inside, of, words) of each claim in ``line``: None for "every" (all), or a "but" that cannot be counted."""
    claims = []
    for match in EVERY.finditer(line):
        after = line[match.end():]
        claims.append((None, None, match.group(0)) if not BUT.match(after) else (-1, -1, match.group(0)))
    claims += [(int(m.group(1)), int(m.group(2)), m.group(0)) for m in COUNTED.finditer(line)]
    return claims


def check_count(path: Path, number: int, claim: tuple[int | None, int | None, str], counted: list[bool],
                where: str) -> Problem | None:
    inside, of, words = claim
    if inside == -1:
        return Problem(path, number, f"\"{words} … but\" cannot be checked: say how many (\"N of M paper values "
                                     "inside\")")
    have = (sum(counted), len(counted))
    if not counted:
        return Problem(path, number, f"\"{words}\": {where} marks no paper value")
    if (inside is None and have[0] != have[1]) or (inside is not None and (inside, of) != have):
        return Problem(path, number, f"\"{words}\": {where} mark {have[0]} of {have[1]} inside")
    return None


def sections(lines: list[str]) -> list[tuple[int, int]]:
    """(first, end) line indices of the section each line belongs to (its nearest heading's, to the next heading of
    the same or a higher level); lines before any heading belong to the whole file."""
    spans, open_at = [(0, len(lines))] * len(lines), []
    for index, line in enumerate(lines):
        heading = HEADING.match(line)
        if heading:
            level = len(heading.group(1))
            end = next((j for j in range(index + 1, len(lines)) if (h := HEADING.match(lines[j]))
                        and len(h.group(1)) <= level), len(lines))
            open_at.append((index, end))
        current = [span for span in open_at if span[0] <= index < span[1]]
        if current:
            spans[index] = current[-1]
    return spans


def check_conclusions(path: Path) -> list[Problem]:
    lines = path.read_text().splitlines()
    problems, spans, whole = [], sections(lines), None
    for index, line in enumerate(lines):
        claims = count_claims(line)
        if not claims:
            continue
        first, end = spans[index]
        counted, where = marks("\n".join(lines[first:end])), "the tables of its section"
        if not counted:
            whole = folder_marks(path.parent) if whole is None else whole
            counted, where = whole, f"the generated tables of {path.parent.name}/"
        problems += [p for claim in claims if (p := check_count(path, index + 1, claim, counted, where))]
    return problems


def artefact_file(folder: Path, artefact: str) -> Path | None:
    """The generated file of a README artefact name in ``folder`` (None when there is none)."""
    match = ARTEFACT.match(artefact)
    if not match:
        return None
    kind, number, panel = match.group(1).lower(), match.group(2), match.group(3)
    names = ([f"table{number}.md"] if kind == "table" else
             [f"fig{number}{panel}.caption.md", f"fig{number}.caption.md", f"fig{number}{panel}.md"])
    return next((folder / name for name in names if (folder / name).exists()), None)


def completeness(path: Path) -> tuple[int, int]:
    """(complete, all) lines or cells of a generated figure caption or table."""
    text = path.read_text()
    statuses = []
    for table in parse_tables(text):
        headers = [header.strip().lower() for header in table.header]
        if "status" in headers:  # a figure's provenance: one row per line
            statuses += [(row[headers.index("status")].split() or ["missing"])[0] for _, row in table.rows]
        elif not path.name.endswith(".caption.md"):
            statuses += ["partial" if "†" in cell else cell.split()[0] if cell.split() else "missing"
                         for _, row in table.rows for cell in row[1:] if cell.strip() not in ("ref", "–")]
    return sum(status not in INCOMPLETE for status in statuses), len(statuses)


def check_status_row(readme: Path, number: int, cells: list[str], root: Path) -> Problem | None:
    artefact, status = cells[0], cells[2]
    label = next((label for label in LABELS if status.startswith(label)), None)
    folder = LINKED_FOLDER.search(cells[-1])
    if label is None or folder is None or not ARTEFACT.match(artefact):
        return None
    path = artefact_file(root / "results" / folder.group(1), artefact)
    complete, total = completeness(path) if path else (0, 0)
    where = f"{path.relative_to(root)}" if path else f"results/{folder.group(1)}/ has no file of {artefact}"
    if label == LABELS[0] and (not total or complete < total):
        return Problem(readme, number, f"{artefact} is labelled \"{label}\" but {where} has {complete} of {total} "
                                       "lines or cells complete")
    if label == "partial" and (not total or complete == total):
        return Problem(readme, number, f"{artefact} is labelled partial but {where} has {complete} of {total} lines "
                                       "or cells complete")
    if label == "not run" and complete:
        return Problem(readme, number, f"{artefact} is labelled \"not run\" but {where} has {complete} complete")
    return None


def check_readme(path: Path, root: Path) -> list[Problem]:
    problems = []
    for index, line in enumerate(path.read_text().splitlines()):
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if len(cells) >= 5 and (problem := check_status_row(path, index + 1, cells, root)):
                problems.append(problem)
        claims = count_claims(line)
        folder = LINKED_FOLDER.search(line)
        if claims and folder:
            counted = folder_marks(root / "results" / folder.group(1))
            where = f"the generated tables of results/{folder.group(1)}/"
            problems += [p for claim in claims if (p := check_count(path, index + 1, claim, counted, where))]
    return problems


def check(root: Path) -> list[Problem]:
    problems = check_readme(root / "README.md", root) if (root / "README.md").exists() else []
    for path in sorted((root / "results").glob("*/conclusions.md")):
        problems += check_conclusions(path)
    return problems


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> int:
    parser = cli.Parser(prog="python -m harness.report.claims", description=__doc__,
                        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root", nargs="?", type=Path, default=Path("."), help="the checkout (default: .)")
    args = parser.parse_args(argv)
    if not (args.root / "results").is_dir():
        parser.error(f"{args.root}: no results/ folder below it (give the checkout's root)")
    problems = check(args.root)
    for problem in problems:
        print(problem)
    print(f"{len(problems)} claim(s) contradicted by their tables" if problems else "every claim checked holds")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
