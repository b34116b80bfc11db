"""Another CPU's arithmetic, emulated on this one: how the suite checks its cross-CPU comparisons on the CPU it has.

A golden written on one CPU may pin a value that another CPU rounds differently. ``make test`` runs the tests marked
``cross_cpu`` (every comparison against numbers written on one machine) a second time under each emulation, with
``TPO_EMULATE=<name>``, so that such a value fails on the machine that wrote it instead of on the first user's
machine with another processor. The emulations:

- ``aten_default``: torch's kernels without vector code (``ATEN_CPU_CAPABILITY=default``), which rounds float32
  reductions and transcendental functions otherwise than the AVX2/AVX-512 code; numpy likewise without its AVX2 and
  AVX-512 loops (``NPY_DISABLE_CPU_FEATURES``).
- ``ulp_noise``: another libm and BLAS: about half the float results of torch's exp, log, sqrt and matrix products
  move by one unit in the last place, up or down, as a fixed function of the value (the same input gives the same
  output, as on any CPU). It moves every task, the tabular ones included, whose kernels the vector-ISA settings do
  not change.

``bench/golden_spread.py`` measures the spread under these and more settings (thread counts, MKL and oneDNN code
paths); these two are the cheapest that move every golden case.
"""

from __future__ import annotations

import importlib
import os

VARIABLE = "TPO_EMULATE"
# emulation → the environment it sets before torch and numpy load (numpy ignores dispatch targets it does not know)
EMULATIONS: dict[str, dict[str, str]] = {
    "aten_default": {"ATEN_CPU_CAPABILITY": "default",
                     "NPY_DISABLE_CPU_FEATURES": "X86_V3 X86_V4 AVX512_ICL AVX512_SPR"},
    "ulp_noise": {},
}
PERTURBED = [(torch_module, name) for torch_module in ("torch", "torch.Tensor")
             for name in ("exp", "log", "sqrt", "matmul", "bmm", "baddbmm")] + [("torch.nn.functional", "linear")]


def emulating() -> str | None:
    """The emulation this process runs under (``TPO_EMULATE``), or None."""
    name = os.environ.get(VARIABLE) or None
    if name is not None and name not in EMULATIONS:
        raise SystemExit(f"{VARIABLE}={name!r} is not an emulation; valid: {', '.join(EMULATIONS)}")
    return name


def set_environment() -> None:
    """The emulation's environment; call before torch or numpy is imported (they read it when they load)."""
    if name := emulating():
        os.environ.update(EMULATIONS[name])


def perturb_last_bits() -> None:
    """Patch the PERTURBED functions: a result moves one ulp up, one down, or stays, by a hash of its own bits."""
    import torch

    def patched(original):
        def call(*args, **kwargs):
            out = original(*args, **kwargs)
            if not (isinstance(out, torch.Tensor) and out.dtype in (torch.float32, torch.float64)):
                return out
            value = out.detach()
            bits = value.view(torch.int32 if value.dtype == torch.float32 else torch.int64)
            draw = ((bits * 2654435761) >> 11) % 4  # 0, 1: stay; 2: up; 3: down
            target = torch.where(draw == 2, torch.inf, -torch.inf).to(value.dtype)
            moved = torch.where(draw >= 2, torch.nextafter(value, target), value)
            return out + (moved - value)  # the same gradient, the value moved

        return call

    for module_name, name in PERTURBED:
        owner = torch.Tensor if module_name == "torch.Tensor" else importlib.import_module(module_name)
        setattr(owner, name, patched(getattr(owner, name)))


def patch_arithmetic() -> None:
    """The in-process part of the emulation (``ulp_noise``'s patched functions); after ``set_environment``."""
    if emulating() == "ulp_noise":
        perturb_last_bits()
