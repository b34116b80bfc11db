"""A coarse upper bound of a run's memory, checked before anything is allocated.

A size that would need more memory than the cap (``memory_cap_gb``: auto = the machine's memory, the GPU's for
device=cuda; a number of GB; null = no check) is refused in one line before any work, instead of failing at
allocation or being killed by the kernel's OOM killer. The bounds are coarse (every large tensor of a step counted
at once, with a factor for temporaries): they only need to stay above what a run uses and below what it cannot.
Each task gives its own (``Task.memory_estimate``, beside the sizes it allocates); this module checks them."""

from __future__ import annotations

import math
import os
from typing import Any

import torch
from omegaconf import DictConfig

from common.checks import ConfigError
from tasks import TASKS, get_task

FLOAT, INDEX = 4, 8  # bytes of a float32, an int64
GB = 1e9


def size(value: Any) -> int:
    """A size as the task's own checks accept it, else 0 (they refuse it, with their own message, after this)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def estimate_memory(cfg: DictConfig) -> tuple[float, str] | None:
    """(bytes, the sizes named) of a composed config's run: its task's coarse upper bound (``Task.memory_estimate``);
    None for a task that gives none (the LLM tasks: the model's own size decides) or an unknown one."""
    seeds, name = size(cfg.get("seeds")), cfg.task.get("name")
    if name not in TASKS or not seeds:
        return None
    return get_task(name).memory_estimate(cfg, seeds)


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
    seeds = size(cfg.get("seeds"))
    for chunk in range(seeds, 1, -1):
        sized = cfg.copy()
        sized.task.seed_chunk = chunk
        if get_task("token_reversal").memory_estimate(sized, seeds)[0] <= cap_bytes:
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
