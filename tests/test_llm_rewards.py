"""Reward functions of the LLM tasks on hand-written completions: correct, wrong, malformed, adversarial, huge."""

from __future__ import annotations

import gzip
import json
import random
import re
import sys
from decimal import Decimal

import pytest

from conftest import compose_config
from harness.config import build_task
from tasks.llm import answers
from tasks.llm.answers import (MAX_JSON_DEPTH, NUMBER, SCAN_LIMIT, final_number, gsm8k_reference, last_json_object,
                               parse_number, tagged_answer)
from tasks.llm.gsm8k import SHIPPED_DATA, read_jsonl


def make_task(name: str, *overrides: str):
    return build_task(compose_config([f"task={name}", *overrides]))


@pytest.mark.parametrize("text, expected", [
    ("She sold 48 + 24 = 72 clips.\n#### 72", Decimal(72)),
    ("#### 1,234.50", Decimal("1234.50")),
    ("#### $1,000", Decimal(1000)),
    ("first #### 3 then #### 4", Decimal(4)),  # the last marker wins
    ("So the answer is \\boxed{17}.", Decimal(17)),
    ("#### 5 and \\boxed{6}", Decimal(5)),  # "####" outranks \boxed
    ("I think 3 apples, so 12", Decimal(12)),  # no marker: the last number
    ("#### -7", Decimal(-7)),
    ("no digits here", None),
    ("", None),
    ("#### ٧٢", None),  # digits of other scripts are not numbers
    ("#### " + "9" * 65, None),  # longer than any answer: rejected, not parsed
    ("1e400", Decimal(400)),  # no exponent notation: only the digits after "e" form a number
    ("__import__('os').system('echo 72')", Decimal(72)),  # text is parsed, never run
])
def test_final_number(text, expected):
    assert final_number(text) == expected


def test_parse_number_is_strict():
    assert parse_number("72") == Decimal(72) and parse_number(" 72 ") == Decimal(72)
    assert parse_number("7 2") is None and parse_number("72abc") is None and parse_number("1,23") is None
    assert final_number(None) is None


def test_gsm8k_reference_needs_the_hash_marker():
    assert gsm8k_reference("48/2 = 24\n#### 72") == Decimal(72)
    with pytest.raises(ValueError):
        gsm8k_reference("the answer is 72")


def test_gsm8k_score(gsm8k_dir):
    task = make_task("gsm8k", "task.source=local", f"task.data_dir={gsm8k_dir}")
    row = {"answer": "72"}
    assert task.score("Step by step... 48 + 24 = 72\n#### 72", row) == 1.0
    assert task.score("#### 72.00", row) == 1.0  # numerically equal
    assert task.score("#### 71", row) == 0.0
    assert task.score("#### 72\n#### 71", row) == 0.0  # the final answer counts
    assert task.score("", row) == 0.0
    assert task.score("#### " + "7" * 10_000, row) == 0.0  # huge: no match, no error
    assert task.score("#### 72" * 2_000 + "#### 999999999999999999999999999999", row) == 0.0
    rows = task.train_rows(0, 4)
    assert rows[0]["prompt"][-1]["content"].endswith('output the final answer after "####".')
    assert rows[3]["answer"] == "6"  # "What is 3 plus 3?"


def test_gsm8k_default_reads_the_copy_shipped_in_the_package(monkeypatch):
    """task.data_dir: null reads tasks/llm/data/gsm8k/{train,test}.jsonl.gz: no network, no outside folder."""
    monkeypatch.setitem(sys.modules, "datasets", None)  # the Hub loader would fail to import: it is never reached
    task = make_task("gsm8k")
    assert task.local and task.data_dir == SHIPPED_DATA
    assert sorted(path.name for path in SHIPPED_DATA.iterdir()) == ["LICENSE", "test.jsonl.gz", "train.jsonl.gz"]
    assert "MIT License" in (SHIPPED_DATA / "LICENSE").read_text()
    rows = task.eval_rows()
    assert len(rows) == 1319  # eval_size null: the whole test split
    assert rows[0]["prompt"][-1]["content"].endswith('output the final answer after "####".')
    assert all(Decimal(row["answer"]) == Decimal(row["answer"]).to_integral_value() for row in rows[:20])
    assert len(read_jsonl(SHIPPED_DATA / "train.jsonl.gz")) == 7473


