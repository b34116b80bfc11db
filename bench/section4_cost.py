"""CPU cost of the paper's Section 4 regime (preset fig10_diagnostics), per seed-episode, with and without the token
task's exact fast paths, and where the time goes.

    PYTHONPATH=. python bench/section4_cost.py [--algorithms tpo,grpo] [--seeds 2] [--init-episodes 2]
        [--train-to 60] [--late-episodes 3] [--threads 1] [--out results/bench/section4_cost.txt]

Regime (conf/experiment/fig10_diagnostics.yaml): terminal reward, reverse copy, V = 2, H = 8, B = 256 prompts, K = 32
samples per prompt, the algorithm's own epochs (TPO 4, GRPO 4), seeds computed one at a time (task.seed_chunk=auto on
CPU). Two points of a run are timed: from initialisation (episodes 0 … init-episodes−1: every group holds ~30
distinct answers of 256, the most expensive episodes) and after ``--train-to`` episodes of training (the policy has
sharpened: most of a group's samples coincide, and ``task.dedup`` decodes and trains each distinct answer once). The
episodes in between are trained (fast paths on) and their average is reported too: the cost over that short run.

At each timed point every episode runs twice from the same state (parameters, optimizer and active seeds restored),
once with ``tasks.token_reversal.set_fast_paths(False)`` (the plain path) and once with the fast paths, in alternating
order, so that the machine's load (a shared host) falls on both alike; the two runs' metrics and parameters are
compared bit for bit (``identical``). Phases (CPU seconds per seed-episode, from bench/profile_phases.PhaseTimer):
rollout (prompts, sampling, rewards, distinct answers), forward (the teacher-forced forward of every epoch), loss +
backward (the algorithm's loss and autograd), optimizer (Muon/Adam steps), other (diagnostics, guards, logging-free
bookkeeping).
"""

from __future__ import annotations

import argparse
import copy
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from harness import process  # noqa: E402
from harness.config import build_task, compose_config  # noqa: E402
from harness.trainers import episode  # noqa: E402

process.tune_memory()  # as python -m harness does (harness.process)
from profile_phases import PhaseTimer  # noqa: E402

from tasks import token_reversal  # noqa: E402

PHASES = ("rollout", "forward", "loss+backward", "optimizer", "other")


def machine_header() -> str:
    """CPU model (with or without AVX-512), torch version and commit: what the numbers below depend on."""
    model, flags = "?", ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and model == "?":
                model = value.strip()
            if key.strip() == "flags" and not flags:
                flags = value
    except OSError:
        pass
    avx512 = "AVX-512" if "avx512f" in flags.split() else "no AVX-512"
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "tasks", "algorithms", "harness"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        commit += " (+ uncommitted changes in tasks/algorithms/harness)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "?"
    return (f"# {time.strftime('%Y-%m-%d %H:%M')}  CPU: {model} ({avx512}), {os.cpu_count()} CPUs, load average "
            f"{os.getloadavg()[0]:.2f}; torch {torch.__version__}; commit {commit}")


def snapshot(task) -> dict:
    return copy.deepcopy(task.state_dict())


def restore(task, state: dict) -> None:
    task.load_state_dict(copy.deepcopy(state))


def timed_episode(task, step: int, fast: bool) -> dict:
    """One episode with the fast paths on or off: CPU seconds (total and per phase), metrics and the parameters."""
    token_reversal.set_fast_paths(fast)
    timer = PhaseTimer(task)
    cpu = time.process_time()
    out = episode(task, step)
    total = time.process_time() - cpu
    timer.close()
    phases = {"rollout": timer.cpu["rollout"], "forward": timer.cpu["forward"],
              "optimizer": timer.cpu["optimizer"], "other": timer.cpu["diagnostics"]}
    phases["loss+backward"] = total - sum(phases.values())  # the loss, autograd's backward and the epoch loop
    return {"cpu": total, "phases": phases, "metrics": {k: v.clone() for k, v in out.metrics.items()},
            "loss": out.loss.clone(), "params": {k: v.detach().clone() for k, v in task.params.items()}}


def identical(a: dict, b: dict) -> bool:
    """Bit-identical metrics, first-epoch losses and parameters after the episode (NaN = NaN)."""
    def same(x, y):
        return x.shape == y.shape and torch.equal(x.view(torch.int32), y.view(torch.int32))
    return (same(a["loss"], b["loss"]) and all(same(a["metrics"][k], b["metrics"][k]) for k in a["metrics"])
            and all(same(a["params"][k], b["params"][k]) for k in a["params"]))


