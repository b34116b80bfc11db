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
    assert check_llm_config(cfg, task.algorithm, world_size=1) == 1
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
