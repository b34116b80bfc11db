"""Token reversal: rewards and errors, rollout log-probs (fast = naive), first-epoch exactness, matching, learning."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from algorithms import ALGORITHMS
from conftest import compose_config, run_config, run_killed_at
from tasks import rng
from harness.config import build_task
from harness.trainers import episode
from harness.trainers.batched import GroupTrainer, update_metric_names, updates_per_batch
from tasks import token_reversal as tr
from common.checks import ConfigError
from tasks.models import transformer

TINY = ["task=token_reversal", "task.H=3", "task.batch_size=4", "task.K=2", "seeds=2"]
ALGOS = sorted(name for name in ALGORITHMS if name != "ce")


def make_task(*overrides: str):
    return build_task(compose_config([*TINY, *overrides]))


def naive_log_probs(params, prompts, behaviour, tokens):
    """Reference path: one full forward per state on the zero-filled 2H buffer; log-probs of ``tokens``
    (..., H, K) at each state of the ``behaviour`` path (S, N, H)."""
    H = prompts.shape[-1]
    states = []
    for t in range(H):
        buffer = torch.cat([prompts, behaviour[..., :t], torch.zeros_like(behaviour[..., t:])], -1)
        states.append(transformer.log_probs(params, buffer)[:, :, H - 1 + t].gather(-1, tokens[:, :, t]))
    return torch.stack(states, 2)


# ---- rewards and errors ------------------------------------------------------------------------------------------
PROMPT = torch.tensor([0, 1, 2, 1])  # V = 3
TARGET_OF_PROMPT = {"copy": [0, 1, 2, 1], "flip": [2, 1, 0, 1], "reverse_copy": [1, 2, 1, 0],
                    "reverse_flip": [1, 0, 1, 2]}
# the target with token 1 wrong: correct = [1, 0, 1, 1]
EXPECTED = {"bag_of_tokens": ([1, 0, 1, 1], 0.25), "sequential": ([1, 0, 0, 0], 0.75), "terminal": ([0] * 4, 1.0)}


@pytest.mark.parametrize("target", tr.TARGETS)
@pytest.mark.parametrize("reward", tr.REWARDS)
def test_rewards_and_errors_on_hand_written_sequences(target, reward):
    y = tr.target_tokens(PROMPT, target, 3)
    assert y.tolist() == TARGET_OF_PROMPT[target]
    assert tr.token_rewards(y, y, reward).tolist() == [1.0] * 4
    wrong = y.clone()
    wrong[1] = (wrong[1] + 1) % 3
    rewards, error = EXPECTED[reward]
    assert tr.token_rewards(wrong, y, reward).tolist() == rewards
    assert 1 - tr.token_rewards(wrong, y, reward).mean().item() == error


def test_sequential_candidates_score_only_while_the_behaviour_path_is_correct():
    y = torch.tensor([1, 0, 1, 1])
    # states × K = 3 candidates; behaviour (candidate 0) is wrong at t = 1
    candidates = torch.tensor([[1, 0, 1], [1, 0, 0], [1, 1, 0], [0, 1, 1]])
    bag = [[1, 0, 1], [0, 1, 1], [1, 1, 0], [0, 1, 1]]
    sequential = [[1, 0, 1], [0, 1, 1], [0, 0, 0], [0, 0, 0]]
    assert tr.candidate_rewards(candidates, y, "bag_of_tokens").tolist() == bag
    assert tr.candidate_rewards(candidates, y, "sequential").tolist() == sequential


@pytest.mark.parametrize("algorithm,reward", [("tpo", "sequential"), ("ppo", "terminal"), ("tpo_token", "sequential"),
                                              ("grpo_token", "bag_of_tokens")])
def test_episode_error_is_measured_on_the_rollout(algorithm, reward):
    task = make_task(f"algorithm={algorithm}", f"task.reward={reward}", "task.V=3")
    batch = task.rollout_batch(0)
    y = tr.target_tokens(batch.prompts, task.target, task.V)
    if algorithm.endswith("_token"):
        assert torch.equal(batch.actions, batch.candidates[..., 0])  # candidate 0 is the behaviour token
        expected = tr.token_rewards(batch.actions, y, reward)  # behaviour rewards = prefix indicator / token hits
        if reward == "sequential":
            wrong = batch.actions != y
            after_mistake = (wrong.long().cumsum(-1) - wrong.long()) > 0
            assert batch.scores[after_mistake].eq(0).all()
    else:
        expected = tr.token_rewards(batch.actions, y.unsqueeze(2), reward)  # all B·K rollouts
    torch.testing.assert_close(batch.error, 1 - expected.flatten(1).mean(1), atol=1e-6, rtol=0)


# ---- rollout log-probs: fast path = naive path -------------------------------------------------------------------
def _params(S=2, V=3, H=4, heads=2):
    config = transformer.TransformerConfig(heads=heads)
    return {k: v.detach() for k, v in transformer.init_params(torch.arange(S), V, 2 * H, config).items()}


@pytest.mark.parametrize("heads", [2, 4])
def test_kv_cache_sequence_sampling_log_probs_equal_full_forward(heads):
    S, B, K, H, V = 2, 3, 4, 4, 3
    params = _params(S, V, H, heads)
    prompts = torch.randint(0, V, (S, B, H), generator=torch.Generator().manual_seed(0))
    uniforms = torch.rand(S, B, K, H, generator=torch.Generator().manual_seed(2))
    actions, sampled = tr.sample_sequences(params, prompts, uniforms)
    flat_prompts = prompts.unsqueeze(2).expand(S, B, K, H).reshape(S, B * K, H)
    flat_actions = actions.reshape(S, B * K, H)
    naive = naive_log_probs(params, flat_prompts, flat_actions, flat_actions.unsqueeze(-1)).squeeze(-1)
    teacher = tr.answer_log_probs(params, prompts, flat_actions).gather(-1, flat_actions.unsqueeze(-1))
    torch.testing.assert_close(sampled.reshape(S, B * K, H), naive, atol=1e-5, rtol=0)
    torch.testing.assert_close(teacher.squeeze(-1), naive, atol=1e-5, rtol=0)


def test_token_candidate_log_probs_single_forward_equal_per_state_forwards():
    S, B, K, H, V = 2, 3, 5, 4, 4
    params = _params(S, V, H)
    prompts = torch.randint(0, V, (S, B, H), generator=torch.Generator().manual_seed(1))
    uniforms = torch.rand(S, B, H, K, generator=torch.Generator().manual_seed(3))
    candidates, sampled = tr.sample_token_candidates(params, prompts, uniforms)
    behaviour = candidates[..., 0]
    naive = naive_log_probs(params, prompts, behaviour, candidates)
    fast = tr.answer_log_probs(params, prompts, behaviour).gather(-1, candidates)
    torch.testing.assert_close(sampled, naive, atol=1e-5, rtol=0)
    torch.testing.assert_close(fast, naive, atol=1e-5, rtol=0)


@pytest.mark.parametrize("algorithm", ["tpo", "grpo", "ppo", "tpo_token"])
def test_teacher_forced_log_probs_equal_rollout_log_probs_before_the_update(algorithm):
    """The first epoch's teacher-forced ℓ (used as ℓ_old) is the sampling policy's ℓ of the same rollout."""
    task = make_task(f"algorithm={algorithm}", "task.reward=sequential", "task.H=4", "task.V=3")
    batch = task.rollout_batch(0)
    if batch.candidates is not None:
        uniforms = rng.uniform(task.seeds, "actions", 0, (task.batch_size, task.H, task.K))
        tokens, sampled = tr.sample_token_candidates(task.params, batch.prompts, uniforms)
        assert torch.equal(tokens, batch.candidates)
    else:
        uniforms = rng.uniform(task.seeds, "actions", 0, (task.batch_size, batch.actions.shape[2], task.H))
        tokens, sampled = tr.sample_sequences(task.params, batch.prompts, uniforms)
        assert torch.equal(tokens, batch.actions)
        sampled = sampled.sum(-1) if algorithm != "ppo" else sampled.squeeze(2)
    torch.testing.assert_close(task.log_probs(batch).detach(), sampled, atol=1e-5, rtol=0)


# ---- first epoch with task.logp_old=exact: GRPO ratio exactly 1, TPO all-fail groups give exactly zero gradient -----
def test_grpo_first_epoch_ratio_is_exactly_one():
    task = make_task("algorithm=grpo", "task.reward=bag_of_tokens", "task.K=4", "task.logp_old=exact")
    batch = task.rollout_batch(0)
    logp = task.log_probs(batch)
    loss, _ = GroupTrainer.batch_loss(task, batch, logp)
    # ρ = 1 and KL_k3 = 0 exactly, so the objective is −mean_B Σ_k A_k with no float noise
    assert torch.equal(loss.detach(), -batch.signal.sum(-1).mean(-1))


def test_tpo_all_fail_groups_give_exactly_zero_first_epoch_gradient():
    task = make_task("algorithm=tpo", "task.reward=terminal", "task.H=2", "task.batch_size=16", "task.K=4",
                     "task.logp_old=exact")
    batch = task.rollout_batch(0)
    all_fail = batch.scores.amax(-1) == 0
    assert all_fail.any() and (~all_fail).any()
    logp = task.log_probs(batch)
    logp.retain_grad()
    GroupTrainer.batch_loss(task, batch, logp)[0].sum().backward()
    assert logp.grad[all_fail].eq(0).all()  # exact zeros, not float noise
    assert logp.grad[~all_fail].abs().amax() > 0
    # an all-fail batch moves no parameter at all
    task.optimizer.zero_grad(set_to_none=True)
    batch.scores.zero_()
    batch.groups = None  # now another batch: its signal is frozen by its first loss call
    logp = task.log_probs(batch)
    GroupTrainer.batch_loss(task, batch, logp)[0].sum().backward()
    assert all(p.grad.eq(0).all() for p in task.params.values())


def test_sampled_logp_old_gives_a_batch_without_signal_a_rounding_gradient():
    """With task.logp_old=sampled (the reference), ℓ_old is off by at most one rounding per entry (one ulp, ≤ |ℓ|·2⁻²³;
    not all zero), so an all-fail batch's first-epoch gradient is rounding-sized but not zero, and Muon takes a full
    step on it.
    Bug caught: tasks/token_reversal.py:groups — `logp_old = logp_old + ...` deleted (exact ℓ_old, no step)."""
    task = make_task("algorithm=tpo", "task.reward=terminal", "task.H=2", "task.batch_size=16", "task.K=4",
                     "task.logp_old=sampled")
    batch = task.rollout_batch(0)
    batch.scores.zero_()  # no signal
    logp = task.log_probs(batch)
    GroupTrainer.batch_loss(task, batch, logp)[0].sum().backward()
    offset = batch.groups.logp_old - logp.detach()
    assert offset.ne(0).any() and (offset.abs() <= logp.detach().abs() * 2.0**-23).all()
    grad = max(float(p.grad.abs().max()) for p in task.params.values())
    assert 0 < grad < 1e-5
    before = {k: p.detach().clone() for k, p in task.params.items()}
    task.optimizer_step(0, torch.zeros(len(task.seeds)))
    moved = sum(float((p.detach() - before[k]).pow(2).sum()) for k, p in task.params.items()) ** 0.5
    assert moved > 1e-3  # a step of the optimizer's own size, not of the gradient's


# ---- configuration -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm,single", [("ppo", True), ("dg", True), ("pg", True), ("tpo", False),
                                              ("grpo", False), ("tpo_token", False)])
def test_interaction_matching_scales_batch_and_lr_only_for_single_sample_methods(algorithm, single):
    prompts = make_task(f"algorithm={algorithm}")
    task = make_task(f"algorithm={algorithm}", "task.match=interactions")
    assert task.batch_size == (8 if single else 4)
    assert task.optimizer.param_groups[0]["lr"] == pytest.approx(1e-3 * (math.sqrt(2) if single else 1))
    # common random numbers: the first B of the B·K prompts are the prompt-matched prompts
    assert torch.equal(task.rollout_batch(3).prompts[:, :4], prompts.rollout_batch(3).prompts)
    # what the report relies on to read a grouped method's interaction-matched cell from its prompt-matched runs
    assert ("task.match" in tr.TokenReversal.inert_keys(ALGORITHMS[algorithm])) == (not single)


@pytest.mark.parametrize("algorithm,same", [("grpo", True), ("ppo", False)])
def test_a_grouped_methods_run_is_the_same_under_either_matching(tmp_path, algorithm, same):
    """task.match is inert for a grouped method (``TokenReversal.inert_keys``): its run writes the same metrics
    under prompts and interactions, byte for byte; a single-sample method's does not."""
    overrides = [*TINY, f"algorithm={algorithm}", "task.reward=terminal", "task.steps=3"]
    for match in ("prompts", "interactions"):
        run_config([*overrides, f"task.match={match}"], tmp_path / match)
    written = [(tmp_path / match / "metrics.csv").read_bytes() for match in ("prompts", "interactions")]
    assert (written[0] == written[1]) == same


