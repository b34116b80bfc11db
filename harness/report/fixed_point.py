"""Where a group's target stops the policy on terminal reward: the odds of the right answer at which an algorithm's
expected first-epoch pull on it vanishes (Fig 8's TPO-no-anchor plateau).

Model of a prompt: the policy gives its one right answer probability p and each of the N − 1 = V^H − 1 wrong ones
(1 − p)/(N − 1), so a group of K samples holds m ~ Binomial(K, p) winners, each with log-prob log p, and K − m
losers, each with log((1 − p)/(N − 1)). A group's pull is the first-epoch gradient of the algorithm's own loss
(its registered ``signal`` and ``loss``, at θ = θ_old; ``group_pull.gradients``) along the direction that raises the
winners' log-probs against the losers', taken with the sign of a descent step: positive raises the right answer.
A group's pull depends on the odds r = p (N − 1) / (1 − p) alone; its Binomial weight on p, so on N too.

A target built from the scores only (TPO-no-anchor: q = softmax(u/η)) is met once the policy's share of each group
equals it, so the expected pull vanishes at finite odds, and more updates do not move the policy past them. TPO's
target, q ∝ p_old · exp(u/η), moves with p_old, so its pull on the right answer has no such zero; neither has a
policy-gradient loss's (Group PG, GRPO). Wrong answers equally likely is the model's assumption; the runs' error
and all-fail fraction are its check (``results/fig8_ablations/conclusions.md``).

``python -m harness.report.fixed_point [--algorithms ID ...] [--H 7 8 10] [--V 2] [--K 8]``
"""

from __future__ import annotations

import math

import torch
from scipy.optimize import brentq
from scipy.stats import binom

from algorithms import Rollout
from algorithms.registry import ALGORITHMS, Algorithm, get_algorithm
from harness import cli
from harness.report.group_pull import gradients, method

DECADES = (-6, 9)  # the odds searched for a fixed point: 10^-6 … 10^9, on a grid of STEPS per decade
STEPS = 5


def sequence_level_group_algorithms() -> tuple[str, ...]:
    """The registered algorithms with a loss on K whole sequences per prompt (the model's groups)."""
    return tuple(name for name, cls in ALGORITHMS.items() if Rollout.GROUP in cls.rollouts and not cls.token_level)


def target_algorithms() -> tuple[str, ...]:
    """The sequence-level group algorithms whose signal is a target (TPO, TPO-no-anchor), the default comparison."""
    return tuple(name for name in sequence_level_group_algorithms() if ALGORITHMS[name].target)


def expected_pull(algorithm: Algorithm, odds: float, wrong: int, k: int) -> float:
    """The expected pull on the right answer (module docstring) at ``odds`` r, with ``wrong`` = N − 1 wrong answers
    and groups of ``k``."""
    p = odds / (odds + wrong)
    winners = torch.arange(k + 1, dtype=torch.float64)
    right = (torch.arange(k, dtype=torch.float64) < winners[:, None]).double()  # group m: m winners, then losers
    logp_old = torch.where(right.bool(), math.log(p), math.log((1 - p) / wrong))
    gradient = gradients(algorithm, right, logp_old)
    raise_winners = right - winners[:, None] / k  # winners up against the losers, the group's mean log-prob kept
    pulls = -(gradient * raise_winners).sum(1)
    return float((torch.from_numpy(binom.pmf(winners.numpy(), k, p)) * pulls).sum())


MAX_K = 1024  # the paper's group sizes go to 64


def fixed_point(algorithm: Algorithm, wrong: int, k: int) -> float | None:
    """The smallest odds r at which the expected pull turns from raising the right answer to lowering it (the
    policy moves towards it from both sides); None where the grid over ``DECADES`` finds no such change."""
    def pull(log_odds: float) -> float:
        return expected_pull(algorithm, math.exp(log_odds), wrong, k)

    grid = [math.log(10) * (DECADES[0] + i / STEPS) for i in range((DECADES[1] - DECADES[0]) * STEPS + 1)]
    values = [pull(x) for x in grid]
    if any(math.isnan(value) for value in values):
        raise ValueError(f"{type(algorithm).__name__}: the expected pull is NaN on the grid of odds")
    for (low, before), (high, after) in zip(zip(grid, values), zip(grid[1:], values[1:])):
        if before > 0 >= after:
            return math.exp(brentq(pull, low, high, xtol=1e-12))
    return None


def table(algorithms: tuple[str, ...], horizons: tuple[int, ...], v: int = 2, k: int = 8) -> list[dict]:
    """One row per algorithm and H: the fixed point's odds, the right answer's probability p there, the error
    1 − p and the all-fail fraction (1 − p)^K (both in %); None where the algorithm has no fixed point."""
    rows = []
    for name in algorithms:
        built = method(name, {})
        for h in horizons:
            wrong = v ** h - 1
            odds = fixed_point(built, wrong, k)
            p = None if odds is None else odds / (odds + wrong)
            rows.append({"algorithm": get_algorithm(name).label, "H": h, "wrong answers": wrong, "odds": odds,
                         "p": p, "error %": None if p is None else 100 * (1 - p),
                         "all-fail %": None if p is None else 100 * (1 - p) ** k})
    return rows


def markdown(rows: list[dict]) -> str:
    lines = ["| algorithm | H | wrong answers | odds at the fixed point | p(right) | error % | all-fail % |",
             "|---|---|---|---|---|---|---|"]
    for row in rows:
        if row["odds"] is None:
            lines.append(f"| {row['algorithm']} | {row['H']} | {row['wrong answers']} | "
                         f"none in 10^{DECADES[0]}–10^{DECADES[1]} | – | – | – |")
        else:
            lines.append(f"| {row['algorithm']} | {row['H']} | {row['wrong answers']} | {row['odds']:.2f} | "
                         f"{row['p']:.4g} | {row['error %']:.4g} | {row['all-fail %']:.3g} |")
    return "\n".join(lines) + "\n"


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.report.fixed_point", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(target_algorithms()),
                        help="default: the sequence-level algorithms that fit a target (TPO and its ablation)")
    parser.add_argument("--H", nargs="+", type=cli.number(int, low=1, high=64), default=[7, 8, 10],
                        help="sequence lengths")
    parser.add_argument("--V", type=cli.number(int, low=2, high=2**53), default=2, help="vocabulary size")
    parser.add_argument("--K", type=cli.number(int, low=2, high=MAX_K), default=8, help="samples per prompt")
    args = parser.parse_args(argv)
    valid = sequence_level_group_algorithms()
    for name in args.algorithms:
        if name not in valid:
            parser.error(f"--algorithms {name}: not a sequence-level group algorithm; valid choices: "
                         f"{', '.join(valid)}")
    if not 2 <= args.K <= MAX_K or args.V < 2 or min(args.H) < 1 or args.V ** max(args.H) > 2 ** 53:
        parser.error(f"--K {args.K}, --V {args.V}, --H {' '.join(map(str, args.H))}: need 2 ≤ K ≤ {MAX_K} (the "
                     f"expected pull is a (K + 1) × K computation), V ≥ 2, H ≥ 1 and V^H ≤ 2^53 (answers a float "
                     "counts exactly)")
    print(markdown(table(tuple(args.algorithms), tuple(args.H), args.V, args.K)), end="")


if __name__ == "__main__":
    main()
