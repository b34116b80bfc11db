"""How an algorithm declares a hyperparameter, once: default, valid values and doc as a field of its
``Hyperparameters`` dataclass. The YAML is checked against it (a test holds ``conf/algorithm/<id>.yaml`` to the
declarations), the typed value is built from it, and the identity of older runs reads ``added_later`` from it."""

from __future__ import annotations

import dataclasses
from enum import Enum
from typing import Any

from common.checks import check_bool, check_choice, check_number


def hyperparameter(default: Any, doc: str, *, choices: tuple | type[Enum] | None = None, added_later: bool = False,
                   **bounds) -> Any:
    """An algorithm hyperparameter's one declaration, as its ``Hyperparameters`` dataclass field: the default, the
    valid values (``choices``: a tuple or an Enum; a bool default: true or false; else ``check_number``'s ``bounds``)
    and a one-line ``doc``. ``added_later``: it joined ``conf/algorithm/<id>.yaml`` after runs were recorded, so at
    its default it stays out of a run's identity (harness.rundir) and those runs still resume."""
    return dataclasses.field(default=default, metadata={"doc": doc, "choices": choices, "bounds": bounds,
                                                        "added_later": added_later})


def check_hyperparameter(key: str, value: Any, declaration: dataclasses.Field) -> Any:
    """``value`` as the algorithm reads it (a number as float, an integer as int, an Enum's value as its member),
    checked against its ``hyperparameter`` declaration; a one-line ConfigError naming ``key``, the value and the valid
    values otherwise."""
    choices, bounds = declaration.metadata["choices"], declaration.metadata["bounds"]
    if isinstance(choices, type) and issubclass(choices, Enum):
        return choices(check_choice(key, value, [member.value for member in choices]))
    if choices is not None:
        return check_choice(key, value, choices)
    if isinstance(declaration.default, bool):
        return check_bool(key, value)
    check_number(key, value, **bounds)
    return value if value is None or bounds.get("integer") else float(value)
