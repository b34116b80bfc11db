"""MNIST contextual bandit (paper §3.3, spec §2.5, §2.11, §2.14–2.17, §3.2, §5.2, §6.3–6.4).

Each step draws B training images with replacement, samples one class per image from the policy, and rewards
r = 1{a = y}; the label is seen only through r (except by the CE oracle). Adam 1e-3, one update per batch.
Greedy test error on the 10k test set every ``eval_every`` updates, plus the Appendix C mechanism analysis.
"""

from __future__ import annotations

import torch

from algorithms import Rollout, losses
from algorithms.functional import log_softmax, softmax
from algorithms.scores import standardize, zscore_advantages
from harness import rng
from harness.optim import FusedAdam
from tasks.base import (
    ConfigError, StepOutput, Task, check_bool, check_choice, check_positive_float, check_positive_int)
from tasks.mnist_data import SOURCES as MNIST_SOURCES
from tasks.mnist_data import load_mnist
from tasks.mnist_mechanism import mechanism_by_bin
from tasks.models.mlp import init_mlp, mlp_backward, mlp_forward, mlp_logits

MECHANISM_ALGORITHMS = ("pg", "dg", "tpo", "grpo", "group_pg")
MECHANISM_STATS = ("gain", "scalar_gain", "surplus", "count")
STEP_LABELS = ("reference", "updates")
RNG_BLOCK = 200  # steps of random draws made per call


