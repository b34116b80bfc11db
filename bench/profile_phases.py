"""Where an episode's time goes: rollout, forward, loss + backward, optimizer and logging, per setting and seed count.

    PYTHONPATH=. python bench/profile_phases.py [--settings mnist,terminal,dense] [--seeds 1,20] [--episodes N]
        [--algorithms tpo] [--threads 1] [--state-from-episodes 0] [--no-logging | --logging-only]

Settings (the reference figures measured for the paper's JAX code on this machine class, CPU-s per episode/seed):
  mnist     MNIST bandit, TPO, B = 100 (one step = one episode; reference 0.53–0.66 ms at 1 seed, 12–13.5 ms at 20)
  terminal  token reversal, terminal reward, H = 10, V = 2, K = 8, B = 100, TPO and GRPO (reference 1.83 and 2.09)
  terminal7 the same at H = 7 (reference 1.16)
  dense     token reversal, bag-of-tokens reward, V = 16, H = 10, TPO_token (reference 1.37)

For each: CPU seconds (all threads) and wall seconds per episode for each phase, per seed, the matmul FLOPs of
one episode (torch's FlopCounterMode: forward and backward matmuls) and the achieved FLOP/s as a fraction of this
machine's fp32 matmul peak, measured by the same script (1024² sgemm at the same thread count). Token tasks are
timed from initialisation, where every sampled answer is distinct, unless ``--state-from-episodes N`` first
trains N episodes (the cost late in training, when most of a group's answers coincide, is several times lower;
bench/token_episodes_per_second.py --run-episodes measures the average over a whole run). Logging: one run through
the real trainer with W&B offline, every logging call timed (metrics to host, CSV, W&B; W&B's per-seed run starts
as a once-per-run cost), projected onto the task's default run length.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
from omegaconf import open_dict
from torch.utils.flop_counter import FlopCounterMode

from harness import process
from harness.config import build_task, compose_config
from harness.trainers import episode
from harness.trainers.batched import GroupTrainer

from harness.run import train

process.tune_memory()  # as python -m harness does (harness.process)
from tasks.models import linear

SETTINGS = {
    "mnist": (["task=mnist_bandit"], ["tpo"]),
    "terminal": (["task=token_reversal", "task.reward=terminal", "task.H=10"], ["tpo", "grpo"]),
    "terminal7": (["task=token_reversal", "task.reward=terminal", "task.H=7"], ["tpo"]),
    "dense": (["task=token_reversal", "task.reward=bag_of_tokens", "task.V=16"], ["tpo_token"]),
}


class PhaseTimer:
    """Wraps a task's phase methods (and, for the MNIST bandit, its module's MLP forward and backward functions)
    and accumulates CPU and wall seconds per phase; the rest of a step is attributed to ``rest`` (the loss's
    backward pass; for MNIST the log-softmax and sampling). ``close`` unwraps."""

    def __init__(self, task):
        self.cpu, self.wall = defaultdict(float), defaultdict(float)
        module = sys.modules[type(task).__module__]
        phases = {"rollout": (task, "rollout_batch"), "forward": (task, "log_probs"),
                  "optimizer": (task.optimizer, "step"), "data": (task, "batch"),
                  "evaluation": (task, "evaluate"), "diagnostics": (task, "diagnostics"),
                  "loss": (GroupTrainer, "batch_loss"), "closed-form grad": (task, "logit_grad"),
                  "mlp forward": (module, "mlp_forward"),
                  "mlp backward": (module, "mlp_backward")}
        self.wrapped = []
        for phase, (owner, method) in phases.items():
            if hasattr(owner, method):
                original = getattr(owner, method)
                setattr(owner, method, self._timed(phase, original))
                self.wrapped.append((owner, method, original))

    def close(self) -> None:
        for owner, method, original in self.wrapped:
            setattr(owner, method, original)

    def _timed(self, phase, function):
        def timed(*args, **kwargs):
            cpu, wall = time.process_time(), time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.cpu[phase] += time.process_time() - cpu
                self.wall[phase] += time.perf_counter() - wall

        return timed


def matmul_peak(threads: int) -> dict[str, float]:
    """fp32 FLOP/s of a 1024 × 1024 matmul at the current thread count (best of 3 runs of 10), for each
    ``cpu_matmul`` library (the peak is the faster one's)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    peaks, previous = {}, linear.backend()
    for backend in ("onednn", "blas"):
        linear.set_backend(backend)
        linear.linear(a, b)
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(10):
                linear.linear(a, b)
            best = min(best, (time.perf_counter() - start) / 10)
        peaks[backend] = 2 * 1024**3 / best
    linear.set_backend(previous)
    return peaks


def episode_flops(task, step: int) -> int:
    """Matmul FLOPs of one step, counted on torch's own products (the counter does not see oneDNN calls)."""
    previous = linear.backend()
    linear.set_backend("blas")
    try:
        with FlopCounterMode(display=False) as counter:
            episode(task, step)
    finally:
        linear.set_backend(previous)
    return counter.get_total_flops()


def profile(overrides: list[str], seeds: int, episodes: int, warm: int) -> dict:
    task = build_task(compose_config([*overrides, f"seeds={seeds}", "logger=none"]))
    for step in range(warm):
        episode(task, step)
    flops = episode_flops(task, warm)
    timer = PhaseTimer(task)
    cpu, wall = time.process_time(), time.perf_counter()
    for step in range(warm + 1, warm + 1 + episodes):
        episode(task, step)
    total_cpu, total_wall = time.process_time() - cpu, time.perf_counter() - wall
    timer.close()
    phases = {phase: (timer.cpu[phase] / episodes, timer.wall[phase] / episodes) for phase in timer.cpu}
    phases["rest"] = (total_cpu / episodes - sum(c for c, _ in phases.values()),
                      total_wall / episodes - sum(w for _, w in phases.values()))
    return {"cpu": total_cpu / episodes, "wall": total_wall / episodes, "phases": phases, "flops": flops}


def logging_cost(overrides: list[str], seeds: int, steps: int) -> dict[str, float]:
    """One run through the real trainer with W&B offline, timing every logging call (outermost calls only): the
    CSV writer and W&B (its run starts separately, ``wandb.init`` in the mirror's
    thread, as a once-per-run cost)."""
    import wandb

    from harness import tracking
    from harness.rundir import outputs

    spent: dict[str, float] = defaultdict(float)
    depth = [0]

    def timed(key: str, function):
        def wrapper(*args, **kwargs):
            if key == "wandb start":  # in the mirror's own thread: apart from the training thread's nesting
                start = time.perf_counter()
                try:
                    return function(*args, **kwargs)
                finally:
                    spent[key] += time.perf_counter() - start
            depth[0] += 1
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                depth[0] -= 1
                if depth[0] == 0:
                    spent[key] += time.perf_counter() - start

        return wrapper

    targets = {"csv": (outputs.MetricsWriter, "append"),
               "csv flush": (outputs.MetricsWriter, "flush"), "wandb log": (tracking.WandbTracker, "log"),
               "wandb flush": (tracking.WandbTracker, "flush"), "wandb finish": (tracking.WandbTracker, "finish"),
               "wandb start": (wandb, "init")}
    originals = {key: getattr(owner, name) for key, (owner, name) in targets.items()}
    for key, (owner, name) in targets.items():
        setattr(owner, name, timed(key, originals[key]))
    try:
        cfg = compose_config([*overrides, f"seeds={seeds}", "logger=wandb", f"task.steps={steps}",
                              "experiment_name=bench_logging"])
        with open_dict(cfg):
            cfg.trainer.progress, cfg.logger.mode = False, "offline"
        with tempfile.TemporaryDirectory() as run_dir:
            os.environ["WANDB_DIR"] = run_dir
            start = time.perf_counter()
            train(cfg, Path(run_dir))
            spent["run"] = time.perf_counter() - start
    finally:
        for key, (owner, name) in targets.items():
            setattr(owner, name, originals[key])
    return dict(spent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--settings", default="mnist,terminal,terminal7,dense")
    parser.add_argument("--seeds", default="1,20")
    parser.add_argument("--episodes", type=int, default=0, help="timed episodes (default: 300 MNIST steps, 3 else)")
    parser.add_argument("--algorithms", default="", help="comma-separated; default: each setting's own")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--state-from-episodes", type=int, default=0, help="token tasks: train this many first")
    parser.add_argument("--no-logging", action="store_true", help="skip the logging-overhead runs")
    parser.add_argument("--logging-only", action="store_true", help="only the logging-overhead runs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    peaks = matmul_peak(args.threads)
    peak, cpu = max(peaks.values()), linear.cpu_model() or platform.processor()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}  torch {torch.__version__}, {cpu}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}, threads={args.threads}, fp32 matmul peak "
          + ", ".join(f"{name} {value / 1e9:.0f}" for name, value in peaks.items()) + " GFLOP/s")
    for setting in args.settings.split(","):
        base, algorithms = SETTINGS[setting]
        algorithms = args.algorithms.split(",") if args.algorithms else algorithms
        is_mnist = setting == "mnist"
        episodes = args.episodes or (300 if is_mnist else 3)
        warm = 20 if is_mnist else max(1, args.state_from_episodes)
        unit = "ms" if is_mnist else "s"
        scale = 1e3 if is_mnist else 1.0
        for algorithm in [] if args.logging_only else algorithms:
            for seeds in map(int, args.seeds.split(",")):
                overrides = [*base, f"algorithm={algorithm}"]
                result = profile(overrides, seeds, episodes, warm)
                achieved = result["flops"] / result["wall"]
                print(f"\n{setting} {algorithm} seeds={seeds} (after {warm} episodes, {episodes} timed): "
                      f"{result['wall'] * scale:.3f} {unit} wall per episode, {result['cpu'] * scale / seeds:.3f} "
                      f"CPU-{unit} per episode and seed; {result['flops'] / 1e9:.2f} GFLOP per episode, "
                      f"{achieved / 1e9:.1f} GFLOP/s = {achieved / peak:.1%} of peak")
                for phase, (cpu, wall) in sorted(result["phases"].items(), key=lambda item: -item[1][0]):
                    print(f"    {phase:<12} CPU {cpu * scale:9.3f} {unit}  wall {wall * scale:9.3f} {unit}  "
                          f"{cpu / result['cpu']:6.1%}")
        if not args.no_logging:
            seeds = int(args.seeds.split(",")[-1])
            full = int(compose_config(base).task.steps)
            steps = full if is_mnist else 40
            spent = logging_cost([*base, f"algorithm={algorithms[0]}"], seeds, steps)
            start = spent.pop("wandb start", 0.0)
            total = sum(v for k, v in spent.items() if k != "run")  # the training thread's
            per_step = total / steps
            projected = per_step * full / (spent["run"] / steps * full)
            print(f"    logging, {seeds} seeds, {steps} steps, CSV + W&B offline: {total:.2f} s of a "
                  f"{spent['run']:.1f} s run ({total / spent['run']:.1%}, {per_step * 1e3:.2f} ms per step; W&B's "
                  f"run starts, {start:.2f} s, in the mirror's thread: training waits for them only at a checkpoint "
                  f"or the end, counted there) → {projected:.1%} of a default {full:,}-step run; "
                  + ", ".join(f"{k} {v:.2f} s" for k, v in spent.items() if k != "run"))


if __name__ == "__main__":
    main()
