"""Shared helpers: compose the real Hydra config in-process and run it into a temporary directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import cpu_emulation

# TPO_EMULATE=<name>: another CPU's arithmetic (tests/cpu_emulation.py), its environment set before the caps below
cpu_emulation.set_environment()
# torch's vectorised CPU kernels (ATen) and oneDNN pick their code by the CPU's widest vector ISA, and the AVX-512
# code rounds some reductions differently from the AVX2 code (in the last digit). Capped at AVX2 in every test
# process (runs started from tests inherit it), the golden runs are byte-identical on AVX2 and AVX-512 AMD CPUs
# alike; MKL (torch's BLAS) picks its code the same way on Intel CPUs, so it gets the same cap. Intel CPUs still
# round some operations differently (MKL's Intel-only code paths): there the golden runs are compared within a
# measured tolerance (tests/test_golden_runs.py).
os.environ.setdefault("ATEN_CPU_CAPABILITY", "avx2")
os.environ.setdefault("ONEDNN_MAX_CPU_ISA", "AVX2")
os.environ.setdefault("MKL_ENABLE_INSTRUCTIONS", "AVX2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the tests' models and data are local: never wait on a network

import pytest  # noqa: E402
import torch  # noqa: E402

cpu_emulation.patch_arithmetic()
from absl import logging as absl_logging  # noqa: E402

# rliable's absl.logging holds the sys.stderr of its import (here: pytest's capture) and closes it when Hydra
# reconfigures logging: every later test of the worker would fail. As harness/report/aggregates.py does for itself.
absl_logging.get_absl_handler().python_handler.stream = sys.__stderr__
from omegaconf import open_dict

from harness.config import compose_config as harness_compose
from harness.run import train

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "conf"

torch.set_num_threads(1)
os.environ.setdefault("WANDB_MODE", "disabled")


def compose_config(overrides: list[str]):
    """The composed config exactly as ``python -m harness <overrides>`` would see it (logger=none by default)."""
    if not any(o.startswith("logger=") for o in overrides):
        overrides = [*overrides, "logger=none"]
    cfg = harness_compose(overrides)
    with open_dict(cfg):
        cfg.trainer.progress = False
    return cfg


def run_config(overrides: list[str], run_dir: Path):
    run_dir.mkdir(parents=True, exist_ok=True)
    return train(compose_config(overrides), run_dir)


def run_killed_at(overrides: list[str], run_dir: Path, task_cls: type, step: int) -> None:
    """Run ``overrides`` into ``run_dir`` and kill it (Ctrl-C) as the trainer of ``task_cls`` is about to run
    ``step``."""
    from harness.trainers import trainer_class

    trainer = trainer_class(task_cls)
    original = trainer.episode

    def step_then_die(task, at):
        if at == step:
            raise KeyboardInterrupt
        return original(task, at)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "episode", staticmethod(step_then_die))
        with pytest.raises(KeyboardInterrupt):
            run_config(overrides, run_dir)


def run_cli(args: list[str], cwd: Path, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """``python -m harness <args>`` in a subprocess, from ``cwd`` (outputs land there)."""
    environment = {**os.environ, "PYTHONPATH": str(ROOT), "WANDB_MODE": "disabled", **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=environment)


@pytest.fixture(scope="session", autouse=True)
def mnist_cache(tmp_path_factory) -> Path:
    """MNIST cached in this session's temporary folder (pytest removes old ones), not in the user's ~/.cache, whose
    copy, from any source, would be trusted; runs started from tests inherit it. ``TPO_BENCH_CACHE`` set: kept."""
    if "TPO_BENCH_CACHE" not in os.environ:
        os.environ["TPO_BENCH_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    return Path(os.environ["TPO_BENCH_CACHE"])


@pytest.fixture
def tiny_mnist() -> list[str]:
    """MNIST overrides small enough for a unit test (real data, few steps)."""
    return ["task=mnist_bandit", "task.eval_every=10", "task.steps=30", "task.checkpoint_every=10", "seeds=2"]


@pytest.fixture(scope="session")
def tiny_llm(tmp_path_factory) -> Path:
    """Folder of a tiny random Qwen3 and its tokenizer (built offline, once per test session)."""
    from llm_helpers import build_tiny_llm

    return build_tiny_llm(tmp_path_factory.mktemp("tiny_llm"))


@pytest.fixture(scope="session")
def gsm8k_dir(tmp_path_factory) -> Path:
    from llm_helpers import write_gsm8k

    return write_gsm8k(tmp_path_factory.mktemp("gsm8k"))
