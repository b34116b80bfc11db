"""A tiny random Qwen3 with a byte-level BPE tokenizer trained on the fly: the offline policy of the LLM tests."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent

CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = [
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
    "How many clips did Natalia sell altogether? Let's think step by step and output the final answer after ####.",
    "Please provide a coloring for this graph such that every vertex is not connected to a vertex of the same color.",
    'Vertices: [0, 1, 2, 3] Edges: [(0, 1), (1, 2)] Possible colors: [1, 2, 3] {"0": 1, "1": 2, "2": 3}',
    "A very special island is inhabited only by knights and knaves. Knights always tell the truth.",
    "Ava is a knight, and Ben is a knave. <answer>Ava is a knight, and Ben is a knave</answer> #### 72",
    "user assistant system Given a problem, your task is to answer the question by thinking step-by-step.",
] * 20


def build_tiny_llm(folder: Path) -> Path:
    """Save a 2-layer Qwen3 (hidden 32, 2 heads) and its tokenizer (byte-level BPE, ~300 tokens) to ``folder``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(CORPUS, trainers.BpeTrainer(
        vocab_size=320, special_tokens=SPECIAL, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = PreTrainedTokenizerFast(tokenizer_object=tokenizer, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   chat_template=CHAT_TEMPLATE)
    config = Qwen3Config(vocab_size=fast.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, head_dim=16, max_position_embeddings=1024,
                         tie_word_embeddings=True, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
                         bos_token_id=None)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    fast.save_pretrained(folder)
    return folder


def write_gsm8k(folder: Path, problems: int = 16) -> Path:
    """GSM8K-format problems "What is n plus n?" (answer 2n) in both splits."""
    folder.mkdir(parents=True, exist_ok=True)
    for split in ("train", "test"):
        with open(folder / f"{split}.jsonl", "w") as handle:
            for n in range(problems):
                handle.write(json.dumps({"question": f"What is {n} plus {n}?", "answer": f"{n}+{n}=<<{n}+{n}={2 * n}>>"
                                         f"{2 * n}\n#### {2 * n}"}) + "\n")
    return folder


def tiny_overrides(model_dir: Path, task: str, data_dir: Path | None = None) -> list[str]:
    """A 2-step LLM run: 2 prompts × K = 2, 8-token completions, the tiny model."""
    overrides = [f"task={task}", "model=hf", f"model.path={model_dir}", "model.gradient_checkpointing=false",
                 "task.K=2", "task.batch_size=2", "task.max_completion_length=8", "task.steps=2",
                 "task.eval_size=2", "task.eval_batch_size=2"]
    if task == "gsm8k":
        overrides += ["task.source=local", f"task.data_dir={data_dir}", "task.lora_rank=4", "task.eval_every=1"]
    else:
        overrides += ["task.generator.min_num_vertices=3", "task.generator.max_num_vertices=3"] \
            if task == "graph_colouring" else []
    return overrides


def llm_presets(llm_tasks) -> list[str]:
    """The presets that compose an LLM task: directly (``override /task``) or through another such preset."""
    defaults = {path.stem: yaml.safe_load(path.read_text()).get("defaults", [])
                for path in (ROOT / "conf" / "experiment").glob("*.yaml")}
    found = {name for name, entries in defaults.items()
             if any(entry == {"override /task": task} for task in llm_tasks for entry in entries)}
    while extended := {name for name, entries in defaults.items()
                       if name not in found and any(entry in found for entry in entries if isinstance(entry, str))}:
        found |= extended
    return sorted(found)
