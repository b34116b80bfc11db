"""MNIST bandit training speed: steps/s for 1 and 20 seeds batched, against 20 seeds run one at a time.

    python bench/mnist_steps_per_second.py [--steps 300] [--repeats 5] [--algorithm tpo] [--threads 1]

Timings on a shared machine are noisy: read the ratios within one run. Evaluation is excluded (eval_every is set
past the end), so this is the cost of sampling, the loss, backward and the Adam step.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from omegaconf import open_dict

from harness import process
from harness.config import build_task, compose_config
from harness.trainers import episode

process.tune_memory()  # as python -m harness does (harness.process)


def make_task(algorithm: str, seeds: int, seed_offset: int = 0):
    cfg = compose_config(["task=mnist_bandit", f"algorithm={algorithm}", f"seeds={seeds}",
                          f"seed_offset={seed_offset}", "logger=none", "task.mechanism=false"])
    with open_dict(cfg):
        cfg.task.eval_every = cfg.task.steps = 10**9  # never evaluate: the steps alone are timed
    return build_task(cfg)


def seconds_per_step(tasks: list, steps: int, repeats: int) -> float:
    """Median over ``repeats`` consecutive timings of ``steps`` steps each (after one warm-up step)."""
    for task in tasks:
        episode(task, 0)
    timings = []
    for repeat in range(repeats):
        start = time.perf_counter()
        for step in range(1 + repeat * steps, 1 + (repeat + 1) * steps):
            for task in tasks:
                episode(task, step)
        timings.append((time.perf_counter() - start) / steps)
    return statistics.median(timings)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=5, help="timings of --steps steps; the median is printed")
    parser.add_argument("--algorithm", default="tpo")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    print(f"torch {torch.__version__}, {platform.processor() or platform.machine()}, threads={args.threads}, "
          f"algorithm={args.algorithm}, median of {args.repeats} × {args.steps} steps")
    one = seconds_per_step([make_task(args.algorithm, 1)], args.steps, args.repeats)
    batched = seconds_per_step([make_task(args.algorithm, 20)], args.steps, args.repeats)
    looped = seconds_per_step([make_task(args.algorithm, 1, s) for s in range(20)], args.steps, args.repeats)
    print(f"{'setting':<28}{'ms/step':>10}{'steps/s':>10}{'seed-steps/s':>14}")
    for name, seconds, seeds in (("1 seed", one, 1), ("20 seeds batched", batched, 20),
                                 ("20 seeds, one at a time", looped, 20)):
        print(f"{name:<28}{1e3 * seconds:>10.2f}{1 / seconds:>10.1f}{seeds / seconds:>14.1f}")
    print(f"batching gain at 20 seeds: {looped / batched:.2f}x")


if __name__ == "__main__":
    main()
