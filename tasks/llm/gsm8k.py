"""GSM8K (paper §3.8, Fig 9a): grade-school math, exact match on the final number, held-out test accuracy.

Data: ``task.source`` = local (``task.data_dir``/{train,test}.jsonl, or .jsonl.gz, the dataset's own format:
"question", "answer" ending in "#### N"), hub (``task.hub_id`` through ``datasets``), or auto (local when the files
exist, else the Hub). ``task.data_dir: null`` (the default) is the copy shipped inside the package,
``tasks/llm/data/gsm8k/`` (the 7,473 training and 1,319 test problems, gzipped, MIT licence, OpenAI), so the task needs
no network; a relative ``task.data_dir`` is read from the working folder. The prompt is the question plus the
instruction to put the answer after "####".
"""

from __future__ import annotations

import gzip
import json
from decimal import Decimal
from pathlib import Path
from dataclasses import dataclass
from typing import Any

from common.checks import ConfigError, check_optional_text, check_text
from common.declared import required
from tasks.llm.answers import final_number, gsm8k_reference
from tasks.llm.base import LLMTask, chat

SHIPPED_DATA = Path(__file__).resolve().parent / "data" / "gsm8k"  # package data: {train,test}.jsonl.gz + LICENSE
SPLITS = ("train", "test")
INSTRUCTION = 'Let\'s think step by step and output the final answer after "####".'


def read_jsonl(path: Path, fields: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The records of a .jsonl file, or of a gzipped one (.jsonl.gz), each with ``fields``; a line that is not such a
    record is a one-line ConfigError naming the file and line."""
    records = []
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if path.suffix == ".gz" else open(path, encoding="utf-8")) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ConfigError(f"{path}:{number}: not a JSON record ({error.msg})") from None
                missing = [name for name in fields if not isinstance(record, dict) or name not in record]
                if missing:
                    raise ConfigError(f"{path}:{number}: the record lacks {', '.join(missing)}")
                records.append(record)
    except (OSError, EOFError, UnicodeDecodeError) as error:  # unreadable, a truncated .gz, not UTF-8
        raise ConfigError(f"{path}: cannot be read ({error})") from None
    return records


def data_dir(setting: str | None) -> Path:
    """``task.data_dir`` resolved: None → the shipped copy; a relative path → from the folder the command runs in
    (as MNIST's ``task.data_dir``: an installed package has no repository to be relative to)."""
    if setting is None:
        return SHIPPED_DATA
    return Path(setting).expanduser().absolute()


def split_file(folder: Path, split: str) -> Path | None:
    """``folder``/``split``.jsonl, else ``split``.jsonl.gz, else None."""
    return next((path for path in (folder / f"{split}.jsonl", folder / f"{split}.jsonl.gz") if path.is_file()), None)


class Gsm8k(LLMTask):
    name = "gsm8k"
    columns = ("answer",)

    @dataclass(frozen=True)
    class Settings(LLMTask.Settings):
        eval_size: int | None = required("held-out prompts (greedy decoding); null = the whole test split",
                                         low=1, integer=True, optional=True)
        source: str = required("auto: local files when present, else the Hub | local | hub",
                               choices=("auto", "local", "hub"))
        data_dir: str | None = required("null = the copy shipped in the package; else a folder with "
                                        "{train,test}.jsonl[.gz]", check=check_optional_text)
        hub_id: str = required("the dataset's Hub id", check=check_text)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings = self.settings
        self.data_dir = data_dir(settings.data_dir)
        has_local = all(split_file(self.data_dir, split) is not None for split in SPLITS)
        if settings.source == "local" and not has_local:
            raise ConfigError(f"task.data_dir={settings.data_dir!r} has no train.jsonl[.gz] and test.jsonl[.gz] "
                              f"(resolved: {self.data_dir}); valid choices: a folder with both, null (the shipped "
                              "copy), or task.source=hub")
        self.local = settings.source == "local" or (settings.source == "auto" and has_local)
        # read now, before a model loads: a damaged file fails the launch, not the first evaluation
        self.local_records = {split: read_jsonl(split_file(self.data_dir, split), ("question", "answer"))
                              for split in SPLITS} if self.local else {}

    def _records(self, split: str) -> list[dict[str, Any]]:
        if self.local:
            return self.local_records[split]
        from datasets import load_dataset

        return list(load_dataset(self.settings.hub_id, "main", split=split))

    def _rows(self, split: str) -> list[dict[str, Any]]:
        return [{"prompt": chat(f"{r['question']} {INSTRUCTION}"), "answer": str(gsm8k_reference(r["answer"]))}
                for r in self._records(split)]

    def train_rows(self, seed: int, count: int) -> list[dict[str, Any]]:
        return self._rows("train")

    def eval_rows(self) -> list[dict[str, Any]]:
        rows = self._rows("test")
        return rows if self.settings.eval_size is None else rows[: self.settings.eval_size]

    def score(self, completion: str, row: dict[str, Any]) -> float:
        predicted = final_number(completion)
        return float(predicted is not None and predicted == Decimal(row["answer"]))
