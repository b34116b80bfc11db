"""The optional KL term of the modern baselines (``algorithm.beta``, docs/reproduction.md §16): GRPO's k3 KL to the
rollout snapshot, k3 = e^{r−ℓ} − (r − ℓ) − 1 with r = ℓ_old, per item of the log-probs the loss is written on (a
token for Dr. GRPO, DAPO and CISPO, a sequence for RLOO and GSPO), aggregated as the method aggregates its loss.

β = 0 (the default) is today's loss bit for bit; β > 0 adds β times the KL's gradient, 1 − e^{r−ℓ} on ℓ, computed
here in closed form, apart from the library; on the first epoch (ℓ = r) that gradient is 0."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

import algorithms
from algorithms import Groups, Rollout, losses
from common.checks import ConfigError
from conftest import ROOT, compose_config

BETA = 0.04
R, B, K, T = 2, 3, 4, 5
NEW = ("dr_grpo", "dapo", "gspo", "cispo")  # the four that gained the key; RLOO had it already


def build(name: str, **hp) -> algorithms.Algorithm:
    cfg = OmegaConf.load(ROOT / "conf" / "algorithm" / f"{name}.yaml")
    return algorithms.build(OmegaConf.merge(cfg, hp))


def batch(name: str, seed: int = 0, shift: float = 0.3, zero_variance_group: bool = False):
    """Seeded (logp, groups): per-token log-probs (R, B, K, T) with a ragged mask for the token-level methods, sequence
    log-probs (R, B, K) with per-candidate lengths for the others; ℓ = ℓ_old + shift·noise (a later epoch)."""
    gen = torch.Generator().manual_seed(seed)
    token_level = algorithms.get_algorithm(name).token_level
    shape = (R, B, K, T) if token_level else (R, B, K)
    logp_old = -torch.rand(*shape, generator=gen, dtype=torch.float64) * 2 - 0.1
    logp = (logp_old + shift * torch.randn(*shape, generator=gen, dtype=torch.float64)).requires_grad_(True)
    scores = torch.rand(R, B, K, generator=gen, dtype=torch.float64).round()
    scores[:, 0, 0], scores[:, 0, 1] = 1.0, 0.0  # every group of the first column informative ...
    if zero_variance_group:
        scores[:, 1] = 1.0  # ... and the second column's zero-variance
    fields = {}
    if token_level:
        lengths = torch.randint(1, T + 1, (R, B, K), generator=gen)
        fields["mask"] = (torch.arange(T) < lengths[..., None]).to(torch.float64)
    else:
        fields["lengths"] = torch.randint(1, T + 1, (R, B, K), generator=gen).to(torch.float64)
    return logp, Groups(scores, logp_old, Rollout.GROUP, **fields)


def loss_and_grad(algorithm, logp, groups):
    loss, _ = algorithm.loss(logp, groups, algorithm.signal(groups))
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    return loss.detach(), grad


def kl_weights(name: str, groups: Groups, keep: torch.Tensor | None = None) -> torch.Tensor:
    """d loss / d term for every item: how the method aggregates its terms, written out here."""
    if name in ("rloo", "gspo"):  # mean over the B·K sequences
        return torch.full_like(groups.logp_old, 1.0 / (B * K))
    mask = groups.mask if keep is None else groups.mask * keep[..., None, None]
    if name == "dr_grpo":  # token sum / (candidates · longest answer)
        return mask / (B * K * T)
    return mask / mask.flatten(1).sum(1)[:, None, None, None]  # dapo, cispo: token mean over the batch


def k3_closed_form(logp: torch.Tensor, logp_old: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """k3 and its gradient on ℓ, written out: e^{r−ℓ} − (r − ℓ) − 1 and 1 − e^{r−ℓ}."""
    delta = logp_old - logp.detach()
    return delta.exp() - delta - 1.0, 1.0 - delta.exp()


# ---- β = 0 is today's loss -------------------------------------------------------------------------------------

def todays_terms(name: str, logp: torch.Tensor, groups: Groups, signal: torch.Tensor) -> torch.Tensor:
    """Each method's terms as they were written before ``beta`` existed."""
    per_token = signal.unsqueeze(-1).expand_as(groups.logp_old) if logp.dim() == 4 else signal
    if name == "dr_grpo":
        return -losses.clipped_objective(logp, groups.logp_old, per_token, 0.2)
    if name == "dapo":
        return -losses.clipped_objective(logp, groups.logp_old, per_token, 0.2, clip_eps_high=0.28)
    if name == "gspo":
        return -losses.clipped_objective(logp, groups.logp_old, signal, 3e-4, 0.0, 10.0, clip_eps_high=4e-4,
                                         length=groups.lengths)
    weight = (logp.detach() - groups.logp_old.detach()).exp().clamp_max(5.0)  # cispo
    return -(weight * per_token.detach() * logp)


