"""Why an episode of one algorithm costs more than another's: the work it gives ``task.dedup``, per episode.

    python bench/episode_workload.py [--algorithms grpo,tpo] [--episodes 2-11] [--H 10] [--seed 0]

For the terminal-reward setting (Fig 1b: H = 10, V = 2, K = 8, B = 100, one seed, one thread, denormals flushed as in
training), trains each algorithm from initialisation and, over the given episodes, reports the CPU-seconds per
episode, the distinct answers (the rows the teacher-forced forward and backward train) and the distinct
(prompt, prefix) rows the sampler decodes, and the CPU time per distinct answer. Equal time per row with unequal
rows means the difference is the policy's, not the code's: a policy that keeps its answers diverse gives dedup
nothing to share.
"""

from __future__ import annotations

import argparse
import time

import torch

from harness import process
from harness.config import build_task, compose_config
from harness.trainers import episode

process.tune_memory()  # as python -m harness does (harness.process)

import tasks.token_reversal as token_reversal  # noqa: E402


def decoded_rows(actions: torch.Tensor) -> int:
    """Distinct (prompt, prefix) pairs the shared-prefix sampler decodes after the first token, one seed."""
    _, B, _, H = actions.shape
    return sum(len(torch.unique(actions[0, b, :, :t], dim=0)) for t in range(1, H) for b in range(B))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algorithms", default="grpo,tpo")
    parser.add_argument("--episodes", default="2-11", help="first-last episode measured (earlier ones train only)")
    parser.add_argument("--H", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    first, last = map(int, args.episodes.split("-"))
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    print(f"terminal reward, H = {args.H}, seed {args.seed}, episodes {first}-{last}")
    print(f"{'algorithm':<10}{'CPU-s/episode':>15}{'distinct answers':>18}{'decoded rows':>14}{'ms/answer':>11}")
    for algorithm in args.algorithms.split(","):
        cfg = compose_config(["experiment=fig1b_sparse", f"algorithm={algorithm}", "seeds=1", f"task.H={args.H}",
                              f"seed_offset={args.seed}", "logger=none"])
        task = build_task(cfg)
        cpu, answers, rows = 0.0, 0, 0
        for step in range(last + 1):
            if step >= first:  # the same batch the step draws (counter-based streams)
                batch = task.rollout_batch(step)
                answers += token_reversal.distinct_answers(batch.actions)[0].shape[1]
                rows += decoded_rows(batch.actions)
                start = time.process_time()
            episode(task, step)
            if step >= first:
                cpu += time.process_time() - start
        n = last - first + 1
        print(f"{algorithm:<10}{cpu / n:>15.3f}{answers / n:>18.0f}{rows / n:>14.0f}{1e3 * cpu / answers:>11.3f}")


if __name__ == "__main__":
    main()
