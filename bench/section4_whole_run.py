"""Whole-run cost of the paper's Section 4 regime with and without the token task's exact fast paths: the
measurement over a full run that bench/section4_cost.py's two timed points only sample.

    PYTHONPATH=. python bench/section4_whole_run.py [--overrides algorithm=tpo algorithm.epochs=1] [--seeds 10]
        [--episodes 2000] [--out results/bench/section4_whole_run.txt]

Two processes train the same configuration (preset fig10_diagnostics with ``--overrides``) from the same seeds at
the same time, each pinned to a core of its own (so the machine's load falls on both alike): one with
``tasks.token_reversal.set_fast_paths(False)`` (plain), one with the fast paths, as every run trains. Each reports
the CPU seconds of its episodes (no logging, no checkpoints) and a digest of every episode's metrics and of the
final parameters; the two digests must agree bit for bit. A campaign plans with CPU-s per seed-episode over a whole
run: the policy sharpens and ``task.dedup`` makes later episodes cheaper, so the cost of the first episodes does not
give it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from harness import process  # noqa: E402
from harness.config import build_task, compose_config  # noqa: E402
from harness.trainers import episode  # noqa: E402

process.tune_memory()  # as python -m harness does (harness.process)
from section4_cost import machine_header  # noqa: E402

from tasks import token_reversal  # noqa: E402

VARIANTS = ("plain", "fast")


def train(overrides: list[str], seeds: int, episodes: int, fast: bool, progress_every: int) -> dict:
    """A whole run of ``episodes`` with the fast paths on or off: CPU seconds of the episodes, the digest of every
    episode's metrics and of the final parameters, and the seed-mean error at the first and last episode."""
    token_reversal.set_fast_paths(fast)
    task = build_task(compose_config(["experiment=fig10_diagnostics", *overrides, f"seeds={seeds}", "logger=none",
                                      f"task.steps={episodes}"]))
    digest, cpu, errors = hashlib.sha256(), 0.0, []
    for step in range(episodes):
        start = time.process_time()
        out = episode(task, step)
        cpu += time.process_time() - start
        for name in sorted(out.metrics):
            digest.update(name.encode() + out.metrics[name].detach().contiguous().numpy().tobytes())
        errors.append(float(out.metrics["error"].mean()))
        if progress_every and (step + 1) % progress_every == 0:
            print(f"{'fast' if fast else 'plain'}: episode {step + 1}, {cpu / (step + 1) / seeds:.3f} CPU-s per "
                  f"seed-episode so far", file=sys.stderr, flush=True)
    for name in sorted(task.params):
        digest.update(name.encode() + task.params[name].detach().contiguous().numpy().tobytes())
    return {"cpu": cpu, "digest": digest.hexdigest(), "error_first": errors[0], "error_last": errors[-1]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--overrides", nargs="*", default=["algorithm=tpo", "algorithm.epochs=1"],
                        help="on top of experiment=fig10_diagnostics")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--episodes", type=int, default=2000)
    parser.add_argument("--progress-every", type=int, default=100, help="episodes between progress lines (stderr)")
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "section4_whole_run.txt"))
    parser.add_argument("--variant", choices=VARIANTS, help=argparse.SUPPRESS)  # a child: one variant, JSON out
    parser.add_argument("--json", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)  # as training does (flush_denormal=true)
    if args.variant:
        result = train(args.overrides, args.seeds, args.episodes, args.variant == "fast", args.progress_every)
        Path(args.json).write_text(json.dumps(result))
        return
    cores = sorted(os.sched_getaffinity(0))
    header = [machine_header(),
              f"# fig10_diagnostics {' '.join(args.overrides)}: {args.seeds} seeds × {args.episodes} episodes, "
              f"threads=1; plain = fast paths off, fast = on (tasks.token_reversal.set_fast_paths), both at once on "
              f"cores {', '.join(map(str, cores[:2]))}"]
    print("\n".join(header), flush=True)
    with tempfile.TemporaryDirectory() as folder:
        children = {}
        for index, variant in enumerate(VARIANTS):
            command = [sys.executable, __file__, "--variant", variant, "--json", f"{folder}/{variant}.json",
                       "--seeds", str(args.seeds), "--episodes", str(args.episodes), "--progress-every",
                       str(args.progress_every), "--overrides", *args.overrides]
            core = {cores[index % len(cores)]}
            children[variant] = subprocess.Popen(command, cwd=ROOT,
                                                 preexec_fn=lambda c=core: os.sched_setaffinity(0, c))
        codes = {variant: child.wait() for variant, child in children.items()}
        if any(codes.values()):
            raise SystemExit(f"a variant failed: {codes}")
        results = {variant: json.loads(Path(f"{folder}/{variant}.json").read_text()) for variant in VARIANTS}
    episodes = args.seeds * args.episodes
    lines = [f"{'variant':<8}{'CPU-s':>10}{'CPU-s per seed-episode':>24}{'error first':>13}{'error last':>12}"]
    for variant in VARIANTS:
        run = results[variant]
        lines.append(f"{variant:<8}{run['cpu']:>10.0f}{run['cpu'] / episodes:>24.4f}{run['error_first']:>13.4f}"
                     f"{run['error_last']:>12.4f}")
    plain, fast = results["plain"]["cpu"], results["fast"]["cpu"]
    same = results["plain"]["digest"] == results["fast"]["digest"]
    lines += ["", f"fast/plain = {fast / plain:.3f} ({1 - fast / plain:+.1%} saved over the whole run), bit-identical "
              f"(every episode's metrics and the final parameters): {same}"]
    print("\n".join(lines), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(header + lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
