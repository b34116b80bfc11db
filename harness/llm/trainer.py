"""TRL's ``GRPOTrainer`` with whole prompt groups in every micro-batch and every loss from ``algorithms/``.

What changes against TRL (everything else, generation included, is TRL's):

* Group integrity. TRL's sampler already puts the K completions of a prompt next to each other and every device's
  share of a step is a whole number of groups (``per_device_train_batch_size`` is a multiple of K), but TRL then
  shuffles the generation batch across groups before cutting it into micro-batches. Here it is cut in order, so
  each micro-batch holds whole groups, and every generation batch is checked for it.
* Scores. The raw rewards of each completion travel with the batch (``scores``); the loss standardises them per
  group itself (population std, zero variance → 0), instead of TRL's advantages (Bessel std, + 1e-4).
* Loss (``task.loss_impl=project``): the registry algorithm's loss on sequence log-probs ℓ = Σ_t log π(y_t) (or
  their length-normalised mean) shaped (1, groups, K), or on per-token log-probs (1, groups, K, T) for an
  algorithm that reads tokens (DAPO, CISPO, Dr. GRPO). Aggregations that divide by a count over the whole batch
  (tokens, informative groups) divide each micro-batch by that count over the step's whole generation batch
  (all devices), so micro-batches accumulate the full-batch loss exactly; Dr. GRPO's constant denominator uses
  ``max_completion_length``. The anchor ℓ_old is the rollout-time forward: TRL computes it at generation when a batch is
  reused (epochs > 1); with one epoch the parameters have not moved, and the first forward, detached, is it.
  ``task.ref_kl`` adds λ·KL(π_θ ‖ π_ref) (k3, per-token mean) for every algorithm. ``task.loss_impl=trl`` keeps
  TRL's own GRPO loss instead. The algorithm's metrics of an update (``Algorithm.metrics``: ratio_dev, kl_snapshot,
  clip_fraction) go to the step's log line.
* Each micro-batch loss is the mean over its groups divided by the accumulation steps, so an update's gradient is
  the mean over all local groups; data parallelism averages it over devices.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from accelerate.utils import gather, gather_object
from omegaconf import DictConfig
from transformers import GenerationConfig
from trl import GRPOTrainer
from trl.models import unwrap_model_for_generation
from trl.trainer.utils import split_tensor_dict

from algorithms import Aggregation, Algorithm, Groups, Rollout, losses
from algorithms.scores import ZERO_VARIANCE_THRESHOLD, population_std


def group_policy_loss(algorithm: Algorithm, logp: torch.Tensor, logp_old: torch.Tensor, scores: torch.Tensor,
                      **batch: Any) -> torch.Tensor:
    """The algorithm's loss on group tensors: ℓ (R, groups, K), or (R, groups, K, T) per token; ``batch``: the
    other ``Groups`` fields (mask, lengths, normaliser, max_length). Exactly as the token tasks call it."""
    return group_policy_loss_and_metrics(algorithm, logp, logp_old, scores, **batch)[0]


def group_policy_loss_and_metrics(algorithm: Algorithm, logp: torch.Tensor, logp_old: torch.Tensor,
                                  scores: torch.Tensor, **batch: Any
                                  ) -> tuple[torch.Tensor, Mapping[str, torch.Tensor]]:
    """``group_policy_loss`` and the algorithm's metrics of the update (``Algorithm.loss``), (R,) each."""
    groups = Groups(scores, logp_old, Rollout.GROUP, **batch)
    return algorithm.loss(logp, groups, algorithm.signal(groups))


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


