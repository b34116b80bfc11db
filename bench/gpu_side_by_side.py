"""Throughput of N runs side by side on one device: seed-episodes per second for N = 1, 2, 4, 8, ... processes.

    PYTHONPATH=.:.gpu-site python bench/gpu_side_by_side.py [--processes 1,4,8,12] [--seconds 30] [--seeds 20]
        [--device cuda] [--out DIR] [OVERRIDE ...]

Measured on an H200 (results/bench/gpu_sweep_projection.txt), one run of 20 batched seeds of the terminal-reward
setting (H = 10, V = 2, K = 8, B = 100) does 7-8 episodes per second: a model of a few thousand parameters leaves
the GPU idle between its kernel launches, so the launches (one CPU core's work) set the pace. N processes launch
from N cores. Each builds the same task (default: that setting with TPO, the workload measured there; OVERRIDEs
replace it, e.g. ``experiment=fig12_k_sweep task.K=32 algorithm=grpo``), runs one warm-up episode, waits for the
others (a barrier), then runs episodes for ``--seconds`` and reports how many. Seed-episodes per second is the sum
over the processes of episodes × seeds over the seconds; the gain is its ratio to N = 1's, for the same work. This
is what the campaign's ``--jobs N`` on a GPU machine does with Section 4's cells (``section4_sweeps_gpu``).

Writes gpu_side_by_side.json to --out (default $OUT, else results/bench), rewritten after every N so that a run
stopped at its time limit keeps what it measured. ``--device cpu`` runs the same measurement on CPU cores (the
tests do, at a tiny size).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import platform
import sys
import threading
import time
from pathlib import Path

TERMINAL_TPO = ["task=token_reversal", "task.reward=terminal", "task.H=10", "task.V=2", "task.K=8",
                "task.batch_size=100", "task.match=prompts", "algorithm=tpo"]


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def worker(overrides: list[str], seeds: int, device: str, seconds: float, barrier, results) -> None:
    """One process: build the task, one warm-up episode, the barrier, then episodes for ``seconds``."""
    import torch

    from harness import process
    from harness.config import build_task, compose_config
    from harness.trainers import episode

    process.tune_memory()
    torch.set_num_threads(1)
    if device.startswith("cuda"):
        torch.backends.cuda.matmul.allow_tf32 = False
    try:
        task = build_task(compose_config([*overrides, f"seeds={seeds}", "logger=none", f"device={device}"]))
        episode(task, 0)
        synchronize(device)
    except Exception as error:  # noqa: BLE001 - reported in one line; the barrier is broken so the others stop
        barrier.abort()
        results.put({"error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"})
        return
    try:
        barrier.wait()
    except threading.BrokenBarrierError:  # another run failed to start: its error is the one reported
        results.put({"error": "stopped: another run failed"})
        return
    start, step = time.perf_counter(), 1
    while time.perf_counter() - start < seconds:
        episode(task, step)
        synchronize(device)
        step += 1
    results.put({"episodes": step - 1, "seconds": time.perf_counter() - start,
                 "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else None})


def side_by_side(processes: int, overrides: list[str], seeds: int, device: str, seconds: float) -> dict:
    """``processes`` workers at once: their episodes, the seed-episodes per second of all, or the first error."""
    context = multiprocessing.get_context("spawn")  # a fresh interpreter each: no CUDA context inherited
    barrier, results = context.Barrier(processes), context.Queue()
    workers = [context.Process(target=worker, args=(overrides, seeds, device, seconds, barrier, results))
               for _ in range(processes)]
    for process in workers:
        process.start()
    reports = [results.get() for _ in workers]
    for process in workers:
        process.join()
    errors = [report["error"] for report in reports if "error" in report and not report["error"].startswith("stopped")]
    errors += [report["error"] for report in reports if "error" in report]
    if errors:
        return {"processes": processes, "error": errors[0]}
    seed_episodes = sum(report["episodes"] * seeds / report["seconds"] for report in reports)
    return {"processes": processes, "seeds": seeds, "episodes": [report["episodes"] for report in reports],
            "seconds": [report["seconds"] for report in reports], "seed_episodes_per_s": seed_episodes,
            "episodes_per_s_per_run": seed_episodes / seeds / processes,
            "peak_memory_gib": [report["peak_memory_gib"] for report in reports]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("overrides", nargs="*", help=f"the task of every run (default: {' '.join(TERMINAL_TPO)})")
    parser.add_argument("--processes", default="1,2,4,8,12", help="comma list of N (runs side by side)")
    parser.add_argument("--seconds", type=float, default=30.0, help="timed seconds per N, after a warm-up episode")
    parser.add_argument("--seeds", type=int, default=20, help="seeds batched in each run")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", default=os.environ.get("OUT", "results/bench"))
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    if args.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            print("no CUDA device is visible: run this on a GPU machine, or pass --device cpu", file=sys.stderr)
            return 2
        name = torch.cuda.get_device_name()
    else:
        from tasks.models.linear import cpu_model

        name = cpu_model()
    overrides = args.overrides or TERMINAL_TPO
    report = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "device": name, "python": platform.python_version(),
              "overrides": overrides, "seeds": args.seeds, "seconds": args.seconds, "runs": []}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "gpu_side_by_side.json"
    print(f"{name}: {' '.join(overrides)}, {args.seeds} seeds per run, {args.seconds:g} s per N", flush=True)
    for processes in counts:
        result = side_by_side(processes, overrides, args.seeds, args.device, args.seconds)
        single = next((run for run in report["runs"] if run["processes"] == 1 and "error" not in run), None)
        if single and "error" not in result:
            result["gain_over_one"] = result["seed_episodes_per_s"] / single["seed_episodes_per_s"]
        report["runs"].append(result)
        path.write_text(json.dumps(report, indent=2) + "\n")
        if "error" in result:
            print(f"N = {processes:2d}: {result['error']}", flush=True)
            continue
        gain = f", {result['gain_over_one']:.2f}× N = 1" if "gain_over_one" in result else ""
        print(f"N = {processes:2d}: {result['seed_episodes_per_s']:9.1f} seed-episodes/s "
              f"({result['episodes_per_s_per_run']:.2f} episodes/s per run{gain})", flush=True)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