def test_model_and_optim_nodes_are_top_level():
    task = make_task("algorithm=tpo", "model.heads=4", "optim.muon_split=matrices", "optim.lr=0.01")
    assert task.params["h0.attn.q.bias"].shape == (2, 4, 16)
    groups = {g["name"]: g for g in task.optimizer.param_groups}
    assert groups["h0.attn.q.kernel"]["matrix"] == (64, 64) and groups["h0.attn.q.kernel"]["lr"] == 0.01
    assert make_task("algorithm=tpo").optimizer.param_groups[0]["lr"] == 1e-3


@pytest.mark.parametrize("override,key", [
    ("task.target=mirror", "task.target"), ("task.reward=dense", "task.reward"), ("task.match=both", "task.match"),
    ("task.K=0", "task.K"), ("optim.muon_split=all", "optim.muon_split"), ("model.heads=3", "model.heads"),
    ("algorithm.epochs=0", "algorithm.epochs"), ("task.seed_chunk=0", "task.seed_chunk"),
    ("task.dedup=maybe", "task.dedup")])
def test_bad_values_name_the_key(override, key):
    with pytest.raises(ConfigError, match=key):
        make_task("algorithm=tpo", override)


@pytest.mark.parametrize("algorithm", ALGOS)
@pytest.mark.parametrize("reward", tr.REWARDS)
def test_every_algorithm_and_reward_trains_or_refuses(algorithm, reward):
    overrides = [f"algorithm={algorithm}", f"task.reward={reward}"]
    if algorithm.endswith("_token") and reward == "terminal":
        with pytest.raises(ConfigError, match="task.reward=terminal .*valid choices: bag_of_tokens, sequential"):
            make_task(*overrides)
        return
    task = make_task(*overrides)
    for step in range(2):
        out = episode(task, step)
    assert torch.isfinite(out.loss).all() and set(out.metrics) == {*tr.METRICS, *update_metric_names(task)}
    assert all(torch.isfinite(out.metrics[name]).all() for name in update_metric_names(task))
    assert ((out.metrics["error"] >= 0) & (out.metrics["error"] <= 1)).all()
    assert torch.isfinite(out.metrics["grad_norm"]).all()
    assert out.metrics["target_entropy"].isnan().all() != ALGORITHMS[algorithm].target
    assert out.metrics["frac_zero_var"].isnan().all() == (task.rollout.value == "single")


