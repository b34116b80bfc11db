"""GPU check and sweep projection, prepared to answer everything in one run of a few minutes on a CUDA machine.

    PYTHONPATH=.:.gpu-site python bench/gpu_sweep_projection.py [--out DIR] [--tables table1_vocab_sweep,...]

1. Correctness: every non-LLM task with representative algorithms runs 3 steps on the CPU and on the GPU from the
   same seeds; the largest difference of every logged metric is reported (tensors are born on the device; TF32 is
   off, so the two agree to float rounding unless a sample flips on a near-tie).
2. Speed: episodes/s at 20 batched seeds for the terminal-reward setting (H = 10, V = 2, K = 8, B = 100; every
   Table 3 method, both matchings) and the dense setting (bag-of-tokens, TPO_token, V = 2 and 16), with
   ``task.dedup`` off (the GPU default) and on.
3. Projection: every job of the Table 1, 2 and 3 presets (all their sweep values, the preset's seed count batched
   on the GPU) is timed for 2 episodes after a warm-up, and its wall time projected to the preset's episode count;
   the sum is the projected wall time of the whole table run job after job on this GPU (an upper bound: episodes
   from initialisation are the most expensive; the target is Table 3 under one hour on an H100/H200-class GPU).

Writes gpu_sweep_projection.json (and prints a summary) into --out (default $OUT, else results/bench), rewritten
after every measurement so that a run stopped at its time limit keeps what it measured ("complete": false); a
setting that raises is recorded with its error (``"error"``, one line) and the others are still measured.
Exits with a clear message and status 2 when no CUDA device is visible.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from harness import process
from harness.config import build_task, compose_config
from harness.trainers import episode

process.tune_memory()  # as python -m harness does (harness.process)

CHECKS = [
    ["task=tabular_single", "algorithm=tpo"],
    ["task=tabular_multi", "algorithm=tpo"],
    ["task=mnist_bandit", "algorithm=tpo", "task.eval_every=1"],  # evaluated every step: metrics to compare
    ["task=mnist_bandit", "algorithm=dg", "task.eval_every=1"],
    *[["task=token_reversal", "task.reward=terminal", "task.H=6", f"algorithm={a}"]
      for a in ("tpo", "grpo", "ppo", "dg")],
    ["task=token_reversal", "task.reward=sequential", "task.H=6", "algorithm=tpo_token"],
]
TERMINAL = ["task=token_reversal", "task.reward=terminal", "task.H=10", "task.V=2", "task.K=8", "task.batch_size=100"]
DENSE = ["task=token_reversal", "task.reward=bag_of_tokens", "task.H=10", "task.K=8", "task.batch_size=100",
         "algorithm=tpo_token"]


def synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def check(overrides: list[str], steps: int = 3, devices: tuple[str, str] = ("cpu", "cuda")) -> dict:
    """The largest difference of every logged metric over ``steps`` steps of the same seeds on the two devices."""
    logged = []
    for device in devices:
        task = build_task(compose_config([*overrides, "seeds=4", "logger=none", f"device={device}"]))
        outputs = [episode(task, step) for step in range(steps)]
        logged.append([{k: v.detach().double().cpu() for k, v in out.metrics.items()}
                       for out in outputs if out.metrics is not None])
    first, second = logged
    diffs = {name: max(float((a[name] - b[name]).abs().nan_to_num().max()) for a, b in zip(first, second))
             for name in (first[0] if first else {})}
    return {"config": " ".join(overrides), "max_abs_diff": diffs}


def seconds_per_episode(overrides: list[str], seeds: int, episodes: int = 2) -> float:
    """Wall seconds per episode on the GPU after one warm-up episode; the peak memory statistic restarts here."""
    torch.cuda.reset_peak_memory_stats()
    task = build_task(compose_config([*overrides, f"seeds={seeds}", "logger=none", "device=cuda"]))
    episode(task, 0)
    synchronize()
    start = time.perf_counter()
    for step in range(1, episodes + 1):
        episode(task, step)
    synchronize()
    return (time.perf_counter() - start) / episodes


def failure(error: BaseException) -> str:
    """One line for the report: the exception's type and its first line."""
    return f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"


