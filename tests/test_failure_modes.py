"""The switchable experiments beyond the paper: standardisation variants, optimizer guards, the update-norm
diagnostics, reward noise and partial credit, and the solve/relapse events. Every default is pinned by the golden
runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

import algorithms
from algorithms import Groups, Rollout
from common.checks import ConfigError
from algorithms.scores import Spread, mid_ranks, standardize, zscore_advantages
from conftest import compose_config, run_config, run_killed_at
from harness import rundir
from harness.report import stats
from harness.rundir.summary import relapse_events
from harness.report.load import read_config
from harness.report.specs import RELAPSED, RELAPSES, SOLVED, Stat
from harness.config import build_task
from harness.trainers import episode
from tasks import token_reversal as tr
from tasks.models import optim, transformer

torch.set_num_threads(1)
PAPER_EXAMPLE = torch.tensor([[0.001, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)  # one candidate at 0.001, K = 8


# ---- standardisation variants -----------------------------------------------------------------------------------
def test_the_papers_low_variance_example_is_as_sharp_as_a_real_win():
    """Limitations: 0.001 vs 0 standardises like 1 vs 0: u_winner = √7, q_winner ≈ 0.75 from a uniform p_old."""
    u = standardize(PAPER_EXAMPLE)
    assert u[0, 0].item() == pytest.approx(math.sqrt(7)) and u[0, 1].item() == pytest.approx(-1 / math.sqrt(7))
    q_winner = math.exp(math.sqrt(7)) / (math.exp(math.sqrt(7)) + 7 * math.exp(-1 / math.sqrt(7)))
    assert q_winner == pytest.approx(0.75, abs=0.01)
    q = algorithms.losses.tpo_target(torch.full((1, 8), -math.log(8), dtype=torch.float64), PAPER_EXAMPLE)
    assert q[0, 0].item() == pytest.approx(q_winner)


def test_std_floor_and_shrinkage_temper_the_low_variance_group():
    centred_winner, sigma = 0.001 * 7 / 8, 0.001 * math.sqrt(7) / 8
    floored = standardize(PAPER_EXAMPLE, spread=Spread(std_floor=0.1))
    assert floored[0, 0].item() == pytest.approx(centred_winner / 0.1)
    shrunk_sigma = math.sqrt((8 * sigma ** 2 + 2 * 0.5 ** 2) / (8 + 2))
    shrunk = standardize(PAPER_EXAMPLE, spread=Spread(std_shrinkage=2, std_prior=0.5))
    assert shrunk[0, 0].item() == pytest.approx(centred_winner / shrunk_sigma)
    # a real 1-vs-0 group keeps most of its sharpness under shrinkage (σ = √7/8 against σ₀ = 0.5)
    win = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]], dtype=torch.float64)
    real_sigma = math.sqrt((8 * (math.sqrt(7) / 8) ** 2 + 2 * 0.25) / 10)
    assert standardize(win, spread=Spread(std_shrinkage=2))[0, 0].item() == pytest.approx(7 / 8 / real_sigma)
    # a floor below σ changes nothing
    assert torch.equal(standardize(win, spread=Spread(std_floor=0.01)), standardize(win))


def test_rank_scores_are_mid_ranks_and_do_not_fix_amplification():
    assert mid_ranks(torch.tensor([1.0, 1.0, 0.0, 0.0, 0.5])).tolist() == [4.5, 4.5, 1.5, 1.5, 3.0]
    assert mid_ranks(torch.tensor([1, 0, 1])).tolist() == [2.5, 1.0, 2.5]  # integer scores: float ranks
    # a group whose raw scores differ by float noise only (σ ≤ 1e-6) stays zero-variance under ranks
    tiny = torch.tensor([[1e-9, 0.0, 0.0, 0.0]])
    assert torch.equal(standardize(tiny, zero_variance="zero", spread=Spread(rank_scores=True)), torch.zeros_like(tiny))
    assert torch.equal(zscore_advantages(tiny, spread=Spread(rank_scores=True)), torch.zeros_like(tiny))
    ranked = standardize(PAPER_EXAMPLE, spread=Spread(rank_scores=True))
    assert ranked[0, 0].item() == pytest.approx(math.sqrt(7))  # magnitude-free: 0.001 ranks like 1
    noisy = torch.tensor([[0.3, 0.1, 0.2, 0.4]])
    expected = (torch.tensor([3.0, 1, 2, 4]) - 2.5) / math.sqrt(1.25)
    assert torch.allclose(standardize(noisy, spread=Spread(rank_scores=True))[0], expected)


@pytest.mark.parametrize("spread", [Spread(std_floor=0.1), Spread(rank_scores=True)])
def test_floor_and_ranks_leave_every_binary_group_bit_for_bit_as_sigma(spread):
    """All 2^8 groups of 0/1 scores at K = 8 (float32, as the tasks score): a floor below √7/8 leaves σ as it is, and
    the mid-ranks, an affine map of two-valued scores, standardise to the same u and A to the bit (here: at K = 8 in
    float32; other K or float64 can differ in the last bit). So beyond_amplification_floor and _rank at
    reward_noise = 0 are the σ runs (the end-to-end test below; the queue's F4 cells confirm it on full runs)."""
    import itertools

    groups = torch.tensor(list(itertools.product([0.0, 1.0], repeat=8)))
    for zero_variance in ("centered", "zero"):
        assert torch.equal(standardize(groups, zero_variance=zero_variance, spread=spread),
                           standardize(groups, zero_variance=zero_variance))
    assert torch.equal(zscore_advantages(groups, spread=spread), zscore_advantages(groups))
    noisy = groups + 0.01 * torch.randn(groups.shape, generator=torch.Generator().manual_seed(0))
    assert not torch.allclose(standardize(noisy, spread=spread), standardize(noisy))  # with noise they differ


@pytest.mark.parametrize("algorithm", ["tpo", "grpo"])
def test_floor_and_ranks_train_exactly_as_sigma_on_binary_rewards(algorithm):
    """End to end at K = 8: every logged number of a floor or a rank run equals the σ run's, episode by episode (what
    lets the amplification conclusions read those cells at noise 0 as σ's)."""
    tiny = ["task=token_reversal", "task.H=3", "task.batch_size=6", "task.K=8", "seeds=2", "task.reward=terminal",
            "model.d_model=16", "model.layers=1", "model.ffn=32", f"algorithm={algorithm}"]
    runs = {variant: build_task(compose_config([*tiny, *variant])) for variant in
            [(), ("algorithm.std_floor=0.1",), ("algorithm.rank_scores=true",), ("algorithm.std_floor=0.5",)]}
    logged = {variant: [episode(task, step).metrics for step in range(4)] for variant, task in runs.items()}
    sigma = logged[()]
    for variant in [("algorithm.std_floor=0.1",), ("algorithm.rank_scores=true",)]:
        for ours, theirs in zip(logged[variant], sigma, strict=True):
            assert ours.keys() == theirs.keys()
            assert all(torch.allclose(ours[k], theirs[k], rtol=0, atol=0, equal_nan=True) for k in theirs), variant
    # a floor above a real group's σ (√7/8 ≈ 0.33 for 1 of 8 right) does change the run, and so do the ranks once
    # noise breaks the ties: the comparison can fail
    assert any(not torch.equal(ours["grad_norm"], theirs["grad_norm"])
               for ours, theirs in zip(logged[("algorithm.std_floor=0.5",)], sigma, strict=True))
    noisy = {variant: build_task(compose_config([*tiny, "task.reward_noise=0.01", *variant]))
             for variant in [(), ("algorithm.rank_scores=true",)]}
    first = {variant: episode(task, 0).metrics["grad_norm"] for variant, task in noisy.items()}
    assert not torch.equal(first[()], first[("algorithm.rank_scores=true",)])


@pytest.mark.parametrize("spread", [Spread(), Spread(std_floor=0.2), Spread(std_shrinkage=3), Spread(rank_scores=True)])
def test_zero_variance_groups_stay_zero_in_every_variant(spread):
    same = torch.tensor([[0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    assert torch.equal(standardize(same, zero_variance="zero", spread=spread), torch.zeros_like(same))
    assert torch.equal(zscore_advantages(same, spread=spread), torch.zeros_like(same))
    two = torch.tensor([[1.0, 0.0]])
    assert (standardize(two, spread=spread)[0, 0] > 0) and (zscore_advantages(two, spread=spread)[0, 0] > 0)


def test_grpo_advantages_use_the_tempered_divisor():
    shrunk_sigma = math.sqrt((8 * (0.001 * math.sqrt(7) / 8) ** 2 + 4 * 0.3 ** 2) / 12)
    advantages = zscore_advantages(PAPER_EXAMPLE, spread=Spread(std_shrinkage=4, std_prior=0.3))
    assert advantages[0, 0].item() == pytest.approx(0.001 * 7 / 8 / (shrunk_sigma + 1e-8))
    floored = zscore_advantages(PAPER_EXAMPLE, spread=Spread(std_floor=0.05), eps_in_sqrt=True)
    assert floored[0, 0].item() == pytest.approx(0.001 * 7 / 8 / math.sqrt(0.05 ** 2 + 1e-8))


STANDARDISING = ("tpo", "tpo_token", "tpo_no_anchor", "group_pg", "grpo", "grpo_token", "grpo_no_kl", "grpo_masked",
                 "dapo", "gspo", "cispo")


@pytest.mark.parametrize("name", STANDARDISING)
def test_every_standardising_algorithm_reads_the_variant(name):
    cfg = compose_config(["task=tabular_single", f"algorithm={name}", "algorithm.std_floor=0.5"]).algorithm
    algorithm = algorithms.build(cfg)
    logp_old = torch.log(torch.full((1, 2, 8), 1 / 8, dtype=torch.float64))
    groups = Groups(PAPER_EXAMPLE.expand(1, 2, 8).clone(), logp_old, Rollout.GROUP)
    if algorithm.token_level:
        groups = Groups(groups.scores, logp_old.unsqueeze(-1).expand(1, 2, 8, 3).clone(), Rollout.GROUP)
    plain = algorithms.build(compose_config(["task=tabular_single", f"algorithm={name}"]).algorithm)
    tempered, sharp = algorithm.signal(groups), plain.signal(groups)
    assert tempered.abs().max() < sharp.abs().max()  # the floor shrinks the winner's signal


@pytest.mark.parametrize("name", ("ppo", "dg", "rloo", "dr_grpo", "pg"))
def test_algorithms_that_do_not_standardise_refuse_the_variants(name):
    with pytest.raises(ConfigError, match=f"algorithm.std_floor is not a hyperparameter of algorithm={name}"):
        build_task(compose_config(["task=token_reversal", f"algorithm={name}", "+algorithm.std_floor=0.1"]))


def test_the_exact_tabular_direction_refuses_a_variant():
    with pytest.raises(ConfigError, match="not valid for algorithm=tpo on an exact"):
        build_task(compose_config(["task=tabular_multi", "algorithm=tpo", "algorithm.rank_scores=true"]))


# ---- optimizer guards and the update-norm diagnostics -----------------------------------------------------------
def _model(seeds=(0, 1)):
    return {k: v.detach().clone() for k, v in transformer.init_params(torch.tensor(seeds), 3, 6).items()}


def _step(opt, params, scale_of_seed, factor=None, active=None):
    for i, (name, p) in enumerate(params.items()):
        g = torch.randn(p.shape, generator=torch.Generator().manual_seed(i), dtype=p.dtype)
        p.grad = g * torch.tensor(scale_of_seed, dtype=p.dtype).view(-1, *[1] * (p.dim() - 1))
    opt.step(active, factor=factor)


def test_skip_guard_moves_nothing_on_a_zero_gradient_and_keeps_the_state():
    params = _model()
    opt = optim.transformer_optimizer(params)
    _step(opt, params, [1.0, 1.0])  # a first step: momentum is non-zero
    before = {k: v.clone() for k, v in params.items()}
    state = {k: {n: t.clone() for n, t in opt.state[p].items()} for k, p in params.items()}
    guard = optim.Guard("skip", 0.0)
    grad_norm = torch.tensor([0.0, 2.0])
    moving = guard.moving(torch.tensor([True, True]), grad_norm)
    assert moving.tolist() == [False, True]
    _step(opt, params, [0.0, 1.0], active=moving)
    for name, p in params.items():
        assert torch.equal(p[0], before[name][0]) and not torch.equal(p[1], before[name][1])
        for key, value in opt.state[p].items():
            assert torch.equal(value[0], state[name][key][0])
    # without the guard, Muon steps along the old momentum although the gradient is exactly zero
    opt.record_updates()
    _step(opt, params, [0.0, 0.0])
    assert (opt.update_norms()["muon"] > 0).all()


def test_scale_guard_multiplies_each_seeds_whole_update():
    plain, scaled = _model(), _model()
    opt_plain, opt_scaled = optim.transformer_optimizer(plain), optim.transformer_optimizer(scaled)
    start = {k: v.clone() for k, v in plain.items()}
    factor = optim.Guard("scale", 0.5).step_factor(torch.tensor([0.1, 3.0]))
    assert factor.tolist() == pytest.approx([0.2, 1.0])
    _step(opt_plain, plain, [1.0, 1.0])
    _step(opt_scaled, scaled, [1.0, 1.0], factor=factor)
    for name in plain:  # Muon's parts and Adam's alike
        full, part = plain[name] - start[name], scaled[name] - start[name]
        assert torch.allclose(part[0], 0.2 * full[0], atol=1e-7) and torch.allclose(part[1], full[1])
        assert torch.equal(opt_plain.state[plain[name]]["mu"], opt_scaled.state[scaled[name]]["mu"])  # momenta alike


def test_update_norms_are_the_norm_of_each_parts_change_over_the_recorded_steps():
    """In float64 the parameters' change is the summed update to ~1e-16: the norms are of the sum over steps (not a
    sum of norms, nor the last step's), and a seed frozen in a step adds nothing for it."""
    params = {k: v.double() for k, v in _model().items()}
    opt = optim.transformer_optimizer(params)
    _step(opt, params, [1.0, 1.0])  # momentum from before the recording
    start_values = {k: v.clone() for k, v in params.items()}
    opt.record_updates()
    for draw, active in ((1, None), (2, torch.tensor([True, False])), (3, None)):
        for name, p in params.items():
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(draw * 100 + len(name)),
                                 dtype=p.dtype)
        opt.step(active)
    norms = opt.update_norms()
    muon = {id(p) for p in opt.parts()["muon"]}
    for part, members in (("muon", [k for k, p in params.items() if id(p) in muon]),
                          ("adam", [k for k, p in params.items() if id(p) not in muon])):
        expected = torch.stack([sum((params[k][s] - start_values[k][s]).pow(2).sum() for k in members).sqrt()
                                for s in range(2)])
        assert torch.allclose(norms[part], expected, rtol=1e-10, atol=0)
    adam_only = optim.MuonAdam(optim.transformer_param_groups(_model(), "none"))
    adam_only.record_updates()
    assert adam_only.parts()["muon"] == [] and adam_only.update_norms()["muon"].isnan().all()
    assert adam_only.update_norms()["adam"].tolist() == [0.0, 0.0]  # nothing applied since the recording began


# exact ℓ_old: a batch without signal has exactly zero gradient, what the guards with τ = 0 look for
TERMINAL = ["task=token_reversal", "task.H=3", "task.batch_size=6", "task.K=4", "seeds=2", "task.reward=terminal",
            "model.d_model=16", "model.layers=1", "model.ffn=32", "task.logp_old=exact"]


def test_episodes_log_the_update_norms_and_a_skip_guard_freezes_zero_gradient_seeds():
    task = build_task(compose_config([*TERMINAL, "algorithm=tpo", "optim.guard=skip"]))
    for step in range(6):
        before = {k: v.detach().clone() for k, v in task.params.items()}
        out = episode(task, step)
        for seed in range(2):
            still = all(torch.equal(v[seed], before[k][seed]) for k, v in task.params.items())
            assert still == (out.metrics["grad_norm"][seed].item() == 0)
            assert (out.metrics["update_muon"][seed].item() == 0) == still
    assert torch.isfinite(out.metrics["update_adam"]).all()


@pytest.mark.parametrize("guard", ["optim.guard=skip", "optim.guard=scale"])
def test_a_guarded_episode_with_a_zero_gradient_moves_nothing(guard):
    task = build_task(compose_config([*TERMINAL, "algorithm=tpo", guard, "optim.guard_tau=0.01"
                                      if guard.endswith("scale") else "optim.guard_tau=0"]))
    zero_gradient_episodes = 0
    for step in range(6):
        before = {k: v.detach().clone() for k, v in task.params.items()}
        out = episode(task, step)
        for seed in torch.nonzero(out.metrics["grad_norm"] == 0).flatten().tolist():
            zero_gradient_episodes += 1
            assert all(torch.equal(v[seed], before[k][seed]) for k, v in task.params.items())
            assert out.metrics["update_muon"][seed] == 0 and out.metrics["update_adam"][seed] == 0
    assert zero_gradient_episodes  # the tiny task has all-fail episodes


def test_adam_control_puts_every_parameter_on_adam():
    task = build_task(compose_config([*TERMINAL, "algorithm=grpo", "optim=adam"]))
    assert task.optimizer.parts()["muon"] == []
    out = episode(task, 0)
    assert out.metrics["update_muon"].isnan().all() and (out.metrics["update_adam"] > 0).all()


@pytest.mark.parametrize("overrides, message", [
    (["optim.guard=scale"], "optim.guard_tau=0.0 is not valid for optim.guard=scale"),
    (["task.partial_credit=0.1", "task.reward=sequential"], "task.partial_credit=0.1 is not valid with task.reward"),
    (["optim.guard_tau=0.5"], "optim.guard_tau=0.5 has no effect with optim.guard=none"),
    (["optim=adam", "+optim.muon_split=matrices"], "optim.muon_split is not valid for optim=adam"),
    (["algorithm.std_prior=0.3"], "algorithm.std_prior=0.3 has no effect without algorithm.std_shrinkage"),
    (["trainer.relapse_above=0.01"], "trainer.relapse_above=0.01 is not valid; expected a number in \\[0.02, 1\\]")])
def test_bad_failure_mode_options_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_task(compose_config([*TERMINAL, "algorithm=tpo", *overrides]))


# ---- reward noise and partial credit ----------------------------------------------------------------------------
def test_reward_noise_perturbs_the_scores_but_not_the_error():
    clean = build_task(compose_config([*TERMINAL, "algorithm=tpo"]))
    noisy = build_task(compose_config([*TERMINAL, "algorithm=tpo", "task.reward_noise=0.01"]))
    a, b = clean.rollout_batch(0), noisy.rollout_batch(0)
    assert torch.equal(a.actions, b.actions) and torch.equal(a.error, b.error) and torch.equal(a.success, b.success)
    noise = b.scores - a.scores
    assert 0.003 < noise.std().item() < 0.03 and noise.abs().min() > 0  # i.i.d. per candidate
    assert torch.equal(noisy.rollout_batch(0).scores, b.scores)  # counter-based: the same draw again
    assert torch.equal(noisy.rollout_batch(0, slice(1, 2)).scores, b.scores[1:])  # independent of chunking


def test_a_single_samples_noise_is_one_draw_for_all_its_tokens():
    noisy = build_task(compose_config([*TERMINAL, "algorithm=ppo", "task.reward_noise=0.01"]))
    clean = build_task(compose_config([*TERMINAL, "algorithm=ppo"]))
    noise = noisy.rollout_batch(0).scores - clean.rollout_batch(0).scores  # (S, B, H)
    assert (noise == noise[..., :1]).all() and noise.abs().min() > 0


def test_partial_credit_grades_wrong_answers_by_token_accuracy():
    y = torch.tensor([[0, 1, 1, 0]])
    actions = torch.tensor([[[0, 1, 1, 0], [0, 1, 0, 0], [1, 0, 0, 1]]])  # right, 3/4 right, all wrong
    rewards = tr.token_rewards(actions, y.unsqueeze(1), "terminal")
    graded = tr.partial_credit(rewards, actions, y.unsqueeze(1), 0.01)
    assert graded[0, :, 0].tolist() == pytest.approx([1.0, 0.0075, 0.0])
    assert (graded == graded[..., :1]).all()  # one value at every token, as the terminal reward
    task = build_task(compose_config([*TERMINAL, "algorithm=tpo", "task.partial_credit=0.01"]))
    batch = task.rollout_batch(0)
    assert torch.equal(batch.error, build_task(compose_config([*TERMINAL, "algorithm=tpo"])).rollout_batch(0).error)
    assert ((batch.scores == 1) | (batch.scores < 0.01)).all()


# ---- solve and relapse events ------------------------------------------------------------------------------------
def test_relapse_events_count_solves_and_relapses():
    steps = np.arange(9)
    errors = np.array([0.9, 0.5, 0.01, 0.1, 0.3, 0.015, 0.25, 0.5, 0.019])
    assert relapse_events(steps, errors, 0.02, 0.2) == {"solved": 3, "relapses": 2, "first_solved": 2,
                                                        "first_relapse": 4}
    assert relapse_events(steps, np.full(9, 0.5), 0.02, 0.2) == {"solved": 0, "relapses": 0, "first_solved": None,
                                                                 "first_relapse": None}
    diverged = errors.copy()
    diverged[3] = np.nan
    assert relapse_events(steps, diverged, 0.02, 0.2)["solved"] == 1


def test_report_counts_seeds_that_solved_and_relapsed():
    matrix = stats.SeedMatrix(np.arange(3), np.arange(4), np.array([[0.5, 0.01, 0.3, 0.01], [0.5, 0.4, 0.3, 0.3],
                                                                     [0.5, 0.01, 0.1, 0.05]]))
    assert stats.per_seed(SOLVED, matrix).tolist() == [1, 0, 1]
    assert stats.per_seed(RELAPSED, matrix).tolist() == [1, 0, 0]
    assert stats.point(SOLVED, matrix) == pytest.approx(2 / 3)
    assert Stat("relapsed", threshold=0.02, relapse_above=0.05).name == "relapsed_0.02_0.05"
    twice = stats.SeedMatrix(np.arange(2), np.arange(6), np.array([[0.01, 0.3, 0.0, 0.5, 0.01, 0.01],
                                                                   [0.5, 0.5, 0.5, 0.5, 0.5, 0.5]]))
    assert stats.per_seed(RELAPSES, twice).tolist() == [2, 0]  # each relapse counts; a seed never solved has none
    assert stats.per_seed(RELAPSED, twice).tolist() == [1, 0]
    assert stats.point(RELAPSES, twice) == 1.0 and RELAPSES.name == "relapses_0.02_0.2"


def test_summary_records_each_seeds_events(tmp_path):
    summary = run_config([*TERMINAL, "algorithm=tpo", "task.steps=5", "trainer.solved_below=0.9",
                          "trainer.relapse_above=0.95"], tmp_path)
    events = summary["events"]
    assert events["solved_below"] == 0.9 and set(events["per_seed"]) == {"0", "1"}
    import pandas as pd

    frame = pd.read_csv(tmp_path / "metrics.csv")
    for seed, rows in frame.groupby("seed"):
        expected = relapse_events(rows.step.to_numpy(), rows.error.to_numpy(), 0.9, 0.95)
        assert events["per_seed"][str(seed)] == expected
    assert json.loads((tmp_path / "summary.json").read_text())["events"] == events


def test_a_run_started_before_the_update_norms_existed_resumes_with_its_own_columns(tmp_path, monkeypatch):
    overrides = [*TERMINAL, "algorithm=tpo", "task.steps=4", "task.checkpoint_every=2"]
    old_metrics = tuple(m for m in tr.METRICS if not m.startswith("update_"))
    monkeypatch.setattr(tr.TokenReversal, "metric_names", old_metrics)
    run_config(overrides, tmp_path / "old")  # uninterrupted, as the code before the new metrics wrote it
    run_killed_at(overrides, tmp_path / "killed", tr.TokenReversal, 3)
    monkeypatch.undo()  # resumed by today's code, which has the new metrics
    summary = run_config([*overrides, "trainer.resume=true"], tmp_path / "killed")
    assert (tmp_path / "killed" / "metrics.csv").read_bytes() == (tmp_path / "old" / "metrics.csv").read_bytes()
    assert summary["status"] == "completed" and "update_muon" not in summary["final"]


# ---- keys added after runs were recorded --------------------------------------------------------------------------
def test_a_neutral_default_leaves_the_identity_and_the_report_signature_unchanged(tmp_path):
    cfg = compose_config([*TERMINAL, "algorithm=tpo"])
    current = rundir.identity(cfg)
    assert "guard" not in current["optim"] and "std_floor" not in current["algorithm"]
    older = json.loads(json.dumps(current))  # what a run recorded before the keys existed holds
    assert rundir.fingerprint(rundir._without_volatile(older)) == rundir.fingerprint(current)
    changed = rundir.identity(compose_config([*TERMINAL, "algorithm=tpo", "optim.guard=skip"]))
    assert rundir.fingerprint(changed) != rundir.fingerprint(current)
    (tmp_path / "config.yaml").write_text("optim:\n  name: muon\nalgorithm:\n  name: tpo\n")
    config = read_config(tmp_path)
    assert config["optim.guard"] == "none" and config["algorithm.std_floor"] == 0.0


def test_the_report_merges_seed_ranges_written_as_0_and_0_0_and_points_shared_cells_to_their_owner(tmp_path):
    from harness.report.load import load_runs
    from harness.report.synthetic import make_config, write_run
    from harness.report.tables import Report, command

    steps = np.arange(0, 100, 10)
    for offset, noise in ((0, 0), (2, 0.0)):
        config = make_config("beyond_amplification", "token_reversal", "tpo", 2, 100, seed_offset=offset,
                             **{"task.reward_noise": noise})
        write_run(tmp_path / f"run{offset}", config, {"error": np.full((2, len(steps)), 0.5)}, steps=steps)
    report = Report(*load_runs([tmp_path]))
    resolved = report.resolve("beyond_amplification", {"algorithm.name": "tpo", "task.reward_noise": 0.0},
                              (4, 100, "test"))
    assert resolved.status == "ok" and sorted(s for seeds in resolved.owners.values() for s in seeds) == [0, 1, 2, 3]
    muon = {"algorithm.name": "tpo", "experiment": "beyond_relapse", "task.H": 7, "task.match": "prompts"}
    assert command("beyond_relapse", muon).startswith("python -m harness -m experiment=table3_terminal ")
    skip = {**muon, "experiment": "beyond_relapse_skip"}
    assert command("beyond_relapse", skip).startswith("python -m harness -m experiment=beyond_relapse_skip ")


def test_a_metric_some_seeds_lack_shows_how_many_seeds_its_value_and_its_pairing_average(tmp_path, monkeypatch):
    """Table 3's seeds 0-3 predate the update norms: a cell must not pass off their mean over the other seeds as the
    cell's (the report marks "n=" beside the value and beside the paired difference)."""
    from harness.report import tables
    from harness.report.load import load_runs
    from harness.report.specs import Table
    from harness.report.synthetic import make_config, write_run

    monkeypatch.setattr(tables, "preset_budget", lambda preset: (4, 100))  # the runs below: 4 seeds × 100 steps
    steps = np.arange(0, 100, 10)
    norms = np.full((2, len(steps)), 0.02)
    runs = (("beyond_amplification", 0, {}), ("beyond_amplification", 2, {"update_muon": norms}),
            ("beyond_amplification_floor", 0, {"update_muon": np.full((4, len(steps)), 0.01)}))
    runs[2][2]["update_muon"][3] = np.nan  # and the floor's seed 3 diverged
    for preset, offset, columns in runs:  # σ's seeds 0-1 have no update norms
        seeds = len(next(iter(columns.values()))) if columns else 2
        config = make_config(preset, "token_reversal", "tpo", seeds, 100, seed_offset=offset,
                             **{"task.reward_noise": 0.0})
        write_run(tmp_path / f"{preset}{offset}", config, {"error": np.full((seeds, len(steps)), 0.5), **columns},
                  steps=steps)
    table = Table("norms", "norms", "beyond_amplification",
                  rows=({"algorithm.name": "tpo", "experiment": "beyond_amplification"},
                        {"algorithm.name": "tpo", "experiment": "beyond_amplification_floor"}),
                  stats=(Stat("mean", metric="update_muon", percent=False),), where={"task.reward_noise": 0.0},
                  reference={"experiment": "beyond_amplification"})
    cells = tables.Report(*load_runs([tmp_path])).evaluate(table).set_index("row")
    sigma, floor = cells.iloc[0], cells.iloc[1]
    assert (sigma.seeds, sigma.seeds_run, floor.seeds, floor.seeds_run, floor.paired_seeds) == (2, 4, 3, 4, 1)
    stat = table.stats[0]
    assert tables.cell_text(stat, sigma).endswith(" n=2") and tables.cell_text(stat, floor).endswith(" n=3")
    assert tables.paired_text(stat, floor) == "-0.0100 [-0.0100, -0.0100] P=1.00 n=1"  # seed 2 only


# ---- how hard a noise-only group pulls (harness/report/group_pull.py) -------------------------------------------
def test_group_pull_of_real_groups_matches_the_closed_form_and_noise_pulls_as_the_variant_says():
    from harness.report import group_pull

    rows, columns, ratios = group_pull.table(k=8, noise=(0.01,), draws=4096)
    by_column = {column: [row[i] for row in ratios] for i, column in enumerate(columns)}

    def tpo_pull(m: int, k: int = 8) -> float:  # ‖p − q‖ with p uniform, q ∝ exp(u), u the z-scores of m ones
        u = [math.sqrt((k - m) / m)] * m + [-math.sqrt(m / (k - m))] * (k - m)
        z = sum(math.exp(x) for x in u)
        return math.sqrt(sum((math.exp(x) / z - 1 / k) ** 2 for x in u))

    assert by_column["TPO, σ"][:7] == pytest.approx([tpo_pull(m) / tpo_pull(1) for m in range(1, 8)], rel=1e-5)
    assert by_column["GRPO, σ"] == pytest.approx([1.0] * 8, rel=1e-4)  # z-scores: Σ A² = K in every group
    assert by_column["GRPO, ranks"][7] == pytest.approx(1.0, rel=1e-4)  # ranks cannot tell noise from a win
    # floor 0.1: A = centred / 0.1, so the pull is E[popstd of 8 normals] / 0.1, in closed form with σ = 0.01
    expected_std = 0.01 * math.sqrt(2 / 8) * math.gamma(4) / math.gamma(3.5)
    assert by_column["GRPO, σ floor"][7] == pytest.approx(expected_std / 0.1, rel=0.02)
    assert rows[-1] == "noise only, σ = 0.01" and by_column["TPO, σ floor"][:7] == by_column["TPO, σ"][:7]


def test_ranks_lose_a_real_winners_signal_under_noise_and_sigma_keeps_it():
    """A lone winner plus noise 0.01: under ranks it always has rank 8 and the losers ranks 1-7 in some order, so its
    gradient's component along the clean one and the rest are fixed numbers (closed forms below); σ keeps it whole."""
    from harness.report import group_pull

    rows, columns, cells = group_pull.real_under_noise(noise=(0.01,), right=(1,), draws=16)
    by_column = dict(zip(columns, cells[0]))
    u = [(r - 4.5) / math.sqrt(5.25) for r in range(1, 9)]  # standardised ranks 1..8; the winner's is u[-1]
    clean_u = [math.sqrt(7)] + [-1 / math.sqrt(7)] * 7
    assert by_column["GRPO, ranks"] == pytest.approx((u[-1] / math.sqrt(7), math.sqrt(1 - u[-1] ** 2 / 7)), rel=1e-4)

    def tpo_gradient(scores):  # p − q at a uniform p, q ∝ exp(u) (η = 1), the winner first
        z = sum(math.exp(x) for x in scores)
        return np.array([1 / 8 - math.exp(x) / z for x in scores])

    clean, noisy = tpo_gradient(clean_u), tpo_gradient([u[-1], *u[:-1]])  # a loser's rank does not change the sums
    along = clean @ noisy / (clean @ clean)
    rest = np.linalg.norm(noisy - along * clean) / np.linalg.norm(clean)
    assert by_column["TPO, ranks"] == pytest.approx((along, rest), rel=1e-4)
    for label in ("TPO, σ", "GRPO, σ", "TPO, σ floor", "GRPO, shrunk σ"):
        assert by_column[label][0] == pytest.approx(1.0, abs=0.01) and by_column[label][1] < 0.05
    assert rows == ["1 of 8 right + noise σ = 0.01"]
    rows, _, cells = group_pull.real_under_noise(("grpo",), k=4, noise=(0.01,), draws=8)  # default m: 1, K/2, K − 1
    assert rows == [f"{m} of 4 right + noise σ = 0.01" for m in (1, 2, 3)] and np.isfinite(cells).all()
    with pytest.raises(ValueError, match="right: every m must be in 1..3"):
        group_pull.real_under_noise(("grpo",), k=4, right=(4,))


def test_group_pull_refuses_an_unknown_algorithm_and_writes_its_command(tmp_path, capsys):
    from harness.report import group_pull

    for name in ("tpoo", "ppo"):  # unknown; known, but it compares no group
        with pytest.raises(SystemExit):
            group_pull.main(["--algorithms", name])
        assert (f"group_pull: --algorithms {name}: not an algorithm that standardises group scores; valid choices: "
                "tpo, " in capsys.readouterr().err)
    valid = group_pull.standardising()
    assert set(valid) >= {"tpo", "grpo", "dapo", "group_pg"} and "dg" not in valid
    out = tmp_path / "pull.md"
    group_pull.main(["--algorithms", "grpo", "--noise", "0.01", "--draws", "64", "--out", str(out)])
    text = out.read_text()
    printed = capsys.readouterr().out.split("\n\n")  # both tables, as the file has them
    assert text.startswith("Generated by `python -m harness.report.group_pull --algorithms grpo --K 8 --noise 0.01 "
                           "--draws 64 --seed 0`") and len(printed) == 2 and all(table in text for table in printed)