def test_default_epochs_and_dg_multi_epoch():
    assert updates_per_batch(make_task("algorithm=tpo")) == 4 and updates_per_batch(make_task("algorithm=dg")) == 1
    assert updates_per_batch(make_task("algorithm=dg", "algorithm.epochs=4")) == 4


# ---- runs --------------------------------------------------------------------------------------------------------
def test_same_seed_gives_identical_metrics_and_resume_matches(tmp_path, monkeypatch):
    overrides = [*TINY, "algorithm=grpo", "task.reward=terminal", "task.steps=6", "task.checkpoint_every=3"]
    for name in ("a", "b"):
        run_config(overrides, tmp_path / name)
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "b" / "metrics.csv").read_bytes()
    run_killed_at(overrides, tmp_path / "killed", tr.TokenReversal, 4)
    run_config([*overrides, "trainer.resume=true"], tmp_path / "killed")
    assert (tmp_path / "a" / "metrics.csv").read_bytes() == (tmp_path / "killed" / "metrics.csv").read_bytes()


def test_tpo_learns_a_tiny_terminal_reversal(tmp_path):
    summary = run_config(["task=token_reversal", "algorithm=tpo", "task.reward=terminal", "task.H=3",
                          "task.batch_size=32", "task.steps=60", "seeds=2"], tmp_path)
    frame = pd.read_csv(tmp_path / "metrics.csv")
    curve = frame.groupby("step")["error"].mean()
    assert curve.iloc[:3].mean() > 0.7  # 1 − 1/8 at initialisation
    assert curve.iloc[-5:].mean() < 0.2, curve.iloc[-5:].tolist()
    assert summary["status"] == "completed"


