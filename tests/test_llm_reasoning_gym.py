"""The generic Reasoning Gym task (task=reasoning_gym): it composes, refuses a bad dataset, generator field or answer
rule in one line naming the key, and scores with the dataset's own scorer."""

from __future__ import annotations

import pytest

from common.checks import ConfigError
from conftest import compose_config
from harness.config import build_task
from harness.trainers.trl import check_llm_config

CHAIN_SUM = ["task=reasoning_gym", "task.dataset=chain_sum", "+task.generator.min_terms=2",
             "+task.generator.max_terms=2", "+task.generator.max_digits=1"]


def make_task(*overrides: str):
    cfg = compose_config([*CHAIN_SUM, *overrides])
    task = build_task(cfg)
    assert check_llm_config(cfg, task.algorithm, task.settings, world_size=1) == 1
    return task


@pytest.mark.parametrize("overrides, message", [
    (["task.dataset=chain_summ"], "^task.dataset='chain_summ' is not valid; valid choices: .*chain_sum, "),
    (["+task.generator.max_term=3"], "^task.generator.max_term is not a field of reasoning-gym chain_sum; valid "
                                     "choices: min_terms, max_terms, min_digits, max_digits, allow_negation$"),
    (["task.answer=last"], "^task.answer='last' is not valid; valid choices: tagged, tagged_or_last_number$"),
])
def test_bad_values_fail_in_one_line_naming_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        make_task(*overrides)


@pytest.mark.parametrize("rule, untagged_right", [("tagged_or_last_number", 1.0), ("tagged", 0.0)])
def test_scores_with_the_datasets_scorer(rule, untagged_right):
    task = make_task(f"task.answer={rule}")
    task.train_rows(0, 2)
    entry, row = task.entries["train"][0], {"split": "train", "item": 0}
    right, wrong = entry["answer"], str(int(entry["answer"]) + 1)
    assert task.score(f"<answer>{right}</answer>", row) == 1.0
    assert task.score(f"<answer>{wrong}</answer>", row) == 0.0
    assert task.score(f"{entry['question'][-12:]} = {right}", row) == untagged_right  # the model's usual form
    assert task.score(f"It is {wrong}.", row) == 0.0
    assert task.score("no number", row) == 0.0


@pytest.mark.parametrize("exact", [False, True])
def test_exact_scoring_gives_no_partial_credit_to_a_wrong_answer_holding_the_right_one(exact):
    """basic_arithmetic's own scorer gives partial credit to a wrong answer that contains the right one (a model that
    writes "36" for 6); ``task.exact`` scores it 0 and the right answer 1. Bug caught: the ``task.exact`` branch of
    ``ReasoningGym.score`` inverted (``if not self.settings.exact``)."""
    cfg = compose_config(["task=reasoning_gym", "task.dataset=basic_arithmetic", "+task.generator.min_terms=2",
                          "+task.generator.max_terms=2", "+task.generator.min_digits=1", "+task.generator.max_digits=1",
                          "+task.generator.operators=[*]", f"task.exact={str(exact).lower()}"])
    task = build_task(cfg)
    task.train_rows(0, 8)
    item = next(i for i, entry in enumerate(task.entries["train"]) if int(entry["answer"]) >= 0)
    right, row = task.entries["train"][item]["answer"], {"split": "train", "item": item}
    holding = f"3{right}"  # wrong, with the right digits in it
    assert task.score(f"<answer>{right}</answer>", row) == 1.0
    partial = task.score(f"<answer>{holding}</answer>", row)
    assert partial == 0.0 if exact else 0.0 < partial < 1.0
