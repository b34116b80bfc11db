"""Appendix C mechanism analysis: closed forms vs. enumerating the 10 possible sampled actions, and binning."""

import math

import pytest
import torch

import loss_calls
from tasks.mnist_bandit import MnistBandit
from algorithms import ALGORITHMS
from algorithms.mechanism import BIN_EDGES, covers, mechanism_by_bin, mechanism_per_example
from algorithms.registry import declarations


def _algorithm(name, eta=None):
    """The registered algorithm, with η where it has one: the mechanism reads its hyperparameters from it."""
    has_eta = eta is not None and "eta" in declarations(ALGORITHMS[name])
    return loss_calls.algorithm(name, **({"eta": float(eta)} if has_eta else {}))


def _random_probs(n, generator, scale=2.0):
    return (scale * torch.randn(n, 10, generator=generator, dtype=torch.float64)).softmax(-1)


def _skill(scores):
    """u = (s − mean s) / popstd(s) over the classes, 0 where popstd ≤ 1e-6 (written here, not the library's)."""
    centred = scores - scores.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(std > 1e-6, centred / std.clamp_min(1e-12), torch.zeros_like(centred))


def _enumerated_update(algorithm, probs, y, a, eta):
    """Logit update of one sample (action a, reward 1{a = y}, baseline b = Σπ²), written from the losses."""
    advantage = float(a == y) - probs.pow(2).sum()
    e_a = torch.nn.functional.one_hot(torch.tensor(a), 10).double()
    if algorithm == "pg":
        return advantage * (e_a - probs)
    if algorithm == "dg":
        return torch.sigmoid(advantage * -torch.log(probs[a]) / eta) * advantage * (e_a - probs)
    u = _skill(advantage * e_a)
    if algorithm == "group_pg":
        return u[a] * (e_a - probs)
    weights = probs * torch.exp(u / eta)
    return weights / weights.sum() - probs  # tpo: q − π, q ∝ π·exp(u/η)


