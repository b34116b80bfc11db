"""``RLVRTrainer``: the harness's run of any group algorithm on TRL (``GroupLossTrainer`` of
``harness/llm/tpo_trl.py``: whole groups per micro-batch, the loss from ``algorithms/``), plus what a run records.

What it adds to ``GroupLossTrainer``:

* Loss choice. ``task.loss_impl=project`` (default) runs the registry algorithm's loss on sequence log-probs (or
  their length-normalised mean, ``task.sequence_logprob=mean``); ``task.loss_impl=trl`` keeps TRL's own GRPO loss.
  ``task.ref_kl`` is TRL's ``beta``: λ·KL(π_θ ‖ π_ref) (k3, per-token mean) for every algorithm.
* Metrics. Each rollout batch's (reward, solved and zero-variance fractions, lengths, truncation) and each update's
  (loss, gradient norm before clipping, reference KL, and the algorithm's ``Algorithm.metrics``: ratio_dev,
  kl_snapshot, clip_fraction, each the mean over the update's micro-batches), for the step's row and log line.
* The held-out score: greedy completions of held-out prompts, each device decoding its share.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from transformers import GenerationConfig
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation

from algorithms import Algorithm
from algorithms.scores import ZERO_VARIANCE_THRESHOLD, population_std
from harness.llm.tpo_trl import GroupLossTrainer


def completion_texts(completions: list) -> list[str]:
    """TRL hands conversational completions as message lists; the text is the last message's content."""
    return [c[-1]["content"] if isinstance(c, list) else c for c in completions]


def make_reward_function(task):
    """The task's scorer as a TRL reward function (one float per completion, dataset columns as keyword lists)."""

    def reward(prompts, completions, **columns):
        rows = [{name: columns[name][i] for name in task.columns} for i in range(len(completions))]
        return [task.score(text, row) for text, row in zip(completion_texts(completions), rows)]

    reward.__name__ = f"{task.name}_score"
    return reward


