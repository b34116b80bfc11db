"""The sequence helpers the LLM track adds to algorithms/losses.py."""

import torch

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
