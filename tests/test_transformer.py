import re

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from common.checks import ConfigError
from tasks.models import transformer

torch.set_num_threads(1)


def _params(seeds, vocab=3, seq_len=8, **kwargs):
    config = transformer.TransformerConfig(**kwargs)
    return {k: v.detach() for k, v in transformer.init_params(torch.tensor(seeds), vocab, seq_len, config).items()}


def _tokens(shape, vocab, seed=0):
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


def test_parameter_count_matches_reference():
    params = transformer.init_params(torch.tensor([0, 1]), vocab_size=2, seq_len=20)
    assert sum(p[0].numel() for p in params.values()) == 101_634
    assert all(p.shape[0] == 2 and p.requires_grad for p in params.values())


def test_causal():
    params, tokens = _params([0, 1]), _tokens((2, 4, 8), 3)
    changed = tokens.clone()
    changed[:, :, 5] = (changed[:, :, 5] + 1) % 3
    before, after = transformer.log_probs(params, tokens), transformer.log_probs(params, changed)
    assert torch.equal(before[:, :, :5], after[:, :, :5])
    assert (before[:, :, 5:] - after[:, :, 5:]).abs().amax(-1).min() > 0


@pytest.mark.parametrize("heads", [2, 4])
def test_prefill_decode_matches_full_forward(heads):
    H, V = 5, 4
    params, tokens = _params([0, 1, 2], V, 2 * H, heads=heads), _tokens((3, 6, 2 * H), V)
    full = transformer.log_probs(params, tokens)
    assert full.shape == (3, 6, 2 * H, V)
    cache, logp = transformer.prefill(params, tokens[:, :, :H])
    torch.testing.assert_close(logp, full[:, :, H - 1], atol=1e-5, rtol=0)
    for t in range(H, 2 * H):
        cache, logp = transformer.decode(params, cache, tokens[:, :, t], t)
        torch.testing.assert_close(logp, full[:, :, t], atol=1e-5, rtol=0)


def test_seed_batching_invariance():
    batched, alone = _params([4, 7, 9]), _params([7])
    assert all(torch.equal(batched[k][1:2], alone[k]) for k in alone)
    tokens = _tokens((3, 5, 8), 3)
    full = transformer.log_probs(batched, tokens)
    torch.testing.assert_close(transformer.log_probs(alone, tokens[1:2]), full[1:2], atol=1e-6, rtol=0)
    cache_b, logp_b = transformer.prefill(batched, tokens[:, :, :4])
    cache_a, logp_a = transformer.prefill(alone, tokens[1:2, :, :4])
    torch.testing.assert_close(logp_a, logp_b[1:2], atol=1e-6, rtol=0)
    _, logp_b = transformer.decode(batched, cache_b, tokens[:, :, 4], 4)
    _, logp_a = transformer.decode(alone, cache_a, tokens[1:2, :, 4], 4)
    torch.testing.assert_close(logp_a, logp_b[1:2], atol=1e-6, rtol=0)


def test_init_statistics():
    params = _params(list(range(8)), vocab=64, seq_len=20)
    assert params["tok_emb"].std().item() == pytest.approx(0.125, rel=0.03)
    assert params["pos_emb"].std().item() == pytest.approx(0.02, rel=0.03)
    for name, fan_in in [("h0.attn.q.kernel", 64), ("h1.attn.out.kernel", 64), ("h0.mlp.down.kernel", 256)]:
        kernel, std = params[name], fan_in**-0.5
        assert kernel.std().item() == pytest.approx(std, rel=0.03)
        assert kernel.abs().max() <= 2 * std / 0.87962566103423978 + 1e-6  # truncated at 2 sigma'
    assert not params["h0.attn.q.kernel"][0].equal(params["h0.attn.k.kernel"][0])
    assert all(params[k].eq(0).all() for k in params if k.endswith("bias"))
    assert all(params[k].eq(1).all() for k in params if k.endswith("scale"))


def test_matches_torch_pre_ln_encoder_layers():
    """Independent check of the architecture against nn.TransformerEncoderLayer (norm_first, causal mask)."""
    V, L, heads = 5, 6, 4
    gen = torch.Generator().manual_seed(0)
    params = {k: v + 0.1 * torch.randn(v.shape, generator=gen) for k, v in _params([3], V, L, heads=heads).items()}
    tokens = _tokens((1, 3, L), V)
    x = params["tok_emb"][0][tokens[0]] + params["pos_emb"][0]
    for i in range(2):
        p = {k.removeprefix(f"h{i}."): v[0] for k, v in params.items() if k.startswith(f"h{i}.")}
        layer = nn.TransformerEncoderLayer(
            64, heads, 256, dropout=0.0, activation=lambda h: F.gelu(h, approximate="tanh"), layer_norm_eps=1e-6,
            batch_first=True, norm_first=True,
        ).eval()
        attn = layer.self_attn
        with torch.no_grad():
            attn.in_proj_weight.copy_(torch.cat([p[f"attn.{n}.kernel"].reshape(64, 64).T for n in "qkv"]))
            attn.in_proj_bias.copy_(torch.cat([p[f"attn.{n}.bias"].reshape(64) for n in "qkv"]))
            attn.out_proj.weight.copy_(p["attn.out.kernel"].reshape(64, 64).T)
            attn.out_proj.bias.copy_(p["attn.out.bias"])
            for module, name in [(layer.linear1, "mlp.up"), (layer.linear2, "mlp.down")]:
                module.weight.copy_(p[name + ".kernel"].T)
                module.bias.copy_(p[name + ".bias"])
            for module, name in [(layer.norm1, "ln1"), (layer.norm2, "ln2")]:
                module.weight.copy_(p[name + ".scale"])
                module.bias.copy_(p[name + ".bias"])
            x = layer(x, src_mask=nn.Transformer.generate_square_subsequent_mask(L), is_causal=True)
    x = F.layer_norm(x, (64,), params["ln_f.scale"][0], params["ln_f.bias"][0], eps=1e-6)
    expected = (x @ params["head.kernel"][0] + params["head.bias"][0]).log_softmax(-1)
    torch.testing.assert_close(transformer.log_probs(params, tokens)[0], expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("sizes,message", [
    ({"heads": 3}, "model.heads=3 is not valid; it must divide model.d_model=64"),
    ({"ffn": 0}, "model.ffn=0 is not valid"), ({"layers": 1.5}, "model.layers=1.5 is not valid")])
def test_the_model_config_refuses_sizes_naming_the_key(sizes, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        transformer.TransformerConfig(**sizes)


def test_the_model_config_builds_the_parameters_it_names():
    config = transformer.TransformerConfig(d_model=8, heads=4, layers=3, ffn=12)
    params = transformer.init_params(torch.tensor([0]), vocab_size=5, seq_len=6, config=config)
    assert params["h2.mlp.up.kernel"].shape == (1, 8, 12) and "h3.ln1.scale" not in params
    assert params["h0.attn.q.kernel"].shape == (1, 8, 4, 2) and params["tok_emb"].shape == (1, 5, 8)
