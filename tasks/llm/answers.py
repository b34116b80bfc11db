"""Answer extraction from model completions: plain string parsing, never evaluation of model output.

Every function takes untrusted text and returns ``None`` when no well-formed answer is found.

Every parser is linear in the length of the text: one pass of ``str.find`` / ``str.rfind`` calls and anchored
matches of patterns that cannot backtrack beyond a few characters (runs of one character class such as ``[0-9]*``
or ``\\s*``, JSON's number grammar), and no character is read more than a bounded number of times. (The regular
expressions used before backtracked quadratically: "####" followed by 8,000 spaces took 2 s, 10,000 unclosed
<answer> tags 9 s.) Every read goes through ``_Scan``, which counts the characters examined; the tests bound that
count on adversarial inputs.

Scan limit: all parsers return the *last* answer of a completion (the last "#### N", the last <answer> block, the
JSON object that ends last), so they read only its last ``SCAN_LIMIT`` characters: the end, where the final answer
is. That is far more than a realistic completion (the default 512 tokens are ~2,000 characters of prose, 4,096
tokens ~16,000); cutting the start changes a result only when more than ``SCAN_LIMIT`` characters follow the
answer, and it bounds the work of one call whatever the completion's length.
"""

from __future__ import annotations

import json
import re
import sys
from decimal import Decimal, InvalidOperation

# A number as people write final answers: optional sign, ASCII digits with optional thousands separators, optional
# decimals. ASCII only ([0-9], not \d), so other scripts' digits never parse.
_NUMBER = r"-?(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?"
NUMBER = re.compile(_NUMBER)
SCAN_LIMIT = 32_768  # characters read from the end of a completion (see the module docstring)
MAX_DIGITS = 64  # longer "numbers" are never a GSM8K answer; rejecting them keeps parsing cheap
MAX_JSON_DEPTH = 64  # deeper JSON objects (counting arrays) are not read; a colouring is one flat map

# Runs of one character class: ``match`` consumes the run and stops, it cannot backtrack.
_DIGITS = re.compile(r"[0-9]*")
_HASHES = re.compile(r"#*")
_NUMBER_HEAD = re.compile(r"-?[0-9]+")  # searched for: a number's sign and first digits
_SPACES = re.compile(r"\s*")  # Unicode whitespace, the characters str.isspace() accepts
_JSON_SPACES = re.compile(r"[ \t\n\r]*")  # JSON's whitespace
_JSON_STRING_CHARS = re.compile(r'[^"\\\x00-\x1f]*')  # what a JSON string holds up to a quote, an escape or an error
_HEX4 = re.compile(r"[0-9a-fA-F]{0,4}")
_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")  # json's own number grammar
_JSON_AFTER_VALUE = re.compile(r"[ \t\n\r]*([,\]}]?)[ \t\n\r]*")  # a separator or a closer, if one follows
# Where a JSON object can start: '{', whitespace, then '"' or '}'. A search reads a character at most twice (the
# whitespace after each '{' once more), so ``_Scan.starts`` counts 2 per character.
_JSON_OBJECT_START = re.compile(r'\{(?=[ \t\n\r]*["}])')
_JSON_ESCAPES = frozenset('"\\/bfnrt')
_JSON_LITERALS = {"t": "true", "f": "false", "n": "null"}


