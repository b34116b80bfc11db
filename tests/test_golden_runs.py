"""Golden runs: the metrics.csv of every supported (task, algorithm) pair at tiny size.

They pin the numbers a refactor of the algorithms, tasks or trainer must keep: a change that moves any of them
changes a committed result. On a CPU where the goldens were verified byte-identical (``EXACT_ON``: the processor
family they were written on) they are compared byte for byte. Another CPU rounds some float32 reductions and
transcendental functions differently in the last bit, so there each value may move within an allowance measured by
``bench/golden_spread.py`` (results/bench/golden_spread.txt): far below what a changed formula does, which moves
the first update's numbers in the 2nd-3rd significant digit or more (bench/golden_mutants.py). ``make test`` runs the
cases of ``EMULATED_CASES`` again under each emulated other CPU (tests/cpu_emulation.py), without the byte
comparison, so that a golden pinning a value another CPU would move beyond the allowance fails where it was written.
Regenerate (only for a change that is meant to move numbers, and say so in the commit) with
``python tests/test_golden_runs.py``; it rewrites ``tests/golden/runs/`` and records this CPU in ``EXACT_ON``.

The LLM trainer's loss is pinned on seeded group tensors (value and gradient, as float.hex) rather than by a run:
its runs depend on a tokenizer trained on the fly, and the loss is what the algorithm library supplies to it.
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from conftest import run_config  # noqa: E402
from cpu_emulation import emulating  # noqa: E402

GOLDEN = Path(__file__).parent / "golden" / "runs"

_TOKEN_SIZES = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "task.steps=4",
                "model.d_model=16", "model.layers=1", "model.ffn=32", "seeds=2", "task.checkpoint_every=0"]
# the goldens were written before task.logp_old: they pin its exact ℓ_old; two cases pin the reference's sampled one
_TOKEN = [*_TOKEN_SIZES, "task.logp_old=exact"]
_TERMINAL, _DENSE = [*_TOKEN, "task.reward=terminal"], [*_TOKEN, "task.reward=bag_of_tokens"]
# MNIST's evaluation products are large enough for oneDNN, which cpu_matmul=auto takes on some CPUs only: the
# goldens pin it, and conftest caps its kernels at AVX2, so that they hold on every host
_MNIST = ["task=mnist_bandit", "task.eval_every=10", "task.steps=20", "task.checkpoint_every=0", "seeds=2",
          "task.batch_size=16", "cpu_matmul=onednn"]
_TABULAR_SINGLE = ["task=tabular_single", "task.arms=10", "task.batch_size=8", "task.steps=12", "seeds=2"]
_TABULAR_MULTI = ["task=tabular_multi", "task.contexts=4", "task.arms=5", "task.steps=12", "seeds=2"]

CASES: dict[str, list[str]] = {
    **{f"token_terminal_{a}": [*_TERMINAL, f"algorithm={a}"]
       for a in ("tpo", "tpo_no_anchor", "grpo", "grpo_no_kl", "grpo_masked", "group_pg", "ppo", "dg", "pg")},
    # the modern baselines' goldens were written before the standardisation variants (algorithm.std_floor, ...)
    # existed: they pin that the variants' defaults leave these algorithms as they were
    **{f"token_terminal_{a}": [*_TERMINAL, f"algorithm={a}"] for a in ("rloo", "dr_grpo", "dapo", "gspo", "cispo")},
    **{f"token_terminal_{a}_logp_sampled": [*_TOKEN_SIZES, "task.reward=terminal", f"algorithm={a}",
                                            "task.logp_old=sampled"] for a in ("tpo", "grpo")},
    "token_dense_tpo": [*_DENSE, "algorithm=tpo"],
    "token_dense_tpo_eta2": [*_DENSE, "algorithm=tpo", "algorithm.eta=2"],  # η ≠ 1: u/η and u·η differ
    "token_sequential_tpo": [*_TOKEN, "task.reward=sequential", "algorithm=tpo"],
    "token_dense_grpo_unguarded": [*_DENSE, "algorithm=grpo", "algorithm.zero_variance_guard=false"],
    "token_dense_tpo_token": [*_DENSE, "algorithm=tpo_token"],
    "token_sequential_tpo_token": [*_TOKEN, "task.reward=sequential", "algorithm=tpo_token"],
    "token_dense_grpo_token": [*_DENSE, "algorithm=grpo_token"],
    "token_terminal_tpo_epochs1": [*_TERMINAL, "algorithm=tpo", "algorithm.epochs=1"],
    "token_terminal_dg_epochs4": [*_TERMINAL, "algorithm=dg", "algorithm.epochs=4"],
    "token_terminal_tpo_no_dedup": [*_TERMINAL, "algorithm=tpo", "task.dedup=false"],
    "token_terminal_grpo_no_dedup": [*_TERMINAL, "algorithm=grpo", "task.dedup=false"],
    "token_terminal_tpo_chunk_all": [*_TERMINAL, "algorithm=tpo", "task.seed_chunk=2"],
    "token_terminal_grpo_chunk_all": [*_TERMINAL, "algorithm=grpo", "task.seed_chunk=2"],
    "token_terminal_ppo_chunk1": [*_TERMINAL, "algorithm=ppo", "task.seed_chunk=1"],
    "token_terminal_ppo_interactions": [*_TERMINAL, "algorithm=ppo", "task.match=interactions"],
    "token_terminal_dg_interactions": [*_TERMINAL, "algorithm=dg", "task.match=interactions"],
    "token_dense_dg_surprisal_clip": [*_DENSE, "algorithm=dg", "algorithm.surprisal_clip=0.5"],
    "token_dense_tpo_zero_variance_zero": [*_DENSE, "algorithm=tpo", "algorithm.zero_variance=zero"],
    "token_dense_group_pg_zero_variance_zero": [*_DENSE, "algorithm=group_pg", "algorithm.zero_variance=zero"],
    **{f"mnist_{a}": [*_MNIST, f"algorithm={a}"] for a in ("tpo", "group_pg", "grpo", "dg", "pg", "ce")},
    "mnist_dg_surprisal_clip": [*_MNIST, "algorithm=dg", "algorithm.surprisal_clip=0.5"],
    "mnist_tpo_zero_variance_zero": [*_MNIST, "algorithm=tpo", "algorithm.zero_variance=zero"],
    "mnist_grpo_unguarded": [*_MNIST, "algorithm=grpo", "algorithm.zero_variance_guard=false"],
    **{f"tabular_single_{a}": [*_TABULAR_SINGLE, f"algorithm={a}"] for a in ("pg", "dg", "grpo", "tpo")},
    **{f"tabular_multi_{a}": [*_TABULAR_MULTI, f"algorithm={a}"] for a in ("ce", "pg", "dg", "grpo", "tpo")},
    "tabular_multi_tpo_eta3": [*_TABULAR_MULTI, "algorithm=tpo", "algorithm.eta=3"],
}

# The cases make test runs again under each emulated other CPU (marked cross_cpu; tests/cpu_emulation.py): every
# task kind and every column the goldens have (tested below), at a fifth of the full set's cost
EMULATED_CASES = ("token_terminal_tpo", "token_terminal_cispo", "token_terminal_ppo", "token_dense_dg_surprisal_clip",
                  "token_sequential_tpo_token", "mnist_tpo", "mnist_dg", "tabular_single_tpo", "tabular_multi_ce",
                  "tabular_multi_tpo_eta3")


LLM_LOSS_FILE = GOLDEN / "llm_group_losses.json"
# Columns added to metrics.csv after the goldens were written: the golden's own columns must stay byte-identical,
# and a run may carry these besides (any other new column fails the test).
ADDED_COLUMNS = {"update_muon", "update_adam", "ratio_dev", "kl_snapshot", "clip_fraction"}


def columns(csv: bytes, names: list[str] | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, rows as cell strings) of a metrics.csv, restricted to ``names`` (all by default)."""
    header, *rows = csv.decode().splitlines()
    header = header.split(",")
    keep = [header.index(name) for name in (names or header)]
    return [header[i] for i in keep], [[cells[i] for i in keep] for cells in (row.split(",") for row in rows)]


