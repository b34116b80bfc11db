"""A setting declared once: its default, its valid values and a one-line doc, as a field of a frozen dataclass. The
config node is checked against the declarations once (``build``: an unknown key, a bad value → a one-line
ConfigError naming the key and what is valid) and the typed values are what the code reads; a test holds each YAML
to its declarations. Algorithms' hyperparameters (``algorithms/hyperparameters.py``) and tasks' settings
(``tasks/base.py``) are declared this way."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any

from common.checks import ConfigError, check_bool, check_choice, check_number, did_you_mean


def setting(default: Any, doc: str, *, choices: tuple | type[Enum] | None = None,
            check: Callable[[str, Any], Any] | None = None, added_later: bool = False, **bounds) -> Any:
    """A setting's one declaration, as a dataclass field: the default (a list is held as a tuple), the valid values
    (``choices``: a tuple or an Enum; a bool default: true or false; ``check(key, value) → value`` for any other
    rule; else ``check_number``'s ``bounds``) and a one-line ``doc``. ``added_later``: it joined its YAML after runs
    were recorded, so at its default it stays out of a run's identity (harness.rundir) and those runs still
    resume."""
    default = tuple(default) if isinstance(default, list) else default
    metadata = {"doc": doc, "choices": choices, "check": check, "bounds": bounds, "added_later": added_later}
    return dataclasses.field(metadata=metadata) if default is dataclasses.MISSING else \
        dataclasses.field(default=default, metadata=metadata)


def required(doc: str, **kwargs) -> Any:
    """A setting without a default: its config always holds it (a task's YAML holds the defaults, once)."""
    return setting(dataclasses.MISSING, doc, **kwargs)


def check_setting(key: str, value: Any, declaration: dataclasses.Field) -> Any:
    """``value`` as the code reads it (a number as float, an integer as int, an Enum's value as its member), checked
    against its declaration; a one-line ConfigError naming ``key``, the value and the valid values
    otherwise."""
    choices, bounds, check = (declaration.metadata[name] for name in ("choices", "bounds", "check"))
    if check is not None:
        return check(key, value)
    if isinstance(choices, type) and issubclass(choices, Enum):
        return choices(check_choice(key, value, [member.value for member in choices]))
    if choices is not None:
        return check_choice(key, value, choices)
    if isinstance(declaration.default, bool) or declaration.type in (bool, "bool"):
        return check_bool(key, value)
    check_number(key, value, **bounds)
    return value if value is None or bounds.get("integer") else float(value)


def declarations(cls: type) -> dict[str, dataclasses.Field]:
    """Name → declaration of every setting of a settings dataclass."""
    return {field.name: field for field in dataclasses.fields(cls)}


def build(cls: type, node: Mapping, prefix: str, owner: str, others: tuple[str, ...] = (), kind: str = "setting"):
    """The settings ``cls`` of a config node, each checked and typed by its declaration (a key the node lacks takes
    its default); ``others``: keys of the node that something else reads. ConfigError for any other key: "task.x is
    not a setting of task=token_reversal; valid keys: ..." (``kind`` names what a key is)."""
    fields = declarations(cls)
    unknown = sorted(str(key) for key in node if key not in fields and key not in others)
    if unknown:
        near = did_you_mean(unknown[0], [*fields, *others])
        hint = f"; did you mean {prefix}.{near}?" if near else ""
        raise ConfigError(f"{prefix}.{unknown[0]} is not a {kind} of {owner}; valid keys: "
                          f"{', '.join([*fields, *others])}{hint}")
    missing = [name for name, field in fields.items() if name not in node and field.default is dataclasses.MISSING]
    if missing:
        raise ConfigError(f"{prefix}.{missing[0]} is missing; {owner} needs {', '.join(fields)}")
    return cls(**{name: check_setting(f"{prefix}.{name}", node[name], field)
                  for name, field in fields.items() if name in node})
