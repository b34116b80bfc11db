"""The fixed point of a score-only target (harness/report/fixed_point.py) against closed forms derived here."""

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.stats import binom

from harness.report import fixed_point
from harness.report.group_pull import method


@pytest.mark.parametrize("eta", [1.0, 2.0])
@pytest.mark.parametrize("wrong", [1, 1023])
def test_with_two_samples_the_no_anchor_fixed_point_is_exp_2_over_eta_whatever_the_wrong_answers(eta, wrong):
    # K = 2: only the group with one winner pulls; its standardised scores are ±1, so q(winner) = σ(2/η), and the
    # policy's share of the group r/(r + 1) meets it at r = e^(2/η), independently of p.
    odds = fixed_point.fixed_point(method("tpo_no_anchor", {"eta": eta}), wrong, 2)
    assert odds == pytest.approx(math.exp(2 / eta), rel=1e-6)


def _no_anchor_odds(k: int, wrong: int) -> float:
    """The same fixed point by hand: E_m[Q(m) − m·r/(m·r + K − m)] = 0, m ~ Binomial(K, p), Q(m) the mass of
    softmax(standardised scores) on the m winners."""
    def q_winners(m: int) -> float:
        scores = np.array([1.0] * m + [0.0] * (k - m))
        u = (scores - scores.mean()) / scores.std()
        return np.exp(u)[:m].sum() / np.exp(u).sum()

    def pull(log_odds: float) -> float:
        r = math.exp(log_odds)
        p = r / (r + wrong)
        return sum(binom.pmf(m, k, p) * (q_winners(m) - m * r / (m * r + k - m)) for m in range(1, k))

    return math.exp(brentq(pull, 0.0, 20.0, xtol=1e-12))


@pytest.mark.parametrize("k, wrong", [(8, 127), (8, 1023), (4, 255)])
def test_the_no_anchor_fixed_point_matches_the_hand_derived_equation(k, wrong):
    odds = fixed_point.fixed_point(method("tpo_no_anchor", {}), wrong, k)
    assert odds == pytest.approx(_no_anchor_odds(k, wrong), rel=1e-6)


def test_anchored_and_policy_gradient_losses_pull_the_right_answer_up_at_every_odds_on_the_grid():
    for name in ("tpo", "group_pg", "grpo"):
        built = method(name, {})
        assert fixed_point.fixed_point(built, 127, 8) is None
        assert all(fixed_point.expected_pull(built, odds, 127, 8) > 0 for odds in (1e-3, 1.0, 16.4, 1e3))
    # the no-anchor pull changes sign at its fixed point: up below it, down above it
    no_anchor = method("tpo_no_anchor", {})
    odds = fixed_point.fixed_point(no_anchor, 127, 8)
    assert fixed_point.expected_pull(no_anchor, odds / 2, 127, 8) > 0 > fixed_point.expected_pull(no_anchor, odds * 2,
                                                                                                    127, 8)


def test_the_table_reports_error_and_all_fail_at_the_fixed_point(capsys):
    fixed_point.main(["--algorithms", "tpo_no_anchor", "tpo", "--H", "7", "--K", "8"])
    lines = capsys.readouterr().out.splitlines()
    no_anchor = [cell.strip() for cell in lines[2].strip("|").split("|")]
    odds = _no_anchor_odds(8, 127)
    p = odds / (odds + 127)
    assert no_anchor[:3] == ["TPO-no-anchor", "7", "127"]
    assert float(no_anchor[3]) == pytest.approx(odds, abs=0.005)
    assert float(no_anchor[5]) == pytest.approx(100 * (1 - p), abs=0.005)
    assert float(no_anchor[6]) == pytest.approx(100 * (1 - p) ** 8, abs=0.05)
    assert "none in" in lines[3] and lines[3].startswith("| TPO |")


def test_a_token_level_algorithm_is_refused_in_one_line_naming_the_choices(capsys):
    with pytest.raises(SystemExit):
        fixed_point.main(["--algorithms", "dapo"])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--algorithms dapo" in error and "tpo_no_anchor" in error and "dapo," not in error


def test_a_group_size_beyond_the_bound_is_refused_before_any_allocation(capsys):
    """Bug caught: main without an upper bound on --K (--K 1000000 asked for a terabyte)."""
    with pytest.raises(SystemExit) as exit_code:
        fixed_point.main(["--K", "1000000"])
    error = capsys.readouterr().err
    assert exit_code.value.code == 2 and f"--K: '1000000' is not an integer >= 2 and <= {fixed_point.MAX_K}" in error


class _ToyLoss:
    """A sequence-level group loss −sign·Σ_k (s_k − s̄)(log r_old − log c) ℓ_k: its pull on the right answer is
    sign·(log c − log r) times a positive factor, so it changes sign at r = c, downwards for sign = +1 (a fixed
    point the policy moves to) and upwards for sign = −1 (one it moves away from); ``shift`` adds −shift·Σ_k ℓ_k,
    which raises every candidate alike."""

    token_level = False

    def __init__(self, c: float, sign: float = 1.0, shift: float = 0.0):
        self.c, self.sign, self.shift = c, sign, shift

    def signal(self, groups):
        return None

    def loss(self, logp, groups, signal):
        scores, old = groups.scores, groups.logp_old
        m = scores.sum(-1, keepdim=True)
        k = scores.shape[-1]
        log_odds = ((old * scores).sum(-1, keepdim=True) / m.clamp_min(1)
                    - (old * (1 - scores)).sum(-1, keepdim=True) / (k - m).clamp_min(1))
        weights = (scores - m / k) * (log_odds - math.log(self.c))
        return self.sign * (weights * logp).sum() - self.shift * logp.sum(), {}


def test_only_a_zero_the_pull_crosses_downwards_is_a_fixed_point_and_a_uniform_raise_does_not_pull():
    assert fixed_point.fixed_point(_ToyLoss(50.0), 127, 8) == pytest.approx(50.0, rel=1e-6)
    assert fixed_point.fixed_point(_ToyLoss(50.0, sign=-1.0), 127, 8) is None  # the policy moves away from it
    for odds in (0.1, 50.0, 1e4):
        scale = abs(fixed_point.expected_pull(_ToyLoss(odds), odds / 10, 127, 8))
        assert abs(fixed_point.expected_pull(_ToyLoss(odds), odds, 127, 8)) < 1e-6 * scale
        assert abs(fixed_point.expected_pull(_ToyLoss(odds, shift=1.0), odds, 127, 8)) < 1e-6 * scale