# The allowance on a CPU the goldens were not verified on: a value in the n-th logged row of a seed (n = 0, 1, ...)
# may move by (RTOL·|g| + ATOL)·GROWTH**min(n, GROWTH_ROWS). ATOL covers values that are differences of O(1) terms
# (misalignment, surplus), which one float32 ulp (1.2e-7) of a term moves absolutely; GROWTH, the amplification of a
# rounding difference by the first updates (later ones do not amplify it further at these sizes). Under other
# kernels and an emulated other libm/BLAS, bench/golden_spread.py measures at most a ninth of this allowance in any
# row (results/bench/golden_spread.txt).
RTOL, ATOL, GROWTH, GROWTH_ROWS = 1e-4, 1e-6, 1.5, 3
# Columns with an allowance of their own, relative and flat over the rows. Muon orthogonalises the attention key
# bias's gradient, which is zero but for rounding (softmax ignores a shift shared by all keys): a full-size step in a
# direction the last bits choose, harmless to training (the bias changes no output) but moving the norm of Muon's
# update by up to 7.8% under other kernels or an emulated other CPU, in any row (results/bench/golden_spread.txt).
# Its allowance catches a gross change only (a lost factor, a zero); where the goldens were written it is compared
# byte for byte.
COLUMN_RTOL = {"update_muon": 0.25}
EXACT_ON_FILE = GOLDEN / "exact_on.json"  # the CPUs (vendor, family) on which every golden is byte-identical
EXACT_COLUMNS = {"step", "seed"}


