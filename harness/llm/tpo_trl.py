"""TPO for TRL users: ``TPOTrainer`` and ``TPOConfig``, used exactly like TRL's ``GRPOTrainer`` and ``GRPOConfig``.

TRL ships no TPO trainer (the pull requests that proposed one were closed unmerged), so this module is one, on any
model TRL loads::

    trainer = TPOTrainer(model="Qwen/Qwen3-0.6B", reward_funcs=reward, args=TPOConfig(tpo_eta=1.0), train_dataset=data)
    trainer.train()

It is TRL's ``GRPOTrainer`` (generation, rewards, reference model, vLLM, DeepSpeed, checkpoints unchanged) with two
changes that any loss over a whole group of completions needs (``GroupLossTrainer``, on which the harness's
``RLVRTrainer`` builds with every algorithm of ``algorithms/``):

* Whole groups per micro-batch. TRL's sampler puts the K completions of a prompt next to each other, but TRL then
  shuffles the generation batch across groups before cutting it into micro-batches. Here it is cut in order
  (``per_device_train_batch_size`` must be a multiple of ``num_generations``), and every generation batch is
  checked.
* The loss. The raw rewards travel with the batch (``scores``; several reward functions: their weighted sum) and the
  algorithm's own loss (``algorithms/``, the same function as the toy tasks) reads them and the sequence log-probs
  ℓ = Σ_t log π(y_t), shaped (1, groups, K). For TPO: u = the rewards standardised within each group (population
  std; zero variance → u = 0), target q ∝ p_old · exp(u/η), loss = cross-entropy of softmax(ℓ) to q, whose gradient
  on the group's ℓ is p_θ − q. The anchor ℓ_old is TRL's ``old_per_token_logps`` (computed at generation when a
  batch is reused, ``num_iterations`` > 1); otherwise the parameters have not moved and the first forward, detached,
  is it. ``beta`` > 0 adds beta · KL(π_θ ‖ π_ref) (k3 per token, averaged over each completion, then over them).

Each micro-batch loss is the mean over its groups divided by the accumulation steps, so an update's gradient is the
mean over all local groups; data parallelism averages it over devices. Aggregations that divide by a count over the
batch (tokens, informative groups) divide each micro-batch by that count over the step's whole generation batch (all
devices), so micro-batches accumulate the full-batch loss exactly. TRL's advantage and clipping settings
(``scale_rewards``, ``loss_type``, ``epsilon``, ...) are not read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import get_config_model_id, split_tensor_dict

from algorithms import Aggregation, Algorithm, Groups, Rollout, losses
from algorithms.hyperparameters import check_hyperparameter
from algorithms.library import TPO
from algorithms.registry import declarations
from common.checks import ConfigError

TPO_ETA = declarations(TPO)["eta"]


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


class GroupLossTrainer(GRPOTrainer):
    """GRPOTrainer with whole-group micro-batches and the loss of ``algorithm`` (any group loss of ``algorithms/``)
    on sequence log-probs (``length_normalized``: their mean over the completion's tokens instead of the sum)."""

    def __init__(self, *args, algorithm: Algorithm, length_normalized: bool = False, **kwargs):
        self.algorithm = algorithm
        self.length_normalized = length_normalized
        self.rewards: torch.Tensor | None = None  # every device's weighted rewards of the last generation batch
        self.loss_metrics: Mapping[str, torch.Tensor] = {}  # the algorithm's metrics of the last micro-batch
        self._normaliser: float | None = None  # the step's batch-wide count for count-normalised aggregations
        super().__init__(*args, **kwargs)
        per_device, K = self.args.per_device_train_batch_size, self.num_generations
        if per_device % K:
            raise ConfigError(f"per_device_train_batch_size={per_device} is not valid with num_generations={K}: "
                              f"every micro-batch must hold whole groups; valid choices: multiples of {K}")

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
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self.rewards = (rewards_per_func * self.reward_weights.to(rewards_per_func.device)).nansum(1)
        return rewards_per_func  # gathered over devices

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        K = self.num_generations
        prompt_ids = output["prompt_ids"].view(-1, K, output["prompt_ids"].size(1))
        if not (prompt_ids == prompt_ids[:, :1]).all():
            raise RuntimeError("a prompt group is not contiguous in the generation batch; group losses need whole "
                               "groups (per-device batch a multiple of K, sampler unshuffled within a step)")
        index = self.accelerator.process_index
        output["scores"] = self.rewards[index * len(inputs):(index + 1) * len(inputs)]
        if self.model.training:
            self._normaliser = self._batch_normaliser(self.rewards, output["completion_mask"])
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

    # ---- loss ---------------------------------------------------------------------------------------------------
    def group_loss(self, token_logp: torch.Tensor, token_logp_old: torch.Tensor, token_logp_ref: torch.Tensor | None,
                   mask: torch.Tensor, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(loss, reference KL) of one micro-batch of whole groups, before the accumulation scaling; the algorithm's
        metrics of it go to ``loss_metrics``. Per-token algorithms (DAPO, CISPO, Dr. GRPO) get (1, groups, K, T).

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
        loss, self.loss_metrics = group_policy_loss_and_metrics(self.algorithm, logp, logp_old,
                                                                scores.float().view(shape), lengths=lengths,
                                                                normaliser=self._normaliser, **batch)
        kl = None
        if self.beta:
            kl = losses.reference_kl(token_logp.float().unsqueeze(0), token_logp_ref.float().unsqueeze(0),
                                     mask.unsqueeze(0))
            loss = loss + self.beta * kl
        return loss.squeeze(0), None if kl is None else kl.squeeze(0)

    def _compute_loss(self, model, inputs: dict[str, Any]) -> torch.Tensor:
        input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        attention_mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        token_logp, _, _ = self._get_per_token_logps_and_entropies(model, input_ids, attention_mask,
                                                                   inputs["completion_ids"].size(1))
        old = inputs.get("old_per_token_logps")
        old = token_logp.detach() if old is None else old
        loss, _ = self.group_loss(token_logp, old, inputs.get("ref_per_token_logps"), inputs["completion_mask"],
                                  inputs["scores"])
        return loss / self.accumulation_steps()

    def accumulation_steps(self) -> int:
        """What each micro-batch loss is divided by: the gradient accumulation steps while training, else 1."""
        return self.args.gradient_accumulation_steps if self.model.training else 1


@dataclass
class TPOConfig(GRPOConfig):
    """GRPOConfig plus TPO's temperature ``tpo_eta`` (η). ``num_iterations`` is TPO's epochs per rollout batch and
    ``beta`` the weight of a KL to the reference model, as in GRPO; GRPO's advantage and clipping settings are not
    read."""

    tpo_eta: float = field(default=TPO_ETA.default, metadata={"help": "η: the target q ∝ p_old·exp(u/η) moves "
                                                                      "further from p_old the smaller η is"})

    def __post_init__(self):
        super().__post_init__()
        self.tpo_eta = check_hyperparameter("tpo_eta", self.tpo_eta, TPO_ETA)


class TPOTrainer(GroupLossTrainer):
    """Target Policy Optimization on TRL: ``GRPOTrainer``'s arguments, with ``args`` a ``TPOConfig``."""

    def __init__(self, model, reward_funcs=None, args: TPOConfig | None = None, *positional, **kwargs):
        if args is None:
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = TPOConfig(f"{name.split('/')[-1]}-TPO")  # as GRPOTrainer names its default output folder
        if not isinstance(args, TPOConfig):
            raise ConfigError(f"args={type(args).__name__} is not valid for TPOTrainer; valid choices: a TPOConfig "
                              "(every GRPOConfig field, plus tpo_eta)")
        super().__init__(model, reward_funcs, args, *positional, algorithm=TPO(TPO.Hyperparameters(eta=args.tpo_eta)),
                         **kwargs)
