"""Reward functions of the LLM tasks on hand-written completions: correct, wrong, malformed, adversarial, huge."""

from __future__ import annotations

from decimal import Decimal

import pytest

from conftest import compose_config
from harness.run import build_task
from tasks.llm.answers import final_number, gsm8k_reference, last_json_object, parse_number, tagged_answer


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