def test_gsm8k_reads_gzipped_files_in_a_given_folder(gsm8k_dir, tmp_path):
    folder = tmp_path / "gz"
    folder.mkdir()
    for split in ("train", "test"):
        (folder / f"{split}.jsonl.gz").write_bytes(gzip.compress((gsm8k_dir / f"{split}.jsonl").read_bytes()))
    task = make_task("gsm8k", "task.source=local", f"task.data_dir={folder}")
    assert [row["answer"] for row in task.train_rows(0, 4)][:4] == ["0", "2", "4", "6"]


def test_gsm8k_reads_a_relative_data_dir_from_the_folder_the_command_runs_in(gsm8k_dir, tmp_path, monkeypatch):
    """An installed package has no repository: a relative ``task.data_dir`` is the user's folder's, as MNIST's."""
    (tmp_path / "mine").mkdir()
    for split in ("train", "test"):
        (tmp_path / "mine" / f"{split}.jsonl").write_bytes((gsm8k_dir / f"{split}.jsonl").read_bytes())
    monkeypatch.chdir(tmp_path)
    task = make_task("gsm8k", "task.source=local", "task.data_dir=mine")
    assert [row["answer"] for row in task.train_rows(0, 4)][:4] == ["0", "2", "4", "6"]


def test_tagged_answer_and_json():
    assert tagged_answer("think <answer>a</answer> more <answer> b </answer>") == "b"
    assert tagged_answer("<answer>unclosed") is None
    assert last_json_object('example {"0": 1} then {"0": 2, "1": 3} end') == {"0": 2, "1": 3}
    assert last_json_object('{"a": {"b": 1}}') == {"a": {"b": 1}}  # the outermost object
    assert last_json_object("[1, 2] {not json} {") is None
    assert last_json_object("{" * 10_000) is None  # adversarial nesting: no error, no answer


@pytest.fixture(scope="module")
def graph_task():
    task = make_task("graph_colouring", "task.generator.min_num_vertices=4", "task.generator.max_num_vertices=4",
                     "task.generator.edge_probability=0.5")
    task.train_rows(0, 3)
    return task


def test_graph_colouring_scores_with_the_native_scorer(graph_task):
    entry = graph_task.entries["train"][0]
    row = {"split": "train", "item": 0}
    valid = {str(v): c for v, c in entry["metadata"]["possible_answer"].items()}
    clash = dict.fromkeys(valid, 1)
    assert entry["metadata"]["puzzle"]["edges"]  # a monochrome colouring violates some edge
    wrapped = f"Reasoning... <answer>Here it is: {valid}</answer>".replace("'", '"')
    assert graph_task.score(wrapped, row) == 1.0  # JSON extracted from inside the answer block
    assert graph_task.score(str(valid).replace("'", '"'), row) == 1.0  # no tags: the last JSON object
    assert graph_task.score(f"<answer>{clash}</answer>".replace("'", '"'), row) == 0.01  # parsable, invalid
    assert graph_task.score("<answer>vertex 0 gets colour 1</answer>", row) == 0.0
    assert graph_task.score('<answer>{"0": 1, "1": </answer>', row) == 0.0  # truncated JSON
    assert graph_task.score('{"0": ' + "9" * 5_000 + "}", row) == 0.0  # huge number: no error