class _Scan:
    """The window of a text the parsers read (its last ``SCAN_LIMIT`` characters) and ``steps``, the number of
    characters examined in it so far. Every read goes through these methods, each linear in what it adds."""

    __slots__ = ("text", "steps")

    def __init__(self, text: str):
        self.text = text[-SCAN_LIMIT:]
        self.steps = 0

    def at(self, pos: int) -> str:
        """The character at ``pos`` ('' past the end)."""
        self.steps += 1
        return self.text[pos:pos + 1]

    def startswith(self, prefix: str, pos: int) -> bool:
        self.steps += len(prefix)
        return self.text.startswith(prefix, pos)

    def run(self, chars: re.Pattern, pos: int) -> int:
        """End of the run of ``chars`` (a one-class pattern such as ``[0-9]*``) that starts at ``pos``."""
        end = max(chars.match(self.text, pos).end(), pos)
        self.steps += end - pos + 1
        return end

    def match(self, pattern: re.Pattern, pos: int) -> re.Match | None:
        """Match of ``pattern`` at ``pos``: one-class runs and optional parts, each decided by its first three
        characters, so at most three characters past the match are examined."""
        found = pattern.match(self.text, pos)
        self.steps += (pos if found is None else found.end()) - pos + 3
        return found

    def search(self, pattern: re.Pattern, pos: int) -> re.Match | None:
        """First match at or after ``pos`` of ``pattern`` (an optional character, then a one-class run)."""
        found = pattern.search(self.text, pos)
        self.steps += (len(self.text) if found is None else found.end()) - pos + 1
        return found

    def starts(self, pattern: re.Pattern) -> list[int]:
        """Start of every match of ``pattern`` (see ``_JSON_OBJECT_START``) in the window."""
        self.steps += 2 * len(self.text)
        return [match.start() for match in pattern.finditer(self.text)]

    def find(self, sub: str, pos: int) -> int:
        """Start of the first ``sub`` at or after ``pos``, or -1."""
        found = self.text.find(sub, pos)
        self.steps += (len(self.text) if found < 0 else found + len(sub)) - pos + 1
        return found

    def rfind(self, sub: str, end: int) -> int:
        """Start of the last ``sub`` that ends at or before ``end``, or -1."""
        found = self.text.rfind(sub, 0, end)
        self.steps += end - max(found, 0) + 1
        return found


def parse_number(text: str) -> Decimal | None:
    """'1,234.50' → Decimal('1234.50'); None unless ``text`` is exactly one number of at most 64 digits."""
    text = text.strip()
    if len(text) > 2 * MAX_DIGITS:  # 64 digits, 21 separators, a point and a sign are 87 characters at most
        return None
    if not NUMBER.fullmatch(text) or sum(ch.isdigit() for ch in text) > MAX_DIGITS:
        return None
    try:
        return Decimal(text.replace(",", ""))
    except InvalidOperation:  # unreachable for a regex match; kept so no input can raise
        return None


def _number_end(scan: _Scan, digits: int, end: int) -> int:
    """End of the match of ``NUMBER`` whose first run of digits is [digits, end): its greedy match (which is also its
    longest), with the thousands groups and the decimals that follow."""
    char = scan.at(end)
    if end - digits <= 3:  # 1–3 digits may open thousands groups: each exactly "," and 3 digits
        while char == "," and scan.run(_DIGITS, end + 1) - end > 3:
            end += 4
            char = scan.at(end)
    if char == ".":
        decimals = scan.run(_DIGITS, end + 1)
        if decimals > end + 1:
            end = decimals
    return end


def _number_at(scan: _Scan, start: int) -> int:
    """End of the match of ``NUMBER`` at ``start``, or -1."""
    digits = start + (scan.at(start) == "-")
    end = scan.run(_DIGITS, digits)
    return _number_end(scan, digits, end) if end > digits else -1


def _after_marker(scan: _Scan, pos: int, closed: bool) -> tuple[int, int] | None:
    """Span of the number after a marker that ends at ``pos``: optional whitespace, '$' and whitespace, then a
    number (then optional whitespace and '}' when ``closed``); None if they do not follow."""
    start = scan.run(_SPACES, pos)
    if scan.at(start) == "$":
        start = scan.run(_SPACES, start + 1)
    stop = _number_at(scan, start)
    # closed: a shorter NUMBER match ends before a digit, ',' or '.', so only the longest can meet the '}'
    if stop < 0 or (closed and scan.at(scan.run(_SPACES, stop)) != "}"):
        return None
    return start, stop


def _hash_number(scan: _Scan) -> tuple[int, int] | None:
    """Span of the number of the last "#### N", or None. Left to right, as a regular-expression search finds the
    matches, but in a run of more than four '#' only the last four can be followed by a number: each run is one
    candidate, and the search resumes after it (or after the number)."""
    pos, last = 0, None
    while (found := scan.find("####", pos)) >= 0:
        pos = scan.run(_HASHES, found + 4)
        span = _after_marker(scan, pos, closed=False)
        if span is not None:
            last, pos = span, span[1]
    return last