class RLVRTrainer(GRPOTrainer):
    """GRPOTrainer with whole-group micro-batches and the project's losses; records per-step metrics."""

    def __init__(self, *args, algorithm: Algorithm, task_cfg: DictConfig, **kwargs):
        self.algorithm = algorithm
        self.loss_impl = task_cfg.loss_impl
        self.length_normalized = task_cfg.sequence_logprob == "mean"
        self.ref_kl = float(task_cfg.ref_kl)
        self.rollout_metrics: dict[str, float] = {}
        self.update_metrics: list[dict[str, float]] = []  # one per optimizer step of the current rollout batch
        self._loss_sum = self._kl_sum = 0.0
        self.loss_metrics: dict[str, float] = {}  # the algorithm's metrics of the last micro-batch (rlvr_loss)
        self._metric_sums: dict[str, float] = {}  # and their accumulation-scaled sums over the current update
        self._normaliser: float | None = None  # the step's batch-wide count for count-normalised aggregations
        super().__init__(*args, **kwargs)

    # ---- batches ------------------------------------------------------------------------------------------------
    def _prepare_inputs(self, generation_batch: Any) -> dict[str, Any]:
        """TRL's buffering without its cross-group shuffle: micro-batches are consecutive slices of whole groups."""
        if not self.model.training:
            return super()._prepare_inputs(generation_batch)
        generate_every = self.args.steps_per_generation * self.num_iterations
        if self._step % generate_every == 0 or self._buffered_inputs is None:
            batch = self._generate_and_score_completions(generation_batch)
            self._buffered_inputs = split_tensor_dict(batch, self.args.steps_per_generation)
        return self._buffered_inputs[self._step % self.args.steps_per_generation]

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        return self._rewards_per_func  # gathered over devices

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        K = self.num_generations
        prompt_ids = output["prompt_ids"].view(-1, K, output["prompt_ids"].size(1))
        if not (prompt_ids == prompt_ids[:, :1]).all():
            raise RuntimeError("a prompt group is not contiguous in the generation batch; group losses need whole "
                               "groups (per-device batch a multiple of K, sampler unshuffled within a step)")
        weights = self.reward_weights.to(self._rewards_per_func.device)
        rewards = (self._rewards_per_func * weights).nansum(1)
        index = self.accelerator.process_index
        output["scores"] = rewards[index * len(inputs):(index + 1) * len(inputs)]
        if self.model.training:
            self._record_rollout(rewards, output)
            self._normaliser = self._batch_normaliser(rewards, output["completion_mask"])
        return output

    def _batch_normaliser(self, rewards: torch.Tensor, mask: torch.Tensor) -> float | None:
        """For an aggregation that divides by a count over the whole batch (tokens, informative groups): the
        algorithm's count on this generation batch (all devices: one optimizer step's micro-batches), divided by
        the number of micro-batch losses averaged into the step (accumulation steps × devices)."""
        if self.algorithm.aggregation not in (Aggregation.TOKENS, Aggregation.INFORMATIVE_GROUPS):
            return None
        K = self.num_generations
        mask = gather(self.accelerator.pad_across_processes(mask.contiguous(), dim=1))  # (N, T), every device
        shape = (1, -1, K, mask.size(-1)) if self.algorithm.token_level else (1, -1, K)
        token_mask = mask.view(shape) if self.algorithm.token_level else None
        logp_shape = mask.shape if self.algorithm.token_level else mask.shape[:1]  # only its shape is read
        groups = Groups(rewards.float().view(1, -1, K), torch.zeros(logp_shape, device=mask.device).view(shape),
                        Rollout.GROUP, mask=token_mask)
        if self.args.steps_per_generation != self.args.gradient_accumulation_steps:  # one generation = one step
            raise RuntimeError("count-normalised aggregations need steps_per_generation == "
                               "gradient_accumulation_steps (TRL's default)")
        parts = self.args.gradient_accumulation_steps * self.accelerator.num_processes
        return self.algorithm.count(groups).item() / parts

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
    def rlvr_loss(self, token_logp: torch.Tensor, token_logp_old: torch.Tensor, token_logp_ref: torch.Tensor | None,
                  mask: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(loss, reference KL) of one micro-batch of whole groups, before the accumulation scaling; the algorithm's
        metrics of it go to ``loss_metrics``.

        token_logp, token_logp_old, token_logp_ref, mask: (N, T) completion tokens; scores: (N,), N = groups·K."""
        shape = (1, -1, self.num_generations)
        lengths = mask.sum(-1).float().view(shape)
        if self.algorithm.token_level:
            token_shape = (*shape, token_logp.size(-1))
            logp, logp_old = token_logp.float().view(token_shape), token_logp_old.float().view(token_shape)
            batch = {"mask": mask.view(token_shape), "max_length": self.max_completion_length}
        else:
            logp = losses.sequence_logprob(token_logp.float(), mask, self.length_normalized).view(shape)
            logp_old = losses.sequence_logprob(token_logp_old.float(), mask, self.length_normalized).view(shape)
            batch = {}
        loss, metrics = group_policy_loss_and_metrics(self.algorithm, logp, logp_old, scores.float().view(shape),
                                                      lengths=lengths, normaliser=self._normaliser, **batch)
        self.loss_metrics = {name: value.item() for name, value in metrics.items()}
        kl = None
        if self.ref_kl:
            kl = losses.reference_kl(token_logp.float().unsqueeze(0), token_logp_ref.float().unsqueeze(0),
                                     mask.unsqueeze(0))
            loss = loss + self.ref_kl * kl
        return loss.squeeze(0), None if kl is None else kl.squeeze(0)

    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        if self.loss_impl == "trl":
            return super()._compute_loss(model, inputs)
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        token_logp, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask,
                                                                   inputs["completion_ids"].size(1))
        old = inputs.get("old_per_token_logps")
        old = token_logp.detach() if old is None else old
        loss, kl = self.rlvr_loss(token_logp, old, inputs.get("ref_per_token_logps"), inputs["completion_mask"],
                                  inputs["scores"])
        scale = self.args.gradient_accumulation_steps if self.model.training else 1
        if kl is not None:
            self._kl_sum += kl.item() / scale
        for name, value in self.loss_metrics.items():
            self._metric_sums[name] = self._metric_sums.get(name, 0.0) + value / scale
        return loss / scale

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
                                    "kl_ref": sums[1] if self.ref_kl and self.loss_impl == "project" else math.nan,
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
