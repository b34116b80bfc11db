"""LLM runs on compute nodes without network: fetch on the login machine what a run would download, then run offline.

An LLM run reads its model from ``model.path`` / ``model.package`` (a Hub id is downloaded on first use) and GSM8K
from the Hub when ``task.source`` says so (or, with ``auto``, when there are no local files). On a compute node that
download fails, or hangs on retries, after the job has waited in the queue. ``node_ready`` does the downloads where
the Hub is reachable, into the caches the node reads (same ``HF_HOME`` / ``HF_HUB_CACHE`` / ``HF_DATASETS_CACHE``),
and a job started with ``NODE_ENVIRONMENT`` then reads only those caches.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from common.checks import ConfigError

# A job's environment on a compute node: the Hub libraries read only their caches and never wait on the network.
NODE_ENVIRONMENT: dict[str, str] = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

# Weights in formats the PyTorch loader never reads (GGUF only when model.gguf_file names one): not downloaded.
UNUSED_WEIGHT_FILES = ("*.gguf", "*.onnx", "onnx/*", "*.h5", "*.msgpack", "*.ot", "*.tflite", "original/*")
OFFLINE_REASON = "offline mode is set: HF_HUB_OFFLINE, HF_DATASETS_OFFLINE or TRANSFORMERS_OFFLINE"
GSM8K_CONFIG = "main"  # the dataset config tasks/llm/gsm8k.py loads


def node_ready(cfg: DictConfig) -> list[str]:
    """Make everything the run ``cfg`` would download present in this machine's Hugging Face caches, so that the run
    can start on a node without network (``NODE_ENVIRONMENT``); one line per thing resolved, [] for a run that is not
    an LLM run (nothing to fetch). ConfigError, one line naming the key, for what is neither cached nor reachable."""
    if OmegaConf.select(cfg, "task.kind", default=None) != "llm":
        return []
    lines = [model_ready(cfg.model)]
    if cfg.task.name == "gsm8k":
        from tasks import get_task

        settings = get_task("gsm8k").settings_of(cfg.task)  # a bad value: its one-line refusal, before any fetch
        if gsm8k_reads_hub(settings):
            lines.append(gsm8k_ready(settings))
    return lines


def model_ready(model_cfg: DictConfig) -> str:
    """The model's folder (``model.package``, a local ``model.path``: nothing to fetch), or its Hub snapshot,
    downloaded or completed into the hub cache. The Hub is asked first when reachable: a snapshot folder can exist
    with files missing (an earlier config-only load), and only the Hub's file list shows it; when it cannot be
    reached, huggingface_hub falls back to the cached snapshot itself."""
    from harness.llm.models import model_source

    source = model_source(model_cfg)  # ConfigError for a package that is not installed
    if os.path.isdir(source):  # as transformers tells a folder from a Hub id
        return f"model {source}: local folder, nothing to fetch"
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError

    cache = hub_cache_dir()
    gguf_file = model_cfg.get("gguf_file")
    patterns = ({"allow_patterns": [gguf_file, "*.json", "*.jinja"]} if gguf_file
                else {"ignore_patterns": list(UNUSED_WEIGHT_FILES)})
    try:
        folder = snapshot_download(source, cache_dir=cache, local_files_only=hub_offline(), **patterns)
    except HFValidationError:
        raise ConfigError(f"model.path={source!r} is neither a folder here nor a Hub id (org/name); valid choices: "
                          "an existing local folder, or a Hub id") from None
    except Exception as error:  # noqa: BLE001 - offline, not found, gated, proxy: each one line
        reason = OFFLINE_REASON if hub_offline() else failure_reason(error)
        raise ConfigError(f"model.path={source!r} is not (completely) in the Hugging Face cache ({cache}) and cannot "
                          f"be downloaded here ({reason}); valid choices: run once where the Hub is reachable, or "
                          "model.path=<local folder>") from None
    return f"model {source}: in the Hugging Face cache at {folder}"


def gsm8k_reads_hub(settings) -> bool:
    """Whether GSM8K reads the Hub rather than local files, as ``tasks.llm.gsm8k.Gsm8k`` decides from its settings:
    ``source=hub``, or ``auto`` without both split files in ``task.data_dir``."""
    from tasks.llm.gsm8k import SPLITS, data_dir, split_file

    if settings.source == "auto":
        folder = data_dir(settings.data_dir)
        return not all(split_file(folder, split) is not None for split in SPLITS)
    return settings.source == "hub"


def gsm8k_ready(settings) -> str:
    """GSM8K prepared in the datasets cache: the cached copy when there is one (a prepared dataset is complete), else
    downloaded. ``datasets`` retries an unreachable Hub for ~25 s; the Hub is asked once first instead."""
    import datasets

    hub_id, cache = settings.hub_id, datasets_cache_dir()
    try:
        with datasets_offline():
            return gsm8k_line(hub_id, datasets.load_dataset(hub_id, GSM8K_CONFIG, cache_dir=cache))
    except Exception:  # noqa: BLE001 - not cached: download it below
        pass

    def refusal(reason: str) -> ConfigError:
        return ConfigError(f"task.hub_id={hub_id!r} (task.source={settings.source}) is not in the datasets cache "
                           f"({cache}) and cannot be downloaded here ({reason}); valid choices: run once where the "
                           "Hub is reachable, or task.source=local with task.data_dir=<a folder with train.jsonl and "
                           "test.jsonl> (null: the shipped copy)")

    if datasets_offline_set():
        raise refusal(OFFLINE_REASON)
    from huggingface_hub import HfApi

    try:
        HfApi().dataset_info(hub_id)  # one request: an unreachable Hub fails here, not after datasets' retries
        return gsm8k_line(hub_id, datasets.load_dataset(hub_id, GSM8K_CONFIG, cache_dir=cache))
    except Exception as error:  # noqa: BLE001 - unreachable, not found, a proxy: each one line
        raise refusal(failure_reason(error)) from None


def gsm8k_line(hub_id: str, dataset) -> str:
    files = [entry["filename"] for split in dataset.values() for entry in split.cache_files]
    where = Path(files[0]).parent if files else datasets_cache_dir()
    return f"data {hub_id} ({GSM8K_CONFIG}): in the datasets cache at {where}"


@contextmanager
def datasets_offline():
    """``datasets`` reads its offline switch once, at import, and ignores ``local_files_only`` when it resolves a
    Hub dataset: the switch itself, set for the lookup, is the only way to read the cache without the network."""
    import datasets.config

    saved = datasets.config.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE = saved


def failure_reason(error: BaseException) -> str:
    """Why a download failed, short: the error's type and first line (the libraries' messages run to paragraphs)."""
    first = next((line.strip() for line in str(error).splitlines() if line.strip()), "")
    text = f"{type(error).__name__}: {first}" if first else type(error).__name__
    return text if len(text) <= 160 else text[:157] + "..."


# The libraries read these variables once, at import; read here at each call, by the same rules, so that the caches
# and the offline switch are those of the environment the caller (and the job it submits) has now.

def _env_true(name: str) -> bool:
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _hf_home() -> Path:
    default = Path(os.environ.get("XDG_CACHE_HOME", Path("~").expanduser() / ".cache")) / "huggingface"
    return Path(os.path.expandvars(os.path.expanduser(os.environ.get("HF_HOME", str(default)))))


def hub_cache_dir() -> Path:
    """huggingface_hub's cache: ``HF_HUB_CACHE`` (legacy ``HUGGINGFACE_HUB_CACHE``), else ``HF_HOME``/hub."""
    folder = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE") or str(_hf_home() / "hub")
    return Path(os.path.expandvars(os.path.expanduser(folder)))


def datasets_cache_dir() -> Path:
    """datasets' cache: ``HF_DATASETS_CACHE``, else ``HF_HOME``/datasets."""
    return Path(os.path.expanduser(os.environ.get("HF_DATASETS_CACHE") or str(_hf_home() / "datasets")))


def hub_offline() -> bool:
    return _env_true("HF_HUB_OFFLINE") or _env_true("TRANSFORMERS_OFFLINE")


def datasets_offline_set() -> bool:
    """``HF_DATASETS_OFFLINE`` when set (either way), else the Hub's switch, as ``datasets.config`` decides."""
    return _env_true("HF_DATASETS_OFFLINE") if "HF_DATASETS_OFFLINE" in os.environ else hub_offline()