def _boxed_number(scan: _Scan) -> tuple[int, int] | None:
    """Span of the number of the last \\boxed{N}, or None. Markers are tried from the right: they cannot overlap and
    no match holds a '\\', so the first that fits is the last match of a left-to-right search, and a marker's scan
    stops at the next marker: each character is read for one marker."""
    end = len(scan.text)
    while (found := scan.rfind("\\boxed{", end)) >= 0:
        span = _after_marker(scan, found + len("\\boxed{"), closed=True)
        if span is not None:
            return span
        end = found
    return None


def _last_number(scan: _Scan) -> tuple[int, int] | None:
    """Span of the last number in the text, as a left-to-right search for ``NUMBER`` finds them, or None."""
    pos, last = 0, None
    while (head := scan.search(_NUMBER_HEAD, pos)) is not None:
        digits = head.start() + (scan.at(head.start()) == "-")
        last = head.start(), _number_end(scan, digits, head.end())
        pos = last[1]
    return last


def final_number(completion: str) -> Decimal | None:
    """The final numeric answer of a math completion: the last "#### N", else the last \\boxed{N}, else the last
    number anywhere in the text (GSM8K's answer format, then the common alternatives). "#### $ N" and
    "\\boxed{ $N }" are allowed; only the last ``SCAN_LIMIT`` characters are read."""
    if not isinstance(completion, str):
        return None
    scan = _Scan(completion)
    span = _hash_number(scan) or _boxed_number(scan) or _last_number(scan)
    if span is None:
        return None
    scan.steps += span[1] - span[0]
    return parse_number(scan.text[span[0]:span[1]])


def gsm8k_reference(answer: str) -> Decimal:
    """The gold number of a GSM8K solution ("... #### 72")."""
    number = final_number(answer)
    if number is None or "####" not in answer:
        raise ValueError(f"not a GSM8K solution (no '#### N'): {answer[-80:]!r}")
    return number


def tagged_answer(completion: str) -> str | None:
    """Content of the last <answer>…</answer> block (Reasoning Gym's answer format), stripped; None if absent.

    Blocks are read left to right, each from an opening tag to the first closing tag after it (so a block may
    hold further opening tags); once an opening tag has no closing tag after it, no later one has, and the scan
    stops. Only the last ``SCAN_LIMIT`` characters are read."""
    if not isinstance(completion, str):
        return None
    scan = _Scan(completion)
    pos, last = 0, None
    while (opening := scan.find("<answer>", pos)) >= 0:
        closing = scan.find("</answer>", opening + len("<answer>"))
        if closing < 0:
            break
        last, pos = (opening + len("<answer>"), closing), closing + len("</answer>")
    if last is None:
        return None
    scan.steps += last[1] - last[0]
    return scan.text[last[0]:last[1]].strip()


def _refuse_constant(name: str):
    raise ValueError(f"{name} is not JSON")


_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def _json_string_end(scan: _Scan, pos: int) -> int:
    """End (after the closing quote) of the JSON string whose contents start at ``pos``, or -1: as ``json`` reads
    it (strict: no raw control characters; only JSON's escapes)."""
    while True:
        pos = scan.run(_JSON_STRING_CHARS, pos)
        char = scan.at(pos)
        if char == '"':
            return pos + 1
        if char != "\\":  # a control character, or the end of the text
            return -1
        escape = scan.at(pos + 1)
        if escape == "u":
            if scan.run(_HEX4, pos + 2) != pos + 6:
                return -1
            pos += 6
        elif escape and escape in _JSON_ESCAPES:
            pos += 2
        else:
            return -1


def _json_number_end(scan: _Scan, pos: int) -> int:
    """End of the JSON number at ``pos``, or -1: ``json``'s grammar (ASCII digits, no leading zeros; a fraction or
    an exponent only when digits follow) and its refusal of integers longer than int's digit limit."""
    number = scan.match(_JSON_NUMBER, pos)
    if number is None:
        return -1
    limit = sys.get_int_max_str_digits()
    if number.end(1) == number.end() and limit and number.end(1) - number.start(1) > limit:  # an integer
        return -1
    return number.end()


