"""How far the golden runs move when the CPU's arithmetic changes: the measurement behind their tolerance.

The goldens (tests/golden/runs/) were written on one machine; another CPU rounds some float32 reductions and
transcendental functions differently in the last bit, and those differences grow over a run's updates. This script
rewrites every golden case under settings that change the arithmetic the way another CPU would (vector ISA of torch's
kernels, oneDNN's and MKL's code paths, thread count, matmul library), then prints, per setting and per logged row,
the largest deviation from the committed goldens, as a relative error |x - g| / max(|g|, 1e-3) and as the tolerance
test's own ratio deviation / allowed (above 1 = the test would fail), then each column's worst cell.

    python bench/golden_spread.py                      # all settings (about 1 CPU-minute each)
    python bench/golden_spread.py --settings aten_default,threads2 --keep /tmp/spread   # keep (and reuse) outputs
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from cpu_emulation import VARIABLE  # noqa: E402
from test_golden_runs import GOLDEN, deviations  # noqa: E402

# name: (environment, extra overrides). The test processes cap ATen, oneDNN and MKL at AVX2 by default (conftest);
# each setting replaces those caps or adds an override, as a CPU with other kernels would.
SETTINGS: dict[str, tuple[dict[str, str], list[str]]] = {
    "capped_avx2": ({}, []),
    "aten_default": ({VARIABLE: "aten_default"}, []),  # the suite's own emulations (tests/cpu_emulation.py)
    "aten_avx512": ({"ATEN_CPU_CAPABILITY": "avx512"}, []),
    "uncapped": ({"ATEN_CPU_CAPABILITY": "avx512", "ONEDNN_MAX_CPU_ISA": "ALL", "MKL_ENABLE_INSTRUCTIONS": "AVX512"},
                 []),
    "sse": ({"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"},
            []),
    "mkl_compatible": ({"MKL_CBWR": "COMPATIBLE"}, []),
    "threads2": ({}, ["threads=2"]),
    "blas": ({}, ["cpu_matmul=blas"]),
    "ulp_noise": ({VARIABLE: "ulp_noise"}, []),  # another libm / BLAS
}


NEEDS_AVX512 = {"aten_avx512", "uncapped"}  # kernels this CPU must have (else the process dies of SIGILL)


def has_avx512() -> bool:
    try:
        return " avx512f " in Path("/proc/cpuinfo").read_text().replace("\n", " ")
    except OSError:
        return False


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure(name: str, work: Path) -> list[tuple[str, int, str, float, float]]:
    """Rewrite every case under setting ``name``; one (case, row, column, rel. dev., ratio) per cell."""
    out = work / name
    if not out.exists():
        _write(name, out)
    cells = []
    for case in sorted(p.name for p in GOLDEN.iterdir() if p.is_dir()):
        golden = (GOLDEN / case / "metrics.csv").read_bytes()
        produced = (out / case / "metrics.csv").read_bytes()
        cells += [(case, *cell) for cell in deviations(produced, golden)]
    return cells


def _write(name: str, out: Path) -> None:
    environment, overrides = SETTINGS[name]
    partial = out.with_name(out.name + ".tmp")  # renamed when complete: a killed run is never reused
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run([sys.executable, str(ROOT / "tests" / "test_golden_runs.py"), "--out", str(partial), *overrides],
                   check=True, cwd=ROOT, env={**os.environ, **environment, "PYTHONPATH": str(ROOT)},
                   stdout=subprocess.DEVNULL)
    partial.rename(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--settings", default=",".join(SETTINGS), help=f"comma-separated, of {', '.join(SETTINGS)}")
    parser.add_argument("--keep", type=Path, help="write the settings' runs under KEEP/<setting>/ (reused if there)")
    args = parser.parse_args()
    names = args.settings.split(",")
    for name in names:
        if name not in SETTINGS:
            sys.exit(f"--settings: {name!r} is not a setting; valid: {', '.join(SETTINGS)}")
    import torch

    cases = sum(path.is_dir() for path in GOLDEN.iterdir())
    print(f"# golden spread: {cpu_name()}, torch {torch.__version__}, {cases} cases")
    print("# rel = |x - g| / max(|g|, 1e-3); ratio = deviation / the golden test's allowance (fails above 1)")
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or Path(scratch)
        for name in names:
            if name in NEEDS_AVX512 and not has_avx512():
                print(f"\n## {name}: skipped, this CPU has no AVX-512")
                continue
            cells = measure(name, work)
            moved = [c for c in cells if c[3] > 0]
            cases_moved = sorted({c[0] for c in moved})
            print(f"\n## {name}: {len(cases_moved)} cases moved, {len(moved)} of {len(cells)} cells")
            by_index: dict[int, tuple[float, float]] = {}
            for _, index, _, rel, ratio in cells:
                worst = by_index.get(index, (0.0, 0.0))
                by_index[index] = (max(worst[0], rel), max(worst[1], ratio))
            print("row | max rel | max ratio")
            for index in sorted(by_index):
                print(f"{index:3d} | {by_index[index][0]:.2e} | {by_index[index][1]:.3f}")
            worst_of_column: dict[str, tuple] = {}
            for cell in cells:
                if cell[4] > worst_of_column.get(cell[2], (0,) * 5)[4]:
                    worst_of_column[cell[2]] = cell
            for case, index, column, rel, ratio in sorted(worst_of_column.values(), key=lambda c: -c[4]):
                print(f"worst {column}: {case} row {index}: rel {rel:.2e}, ratio {ratio:.3f}")


if __name__ == "__main__":
    main()
