"""The TRL trainer integration (harness/llm): whole groups per micro-batch, every loss from algorithms/, the anchor.

A tiny random Qwen3 (tests/llm_helpers.py) generates real completions; scores come from test reward functions."""

from __future__ import annotations

import itertools

import pytest
import torch

import algorithms
import loss_calls
from algorithms import Groups, Rollout, losses
from algorithms.scores import zscore_advantages
from conftest import compose_config
from harness.trainers.trl import build_trainer
from llm_helpers import tiny_overrides


def alternating_score():
    """Scores 0, 1, 0, 1, ... in completion order: every group (K even) has variance."""
    values = itertools.cycle([0.0, 1.0])
    return lambda text, row: next(values)


def make_trainer(tiny_llm, gsm8k_dir, run_dir, *overrides, score=None):
    """Full fine-tuning without the reference KL unless ``overrides`` set task.lora_rank / task.ref_kl (last wins)."""
    cfg = compose_config([*tiny_overrides(tiny_llm, "gsm8k", gsm8k_dir), "task.lora_rank=0", "task.ref_kl=0",
                          *overrides])
    trainer, task, epochs = build_trainer(cfg, run_dir)
    if score is not None:
        task.score = score  # the reward function looks the scorer up at call time
    trainer.model.train()
    return trainer, cfg


def micro_batches(trainer) -> list[dict]:
    """The micro-batches of the first step, as the training loop receives them."""
    batch = next(iter(trainer.get_train_dataloader()))
    slices = []
    for step in range(trainer.args.steps_per_generation):
        trainer._step = step
        slices.append(trainer._prepare_inputs(batch))
    trainer._step = 0
    return slices


def skill(scores: torch.Tensor) -> torch.Tensor:
    """u = (s − mean s) / popstd(s) over each group, 0 where popstd ≤ 1e-6: written here from the formula."""
    centred = scores - scores.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    return torch.where(std > 1e-6, centred / std.clamp_min(1e-12), torch.zeros_like(centred))


def independent_tpo_loss(logp, logp_old, scores, eta, anchor=True) -> torch.Tensor:
    """−mean over groups of Σ_k q_k log softmax_k(ℓ), q ∝ p_old·exp(u/η) (softmax(u/η) without the anchor)."""
    log_weights = skill(scores) / eta + (logp_old.detach() if anchor else 0.0)
    q = torch.softmax(log_weights, -1)
    return -(q * torch.log_softmax(logp, -1)).sum(-1).mean(-1)


