"""How hard a noise-only group pulls on the policy next to a real one (README "Beyond the paper": low-variance
groups).

A group's pull is the norm of the first-epoch gradient of an algorithm's loss on the group's candidate log-probs
ℓ_k, at θ = θ_old with every candidate equally likely (the start of training, when the candidates differ). It is
computed through the registered algorithm's own ``signal`` and ``loss``, for groups of K binary scores with m right
and for groups whose scores differ only by N(0, σ²) noise (what ``task.reward_noise`` makes of a zero-variance
group). Each pull is given over that of a lone winner (1 of K right): 1 means a noise-only group moves the policy as
hard as the rarest real signal. Under Muon only these ratios matter: its step has the same size whatever the
gradient's.

The standardisation variants are read from the ``beyond_amplification_*`` presets, so the table describes the runs.

A second table asks what the noise does to the real groups: how much of a clean group's gradient survives and how
much noise it gains (``real_under_noise``).

``python -m harness.report.group_pull [--algorithms ID ...] [--noise 0.001 0.01] [--out FILE]``
"""

from __future__ import annotations

import math
from pathlib import Path

import torch
import yaml
from omegaconf import OmegaConf

from algorithms import Groups, Rollout
from algorithms.registry import ALGORITHMS, Algorithm, build, get_algorithm
from algorithms.scores import Spread
from harness import artefacts, cli, locations

PRESETS = {"σ": "beyond_amplification", "σ floor": "beyond_amplification_floor",
           "shrunk σ": "beyond_amplification_shrinkage", "ranks": "beyond_amplification_rank"}


def _preset(name: str) -> dict:
    return yaml.safe_load((artefacts.PRESETS / f"{name}.yaml").read_text()) or {}


def variants() -> dict[str, dict]:
    """Each variant's ``algorithm`` overrides, as its preset sets them (the σ preset sets none)."""
    return {label: _preset(preset).get("algorithm", {}) for label, preset in PRESETS.items()}


def standardising() -> tuple[str, ...]:
    """The registered algorithms that standardise the scores of group rollouts (the variants apply to them)."""
    return tuple(name for name, cls in ALGORITHMS.items()
                 if Rollout.GROUP in cls.rollouts and issubclass(cls.Hyperparameters, Spread))


def swept_algorithms() -> tuple[str, ...]:
    """The algorithms the experiment sweeps (its σ preset's ``algorithm`` sweep)."""
    return tuple(str(_preset(PRESETS["σ"])["hydra"]["sweeper"]["params"]["algorithm"]).split(","))


def method(algorithm: str, overrides: dict) -> Algorithm:
    """The algorithm as its conf/algorithm YAML sets it, with a variant's ``overrides``."""
    return build(OmegaConf.merge(OmegaConf.load(locations.CONF / "algorithm" / f"{algorithm}.yaml"), overrides))


def gradients(method: Algorithm, scores: torch.Tensor, logp_old: torch.Tensor | None = None) -> torch.Tensor:
    """Each group's first-epoch gradient (G, K): ∂ loss_g / ∂ℓ at ℓ = ℓ_old, the candidates' log-probs ``logp_old``
    (G, K; default: all candidates equally likely)."""
    groups_count, k = scores.shape
    shape = (1, groups_count, k, 1) if method.token_level else (1, groups_count, k)
    logp_old = (torch.full(shape, -math.log(k), dtype=scores.dtype) if logp_old is None
                else logp_old.to(scores.dtype).reshape(shape))
    groups = Groups(scores=scores.unsqueeze(0), logp_old=logp_old, rollout=Rollout.GROUP)
    logp = logp_old.clone().requires_grad_()
    (gradient,) = torch.autograd.grad(method.loss(logp, groups, method.signal(groups))[0].sum(), logp)
    # TPO and GRPO average over groups: × G is one group's own gradient (other aggregations scale every group alike,
    # which leaves the ratios of the tables as they are)
    return gradient[0].flatten(1) * groups_count


def pulls(method: Algorithm, scores: torch.Tensor) -> torch.Tensor:
    """The pull of each group of ``scores`` (G, K): the norm of its first-epoch gradient."""
    return gradients(method, scores).norm(dim=1)


def table(algorithms: tuple[str, ...] | None = None, k: int = 8, noise: tuple[float, ...] = (0.001, 0.01),
          draws: int = 4096, seed: int = 0) -> tuple[list[str], list[str], list[list[float]]]:
    """(row labels, column labels, ratios): rows m of K right (m = 1 … K − 1), then noise-only groups at each σ (the
    mean pull over ``draws`` groups); columns algorithm (default: the swept ones) × variant; each pull over the lone
    winner's."""
    real = torch.tensor([[1.0] * m + [0.0] * (k - m) for m in range(1, k)])
    generator = torch.Generator().manual_seed(seed)
    noisy = [sigma * torch.randn(draws, k, generator=generator) for sigma in noise]
    columns, values = [], []
    for algorithm in algorithms or swept_algorithms():
        label = get_algorithm(algorithm).label
        for variant, overrides in variants().items():
            columns.append(f"{label}, {variant}")
            built = method(algorithm, overrides)
            real_pulls = pulls(built, real)
            lone = real_pulls[0]
            values.append([*(real_pulls / lone).tolist(),
                           *[(pulls(built, scores).mean() / lone).item() for scores in noisy]])
    rows = [f"{m} of {k} right" for m in range(1, k)] + [f"noise only, σ = {sigma:g}" for sigma in noise]
    return rows, columns, [list(row) for row in zip(*values)]


