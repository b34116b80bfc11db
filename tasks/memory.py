"""A coarse upper bound of a run's memory, checked before anything is allocated.

A size that would need more memory than the cap (``memory_cap_gb``: auto = the machine's memory, the GPU's for
device=cuda; a number of GB; null = no check) is refused in one line before any work, instead of failing at
allocation or being killed by the kernel's OOM killer. The bounds are coarse (every large tensor of a step counted
at once, with a factor for temporaries): they only need to stay above what a run uses and below what it cannot."""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from omegaconf import DictConfig

from common.checks import ConfigError
from tasks import get_task

FLOAT, INDEX = 4, 8  # bytes of a float32, an int64
GB = 1e9
MNIST_TRAIN, MNIST_TEST, MNIST_PIXELS, MNIST_WIDTHS = 60_000, 10_000, 784, (50, 50, 10)


def _size(value: Any) -> int:
    """A size as the task's own checks accept it, else 0 (they refuse it, with their own message, after this)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _tabular_single(cfg: DictConfig, seeds: int) -> tuple[float, str]:
    arms, batch = _size(cfg.task.get("arms")), _size(cfg.task.get("batch_size"))
    # the logit table and ~16 temporaries of its size (probabilities, gradients, the full action set's group); the
    # inverse-CDF sampling compares a (seeds, batch, arms) bool table; the batch's draws and actions
    per_seed = 16 * FLOAT * arms + batch * arms + 8 * INDEX * batch
    return seeds * per_seed, f"seeds={seeds} × task.arms={arms} × task.batch_size={batch}"


def _tabular_multi(cfg: DictConfig, seeds: int) -> tuple[float, str]:
    contexts, arms = _size(cfg.task.get("contexts")), _size(cfg.task.get("arms"))
    return seeds * 16 * FLOAT * contexts * arms, f"seeds={seeds} × task.contexts={contexts} × task.arms={arms}"


def _mnist_bandit(cfg: DictConfig, seeds: int) -> tuple[float, str]:
    batch = _size(cfg.task.get("batch_size"))
    widths = sum(MNIST_WIDTHS)
    params = sum(a * b + b for a, b in zip((MNIST_PIXELS, *MNIST_WIDTHS[:-1]), MNIST_WIDTHS))
    data = (MNIST_TRAIN * MNIST_PIXELS + MNIST_TEST * MNIST_PIXELS * FLOAT  # uint8 train images, float test images
            + (MNIST_TRAIN + MNIST_TEST) * INDEX)
    per_seed = (6 * FLOAT * params  # parameters, gradients, Adam's moments and a copy
                + 4 * FLOAT * batch * (MNIST_PIXELS + widths)  # a batch's images and activations, forward and back
                + 3 * FLOAT * MNIST_TEST * widths  # the test set's activations and probabilities
                + 6 * INDEX * 200 * batch)  # a block of 200 steps of draws (indices, uniforms, the hash's temporaries)
    return data + seeds * per_seed, f"seeds={seeds} × task.batch_size={batch}"


def _token_reversal(cfg: DictConfig, seeds: int) -> tuple[float, str]:
    from algorithms import ALGORITHMS, Rollout

    task, model = cfg.task, cfg.get("model") or {}
    H, V, K, B = (_size(task.get(key)) for key in ("H", "V", "K", "batch_size"))
    d, heads, layers, ffn = (_size(model.get(key)) for key in ("d_model", "heads", "layers", "ffn"))
    algorithm = ALGORITHMS.get(cfg.algorithm.get("name"))
    grouped = algorithm is None or algorithm.rollout_for(get_task("token_reversal").rollouts) is not Rollout.SINGLE
    chunk = task.get("seed_chunk")
    if chunk == "auto":  # as tasks/token_reversal.py picks it: CPU runs grouped rollouts one seed at a time
        chunk = 1 if str(cfg.get("device", "cpu")).startswith("cpu") and grouped else seeds
    together = min(_size(chunk) or seeds, seeds)  # seeds computed together
    sequences, length = B * K, 2 * H  # an upper bound for every rollout shape (interactions: B·K prompts of one)
    per_token = layers * (12 * d + 3 * ffn + 2 * heads * length) + 4 * V  # activations (attention: heads × T)
    forward = FLOAT * together * sequences * length * per_token  # kept for the backward (measured: ~0.6 of this)
    params = 2 * V * d + length * d + layers * (4 * d * d + 2 * d * ffn + 10 * d)
    state = 6 * FLOAT * seeds * params  # parameters, gradients, the optimiser's moments
    rollouts = seeds * sequences * H * (2 * INDEX + 6 * FLOAT)  # every chunk's batch: tokens, log-probs, scores
    return (forward + state + rollouts,
            f"seeds computed together={together} × task.batch_size={B} × task.K={K} × task.H={H} × task.V={V} × "
            f"model.d_model={d}")


MEMORY_ESTIMATES: dict[str, Any] = {  # task name → (cfg, seeds) → (bytes, the sizes it grows with)
    "tabular_single": _tabular_single,
    "tabular_multi": _tabular_multi,
    "mnist_bandit": _mnist_bandit,
    "token_reversal": _token_reversal,
}  # the LLM tasks: the model's own size decides (harness/llm); not estimated here


def estimate_memory(cfg: DictConfig) -> tuple[float, str] | None:
    """(bytes, the sizes named) of a composed config's run: a coarse upper bound; None for a task not estimated."""
    estimate = MEMORY_ESTIMATES.get(cfg.task.get("name"))
    seeds = _size(cfg.get("seeds"))
    if estimate is None or not seeds:
        return None
    return estimate(cfg, seeds)