class RLVRTrainer(GroupLossTrainer):
    """GroupLossTrainer with the task's loss settings and TRL's own loss as an option; records per-step metrics."""

    def __init__(self, *args, algorithm: Algorithm, task_settings, **kwargs):
        self.loss_impl = task_settings.loss_impl
        self.rollout_metrics: dict[str, float] = {}
        self.update_metrics: list[dict[str, float]] = []  # one per optimizer step of the current rollout batch
        self._loss_sum = self._kl_sum = 0.0
        self._metric_sums: dict[str, float] = {}  # the algorithm's metrics' accumulation-scaled sums over the update
        super().__init__(*args, algorithm=algorithm, length_normalized=task_settings.sequence_logprob == "mean",
                         **kwargs)

    # ---- batches ------------------------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        if self.model.training:
            self._record_rollout(self.rewards, output)
        return output

    def _record_rollout(self, rewards: torch.Tensor, output: dict[str, Any]) -> None:
        mask = output["completion_mask"]
        lengths = mask.sum(1)
        last = output["completion_ids"].gather(1, (lengths - 1).clamp_min(0).unsqueeze(1)).squeeze(1)
        truncated = ~torch.isin(last, torch.tensor(self.eos_token_ids, device=last.device))
        lengths, truncated = gather(lengths.float()), gather(truncated.float())
        groups = rewards.view(-1, self.num_generations).float()
        self.rollout_metrics = {
            "reward_mean": groups.mean().item(),
            "frac_solved": (groups >= 1.0).float().mean().item(),
            "frac_zero_var": (population_std(groups) <= ZERO_VARIANCE_THRESHOLD).float().mean().item(),
            "completion_length": lengths.mean().item(),
            "truncated": truncated.mean().item(),
        }
        self.update_metrics = []

    # ---- loss ---------------------------------------------------------------------------------------------------
    def group_loss(self, token_logp: torch.Tensor, token_logp_old: torch.Tensor, token_logp_ref: torch.Tensor | None,
                   mask: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """GroupLossTrainer's, its KL and the algorithm's metrics added, accumulation-scaled, to the update's."""
        loss, kl = super().group_loss(token_logp, token_logp_old, token_logp_ref, mask, scores)
        scale = self.accumulation_steps()
        if kl is not None:
            self._kl_sum += kl.item() / scale
        for name, value in self.loss_metrics.items():
            self._metric_sums[name] = self._metric_sums.get(name, 0.0) + value.item() / scale
        return loss, kl

    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        if self.loss_impl == "trl":
            return GRPOTrainer._compute_loss(self, model, inputs)
        return super()._compute_loss(model, inputs)

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        self._loss_sum += loss.item()  # accumulation-scaled: the sum over an update is its full-batch loss
        return loss

    def _get_grad_norm(self, model, grad_norm=None):
        """Called once per optimizer step with the pre-clip norm: closes that update's metrics."""
        grad_norm = super()._get_grad_norm(model, grad_norm)
        names = list(self._metric_sums)
        sums = self.accelerator.reduce(torch.tensor([self._loss_sum, self._kl_sum, *self._metric_sums.values()],
                                                    device=self.accelerator.device), reduction="mean").tolist()
        self.update_metrics.append({"loss": sums[0], "grad_norm": float(grad_norm),
                                    "kl_ref": sums[1] if self.beta and self.loss_impl == "project" else math.nan,
                                    **dict(zip(names, sums[2:]))})
        self._loss_sum = self._kl_sum = 0.0
        self._metric_sums = {}
        return grad_norm

    def step_metrics(self) -> dict[str, float]:
        """The finished step's metrics: its rollouts', its first update's loss, gradient norm and KL, and the
        algorithm's metrics of its last update (``Algorithm.metrics``, each the mean over the update's micro-batches;
        0 at the first update, where θ = θ_old), which the step's log line shows."""
        own = ("loss", "grad_norm", "kl_ref")
        first = self.update_metrics[0] if self.update_metrics else {}
        last = self.update_metrics[-1] if self.update_metrics else {}
        reward = self.rollout_metrics.get("reward_mean", math.nan)
        return {"error": 1.0 - reward, **self.rollout_metrics, **{name: first.get(name, math.nan) for name in own},
                **{name: value for name, value in last.items() if name not in own}}

    # ---- evaluation ---------------------------------------------------------------------------------------------
    def held_out_score(self, task, rows: list[dict[str, Any]], batch_size: int) -> float:
        """Mean score of greedy completions on ``rows``, each device decoding its share."""
        tokenizer = self.processing_class
        mine = rows[self.accelerator.process_index::self.accelerator.num_processes]
        greedy = GenerationConfig(do_sample=False, max_new_tokens=self.max_completion_length,
                                  pad_token_id=tokenizer.pad_token_id, eos_token_id=self.eos_token_ids)
        scores = []
        with (unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                          gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                          gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs)
              as model, torch.no_grad(), self._dist.summon_full_params(self.model_wrapped, recurse=False)):
            was_training = model.training
            model.eval()
            for start in range(0, len(mine), batch_size):
                chunk = mine[start:start + batch_size]
                encoded = tokenizer.apply_chat_template([row["prompt"] for row in chunk], add_generation_prompt=True,
                                                        tokenize=True, return_dict=True, return_tensors="pt",
                                                        padding=True, **self.chat_template_kwargs)
                encoded = {k: v.to(self.accelerator.device) for k, v in encoded.items()}
                generated = model.generate(**encoded, generation_config=greedy)
                texts = tokenizer.batch_decode(generated[:, encoded["input_ids"].size(1):], skip_special_tokens=True)
                scores += [task.score(text, row) for text, row in zip(texts, chunk)]
            model.train(was_training)
        everyone = gather_object(scores)
        return sum(everyone) / len(everyone) if everyone else math.nan