def deviations(produced: bytes, golden: bytes) -> list[tuple[int, str, float, float]]:
    """(row index, column, relative deviation, deviation / allowance) of every cell of the golden's columns.

    A missing or extra row, or a NaN where the golden has a number (or the reverse), is an infinite deviation."""
    header, expected = columns(golden)
    produced_header, _ = columns(produced)
    if not set(header) <= set(produced_header):
        return [(0, name, float("inf"), float("inf")) for name in set(header) - set(produced_header)]
    _, rows = columns(produced, header)
    if len(rows) != len(expected):
        return [(0, "rows", float("inf"), float("inf"))]
    steps = sorted({int(row[header.index("step")]) for row in expected})
    index_of = {step: n for n, step in enumerate(steps)}
    out = []
    for row, expected_row in zip(rows, expected):
        index = index_of.get(int(expected_row[header.index("step")]), 0)
        for name, cell, golden_cell in zip(header, row, expected_row):
            if cell == golden_cell:
                out.append((index, name, 0.0, 0.0))
                continue
            try:
                x, g = float(cell), float(golden_cell)
            except ValueError:  # an empty or garbled cell
                out.append((index, name, float("inf"), float("inf")))
                continue
            if name in EXACT_COLUMNS or math.isnan(x) or math.isnan(g) or math.isinf(x) or math.isinf(g):
                out.append((index, name, float("inf"), float("inf")))
                continue
            deviation = abs(x - g)
            allowed = COLUMN_RTOL[name] * abs(g) if name in COLUMN_RTOL else \
                (RTOL * abs(g) + ATOL) * GROWTH ** min(index, GROWTH_ROWS)
            out.append((index, name, deviation / max(abs(g), 1e-3), deviation / allowed))
    return out


def run_case(name: str, run_dir: Path, extra: list[str] = ()) -> bytes:
    run_config([*CASES[name], *extra], run_dir)
    return (run_dir / "metrics.csv").read_bytes()


