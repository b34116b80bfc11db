"""Thread counts on a small CPU: one job with N threads against N single-threaded jobs side by side.

    PYTHONPATH=. python bench/threads.py [--cores 2] [--episodes 4]

Runs the terminal-reward TPO episode (H = 10, 1 seed) as (a) one process with --cores threads and (b) --cores
processes with 1 thread each at the same time, and prints episodes/s of the machine for both. Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def launch(threads: int, episodes: int, setting: tuple[str, ...] = ()) -> subprocess.Popen:
    """token_episodes_per_second.py for TPO at 1 seed (``setting``: its --H/--K/... options; default H = 10)."""
    command = [sys.executable, str(ROOT / "bench" / "token_episodes_per_second.py"), "--seeds", "1", "--algorithms",
               "tpo", "--episodes", str(episodes), "--threads", str(threads), *setting]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, env=env)


def seconds_per_episode(process: subprocess.Popen) -> float:
    """Wall seconds per episode from the 1-seed row ("tpo  1  -  <s/episode> ...")."""
    out, _ = process.communicate()
    row = re.search(r"^tpo\s+1\s+-\s+([\d.]+)", out, re.M)
    if process.returncode or row is None:
        raise RuntimeError(f"token_episodes_per_second.py failed or printed no 1-seed row:\n{out}")
    return float(row.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=4)
    args = parser.parse_args()
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}; "
          f"terminal reward H=10 TPO, 1 seed, {args.episodes} timed episodes")
    one = seconds_per_episode(launch(args.cores, args.episodes))
    print(f"1 job × {args.cores} threads: {one:.3f} s/episode → {1 / one:.2f} episodes/s", flush=True)
    alone = seconds_per_episode(launch(1, args.episodes))
    print(f"1 job × 1 thread (alone): {alone:.3f} s/episode → {1 / alone:.2f} episodes/s", flush=True)
    jobs = [launch(1, args.episodes) for _ in range(args.cores)]
    each = [seconds_per_episode(job) for job in jobs]
    total = sum(1 / s for s in each)
    print(f"{args.cores} jobs × 1 thread side by side: {', '.join(f'{s:.3f}' for s in each)} s/episode → "
          f"{total:.2f} episodes/s ({total * one:.2f}× the {args.cores}-thread job)")


if __name__ == "__main__":
    main()