class MnistBandit(Task):
    name = "mnist_bandit"
    rollouts = frozenset({Rollout.SINGLE, Rollout.FULL_ACTION_SET, Rollout.SUPERVISED})
    algorithms = ("tpo", "dg", "group_pg", "grpo", "pg", "ce")

    @classmethod
    def check_steps(cls, cfg, steps: int) -> None:
        if isinstance(cfg.eval_every, int) and not isinstance(cfg.eval_every, bool) and steps < cfg.eval_every:
            raise ConfigError(f"trainer.steps={steps} is not valid with task.eval_every={cfg.eval_every}: no test "
                              f"evaluation would run; expected trainer.steps >= {cfg.eval_every}")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.require_single_update()
        cfg = self.cfg
        self.step_label = check_choice("task.eval_step_label", cfg.eval_step_label, STEP_LABELS)
        self.eval_every = check_positive_int("task.eval_every", cfg.eval_every)  # updates between test evaluations
        self.batch_size = check_positive_int("task.batch_size", cfg.batch_size)
        check_positive_float("task.lr", cfg.lr)
        check_bool("task.mechanism", cfg.mechanism)
        check_choice("task.source", cfg.source, ("auto", *MNIST_SOURCES))
        data = load_mnist(cfg.data_dir, cfg.source)
        as_tensor = lambda key: torch.as_tensor(data[key]).to(self.device)  # noqa: E731
        # uint8 (47 MB), converted after each step's gather: a quarter of the bytes to fetch from random rows
        # (2,000 rows: 0.85 → 0.67 ms against gathering a float copy of the table; the same float32 values)
        self.train_images = as_tensor("train_images")
        self.train_labels = as_tensor("train_labels").long()
        self.test_images = as_tensor("test_images").float().div_(255.0)
        self.test_labels = as_tensor("test_labels").long()
        self.mechanism = bool(cfg.mechanism) and self.algorithm.name in MECHANISM_ALGORITHMS
        self.metric_names = ("error",) + (
            tuple(f"mech_{stat}_bin{b}" for stat in MECHANISM_STATS for b in range(4)) if self.mechanism else ())
        self.params = {k: v.to(self.device) for k, v in init_mlp(self.seeds).items()}  # gradients by mlp_backward
        self._block = None
        self.optimizer = FusedAdam(self.params.values(), lr=float(cfg.lr))

    def loss(self, logits: torch.Tensor, log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor
             ) -> torch.Tensor:
        """Per-seed loss for the configured algorithm, built from the shared library functions: the definition
        the step's closed form (``loss_and_logit_grad``) is tested against, value and gradient.

        ``log_probs`` = log softmax(``logits``). TPO's cross-entropy takes the logits themselves (its group softmax
        is the policy), so its gradient on them is p_θ − q as written."""
        hp, name = self.algorithm_cfg, self.algorithm.name
        if name == "tpo":  # group = the 10 classes; only the sampled class is scored (spec §2.5)
            scores = self.class_scores(log_probs, actions, labels)
            return losses.tpo_loss(logits, log_probs.detach(), scores, float(hp.eta), zero_variance=hp.zero_variance)
        if name == "group_pg":  # weight u at the sampled class: ±3 for one-hot scores (spec §2.16)
            sampled = torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), 1.0)
            return losses.group_pg_loss(log_probs, self.class_scores(log_probs, actions, labels), float(hp.eta),
                                        hp.zero_variance, sampled=sampled)
        rewards = (actions == labels).to(log_probs.dtype)
        baseline = log_probs.detach().exp().pow(2).sum(-1)  # expected reward Σπ², constant w.r.t. θ
        taken = log_probs.gather(-1, actions.unsqueeze(-1))  # (S, B, 1)
        if name == "grpo":  # single-sample GRPO: advantages z-scored over the batch (spec §2.11)
            advantages = zscore_advantages(rewards, dim=-1, guard=bool(hp.zero_variance_guard)).unsqueeze(-1)
            return losses.grpo_loss(taken, taken.detach(), advantages, float(hp.clip_eps), float(hp.beta),
                                    float(hp.log_ratio_clip))
        if name == "dg":
            clip = hp.get("surprisal_clip")
            return losses.dg_loss(taken, (rewards - baseline).unsqueeze(-1), float(hp.eta),
                                  None if clip is None else float(clip))
        if name == "pg":
            return losses.pg_loss(taken, (rewards - baseline).unsqueeze(-1))
        return losses.ce_loss(log_probs.gather(-1, labels.unsqueeze(-1)))

    def loss_and_logit_grad(self, log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor
                            ) -> tuple[torch.Tensor, torch.Tensor]:
        """``loss``'s value (S,) and its gradient on the logits (S, B, 10) in closed form, without autograd.

        Each batch gets one update, from the rollout policy itself, and there every loss here is −(1/B) Σ_b Σ_k
        w_bk log π_bk with constant weights w: TPO the target q (Eq. 3); Group PG u/η at the sampled class; DG the
        gate σ(A·ℓ/η)·A; PG r − Σπ²; CE 1 at the label; GRPO its advantage at the sampled class, in the gradient
        only: its ratio is exactly 1, so the clip is inactive, the k3 KL has zero gradient and the loss is −mean A.
        Through log softmax the gradient on the logits is (π Σ_k w − w) / B; for TPO, Σ_k q = 1 and it is written
        as the paper's (π − q) / B. Autograd through the losses' small ops cost 0.03–0.25 ms of a 1-seed step;
        tests check value and gradient against ``loss`` and its autograd."""
        hp, name = self.algorithm_cfg, self.algorithm.name
        if name in ("grpo", "ce"):  # a weight at one class: GRPO's z-scored reward, CE's 1 at the label
            rewards = (actions == labels).to(log_probs.dtype)
            if name == "grpo":
                weight = zscore_advantages(rewards, dim=-1, guard=bool(hp.zero_variance_guard))
            else:
                weight, actions = torch.ones_like(rewards), labels
            weights = torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), weight.unsqueeze(-1))
        else:  # from the class scores (r − Σπ² at the sampled class, 0 elsewhere), as the library losses use them
            scores = self.class_scores(log_probs, actions, labels)
            if name == "tpo":
                weights = losses.tpo_target(log_probs, scores, float(hp.eta), zero_variance=hp.zero_variance)
            elif name == "group_pg":
                sampled = torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), 1.0)
                weights = standardize(scores, zero_variance=hp.zero_variance) / float(hp.eta) * sampled
            elif name == "dg":  # the gate σ(A·ℓ/η)·A at the sampled class, A its score
                sampled = actions.unsqueeze(-1)
                surprisal, advantage = -log_probs.gather(-1, sampled), scores.gather(-1, sampled)
                if (clip := hp.get("surprisal_clip")) is not None:
                    surprisal = surprisal.clamp(-float(clip), float(clip))
                gated = torch.sigmoid(advantage * surprisal / float(hp.eta)) * advantage
                weights = torch.zeros_like(scores).scatter_(-1, sampled, gated)
            else:  # pg
                weights = scores
        loss = -(weights.sum(-1) if name == "grpo" else (weights * log_probs).sum(-1)).mean(-1)
        mass = 1.0 if name == "tpo" else weights.sum(-1, keepdim=True)  # Σq = 1: exactly the paper's π − q
        return loss, (log_probs.exp() * mass - weights) / log_probs.shape[1]

    @staticmethod
    def class_scores(log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Scores over the group of 10 classes: r − Σπ² at the sampled class, 0 elsewhere (spec §2.5, §2.16)."""
        log_probs = log_probs.detach()
        advantage = (actions == labels).to(log_probs.dtype) - log_probs.exp().pow(2).sum(-1)
        return torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), advantage.unsqueeze(-1))

    @torch.no_grad()
    def evaluate(self) -> dict[str, torch.Tensor]:
        probs = softmax(mlp_logits(self.params, self.test_images))  # (S, N, 10)
        metrics = {"error": (probs.argmax(-1) != self.test_labels).float().mean(-1)}
        if self.mechanism:
            eta = float(self.algorithm_cfg.get("eta", 1.0))
            bins = mechanism_by_bin(probs, self.test_labels, self.algorithm.name, eta)
            for stat in MECHANISM_STATS:
                for b in range(4):
                    metrics[f"mech_{stat}_bin{b}"] = bins[stat][:, b].float()
        return metrics

    def draws(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """This step's image indices (stream "contexts") and action uniforms ("actions"), (S, B) each.

        Drawn for RNG_BLOCK steps at a time: the counter-based streams give exactly the per-step values, and one
        call per block removes the hashing's per-step dispatch cost (~0.4 ms of a 1-seed step)."""
        block = step // RNG_BLOCK
        if self._block != block:
            steps = range(block * RNG_BLOCK, (block + 1) * RNG_BLOCK)
            self._index = rng.randint(self.seeds, "contexts", steps, (self.batch_size,), len(self.train_labels))
            self._uniforms = rng.uniform(self.seeds, "actions", steps, (self.batch_size,))
            self._block = block
        return self._index[:, step % RNG_BLOCK], self._uniforms[:, step % RNG_BLOCK]

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """This step's images (S, B, 784), labels (S, B) and action uniforms (S, B)."""
        index, u = self.draws(step)
        images = self.train_images.index_select(0, index.flatten()).float().div_(255.0)  # index_select: 2–3× [index]
        images = images.view(*index.shape, -1)
        labels = self.train_labels.index_select(0, index.flatten()).view_as(index)
        return images, labels, u

    def step(self, step: int) -> StepOutput:
        images, labels, u = self.batch(step)
        logits, layer_inputs = mlp_forward(self.params, images)  # no autograd graph: gradients by mlp_backward
        log_probs = log_softmax(logits)
        actions = rng.sample_categorical(log_probs, u)
        loss, grad_logits = self.loss_and_logit_grad(log_probs, actions, labels)
        grads = mlp_backward(self.params, layer_inputs, grad_logits)
        self.optimizer.step([grads[name] for name in self.params])
        updates = step + 1
        if updates % self.eval_every:
            return StepOutput(loss=loss.detach())
        # Reference labelling (spec §14.10): the evaluation after 200·(i+1) updates is labelled 200·i.
        label = updates - self.eval_every if self.step_label == "reference" else updates
        return StepOutput(loss=loss.detach(), metrics=self.evaluate(), log_step=label)

    def initial_metrics(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """With ``eval_step_label=updates`` the untrained policy is evaluated and logged at step 0."""
        return (0, self.evaluate()) if self.step_label == "updates" else None

    def state_dict(self):
        return {"params": dict(self.params), "optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state):
        with torch.no_grad():
            for key, value in state["params"].items():
                self.params[key].copy_(value)
        self.optimizer.load_state_dict(state["optimizer"])
