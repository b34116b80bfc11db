"""What a mirror costs a run: wall seconds of `python -m harness task=tabular_single seeds=N` with `logger=wandb`
(offline) and `logger=tensorboard` against `logger=none`, at 1, 20 and 100 seeds.

    PYTHONPATH=. python bench/wandb_overhead.py [--seeds 1,20,100] [--repeats 5] [--out FILE]

Each command is a fresh process (imports, wandb's service, training, exit: what a user waits for), into a run folder
under a temporary directory, with `trainer.progress=false`; the loggers are interleaved within each repeat, so a
change of load hits them alike, and the median of the repeats is reported. Overhead is the median wall time less
`logger=none`'s, in seconds and as a share of it; the target is under 20% of the run, or under 2 s. `wandb, run per
seed` forces one W&B run per seed (`logger.seed_runs` above N), the layout `logger=wandb` keeps up to 8 seeds.
Then, per `wandb.Settings` option the tracker could pass, the mean seconds of a later run (init, config, 150 rows,
summary, finish; offline) of 20 in one process: what each option saves per run. Output:
results/bench/wandb_overhead.txt (`--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from section4_cost import machine_header  # noqa: E402

LOGGERS = {"none": ["logger=none"], "wandb": ["logger=wandb", "logger.mode=offline"],
           "wandb, run per seed": ["logger=wandb", "logger.mode=offline", "logger.seed_runs=1000"],
           "tensorboard": ["logger=tensorboard"]}
TARGET_SHARE, TARGET_SECONDS = 0.20, 2.0
SETTINGS = {"wandb's defaults": {}, "x_save_requirements=False": {"x_save_requirements": False},
            "x_disable_stats=True": {"x_disable_stats": True}, "x_disable_meta=True": {"x_disable_meta": True},
            "x_disable_machine_info=True": {"x_disable_machine_info": True}, "console='off'": {"console": "off"},
            "all five": {"x_save_requirements": False, "x_disable_stats": True, "x_disable_meta": True,
                         "x_disable_machine_info": True, "console": "off"}}


def wall_seconds(seeds: int, logger: list[str], folder: Path) -> float:
    """One launch's wall seconds, from process start to exit."""
    command = [sys.executable, "-m", "harness", "task=tabular_single", f"seeds={seeds}", "trainer.progress=false",
               *logger, f"hydra.run.dir={folder}"]
    # a wandb service of the launch's own, as from a shell
    environment = {**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, "PYTHONPATH": str(ROOT),
                   "WANDB_SILENT": "true"}
    start = time.perf_counter()
    result = subprocess.run(command, cwd=folder.parent, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode:
        raise SystemExit(f"{' '.join(command)} failed:\n{result.stderr[-2000:]}")
    return seconds


def seconds_per_run(options: dict, runs: int, folder: str) -> float:
    """In this process: the mean seconds of each W&B run after the first (which starts wandb's service), offline."""
    import wandb

    timings = []
    for index in range(runs + 1):
        start = time.perf_counter()
        run = wandb.init(project="bench", mode="offline", dir=folder, name=f"seed{index}", reinit="create_new",
                         config={"seed": index, "task.name": "tabular_single"},
                         settings=wandb.Settings(silent=True, **options))
        run.define_metric("step")
        run.define_metric("*", step_metric="step")
        for step in range(150):
            run.log({"step": step, "error": 0.5, "misalignment": 0.1})
        run.summary.update({"status": "completed", "last_step": 149})
        run.finish()
        timings.append(time.perf_counter() - start)
    return statistics.mean(timings[1:])


def settings_lines(runs: int) -> list[str]:
    """Each ``SETTINGS`` variant in a fresh process (wandb's own service each)."""
    lines = [f"wandb.Settings options: mean seconds per W&B run after the first, {runs} runs in one process, offline",
             f"  {'options':<30}{'s per run':>10}"]
    with tempfile.TemporaryDirectory() as folder:
        for name, options in SETTINGS.items():
            command = [sys.executable, __file__, "--settings-child", json.dumps(options), "--runs", str(runs),
                       "--folder", folder]
            environment = {**{k: v for k, v in os.environ.items() if k != "WANDB_SERVICE"}, "WANDB_SILENT": "true"}
            output = subprocess.run(command, env=environment, capture_output=True, text=True, check=True).stdout
            lines.append(f"  {name:<30}{float(output.split()[-1]):>10.3f}")
            print(lines[-1], flush=True)
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="1,20,100", help="seed counts, comma-separated")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "wandb_overhead.txt"))
    parser.add_argument("--runs", type=int, default=20, help="W&B runs per wandb.Settings variant")
    parser.add_argument("--settings-child", help=argparse.SUPPRESS)  # a child: one variant's options, JSON
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.settings_child is not None:
        print(seconds_per_run(json.loads(args.settings_child), args.runs, args.folder))
        return
    counts = [int(n) for n in args.seeds.split(",")]
    header = [machine_header(),
              f"# python -m harness task=tabular_single seeds=N (150 steps) trainer.progress=false, one process per "
              f"launch; wall seconds, median of {args.repeats}; overhead against logger=none (target: under "
              f"{TARGET_SHARE:.0%} of the run, or under {TARGET_SECONDS:.0f} s)"]
    print("\n".join(header), flush=True)
    lines = [f"{'seeds':>5}  {'logger':<20}{'wall s':>8}{'overhead s':>12}{'% of run':>10}  target   all repeats"]
    with tempfile.TemporaryDirectory() as scratch:
        for seeds in counts:
            names = [name for name in LOGGERS if not (name == "wandb, run per seed" and seeds == 1)]
            timings: dict[str, list[float]] = {name: [] for name in names}
            for repeat in range(args.repeats):
                for name in names:
                    folder = Path(scratch) / f"{seeds}-{len(timings[name])}-{name.replace(', ', '-')}"
                    timings[name].append(wall_seconds(seeds, LOGGERS[name], folder))
            base = statistics.median(timings["none"])
            for name in names:
                wall = statistics.median(timings[name])
                over = wall - base
                met = over < TARGET_SECONDS or over < TARGET_SHARE * base
                met = "" if name == "none" else "met" if met else "MISSED"
                lines.append(f"{seeds:>5}  {name:<20}{wall:>8.2f}{over:>12.2f}{over / base:>10.0%}  {met:<7}  "
                             f"{', '.join(f'{t:.2f}' for t in timings[name])}")
                print(lines[-1], flush=True)
    lines += ["", *settings_lines(args.runs)]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(header + lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
