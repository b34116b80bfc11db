"""Token-reversal training speed: episodes/s per algorithm at 1 and 20 seeds, and the average over a whole run.

    python bench/token_episodes_per_second.py [--reward terminal] [--H 10] [--V 2] [--episodes 3] [--threads 1]
        [--chunks 1,20] [--run-episodes 2000 --run-algorithms tpo,grpo]

Default setting: terminal reward, reverse copy, H = 10, V = 2, K = 8, B = 100 (Table 3 / Fig 1b). Each number is
wall time per episode after one warm-up episode, with all epochs, from initialisation (where every sampled answer
is distinct: the most expensive episodes); CPU seconds per episode and seed are printed beside it. The 1-seed row
is the mean over the same seeds run one by one (a seed's cost depends on its data: once its policy is confident,
``task.dedup`` trains fewer distinct answers), so the per-seed throughput compares like with like. At 20 seeds the
seeds are computed in chunks of ``task.seed_chunk`` (1 = one seed at a time, 20 = one batched program): each
chunking is one row. ``--run-episodes N`` also trains N episodes at 1 seed and reports the average CPU-seconds per
episode over the whole run, with the cost of its first and last tenth: late in training most of a group's answers
coincide and ``task.dedup`` decodes and trains each distinct answer once. The paper's JAX reference costs 1.83
(TPO) and 2.09 (GRPO) CPU-seconds per episode and seed at H = 10 and 1.16 at H = 7 on this machine class.
Timings on a shared machine are noisy: compare the rows of one run.
"""

from __future__ import annotations

import argparse
import platform
import time

import torch

from harness import process
from harness.config import build_task, compose_config
from harness.trainers import episode

process.tune_memory()  # as python -m harness does (harness.process)


def make_task(algorithm: str, seeds: int, args, chunk: int | str = "auto", seed_offset: int = 0):
    overrides = ["task=token_reversal", f"algorithm={algorithm}", f"seeds={seeds}", f"seed_offset={seed_offset}",
                 "logger=none",
                 f"task.reward={args.reward}", f"task.H={args.H}", f"task.V={args.V}", f"task.K={args.K}",
                 f"task.batch_size={args.batch_size}", f"task.seed_chunk={chunk}"]
    return build_task(compose_config(overrides))


def time_run(task, episodes: int) -> tuple[float, float, float]:
    """CPU seconds per episode over a whole run from initialisation: (average, first tenth, last tenth)."""
    costs = []
    for step in range(episodes):
        cpu = time.process_time()
        episode(task, step)
        costs.append(time.process_time() - cpu)
    tenth = max(1, episodes // 10)
    return sum(costs) / episodes, sum(costs[:tenth]) / tenth, sum(costs[-tenth:]) / tenth


def time_episodes(task, episodes: int) -> tuple[float, float]:
    """(wall, CPU) seconds per episode after one warm-up episode."""
    episode(task, 0)
    wall, cpu = time.perf_counter(), time.process_time()
    for step in range(1, episodes + 1):
        episode(task, step)
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
    parser.add_argument("--chunks", default="1,20", help="task.seed_chunk values timed at more than one seed")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--run-episodes", type=int, default=0, help="also time a whole run of this many episodes")
    parser.add_argument("--run-algorithms", default="tpo,grpo")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    seed_counts = list(map(int, args.seeds.split(",")))
    print(f"torch {torch.__version__}, {platform.machine()}, threads={args.threads}; token_reversal reward="
          f"{args.reward} H={args.H} V={args.V} K={args.K} B={args.batch_size}; {args.episodes} timed episodes")
    print(f"{'algorithm':<12}{'seeds':>6}{'chunk':>6}{'s/episode':>11}{'episodes/s':>12}{'CPU-s/episode/seed':>20}"
          f"{'per-seed throughput vs 1 seed':>31}")
    print(f"(1-seed rows: the mean over seeds 0–{max(seed_counts) - 1}, each run alone)")
    for algorithm in args.algorithms.split(","):
        single = None
        for seeds in seed_counts:
            if seeds == 1:  # each of the multi-seed rows' seeds alone: the cost depends on the seed's data (dedup)
                runs = [time_episodes(make_task(algorithm, 1, args, 1, offset), args.episodes)
                        for offset in range(max(seed_counts))]
                wall, cpu = (sum(run[i] for run in runs) / len(runs) for i in range(2))
                single = cpu
                print(f"{algorithm:<12}{1:>6}{'-':>6}{wall:>11.3f}{1 / wall:>12.2f}{cpu:>20.3f}{1:>31.0%}", flush=True)
                continue
            for chunk in [c for c in map(int, args.chunks.split(",")) if c <= seeds]:
                wall, cpu = time_episodes(make_task(algorithm, seeds, args, chunk), args.episodes)
                single = single or cpu / seeds
                print(f"{algorithm:<12}{seeds:>6}{chunk:>6}{wall:>11.3f}{1 / wall:>12.2f}{cpu / seeds:>20.3f}"
                      f"{single / (cpu / seeds):>31.0%}", flush=True)
    for algorithm in args.run_algorithms.split(",") if args.run_episodes else []:
        average, first, last = time_run(make_task(algorithm, 1, args), args.run_episodes)
        print(f"{algorithm}: whole run of {args.run_episodes} episodes, 1 seed: {average:.3f} CPU-s per episode on "
              f"average (first tenth {first:.3f}, last tenth {last:.3f})", flush=True)


if __name__ == "__main__":
    main()