def llm_group_losses() -> dict[str, dict[str, list[str]]]:
    """Each LLM algorithm's group loss and its gradient on ℓ for seeded (1, groups, K) tensors, as float.hex."""
    import algorithms
    from conftest import compose_config
    from harness.llm.tpo_trl import group_policy_loss

    generator = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(1, 3, 4, generator=generator, dtype=torch.float64) * 5
    logp = (logp_old + 0.3 * torch.randn(1, 3, 4, generator=generator, dtype=torch.float64)).requires_grad_(True)
    scores = torch.tensor([[[0.0, 1.0, 0.0, 0.5], [0.0, 0.0, 0.0, 0.0], [1.0, 1.0, 0.0, 1.0]]], dtype=torch.float64)
    out = {}
    for name in ("tpo", "tpo_no_anchor", "grpo", "grpo_no_kl", "group_pg"):  # the LLM algorithms before the registry
        algorithm = algorithms.build(compose_config(["task=tabular_single", f"algorithm={name}"]).algorithm)
        loss = group_policy_loss(algorithm, logp, logp_old, scores)
        (grad,) = torch.autograd.grad(loss.sum(), logp)
        out[name] = {"loss": [v.hex() for v in loss.tolist()], "grad": [v.hex() for v in grad.flatten().tolist()]}
    return out


def cpu_family() -> str:
    """This CPU's vendor and family (e.g. ``AuthenticAMD family 26``), or the platform's processor string."""
    fields = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    if "vendor_id" in fields:
        return f"{fields['vendor_id']} family {fields.get('cpu family', '?')}"
    import platform

    return platform.processor() or platform.machine()


def exact_here() -> bool:
    """Byte for byte only on a CPU the goldens were verified on, and not under an emulated other CPU."""
    return cpu_family() in json.loads(EXACT_ON_FILE.read_text()) and emulating() is None


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.cross_cpu) if name in EMULATED_CASES else name
                                  for name in sorted(CASES)])
def test_golden_run_is_unchanged(name, tmp_path):
    """Byte for byte where the goldens were written, within the allowance everywhere, and so under an emulated other
    CPU too (make test's second pass, where the emulation must have moved some value: else it checked nothing)."""
    golden = (GOLDEN / name / "metrics.csv").read_bytes()
    expected_header, expected_rows = columns(golden)
    produced = run_case(name, tmp_path / name)
    header, _ = columns(produced)
    assert set(header) - set(expected_header) <= ADDED_COLUMNS, f"{name}: unexpected new metrics.csv columns"
    if exact_here():
        assert columns(produced, expected_header)[1] == expected_rows, f"{name}: metrics.csv differs from " \
            f"tests/golden/runs on {cpu_family()}, where the goldens are byte-identical"
    beyond = [(index, column, ratio) for index, column, _, ratio in deviations(produced, golden) if ratio > 1]
    assert not beyond, f"{name}: {len(beyond)} values beyond the cross-CPU allowance, first (row, " \
        f"column, deviation / allowance): {beyond[:3]}"
    if emulating() == "ulp_noise":
        assert columns(produced, expected_header)[1] != expected_rows, f"{name}: ulp_noise moved no value"


def test_the_emulated_cases_cover_every_task_and_column():
    def kind(case: str) -> tuple[str, ...]:
        return tuple(o for o in CASES[case] if o.startswith(("task=", "task.reward=")))

    def header(case: str) -> set[str]:
        return set((GOLDEN / case / "metrics.csv").read_text().partition("\n")[0].split(","))

    assert {kind(case) for case in CASES} == {kind(case) for case in EMULATED_CASES}
    assert set().union(*map(header, CASES)) == set().union(*map(header, EMULATED_CASES))


