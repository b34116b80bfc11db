"""Which CPU matmul library ``cpu_matmul=auto`` takes, from the CPU's vendor and flags, and what a run records."""

from __future__ import annotations

import pytest

from conftest import run_config
from tasks.models import linear


@pytest.fixture(autouse=True)
def default_backend():
    yield
    linear.set_backend("auto")


@pytest.mark.parametrize("vendor, flags, expected", [
    ("AuthenticAMD", "fpu sse2 avx2 fma avx512f avx512bw", "onednn"),  # MKL runs its AVX2 code here
    ("AuthenticAMD", "fpu sse2 avx2 fma", "blas"),
    ("GenuineIntel", "fpu sse2 avx2 fma avx512f avx512bw", "blas"),  # MKL's own vendor
    ("", "", "blas"),  # nothing known
])
def test_auto_takes_onednn_only_on_a_non_intel_cpu_with_avx512(tmp_path, vendor, flags, expected):
    cpuinfo = tmp_path / "cpuinfo"
    cpu = f"processor\t: {{}}\nvendor_id\t: {vendor}\ncpu family\t: 25\nmodel name\t: X\nflags\t\t: {flags}\n\n"
    cpuinfo.write_text(cpu.format(0) + cpu.format(1) if vendor else "")
    assert linear.auto_backend(str(cpuinfo)) == expected
    assert linear.auto_backend(str(tmp_path / "missing")) == "blas"
    width = "AVX-512" if "avx512f" in flags else "AVX2"
    assert linear.cpu_model(str(cpuinfo)) == (f"X (family 25, {width})" if vendor else "")


def test_auto_resolves_for_the_run_and_the_choice_is_recorded(tmp_path):
    summary = run_config(["task=tabular_single", "task.steps=3", "seeds=1", "cpu_matmul=auto"], tmp_path / "a")
    assert linear.backend() == linear.auto_backend() and summary["hardware"]["cpu_matmul"] == linear.auto_backend()
    assert summary["hardware"]["cpu"] == linear.cpu_model()
    summary = run_config(["task=tabular_single", "task.steps=3", "seeds=1", "cpu_matmul=blas"], tmp_path / "b")
    assert linear.backend() == "blas" and summary["hardware"]["cpu_matmul"] == "blas"
