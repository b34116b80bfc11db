"""Each artefact declared once, in its preset: ``conf/experiment/<preset>.yaml`` holds the runs (the config and its
sweep, for Hydra) and, under ``artefact:``, what the report and the campaign make of them: the tables laid out on
the sweep's axes, and each campaign queue's entries for its cells (which points, at which priority and estimate).
The paper's published values are ``results/paper/paper_numbers.csv``'s rows under the table's name.

Read from the YAML text without composing (no PyTorch: the campaign reads it before anything loads), and never part
of a run's configuration: ``train`` drops it and the run identity ignores it (``harness.identity.NOT_IDENTITY``).
"""

from __future__ import annotations

import re
from functools import cache

import yaml

from common.checks import ConfigError
from harness import locations

KEY = "artefact"
PARTS = {"tables": "the report's tables of the preset's runs (harness/report/specs.py: Table)",
         "campaign": "each campaign queue's entries for the preset's cells: {<queue>: [entry, ...]}"}
PRESETS = locations.CONF / "experiment"
QUEUES = locations.CONF / "campaign"


@cache
def declaration(preset: str) -> dict:
    """The ``artefact:`` block of a preset (empty when it declares none); a one-line ConfigError for YAML that does
    not parse, an unknown part, a part of the wrong shape or a queue that has no file."""
    path = PRESETS / f"{preset}.yaml"
    try:
        block = (yaml.safe_load(path.read_text()) or {}).get(KEY) or {}
    except yaml.YAMLError as error:
        raise ConfigError(f"{path.name} is not valid YAML: {' '.join(str(error).split())}") from None
    where = f"{path.name}: {KEY}"
    if not isinstance(block, dict):
        raise ConfigError(f"{where}={block!r} is not valid; expected a mapping of: {', '.join(PARTS)}")
    unknown = [part for part in block if part not in PARTS]
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]} is not valid; valid choices: {', '.join(PARTS)}")
    tables = block.get("tables") or []
    if not isinstance(tables, list) or not all(isinstance(table, dict) for table in tables):
        raise ConfigError(f"{where}.tables is not valid; expected a list of tables (mappings)")
    _check_campaign(block.get("campaign") or {}, f"{where}.campaign")
    return block


def _check_campaign(campaign, where: str) -> None:
    """Each queue a preset declares entries for has its file, and its entries are mappings with an integer order."""
    if not isinstance(campaign, dict):
        raise ConfigError(f"{where} is not valid; expected a mapping of queue names to lists of entries")
    known = queues()
    for queue, entries in campaign.items():
        if queue not in known:
            raise ConfigError(f"{where}.{queue} is not a campaign queue; valid choices: {', '.join(known)}")
        if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
            raise ConfigError(f"{where}.{queue} is not valid; expected a list of entries (mappings)")
        for index, entry in enumerate(entries):
            order = entry.get("order", 0)
            if not isinstance(order, int) or isinstance(order, bool):
                raise ConfigError(f"{where}.{queue}[{index}].order={entry['order']!r} is not valid; expected an "
                                  "integer (its place among its priority's entries)")


def presets() -> list[str]:
    """The experiment presets, ``conf/experiment/<name>.yaml``."""
    return sorted(path.stem for path in PRESETS.glob("*.yaml"))


def queues() -> list[str]:
    """The campaign queues, ``conf/campaign/<name>.yaml``."""
    return sorted(path.stem for path in QUEUES.glob("*.yaml"))


def declared_tables() -> list[tuple[str, dict]]:
    """(preset, table declaration) of every preset, presets by name, each preset's tables in its order."""
    return [(preset, table) for preset in presets() for table in declaration(preset).get("tables") or ()]


def _priority_rank(priority) -> tuple[str, int, str]:
    """P2 before P10; a label's letters first (B1 before P1), then its number."""
    match = re.fullmatch(r"([A-Za-z]*)(\d+)", str(priority))
    return (match[1], int(match[2]), "") if match else (str(priority), 0, str(priority))


def queue_entries(queue: str) -> list[tuple[str, int, dict]]:
    """(preset, index in its list, entry) of every entry the presets declare for a queue (``artefact.campaign.
    <queue>``), in the queue's order: by priority, then ``order`` (an entry's place among its priority's, for work
    that alternates between presets; default 0), then preset name and the preset's own order."""
    entries = []
    for preset in presets():
        for index, entry in enumerate((declaration(preset).get("campaign") or {}).get(queue) or ()):
            rank = (_priority_rank(entry.get("priority")), entry.get("order", 0), preset, index)
            entries.append((rank, (preset, index, {key: value for key, value in entry.items() if key != "order"})))
    return [entry for _, entry in sorted(entries, key=lambda pair: pair[0])]


def without_declaration(cfg):
    """A composed configuration less its preset's ``artefact`` block: what a run is, not how it is reported."""
    from omegaconf import open_dict

    if KEY not in cfg:
        return cfg
    cfg = cfg.copy()
    with open_dict(cfg):
        cfg.pop(KEY)
    return cfg
