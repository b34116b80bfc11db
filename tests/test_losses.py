"""The loss library against closed forms (paper Eq. 1-4, Appendices A-C; docs/reproduction.md §1-2)."""

import math

import numpy as np
import pytest
import torch

import loss_calls
from algorithms import losses
from algorithms.scores import standardize, zscore_advantages


@pytest.fixture(autouse=True)
def float64_by_default():
    """Closed-form comparisons in double precision; restored afterwards for the other test modules."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def numpy_skill(scores: np.ndarray) -> np.ndarray:
    centred = scores - scores.mean(-1, keepdims=True)
    std = np.sqrt((centred**2).mean(-1, keepdims=True))
    return np.where(std > 1e-6, centred / np.maximum(std, 1e-12), centred)


def numpy_target(logp_old: np.ndarray, scores: np.ndarray, eta: float) -> np.ndarray:
    weights = np.exp(logp_old) * np.exp(numpy_skill(scores) / eta)
    return weights / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("eta", [0.25, 1.0, 3.0])
def test_tpo_gradient_on_group_logits_is_p_minus_q(eta):
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(2, 3, 6, generator=gen, requires_grad=True)
    logp_old = torch.randn(2, 3, 6, generator=gen)
    scores = torch.randn(2, 3, 6, generator=gen)
    loss = loss_calls.tpo_loss(logits, logp_old, scores, eta)
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    q = numpy_target(logp_old.numpy(), scores.numpy(), eta)
    p = torch.softmax(logits.detach(), -1).numpy()
    np.testing.assert_allclose(grad.numpy(), (p - q) / 3, atol=1e-12)  # mean over the 3 groups
    expected_loss = -(q * torch.log_softmax(logits.detach(), -1).numpy()).sum(-1).mean(-1)
    np.testing.assert_allclose(loss.detach().numpy(), expected_loss, atol=1e-12)


@pytest.mark.parametrize("eta", [0.5, 3.0])
def test_tpo_gradient_vanishes_at_the_target(eta):
    """At logits = log q, q ∝ p_old·exp(u/η) built here from the formula, the library's gradient is exactly zero; at
    the target of another temperature (q ∝ p_old·exp(u·η), i.e. η ↦ 1/η) it is not, and it is that target's p − q."""
    gen = torch.Generator().manual_seed(4)
    logp_old = torch.randn(1, 4, 5, generator=gen)
    scores = torch.randn(1, 4, 5, generator=gen)
    scores[0, 3] = 0.25  # a zero-variance group: u = 0, q = p_old
    q = numpy_target(logp_old.numpy(), scores.numpy(), eta)
    np.testing.assert_allclose(q[0, 3], np.exp(logp_old[0, 3].numpy()) / np.exp(logp_old[0, 3].numpy()).sum(),
                               atol=1e-12)
    logits = torch.log(torch.from_numpy(q)).requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_calls.tpo_loss(logits, logp_old, scores, eta).sum(), logits)
    assert grad.abs().max() < 1e-12
    other = numpy_target(logp_old.numpy(), scores.numpy(), 1.0 / eta)
    logits = torch.log(torch.from_numpy(other)).requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_calls.tpo_loss(logits, logp_old, scores, eta).sum(), logits)
    assert grad.abs().max() > 1e-2
    np.testing.assert_allclose(grad.numpy(), (other - q) / 4, atol=1e-12)  # p − q, mean over the 4 groups
    np.testing.assert_allclose(losses.tpo_target(logp_old, scores, eta).numpy(), q, atol=1e-12)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_zero_variance_group_gives_exactly_zero_first_epoch_gradient(value):
    logp_old = torch.randn(3, 4, 8, dtype=torch.float32, generator=torch.Generator().manual_seed(5))
    scores = torch.full((3, 4, 8), value, dtype=torch.float32)
    scores[:, 0] = torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 0])  # one informative group keeps the loss non-trivial
    for loss_fn in (
        lambda lp: loss_calls.tpo_loss(lp, logp_old, scores),
        lambda lp: loss_calls.grpo_loss(lp, logp_old, zscore_advantages(scores)),
    ):
        logp_new = logp_old.clone().requires_grad_(True)  # first epoch: the policy is still the rollout policy
        (grad,) = torch.autograd.grad(loss_fn(logp_new).sum(), logp_new)
        assert torch.count_nonzero(grad[:, 1:]) == 0
        assert torch.count_nonzero(grad[:, 0]) > 0


def test_zero_mode_gives_exact_zero_for_any_constant_scores():
    scores = torch.full((5, 8), 0.3, dtype=torch.float32)
    assert torch.count_nonzero(standardize(scores, zero_variance="zero")) == 0
    assert standardize(scores, zero_variance="centered").abs().max() < 1e-6
    with pytest.raises(ValueError, match="centered, zero"):
        standardize(scores, zero_variance="nope")


def test_grpo_guard_removes_the_reference_spurious_advantage():
    # float32 mean of eight copies of 0.7 is off by one ulp: the unguarded z-score divides that by 1e-8.
    scores = torch.full((1, 8), 0.7, dtype=torch.float32)
    unguarded = zscore_advantages(scores, guard=False)
    assert unguarded.abs().max() > 0.1
    assert torch.count_nonzero(zscore_advantages(scores, guard=True)) == 0


