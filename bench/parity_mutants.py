"""Does the parity with the paper's code catch a one-line bug? Each mutant changes one formula in a copy of the working
tree and runs tests/test_reference_parity.py there; a mutant that fails no parity case is a bug it lets through.

    python bench/parity_mutants.py                  # every mutant (about a CPU-minute each)
    python bench/parity_mutants.py --mutants dg_eta,muon_bias
    [--out results/bench/parity_mutants.txt]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from golden_mutants import MUTANTS as GOLDEN_MUTANTS  # noqa: E402
from golden_mutants import copy_tree  # noqa: E402

# name: (file, text, replacement, what the change means); each text occurs exactly once in its file
MUTANTS: dict[str, tuple[str, str, str, str]] = {
    **GOLDEN_MUTANTS,
    "dg_eta": ("algorithms/losses.py", "torch.sigmoid(advantages * surprisal / eta)",
               "torch.sigmoid(advantages * surprisal * eta)", "DG's gate σ(A·ℓ·η) instead of σ(A·ℓ/η)"),
    "dg_surprisal": ("algorithms/losses.py", "surprisal = -logp.detach()", "surprisal = logp.detach()",
                     "DG's surprisal +log π instead of −log π"),
    "k3_sign": ("algorithms/losses.py", "return (-log_ratio).exp() + log_ratio - 1.0",
                "return log_ratio.exp() - log_ratio - 1.0", "GRPO's k3 KL of the other direction"),
    "clip_high": ("algorithms/losses.py", "ratio.clamp(1.0 - clip_eps, 1.0 + high)",
                  "ratio.clamp(1.0 - clip_eps, 1.0 + 2 * high)", "the upper clip at 1 + 2ε"),
    "muon_bias": ("tasks/models/optim.py", "m_hat = beta * (mu / spread(1 - beta_t * beta)) + (1 - beta) * (g / "
                  "spread(1 - beta_t))", "m_hat = beta * (mu / spread(1 - beta_t)) + (1 - beta) * (g / "
                  "spread(1 - beta_t))", "Muon's Nesterov term with the bias correction of step t, not t + 1"),
    "muon_beta": ("tasks/models/optim.py", "muon_beta: float = 0.95", "muon_beta: float = 0.9",
                  "Muon's momentum 0.9 instead of 0.95"),
    "ns_coeffs": ("tasks/models/optim.py", "NS_COEFFS = (3.4445, -4.7750, 2.0315)",
                  "NS_COEFFS = (3.4445, -4.7750, 2.0)", "a Newton–Schulz coefficient off by 1.5%"),
    "adam_nesterov": ("tasks/models/optim.py", "m_hat = b1 * (mu / spread(1 - b1_t * b1)) + (1 - b1) * (g / "
                      "spread(1 - b1_t))", "m_hat = mu / spread(1 - b1_t)", "plain Adam instead of Nesterov-Adam"),
    "adam_eps": ("tasks/models/optim.py", "update = -group[\"lr\"] * m_hat / (v_hat.sqrt() + group[\"eps\"])",
                 "update = -group[\"lr\"] * m_hat / (v_hat + group[\"eps\"]).sqrt()", "Adam's ε inside the root"),
    "batch_baseline": ("algorithms/scores.py", "return rewards - rewards.mean(batch_dim, keepdim=True)",
                       "return rewards - rewards.mean(-1, keepdim=True)",
                       "the token tasks' baseline over the tokens instead of the batch"),
    "mnist_baseline": ("tasks/mnist_bandit.py", "baseline = log_probs.detach().exp().pow(2).sum(-1, keepdim=True)",
                       "baseline = log_probs.detach().exp().pow(2).mean(-1, keepdim=True)",
                       "MNIST's baseline mean π² instead of Σπ²"),
    "sequential_alive": ("tasks/token_reversal.py", "alive = torch.cat([torch.ones_like(behaviour[..., :1]), "
                         "behaviour[..., :-1].cumprod(-1)], -1)", "alive = behaviour.cumprod(-1)",
                         "token candidates alive while the behaviour token at t itself is right (one step late)"),
}


def run_mutant(name: str, work: Path) -> list[str]:
    """The parity cases that fail under mutant ``name``."""
    path, text, replacement, _ = MUTANTS[name]
    source = (work / path).read_text()
    assert source.count(text) == 1, f"{name}: the text to change occurs {source.count(text)} times in {path}"
    (work / path).write_text(source.replace(text, replacement))
    try:
        result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider",
                                 "tests/test_reference_parity.py", "-k", "not sampler"],
                                cwd=work, capture_output=True, text=True)
    finally:
        (work / path).write_text(source)
    return sorted({case or test for test, case in re.findall(
        r"FAILED tests/test_reference_parity.py::(\w+)(?:\[([^\]]+)\])?", result.stdout)})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mutants", default=",".join(MUTANTS))
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    chosen = [m for m in args.mutants.split(",") if m]
    unknown = [m for m in chosen if m not in MUTANTS]
    if unknown:
        raise SystemExit(f"--mutants: unknown {', '.join(unknown)}; valid choices: {', '.join(MUTANTS)}")
    lines = ["# parity cases (tests/test_reference_parity.py) failed by each one-line mutant", ""]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        copy_tree(work)
        for name in chosen:
            failed = run_mutant(name, work)
            shown = ", ".join(failed[:6]) + (f", … ({len(failed)} in all)" if len(failed) > 6 else "")
            lines.append(f"{name:18s} {len(failed):3d} failed  {MUTANTS[name][3]}: {shown or 'NONE'}")
            print(lines[-1], flush=True)
    if args.out:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