# ---- epochs: ℓ_old, the TPO target and GRPO's advantages are those of the rollout, frozen for the episode ----------
def _written_skill(scores: torch.Tensor) -> torch.Tensor:
    """u = (s − mean s) / popstd(s) over the group, 0 where popstd ≤ 1e-6 (written here, float64)."""
    scores = scores.double()
    centred = scores - scores.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(std > 1e-6, centred / std.clamp_min(1e-12), torch.zeros_like(centred))


def _written_grpo_advantages(scores: torch.Tensor) -> torch.Tensor:
    scores = scores.double()
    centred = scores - scores.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(std > 1e-6, centred / (std + 1e-8), torch.zeros_like(centred))


def _written_loss(algorithm: str, logp: torch.Tensor, logp_old: torch.Tensor, scores: torch.Tensor,
                  eta: float) -> torch.Tensor:
    """The episode loss (per seed) from the formulas: TPO −mean_B Σ_k q_k log softmax_k(ℓ), q ∝ p_old·exp(u/η);
    GRPO −mean_B Σ_k [min(ρA, clip(ρ, 0.8, 1.2)A) − 0.04(e^{−x} + x − 1)], x = clip(ℓ − ℓ_old, ±20), ρ = e^x."""
    logp, logp_old = logp.double(), logp_old.double()
    if algorithm == "tpo":
        q = torch.softmax(logp_old + _written_skill(scores) / eta, -1)
        return -(q * torch.log_softmax(logp, -1)).sum(-1).mean(-1)
    advantages = _written_grpo_advantages(scores)
    x = (logp - logp_old).clamp(-20.0, 20.0)
    ratio = x.exp()
    objective = torch.minimum(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
    return -(objective - 0.04 * (torch.exp(-x) + x - 1)).sum(-1).mean(-1)


@pytest.mark.parametrize("algorithm", ["tpo", "grpo"])
def test_old_log_probs_target_and_advantages_stay_frozen_across_the_epochs(algorithm, monkeypatch):
    """One episode (4 epochs): every epoch's loss takes ℓ_old, the scores and GRPO's advantages of the rollout (the
    first epoch's detached ℓ), and equals the loss written here from those frozen values and that epoch's ℓ; the
    episode reports the first epoch's loss and gradient norm."""
    eta = 0.5
    overrides = [f"algorithm={algorithm}", "task.reward=bag_of_tokens", "task.K=4", "task.V=3", "task.logp_old=exact"]
    task = make_task(*overrides, *(["algorithm.eta=0.5"] if algorithm == "tpo" else []))
    assert updates_per_batch(task) == 4 and len(task.chunks) == 2  # one chunk per seed: two loss calls per epoch
    calls, norms = [], []
    loss_fn, optimizer_step = GroupTrainer.batch_loss, task.optimizer.step

    def recording_loss(task, batch, logp):
        loss, metrics = loss_fn(task, batch, logp)
        advantages = batch.signal.clone()  # the frozen signal: GRPO's advantages
        calls.append((logp.detach().clone(), batch.groups.logp_old.clone(), batch.scores.clone(), advantages,
                      loss.detach().clone()))
        return loss, metrics

    def recording_step(*args, **kwargs):
        norms.append(torch.stack([p.grad.pow(2).flatten(1).sum(1) for p in task.params.values()]).sum(0).sqrt())
        return optimizer_step(*args, **kwargs)

    monkeypatch.setattr(GroupTrainer, "batch_loss", staticmethod(recording_loss))
    monkeypatch.setattr(task.optimizer, "step", recording_step)
    out = episode(task, 0)
    assert len(calls) == 8 and len(norms) == 4
    for chunk in range(2):
        per_epoch = calls[chunk::2]
        logp_first, _, scores, advantages_first, _ = per_epoch[0]
        assert _written_skill(scores).abs().amax() > 0  # some groups carry a ranking
        for epoch, (logp, logp_old, epoch_scores, advantages, loss) in enumerate(per_epoch):
            written = _written_loss(algorithm, logp, logp_first, scores, eta)  # from the frozen epoch-1 values
            torch.testing.assert_close(loss.double(), written, rtol=1e-6, atol=2e-6,
                                       msg=lambda m: f"epoch {epoch + 1} loss: {m}")
            assert torch.equal(logp_old, logp_first), f"ℓ_old changed at epoch {epoch + 1}"
            assert torch.equal(epoch_scores, scores)
            if algorithm == "grpo":
                assert torch.equal(advantages, advantages_first)
                torch.testing.assert_close(advantages.double(), _written_grpo_advantages(scores), rtol=0, atol=1e-6)
        logp_last = per_epoch[-1][0]
        assert (logp_last - logp_first).abs().amax() > 1e-2  # the policy moved: epoch 4 is not epoch 1 again
        refreshed = _written_loss(algorithm, logp_last, logp_last, scores, eta)  # ℓ_old recomputed at epoch 4
        assert (refreshed - per_epoch[-1][4].double()).abs().amax() > 1e-4
    # reported: the first epoch's loss and gradient norm (the rollout policy's), not a later epoch's
    torch.testing.assert_close(out.loss, torch.cat([calls[0][4], calls[1][4]]), rtol=0, atol=0,
                               msg=lambda m: f"reported loss is not the first epoch's: {m}")
    torch.testing.assert_close(out.metrics["grad_norm"], norms[0], rtol=1e-6, atol=0,
                               msg=lambda m: f"reported grad_norm is not the first epoch's: {m}")
    assert (norms[-1] - norms[0]).abs().amax() > 1e-3 * norms[0].amax()