@pytest.mark.parametrize("name", NEW)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_beta_zero_is_todays_loss_bit_for_bit(name, dtype):
    logp, groups = batch(name, seed=11)
    logp = logp.detach().to(dtype).requires_grad_(True)
    groups = Groups(groups.scores.to(dtype), groups.logp_old.to(dtype), groups.rollout,
                    mask=None if groups.mask is None else groups.mask.to(dtype),
                    lengths=groups.lengths.to(dtype) if torch.is_tensor(groups.lengths) else groups.lengths)
    default, explicit = build(name), build(name, beta=0.0)
    assert default.hp.beta == 0.0 and default.hp == explicit.hp
    loss, grad = loss_and_grad(default, logp, groups)
    signal = default.signal(groups)
    old = algorithms.registry.aggregate(todays_terms(name, logp, groups, signal), groups, default.aggregation,
                                        default._token_level(groups), default.count(groups)
                                        if default.aggregation is algorithms.Aggregation.TOKENS else None)
    (old_grad,) = torch.autograd.grad(old.sum(), logp)
    assert torch.equal(loss, old.detach()) and torch.equal(grad, old_grad)


# ---- β > 0 adds β times the KL's gradient ----------------------------------------------------------------------

@pytest.mark.parametrize("name", ("rloo", *NEW))
def test_beta_adds_beta_times_the_k3_gradient(name):
    logp, groups = batch(name, seed=3)
    plain_loss, plain_grad = loss_and_grad(build(name), logp, groups)
    loss, grad = loss_and_grad(build(name, beta=BETA), logp, groups)
    kl, kl_grad = k3_closed_form(logp, groups.logp_old)
    weights = kl_weights(name, groups)
    assert (kl_grad.abs() > 1e-3).float().mean() > 0.9  # a later epoch: the KL acts
    torch.testing.assert_close(grad, plain_grad + BETA * weights * kl_grad, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(loss, plain_loss + BETA * (weights * kl).flatten(1).sum(1), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("name", ("rloo", *NEW))
def test_on_the_first_epoch_the_kl_has_no_gradient(name):
    logp, groups = batch(name, seed=5, shift=0.0)  # ℓ = ℓ_old
    plain_loss, plain_grad = loss_and_grad(build(name), logp, groups)
    loss, grad = loss_and_grad(build(name, beta=BETA), logp, groups)
    assert torch.equal(grad, plain_grad) and torch.equal(loss, plain_loss)
    method = build(name, beta=BETA)  # and the first-epoch weights (section 4's diagnostics) are unchanged
    torch.testing.assert_close(method.weights(groups, method.signal(groups)),
                               build(name).weights(groups, build(name).signal(groups)))


def test_dapo_filter_drops_a_zero_variance_groups_kl_with_it():
    logp, groups = batch("dapo", seed=7, zero_variance_group=True)
    keep = groups.informative()
    assert keep[:, 1].sum() == 0 and keep.sum() < keep.numel()
    plain_loss, plain_grad = loss_and_grad(build("dapo", filter_groups=True), logp, groups)
    loss, grad = loss_and_grad(build("dapo", filter_groups=True, beta=BETA), logp, groups)
    kl, kl_grad = k3_closed_form(logp, groups.logp_old)
    weights = kl_weights("dapo", groups, keep)  # the token mean over the informative groups' tokens only
    torch.testing.assert_close(grad, plain_grad + BETA * weights * kl_grad, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(loss, plain_loss + BETA * (weights * kl).flatten(1).sum(1), rtol=1e-12, atol=1e-15)
    assert torch.count_nonzero(grad[:, 1]) == 0
    # without the filter the zero-variance group's KL counts, in the mean over every token
    _, unfiltered = loss_and_grad(build("dapo", beta=BETA), logp, groups)
    assert torch.count_nonzero(unfiltered[:, 1]) > 0


def test_gspo_kl_is_clipped_where_its_ratio_is():
    """|ℓ − ℓ_old| > c·L: the ratio's (ℓ − ℓ_old)/L is clipped at c, and the KL's gradient is 0 there, as GRPO's."""
    logp, groups = batch("gspo", seed=9)
    lengths = groups.lengths
    far = torch.zeros_like(lengths, dtype=torch.bool)
    far[:, 0, :2] = True
    logp_old = torch.where(far, logp.detach() + 10.5 * lengths, groups.logp_old)  # x = −10.5·L, beyond c = 10
    groups = Groups(groups.scores, logp_old, Rollout.GROUP, lengths=lengths)
    plain_loss, plain_grad = loss_and_grad(build("gspo"), logp, groups)
    loss, grad = loss_and_grad(build("gspo", beta=BETA), logp, groups)
    kl, kl_grad = k3_closed_form(logp, torch.where(far, logp.detach() + 10.0 * lengths, logp_old))
    kl_grad = torch.where(far, torch.zeros_like(kl_grad), kl_grad)
    weights = kl_weights("gspo", groups)
    torch.testing.assert_close(grad, plain_grad + BETA * weights * kl_grad, rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(loss, plain_loss + BETA * (weights * kl).flatten(1).sum(1), rtol=1e-12, atol=1e-12)


def test_gspo_with_unit_length_and_beta_is_grpo():
    """L = 1, GRPO's ε and clip: GSPO's loss with β is GRPO's (β = 0.04) over K, gradient included."""
    logp, groups = batch("gspo", seed=10)
    groups = Groups(groups.scores, groups.logp_old, Rollout.GROUP)  # L = 1
    gspo = build("gspo", clip_eps_low=0.2, clip_eps_high=0.2, log_ratio_clip=20.0, beta=BETA)
    gspo_loss, gspo_grad = loss_and_grad(gspo, logp, groups)
    grpo_loss, grpo_grad = loss_and_grad(build("grpo"), logp, groups)
    assert build("grpo").hp.beta == BETA
    torch.testing.assert_close(gspo_loss * K, grpo_loss)
    torch.testing.assert_close(gspo_grad * K, grpo_grad)


def test_per_token_kl_is_grpos_with_one_token_per_answer():
    """T = 1, Dr. GRPO's A = r − μ given to GRPO: the same KL term, Dr. GRPO over the B·K candidates."""
    logp, groups = batch("gspo", seed=12)
    groups = Groups(groups.scores, groups.logp_old, Rollout.GROUP)
    dr = build("dr_grpo", beta=BETA)
    centred = groups.scores - groups.scores.mean(-1, keepdim=True)
    dr_loss, _ = dr.loss(logp.unsqueeze(-1), Groups(groups.scores, groups.logp_old.unsqueeze(-1), Rollout.GROUP),
                         centred)
    grpo_terms = -losses.clipped_objective(logp, groups.logp_old, centred, 0.2, BETA)
    torch.testing.assert_close(dr_loss, grpo_terms.flatten(1).mean(1))


@pytest.mark.parametrize("name", ("rloo", *NEW))
def test_beta_on_single_sample_rollouts(name):
    """The bandits' one action per context (the batch is the comparison set): the KL is per item there too."""
    gen = torch.Generator().manual_seed(13)
    logp_old = -torch.rand(R, 6, 1, generator=gen, dtype=torch.float64) - 0.1
    logp = (logp_old + 0.3 * torch.randn(R, 6, 1, generator=gen, dtype=torch.float64)).requires_grad_(True)
    rewards = torch.rand(R, 6, 1, generator=gen, dtype=torch.float64).round()
    rewards[:, 0], rewards[:, 1] = 1.0, 0.0
    groups = Groups(rewards, logp_old, Rollout.SINGLE, advantages=rewards - rewards.mean(1, keepdim=True))
    plain_loss, plain_grad = loss_and_grad(build(name), logp, groups)
    loss, grad = loss_and_grad(build(name, beta=BETA), logp, groups)
    _, kl_grad = k3_closed_form(logp, logp_old)
    torch.testing.assert_close(grad, plain_grad + BETA * kl_grad / 6, rtol=1e-12, atol=1e-15)  # 6 items per replica


# ---- configuration ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NEW)
def test_beta_is_declared_and_checked(name):
    assert OmegaConf.load(ROOT / "conf" / "algorithm" / f"{name}.yaml").beta == 0.0 and build(name).hp.beta == 0.0
    assert build(name, beta=0.04).hp.beta == BETA
    with pytest.raises(ConfigError, match="algorithm.beta=-0.01 is not valid; expected a number >= 0"):
        build(name, beta=-0.01)


def test_the_beyond_queue_runs_each_baseline_with_grpos_beta():
    """P10 runs each baseline again under preset beyond_terminal_baselines_kl: the plain cell's configuration with
    GRPO's β and an experiment name of its own, nothing else changed. Bug caught: conf/experiment/
    beyond_terminal_baselines_kl.yaml — ``beta: 0.04`` → ``beta: 0.4``."""
    from harness.campaign import load_queue

    cells = load_queue("beyond")["cells"]
    plain = {cell["name"]: cell for cell in cells if cell["preset"] == "beyond_terminal_baselines"}
    with_kl = {cell["name"]: cell for cell in cells if cell["preset"] == "beyond_terminal_baselines_kl"}
    assert sorted(with_kl) == sorted(["rloo", *NEW])
    for name, cell in with_kl.items():
        assert cell["priority"] == "P10" and cell["seeds"] == plain[name]["seeds"] == 10
        assert cell["cost"] == plain[name]["cost"]
        base, kl = (OmegaConf.to_container(compose_config([f"experiment={c['preset']}", *c["overrides"]]))
                    for c in (plain[name], cell))
        assert kl["algorithm"].pop("beta") == BETA and base["algorithm"].pop("beta", 0.0) == 0.0
        assert (base.pop("experiment_name"), kl.pop("experiment_name")) == (
            "beyond_terminal_baselines", "beyond_terminal_baselines_kl")
        assert base == kl
    assert float(OmegaConf.load(ROOT / "conf" / "algorithm" / "grpo.yaml").beta) == BETA


TOKEN = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "task.steps=3",
         "model.d_model=16", "model.layers=1", "model.ffn=32", "seeds=2", "task.checkpoint_every=0"]


@pytest.mark.parametrize("overrides", [[f"algorithm={name}"] for name in ("rloo", *NEW)]
                         + [["algorithm=dapo", "algorithm.filter_groups=true"]], ids=" ".join)
def test_baselines_with_beta_train_on_token_reversal(overrides, tmp_path):
    import pandas as pd

    from conftest import run_config

    summary = run_config([*TOKEN, "task.reward=terminal", *overrides, f"algorithm.beta={BETA}"], tmp_path)
    assert summary["status"] == "completed"
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics.grad_norm.notna().all() and (metrics.grad_norm > 0).any()