def compare_point(task, steps: range, seeds: int) -> dict:
    """Each episode of ``steps`` twice from the same state, plain and fast in alternating order; the task ends in the
    state after the last episode. Returns per-variant CPU-s per seed-episode (total and phases), whether every pair
    was bit-identical, the error and the distinct answers trained per seed."""
    sums = {v: {"cpu": 0.0, **{p: 0.0 for p in PHASES}} for v in ("plain", "fast")}
    all_same, errors, distinct = True, [], []
    for n, step in enumerate(steps):
        state = snapshot(task)
        with torch.no_grad():  # not timed: the episode's distinct answers per seed (task.dedup)
            token_reversal.set_fast_paths(True)
            batches = [task.rollout_batch(step, chunk) for chunk in task.chunks]
            distinct.append(sum(b.distinct[0].shape[1] * b.prompts.shape[0] if b.distinct is not None
                                else b.actions[:, :, :, 0].numel() for b in batches) / seeds)
        runs = {}
        for variant in (("plain", "fast") if n % 2 == 0 else ("fast", "plain")):
            restore(task, state)
            runs[variant] = timed_episode(task, step, variant == "fast")
        all_same &= identical(runs["plain"], runs["fast"])
        errors.append(float(runs["fast"]["metrics"]["error"].mean()))
        for variant, run in runs.items():
            sums[variant]["cpu"] += run["cpu"] / seeds / len(steps)
            for phase in PHASES:
                sums[variant][phase] += run["phases"][phase] / seeds / len(steps)
    token_reversal.set_fast_paths(True)
    return {"variants": sums, "identical": all_same, "error": sum(errors) / len(errors),
            "distinct": sum(distinct) / len(distinct)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--algorithms", default="tpo,grpo")
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--init-episodes", type=int, default=2, help="timed episodes from initialisation")
    parser.add_argument("--train-to", type=int, default=60, help="the later point: after this many episodes")
    parser.add_argument("--late-episodes", type=int, default=3, help="timed episodes at the later point")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "section4_cost.txt"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    lines = [machine_header(),
             f"# fig10_diagnostics regime: terminal, reverse_copy, V=2, H=8, B=256, K=32; {args.seeds} seeds "
             f"(seed_chunk=auto), threads={args.threads}; CPU-s per seed-episode; plain = fast paths off, fast = on "
             f"(tasks.token_reversal.set_fast_paths), alternating from the same state"]

    def emit(line: str = "") -> None:
        print(line, flush=True)
        lines.append(line)

    for line in lines:
        print(line, flush=True)
    emit(f"{'algorithm':<10}{'point':<22}{'variant':<8}{'CPU-s':>8}" + "".join(f"{p:>15}" for p in PHASES)
         + f"{'error':>8}{'distinct/seed':>15}{'identical':>11}")
    summary = []
    for algorithm in args.algorithms.split(","):
        task = build_task(compose_config(["experiment=fig10_diagnostics", f"algorithm={algorithm}",
                                          f"seeds={args.seeds}", "logger=none"]))
        points = [(f"init (ep 0-{args.init_episodes - 1})", range(0, args.init_episodes))]
        late = range(args.train_to, args.train_to + args.late_episodes)
        points.append((f"after {args.train_to} episodes", late))
        run_cpu, run_episodes = 0.0, 0
        for label, steps in points:
            if steps.start > args.init_episodes:  # train (fast paths on) up to the later point, timing the run
                token_reversal.set_fast_paths(True)
                for step in range(args.init_episodes, steps.start):
                    cpu = time.process_time()
                    episode(task, step)
                    run_cpu += time.process_time() - cpu
                    run_episodes += 1
            result = compare_point(task, steps, args.seeds)
            for variant in ("plain", "fast"):
                row = result["variants"][variant]
                emit(f"{algorithm:<10}{label:<22}{variant:<8}{row['cpu']:>8.3f}"
                     + "".join(f"{row[p]:>9.3f} {row[p] / row['cpu']:>4.0%}" for p in PHASES)
                     + f"{result['error']:>8.3f}{result['distinct']:>15.0f}{str(result['identical']):>11}")
            plain, fast = result["variants"]["plain"]["cpu"], result["variants"]["fast"]["cpu"]
            summary.append(f"{algorithm} {label}: fast/plain = {fast / plain:.3f} ({1 - fast / plain:+.1%} saved), "
                           f"bit-identical: {result['identical']}")
        if run_episodes:
            summary.append(f"{algorithm}: short run, episodes {args.init_episodes}-{args.train_to - 1} (fast "
                           f"paths): {run_cpu / run_episodes / args.seeds:.3f} CPU-s per seed-episode on average")
    emit()
    for line in summary:
        emit(line)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