def test_knights_knaves_scores_with_partial_credit():
    task = make_task("knights_knaves")
    task.train_rows(0, 2)
    entry, row = task.entries["train"][0], {"split": "train", "item": 0}
    answer = entry["answer"]  # "Amelia is a hero, and Elizabeth is a hero."
    first, second = entry["metadata"]["names"][:2]
    terms = entry["metadata"]["knight_knave_terms"]
    flipped = answer.replace(f"{second} is {terms['a_knight']}", f"{second} is {terms['a_knave']}") \
        if f"{second} is {terms['a_knight']}" in answer \
        else answer.replace(f"{second} is {terms['a_knave']}", f"{second} is {terms['a_knight']}")
    assert flipped != answer
    assert task.score(f"Let me think. <answer>{answer}</answer>", row) == 1.0
    assert task.score(f"<answer>{flipped}</answer>", row) == pytest.approx(0.3 + 0.7 / 2)  # one of two right
    assert task.score(answer, row) == 0.0  # no answer tags: Reasoning Gym's format is required
    assert task.score("<answer></answer>", row) == 0.0
    assert task.score(f"<answer>{first} is a dragon</answer>", row) == 0.0


# --- Linear time: the parsers' work, counted in characters examined, on adversarial completions ---

def counted(parser, text):
    """``parser(text)`` and the number of characters it examined, summed over the scans it made (every read of the
    parsers goes through ``answers._Scan``, which counts them)."""
    scans = []

    class Counting(answers._Scan):
        def __init__(self, text):
            super().__init__(text)
            scans.append(self)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(answers, "_Scan", Counting)
        result = parser(text)
    return result, sum(scan.steps for scan in scans)


WORK_PER_CHARACTER = 8  # the bound c in work ≤ c·n; the inputs below take 1–6.5


