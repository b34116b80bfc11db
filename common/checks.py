"""Configuration errors and the value checks every layer validates with (algorithms' hyperparameters, tasks'
keys, the trainer's): a bad value is refused before any work, in one line naming the key and what is valid."""

from __future__ import annotations

import difflib
import math
from typing import Any


class ConfigError(ValueError):
    """A configuration value that cannot run; raised before any work is done."""


def did_you_mean(name: Any, choices) -> str | None:
    """The valid name nearest to a mistyped ``name`` (difflib's ratio >= 0.6), or None when none is near."""
    matches = difflib.get_close_matches(str(name), [str(choice) for choice in choices], n=1, cutoff=0.6)
    return matches[0] if matches else None


def check_choice(key: str, value: Any, choices: tuple | list) -> Any:
    """Raise a ConfigError naming ``key`` and the valid choices if ``value`` is not one of them (booleans and
    numbers are told apart: 1 is not true)."""
    if not any(value == choice and isinstance(value, bool) == isinstance(choice, bool) for choice in choices):
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: {', '.join(map(str, choices))}")
    return value


def check_positive_int(key: str, value: Any) -> int:
    """Raise a ConfigError naming ``key`` unless ``value`` is a positive integer."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}={value!r} is not valid; expected a positive integer")
    return value


FLOAT32_MAX = 3.4028234663852886e38


def check_number(key: str, value: Any, *, low: float | None = None, high: float | None = None,
                 low_open: bool = False, high_open: bool = False, integer: bool = False, optional: bool = False,
                 allow_inf: bool = False) -> Any:
    """Raise a ConfigError naming ``key``, the value and the valid range unless ``value`` is a number (an integer
    with ``integer``) within [low, high] (``low_open`` / ``high_open``: that end excluded); ``optional``: null is
    valid too. NaN is never valid, ±inf only with ``allow_inf``, and a finite float beyond float32's range never (the
    runs compute in float32: 1e300 would be inf, or fail to convert). Returns ``value``."""
    if value is None and optional:
        return value
    valid = isinstance(value, (int, float)) and not isinstance(value, bool) and (isinstance(value, int) or not integer)
    if valid and isinstance(value, float):
        valid = not math.isnan(value) and (allow_inf or math.isfinite(value))
        if valid and math.isfinite(value) and abs(value) > FLOAT32_MAX:
            raise ConfigError(f"{key}={value!r} is not valid; expected a number within float32's range "
                              f"(|x| <= {FLOAT32_MAX:.4g})")
    if valid and low is not None:
        valid = value > low if low_open else value >= low
    if valid and high is not None:
        valid = value < high if high_open else value <= high
    if not valid:
        if low is not None and high is not None:
            bounds = f" in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        elif low is not None:
            bounds = f" {'>' if low_open else '>='} {low}"
        elif high is not None:
            bounds = f" {'<' if high_open else '<='} {high}"
        else:
            bounds = ""
        kind, shown = "an integer" if integer else "a number", "null" if value is None else repr(value)
        raise ConfigError(f"{key}={shown} is not valid; expected {'null or ' if optional else ''}{kind}{bounds}")
    return value


def check_positive_float(key: str, value: Any, optional: bool = False) -> Any:
    """A number > 0 (η, clip ε, learning rates, temperatures, timeouts); ``optional``: null is valid too."""
    return check_number(key, value, low=0, low_open=True, optional=optional)


def check_non_negative(key: str, value: Any, integer: bool = False) -> Any:
    """A number (an integer with ``integer``) >= 0: KL coefficients, "0 = off" counts such as checkpoint_every."""
    return check_number(key, value, low=0, integer=integer)


def check_text(key: str, value: Any) -> str:
    """A non-empty text such as an id."""
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}={value!r} is not valid; expected a non-empty text")
    return value


def check_optional_text(key: str, value: Any) -> str | None:
    """A text such as a folder or an id, or null."""
    if value is not None and not isinstance(value, str):
        raise ConfigError(f"{key}={value!r} is not valid; expected a text or null")
    return value


def check_bool(key: str, value: Any) -> bool:
    """Raise a ConfigError naming ``key`` unless ``value`` is true or false."""
    if not isinstance(value, bool):
        raise ConfigError(f"{key}={value!r} is not valid; valid choices: true, false")
    return value


SEED_ID_MAX = 2**63 - 1  # seed ids are int64 (tasks/rng.py hashes them as torch.int64)
LLM_SEED_MAX = 2**32 - 1  # an LLM run's seed goes to transformers.set_seed, whose NumPy seed is 32-bit


def check_seed_ids(seeds: Any, seed_offset: Any, llm: bool = False) -> None:
    """Raise a ConfigError naming ``seed_offset`` and its range unless the seed ids seed_offset .. seed_offset +
    seeds − 1 and their end (harness/config.py's torch.arange) fit an int64 (an LLM run: NumPy's 32-bit seed). Values
    that are not integers are left to the callers' own checks (``check_positive_int``)."""
    if not all(isinstance(value, int) and not isinstance(value, bool) for value in (seeds, seed_offset)) or seeds < 1:
        return
    if llm:
        check_number("seed_offset", seed_offset, low=0, high=LLM_SEED_MAX, integer=True)
        return
    if seeds > SEED_ID_MAX:
        raise ConfigError(f"seeds={seeds} is not valid; expected an integer in [1, {SEED_ID_MAX}] (seed ids are int64)")
    high = SEED_ID_MAX - seeds
    if not 0 <= seed_offset <= high:
        raise ConfigError(f"seed_offset={seed_offset} is not valid with seeds={seeds}; expected an integer in [0, "
                          f"{high}] (the seed ids seed_offset .. seed_offset + seeds - 1 and their end seed_offset + "
                          f"seeds are int64, at most {SEED_ID_MAX})")
