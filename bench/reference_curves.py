"""Per-seed error curves of a Table 1 cell from the paper's own JAX code, to set our runs beside the reference's.

    python bench/reference_curves.py --reference /path/to/tpo --algorithm dg --V 16 --seeds 0-19
        [--episodes 1000] [--out results/paper/reference_runs]

Runs the reference's trial runner (``tpo.experiments._trial.run_trial``) as its vocabulary sweep calls it (dense
reverse copy, bag-of-tokens reward, H = 10, B = 100, K = 8, its config's learning rate, η and ε) for one algorithm,
one V and a range of seeds, in the reference's pinned environment (``bench/reference_side_by_side.py`` builds it
outside the repository), with one XLA thread. JAX's counter-based PRNG makes seed ids the same draws on
any machine, so seeds 0-19 are the paper's own 20 seeds; on a CPU, float32 matmuls are exact float32 (a recent
NVIDIA GPU would use TF32 by default). Writes ``<out>/table1_V<V>_<algorithm>_seeds<a>-<b>.npz`` (``<algorithm>_errors``
seeds × episodes float32, ``episodes``) and a ``.json`` beside it (the command, versions, CPU seconds, the seed
mean's first episode below 1%). Compare with ours: ``python -m harness.report.seedwise rerun results/runs/
table1_vocab_sweep --algorithms <algorithm> --where task.V=<V> --threshold 0.01 --other <npz>``.
One run is one jitted program over all its episodes (no checkpoint): DG at V = 16 takes ~2,000 CPU-s for 20 seeds.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from reference_side_by_side import ONE_THREAD_XLA, build_reference_venv  # noqa: E402

CHILD = """
import json, sys, time
import numpy as np
from tpo.config import TransformerConfig
from tpo.experiments._trial import run_trial
algorithm, vocab, first, count, episodes, out = sys.argv[1:]
c = TransformerConfig()
cpu = time.process_time()
errors = np.asarray(run_trial(num_seeds=int(count), sequence_length=c.sequence_length, vocab_size=int(vocab),
    num_episodes=int(episodes), batch_size=c.batch_size, learning_rate=c.learning_rate, eta=c.eta,
    ppo_epsilon=c.ppo_epsilon, ppo_epochs=c.ppo_epochs, k_candidates=c.k_candidates, target_type="reverse_copy",
    reward_type="bag_of_tokens", algorithms=(algorithm,), seed_offset=int(first), tpo_eta=c.tpo_eta)[algorithm],
    dtype=np.float32)
np.savez_compressed(out, **{f"{algorithm}_errors": errors, "episodes": np.arange(errors.shape[1])})
import jax, optax, flax
print(json.dumps({"cpu_s": time.process_time() - cpu, "jax": jax.__version__, "optax": optax.__version__,
                  "flax": flax.__version__, "config": {k: getattr(c, k) for k in ("sequence_length", "batch_size",
                  "learning_rate", "eta", "ppo_epsilon", "ppo_epochs", "k_candidates", "tpo_eta")}}))
"""


def seed_range(text: str) -> tuple[int, int]:
    first, _, last = text.partition("-")
    return int(first), int(last or first)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="a checkout of github JeanKaddour/tpo")
    parser.add_argument("--venv", type=Path, default=Path("~/.cache/tpo-bench/reference-venv").expanduser())
    parser.add_argument("--algorithm", required=True, help="the reference's name: dg, ppo, tpo_token, grpo_token")
    parser.add_argument("--V", type=int, required=True, help="vocabulary size")
    parser.add_argument("--seeds", type=seed_range, required=True, help="first-last seed ids, e.g. 0-19")
    parser.add_argument("--episodes", type=int, default=1000)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "paper" / "reference_runs")
    args = parser.parse_args(argv)
    if not (args.reference / "src" / "tpo" / "cli.py").exists():
        parser.error(f"--reference {args.reference} is not a checkout of the paper's repository (no src/tpo/cli.py)")
    first, last = args.seeds
    args.out.mkdir(parents=True, exist_ok=True)
    stem = args.out / f"table1_V{args.V}_{args.algorithm}_seeds{first}-{last}"
    python = build_reference_venv(args.venv)
    env = {**os.environ, "PYTHONPATH": str(args.reference / "src"), "XLA_FLAGS": ONE_THREAD_XLA,
           "JAX_PLATFORMS": "cpu"}
    partial = stem.with_suffix(".partial.npz")
    result = subprocess.run([str(python), "-c", CHILD, args.algorithm, str(args.V), str(first), str(last - first + 1),
                             str(args.episodes), str(partial)], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        partial.unlink(missing_ok=True)
        sys.exit(f"the reference failed:\n{result.stderr[-3000:]}")
    import numpy as np

    errors = np.load(partial)[f"{args.algorithm}_errors"]
    below = np.flatnonzero(errors.mean(0) < 0.01)
    record = {"command": " ".join(["python", "bench/reference_curves.py", "--reference", "<checkout>",
                                   "--algorithm", args.algorithm, "--V", str(args.V), "--seeds", f"{first}-{last}",
                                   "--episodes", str(args.episodes)]),
              "reference_commit": subprocess.run(["git", "-C", str(args.reference), "rev-parse", "HEAD"],
                                                 capture_output=True, text=True).stdout.strip() or None,
              "cpu": platform.processor() or platform.machine(),
              "steps_to_1pct": int(below[0]) if below.size else None,
              **json.loads(result.stdout.strip().splitlines()[-1])}
    partial.replace(stem.with_suffix(".npz"))
    stem.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"{stem}.npz: steps to 1% (seed mean) {record['steps_to_1pct']}, {record['cpu_s']:.0f} CPU-s")


if __name__ == "__main__":
    main()