def independent_grpo_loss(logp, logp_old, scores, clip_eps, beta, log_ratio_clip) -> torch.Tensor:
    """−mean over groups of Σ_k [min(ρA, clip(ρ, 1±ε)A) − β(e^{−x} + x − 1)], x = clip(ℓ − ℓ_old), ρ = e^x,
    A = (s − mean s)/(popstd + 1e-8), 0 in zero-variance groups."""
    centred = scores - scores.mean(-1, keepdim=True)
    std = centred.pow(2).mean(-1, keepdim=True).sqrt()
    advantages = torch.where(std > 1e-6, centred / (std + 1e-8), torch.zeros_like(centred))
    x = (logp - logp_old.detach()).clamp(-log_ratio_clip, log_ratio_clip)
    ratio = x.exp()
    objective = torch.minimum(ratio * advantages, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    return -(objective - beta * (torch.exp(-x) + x - 1)).sum(-1).mean(-1)


def independent_reference_kl(token_logp, token_logp_ref, mask) -> torch.Tensor:
    """k3 per token, exp(r − ℓ) − (r − ℓ) − 1, averaged over each completion's unmasked tokens, then over the
    completions of the micro-batch."""
    delta = token_logp_ref - token_logp
    per_token = delta.exp() - delta - 1
    mask = mask.to(per_token.dtype)
    return ((per_token * mask).sum(-1) / mask.sum(-1)).mean()


def reference_token_logps(model, inputs) -> torch.Tensor:
    """Completion-token log-probs from a plain forward pass (independent of TRL's fused head)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    T = inputs["completion_ids"].size(1)
    logits = model(input_ids=ids, attention_mask=mask).logits[:, -T - 1:-1].float()
    return logits.log_softmax(-1).gather(-1, inputs["completion_ids"].unsqueeze(-1)).squeeze(-1)


@pytest.mark.parametrize("groups_per_micro_batch", [1, 2])
def test_every_micro_batch_holds_whole_groups(tiny_llm, gsm8k_dir, tmp_path, groups_per_micro_batch):
    trainer, cfg = make_trainer(tiny_llm, gsm8k_dir, tmp_path, "task.batch_size=4", "task.K=3",
                                f"task.micro_batch_groups={groups_per_micro_batch}")
    prompts = [row["prompt"][-1]["content"] for row in next(iter(trainer.get_train_dataloader()))]
    assert prompts == [p for p in prompts[::3] for _ in range(3)]  # the sampler: K copies of a prompt, adjacent
    slices = micro_batches(trainer)
    assert len(slices) == 4 // groups_per_micro_batch  # accumulation steps of one update
    seen = []
    for inputs in slices:
        ids = inputs["prompt_ids"].view(groups_per_micro_batch, 3, -1)
        assert (ids == ids[:, :1]).all()  # each group's K rows share one prompt
        assert inputs["scores"].shape == (3 * groups_per_micro_batch,)
        seen += [tuple(group[0].tolist()) for group in ids]
    assert len(set(seen)) == 4  # the update sees every prompt exactly once: no group was split


@pytest.mark.parametrize("algorithm", ["tpo", "grpo", "tpo_no_anchor", "group_pg", "grpo_masked", "rloo", "dr_grpo",
                                       "dapo", "gspo", "cispo"])
def test_trainer_loss_equals_the_algorithms_loss(tiny_llm, gsm8k_dir, tmp_path, algorithm):
    """Micro-batches of whole groups accumulate the full batch's loss exactly, including the aggregations that
    divide by a count over the whole batch (DAPO's and CISPO's token mean, masked GRPO's informative groups)."""
    eta = ["algorithm.eta=0.5"] if algorithm.startswith("tpo") else []  # η ≠ 1: u/η and u·η differ
    trainer, cfg = make_trainer(tiny_llm, gsm8k_dir, tmp_path, f"algorithm={algorithm}", "task.K=4", *eta,
                                score=alternating_score())
    slices = micro_batches(trainer)  # 2 micro-batches of 1 group each
    model, hp = trainer.model, cfg.algorithm
    actual = sum(trainer.compute_loss(model, inputs) for inputs in slices)

    token_logp = torch.cat([reference_token_logps(model, inputs) for inputs in slices])
    mask = torch.cat([inputs["completion_mask"] for inputs in slices])
    scores = torch.cat([inputs["scores"] for inputs in slices]).view(1, 2, 4)
    logp = (token_logp * mask).sum(-1).view(1, 2, 4)
    assert scores.std(-1).min() > 0
    if algorithm.startswith("tpo"):
        expected = loss_calls.tpo_loss(logp, logp.detach(), scores, hp.eta, anchor=algorithm == "tpo",
                                   zero_variance=hp.zero_variance)
        written = independent_tpo_loss(logp, logp, scores, 0.5, anchor=algorithm == "tpo")
        torch.testing.assert_close(actual, written.squeeze(0), rtol=1e-5, atol=1e-6)
    elif algorithm == "group_pg":
        expected = loss_calls.group_pg_loss(logp, scores, hp.eta, hp.zero_variance)
    elif algorithm == "grpo":
        expected = loss_calls.grpo_loss(logp, logp.detach(), zscore_advantages(scores), hp.clip_eps, hp.beta,
                                        hp.log_ratio_clip)
        written = independent_grpo_loss(logp, logp, scores, hp.clip_eps, hp.beta, hp.log_ratio_clip)
        torch.testing.assert_close(actual, written.squeeze(0), rtol=1e-5, atol=1e-6)
    else:  # the registry's loss on the whole batch at once (per token for the token-level methods)
        method, lengths = algorithms.build(hp), mask.sum(-1).float().view(1, 2, 4)
        if method.token_level:
            shape = (1, 2, 4, token_logp.size(-1))
            groups = Groups(scores, token_logp.detach().view(shape), Rollout.GROUP, mask=mask.view(shape),
                            lengths=lengths, max_length=trainer.max_completion_length)
            expected, _ = method.loss(token_logp.view(shape), groups, method.signal(groups))
        else:
            groups = Groups(scores, logp.detach(), Rollout.GROUP, lengths=lengths)
            expected, _ = method.loss(logp, groups, method.signal(groups))
    torch.testing.assert_close(actual, expected.squeeze(0), rtol=1e-5, atol=1e-6)


def test_group_loss_is_the_tpo_loss_on_the_same_tensors(tiny_llm, gsm8k_dir, tmp_path):
    trainer, cfg = make_trainer(tiny_llm, gsm8k_dir, tmp_path, "task.K=4", "task.sequence_logprob=mean",
                                "algorithm.eta=3")
    generator = torch.Generator().manual_seed(0)
    token_logp = -torch.rand(8, 5, generator=generator)
    token_logp_old = -torch.rand(8, 5, generator=generator)
    mask = (torch.rand(8, 5, generator=generator) > 0.3).long()
    scores = torch.rand(8, generator=generator)
    loss, kl = trainer.group_loss(token_logp, token_logp_old, None, mask, scores)
    shape = (1, 2, 4)
    expected = loss_calls.tpo_loss(losses.sequence_logprob(token_logp, mask, True).view(shape),
                               losses.sequence_logprob(token_logp_old, mask, True).view(shape), scores.view(shape),
                               cfg.algorithm.eta, zero_variance=cfg.algorithm.zero_variance)
    assert torch.equal(loss, expected.squeeze(0)) and kl is None
    lengths = mask.sum(-1)  # length-normalised sequence log-probs, and the target from the formula with η = 3
    written = independent_tpo_loss(((token_logp * mask).sum(-1) / lengths).view(shape),
                                   ((token_logp_old * mask).sum(-1) / lengths).view(shape), scores.view(shape), 3.0)
    torch.testing.assert_close(loss, written.squeeze(0), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("algorithm", ["tpo", "grpo"])
def test_zero_variance_groups_give_zero_first_epoch_gradient(tiny_llm, gsm8k_dir, tmp_path, algorithm):
    def gradients(score) -> list[torch.Tensor]:
        trainer, _ = make_trainer(tiny_llm, gsm8k_dir, tmp_path, f"algorithm={algorithm}", "task.K=4", score=score)
        trainer.model.zero_grad(set_to_none=True)
        for inputs in micro_batches(trainer):
            trainer.compute_loss(trainer.model, inputs).backward()
        return [p.grad for p in trainer.model.parameters() if p.requires_grad]

    assert all(g is not None and torch.count_nonzero(g) == 0 for g in gradients(lambda text, row: 0.5))
    assert any(torch.count_nonzero(g) > 0 for g in gradients(alternating_score()))


def test_extra_epochs_keep_the_rollout_time_anchor(tiny_llm, gsm8k_dir, tmp_path):
    trainer, _ = make_trainer(tiny_llm, gsm8k_dir, tmp_path, "algorithm.epochs=2", "task.K=4", "optim.lr=0.05",
                              "task.steps=1", score=alternating_score())
    calls = []
    group_loss = trainer.group_loss

    def recording(token_logp, token_logp_old, *args):
        calls.append((token_logp.detach().clone(), token_logp_old.clone()))
        return group_loss(token_logp, token_logp_old, *args)

    trainer.group_loss = recording
    trainer.train()
    assert len(calls) == 4  # 2 micro-batches × 2 epochs
    (first_new, first_old), (second_new, second_old) = calls[0], calls[2]  # micro-batch 0 in epochs 1 and 2
    assert torch.equal(first_old, second_old)  # the anchor is frozen across epochs
    torch.testing.assert_close(first_new, first_old, rtol=0, atol=1e-5)  # ... and is the rollout-time policy
    first, second = trainer.update_metrics  # the algorithm's metrics of each update: the second has moved
    assert first["ratio_dev"] < 1e-4 and second["ratio_dev"] > 1e-3 and second["kl_snapshot"] > 0
    assert trainer.step_metrics()["ratio_dev"] == second["ratio_dev"]
    assert not torch.allclose(second_new, second_old, atol=1e-4)  # the policy moved after the first update


@pytest.mark.parametrize("algorithm,constant", [("tpo", True), ("grpo", True), ("tpo", False)])
def test_reference_kl_enters_the_loss_with_its_k3_value_and_gradient(tiny_llm, gsm8k_dir, tmp_path, algorithm,
                                                                     constant):
    """task.ref_kl = λ > 0 (LoRA policy; the reference is the base model, adapter disabled): each micro-batch's loss
    is the algorithm's loss + λ·KL, KL the k3 estimate per token averaged over each completion's tokens and then
    over the completions; value, logged KL and gradient against that sum computed here. With constant scores the
    first-epoch policy gradient is zero (TPO: p = q; GRPO: A = 0), so the gradient is λ·∇KL alone."""
    lam = 0.5
    eta = ["algorithm.eta=0.5"] if algorithm == "tpo" else []
    score = (lambda text, row: 0.5) if constant else alternating_score()
    trainer, cfg = make_trainer(tiny_llm, gsm8k_dir, tmp_path, f"algorithm={algorithm}", "task.K=4", *eta,
                                "task.lora_rank=4", f"task.ref_kl={lam}", score=score)
    model, hp = trainer.model, cfg.algorithm
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():  # LoRA starts at B = 0, i.e. at the reference: move it off so that KL > 0
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.copy_(0.05 * torch.randn(param.shape, generator=generator))
    slices = micro_batches(trainer)  # 2 micro-batches of 1 group each
    params = [p for p in model.parameters() if p.requires_grad]
    model.zero_grad(set_to_none=True)
    trainer._kl_sum = 0.0
    actual = 0.0
    for inputs in slices:
        loss = trainer.compute_loss(model, inputs)
        loss.backward()
        actual = actual + loss.detach()
    actual_grads = [p.grad.clone() for p in params]

    expected, kls = 0.0, []
    for inputs in slices:
        new = reference_token_logps(model, inputs)
        with torch.no_grad(), model.disable_adapter():
            ref = reference_token_logps(model, inputs)
        torch.testing.assert_close(inputs["ref_per_token_logps"], ref, rtol=1e-5, atol=1e-5)  # TRL's reference
        mask = inputs["completion_mask"]
        logp = (new * mask).sum(-1).view(1, -1, 4)
        scores = inputs["scores"].view(1, -1, 4)
        if algorithm == "tpo":
            policy = independent_tpo_loss(logp, logp, scores, 0.5)
        else:
            policy = independent_grpo_loss(logp, logp, scores, hp.clip_eps, hp.beta, hp.log_ratio_clip)
        kl = independent_reference_kl(new, ref, mask)
        kls.append(kl.detach())
        expected = expected + (policy.squeeze(0) + lam * kl) / len(slices)  # accumulation: mean of micro-batches
    expected_grads = torch.autograd.grad(expected, params)
    kl_mean = torch.stack(kls).mean()
    assert kl_mean > 1e-3  # the policy is off the reference
    torch.testing.assert_close(actual, expected.detach(), rtol=1e-5, atol=1e-6)
    assert trainer._kl_sum == pytest.approx(kl_mean.item(), rel=1e-4)
    for got, want in zip(actual_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    if constant:
        kl_grads = torch.autograd.grad(lam * sum(independent_reference_kl(reference_token_logps(model, inputs),
                                                                          inputs["ref_per_token_logps"],
                                                                          inputs["completion_mask"])
                                                 for inputs in slices) / len(slices), params)
        for got, want in zip(actual_grads, kl_grads):
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert max(g.abs().max() for g in actual_grads) > 1e-4