def test_standardize_uses_population_std():
    scores = torch.tensor([[3.0, 1.0, 0.0, 8.0]])
    expected = (scores.numpy() - scores.numpy().mean()) / scores.numpy().std(ddof=0)
    np.testing.assert_allclose(standardize(scores).numpy(), expected, atol=1e-12)


def test_target_is_invariant_to_score_scale():
    logp_old = torch.log(torch.tensor([[0.5, 0.3, 0.2]]))
    small = losses.tpo_target(logp_old, torch.tensor([[1.0, 0.0, -1.0]]))
    large = losses.tpo_target(logp_old, torch.tensor([[100.0, 0.0, -100.0]]))
    torch.testing.assert_close(small, large, rtol=0, atol=1e-15)


def test_target_maximises_the_regularised_objective():
    """Eq. 4: q = argmax_{q in simplex} Σ q_i u_i - η KL(q || p_old)."""
    gen = torch.Generator().manual_seed(1)
    logp_old = torch.log_softmax(torch.randn(7, generator=gen), -1)
    scores = torch.randn(7, generator=gen)
    eta = 0.7
    u = standardize(scores)

    def objective(q):
        return (q * u).sum(-1) - eta * (q * (torch.log(q) - logp_old)).sum(-1)

    q = losses.tpo_target(logp_old[None], scores[None], eta)[0]
    torch.testing.assert_close(q, torch.from_numpy(numpy_target(logp_old.numpy(), scores.numpy(), eta)), rtol=0,
                               atol=1e-12)
    exponential = torch.empty(20000, 7).exponential_(generator=gen)
    candidates = exponential / exponential.sum(-1, keepdim=True)  # uniform on the simplex: Dirichlet(1, ..., 1)
    nearby = torch.softmax(torch.log(q) + 0.05 * torch.randn(20000, 7, generator=gen), -1)
    assert objective(q) > objective(torch.cat([candidates, nearby])).max()


def test_no_anchor_target_ignores_p_old():
    logp_old = torch.log(torch.tensor([[0.7, 0.2, 0.1]]))
    scores = torch.tensor([[1.0, 0.0, -1.0]])
    no_anchor = losses.tpo_target(logp_old, scores, anchor=False)
    torch.testing.assert_close(no_anchor, torch.softmax(standardize(scores), -1))
    assert losses.tpo_target(logp_old, scores)[0, 0] > no_anchor[0, 0]


def test_grpo_first_epoch_gradient_and_clipping():
    gen = torch.Generator().manual_seed(2)
    logp_old = torch.randn(1, 2, 4, generator=gen)
    adv = zscore_advantages(torch.randn(1, 2, 4, generator=gen))
    logp_new = logp_old.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_calls.grpo_loss(logp_new, logp_old, adv).sum(), logp_new)
    torch.testing.assert_close(grad, -adv / 2)  # ρ = 1, KL gradient 0; sum over K, mean over 2 groups
    # ρ beyond 1+ε with A > 0 (or below 1-ε with A < 0): the clipped branch has no gradient.
    shifted = (logp_old + 0.5 * torch.sign(adv)).requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_calls.grpo_loss(shifted, logp_old, adv, beta=0.0).sum(), shifted)
    assert torch.count_nonzero(grad) == 0


def test_k3_kl_value():
    logp_old = torch.zeros(1, 1, 3)
    x = torch.tensor([[[0.3, -0.2, 25.0]]])
    adv = torch.zeros(1, 1, 3)
    loss = loss_calls.grpo_loss(logp_old + x, logp_old, adv, beta=1.0)
    clipped = x.clamp(-20, 20)
    torch.testing.assert_close(loss, (torch.exp(-clipped) + clipped - 1).sum(-1).mean(-1))


def test_grpo_masked_normalises_by_informative_groups():
    gen = torch.Generator().manual_seed(6)
    logp_old = torch.randn(1, 4, 3, generator=gen)
    scores = torch.tensor([[[1.0, 0, 0], [0, 0, 0], [0, 1, 1], [1, 1, 1]]])
    adv = zscore_advantages(scores)
    logp_new = (logp_old + 0.01 * torch.randn(1, 4, 3, generator=gen)).requires_grad_(True)
    masked = loss_calls.grpo_masked_loss(logp_new, logp_old, adv, scores)
    per_group = -losses.clipped_objective(logp_new, logp_old, adv, 0.2, 0.04, 20.0).sum(-1)
    torch.testing.assert_close(masked, (per_group[:, 0] + per_group[:, 2]) / 2)


def test_ppo_and_pg_agree_at_ratio_one():
    gen = torch.Generator().manual_seed(7)
    logp = torch.randn(2, 5, 3, generator=gen)
    adv = torch.randn(2, 5, 3, generator=gen)
    a = logp.clone().requires_grad_(True)
    b = logp.clone().requires_grad_(True)
    (ga,) = torch.autograd.grad(loss_calls.ppo_loss(a, logp, adv).sum(), a)
    (gb,) = torch.autograd.grad(loss_calls.pg_loss(b, adv).sum(), b)
    torch.testing.assert_close(ga, gb)
    torch.testing.assert_close(gb, -adv / 5)