def machine_memory(device: str = "cpu") -> tuple[float, str]:
    """(bytes, what they are): the machine's memory (/proc/meminfo's MemTotal, else os.sysconf), or the GPU's for
    device=cuda."""
    if str(device).startswith("cuda") and torch.cuda.is_available():
        index = torch.device(str(device)).index or 0
        return float(torch.cuda.get_device_properties(index).total_memory), "this machine's GPU memory"
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemTotal:"):
                    return float(line.split()[1]) * 1024, "this machine's memory"
    except OSError:
        pass
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "this machine's memory"


def fitting_chunk(cfg: DictConfig, cap_bytes: float) -> int:
    """The most of a token-reversal run's seeds computed together (``task.seed_chunk``) whose estimate fits in
    ``cap_bytes`` (1 when none does, which ``check_memory`` then refuses): one batched program is a GPU's fastest, as
    long as it fits; several runs sharing one GPU each get a share of it (the campaign's GPU jobs)."""
    seeds = _size(cfg.get("seeds"))
    for chunk in range(seeds, 1, -1):
        sized = cfg.copy()
        sized.task.seed_chunk = chunk
        if _token_reversal(sized, seeds)[0] <= cap_bytes:
            return chunk
    return 1


def check_memory(cfg: DictConfig) -> None:
    """Raise a one-line ConfigError when ``estimate_memory`` exceeds ``memory_cap_gb`` (see above)."""
    cap = cfg.get("memory_cap_gb", "auto")
    if cap is None:
        return
    if cap == "auto":
        cap_bytes, what = machine_memory(cfg.get("device", "cpu"))
        shown = f"auto: {cap_bytes / GB:.3g} GB, {what}"
    elif isinstance(cap, (int, float)) and not isinstance(cap, bool) and cap > 0 and math.isfinite(cap):
        cap_bytes, shown = float(cap) * GB, f"{cap} GB"
    else:
        raise ConfigError(f"memory_cap_gb={cap!r} is not valid; expected auto, null (no check) or a number of GB > 0")
    estimate = estimate_memory(cfg)
    if estimate is None or estimate[0] <= cap_bytes:
        return
    need, sizes = estimate
    raise ConfigError(f"task={cfg.task.name} needs about {need / GB:.3g} GB ({sizes}), over memory_cap_gb={shown}; "
                      f"lower these sizes, or raise the cap with {'' if 'memory_cap_gb' in cfg else '+'}"
                      "memory_cap_gb=<GB> (null: no check)")