def _json_object_end(scan: _Scan, start: int, memo: dict[int, tuple[int, int] | None]) -> tuple[int, int] | None:
    """(end, nesting depth) of the JSON object at ``start`` as ``json.JSONDecoder().raw_decode`` reads it, or None
    if it does not parse as strict JSON (RFC 8259: no NaN, Infinity or -Infinity) or nests deeper than
    ``MAX_JSON_DEPTH``.

    An iterative recogniser: the arrays it opens are counted, and a nested object is never read again but looked
    up in ``memo`` (objects are read from the last '{' backwards, so every nested one already was; an object
    parses the same wherever it stands). Runs from two starts that both read a character are one inside a
    string and one outside (two runs in the same state there would have met earlier, and one would have looked
    the other up), so no character is read by more than two runs: linear work in all."""
    open_arrays, depth = 0, 1  # containers open inside the root object; nesting depth, the root included
    pos = scan.run(_JSON_SPACES, start + 1)
    if scan.at(pos) == "}":
        return pos + 1, depth
    expect_key = True
    while True:
        if expect_key:
            if scan.at(pos) != '"':
                return None
            pos = _json_string_end(scan, pos + 1)
            if pos < 0:
                return None
            pos = scan.run(_JSON_SPACES, pos)
            if scan.at(pos) != ":":
                return None
            pos = scan.run(_JSON_SPACES, pos + 1)
        char = scan.at(pos)  # a value starts here
        if char == "[":
            open_arrays += 1
            depth = max(depth, 1 + open_arrays)
            if depth > MAX_JSON_DEPTH:
                return None
            pos = scan.run(_JSON_SPACES, pos + 1)
            if scan.at(pos) != "]":
                expect_key = False  # the array's first element
                continue
            open_arrays, pos = open_arrays - 1, pos + 1
        elif char == "{":
            nested = memo.get(pos)  # absent: a '{' where no object can start
            if nested is None:
                return None
            pos, nested_depth = nested
            depth = max(depth, 1 + open_arrays + nested_depth)
            if depth > MAX_JSON_DEPTH:
                return None
        elif char == '"':
            pos = _json_string_end(scan, pos + 1)
        elif char == "-" or "0" <= char <= "9":
            pos = _json_number_end(scan, pos)
        elif char in _JSON_LITERALS:
            if not scan.startswith(_JSON_LITERALS[char], pos):
                return None
            pos += len(_JSON_LITERALS[char])
        else:  # no value: the constants NaN, Infinity and -Infinity are refused here
            return None
        if pos < 0:
            return None
        while True:  # a value ended at pos: a separator or the end of its container follows
            after = scan.match(_JSON_AFTER_VALUE, pos)
            char, pos = after.group(1), after.end()
            if char == ",":
                expect_key = not open_arrays
                break
            if char != ("]" if open_arrays else "}"):
                return None
            if not open_arrays:
                return after.end(1), depth
            open_arrays -= 1


def last_json_object(text: str) -> dict | None:
    """The JSON object that ends last in ``text`` (the outermost one, if nested), or None if none parses.

    Strict JSON (RFC 8259): ``json`` also reads NaN, Infinity and -Infinity, but they are not JSON, and no colour
    is one, so an object holding them does not parse (a graph colouring holding one scores as malformed JSON: 0,
    not the 0.01 of a parsable map). Objects nested deeper than ``MAX_JSON_DEPTH`` do not parse either; only the
    last ``SCAN_LIMIT`` characters are read. Every '{' that can open an object (see ``_JSON_OBJECT_START``) is a
    candidate, read from the last one backwards by ``_json_object_end``, in linear work overall; only the winner
    is decoded."""
    if not isinstance(text, str):
        return None
    scan = _Scan(text)
    memo: dict[int, tuple[int, int] | None] = {}  # start → (end, depth), or None: it does not parse
    best_end, best_start = -1, -1
    for start in reversed(scan.starts(_JSON_OBJECT_START)):
        parsed = memo[start] = _json_object_end(scan, start, memo)
        if parsed is not None and parsed[0] >= best_end:  # ties: the earlier start (never seen in valid JSON)
            best_end, best_start = parsed[0], start
    if best_start < 0:
        return None
    try:
        value, _ = _DECODER.raw_decode(scan.text, best_start)
    except (ValueError, RecursionError):  # unreachable when the recogniser agrees with json; kept so nothing raises
        return None
    return value if isinstance(value, dict) else None
