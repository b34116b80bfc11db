"""Reasoning Gym tasks (paper §3.8, Fig 9b, c): procedurally generated puzzles scored by the library's own scorers.

Prompts: Reasoning Gym's system prompt (``task.system_prompt``, a key of ``reasoning_gym.utils.SYSTEM_PROMPTS``)
asking for the answer inside <answer></answer>, then the puzzle. Training puzzles are generated with the run seed,
held-out puzzles with ``task.eval_seed``; ``task.generator`` holds the dataset's own config fields.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from omegaconf import DictConfig, OmegaConf

from common.checks import ConfigError, check_choice
from common.declared import required
from tasks.llm.answers import final_number, last_json_object, tagged_answer
from tasks.llm.base import LLMTask, chat


def check_system_prompt(key: str, value: Any) -> str:
    from reasoning_gym.utils import SYSTEM_PROMPTS

    return check_choice(key, value, sorted(SYSTEM_PROMPTS))


def check_generator(key: str, value: Any) -> dict:
    """The dataset's own config fields, as a mapping (which fields it has is the dataset's to say)."""
    if not isinstance(value, (dict, DictConfig)):
        raise ConfigError(f"{key}={value!r} is not valid; expected a mapping of the dataset's config fields")
    return OmegaConf.to_container(value) if isinstance(value, DictConfig) else dict(value)


class ReasoningGymTask(LLMTask):
    dataset_name: str  # the Reasoning Gym dataset id
    columns = ("split", "item")

    @dataclasses.dataclass(frozen=True)
    class Settings(LLMTask.Settings):
        system_prompt: str = required("a reasoning_gym.utils.SYSTEM_PROMPTS key", check=check_system_prompt)
        generator: dict = required("the dataset's own config fields (but seed and size, which the task sets)",
                                   check=check_generator)
        eval_seed: int = required("the held-out puzzles' seed, the same for every run", low=0, integer=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from reasoning_gym.utils import SYSTEM_PROMPTS

        self.system = SYSTEM_PROMPTS[self.settings.system_prompt]
        self.datasets: dict[str, Any] = {}
        self.entries: dict[str, list[dict]] = {}

    def _generate(self, split: str, seed: int, size: int) -> list[dict[str, Any]]:
        import reasoning_gym

        try:
            dataset = reasoning_gym.create_dataset(self.dataset_name, seed=seed, size=size,
                                                   **self.settings.generator)
        except (TypeError, AssertionError) as error:
            raise ConfigError(f"task.generator is not valid for reasoning-gym {self.dataset_name}: {error}") from None
        self.datasets[split], self.entries[split] = dataset, list(dataset)
        return [{"prompt": chat(entry["question"], self.system), "split": split, "item": index}
                for index, entry in enumerate(self.entries[split])]

    def train_rows(self, seed: int, count: int) -> list[dict[str, Any]]:
        return self._generate("train", seed, count)

    def eval_rows(self) -> list[dict[str, Any]]:
        return self._generate("test", self.settings.eval_seed, self.settings.eval_size)

    def answer(self, completion: str) -> str | None:
        """The text handed to the scorer."""
        return tagged_answer(completion)

    def score(self, completion: str, row: dict[str, Any]) -> float:
        entry = self.entries[row["split"]][row["item"]]
        return float(self.datasets[row["split"]].score_answer(answer=self.answer(completion), entry=entry))


class GraphColouring(ReasoningGymTask):
    """Colour a graph so no edge joins two equal colours; 1 for a valid colouring, 0.01 for any parsable JSON map."""

    name = "graph_colouring"
    dataset_name = "graph_color"

    def answer(self, completion: str) -> str | None:
        """The JSON map, from the <answer> block when there is one, else from the whole completion."""
        tagged = tagged_answer(completion)
        colouring = last_json_object(tagged if tagged is not None else completion)
        return None if colouring is None else json.dumps(colouring)


class KnightsKnaves(ReasoningGymTask):
    """Who tells the truth; partial credit 0.3 + 0.7·(fraction right) when every person is named."""

    name = "knights_knaves"
    dataset_name = "knights_knaves"


ANSWER_RULES = ("tagged", "tagged_or_last_number")  # task.answer


def tagged_or_last_number(completion: str) -> str | None:
    """The <answer> block, else the completion's last number: SmolLM2-135M answers "1 + 5 = 6" and ignores the
    tags, so with the tags alone it never succeeds and RL has nothing to learn from."""
    tagged = tagged_answer(completion)
    if tagged is not None:
        return tagged
    number = final_number(completion)
    return None if number is None else str(number)


def check_dataset(key: str, value: Any) -> str:
    from reasoning_gym.factory import DATASETS

    return check_choice(key, value, sorted(DATASETS))


class ReasoningGym(ReasoningGymTask):
    """Any Reasoning Gym dataset (``task.dataset``) with its own scorer: easy settings give a small model the
    non-zero success rate RL needs to learn at all. ``task.answer`` picks what the scorer reads (``ANSWER_RULES``)."""

    name = "reasoning_gym"

    @dataclasses.dataclass(frozen=True)
    class Settings(ReasoningGymTask.Settings):
        dataset: str = required("a reasoning_gym dataset id", check=check_dataset)
        answer: str = required("what the scorer reads: tagged (the <answer> block) | tagged_or_last_number",
                               choices=ANSWER_RULES)
        exact: bool = required("true: 1 for a right answer, else 0 (no partial credit for a wrong one containing it)")

    def __init__(self, *args, **kwargs):
        from reasoning_gym.factory import DATASETS

        super().__init__(*args, **kwargs)
        self.dataset_name = self.settings.dataset
        config_class = DATASETS[self.dataset_name][1]
        fields = [f.name for f in dataclasses.fields(config_class) if f.name not in ("seed", "size")]  # set per split
        unknown = [key for key in self.settings.generator if key not in fields]
        if unknown:
            raise ConfigError(f"task.generator.{unknown[0]} is not a field of reasoning-gym {self.dataset_name}; "
                              f"valid choices: {', '.join(fields)}")

    def score(self, completion: str, row: dict[str, Any]) -> float:
        """The dataset's score, or with ``task.exact`` 1 for a right answer and 0 otherwise: many scorers give partial
        credit to a wrong answer that contains the right one ("36" for 6 scores 0.5)."""
        score = super().score(completion, row)
        return float(score == 1.0) if self.settings.exact else score

    def answer(self, completion: str) -> str | None:
        return tagged_or_last_number(completion) if self.settings.answer == "tagged_or_last_number" else \
            tagged_answer(completion)
