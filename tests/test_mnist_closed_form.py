"""The MNIST TPO step's closed form (the loss the group trainer computes and ``MnistBandit.logit_grad``) against the
target written in this file from the paper's formula (docs/reproduction.md §2.5): scores r − Σπ² at the sampled class
and 0 elsewhere, u their population-std z-scores over the 10 classes (±3 at the sampled class, ∓1/3 elsewhere),
q ∝ π·exp(u/η), loss −mean_b Σ_i q_i log π_i and gradient on the logits (π − q)/B. η ≠ 1, so a target built with u·η
instead of u/η cannot pass."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import compose_config
from tasks import rng
from harness.config import build_task
from harness.trainers.batched import GroupTrainer
from tasks.mnist_bandit import Batch
from tasks.models.mlp import mlp_forward


def mnist_closed_form(task, log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """The step's loss (S,) and gradient on the logits (S, B, 10) for these log-probs and actions, through the calls
    the group trainer makes."""
    batch = Batch(labels, log_probs, actions, layer_inputs=[])
    loss, _ = GroupTrainer.batch_loss(task, batch, task.log_probs(batch))
    return loss, task.logit_grad(batch)


def independent_target(log_probs: np.ndarray, actions: np.ndarray, labels: np.ndarray, eta: float) -> np.ndarray:
    probs = np.exp(log_probs)
    advantage = (actions == labels).astype(np.float64) - (probs**2).sum(-1)
    scores = np.zeros_like(probs)
    np.put_along_axis(scores, actions[..., None], advantage[..., None], -1)
    centred = scores - scores.mean(-1, keepdims=True)
    std = np.sqrt((centred**2).mean(-1, keepdims=True))
    u = np.where(std > 1e-6, centred / np.maximum(std, 1e-12), 0.0)
    np.testing.assert_allclose(np.take_along_axis(u, actions[..., None], -1)[..., 0], 3 * np.sign(advantage),
                               rtol=0, atol=1e-9)  # one-hot scores: u = ±3 at the sampled class
    weights = probs * np.exp(u / eta)
    return weights / weights.sum(-1, keepdims=True)


@pytest.mark.parametrize("eta", [0.5, 3.0])
def test_mnist_tpo_closed_form_fits_the_target_written_from_the_formula(eta):
    task = build_task(compose_config(["task=mnist_bandit", "algorithm=tpo", f"algorithm.eta={eta}", "seeds=2"]))
    images, labels, u = task.batch(0)
    logits = mlp_forward(task.params, images)[0].double().requires_grad_()
    actions = rng.sample_categorical(torch.log_softmax(logits.detach(), -1), u)
    actions[:, :7] = labels[:, :7]  # some rewarded samples: u = +3 at the label
    log_probs = torch.log_softmax(logits, -1)
    q = independent_target(log_probs.detach().numpy(), actions.numpy(), labels.numpy(), eta)
    B = labels.shape[1]
    expected_loss = -(q * log_probs.detach().numpy()).sum(-1).mean(-1)
    expected_grad = (np.exp(log_probs.detach().numpy()) - q) / B

    loss, grad = mnist_closed_form(task, log_probs.detach(), actions, labels)  # the step's closed form
    np.testing.assert_allclose(loss.numpy(), expected_loss, rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), expected_grad, rtol=0, atol=1e-14)
    library_loss = task.loss(logits, log_probs, actions, labels)  # the library definition, through autograd
    (library_grad,) = torch.autograd.grad(library_loss.sum(), logits)
    np.testing.assert_allclose(library_loss.detach().numpy(), expected_loss, rtol=0, atol=1e-12)
    np.testing.assert_allclose(library_grad.numpy(), expected_grad, rtol=0, atol=1e-14)
    assert np.abs(expected_grad).max() > 1e-4  # not a comparison of two zeros
