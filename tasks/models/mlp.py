"""Seed-batched policy MLP for the MNIST bandit (spec §3.2): 784 → 50 → ReLU → 50 → ReLU → 10 logits.

Every parameter has a leading seed axis, so S seeds train as one batched computation; kernels are Flax's
truncated LeCun-normal, biases zero. 42,310 parameters per seed.
"""

from __future__ import annotations

import torch

from harness import rng


def init_mlp(seeds: torch.Tensor, sizes: tuple[int, ...] = (784, 50, 50, 10)) -> dict[str, torch.Tensor]:
    params = {}
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        params[f"w{layer}"] = rng.lecun_normal(seeds, f"init/mlp/w{layer}", (fan_in, fan_out), fan_in)
        params[f"b{layer}"] = torch.zeros(len(seeds), fan_out, dtype=torch.float32)
    return params


def mlp_logits(params: dict[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """x: (S, B, fan_in) or (B, fan_in) shared by every seed → logits (S, B, classes)."""
    layers = len(params) // 2
    h = x
    for layer in range(layers):
        weight, bias = params[f"w{layer}"], params[f"b{layer}"]
        h = torch.baddbmm(bias.unsqueeze(1), h, weight) if h.dim() == 3 else torch.matmul(h, weight) + bias[:, None]
        if layer < layers - 1:
            h = torch.relu(h)
    return h
