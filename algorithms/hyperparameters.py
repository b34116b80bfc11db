"""How an algorithm declares a hyperparameter, once: a setting (``common/declared.py``) of its ``Hyperparameters``
dataclass, with its default, valid values and doc. The YAML is checked against it (a test holds
``conf/algorithm/<id>.yaml`` to the declarations), the typed value is built from it, and the identity of older runs
reads ``added_later`` from it."""

from __future__ import annotations

from common.declared import check_setting as check_hyperparameter
from common.declared import setting as hyperparameter

__all__ = ["check_hyperparameter", "hyperparameter"]
