"""tpo-bench against the paper's own JAX code, side by side on this machine.

    git clone https://github.com/JeanKaddour/tpo /path/to/tpo      # the paper's repository (any checkout of it)
    python bench/reference_side_by_side.py --reference /path/to/tpo [--settings terminal_h10_tpo,mnist_1]
        [--repeats 2] [--core 0] [--out results/bench/reference_side_by_side]

The first call builds the reference's environment in a throwaway venv outside the repository (``--venv``, default
``~/.cache/tpo-bench/reference-venv``: jax[cpu] 0.9.2, optax 0.2.8, flax 0.12.6 and the reference's other
dependencies, from the package index); it is never committed and never used by CI.

How the two are made comparable:
* Each process is pinned to one core (``taskset``) with one thread (XLA: no multi-threaded Eigen, one intra-op
  thread; ours: ``threads=1``), and its CPU-seconds are read from the kernel's rusage of that process.
* The reference's result cache (a pickle per save directory) and JAX's persistent compilation cache (which its
  runtime turns on in ``~/.cache/jax``) are kept out: every reference run gets a fresh save directory and a fresh
  ``HOME``, and ``JAX_ENABLE_COMPILATION_CACHE=false``. Its MNIST loader reads the four IDX files from
  ``$HOME/.cache/mnist``; they are written there from the same offline MNIST our harness reads, so it downloads
  nothing.
* Start-up (imports, jit compilation, data loading) is differenced out: each setting runs a short and a long run
  (10 and 40 episodes; MNIST 1,000 and 20,000 steps) and the cost per episode is (long − short) / (long − short
  episodes). The two implementations alternate (reference, ours, reference, ours), so a change in load hits both.
  The ``*_run`` settings (not run by default) time a whole 2,000-episode run of ours (10 against 2,000 episodes)
  against the reference over 10 against 160: its fixed-shape episode costs the same all run long. There the two
  long runs differ in length, so the load they see is not shared as evenly: repeat them.
* MNIST runs end to end as a default run does: evaluation on the 10,000 test images every 200 steps, ours with its
  mechanism statistics and CSV logging.

The table gives CPU-seconds per episode (MNIST: CPU-milliseconds per step) of each, the ratio reference / ours,
and the 1-minute load average seen while the setting ran: on a loaded machine read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
REFERENCE_PACKAGES = ("jax[cpu]==0.9.2", "jaxlib==0.9.2", "optax==0.2.8", "flax==0.12.6", "numpy", "matplotlib",
                      "wandb")
ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


@dataclass(frozen=True)
class Setting:
    """One comparison: the reference's CLI arguments and ours, and the budgets whose difference is timed."""

    reference: tuple[str, ...]
    ours: tuple[str, ...]
    short: int = 10
    long: int = 40
    unit: str = "episode"
    per: float = 1.0  # the table's unit: 1 CPU-s per episode, or 1e-3 (CPU-ms per step)
    reference_long: int = 0  # the reference's long budget where it differs from ours (0: the same)

    def budgets(self, side: str) -> tuple[int, int]:
        """The short and long budgets whose difference is timed for ``side`` ("reference" or "ours")."""
        long = self.reference_long if side == "reference" and self.reference_long else self.long
        return self.short, long

    def reference_command(self, python: Path, budget: int, save_dir: Path) -> list[str]:
        flag = "--num-steps" if self.unit == "step" else "--num-episodes"
        return [str(python), "-m", "tpo.cli", *self.reference, flag, str(budget), "--no-wandb", "--no-verbose",
                "--save-dir", str(save_dir)]

    def our_command(self, budget: int, run_dir: Path) -> list[str]:
        return [sys.executable, "-m", "harness", *self.ours, f"task.steps={budget}", "logger=none", "threads=1",
                "trainer.progress=false", f"hydra.run.dir={run_dir}"]  # checkpoints as a default run writes them


