"""TPOTrainer and TPOConfig (harness/llm/tpo_trl.py) as a TRL user runs them: a model path, a dataset of chat
prompts, a reward function and TRL's own training loop, on the tiny random Qwen3 of tests/llm_helpers.py."""

from __future__ import annotations

import pytest
import torch

from common.checks import ConfigError
from conftest import compose_config

REWARDS = [0.0, 1.0, 0.5, 0.0, 0.25, 0.25, 0.25, 0.25]  # per generation batch: a spread group, a zero-variance one
ETA = 0.5  # η ≠ 1, so that u/η and u·η differ


def fixed_rewards(prompts, completions, **columns):
    return REWARDS[:len(completions)]


def tpo_trainer(tiny_llm, tmp_path, **settings):
    from datasets import Dataset

    from harness.llm import TPOConfig, TPOTrainer

    prompts = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {n} plus {n}?"}]}
                                 for n in range(8)])
    args = TPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, seed=0, report_to="none",
                     save_strategy="no", disable_tqdm=True, logging_steps=1, gradient_checkpointing=False,
                     num_generations=4, max_completion_length=8, **settings)
    return TPOTrainer(model=str(tiny_llm), reward_funcs=fixed_rewards, args=args, train_dataset=prompts)


def skill(scores: torch.Tensor) -> torch.Tensor:
    """u = (s − mean s) / popstd(s) within the group, 0 where popstd ≤ 1e-6: written here from the formula."""
    centred = scores - scores.mean()
    std = centred.pow(2).mean().sqrt()
    return centred / std if std > 1e-6 else torch.zeros_like(centred)


def test_the_gradient_on_each_groups_log_probs_is_p_theta_minus_the_target(tiny_llm, tmp_path):
    """Two rollout batches of 2 prompts × K = 4, each trained for num_iterations = 2 epochs in 2 micro-batches of one
    group. For every training forward, the gradient of the update's loss on a completion's sequence log-prob
    ℓ_k = Σ_t log π(y_t) (the same on each of its tokens) equals (p_θ − q)_k / 2 (mean over 1 group, 2 accumulation
    steps), p_θ = softmax(ℓ) over the group and q ∝ p_old·exp(u/η), computed here from the forwards' own log-probs:
    p_old from the first epoch's forward of the same micro-batch (the parameters have not moved yet), u from the
    rewards. Bugs caught: u·η for u/η, Bessel's std, a flipped sign, no accumulation scaling, an anchor that
    follows the policy in the second epoch (q from ℓ), TRL's shuffle of completions across groups."""
    trainer = tpo_trainer(tiny_llm, tmp_path, tpo_eta=ETA, per_device_train_batch_size=4,
                          gradient_accumulation_steps=2, num_iterations=2, max_steps=4, learning_rate=0.02)
    forwards = []  # (token log-probs kept with their gradient, completion mask) of every training forward
    logps_and_entropies = trainer._get_per_token_logps_and_entropies

    def recording(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        logps, entropies, aux = logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if logps.requires_grad:
            logps.retain_grad()
            forwards.append((logps, attention_mask[:, -logits_to_keep:].float()))
        return logps, entropies, aux

    trainer._get_per_token_logps_and_entropies = recording
    trainer.train()

    assert len(forwards) == 8  # 2 rollout batches × 2 epochs × 2 micro-batches, in that order
    moved = 0.0
    for index, (logps, mask) in enumerate(forwards):
        batch, epoch, micro = index // 4, index // 2 % 2, index % 2
        first_epoch_logps, _ = forwards[4 * batch + micro]
        ell = (logps * mask).sum(-1).detach()
        ell_old = (first_epoch_logps * mask).sum(-1).detach()
        scores = torch.tensor(REWARDS[4 * micro:4 * micro + 4])
        q = torch.softmax(ell_old + skill(scores) / ETA, -1)
        expected = (torch.softmax(ell, -1) - q) / 2
        torch.testing.assert_close(logps.grad, expected[:, None] * mask, rtol=1e-4, atol=1e-7)
        if micro == 0 and epoch == 0:
            assert expected.abs().max() > 1e-3  # the spread group pulls the policy at θ_old ...
        if micro == 1 and epoch == 0:
            assert expected.abs().max() < 1e-6  # ... the zero-variance one does not (q = p_old)
        moved = max(moved, (ell - ell_old).abs().max().item())
    assert moved > 1e-3  # the second epoch's policy is not the anchor's: the anchor is not the current ℓ
    assert all(torch.isfinite(torch.tensor(entry["loss"])) for entry in trainer.state.log_history if "loss" in entry)


def test_tpo_config_defaults_to_the_projects_eta_and_refuses_bad_settings(tiny_llm, tmp_path):
    from trl import GRPOConfig

    from harness.llm import TPOConfig, TPOTrainer

    assert TPOConfig(output_dir=str(tmp_path), use_cpu=True).tpo_eta == compose_config(["algorithm=tpo"]).algorithm.eta
    with pytest.raises(ConfigError, match=r"^tpo_eta=0 is not valid"):
        TPOConfig(output_dir=str(tmp_path), use_cpu=True, tpo_eta=0)
    with pytest.raises(ConfigError, match=r"^per_device_train_batch_size=2 is not valid with num_generations=4"):
        tpo_trainer(tiny_llm, tmp_path, per_device_train_batch_size=2, gradient_accumulation_steps=2)
    with pytest.raises(ConfigError, match=r"^args=GRPOConfig is not valid for TPOTrainer; valid choices: a TPOConfig"):
        TPOTrainer(model=str(tiny_llm), reward_funcs=fixed_rewards, args=GRPOConfig(output_dir=str(tmp_path),
                                                                                    use_cpu=True))
