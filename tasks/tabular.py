"""Tabular one-hot bandits (paper §3.1–3.2, docs/reproduction.md §2.6, §2.12, §2.14, §2.15, §5.3, §6.1–6.2).

No network and no optimizer: each method proposes a direction g on the logit table and the policy moves by a
normalised step, logits ← logits + α·g/‖g‖ (‖·‖ over the whole table, +1e-30), so only the *direction* matters.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms import Groups, Rollout
from algorithms.exact import ce_direction
from common.kernels import log_softmax, softmax
from tasks import rng
from common.checks import check_positive_int
from common.declared import required
from tasks.base import RolloutBatch, StepOutput, Task
from tasks.memory import FLOAT, INDEX, size


def normalised_step(logits: torch.Tensor, direction: torch.Tensor, alpha: float) -> torch.Tensor:
    """logits + α·g/sqrt(Σg² + 1e-30), normalised per seed over every non-seed axis."""
    norm = direction.pow(2).flatten(1).sum(1).add(1e-30).sqrt()
    return logits + alpha * direction / norm.view(-1, *([1] * (direction.dim() - 1)))


def misalignment(direction: torch.Tensor, oracle: torch.Tensor) -> torch.Tensor:
    """1 − cos(g, g*) per seed, with sqrt(Σx² + 1e-12) norms."""
    g, o = direction.flatten(1), oracle.flatten(1)
    cos = (g * o).sum(1) / (g.pow(2).sum(1).add(1e-12).sqrt() * o.pow(2).sum(1).add(1e-12).sqrt())
    return 1.0 - cos


ARMS = "arms K per context, arm 0 rewarded (one arm: the error is 0 from the start)"
ALPHA = "normalised step size α on the logit table"


@dataclass
class Batch(RolloutBatch):
    """One step's B sampled actions (S, B) from the logit table, with the table as a leaf of the step's graph and
    what the step reports about the policy before it moves."""

    logits: torch.Tensor  # (S, K), requires grad
    log_probs: torch.Tensor  # (S, K)
    actions: torch.Tensor  # (S, B)
    error: torch.Tensor  # (S,) before the step
    oracle: torch.Tensor  # (S, K) the cross-entropy direction p·(e_0 − p), before the step
    direction: torch.Tensor | None = None  # −∇ of the loss on the table


class TabularSingle(Task):
    """One context, K arms, arm 0 rewarded; B sampled actions per step; error logged *before* each step.

    The step is −∇ of the algorithm's loss on the logit table for the B sampled actions (rewards 1{a = 0}). Full
    action set (TPO): the group is the K arms, each scored by its summed advantage r − 0.5 over the batch divided by
    B, the anchor log(π + 1e-8). Single samples: ℓ = log π(a), advantages r − 0.5, the batch the comparison set,
    z-scores with the reference's sqrt(var + 1e-8) (docs/reproduction.md §2.12)."""

    name = "tabular_single"
    rollouts = frozenset({Rollout.SINGLE, Rollout.FULL_ACTION_SET})
    metric_names = ("error", "misalignment")

    @dataclass(frozen=True)
    class Settings(Task.Settings):
        arms: int = required(ARMS, low=2, integer=True)
        batch_size: int = required("actions B sampled per step", check=check_positive_int)
        alpha: float = required(ALPHA, low=0, low_open=True)

    @classmethod
    def memory_estimate(cls, cfg, seeds):
        arms, batch = size(cfg.task.get("arms")), size(cfg.task.get("batch_size"))
        # the logit table and ~16 temporaries of its size (probabilities, gradients, the full action set's group);
        # the inverse-CDF sampling compares a (seeds, batch, arms) bool table; the batch's draws and actions
        per_seed = 16 * FLOAT * arms + batch * arms + 8 * INDEX * batch
        return seeds * per_seed, f"seeds={seeds} × task.arms={arms} × task.batch_size={batch}"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.alpha, self.batch_size = self.settings.alpha, self.settings.batch_size
        self.logits = torch.zeros(len(self.seeds), self.settings.arms, device=self.device)

    def rollout_batches(self, step: int) -> list[Batch]:
        probs = softmax(self.logits)
        first_arm = torch.zeros_like(probs)
        first_arm[:, 0] = 1.0
        oracle = probs[:, :1] * (first_arm - probs)
        logits = self.logits.detach().requires_grad_(True)
        log_probs = log_softmax(logits)
        u = rng.uniform(self.seeds, "actions", step, (self.batch_size,)).to(self.device)
        actions = rng.sample_categorical(log_probs.detach().unsqueeze(1), u)  # (S, B)
        return [Batch(logits, log_probs, actions, 1.0 - probs[:, 0], oracle)]

    def log_probs(self, batch: Batch) -> torch.Tensor:
        if self.rollout is Rollout.FULL_ACTION_SET:
            return batch.log_probs.unsqueeze(1)
        return batch.log_probs.gather(1, batch.actions).unsqueeze(-1)  # (S, B, 1)

    def groups(self, batch: Batch, logp_old: torch.Tensor) -> Groups:
        rewards = (batch.actions == 0).float()
        if self.rollout is Rollout.FULL_ACTION_SET:
            arm_scores = torch.zeros_like(batch.logits).scatter_add_(1, batch.actions, rewards - 0.5) / \
                batch.actions.shape[1]
            anchor = torch.log(batch.log_probs.detach().exp() + 1e-8)
            sampled = torch.zeros_like(batch.logits).scatter_(1, batch.actions, 1.0)
            return Groups(arm_scores.unsqueeze(1), anchor.unsqueeze(1), self.rollout, sampled=sampled.unsqueeze(1))
        rewards = rewards.unsqueeze(-1)
        return Groups(rewards, logp_old, self.rollout, advantages=rewards - 0.5, zscore_eps_in_sqrt=True)

    def backward(self, loss: torch.Tensor, batch: Batch) -> None:
        (grad,) = torch.autograd.grad(loss.sum(), batch.logits)
        batch.direction = self._direction = -grad

    def optimizer_step(self, epoch: int, loss: torch.Tensor) -> None:
        self.logits = normalised_step(self.logits, self._direction, self.alpha)

    def report(self, step: int, batches: list[Batch]) -> StepOutput:
        (batch,) = batches
        metrics = {"error": batch.error, "misalignment": misalignment(batch.direction, batch.oracle)}
        return StepOutput(loss=batch.direction.sum(1), metrics=metrics, log_step=step)

    def state_dict(self):
        return {"logits": self.logits}

    def load_state_dict(self, state):
        self.logits = state["logits"].to(self.device)


