"""Counter-based random numbers: every draw is a pure function of (seed, stream, step, index).

Why not ``torch.Generator``: a batched run trains many seeds in one tensor program, and the numbers a seed sees
must not depend on how many other seeds share the batch, on the device, or on whether the run was resumed from a
checkpoint. Hashing (seed, stream, step, index) with the SplitMix64 finaliser gives exactly that, with no state
to save, and identical bits on CPU and GPU. Streams are named ("init", "contexts", "actions", ...) so that, for a
given seed, every algorithm draws the same initial parameters and the same contexts (common random numbers).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence

import torch

_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB


def _signed(value: int) -> int:
    """Reinterpret an unsigned 64-bit constant as the int64 that torch stores."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right(x: torch.Tensor, bits: int) -> torch.Tensor:
    """Logical (unsigned) right shift of int64 values."""
    return (x >> bits) & ((1 << (64 - bits)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    """SplitMix64 finaliser on int64 tensors (multiplication wraps modulo 2^64)."""
    x = x ^ _shift_right(x, 30)
    x = x * _signed(_MIX1)
    x = x ^ _shift_right(x, 27)
    x = x * _signed(_MIX2)
    return x ^ _shift_right(x, 31)


def _mix_int(x: int) -> int:
    x &= _MASK64
    x ^= x >> 30
    x = (x * _MIX1) & _MASK64
    x ^= x >> 27
    x = (x * _MIX2) & _MASK64
    return x ^ (x >> 31)


def stream_key(stream: str | int, step: int = 0) -> int:
    """A 64-bit key for a named stream at a given step, independent of the seed."""
    name = stream if isinstance(stream, int) else zlib.crc32(stream.encode())
    return _mix_int(_mix_int(name * _GOLDEN + 1) ^ _mix_int(step + 0x632BE59BD9B4E019))


def random_bits(seeds: torch.Tensor, stream: str | int, step: int | range, shape: Sequence[int]) -> torch.Tensor:
    """int64 hash values of shape (len(seeds), *shape) for the given stream and step.

    ``step`` may be a range of steps: the result then has shape (len(seeds), len(step), *shape), with exactly the
    values of the per-step calls, so a task can draw a block of steps at once (one call instead of many)."""
    count = math.prod(shape)
    steps = step if isinstance(step, range) else [step]
    keys = torch.tensor([_signed(stream_key(stream, s)) for s in steps], dtype=torch.int64, device=seeds.device)
    base = _mix(seeds.to(torch.int64)[:, None] * _signed(_GOLDEN) ^ keys)  # (S, steps)
    index = torch.arange(count, device=seeds.device, dtype=torch.int64)
    bits = _mix(base[..., None] + (index + 1) * _signed(_GOLDEN))
    return bits.view(len(seeds), len(steps), *shape) if isinstance(step, range) else bits.view(len(seeds), *shape)


def uniform(seeds: torch.Tensor, stream: str | int, step: int | range, shape: Sequence[int]) -> torch.Tensor:
    """float32 uniforms in the open interval (0, 1), 23 random bits each (so b + 0.5 is exact in float32)."""
    bits = _shift_right(random_bits(seeds, stream, step, shape), 41)
    return (bits.to(torch.float32) + 0.5) * (1.0 / (1 << 23))


def uniform64(seeds: torch.Tensor, stream: str | int, step: int, shape: Sequence[int]) -> torch.Tensor:
    """float64 uniforms in (0, 1) with 53 random bits, for inverse-CDF transforms that need the tails."""
    bits = _shift_right(random_bits(seeds, stream, step, shape), 11)
    return (bits.to(torch.float64) + 0.5) * (1.0 / (1 << 53))


def normal(seeds: torch.Tensor, stream: str | int, step: int, shape: Sequence[int], std: float = 1.0) -> torch.Tensor:
    """float32 N(0, std^2) draws by inverse CDF."""
    u = uniform64(seeds, stream, step, shape)
    return (math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0) * std).to(torch.float32)


def truncated_normal(
    seeds: torch.Tensor, stream: str | int, step: int, shape: Sequence[int], std: float, bound: float = 2.0
) -> torch.Tensor:
    """float32 normal draws truncated to [-bound, bound] standard deviations, then scaled by ``std``."""
    lo = 0.5 * (1.0 + math.erf(-bound / math.sqrt(2.0)))
    hi = 1.0 - lo
    u = lo + (hi - lo) * uniform64(seeds, stream, step, shape)
    return (math.sqrt(2.0) * torch.erfinv(2.0 * u - 1.0) * std).to(torch.float32)


def lecun_normal(seeds: torch.Tensor, stream: str | int, shape: Sequence[int], fan_in: int) -> torch.Tensor:
    """Flax's default kernel init: truncated normal in [-2, 2] rescaled to an effective std of 1/sqrt(fan_in)."""
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978
    return truncated_normal(seeds, stream, 0, shape, std)


def randint(seeds: torch.Tensor, stream: str | int, step: int | range, shape: Sequence[int], high: int) -> torch.Tensor:
    """Integers uniform in [0, high) (bias below 2^-40 for the sizes used here)."""
    bits = _shift_right(random_bits(seeds, stream, step, shape), 1)
    return bits % high


def sample_categorical(log_probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sample from the last axis of ``log_probs`` with one uniform per distribution."""
    cdf = log_probs.exp().cumsum(-1)
    threshold = (u * cdf[..., -1]).unsqueeze(-1)
    index = (cdf < threshold).sum(-1)
    return index.clamp_max(log_probs.shape[-1] - 1)
