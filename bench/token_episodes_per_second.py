"""Token-reversal training speed: episodes/s per algorithm at 1 and 20 batched seeds (issue #3 / #5 baseline).

    python bench/token_episodes_per_second.py [--reward terminal] [--H 10] [--V 2] [--episodes 3] [--threads 1]

Default setting: terminal reward, reverse copy, H = 10, V = 2, K = 8, B = 100 (Table 3 / Fig 1b). Each number is
wall time per episode after one warm-up episode, with all epochs; CPU seconds per episode are printed beside it.
The paper's JAX reference costs 1.83 (TPO) and 2.09 (GRPO) CPU-seconds per episode and seed at H = 10 on this
machine class. Timings on a shared machine are noisy: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from harness.run import build_task, compose_config


def make_task(algorithm: str, seeds: int, args):
    overrides = ["task=token_reversal", f"algorithm={algorithm}", f"seeds={seeds}", "logger=none",
                 f"task.reward={args.reward}", f"task.H={args.H}", f"task.V={args.V}", f"task.K={args.K}",
                 f"task.batch_size={args.batch_size}"]
    return build_task(compose_config(overrides))


def time_episodes(task, episodes: int) -> tuple[float, float]:
    """(wall, CPU) seconds per episode after one warm-up episode."""
    task.step(0)
    wall, cpu = time.perf_counter(), time.process_time()
    for episode in range(1, episodes + 1):
        task.step(episode)
    return (time.perf_counter() - wall) / episodes, (time.process_time() - cpu) / episodes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reward", default="terminal")
    parser.add_argument("--H", type=int, default=10)
    parser.add_argument("--V", type=int, default=2)
    parser.add_argument("--K", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--episodes", type=int, default=3)
    parser.add_argument("--seeds", default="1,20")
    parser.add_argument("--algorithms", default="tpo,grpo,grpo_no_kl,ppo,dg")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {platform.machine()}, threads={args.threads}; token_reversal reward="
          f"{args.reward} H={args.H} V={args.V} K={args.K} B={args.batch_size}; {args.episodes} timed episodes")
    print(f"{'algorithm':<12}{'seeds':>6}{'s/episode':>11}{'episodes/s':>12}{'CPU-s/episode/seed':>20}")
    for algorithm in args.algorithms.split(","):
        for seeds in map(int, args.seeds.split(",")):
            wall, cpu = time_episodes(make_task(algorithm, seeds, args), args.episodes)
            print(f"{algorithm:<12}{seeds:>6}{wall:>11.3f}{1 / wall:>12.2f}{cpu / seeds:>20.3f}", flush=True)


if __name__ == "__main__":
    main()