@pytest.mark.parametrize("eta", [1.0, 0.5])
@pytest.mark.parametrize("algorithm", ["pg", "group_pg", "dg", "tpo"])
def test_exact_gain_matches_enumerated_expectation(algorithm, eta):
    generator = torch.Generator().manual_seed(0)
    probs = _random_probs(64, generator)
    labels = torch.randint(0, 10, (64,), generator=generator)
    gain = mechanism_per_example(probs, labels, _algorithm(algorithm, eta))["gain"]
    for n in range(len(labels)):
        pi, y = probs[n], int(labels[n])
        direction = sum(pi[a] * _enumerated_update(algorithm, pi, y, a, eta) for a in range(10))
        v = torch.nn.functional.one_hot(torch.tensor(y), 10).double() - pi
        assert gain[n].item() == pytest.approx((pi[y] * (v @ direction)).item(), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("eta", [0.5, 3.0])
def test_tpo_gain_is_the_expected_update_of_the_library_loss(eta):
    """The mechanism's TPO closed form (λ = e^{(10/3)/η}) against the update the MNIST step actually makes: the
    library's TPO loss on the 10 classes (scores of ``MnistBandit.class_scores``), its gradient enumerated over
    the sampled class, and the same update from the target written here, q ∝ π·exp(u/η)."""
    generator = torch.Generator().manual_seed(3)
    probs = _random_probs(16, generator)
    labels = torch.randint(0, 10, (16,), generator=generator)
    gain = mechanism_per_example(probs, labels, _algorithm("tpo", eta))["gain"]
    actions = torch.arange(10)
    for n in range(len(labels)):
        pi, y = probs[n], int(labels[n])
        logits = pi.log().expand(10, 10).clone().requires_grad_()  # one row per possible sampled class
        log_probs = logits.log_softmax(-1)
        scores = MnistBandit.class_scores(log_probs, actions, torch.full((10,), y))
        loss = loss_calls.tpo_loss(logits[None], log_probs.detach()[None], scores[None], eta)
        (grad,) = torch.autograd.grad(loss.sum(), logits)  # row a: (π − q_a) / 10
        library = -(10 * grad * pi[:, None]).sum(0)  # E_a[q_a − π]
        written = sum(pi[a] * _enumerated_update("tpo", pi, y, a, eta) for a in range(10))
        torch.testing.assert_close(library, written, rtol=0, atol=1e-14)
        v = torch.nn.functional.one_hot(torch.tensor(y), 10).double() - pi
        assert gain[n].item() == pytest.approx((pi[y] * (v @ library)).item(), rel=1e-9, abs=1e-12)
        assert (pi[y] * (v @ library)).abs() > 1e-6


@pytest.mark.parametrize("algorithm", ["pg", "group_pg"])
def test_scalar_methods_have_zero_surplus(algorithm):
    probs = _random_probs(100, torch.Generator().manual_seed(1)).unsqueeze(0)
    stats = mechanism_per_example(probs, torch.arange(100) % 10, _algorithm(algorithm))
    assert torch.equal(stats["surplus"], torch.zeros_like(stats["surplus"]))
    surplus = mechanism_by_bin(probs, torch.arange(100) % 10, _algorithm(algorithm))["surplus"]
    assert torch.equal(surplus.nan_to_num(0.0), torch.zeros(1, 4, dtype=torch.float64))


@pytest.mark.parametrize("algorithm", ["dg", "tpo"])
def test_symmetric_mistakes_have_zero_surplus(algorithm):
    """β_sym is the exact coefficient when the wrong classes share 1 − p evenly."""
    p = torch.tensor([0.01, 0.05, 0.3, 0.6, 0.95], dtype=torch.float64).unsqueeze(-1)
    probs = torch.cat([p, (1 - p).expand(-1, 9) / 9], -1)
    stats = mechanism_per_example(probs, torch.zeros(5, dtype=torch.long), _algorithm(algorithm, eta=0.7))
    assert torch.allclose(stats["surplus"], torch.zeros(5, dtype=torch.float64), atol=1e-14)
    assert (stats["gain"] > 0).all()


def _probs_with(p, top_wrong):
    """Label 0 gets p, class 1 gets top_wrong, the rest share the remainder evenly."""
    rest = (1 - p - top_wrong) / 8
    return [p, top_wrong] + [rest] * 8


def test_bins_counts_and_exclusion_of_correct_predictions():
    rows = [_probs_with(0.05, 0.95 / 9),  # c = 1/9  -> bin 0
            _probs_with(0.125, 0.21875),  # c = 0.25 exactly (left edge) -> bin 1
            _probs_with(0.25, 0.375),     # c = 0.5 exactly -> bin 2
            _probs_with(0.3, 0.7),        # c = 1    -> bin 3
            _probs_with(0.1, 0.81),       # c = 0.9  -> bin 3
            _probs_with(0.9, 0.1)]        # correct, c = 1: excluded
    probs = torch.tensor([rows, [_probs_with(0.9, 0.05)] * len(rows)], dtype=torch.float64)  # seed 1: all correct
    labels = torch.zeros(len(rows), dtype=torch.long)
    out = mechanism_by_bin(probs, labels, _algorithm("tpo"))
    assert len(BIN_EDGES) == 5 and out["gain"].shape == (2, 4)
    assert out["count"].tolist() == [[1, 1, 1, 2], [0, 0, 0, 0]]
    per_example = mechanism_per_example(probs[0], labels, _algorithm("tpo"))
    expected = torch.stack([per_example["gain"][0], per_example["gain"][1], per_example["gain"][2],
                            per_example["gain"][3:5].mean()])
    assert torch.allclose(out["gain"][0], expected)
    assert torch.allclose(out["surplus"][0], out["gain"][0] - out["scalar_gain"][0])
    assert all(torch.isnan(out[key][1]).all() for key in ("gain", "scalar_gain", "surplus"))


def test_grpo_is_nan_and_bad_algorithm_raises():
    probs = _random_probs(20, torch.Generator().manual_seed(2)).unsqueeze(0)
    labels = torch.zeros(20, dtype=torch.long)
    out = mechanism_by_bin(probs, labels, _algorithm("grpo"))
    assert torch.isnan(out["gain"]).all() and out["count"].sum() == 0
    with pytest.raises(ValueError, match="algorithm=ppo has no exact expected update here; valid choices: pg, dg, "
                                         "tpo, grpo, group_pg"):
        mechanism_by_bin(probs, labels, _algorithm("ppo"))
    assert not covers(_algorithm("tpo_no_anchor"))  # by class: a subclass of TPO is another algorithm


def test_tpo_surplus_grows_with_concentration():
    """Paper Fig 4b: TPO's surplus is ≈ 0 for diffuse mistakes and positive when one wrong class dominates."""
    probs = torch.tensor([_probs_with(0.05, 0.95 / 9), _probs_with(0.05, 0.9)], dtype=torch.float64)
    stats = mechanism_per_example(probs, torch.zeros(2, dtype=torch.long), _algorithm("tpo"))
    assert math.isclose(stats["surplus"][0].item(), 0.0, abs_tol=1e-12) and stats["surplus"][1] > 1e-3