def test_the_allowance_catches_a_changed_number():
    """A formula change moves values by far more than another CPU's rounding: a relative 1e-3 change of the first
    update's row (a sign or a factor moves them by 1e-1 or more) fails, and so does 1e-2 in the last row; 1e-6
    passes."""
    golden = (GOLDEN / "tabular_single_tpo" / "metrics.csv").read_bytes()
    header, rows = columns(golden)
    last = rows[-1][0]

    def scaled(by: float, step: str) -> bytes:
        out = [",".join(header)]
        for row in rows:
            out.append(",".join(cell if name in EXACT_COLUMNS or row[0] != step else repr(float(cell) * by)
                                for name, cell in zip(header, row)))
        return "\n".join(out).encode()

    def worst(produced: bytes) -> float:
        return max(ratio for *_, ratio in deviations(produced, golden))

    assert worst(scaled(1 + 1e-3, "1")) > 1 and worst(scaled(1 + 1e-2, last)) > 1
    assert worst(scaled(1 + 1e-6, "1")) <= 1 and worst(scaled(1 + 1e-6, last)) <= 1
    assert worst(golden) == 0
    assert worst(golden.replace(b"0.890778184", b"", 1)) == float("inf")  # an empty cell


# The LLM losses are float64: an emulated other libm moves them by at most 9.2e-15 relative (ulp_noise); a
# changed formula by 1e-3 or more
LLM_RTOL = 1e-12


@pytest.mark.cross_cpu
def test_llm_group_losses_are_unchanged():
    """float.hex byte for byte where the goldens were written, within LLM_RTOL of each value everywhere."""
    produced, golden = llm_group_losses(), json.loads(LLM_LOSS_FILE.read_text())
    if exact_here():
        assert produced == golden
    assert produced.keys() == golden.keys()
    for name, parts in golden.items():
        for part, values in parts.items():
            got, expected = (torch.tensor([float.fromhex(v) for v in vs], dtype=torch.float64)
                             for vs in (produced[name][part], values))
            assert got.shape == expected.shape and torch.allclose(got, expected, rtol=LLM_RTOL, atol=0), \
                f"{name} {part}: largest relative deviation {((got - expected).abs() / expected.abs()).max():.2e}"


def test_every_golden_folder_has_a_case():
    assert sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()) == sorted(CASES)


if __name__ == "__main__":
    import argparse
    import shutil
    import tempfile

    parser = argparse.ArgumentParser(description="Rewrite tests/golden/runs/, or (--out) write the cases elsewhere.")
    parser.add_argument("--out", type=Path, help="write each case's metrics.csv under OUT/<case>/ (goldens untouched)")
    parser.add_argument("--cases", help="comma-separated cases to write (with --out; default: all)")
    parser.add_argument("overrides", nargs="*", help="extra overrides for every case (with --out), e.g. threads=2")
    args = parser.parse_args()
    if (args.overrides or args.cases) and not args.out:
        parser.error("overrides and --cases are for --out only: the goldens are rewritten whole, as they are")
    cases = args.cases.split(",") if args.cases else sorted(CASES)
    if unknown := sorted(set(cases) - set(CASES)):
        parser.error(f"--cases: {', '.join(unknown)} not a case; valid: {', '.join(sorted(CASES))}")
    if not args.out and emulating():
        parser.error(f"the environment emulates another CPU ({emulating()}): goldens are written with this CPU's")
    target = args.out or GOLDEN
    if target == GOLDEN and GOLDEN.exists():
        shutil.rmtree(GOLDEN)
    with tempfile.TemporaryDirectory() as work:
        for case in cases:
            (target / case).mkdir(parents=True, exist_ok=True)
            (target / case / "metrics.csv").write_bytes(run_case(case, Path(work) / case, args.overrides))
            print(case)
    if target == GOLDEN:
        LLM_LOSS_FILE.write_text(json.dumps(llm_group_losses(), indent=1) + "\n")
        EXACT_ON_FILE.write_text(json.dumps([cpu_family()]) + "\n")