def real_under_noise(algorithms: tuple[str, ...] | None = None, k: int = 8, noise: tuple[float, ...] = (0.001, 0.01),
                     right: tuple[int, ...] | None = None, draws: int = 4096, seed: int = 0):
    """What noise does to a real group (m of K right, plus N(0, σ²) on every score): (row labels, column labels,
    cells), each cell (signal, noise): the mean component of its gradient along the clean group's gradient and the
    mean norm of the rest, both over the clean group's pull. Ranks break the ties among equal scores by the noise,
    so they lose signal here where σ and its variants do not. ``right``: the m to show (default 1, K/2, K − 1)."""
    right = tuple(sorted({1, k // 2, k - 1})) if right is None else right
    if not all(0 < m < k for m in right):
        raise ValueError(f"right: every m must be in 1..{k - 1} (K = {k}), got {right}")
    generator = torch.Generator().manual_seed(seed)
    cases = [(m, sigma, sigma * torch.randn(draws, k, generator=generator)) for sigma in noise for m in right]
    columns, cells = [], []
    for algorithm in algorithms or swept_algorithms():
        label = get_algorithm(algorithm).label
        for variant, overrides in variants().items():
            columns.append(f"{label}, {variant}")
            built, column = method(algorithm, overrides), []
            for m, _, draw in cases:
                clean = torch.tensor([[1.0] * m + [0.0] * (k - m)])
                clean_gradient = gradients(built, clean)[0]
                scale = clean_gradient.norm()  # the clean group's pull
                along = clean_gradient / scale
                noisy = gradients(built, clean + draw)
                signal = noisy @ along
                rest = (noisy - signal[:, None] * along).norm(dim=1)
                column.append(((signal.mean() / scale).item(), (rest.mean() / scale).item()))
            cells.append(column)
    rows = [f"{m} of {k} right + noise σ = {sigma:g}" for m, sigma, _ in cases]
    return rows, columns, [list(row) for row in zip(*cells)]


def markdown(rows: list[str], columns: list[str], ratios: list[list]) -> str:
    """A markdown table; a cell is a ratio or a (signal, noise) pair."""
    lines = ["| group | " + " | ".join(columns) + " |", "|:--|" + "--:|" * len(columns)]
    lines += [f"| {row} | " + " | ".join(" / ".join(f"{v:.2f}" for v in value) if isinstance(value, tuple)
                                         else f"{value:.2f}" for value in values) + " |"
              for row, values in zip(rows, ratios)]
    return "\n".join(lines) + "\n"


@cli.refusals_exit_2
def main(argv: list[str] | None = None) -> None:
    parser = cli.Parser(prog="python -m harness.report.group_pull", description=__doc__.split("\n\n")[0])
    parser.add_argument("--algorithms", nargs="+", default=list(swept_algorithms()),
                        help="default: those the beyond_amplification preset sweeps")
    parser.add_argument("--K", type=cli.number(int, low=2, high=4096), default=8, help="candidates per group")
    parser.add_argument("--noise", nargs="+", type=cli.number(float, above=0, high=1e6), default=[0.001, 0.01],
                        help="σ of the score noise")
    parser.add_argument("--draws", type=cli.number(int, low=1, high=100_000), default=4096,
                        help="noisy groups averaged per σ (and per real group)")
    parser.add_argument("--seed", type=cli.number(int, low=0, high=2**32 - 1), default=0)
    parser.add_argument("--out", type=Path, help="also write both tables here (markdown)")
    args = parser.parse_args(argv)
    valid = standardising()
    for name in args.algorithms:
        if name not in valid:  # one line naming the valid ids
            parser.error(f"--algorithms {name}: not an algorithm that standardises group scores; valid choices: "
                         f"{', '.join(valid)}")
    chosen = (tuple(args.algorithms), args.K, tuple(args.noise))
    text = markdown(*table(*chosen, args.draws, args.seed))
    under_noise = markdown(*real_under_noise(*chosen, draws=args.draws, seed=args.seed))
    print(text, "\n", under_noise, sep="", end="")
    if args.out:
        command = (f"python -m harness.report.group_pull --algorithms {' '.join(args.algorithms)} --K {args.K} "
                   f"--noise {' '.join(f'{sigma:g}' for sigma in args.noise)} --draws {args.draws} --seed {args.seed}")
        args.out.write_text(f"Generated by `{command}`. Pull of a group over that of a lone winner (1 of {args.K} "
                            f"right), first epoch, every candidate equally likely (`harness/report/group_pull.py`)."
                            f"\n\n{text}\nReal groups under the same noise: signal / noise, the mean component of a "
                            f"group's gradient along its clean gradient and the mean norm of the rest, each over the "
                            f"clean group's pull (1.00 / 0.00: the noise changes nothing).\n\n{under_noise}")


if __name__ == "__main__":
    main()
