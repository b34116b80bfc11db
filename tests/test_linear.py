"""Dense layers through oneDNN (tasks/models/linear.py) equal torch's products, forward and backward."""

from __future__ import annotations

import pytest
import torch

from conftest import compose_config
from harness.config import build_task
from common.checks import ConfigError
from tasks.models import linear

pytestmark = pytest.mark.skipif(not linear.onednn_available(), reason="no oneDNN linear (torch build or CPU)")


@pytest.fixture(autouse=True)
def onednn_backend():
    linear.set_backend("onednn")
    yield
    linear.set_backend("auto")


def _randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_large_products_take_onednn_and_small_ones_or_recorded_ones_do_not():
    x = _randn(300, 784)
    assert linear._use_onednn(x, 50)  # 11.8M multiply-adds
    assert not linear._use_onednn(x[:100], 50)  # 3.9M: the 1-seed MNIST layer, faster through MKL
    assert linear._use_onednn(x[:100].expand(20, 100, 784), 50)  # 20 seeds of it
    assert not linear._use_onednn(x.double(), 50)
    linear.set_backend("blas")
    assert not linear._use_onednn(x, 50)


@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("bias,relu", [(True, False), (True, True), (False, False)])
def test_linear_equals_addmm(transposed, bias, relu):
    x = _randn(784, 300, seed=1).T if transposed else _randn(300, 784, seed=1)  # strided views as the backward uses
    weight = _randn(784, 60, seed=2).T if transposed else _randn(60, 784, seed=2)
    b = _randn(60, seed=3) if bias else None
    expected = x @ weight.T + (b if bias else 0)
    expected = expected.relu() if relu else expected
    torch.testing.assert_close(linear.linear(x, weight, b, relu), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("seeds", [1, 3])
def test_seed_linear_keeps_every_seed_apart(seeds):
    x, weight, bias = _randn(seeds, 100, 784, seed=4), _randn(seeds, 50, 784, seed=5), _randn(seeds, 50, seed=6)
    expected = torch.baddbmm(bias.unsqueeze(1), x, weight.mT).relu()
    torch.testing.assert_close(linear.seed_linear(x, weight, bias, relu=True), expected, rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(linear.seed_linear(x.mT, x.mT), torch.bmm(x.mT, x), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("seeds", [1, 2])
@pytest.mark.parametrize("width,out", [(64, 192), (256, 64)])  # both orders of the weight gradient's operands
def test_seed_dense_equals_baddbmm_forward_and_backward(seeds, width, out):
    """The autograd Function's gradients (g kernelᵀ, xᵀ g, Σ g) are those autograd forms for baddbmm."""
    x = _randn(seeds, 1000, width, seed=7).requires_grad_()
    kernel = (_randn(seeds, width, out, seed=8) / 8).requires_grad_()
    bias = _randn(seeds, out, seed=9).requires_grad_()
    upstream = _randn(seeds, 1000, out, seed=10)
    ours = linear.seed_dense(x, kernel, bias)
    grads = torch.autograd.grad((ours * upstream).sum(), (x, kernel, bias))
    plain = torch.baddbmm(bias.unsqueeze(1), x, kernel)
    plain_grads = torch.autograd.grad((plain * upstream).sum(), (x, kernel, bias))
    assert ours.grad_fn is not None and "SeedDense" in type(ours.grad_fn).__name__  # the oneDNN path ran
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-4)
    for mine, reference in zip(grads, plain_grads):
        torch.testing.assert_close(mine, reference, rtol=1e-5, atol=1e-3)


def test_blas_backend_is_torch_exactly():
    linear.set_backend("blas")
    x, kernel, bias = _randn(1, 1000, 64, seed=11), _randn(1, 64, 192, seed=12), _randn(1, 192, seed=13)
    assert torch.equal(linear.seed_dense(x, kernel, bias), torch.baddbmm(bias.unsqueeze(1), x, kernel))


def test_bad_backend_is_refused_before_any_work():
    with pytest.raises(ValueError, match="cpu_matmul='mkl'.*auto, onednn, blas"):
        linear.set_backend("mkl")
    with pytest.raises(ConfigError, match="cpu_matmul='mkl' is not valid; valid choices: auto, onednn, blas"):
        build_task(compose_config(["task=tabular_single", "cpu_matmul=mkl"]))


def test_transformer_through_onednn_equals_blas_and_repeats_exactly(monkeypatch):
    """At the token tasks' sizes (here 4,000 rows) every projection goes through oneDNN; log-probs and gradients
    equal torch's own products to float rounding, and a second run gives the same bits."""
    from tasks.models import transformer

    params = transformer.init_params(torch.arange(1), vocab_size=4, seq_len=20)
    tokens = torch.randint(4, (1, 200, 20), generator=torch.Generator().manual_seed(14))
    weights = _randn(1, 200, 20, 4, seed=15)

    def log_probs_and_grads():
        logp = transformer.log_probs(params, tokens)
        return logp.detach(), torch.autograd.grad((logp * weights).sum(), list(params.values()))

    calls = []
    onednn_linear = linear._onednn_linear
    monkeypatch.setattr(linear, "_onednn_linear", lambda *args: calls.append(1) or onednn_linear(*args))
    ours, ours_grads = log_probs_and_grads()
    assert len(calls) >= 3 * 2 * 4  # forward, input and weight gradients of the 4 projections of each layer
    again, again_grads = log_probs_and_grads()
    assert torch.equal(ours, again) and all(torch.equal(a, b) for a, b in zip(ours_grads, again_grads))
    linear.set_backend("blas")
    plain, plain_grads = log_probs_and_grads()
    torch.testing.assert_close(ours, plain, rtol=1e-5, atol=1e-5)
    for name, mine, reference in zip(params, ours_grads, plain_grads):
        scale = reference.abs().max().item()
        torch.testing.assert_close(mine, reference, rtol=1e-4, atol=1e-5 * max(scale, 1.0), msg=name)