def test_dg_gate():
    logp = torch.log(torch.tensor([[[0.2], [0.9]]])).requires_grad_(True)
    adv = torch.tensor([[[1.5], [-0.5]]])
    (grad,) = torch.autograd.grad(loss_calls.dg_loss(logp, adv, eta=0.5).sum(), logp)
    surprisal = -logp.detach()
    torch.testing.assert_close(grad, -torch.sigmoid(adv * surprisal / 0.5) * adv / 2)
    (clipped,) = torch.autograd.grad(loss_calls.dg_loss(logp, adv, 0.5, surprisal_clip=0.1).sum(), logp)
    torch.testing.assert_close(clipped, -torch.sigmoid(adv * surprisal.clamp(max=0.1) / 0.5) * adv / 2)


def _probs_with_p(p: float, arms: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    rest = torch.softmax(torch.randn(arms - 1, generator=torch.Generator().manual_seed(3)), -1) * (1 - p)
    return torch.cat([torch.tensor([p]), rest])[None], torch.zeros(1, dtype=torch.long)


def beta_closed_form(algorithm: str, p: float, num_arms: int = 10) -> float:
    """Appendix B's scalar β(p) along e_y − π for the one-hot bandit with ``num_arms`` arms (η = 1)."""
    lam = math.exp(num_arms / math.sqrt(num_arms - 1))
    return {"ce": 1.0, "pg": p, "dg": p / (1.0 + p), "grpo": math.sqrt(p / (1.0 - p)),
            "tpo": p * (lam - 1.0) / (1.0 - p + lam * p)}[algorithm]


def exact_direction(name: str, probs: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
    """The registered algorithm's exact tabular direction (``Algorithm.exact_direction``), at its defaults."""
    return loss_calls.algorithm(name).exact_direction(probs, correct)


@pytest.mark.parametrize("algorithm,expected", [("ce", 1.0), ("pg", 0.1), ("dg", 0.09), ("grpo", 0.33), ("tpo", 0.73)])
def test_exact_directions_reproduce_appendix_b(algorithm, expected):
    probs, correct = _probs_with_p(0.1)
    direction = exact_direction(algorithm, probs, correct)
    v = torch.nn.functional.one_hot(correct, 10) - probs
    beta = (direction / v).flatten()
    torch.testing.assert_close(beta, torch.full_like(beta, beta_closed_form(algorithm, 0.1)), atol=2e-7, rtol=2e-7)
    assert round(beta_closed_form(algorithm, 0.1), 2) == expected


def test_exact_tpo_direction_is_minus_the_tpo_loss_gradient():
    probs, correct = _probs_with_p(0.3)
    logits = torch.log(probs).requires_grad_(True)
    scores = torch.nn.functional.one_hot(correct, 10).double()
    loss = loss_calls.tpo_loss(logits.log_softmax(-1)[None], torch.log(probs + 1e-8)[None], scores[None])
    (grad,) = torch.autograd.grad(loss.sum(), logits)
    torch.testing.assert_close(-grad, exact_direction("tpo", probs, correct))


def _expected_gradient(probs, label, loss_of_action):
    """E_a~π[−∇_logits loss(a)] by enumerating the sampled class."""
    total = torch.zeros_like(probs)
    for action in range(probs.shape[-1]):
        logits = torch.log(probs).requires_grad_(True)
        (grad,) = torch.autograd.grad(loss_of_action(logits.log_softmax(-1), action).sum(), logits)
        total -= probs[0, action] * grad
    return total


def test_group_pg_is_six_times_pg_in_expectation():
    probs, label = _probs_with_p(0.35)
    baseline = probs.pow(2).sum()

    def advantage(action):
        return float(action == label.item()) - baseline

    def pg(log_probs, action):
        return loss_calls.pg_loss(log_probs[:, action].view(1, 1, 1), advantage(action).view(1, 1, 1))

    def group_pg(log_probs, action):
        sampled = torch.nn.functional.one_hot(torch.tensor([action]), 10).double()
        return loss_calls.group_pg_loss(log_probs[None], (advantage(action) * sampled)[None], sampled=sampled[None])

    pg_direction = _expected_gradient(probs, label, pg)
    torch.testing.assert_close(pg_direction, exact_direction("pg", probs, label))
    torch.testing.assert_close(_expected_gradient(probs, label, group_pg), 6 * pg_direction)


def test_exact_dg_direction_matches_enumerated_dg_loss():
    probs, label = _probs_with_p(0.2)

    def dg(log_probs, action):
        reward = torch.tensor(float(action == label.item())).view(1, 1, 1)
        return loss_calls.dg_loss(log_probs[:, action].view(1, 1, 1), reward)

    torch.testing.assert_close(_expected_gradient(probs, label, dg), exact_direction("dg", probs, label))