def preset_jobs(preset: str) -> tuple[list[list[str]], int, int]:
    """The sweep's jobs (override lists, as Hydra's basic sweeper expands them), its seed count and episodes."""
    cfg = compose_config([f"experiment={preset}"], with_hydra=True)
    axes = [[f"{key}={value}" for value in str(values).split(",")] for key, values in cfg.hydra.sweeper.params.items()]
    return [[f"experiment={preset}", *combo] for combo in itertools.product(*axes)], int(cfg.seeds), int(cfg.task.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.environ.get("OUT", "results/bench"))
    parser.add_argument("--tables", default="table3_terminal,table1_vocab_sweep,table2_variations")
    parser.add_argument("--skip-checks", action="store_true")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device is visible: this script measures the GPU path; run it on a GPU machine", file=sys.stderr)
        sys.exit(2)
    torch.backends.cuda.matmul.allow_tf32 = False
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "torch": torch.__version__,
              "python": platform.python_version(),
              "gpu": torch.cuda.get_device_name(), "checks": [], "speed": [], "tables": {}}
    print(f"{report['gpu']}, torch {report['torch']}", flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_sweep_projection.json"

    def save(complete: bool = False) -> None:  # after every measurement: a run stopped at a time limit keeps them
        path.write_text(json.dumps({**report, "complete": complete}, indent=2) + "\n")

    if not args.skip_checks:
        for overrides in CHECKS:
            try:
                result = check(overrides)
            except Exception as error:  # one failing setting is reported; the rest are still measured
                result = {"config": " ".join(overrides), "error": failure(error)}
            report["checks"].append(result)
            print(f"check {result['config']}: {result.get('max_abs_diff', result.get('error'))}", flush=True)
            save()
    speed_runs = [(f"terminal H=10 {a} {m}", [*TERMINAL, f"algorithm={a}", f"task.match={m}"])
                  for a in ("tpo", "grpo", "grpo_no_kl", "ppo", "dg") for m in ("prompts", "interactions")
                  if m == "prompts" or a in ("ppo", "dg")]
    speed_runs += [("terminal H=10 tpo dedup=true", [*TERMINAL, "algorithm=tpo", "task.dedup=true"])]
    speed_runs += [(f"dense V={v} tpo_token", [*DENSE, f"task.V={v}"]) for v in (2, 16)]
    for name, overrides in speed_runs:
        try:
            seconds = seconds_per_episode(overrides, 20)
        except Exception as error:
            report["speed"].append({"setting": name, "error": failure(error)})
            print(f"{name}: {failure(error)}", flush=True)
            save()
            continue
        report["speed"].append({"setting": name, "seeds": 20, "s_per_episode": seconds, "episodes_per_s": 1 / seconds,
                                "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30})
        print(f"{name:<36} 20 seeds: {1 / seconds:7.2f} episodes/s ({seconds * 1e3:.1f} ms)", flush=True)
        save()
    for preset in args.tables.split(","):
        jobs, seeds, episodes = preset_jobs(preset)
        timed = report["tables"][preset] = {"jobs": len(jobs), "seeds": seeds, "episodes": episodes,
                                            "projected_hours": 0.0, "per_job_s_per_episode": {}}
        for job in jobs:  # saved job by job: a run stopped at its time limit keeps the jobs it timed
            try:
                seconds = seconds_per_episode(job, seeds)
            except Exception as error:
                timed.setdefault("errors", {})[" ".join(job[1:])] = failure(error)
                save()
                continue
            timed["per_job_s_per_episode"][" ".join(job[1:])] = seconds
            timed["projected_hours"] += seconds * episodes / 3600
            save()
        print(f"{preset}: {len(timed['per_job_s_per_episode'])} of {len(jobs)} jobs timed × {seeds} seeds × "
              f"{episodes} episodes → projected {timed['projected_hours']:.2f} h on this GPU, one job after another",
              flush=True)
    save(complete=True)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