def nested_json(n: int) -> str:
    """60 nested objects around an array of ~n/3 numbers: a parser without memory reads the array 60 times."""
    return '{"a": ' * 60 + "[" + "1, " * (n // 3) + "1]" + "}" * 60


ADVERSARIAL = {  # name: (parser, text of length ~n, expected result)
    "spaces after ####": (final_number, lambda n: "I count 7. ####" + " " * n, Decimal(7)),
    "spaces after #### $": (final_number, lambda n: "7 #### $" + " \t\n" * (n // 3), Decimal(7)),
    "spaces after \\boxed{": (final_number, lambda n: "I count 7. \\boxed{" + " " * n, Decimal(7)),
    "#### repeated": (final_number, lambda n: "#### " * (n // 5), None),
    "# run": (final_number, lambda n: "#" * n + "7", Decimal(7)),
    "\\boxed{ repeated": (final_number, lambda n: "\\boxed{ " * (n // 8) + "7", Decimal(7)),
    "numbers": (final_number, lambda n: "1,234 " * (n // 6), Decimal(1234)),
    "unclosed <answer>": (tagged_answer, lambda n: "<answer>42</answer>" + "<answer>" * (n // 8), "42"),
    "{": (last_json_object, lambda n: "{" * n, None),
    "nested objects": (last_json_object, nested_json, "whole"),
    "open keys": (last_json_object, lambda n: '{"a":' * (n // 5), None),
    '{"': (last_json_object, lambda n: '{"' * (n // 2), None),
    "unclosed string": (last_json_object, lambda n: '{"0": 1} {"a": "{' + '{"b": [' * (n // 7), {"0": 1}),
}


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_parsers_do_linear_work_on_adversarial_completions(name):
    """Work counted, not timed: at most c·n characters examined, and twice the text is twice the work (the former
    regular expressions backtracked: quadratic work, 2 s for "####" and 8,000 spaces)."""
    parser, make, expected = ADVERSARIAL[name]
    works = []
    for n in (10_000, 20_000):  # both within SCAN_LIMIT: the whole text is read
        text = make(n)
        assert len(text) <= SCAN_LIMIT
        result, work = counted(parser, text)
        assert result == (json.loads(text) if expected == "whole" else expected)
        assert work <= WORK_PER_CHARACTER * len(text)
        works.append(work)
    assert works[1] <= 2.1 * works[0]


@pytest.mark.parametrize("parser, text, expected", [
    (tagged_answer, "<answer>" * 10_000, None),
    (tagged_answer, "<answer>a</answer>" + "x" * 10**6 + "<answer>b</answer>", "b"),
    (last_json_object, "{" * 10**6, None),
    (last_json_object, '{"0": 1}' * 10**5, {"0": 1}),
    (final_number, "#### " + " " * 10**6, None),
    (final_number, "x" * 10**6 + "\\boxed{ $12 }", Decimal(12)),
    (final_number, "1 " * 10**6, Decimal(1)),
])
def test_work_is_capped_by_the_scan_limit(parser, text, expected):
    result, work = counted(parser, text)
    assert result == expected
    assert work <= WORK_PER_CHARACTER * SCAN_LIMIT  # whatever the length: only the last SCAN_LIMIT are read


def test_only_the_end_of_a_completion_is_read():
    assert final_number("x" * 10 * SCAN_LIMIT + "#### 72") == Decimal(72)  # the final answer is at the end
    assert final_number("#### 72" + " " * SCAN_LIMIT) is None  # an answer followed by more than the limit is not
    assert tagged_answer("<answer>72</answer>" + " " * SCAN_LIMIT) is None
    assert final_number("#### 72" + " " * (SCAN_LIMIT - 8)) == Decimal(72)


# --- The same answers as before: the former regular expressions are the specification (on short texts) ---

FORMER_HASH = re.compile(r"####\s*\$?\s*(" + answers._NUMBER + r")")
FORMER_BOXED = re.compile(r"\\boxed\{\s*\$?\s*(" + answers._NUMBER + r")\s*\}")
FORMER_TAG = re.compile(r"<answer>\s?(.*?)\s?</answer>", re.DOTALL)


def former_final_number(text):
    for pattern in (FORMER_HASH, FORMER_BOXED):
        matches = pattern.findall(text)
        if matches:
            return parse_number(matches[-1])
    numbers = NUMBER.findall(text)
    return parse_number(numbers[-1]) if numbers else None


def former_tagged_answer(text):
    matches = FORMER_TAG.findall(text)
    return matches[-1].strip() if matches else None


def strict_json_object(text):
    """The object that ends last (then starts first) over every '{' with json's own decoder, NaN and Infinity
    refused: the former function without its cap of 64 candidates."""
    def refuse(name):
        raise ValueError(name)

    decoder, best, best_key = json.JSONDecoder(parse_constant=refuse), None, None
    for start in (i for i, char in enumerate(text) if char == "{"):
        try:
            value, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict) and (best_key is None or (end, -start) > best_key):
            best, best_key = value, (end, -start)
    return best


def random_texts(pieces, count, seed, length=14):
    rng = random.Random(seed)
    return ["".join(rng.choice(pieces) for _ in range(rng.randint(0, length))) for _ in range(count)]


def test_final_number_agrees_with_the_former_regular_expressions():
    pieces = ["#", "####", " ", "\t", "\n", "\u00a0", "$", "-", "0", "1", "23", "4567", ",", ",123", ",12", ".",
              ".5", "\\boxed{", "}", "x", "٧"]
    for text in random_texts(pieces, 20_000, seed=0):
        assert final_number(text) == former_final_number(text), text


def test_tagged_answer_agrees_with_the_former_regular_expression():
    pieces = ["<answer>", "</answer>", " ", "\n", "\u2003", "a", "b", "<", ">", "</answer", "<answer"]
    for text in random_texts(pieces, 20_000, seed=1):
        assert tagged_answer(text) == former_tagged_answer(text), text


def test_last_json_object_agrees_with_json_itself():
    pieces = ["{", "}", "[", "]", '"', ":", ",", " ", "\n", "1", "-", "0", ".", "e", "E", "+", '"a"', '"b"', "\\",
              "\\u00e9", "\\n", "u", "NaN", "Infinity", "true", "false", "null", "nul", "x", "\x01", '{"a":',
              '{"0": 1}', "[1, 2]", "12", "1.5e3"]
    for text in random_texts(pieces, 20_000, seed=2, length=16):
        assert repr(last_json_object(text)) == repr(strict_json_object(text)), text


# --- NaN and Infinity: not JSON, so not a colouring ---

@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_finite_json_constants_are_refused(constant, graph_task):
    assert last_json_object(f'{{"0": {constant}}}') is None
    assert last_json_object(f'{{"0": 1, "1": [{constant}]}}') is None
    assert last_json_object(f'{{"0": 2}} then {{"0": 1, "1": {constant}}}') == {"0": 2}  # the last that parses
    assert last_json_object(f'{{"0": "{constant}"}}') == {"0": constant}  # as a string it is just text
    entry, row = graph_task.entries["train"][0], {"split": "train", "item": 0}
    valid = {str(v): c for v, c in entry["metadata"]["possible_answer"].items()}
    first = next(iter(valid))

    def answer(colour):
        return "<answer>{" + ", ".join(f'"{v}": {colour if v == first else c}' for v, c in valid.items()) + "}</answer>"

    assert graph_task.score(answer(valid[first]), row) == 1.0
    assert graph_task.score(answer(999), row) == 0.01  # a JSON map with a colour out of range: parsable, invalid
    assert graph_task.score(answer(constant), row) == 0.0  # not JSON: scored as malformed


def test_json_nesting_and_number_limits():
    chain = '{"a":' * (MAX_JSON_DEPTH + 5) + "1" + "}" * (MAX_JSON_DEPTH + 5)
    value, depth = last_json_object(chain), 0
    while isinstance(value, dict):
        value, depth = value["a"], depth + 1
    assert depth == MAX_JSON_DEPTH  # the deepest-nested objects up to the limit; deeper ones are not read
    assert last_json_object('{"0": ' + "9" * 5_000 + "}") is None  # beyond int's digit limit, as for json
    assert last_json_object('{"0": ' + "9" * 5_000 + ".0}") == {"0": float("9" * 5_000 + ".0")}
    assert last_json_object('{"a": [{"b": 1}, {}], "c": "}{"}') == {"a": [{"b": 1}, {}], "c": "}{"}


@pytest.mark.parametrize("line, message", [
    ('{"question": "q", "answer": "#### 1"', "test.jsonl:2: not a JSON record"),
    ('{"question": "q"}', "test.jsonl:2: the record lacks answer"),
    ('[1, 2]', "test.jsonl:2: the record lacks question, answer"),
])
def test_a_damaged_gsm8k_line_is_one_line_naming_file_and_line_before_any_model(line, message, gsm8k_dir, tmp_path):
    """The task reads its local data when it is built (before a model loads): a bad line fails the launch there."""
    from common.checks import ConfigError

    folder = tmp_path / "gsm8k"
    folder.mkdir()
    (folder / "train.jsonl").write_text((gsm8k_dir / "train.jsonl").read_text())
    good = (gsm8k_dir / "test.jsonl").read_text().splitlines()[0]
    (folder / "test.jsonl").write_text(f"{good}\n{line}\n")
    with pytest.raises(ConfigError, match=re.escape(message)):
        make_task("gsm8k", "task.source=local", f"task.data_dir={folder}")
    with gzip.open(folder / "cut.jsonl.gz", "wt") as handle:
        handle.write(good + "\n")
    truncated = (folder / "cut.jsonl.gz").read_bytes()[:-6]
    (folder / "cut.jsonl.gz").write_bytes(truncated)
    with pytest.raises(ConfigError, match="cut.jsonl.gz: cannot be read"):
        read_jsonl(folder / "cut.jsonl.gz")
