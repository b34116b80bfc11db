"""How far ours is from the paper's code on the committed reference traces, per quantity: the measurement behind the
tolerances of tests/test_reference_parity.py.

    python bench/parity_margins.py                       # this CPU
    TPO_EMULATE=ulp_noise python bench/parity_margins.py # an emulated other CPU (tests/cpu_emulation.py)

For every trace (tests/reference_traces/, ``make reference-traces``) it replays the reference's batches through our
task, exactly as the parity tests do, and prints the largest error of each quantity over all cases and steps, the
case where it occurs, and the test's tolerance: the margin is tolerance / largest error.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

import conftest  # noqa: E402,F401 - the test suite's environment, caps and emulated CPU, set before torch is used
import pytest  # noqa: E402
import test_reference_parity as parity  # noqa: E402
from cpu_emulation import emulating  # noqa: E402
from test_golden_runs import cpu_family  # noqa: E402


def main() -> None:
    worst: dict[str, tuple[float, str]] = {}
    families = {"token": parity.token_errors, "tabular_single": parity.tabular_errors,
                "tabular_multi": parity.tabular_errors, "mnist_bandit": parity.mnist_errors}
    for family, errors in families.items():
        for name in parity.cases(family):
            if name.startswith("allfail_"):
                continue
            with pytest.MonkeyPatch.context() as monkeypatch:
                report = errors(name, monkeypatch)
            for step, values in enumerate(report):
                for quantity, value in values.items():
                    key = quantity.rstrip("0123456789")
                    if value >= worst.get(key, (-1.0, ""))[0]:
                        worst[key] = (value, f"{name} step {step}")
    print(f"# {cpu_family()}, emulation: {emulating() or 'none'}, "
          f"torch threads {os.environ.get('OMP_NUM_THREADS', 'default')}")
    print(f"{'quantity':16s} {'largest error':>14s} {'tolerance':>10s} {'margin':>8s}  where")
    for quantity, (value, where) in sorted(worst.items()):
        tolerance = parity.limit(quantity)
        margin = f"{tolerance / value:8.0f}" if value else "     inf"
        print(f"{quantity:16s} {value:14.3e} {tolerance:10.0e} {margin}  {where}")


if __name__ == "__main__":
    main()
