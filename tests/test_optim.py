import copy
import io
import math

import pytest
import torch

from tasks.models import optim
from tasks.models import transformer

torch.set_num_threads(1)


def _randn(shape, seed, dtype=torch.float32):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def _model(seeds, vocab=3, seq_len=6):
    return {k: v.detach().clone() for k, v in transformer.init_params(torch.tensor(seeds), vocab, seq_len).items()}


def _grads(params, step, seeds):
    """Gradients that depend only on (seed, step), so a seed sees the same ones in any batch."""
    return {
        name: torch.stack([_randn(p.shape[1:], 1000 * s + 10 * step + i) for s in seeds])
        for i, (name, p) in enumerate(params.items())
    }


def _train(params, seeds, steps, muon_split="reference", active=None, poison=None):
    opt = optim.transformer_optimizer(params, muon_split, lr=1e-2)
    for step in range(steps):
        for name, g in _grads(params, step, seeds).items():
            if poison is not None:
                g[poison] = float("nan")
            params[name].grad = g
        opt.step(active)
    return opt


def _newton_schulz_2d(x):
    transposed = x.shape[0] > x.shape[1]
    if transposed:
        x = x.T
    x = x / (x.pow(2).sum().sqrt() + 1e-8)
    for _ in range(5):
        a = x @ x.T
        x = 3.4445 * x + (-4.7750 * a + 2.0315 * a @ a) @ x
    return x.T if transposed else x


@pytest.mark.parametrize("shape, matrix", [((6, 3), (6, 3)), ((3, 5), (3, 5)), ((4, 2, 3), (4, 6))])
def test_muon_two_steps_match_hand_computation(shape, matrix):
    S, lr, beta = 2, 0.1, 0.95
    w0 = _randn((S, *shape), 0, torch.float64)
    grads = [_randn((S, *shape), 1, torch.float64), 3.0 * _randn((S, *shape), 2, torch.float64)]
    w = w0.clone()
    opt = optim.MuonAdam([{"params": [w], "matrix": matrix}], lr=lr)
    results = []
    for g in grads:
        w.grad = g
        opt.step()
        results.append(w.clone())

    scale = math.sqrt(max(1.0, matrix[1] / matrix[0]))
    for s in range(S):
        expected, m = w0[s].reshape(matrix), torch.zeros(matrix, dtype=torch.float64)
        for t, (g, result) in enumerate(zip(grads, results), start=1):
            g = g[s].reshape(matrix)
            m = beta * m + (1 - beta) * g
            m_hat = beta * m / (1 - beta ** (t + 1)) + (1 - beta) * g / (1 - beta**t)
            orth = _newton_schulz_2d(m_hat)
            assert torch.linalg.svdvals(orth).sub(1).abs().max() < 0.35  # near-orthogonal, as NS promises
            expected = expected - lr * scale * orth
            torch.testing.assert_close(result[s].reshape(matrix), expected, rtol=1e-10, atol=1e-12)


def test_nesterov_adam_two_steps_match_hand_computation():
    S, lr, b1, b2, eps = 3, 0.1, 0.9, 0.999, 1e-8
    w0 = _randn((S, 7), 0, torch.float64)
    grads = [_randn((S, 7), 1, torch.float64), _randn((S, 7), 2, torch.float64)]
    w = w0.clone()
    opt = optim.MuonAdam([{"params": [w]}], lr=lr)
    expected, m, v = w0.clone(), torch.zeros_like(w0), torch.zeros_like(w0)
    for t, g in enumerate(grads, start=1):
        w.grad = g
        opt.step()
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = b1 * m / (1 - b1 ** (t + 1)) + (1 - b1) * g / (1 - b1**t)
        expected = expected - lr * m_hat / ((v / (1 - b2**t)).sqrt() + eps)
        torch.testing.assert_close(w, expected, rtol=1e-10, atol=1e-12)


def test_reference_split_and_scales():
    groups = optim.transformer_param_groups(_model([0], vocab=2, seq_len=20), "reference")
    scales = {g["name"]: optim.muon_scale(g["matrix"]) for g in groups if g["matrix"] is not None}
    expected = {"tok_emb": math.sqrt(32), "pos_emb": math.sqrt(64 / 20), "head.kernel": 1.0}
    for i in range(2):
        expected |= {f"h{i}.mlp.up.kernel": 2.0, f"h{i}.mlp.down.kernel": 1.0}
        expected |= {f"h{i}.attn.{n}.bias": 4.0 for n in "qkv"}
    assert scales == pytest.approx(expected)
    assert len(groups) == len(_model([0], vocab=2, seq_len=20))


def test_matrices_split():
    groups = optim.transformer_param_groups(_model([0], vocab=2, seq_len=20), "matrices")
    matrices = {g["name"]: g["matrix"] for g in groups if g["matrix"] is not None}
    expected = {"tok_emb": (2, 64), "pos_emb": (20, 64), "head.kernel": (64, 2)}
    for i in range(2):
        expected |= {f"h{i}.mlp.up.kernel": (64, 256), f"h{i}.mlp.down.kernel": (256, 64)}
        expected |= {f"h{i}.attn.{n}.kernel": (64, 64) for n in ("q", "k", "v", "out")}
    assert matrices == expected


def test_bad_split_names_choices():
    with pytest.raises(ValueError, match="reference.*matrices"):
        optim.transformer_param_groups(_model([0]), "all")


