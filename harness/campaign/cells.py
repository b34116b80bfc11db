"""A queue cell composed: its identity, whether its runs would start, cached across processes (``CELLS``)."""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path

from harness import locations
from harness.campaign.jobs import FIXED
from harness.campaign.text import one_line

CELL_CACHE = "campaign-cells"  # under the user's cache: each cell's composed identity and refusal, by source
SOURCES = ("harness", "algorithms", "tasks", "common")  # packages whose code composes and checks a cell


class CellError(Exception):
    """A cell whose overrides do not compose (one line: what Hydra or the harness said)."""


@functools.cache
def source_fingerprint() -> str:
    """sha256 of every config and source file that composing or checking a cell reads (conf/, and the .py and .yaml
    files of ``SOURCES``) and of the installed distributions' names and versions (Hydra, its plugins, torch): an
    edit or an upgrade gives another fingerprint, so a cached cell is never stale."""
    import hashlib
    import importlib.metadata
    import importlib.util

    roots = [locations.CONF, *(Path(importlib.util.find_spec(name).submodule_search_locations[0])
                               for name in SOURCES)]
    digest = hashlib.sha256()
    installed = sorted(f"{dist.metadata['Name']}=={dist.version}" for dist in importlib.metadata.distributions())
    digest.update("\n".join(installed).encode())
    for root in roots:
        for path in sorted(p for pattern in ("*.py", "*.yaml") for p in root.rglob(pattern)
                           if "__pycache__" not in p.parts):
            digest.update(f"{path.relative_to(root.parent)}\0{path.stat().st_size}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:24]


class CellCache:
    """Composed cells and checked exported runs, kept across processes (``<cache>/campaign-cells/<fingerprint>.json``;
    the cache is ``$TPO_BENCH_CACHE``, else ``~/.cache/tpo-bench``): Hydra takes about half a second a composition
    and a queue holds hundreds of cells and exported runs, so a campaign's start (``--dry-run`` too) would otherwise
    spend minutes redoing what it did last time. Cells are keyed by preset and overrides, runs by the paths, sizes,
    inodes and change times of every file their check reads, all under the fingerprint of the code, configs and
    installed packages (``source_fingerprint``). Only what the code and configs alone decide is kept: an identity,
    a cell that would start, a run's check (a refusal can depend on this machine, such as MNIST not installed, and
    is made again). An unreadable file is ignored and rewritten; the ``KEEP`` newest files are kept."""

    KEEP = 4  # fingerprints' files: the code of a few checkouts or versions

    def __init__(self):
        self.entries: dict[str, dict] | None = None
        self.changed = False

    def path(self) -> Path:
        from tasks.mnist_data import cache_root

        return cache_root() / CELL_CACHE / f"{source_fingerprint()}.json"

    def get(self, key: list, compose: Callable[[], dict]) -> dict:
        """The entry cached under ``key`` (JSON values), else ``compose()``'s, remembered."""
        if self.entries is None:
            self.entries = self._read()
        key = json.dumps(key)
        if key not in self.entries:
            self.entries[key] = compose()
            self.changed = True
        return self.entries[key]

    def _read(self) -> dict:
        """The entries of this fingerprint's file; none when it is missing or unreadable."""
        try:
            entries = json.loads(self.path().read_text())
        except (OSError, ValueError):
            return {}
        return entries if isinstance(entries, dict) else {}

    def set(self, key: list, entry: dict) -> None:
        self.get(key, lambda: entry)
        self.entries[json.dumps(key)] = entry
        self.changed = True

    def save(self) -> None:
        """Write what was composed since the last save, whole (a temporary renamed into place); a cache that
        cannot be written only costs the next start its compositions."""
        if not self.changed:
            return
        path = self.path()
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(json.dumps(self.entries))
            os.replace(temporary, path)
            self.changed = False
            older = sorted(path.parent.glob("*.json"), key=lambda other: other.stat().st_mtime, reverse=True)
            for other in older[self.KEEP:]:
                other.unlink(missing_ok=True)
        except OSError:
            temporary.unlink(missing_ok=True)


CELLS = CellCache()  # other modules read it as ``cells.CELLS``: a test (or a tool) may put another in its place


def cell_identity(preset: str, overrides: tuple[str, ...]) -> dict:
    """The identity (``harness.rundir.identity``) of the cell's runs as ``Job.command`` composes them; CellError
    when the overrides do not compose or resolve. Composed once per code and config version (``CellCache``)."""
    def compose() -> dict:
        from harness import rundir
        from harness.config import compose_config

        try:
            return {"identity": rundir.identity(compose_config([f"experiment={preset}", *overrides, *FIXED]))}
        except Exception as error:  # noqa: BLE001 - Hydra, OmegaConf and the harness raise many kinds: one line
            return {"error": one_line(error)}

    entry = CELLS.get(["identity", preset, list(overrides)], compose)
    if "error" in entry:
        raise CellError(entry["error"])
    return copy.deepcopy(entry["identity"])


def cell_refusal(preset: str, overrides: tuple[str, ...]) -> str | None:
    """Why a run of the cell would be refused at its start (a value its task or algorithm rejects, such as
    ``task.alpha=abc``: it composes, but ``build_task`` checks it), in one line; None when it would start. Built on
    PyTorch's ``meta`` device: nothing is allocated. A cell that would start is remembered per code and config
    version (``CellCache``); a refusal is checked again each time (it may be this machine's: data not installed)."""
    key = ["starts", preset, list(overrides)]
    if CELLS.get(key, lambda: {}).get("starts"):
        return None
    import torch

    from harness.config import build_task, compose_config

    try:
        build_task(compose_config([f"experiment={preset}", *overrides, *FIXED]), device=torch.device("meta"))
    except Exception as error:  # noqa: BLE001 - the harness's ConfigError, or what a task raises: one line
        return one_line(error)
    CELLS.set(key, {"starts": True})
    return None


def node_refusal(preset: str, overrides: tuple[str, ...]) -> str | None:
    """Why the cell's runs could not start on a node without network (an LLM cell's model or data neither in this
    machine's Hugging Face caches nor reachable: ``harness.llm.offline``), in one line; None when they can. What it
    fetched is said in a line each."""
    if cell_identity(preset, overrides).get("task", {}).get("kind") != "llm":
        return None
    from common.checks import ConfigError
    from harness.config import compose_config
    from harness.llm.offline import node_ready

    try:
        for line in node_ready(compose_config([f"experiment={preset}", *overrides, *FIXED])):
            print(f"{preset} {' '.join(overrides)}: {line}", flush=True)
    except ConfigError as error:
        return one_line(error)
    return None


def preset_steps(preset: str, overrides: tuple[str, ...]) -> int:
    return int(cell_identity(preset, overrides)["task"]["steps"])
