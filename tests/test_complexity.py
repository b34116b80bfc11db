"""The harness stays readable: no function or method of ``harness/`` above cyclomatic complexity ``LIMIT`` (radon's
measure, as ``radon cc harness`` prints it), save those listed in ``LEFT``, each at most at its listed complexity.
The list only shrinks: an entry that no longer exceeds the limit must go, so a refactor is recorded here."""

from __future__ import annotations

from radon.complexity import cc_visit
from radon.visitors import Function

from conftest import ROOT

LIMIT = 20
LEFT: dict[tuple[str, str], int] = {  # (file, function): its complexity when listed; refactor it, then remove it
}


def complexities(folder=ROOT / "harness") -> dict[tuple[str, str], int]:
    """(file relative to the repository, qualified function name) → cyclomatic complexity, for every function and
    method under ``folder``."""
    return {(str(path.relative_to(ROOT)), block.fullname): block.complexity
            for path in sorted(folder.rglob("*.py")) for block in cc_visit(path.read_text())
            if isinstance(block, Function)}


def over_the_limit(measured: dict[tuple[str, str], int], left: dict[tuple[str, str], int]) -> list[str]:
    """What breaks the rule: a function above ``LIMIT`` not listed, or above its listed complexity; a listed one
    that is back under the limit (or gone)."""
    grown = [f"{file}:{name} has complexity {value} (limit {left.get((file, name), LIMIT)})"
             for (file, name), value in measured.items() if value > left.get((file, name), LIMIT)]
    done = [f"{file}:{name} is no longer above {LIMIT}: remove it from LEFT"
            for (file, name) in left if measured.get((file, name), 0) <= LIMIT]
    return grown + done


def test_no_harness_function_is_above_the_complexity_limit_but_those_listed():
    assert over_the_limit(complexities(), LEFT) == []


def test_the_rule_catches_a_new_tangled_function_and_a_stale_entry(tmp_path):
    """Bug caught: ``over_the_limit`` comparing with ``>=`` the other way round, or never reporting a stale entry."""
    folder = ROOT / "harness"
    (tmp_path / "tangled.py").write_text("def f(x):\n" + "".join(f"    if x == {i}:\n        return {i}\n"
                                                                for i in range(LIMIT)))
    measured = {("harness/tangled.py", "f"): cc_visit((tmp_path / "tangled.py").read_text())[0].complexity}
    assert measured == {("harness/tangled.py", "f"): LIMIT + 1}
    assert over_the_limit(measured, {}) == [f"harness/tangled.py:f has complexity {LIMIT + 1} (limit {LIMIT})"]
    assert over_the_limit(measured, {("harness/tangled.py", "f"): LIMIT + 1}) == []
    assert over_the_limit({}, {("harness/tangled.py", "f"): LIMIT + 1}) == [
        f"harness/tangled.py:f is no longer above {LIMIT}: remove it from LEFT"]
    assert complexities(folder)  # the real tree is measured at all
