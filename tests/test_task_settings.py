"""A task's settings are declared once (``Task.Settings``), checked and typed once from its ``task`` node, and its
YAML holds exactly the declared keys (and the harness's ``RUN_KEYS``): no key that nothing reads, no declaration
that its YAML lacks."""

from __future__ import annotations

import dataclasses

import pytest
from omegaconf import OmegaConf

from common.checks import ConfigError
from common.declared import declarations
from conftest import compose_config
from tasks import TASKS, get_task
from tasks.base import RUN_KEYS


def yaml_mismatches(name: str, node) -> list[str]:
    """Where a task's composed ``task`` node and its declarations disagree."""
    declared = declarations(get_task(name).Settings)
    keys = set(node)
    return ([f"{name}: task.{key} has no declaration" for key in sorted(keys - set(declared) - set(RUN_KEYS))]
            + [f"{name}: task.{key} is declared but not in its YAML" for key in sorted(set(declared) - keys)]
            + [f"{name}: task.{key} has no doc" for key, field in declared.items() if not field.metadata["doc"]])


@pytest.mark.parametrize("name", list(TASKS))
def test_every_task_yaml_holds_its_declared_settings_and_they_check(name):
    node = compose_config([f"task={name}"]).task
    assert yaml_mismatches(name, node) == []
    settings = get_task(name).settings_of(node)
    for key, value in dataclasses.asdict(settings).items():  # typed as declared, equal to the YAML's value
        expected = OmegaConf.to_container(node[key]) if OmegaConf.is_config(node[key]) else node[key]
        assert value == (tuple(expected) if isinstance(expected, list) else expected), key


def test_the_check_sees_a_stray_key_and_a_missing_one():
    """Bug caught: a key added to a task's YAML and read by nothing, a declaration left out of the YAML."""
    node = OmegaConf.to_container(compose_config(["task=tabular_single"]).task)
    stray = {**node, "arm": 3}
    missing = {key: value for key, value in node.items() if key != "alpha"}
    assert yaml_mismatches("tabular_single", stray) == ["tabular_single: task.arm has no declaration"]
    assert yaml_mismatches("tabular_single", missing) == ["tabular_single: task.alpha is declared but not in its YAML"]
    task = get_task("tabular_single")
    with pytest.raises(ConfigError, match=r"^task\.arm is not a setting of task=tabular_single; valid keys: arms, "
                                          r"batch_size, alpha, name, kind, steps, checkpoint_every, steps_to; did "
                                          r"you mean task\.arms\?$"):
        task.settings_of(OmegaConf.create(stray))
    with pytest.raises(ConfigError, match=r"^task\.alpha is missing; task=tabular_single needs arms, batch_size, "
                                          r"alpha$"):
        task.settings_of(OmegaConf.create(missing))


@pytest.mark.parametrize("override, message", [
    ("task.H=0", "task.H=0 is not valid; expected a positive integer"),
    ("task.V=1", "task.V=1 is not valid; expected an integer >= 2"),
    ("task.K=0", "task.K=0 is not valid; expected an integer >= 2 (>= 1 for a single-sample method"),
    ("task.reward=dense", "task.reward='dense' is not valid; valid choices: bag_of_tokens, sequential, terminal"),
    ("task.seed_chunk=0", "task.seed_chunk=0 is not valid; expected auto or a positive integer"),
    ("task.partial_credit=1.0", "task.partial_credit=1.0 is not valid"),
    ("task.dedup=maybe", "task.dedup='maybe' is not valid; valid choices: auto, True, False"),
])
def test_a_bad_token_reversal_setting_is_refused_in_one_line(override, message):
    node = compose_config(["task=token_reversal", override]).task
    with pytest.raises(ConfigError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        get_task("token_reversal").settings_of(node)


def test_settings_are_typed_once():
    """A number in a float setting is a float, an integer stays an int; the settings are frozen."""
    settings = get_task("mnist_bandit").settings_of(compose_config(["task=mnist_bandit", "task.lr=1"]).task)
    assert isinstance(settings.lr, float) and settings.lr == 1.0 and isinstance(settings.batch_size, int)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.lr = 2.0
    node = compose_config(["task=token_reversal", "task.reward_noise=0"]).task  # an integer in a float setting
    reversal = get_task("token_reversal").settings_of(node)
    assert isinstance(reversal.reward_noise, float) and reversal.K == 8