TERMINAL = ("transformer_rlvr", "--match", "prompts", "--num-seeds", "1")
SETTINGS = {
    "terminal_h10_tpo": Setting((*TERMINAL, "--sequence-length", "10", "--algorithms", "tpo"),
                                ("experiment=fig1b_sparse", "algorithm=tpo", "seeds=1")),
    "terminal_h10_grpo": Setting((*TERMINAL, "--sequence-length", "10", "--algorithms", "grpo"),
                                 ("experiment=fig1b_sparse", "algorithm=grpo", "seeds=1")),
    "terminal_h7_tpo": Setting((*TERMINAL, "--sequence-length", "7", "--algorithms", "tpo"),
                               ("experiment=table3_terminal", "task.match=prompts", "task.H=7", "algorithm=tpo",
                                "seeds=1")),
    "terminal_h7_grpo": Setting((*TERMINAL, "--sequence-length", "7", "--algorithms", "grpo"),
                                ("experiment=table3_terminal", "task.match=prompts", "task.H=7", "algorithm=grpo",
                                 "seeds=1")),
    "dense_v16_tpo_token": Setting(("transformer", "--vocab-size", "16", "--num-seeds", "1", "--algorithms",
                                    "tpo_token"),
                                   ("experiment=table1_vocab_sweep", "task.V=16", "algorithm=tpo_token", "seeds=1")),
    # Over a whole run: ours falls as the policy sharpens (dedup), the reference's fixed-shape episode does not
    # (2.22 CPU-s over episodes 10-40, 2.06 over 40-160 for GRPO at H = 10), so it is timed over 10-160 only.
    "terminal_h10_tpo_run": Setting((*TERMINAL, "--sequence-length", "10", "--algorithms", "tpo"),
                                    ("experiment=fig1b_sparse", "algorithm=tpo", "seeds=1"), 10, 2_000,
                                    reference_long=160),
    "terminal_h10_grpo_run": Setting((*TERMINAL, "--sequence-length", "10", "--algorithms", "grpo"),
                                     ("experiment=fig1b_sparse", "algorithm=grpo", "seeds=1"), 10, 2_000,
                                     reference_long=160),
    "mnist_1": Setting(("mnist", "--num-seeds", "1", "--algorithms", "tpo"),
                       ("experiment=fig4_mnist", "algorithm=tpo", "seeds=1"), 1_000, 20_000, "step", 1e-3),
    "mnist_20": Setting(("mnist", "--num-seeds", "20", "--algorithms", "tpo"),
                        ("experiment=fig4_mnist", "algorithm=tpo", "seeds=20"), 1_000, 20_000, "step", 1e-3),
}
QUICK = [name for name in SETTINGS if not name.endswith("_run")]


def build_reference_venv(venv: Path) -> Path:
    """The reference's interpreter, installing its pinned stack on first use."""
    python = venv / "bin" / "python"
    marker = venv / ".tpo-bench-ready"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run([str(python), "-m", "pip", "install", "-q", *REFERENCE_PACKAGES], check=True)
        marker.write_text(" ".join(REFERENCE_PACKAGES) + "\n")
    return python


def write_mnist_idx(directory: Path, arrays: dict[str, np.ndarray] | None = None) -> None:
    """The four official MNIST IDX files (gzip) for the reference's loader, from ``arrays`` (images (N, 784) uint8,
    labels (N,)) or by default the offline MNIST tpo-bench reads."""
    if arrays is None:
        from tasks.mnist_data import load_mnist

        arrays = {key: value.numpy() for key, value in load_mnist().items()}
    directory.mkdir(parents=True, exist_ok=True)
    names = {"train_images": "train-images-idx3-ubyte.gz", "train_labels": "train-labels-idx1-ubyte.gz",
             "test_images": "t10k-images-idx3-ubyte.gz", "test_labels": "t10k-labels-idx1-ubyte.gz"}
    for key, name in names.items():
        values = arrays[key].astype(np.uint8)
        if key.endswith("images"):
            header = struct.pack(">IIII", 0x803, len(values), 28, 28)
        else:
            header = struct.pack(">II", 0x801, len(values))
        with gzip.open(directory / name, "wb") as handle:
            handle.write(header + values.tobytes())


