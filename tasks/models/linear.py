"""Dense layers x @ Wᵀ + b with the CPU's matrix products through oneDNN instead of the BLAS (MKL).

torch computes fp32 CPU matmuls with MKL, which takes slow code paths on non-Intel CPUs: on this project's AMD EPYC
host (1 thread) MKL's 1024² sgemm reaches 107–110 GFLOP/s where oneDNN, which torch also bundles, reaches 231–243
(XLA, under the JAX reference, 246), and the products of this project's layers (100–8,000 rows × 50–784) run
1.6–2.4× faster. Both are fp32 throughout; only the summation order differs, so results agree to float rounding.

oneDNN costs ~12 µs per call where MKL's small products cost ~4, and between many small ops its calls ran slower
than alone (the 1-seed MNIST step, 3.9M multiply-adds per product, was 5% slower with it; 20 seeds were faster), so
it takes calls of at least ``ONEDNN_MIN_MACS`` multiply-adds (all seeds together) computed without an autograd graph
(or inside ``seed_dense``'s own backward) on CPU float32 tensors; everything else (small products, GPU, other dtypes,
a graph to record) goes through torch as before. ``set_backend("blas")`` (config key ``cpu_matmul``) restores
torch's default everywhere. ``torch.ops.mkldnn._linear_pointwise`` is a private op of the pinned torch 2.13.
"""

from __future__ import annotations

import functools
import platform

import torch

BACKENDS = ("onednn", "blas")
_backend = "onednn"
ONEDNN_MIN_MACS = 1 << 23


def set_backend(name: str) -> None:
    """Choose the CPU matmul library for this process: "onednn" (default) or "blas" (torch's own)."""
    global _backend
    if name not in BACKENDS:
        raise ValueError(f"cpu_matmul={name!r}; valid choices: {', '.join(BACKENDS)}")
    _backend = name


@functools.cache
def onednn_available() -> bool:
    """oneDNN's fp32 linear is in this torch build, on an x86-64 CPU (where torch's BLAS is MKL)."""
    return (platform.machine().lower() in ("x86_64", "amd64") and torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_linear_pointwise"))


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
