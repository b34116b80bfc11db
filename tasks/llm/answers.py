"""Answer extraction from model completions: plain string parsing, never evaluation of model output.

Every function takes untrusted text and returns ``None`` when no well-formed answer is found.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation

# A number as people write final answers: optional sign, ASCII digits with optional thousands separators, optional
# decimals. ASCII only ([0-9], not \d), so other scripts' digits never parse.
_NUMBER = r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
NUMBER = re.compile(_NUMBER)
HASH_ANSWER = re.compile(r"####\s*\$?\s*(" + _NUMBER + r")")
BOXED_ANSWER = re.compile(r"\\boxed\{\s*\$?\s*(" + _NUMBER + r")\s*\}")
ANSWER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)
MAX_DIGITS = 64  # longer "numbers" are never a GSM8K answer; rejecting them keeps parsing cheap
MAX_JSON_CANDIDATES = 64  # the last '{' positions tried


def parse_number(text: str) -> Decimal | None:
    """'1,234.50' → Decimal('1234.50'); None unless ``text`` is exactly one number of at most 64 digits."""
    text = text.strip()
    if not NUMBER.fullmatch(text) or sum(ch.isdigit() for ch in text) > MAX_DIGITS:
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:  # unreachable for a regex match; kept so no input can raise
        return None


def final_number(completion: str) -> Decimal | None:
    """The final numeric answer of a math completion: the last "#### N", else the last \\boxed{N}, else the last
    number anywhere in the text (GSM8K's answer format, then the common alternatives)."""
    if not isinstance(completion, str):
        return None
    for pattern in (HASH_ANSWER, BOXED_ANSWER):
        matches = pattern.findall(completion)
        if matches:
            return parse_number(matches[-1])
    numbers = NUMBER.findall(completion)
    return parse_number(numbers[-1]) if numbers else None


def gsm8k_reference(answer: str) -> Decimal:
    """The gold number of a GSM8K solution ("... #### 72")."""
    number = final_number(answer)
    if number is None or "####" not in answer:
        raise ValueError(f"not a GSM8K solution (no '#### N'): {answer[-80:]!r}")
    return number


def tagged_answer(completion: str) -> str | None:
    """Content of the last <answer>…</answer> block (Reasoning Gym's answer format), stripped; None if absent."""
    if not isinstance(completion, str):
        return None
    matches = ANSWER_TAG.findall(completion)
    return matches[-1].strip() if matches else None


def last_json_object(text: str) -> dict | None:
    """The JSON object that ends last in ``text`` (the outermost one, if nested), or None if none parses."""
    if not isinstance(text, str):
        return None
    decoder = json.JSONDecoder()
    best, best_key = None, None
    for match in list(re.finditer(r"\{", text))[-MAX_JSON_CANDIDATES:]:
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            continue
        key = (end, -match.start())
        if isinstance(value, dict) and (best_key is None or key > best_key):
            best, best_key = value, key
    return best
