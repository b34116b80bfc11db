"""The repository speaks for itself: no file cites a document, a folder or a piece of project history that a clone
does not have. Citations of the reproduction notes read "docs/reproduction.md §N"; history is told as what it means
("an earlier measurement", "an AMD EPYC (AVX2) machine"), never by a tracker or work-log number."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Outputs, not prose: images, documents, compressed data, notebooks (their outputs are regenerated).
SKIPPED_SUFFIXES = (".png", ".pdf", ".gz", ".ipynb")
# Written so that this file does not match itself.
FORBIDDEN = {
    "citation of an outside spec": re.compile(r"\bspec\s§", re.IGNORECASE),
    "issue number": re.compile(r"\bissue\s\d+", re.IGNORECASE),
    "work-session number": re.compile(r"\bsessions?\s\d+", re.IGNORECASE),
    "named host": re.compile(r"\b[Hh]ost\s[A-C]\b"),
    "path outside the repository": re.compile(r"\.\./shared\b"),
    "outside reference folder": re.compile(r"\bshared/referenc[e]"),
    "folder of the machine that wrote it": re.compile(r"(?<![\w*.~])/(?:work|root|home)/\w"),
}


def repository_files() -> list[Path]:
    """Tracked files plus new ones git does not ignore (so the check holds before a commit as after it)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode()
    return sorted({ROOT / name for name in listed.split("\0") if name})


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file, a skipped output or a file deleted from the work tree."""
    if path.suffix.lower() in SKIPPED_SUFFIXES or not path.is_file():
        return None
    data = path.read_bytes()
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def forbidden_hits(files: list[Path], root: Path = ROOT) -> list[str]:
    """``file:line: what (the matched text)`` for every forbidden pattern in ``files`` (named relative to ``root``)."""
    hits = []
    for path in files:
        text = text_of(path)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                for match in pattern.finditer(line):
                    hits.append(f"{path.relative_to(root)}:{number}: {what} ({match.group(0)!r})")
    return hits


def test_the_patterns_catch_what_they_should(tmp_path):
    samples = {
        # pieces joined at run time, so that this file does not match
        "hit.md": "see spec" + " §2.7; fixed in issue" + " 17 (sessions" + " 6-8, session" + " 9) on host" + " C; .."
                  + "/shared/data; shared/" + "reference/x.md; /wo" + "rk/main/results/runs",
        "clean.md": "see docs/reproduction.md §2.7; an AMD EPYC (AVX2) machine; the host's rounding; tasks/llm/data",
    }
    for name, text in samples.items():
        (tmp_path / name).write_text(text)
    hits = forbidden_hits(sorted(tmp_path.iterdir()), tmp_path)
    assert all(hit.startswith("hit.md:1: ") for hit in hits)
    assert sorted(hit.split(": ", 1)[1].split(" (")[0] for hit in hits) == sorted([
        "citation of an outside spec", "issue number", "work-session number", "work-session number", "named host",
        "path outside the repository", "outside reference folder", "folder of the machine that wrote it"])


def test_no_file_cites_outside_documents_or_project_history():
    hits = forbidden_hits(repository_files())
    counts: dict[str, int] = {}
    for hit in hits:
        name = hit.split(":", 1)[0]
        counts[name] = counts.get(name, 0) + 1
    summary = "\n".join(f"  {name}: {count}" for name, count in sorted(counts.items()))
    assert not hits, (f"{len(hits)} forbidden reference(s) in {len(counts)} file(s):\n{summary}\n"
                      + "\n".join(hits))


ARCHITECTURE = ROOT / "docs" / "architecture.md"
# a backticked repository path: a top-level folder of the project, then a file or folder name
_PATH = re.compile(r"`((?:algorithms|tasks|harness|bench|conf|results|tests|docs)/[\w./<>-]*)")


def cited_paths(text: str) -> list[str]:
    """Every repository path cited in backticks in ``text`` (a placeholder such as ``<id>`` makes it a pattern)."""
    return [match.group(1).split(" ")[0] for match in _PATH.finditer(text)]


def unresolved(paths: list[str], root: Path = ROOT) -> list[str]:
    """The cited paths that no file or folder under ``root`` matches (``<...>`` matches any one name)."""
    missing = []
    for path in paths:
        pattern = re.sub(r"<[^>]*>", "*", path.rstrip("/"))
        if not (list(root.glob(pattern)) if "*" in pattern else (root / pattern).exists()):
            missing.append(path)
    return missing


def test_the_architecture_page_cites_only_paths_that_exist():
    paths = cited_paths(ARCHITECTURE.read_text())
    assert len(paths) > 20  # the page is a map: it names the files
    assert not unresolved(paths), f"docs/architecture.md cites missing paths: {unresolved(paths)}"


def test_the_path_check_catches_a_missing_file():
    paths = cited_paths("the loop is in `harness/run.py`, the model in `tasks/models/nowhere.py`; "
                        "`conf/algorithm/<id>.yaml` per algorithm")
    assert paths == ["harness/run.py", "tasks/models/nowhere.py", "conf/algorithm/<id>.yaml"]
    assert unresolved(paths) == ["tasks/models/nowhere.py"]


def test_no_file_is_a_link_out_of_the_repository():
    """A link the repository carries leads into it: one to a machine's own folder (a worktree's ``.venv`` linked to
    another checkout's) breaks every clone, and checking it out over an ignored folder replaces that folder. Bug
    caught: ``.venv/`` in .gitignore matches a folder only, so a link named ``.venv`` was committed."""
    root = ROOT.resolve()
    outside = [str(path.relative_to(ROOT)) for path in repository_files()
               if path.is_symlink() and not path.resolve().is_relative_to(root)]
    assert outside == []
