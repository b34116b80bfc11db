"""Do the golden runs still catch a wrong formula when they are compared only within the cross-CPU allowance?

On a CPU the goldens were not written on, ``tests/test_golden_runs.py`` compares every value within an allowance
instead of byte for byte. This script shows that the allowance still fails the bugs the goldens exist for: it copies
the working tree, makes one small change of a formula in the copy (a mutant), rewrites every golden case with the
copy, and counts the cases whose values leave the allowance. A mutant that fails no case would be a bug the goldens
let through on other CPUs.

    python bench/golden_mutants.py                 # every mutant (about half a CPU-minute each)
    python bench/golden_mutants.py --mutants sign,sample_std
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from test_golden_runs import CASES, GOLDEN, deviations  # noqa: E402

# name: (file, text, replacement, what the change means); each text occurs exactly once in its file
MUTANTS: dict[str, tuple[str, str, str, str]] = {
    "sign": ("algorithms/losses.py", "(log_p.exp() - target)", "(target - log_p.exp())",
             "TPO's gradient q − p instead of p − q"),
    "sample_std": ("algorithms/scores.py", "variance = centred.pow(2).mean(dim, keepdim=True)",
                   "variance = centred.pow(2).sum(dim, keepdim=True) / (centred.shape[dim] - 1)",
                   "the sample std (K − 1) instead of the population std, in u and in GRPO's advantages"),
    "epoch_guard": ("harness/trainers/batched.py", "        if batch.groups is None:\n", "        if True:\n",
                    "ℓ_old and the signal recomputed every epoch instead of frozen at the first"),
    "epochs": ("algorithms/registry.py", "default_epochs: ClassVar[int] = 4", "default_epochs: ClassVar[int] = 3",
               "3 updates per batch instead of 4 for the multi-epoch algorithms"),
    "u_times_eta_token": ("algorithms/losses.py", "logp_old.detach() + u / eta if anchor else u / eta",
                          "logp_old.detach() + u * eta if anchor else u * eta",
                          "TPO's token/sequence target with u·η instead of u/η"),
    "u_times_eta_tabular": ("algorithms/exact.py", "torch.log(probs + 1e-8) + u / eta",
                            "torch.log(probs + 1e-8) + u * eta", "exact tabular TPO's target with u·η instead of u/η"),
}


def copy_tree(into: Path) -> None:
    """The working tree's code as git sees it (tracked and untracked, not ignored; not results/): what the goldens
    run."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(lambda name: name and not name.startswith("results/"), files):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)


def run_mutant(name: str, work: Path) -> list[str]:
    """The golden cases that leave the cross-CPU allowance under mutant ``name`` (each with its worst value)."""
    path, text, replacement, _ = MUTANTS[name]
    tree = work / name
    copy_tree(tree)
    source = (tree / path).read_text()
    if source.count(text) != 1:
        sys.exit(f"mutant {name}: {text!r} occurs {source.count(text)} times in {path}, expected once")
    (tree / path).write_text(source.replace(text, replacement))
    out = work / f"{name}.out"
    subprocess.run([sys.executable, str(tree / "tests" / "test_golden_runs.py"), "--out", str(out)], cwd=tree,
                   check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(tree)})
    caught = []
    for case in sorted(CASES):
        cells = deviations((out / case / "metrics.csv").read_bytes(), (GOLDEN / case / "metrics.csv").read_bytes())
        index, column, _, ratio = max(cells, key=lambda cell: cell[3])
        if ratio > 1:
            caught.append(f"{case} (row {index} {column}: {ratio:.3g}× the allowance)")
    return caught


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", default=",".join(MUTANTS), help=f"comma-separated, of {', '.join(MUTANTS)}")
    args = parser.parse_args()
    names = args.mutants.split(",")
    if unknown := [name for name in names if name not in MUTANTS]:
        sys.exit(f"--mutants: {', '.join(unknown)} not a mutant; valid: {', '.join(MUTANTS)}")
    print(f"# golden mutants: {len(CASES)} cases, compared within the cross-CPU allowance only")
    survivors = []
    with tempfile.TemporaryDirectory() as scratch:
        for name in names:
            caught = run_mutant(name, Path(scratch))
            print(f"\n## {name}: {MUTANTS[name][3]}\n{len(caught)} of {len(CASES)} cases fail")
            for line in caught[:5]:
                print(f"  {line}")
            survivors += [] if caught else [name]
    if survivors:
        sys.exit(f"no golden case catches: {', '.join(survivors)}")


if __name__ == "__main__":
    main()
