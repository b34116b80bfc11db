"""The sequence helpers the LLM track adds to algorithms/losses.py."""

import numpy as np
import pytest
import torch

import loss_calls
from algorithms import losses


def test_sequence_logprob_sums_or_averages_unmasked_tokens():
    token_logp = torch.tensor([[[-1.0, -2.0, -4.0], [-0.5, -0.5, -9.0]]])
    mask = torch.tensor([[[1, 1, 1], [1, 1, 0]]])
    torch.testing.assert_close(losses.sequence_logprob(token_logp, mask), torch.tensor([[-7.0, -1.0]]))
    torch.testing.assert_close(losses.sequence_logprob(token_logp, mask, length_normalized=True),
                               torch.tensor([[-7.0 / 3, -0.5]]))
    empty = losses.sequence_logprob(token_logp, torch.zeros_like(mask), length_normalized=True)
    assert torch.equal(empty, torch.zeros(1, 2))


def test_reference_kl_is_the_k3_estimate_per_token_mean():
    new = torch.tensor([[[-1.0, -2.0], [-0.5, -3.0]]], requires_grad=True)
    ref = torch.tensor([[[-1.5, -2.0], [-0.5, 0.0]]])
    mask = torch.tensor([[[1, 1], [1, 0]]])
    k3 = lambda d: torch.exp(torch.tensor(d)) - d - 1  # noqa: E731 - d = ref − new
    expected = ((k3(-0.5) + k3(0.0)) / 2 + k3(0.0)) / 2  # sequence means, then the batch mean; masked token ignored
    kl = losses.reference_kl(new, ref, mask)
    torch.testing.assert_close(kl, expected.reshape(1))
    kl.sum().backward()
    assert new.grad[0, 1].abs().sum() == 0 and new.grad[0, 0, 1] == 0  # zero where π_θ = π_ref, or masked
    assert new.grad[0, 0, 0] != 0


def _independent_tpo_target(logp_old: np.ndarray, scores: np.ndarray, eta: float) -> np.ndarray:
    """q ∝ p_old · exp(u/η) over the group, u the population-std z-scores (std ≤ 1e-6 → u = 0), from the formula."""
    centred = scores - scores.mean(-1, keepdims=True)
    std = np.sqrt((centred**2).mean(-1, keepdims=True))
    u = np.where(std > 1e-6, centred / np.maximum(std, 1e-12), 0.0)
    weights = np.exp(logp_old - logp_old.max(-1, keepdims=True)) * np.exp(u / eta)
    return weights / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("length_normalized", [False, True])
@pytest.mark.parametrize("eta", [0.5, 3.0])
def test_tpo_on_sequence_log_probs_fits_the_target_written_from_the_formula(eta, length_normalized):
    """The LLM track's TPO: sequence log-probs of the K completions of each group, q ∝ p_old·exp(u/η); the loss is
    −mean_groups Σ_k q_k log softmax_k(ℓ) and each unmasked token of completion k gets gradient (p_k − q_k)/groups
    (divided by its completion length when length-normalised)."""
    gen = torch.Generator().manual_seed(11)
    groups, K, T = 3, 4, 5
    token_logp = (-torch.rand(1, groups, K, T, generator=gen, dtype=torch.float64)).requires_grad_(True)
    token_logp_old = -torch.rand(1, groups, K, T, generator=gen, dtype=torch.float64)
    mask = (torch.rand(1, groups, K, T, generator=gen) > 0.3).long()
    mask[..., 0] = 1
    scores = torch.rand(1, groups, K, generator=gen, dtype=torch.float64)
    scores[0, 2] = 1.0  # a zero-variance group: q = p_old
    logp = losses.sequence_logprob(token_logp, mask, length_normalized)
    logp_old = losses.sequence_logprob(token_logp_old, mask, length_normalized)
    loss = loss_calls.tpo_loss(logp, logp_old, scores, eta)
    (grad,) = torch.autograd.grad(loss.sum(), token_logp)

    lengths = mask.sum(-1).double().numpy() if length_normalized else np.ones((1, groups, K))
    m = mask.double().numpy()
    ell = (token_logp.detach().numpy() * m).sum(-1) / lengths
    ell_old = (token_logp_old.numpy() * m).sum(-1) / lengths
    q = _independent_tpo_target(ell_old, scores.numpy(), eta)
    p = np.exp(ell - ell.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    log_p = np.log(p)
    np.testing.assert_allclose(loss.detach().numpy(), -(q * log_p).sum(-1).mean(-1), rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), ((p - q) / groups / lengths)[..., None] * m, rtol=0, atol=1e-12)
    assert np.abs(p - q)[0, :2].max() > 1e-2  # not a comparison of two zeros
