"""Base success rates of the CPU model (SmolLM2-135M-Instruct) on easy Reasoning Gym settings, generation only.

RL from verifiable rewards learns only where the base policy sometimes succeeds: a group of K completions with mixed
scores is the only one with a learning signal. This survey finds a setting whose sampled success rate is small but
clearly non-zero, with short prompts and completions so that a step is cheap on CPU. For each setting it reports,
on the same held-out puzzles every time (seed 1000003), the greedy success rate, the success rate of K = 8 samples
at temperature 1, the fraction of groups of 8 with mixed outcomes, the prompt length in tokens and the seconds
spent generating 8 completions. Success: the dataset's own ``score_answer`` gives 1 to the answer that
``task.answer=tagged_or_last_number`` reads (the <answer> block, else the last number); the "tags only" column reads
the <answer> block alone, which the model almost never writes.

    python bench/llm_base_rates.py --out results/bench/llm_base_rates.txt
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import reasoning_gym
import torch
from omegaconf import OmegaConf
from reasoning_gym.utils import SYSTEM_PROMPTS

from harness.llm.models import load_policy
from tasks.llm.answers import tagged_answer
from tasks.llm.base import chat
from tasks.llm.gym_tasks import tagged_or_last_number

SETTINGS = {  # dataset id → its generator fields: small numeric answers, which the last-number rule reads
    "chain_sum": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
    "leg_counting": {"min_animals": 1, "max_animals": 2, "min_instances": 1, "max_instances": 3},
    "gcd": {"min_value": 1, "max_value": 20},
    "letter_counting": {"min_words": 3, "max_words": 5},
    "basic_arithmetic": {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, "operators": ["*"],
                         "allow_parentheses": False, "allow_negation": False},
}


def survey(model, tokenizer, dataset_id: str, generator: dict, args) -> dict:
    dataset = reasoning_gym.create_dataset(dataset_id, seed=args.seed, size=args.prompts, **generator)
    entries = list(dataset)
    prompts = [chat(entry["question"], SYSTEM_PROMPTS[args.system_prompt]) for entry in entries]
    encoded = [tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=True, return_dict=True)
               for p in prompts]
    prompt_tokens = sum(len(e["input_ids"]) for e in encoded) / len(encoded)

    def scores(chunk_entries, chunk_prompts, samples: int) -> list[tuple[float, float]]:
        batch = tokenizer.apply_chat_template(chunk_prompts, add_generation_prompt=True, tokenize=True,
                                              return_dict=True, return_tensors="pt", padding=True)
        sampling = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0} if samples > 1 else \
            {"do_sample": False}
        out = model.generate(**batch, max_new_tokens=args.max_tokens, num_return_sequences=samples,
                             pad_token_id=tokenizer.pad_token_id, **sampling)
        texts = tokenizer.batch_decode(out[:, batch["input_ids"].size(1):], skip_special_tokens=True)
        repeated = [entry for entry in chunk_entries for _ in range(samples)]
        return [tuple(float(dataset.score_answer(answer=rule(t), entry=e) == 1.0)
                      for rule in (tagged_or_last_number, tagged_answer)) for t, e in zip(texts, repeated)]

    greedy, sampled = [], []
    for first in range(0, len(entries), args.chunk):
        greedy += scores(entries[first:first + args.chunk], prompts[first:first + args.chunk], 1)
    sampling_start = time.process_time()
    for first in range(0, len(entries), args.chunk):
        sampled += scores(entries[first:first + args.chunk], prompts[first:first + args.chunk], args.K)
    sampling_seconds = time.process_time() - sampling_start
    groups = [[success for success, _ in sampled[i:i + args.K]] for i in range(0, len(sampled), args.K)]
    return {"greedy": sum(s for s, _ in greedy) / len(greedy), "sampled": sum(s for s, _ in sampled) / len(sampled),
            "tags_only": sum(t for _, t in sampled) / len(sampled),
            "mixed": sum(0 < sum(g) < len(g) for g in groups) / len(groups), "prompt_tokens": prompt_tokens,
            "cpu_s_per_8": sampling_seconds / len(entries) * 8 / args.K}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="*", default=list(SETTINGS))
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--K", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--chunk", type=int, default=8, help="prompts per generate call")
    parser.add_argument("--system-prompt", default="direct")
    parser.add_argument("--seed", type=int, default=1000003)
    parser.add_argument("--out", type=Path, default=Path("results/bench/llm_base_rates.txt"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model, tokenizer = load_policy(OmegaConf.load("conf/model/smollm2_135m.yaml"), "cpu")
    model.eval()
    header = (f"SmolLM2-135M-Instruct (float32, 1 thread), system prompt {args.system_prompt!r}, "
              f"{args.prompts} held-out puzzles (seed {args.seed}), completions <= {args.max_tokens} tokens, "
              "success = score_answer 1\n"
              f"{'dataset':<17} {'greedy':>6} {'K=8 T=1':>7} {'tags only':>9} {'mixed groups':>12} "
              f"{'prompt tok':>10} {'CPU-s/8':>7}  generator")
    lines = [header]
    print(header, flush=True)
    for dataset_id in args.datasets:
        with torch.no_grad():
            r = survey(model, tokenizer, dataset_id, SETTINGS[dataset_id], args)
        line = (f"{dataset_id:<17} {r['greedy']:>6.2f} {r['sampled']:>7.2f} {r['tags_only']:>9.2f} "
                f"{r['mixed']:>12.2f} {r['prompt_tokens']:>10.0f} {r['cpu_s_per_8']:>7.1f}  {SETTINGS[dataset_id]}")
        lines.append(line)
        print(line, flush=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