@pytest.mark.parametrize("muon_split", optim.MUON_SPLITS)
def test_state_dict_round_trip(muon_split):
    params = _model([0, 1])
    opt = _train(params, [0, 1], 2, muon_split)
    buffer = io.BytesIO()
    torch.save(opt.state_dict(), buffer)
    resumed = copy.deepcopy(params)
    opt_resumed = optim.transformer_optimizer(resumed, muon_split, lr=1e-2)
    buffer.seek(0)
    opt_resumed.load_state_dict(torch.load(buffer))
    for p, q, g in zip(params.values(), resumed.values(), _grads(params, 2, [0, 1]).values()):
        p.grad, q.grad = g, g.clone()
    opt.step()
    opt_resumed.step()
    assert all(torch.equal(params[k], resumed[k]) for k in params)


@pytest.mark.parametrize("muon_split", optim.MUON_SPLITS)
def test_seeds_do_not_interact(muon_split):
    """Bit for bit: a seed trained beside others (one of them NaN) ends where it ends alone, over enough steps for
    the bias corrections to reach exponents where a size-dependent pow rounds differently (on an AMD EPYC: 0.95**6,
    0.9**31, 0.999**168)."""
    batched = _model([0, 1, 2])
    _train(batched, [0, 1, 2], 170, muon_split, poison=1)
    assert all(p[1].isnan().any() for p in batched.values())
    for index, seed in [(0, 0), (2, 2)]:
        alone = _model([seed])
        _train(alone, [seed], 170, muon_split)
        for name in alone:
            assert torch.equal(batched[name][index : index + 1], alone[name]), name


@pytest.mark.parametrize("base", [0.9, 0.95, 0.999])
def test_integer_power_matches_closed_form_and_ignores_tensor_size(base):
    exponents = torch.arange(0, 4099, dtype=torch.float32)
    powers = optim.integer_power(base, exponents)
    stored = float(torch.tensor(base))  # the float32 base, as float32 pow raises it
    exact = torch.tensor([math.pow(stored, n) for n in range(4099)], dtype=torch.float64)
    assert powers.dtype == torch.float32 and powers[0] == 1.0 and powers[1] == stored
    normal = exact > torch.finfo(torch.float32).tiny
    torch.testing.assert_close(powers.double()[normal], exact[normal], rtol=2**-24, atol=0)  # correctly rounded
    alone = torch.cat([optim.integer_power(base, exponents[i : i + 1]) for i in range(64)])
    reversed_order = optim.integer_power(base, exponents.flip(0)).flip(0)
    assert torch.equal(alone, powers[:64]) and torch.equal(reversed_order, powers)


def test_inactive_seed_is_frozen():
    initial, params = _model([0, 1, 2]), _model([0, 1, 2])
    opt = _train(params, [0, 1, 2], 2, active=torch.tensor([True, False, True]), poison=1)
    reference = _model([0, 1, 2])
    _train(reference, [0, 1, 2], 2)
    for name, p in params.items():
        assert torch.equal(p[1], initial[name][1])
        assert torch.equal(p[[0, 2]], reference[name][[0, 2]])
        state = opt.state[p]
        assert state["count"].tolist() == [2, 0, 2]
        assert all(state[key][1].eq(0).all() for key in ("mu", "nu") if key in state)


def test_zero_gradient_leaves_seed_unchanged():
    params = _model([0, 1])
    opt = optim.transformer_optimizer(params)
    before = copy.deepcopy(params)
    for name, g in _grads(params, 0, [0, 1]).items():
        g[0] = 0.0
        params[name].grad = g
    opt.step()
    for name, p in params.items():
        assert torch.equal(p[0], before[name][0]) and not torch.equal(p[1], before[name][1])


def test_bucketed_update_equals_one_optimizer_per_parameter():
    """The flat buckets and the shape-batched Newton–Schulz give each parameter exactly its own update."""
    seeds = [0, 1]
    together = _model(seeds)
    alone = {name: p.clone() for name, p in together.items()}
    optimizers = {name: optim.MuonAdam([group], lr=1e-2) for name, group in zip(
        alone, optim.transformer_param_groups(alone))}
    opt = optim.transformer_optimizer(together, lr=1e-2)
    for step in range(3):
        grads = _grads(together, step, seeds)
        for name in together:
            together[name].grad, alone[name].grad = grads[name].clone(), grads[name].clone()
        opt.step()
        for optimizer in optimizers.values():
            optimizer.step()
    for name in together:
        assert torch.equal(together[name], alone[name]), name


def test_fused_adam_is_bit_equal_to_torch_fused_adam_and_resumes():
    shapes = [(2, 7, 5), (2, 5), (2, 3, 3)]
    ours_params = [_randn(shape, i) for i, shape in enumerate(shapes)]
    theirs_params = [p.clone().requires_grad_() for p in ours_params]
    ours, theirs = optim.FusedAdam(ours_params, lr=1e-2), torch.optim.Adam(theirs_params, lr=1e-2, fused=True)
    for step in range(6):
        grads = [_randn(shape, 100 * step + i) * 10.0 ** (-3 * i) for i, shape in enumerate(shapes)]
        for p, g in zip(theirs_params, grads):
            p.grad = g.clone()
        theirs.step()
        ours.step(grads)
        if step == 2:  # a resumed optimizer continues exactly
            state = copy.deepcopy(ours.state_dict())
            ours = optim.FusedAdam(ours_params, lr=1e-2)
            ours.load_state_dict(state)
        for mine, reference in zip(ours_params, theirs_params):
            assert torch.equal(mine, reference.detach())
    assert float(ours.step_count) == 6.0