def timed(command: list[str], core: int, env: dict[str, str], cwd: Path) -> float:
    """CPU-seconds (user + system) of ``command`` pinned to ``core``; raises with its output tail if it fails."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(["taskset", "-c", str(core), *command], env=env, cwd=cwd, stdout=log,
                                   stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-2000:]
            raise RuntimeError(f"{' '.join(command)} exited with {process.returncode}:\n{tail}")
    return usage.ru_utime + usage.ru_stime


def measure(name: str, setting: Setting, python: Path, reference: Path, repeats: int, core: int) -> dict:
    """Interleaved short and long runs of both implementations; the per-unit cost of each repeat and their median."""
    costs: dict[str, list[float]] = {"reference": [], "ours": []}
    loads = []
    with tempfile.TemporaryDirectory(prefix="tpo-side-by-side-") as scratch:
        home = Path(scratch) / "home"
        write_mnist_idx(home / ".cache" / "mnist")
        ref_env = {**os.environ, "HOME": str(home), "PYTHONPATH": str(reference / "src"), "MPLBACKEND": "Agg",
                   "JAX_ENABLE_COMPILATION_CACHE": "false", "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ONE_THREAD_XLA,
                   "OMP_NUM_THREADS": "1", "WANDB_MODE": "disabled"}
        ref_env.pop("JAX_COMPILATION_CACHE_DIR", None)
        our_env = {**os.environ, "OMP_NUM_THREADS": "1"}
        for repeat in range(repeats):
            seconds = {}
            for length in (0, 1):  # short runs of both, then long runs of both
                for side in ("reference", "ours"):
                    budget = setting.budgets(side)[length]
                    loads.append(os.getloadavg()[0])
                    where = Path(scratch) / f"{side}-{repeat}-{budget}"
                    if side == "reference":
                        command = setting.reference_command(python, budget, where)
                        seconds[side, length] = timed(command, core, ref_env, Path(scratch))
                    else:
                        seconds[side, length] = timed(setting.our_command(budget, where), core, our_env, ROOT)
            for side in costs:
                short, long = setting.budgets(side)
                costs[side].append((seconds[side, 1] - seconds[side, 0]) / (long - short) / setting.per)
            print(f"  {name} repeat {repeat}: reference {costs['reference'][-1]:.4g}, ours {costs['ours'][-1]:.4g}",
                  flush=True)
    reference_cost, our_cost = (float(np.median(costs[side])) for side in ("reference", "ours"))
    return {"setting": name, "unit": "CPU-ms per step" if setting.unit == "step" else "CPU-s per episode",
            "budgets": {side: list(setting.budgets(side)) for side in costs}, "reference": reference_cost,
            "ours": our_cost, "ratio": reference_cost / our_cost, "repeats": costs, "load": [min(loads), max(loads)]}


def markdown(rows: list[dict], host: dict) -> str:
    pending = f" Not measured yet: {', '.join(host['pending'])}." if host.get("pending") else ""
    lines = [f"Side by side on {host['cpu']} ({host['date']}; one core, one thread each; {host['repeats']} "
             f"repeat(s), median; load {host['load']}).{pending}", "",
             "| setting | unit | timed over (reference; ours) | real reference | tpo-bench | reference / ours "
             "| load (1 min) |", "|---|---|---|---|---|---|---|"]
    for row in rows:
        budgets = row["budgets"]  # {side: [short, long]}; a list in files written before the *_run settings
        spans = "; ".join(f"{short}–{long}" for short, long in (budgets.values() if isinstance(budgets, dict)
                                                                else [budgets]))
        lines.append(f"| {row['setting']} | {row['unit']} | {spans} | {row['reference']:.4g} | {row['ours']:.4g} | "
                     f"{row['ratio']:.2f}× | {row['load'][0]:.1f}–{row['load'][1]:.1f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, required=True, help="a checkout of github JeanKaddour/tpo")
    parser.add_argument("--venv", type=Path, default=Path("~/.cache/tpo-bench/reference-venv").expanduser())
    parser.add_argument("--settings", default=",".join(QUICK), help=f"comma-separated (default: all but the "
                        f"whole-run ones, which take ~40 CPU-min each): {', '.join(SETTINGS)}")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--core", type=int, default=0, help="the core both implementations are pinned to")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "bench" / "reference_side_by_side")
    args = parser.parse_args(argv)
    names = args.settings.split(",")
    unknown = [name for name in names if name not in SETTINGS]
    if unknown:
        parser.error(f"--settings {unknown[0]!r} is not valid; valid choices: {', '.join(SETTINGS)}")
    if not (args.reference / "src" / "tpo" / "cli.py").exists():
        parser.error(f"--reference {args.reference} is not a checkout of the paper's repository (no src/tpo/cli.py)")
    if shutil.which("taskset") is None:
        parser.error("taskset (util-linux) is needed to pin each process to one core")
    python = build_reference_venv(args.venv)
    from tasks.models import linear

    cpu = f"{linear.cpu_model() or platform.processor()}; cpu_matmul=auto: {linear.auto_backend()}"
    commit = subprocess.run(["git", "-C", str(args.reference), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in names:  # the files are rewritten after every setting: an interrupted bench keeps what it measured
        rows.append(measure(name, SETTINGS[name], python, args.reference.resolve(), args.repeats, args.core))
        host = {"cpu": cpu, "cores": os.cpu_count(), "date": time.strftime("%Y-%m-%d %H:%M"),
                "load": f"{min(r['load'][0] for r in rows):.1f}–{max(r['load'][1] for r in rows):.1f}",
                "reference_commit": commit, "repeats": args.repeats,
                "pending": [other for other in names if other not in {r["setting"] for r in rows}]}
        text = markdown(rows, host)
        args.out.with_suffix(".json").write_text(json.dumps({"host": host, "rows": rows}, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    print(text)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