class TabularMulti(Task):
    """N contexts × K arms, arm 0 rewarded everywhere, exact expected directions; error logged *after* each step."""

    name = "tabular_multi"
    rollouts = frozenset({Rollout.EXACT})
    trainer = "closed_form"
    metric_names = ("error", "misalignment")

    @dataclass(frozen=True)
    class Settings(Task.Settings):
        contexts: int = required("contexts N, each with its own logits ~ N(0, 1)", check=check_positive_int)
        arms: int = required(ARMS, low=2, integer=True)
        alpha: float = required(ALPHA, low=0, low_open=True)

    @classmethod
    def memory_estimate(cls, cfg, seeds):
        contexts, arms = size(cfg.task.get("contexts")), size(cfg.task.get("arms"))
        return seeds * 16 * FLOAT * contexts * arms, f"seeds={seeds} × task.contexts={contexts} × task.arms={arms}"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.require_default_aggregation()
        shape = (self.settings.contexts, self.settings.arms)
        self.alpha = self.settings.alpha
        self.logits = rng.normal(self.seeds, "init/logits", 0, shape).to(self.device)
        self.correct = torch.zeros(len(self.seeds), shape[0], dtype=torch.long, device=self.device)

    def step(self, step: int) -> StepOutput:
        probs = softmax(self.logits)
        direction = self.algorithm.exact_direction(probs, self.correct)
        alignment = misalignment(direction, ce_direction(probs, self.correct))
        self.logits = normalised_step(self.logits, direction, self.alpha)
        error = 1.0 - softmax(self.logits)[..., 0].mean(-1)
        return StepOutput(loss=direction.flatten(1).sum(1), metrics={"error": error, "misalignment": alignment},
                          log_step=step)

    def state_dict(self):
        return {"logits": self.logits}

    def load_state_dict(self, state):
        self.logits = state["logits"].to(self.device)
