"""Dense layers x @ Wᵀ + b with the CPU's matrix products through oneDNN instead of the BLAS (MKL), where that pays.

torch computes fp32 CPU matmuls with MKL, which runs AVX2 code on non-Intel CPUs even where they have AVX-512: on an AMD
EPYC with AVX-512 (1 thread) MKL's 1024² sgemm reached 107–110 GFLOP/s where oneDNN, which torch also bundles, reached
231–243 (XLA, under the JAX reference, 246), and the products of this project's layers (100–8,000 rows × 50–784) ran
1.6–2.4× faster. On an AVX2-only AMD EPYC (no AVX-512) both reach ~57 GFLOP/s and oneDNN is the slower one: per-seed
calls of the 20-seed MNIST layers 1.4× slower than one MKL batched matmul, the token tasks' products 0.3–1.2× MKL's
speed, a token run 5–25% slower. ``cpu_matmul=auto`` (the default) therefore picks oneDNN on non-Intel CPUs with AVX-512
and torch's BLAS elsewhere. Both are fp32 throughout; only the summation order differs, so results agree to float
rounding, and the choice is not part of a run's identity (like ``threads``): it is recorded in summary.json.

oneDNN costs ~12 µs per call where MKL's small products cost ~4, and between many small ops its calls ran slower
than alone (the 1-seed MNIST step, 3.9M multiply-adds per product, was 5% slower with it; 20 seeds were faster), so
it takes calls of at least ``ONEDNN_MIN_MACS`` multiply-adds (all seeds together) computed without an autograd graph
(or inside ``seed_dense``'s own backward) on CPU float32 tensors; everything else (small products, GPU, other dtypes,
a graph to record) goes through torch as before. ``torch.ops.mkldnn._linear_pointwise`` is a private op of the
pinned torch 2.13.
"""

from __future__ import annotations

import functools
import platform

import torch

BACKENDS = ("auto", "onednn", "blas")
ONEDNN_MIN_MACS = 1 << 23


def set_backend(name: str) -> None:
    """Choose the CPU matmul library for this process: "auto" (``auto_backend()``), "onednn" or "blas" (torch's)."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"cpu_matmul={name!r}; valid choices: {', '.join(BACKENDS)}")
    _backend = auto_backend() if name == "auto" else name


def backend() -> str:
    """The CPU matmul library in use: "onednn" or "blas" (also where oneDNN was chosen but this build lacks it)."""
    return _backend if _backend == "blas" or onednn_available() else "blas"


@functools.cache
def auto_backend(cpuinfo: str = "/proc/cpuinfo") -> str:
    """oneDNN where torch's MKL leaves the CPU's widest vectors unused (a non-Intel CPU with AVX-512), else "blas"
    (also wherever ``cpuinfo`` cannot tell)."""
    vendor, flags = cpu_features(cpuinfo)
    return "onednn" if vendor and vendor != "GenuineIntel" and "avx512f" in flags else "blas"


def cpu_model(path: str = "/proc/cpuinfo") -> str:
    """The first CPU's model name, family and vector width, e.g. "AMD EPYC (family 25, AVX2)" (what a timing or a
    float-rounding difference between two runs may come from); "" where ``path`` cannot tell."""
    fields = _first_cpu(path)
    if not fields:
        return ""
    flags = fields.get("flags", "").split()
    width = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{fields.get('model name', '?')} (family {fields.get('cpu family', '?')}, {width})"


def cpu_features(path: str = "/proc/cpuinfo") -> tuple[str, frozenset[str]]:
    """The first CPU's vendor id and feature flags ("", {} where the file is missing)."""
    fields = _first_cpu(path)
    return fields.get("vendor_id", ""), frozenset(fields.get("flags", "").split())


def _first_cpu(path: str) -> dict[str, str]:
    """The first processor's ``key: value`` fields of a /proc/cpuinfo file ({} where it is missing)."""
    fields = {}
    try:
        with open(path) as info:
            for line in info:
                if not line.strip():
                    break
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


@functools.cache
def onednn_available() -> bool:
    """oneDNN's fp32 linear is in this torch build, on an x86-64 CPU (where torch's BLAS is MKL)."""
    return (platform.machine().lower() in ("x86_64", "amd64") and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


_backend = auto_backend()  # what cpu_matmul=auto picks; runs set it from their configuration (harness.config)


def _use_onednn(x: torch.Tensor, out_features: int) -> bool:
    """Whether x (…, in) times a weight with ``out_features`` outputs is worth oneDNN."""
    return (_backend == "onednn" and x.device.type == "cpu" and x.dtype == torch.float32
            and x.numel() * out_features >= ONEDNN_MIN_MACS and onednn_available())


def _recorded(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "relu" if relu else "none", [], "")


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, relu: bool = False
           ) -> torch.Tensor:
    """x (N, in) @ weight (out, in)ᵀ + bias (out), then ReLU if ``relu`` (fused into the oneDNN call)."""
    if _use_onednn(x, weight.shape[0]) and not _recorded(x, weight, bias):
        return _onednn_linear(x, weight, bias, relu)
    out = x @ weight.T if bias is None else torch.addmm(bias, x, weight.T)
    return out.relu() if relu else out


def seed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, relu: bool = False
                ) -> torch.Tensor:
    """S independent layers: x (S, N, in) @ weight (S, out, in)ᵀ + bias (S, out) → (S, N, out).

    Through oneDNN seed by seed (20 seeds of the MNIST MLP: 1.6× faster than one MKL batched matmul), else one
    batched matmul."""
    if _use_onednn(x, weight.shape[1]) and not _recorded(x, weight, bias):
        outs = [_onednn_linear(x[s], weight[s], None if bias is None else bias[s], relu) for s in range(len(x))]
        return outs[0].unsqueeze(0) if len(outs) == 1 else torch.stack(outs)
    out = torch.bmm(x, weight.mT) if bias is None else torch.baddbmm(bias.unsqueeze(1), x, weight.mT)
    return out.relu() if relu else out


class _SeedDense(torch.autograd.Function):
    """x (S, N, in) @ kernel (S, in, out) + bias (S, out), forward and backward products through ``seed_linear``:
    ∂x = g kernelᵀ, ∂kernel = xᵀ g, ∂bias = Σ_N g."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, kernel: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, kernel)
        return seed_linear(x, kernel.mT, bias)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, kernel = ctx.saved_tensors
        need_x, need_kernel, need_bias = ctx.needs_input_grad
        grad_kernel = None
        if need_kernel:  # xᵀg; oneDNN copies its first operand's transpose, so the narrower one goes first
            # (the down projection's 8,000 × 256 x: 2.1 → 1.3 ms)
            narrow_x = x.shape[-1] <= grad.shape[-1]
            grad_kernel = seed_linear(x.mT, grad.mT) if narrow_x else seed_linear(grad.mT, x.mT).mT
        return seed_linear(grad, kernel) if need_x else None, grad_kernel, grad.sum(1) if need_bias else None


def seed_dense(x: torch.Tensor, kernel: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Differentiable x (S, N, in) @ kernel (S, in, out) + bias (S, out), kernels in the JAX layout (in, out)."""
    if _use_onednn(x, kernel.shape[-1]):
        return _SeedDense.apply(x, kernel, bias)
    return torch.baddbmm(bias.unsqueeze(1), x, kernel)
