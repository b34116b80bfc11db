"""The algorithm interface every task and trainer calls, and the registry of algorithms.

An algorithm is a subclass of ``Algorithm`` decorated with ``@register`` (see ``library.py``): its id, the
rollout shapes it runs on, its default epochs, its hyperparameters (a frozen dataclass built once from
``conf/algorithm/<id>.yaml``, each field declared once with its default, valid values and doc:
``algorithms.hyperparameters.hyperparameter``; ``aggregation`` and ``epochs`` are hyperparameters of every
algorithm), and three methods on one rollout batch:

* ``signal(groups)``: the frozen per-batch signal (TPO's target q, or advantages), from ℓ_old and the scores;
  computed once per batch, so it cannot drift across epochs;
* ``terms(logp, groups, signal)``: the loss terms per candidate (or per token), shape of ``logp``, whose
  aggregation (``Aggregation``: TRL's split of a loss into objective and reduction) is the loss;
* ``weights(groups, signal)``: the first-epoch weights w, shape of ``logp``, such that the gradient of the loss
  at θ = θ_old is −aggregate(w ⊙ ∇ℓ). Section 4's diagnostics read them, and the MNIST bandit's one-update
  closed form uses them, so neither re-derives an algorithm's formula.

A task builds ``Groups`` (scores, ℓ_old and what else its rollout has) and calls ``loss``, which returns the loss and
the algorithm's diagnostics of the update (``metrics``); it never names an algorithm. The registry refuses an
algorithm on a task that does not offer one of its rollout shapes.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from enum import Enum
from collections.abc import Iterator, Mapping
from typing import Any, ClassVar

import torch

from algorithms import losses
from algorithms.hyperparameters import hyperparameter
from common import declared
from common.checks import ConfigError
from common.palette import GREY
from common.kernels import log_softmax
from algorithms.scores import ZERO_VARIANCE_THRESHOLD, Spread, population_std


class Rollout(str, Enum):
    """How candidates are produced for one context."""

    SINGLE = "single"  # one sampled action/sequence per context; the batch is the comparison set
    GROUP = "group"  # K sampled full sequences per context
    TOKEN_CANDIDATES = "token_candidates"  # K sampled next tokens at every state of one behaviour path
    FULL_ACTION_SET = "full_action_set"  # a bandit's whole action set is the group (only sampled arms are scored)
    EXACT = "exact"  # closed-form expected direction (tabular, no sampling)
    SUPERVISED = "supervised"  # the label itself (CE oracle)


class Aggregation(str, Enum):
    """How the loss terms of a batch become one loss per replica (seed): ``algorithm.aggregation``, each algorithm's
    default its own. verl's ``loss_agg_mode`` names, where one is the same reduction: SEQUENCES is
    ``seq-mean-token-sum``, TOKENS is ``token-mean``, CONSTANT is ``seq-mean-token-sum-norm`` (Dr. GRPO; verl divides
    the token sum by the longest answer and leaves the sequence count to its batch scaling). GROUPS and
    INFORMATIVE_GROUPS have none, and none here is ``seq-mean-token-mean``."""

    GROUPS = "groups"  # mean over groups of the sum over the last axis (the paper's losses)
    INFORMATIVE_GROUPS = "informative_groups"  # the same sum over groups, / #groups with σ > 1e-6 (min 1)
    SEQUENCES = "sequences"  # mean over every candidate (TRL/verl "seq-mean"); per-token terms are summed first
    TOKENS = "tokens"  # sum over every token / number of tokens in the batch (DAPO's token mean)
    CONSTANT = "constant"  # sum over every token / (number of candidates · longest answer) (Dr. GRPO)


# the two hyperparameters of every algorithm (``Algorithm.Hyperparameters``)
EPOCHS = functools.partial(hyperparameter, default=None, doc="updates per rollout batch; null = the algorithm's "
                           "default_epochs (LLM runs: 1, the TRL trainer's)", low=1, integer=True, optional=True)
AGGREGATION = functools.partial(hyperparameter, doc="how the loss terms become one loss per replica (Aggregation)",
                                choices=Aggregation, added_later=True)


@dataclass
class Groups:
    """One rollout batch as an algorithm sees it. Every tensor has the replica (seed) axis first.

    Group rollouts: ``scores`` (R, ..., K) with the comparison set (the K candidates) on the last axis;
    ``logp_old`` the rollout policy's log-probs in the shape the task will pass as ``logp``: (R, ..., K), or
    (R, ..., K, T) per token for an algorithm with ``token_level``. Single-sample rollouts: ``scores`` are the
    rewards (R, B, T) and the comparison set is the batch (axis 1); ``advantages`` the task's baseline
    advantages r − b, same shape."""

    scores: torch.Tensor
    logp_old: torch.Tensor
    rollout: Rollout
    advantages: torch.Tensor | None = None  # single-sample rollouts: the task's r − b
    sampled: torch.Tensor | None = None  # full-action-set groups: 1 at the members that were sampled
    mask: torch.Tensor | None = None  # per-token log-probs: 1 at answer tokens (None: every token counts)
    lengths: torch.Tensor | float = 1.0  # answer tokens per candidate (GSPO's L_i); bandits: 1
    max_length: int | None = None  # the longest possible answer (Dr. GRPO's constant); None: the token axis
    # When this batch is one of M equal parts of a larger one (LLM micro-batches): the whole batch's count that a
    # count-normalised aggregation divides by (tokens, informative groups), divided by M.
    normaliser: float | None = None
    # the task's reference z-scores by sqrt(var + 1e-8) (tabular, docs/reproduction.md §2.12)
    zscore_eps_in_sqrt: bool = False

    @property
    def compare_dim(self) -> int:
        return 1 if self.rollout is Rollout.SINGLE else -1

    def informative(self) -> torch.Tensor:
        """1.0 for groups whose scores have σ > 1e-6, shape of the scores less their last axis."""
        return (population_std(self.scores).squeeze(-1) > ZERO_VARIANCE_THRESHOLD).to(self.scores.dtype)


def _mean_over_batch(per_unit: torch.Tensor) -> torch.Tensor:
    """(R, ...) → (R,): average over every axis but the replica axis."""
    return per_unit.flatten(1).mean(1) if per_unit.dim() > 1 else per_unit


def aggregate(terms: torch.Tensor, groups: Groups, how: Aggregation, token_level: bool = False,
              count: torch.Tensor | float | None = None) -> torch.Tensor:
    """Loss per replica (R,) from loss terms shaped like ``logp``: per candidate (R, ..., K), or per token
    (R, ..., K, T) with ``token_level`` (masked by ``groups.mask``). ``count``: what TOKENS and
    INFORMATIVE_GROUPS divide by (``Algorithm.count``)."""
    if token_level and groups.mask is not None:
        terms = terms * groups.mask.to(terms.dtype)
    if how in (Aggregation.GROUPS, Aggregation.INFORMATIVE_GROUPS):
        per_group = terms.sum((-1, -2)) if token_level else terms.sum(-1)
        if how is Aggregation.GROUPS:
            return _mean_over_batch(per_group)
        return (groups.informative() * per_group).flatten(1).sum(1) / count
    if how is Aggregation.SEQUENCES:
        return _mean_over_batch(terms.sum(-1) if token_level else terms)
    total = terms.flatten(1).sum(1)
    if how is Aggregation.TOKENS:
        return total / count
    if how is Aggregation.CONSTANT:
        candidates = terms[0].numel() // (terms.shape[-1] if token_level else 1)
        longest = groups.max_length or (terms.shape[-1] if token_level else 1)
        return total / (candidates * longest)
    raise ValueError(f"aggregation {how!r}")


def token_count(groups: Groups, token_level: bool, keep: torch.Tensor | None = None) -> torch.Tensor:
    """(R,) tokens in the batch (per-candidate terms: candidates), only those of groups where ``keep`` is 1."""
    tokens = groups.logp_old.new_ones(groups.logp_old.shape) if groups.mask is None or not token_level \
        else groups.mask.to(groups.logp_old.dtype)
    if keep is not None:
        tokens = tokens * (keep[..., None, None] if token_level else keep[..., None])
    return tokens.flatten(1).sum(1).clamp_min(1.0)


class Algorithm:
    """Base class of the algorithm library; subclasses set the class attributes and implement the methods."""

    id: ClassVar[str]
    label: ClassVar[str]  # the report's name for it
    look: ClassVar[tuple[str, str, str]] = (GREY, "-", "o")  # the report's colour, line style and marker, the same
    # in every figure: the methods a figure draws together differ in colour, and colour and line style together tell
    # every two apart (a line hidden under another is still told by its dashes and markers); a token-level variant
    # inherits the look of the method it varies
    rollouts: ClassVar[tuple[Rollout, ...]]  # in order of preference: a task runs the first one it offers
    default_epochs: ClassVar[int] = 4  # updates per rollout batch when ``algorithm.epochs`` is null
    token_level: ClassVar[bool] = False  # group rollouts pass per-token log-probs (R, ..., K, T)
    length_normalised: ClassVar[bool] = False  # divides sequence log-probs by their length itself (GSPO)
    target: ClassVar[bool] = False  # the signal is a distribution over the group (its weights sum to 1)
    metric_names: ClassVar[tuple[str, ...]] = ("ratio_dev", "kl_snapshot")  # the keys of ``metrics``
    trl_loss: ClassVar[bool] = False  # TRL's own GRPO loss can stand in for it (LLM ``task.loss_impl=trl``)

    @dataclass(frozen=True)
    class Hyperparameters:
        epochs: int | None = EPOCHS()
        aggregation: Aggregation = AGGREGATION(default=Aggregation.GROUPS)

    def __init__(self, hp: Any = None):
        self.hp = self.Hyperparameters() if hp is None else hp

    @property
    def name(self) -> str:
        return self.id

    @property
    def epochs(self) -> int:
        """Updates per rollout batch: ``algorithm.epochs``, or the algorithm's default when it is null."""
        return self.default_epochs if self.hp.epochs is None else self.hp.epochs

    @property
    def aggregation(self) -> Aggregation:
        return Aggregation(self.hp.aggregation)

    @classmethod
    def rollout_for(cls, offered) -> Rollout | None:
        """The first of its rollout shapes that a task offers (None: it cannot run there)."""
        return next((shape for shape in cls.rollouts if shape in offered), None)

    def check(self, rollout: Rollout) -> None:
        """Refuse (ConfigError) hyperparameters that mean nothing on the rollout shape a task chose. For an algorithm
        that standardises (hyperparameters a ``Spread``): no variant on the exact tabular direction, which
        standardises a one-hot reward in closed form, and no prior std without shrinkage."""
        hp = self.hp
        if not isinstance(hp, Spread):
            return
        if rollout is Rollout.EXACT and not hp.is_default:
            raise ConfigError(f"algorithm.std_floor, std_shrinkage and rank_scores are not valid for algorithm="
                              f"{self.id} on an exact (closed-form) task; valid choices: 0, 0, false")
        if hp.std_prior != Spread.std_prior and not hp.std_shrinkage:
            raise ConfigError(f"algorithm.std_prior={hp.std_prior} has no effect without algorithm.std_shrinkage; "
                              f"valid choices: algorithm.std_shrinkage > 0, or algorithm.std_prior={Spread.std_prior}")

    def signal(self, groups: Groups) -> torch.Tensor | None:
        raise NotImplementedError

    def terms(self, logp: torch.Tensor, groups: Groups, signal: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def weights(self, groups: Groups, signal: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def loss(self, logp: torch.Tensor, groups: Groups, signal: torch.Tensor | None
             ) -> tuple[torch.Tensor, Metrics]:
        """(loss, metrics): the per-replica loss (R,), the aggregated terms, and the update's diagnostics
        (``metrics``, name → (R,)), computed apart on detached values, so they never touch the loss or its gradient."""
        count = None
        if self.aggregation in (Aggregation.TOKENS, Aggregation.INFORMATIVE_GROUPS):
            count = self.count(groups) if groups.normaliser is None else groups.normaliser
        loss = aggregate(self.terms(logp, groups, signal), groups, self.aggregation, self._token_level(groups), count)
        return loss, Metrics(self, logp.detach(), groups, None if signal is None else signal.detach())

    def metrics(self, logp: torch.Tensor, groups: Groups, signal: torch.Tensor | None) -> dict[str, torch.Tensor]:
        """Per-replica (R,) means over the items the loss sums (every candidate, or every unmasked token): how far the
        policy has moved from the rollout's, ``ratio_dev`` = mean |ρ − 1| and ``kl_snapshot`` = mean k3(x),
        ρ = e^x, x = ``log_ratio``. The clipping algorithms add ``clip_fraction``."""
        log_ratio, mask = self.log_ratio(logp, groups), self.item_mask(groups)
        return {"ratio_dev": losses.item_mean(losses.ratio_deviation(log_ratio), mask),
                "kl_snapshot": losses.item_mean(losses.k3(log_ratio), mask)}

    def log_ratio(self, logp: torch.Tensor, groups: Groups) -> torch.Tensor:
        """x = ℓ − ℓ_old per item. A target algorithm reads ℓ only through the group softmax (a task may pass it
        logits): its x is that of softmax(ℓ) over the group."""
        if self.target:
            return log_softmax(logp) - log_softmax(groups.logp_old)
        return logp - groups.logp_old

    def item_mask(self, groups: Groups) -> torch.Tensor | None:
        """1 at the items the loss sums, for per-token log-probs (None: every item counts)."""
        return groups.mask if self._token_level(groups) else None

    def count(self, groups: Groups) -> torch.Tensor:
        """(R,) what a count-normalised aggregation divides by: the batch's tokens (TOKENS) or its informative
        groups (INFORMATIVE_GROUPS), at least 1. Needs only the scores, the mask and ℓ_old's shape, so a trainer
        that splits a batch into micro-batches computes it once on the whole batch (``Groups.normaliser``)."""
        if self.aggregation is Aggregation.INFORMATIVE_GROUPS:
            return groups.informative().flatten(1).sum(1).clamp_min(1.0)
        return token_count(groups, self._token_level(groups))

    def _token_level(self, groups: Groups) -> bool:
        return self.token_level and groups.rollout is Rollout.GROUP

    def exact_direction(self, probs: torch.Tensor, correct: torch.Tensor) -> torch.Tensor:
        """Tabular one-hot bandit (docs/reproduction.md §2.6): the exact expected update direction on the logits;
        only algorithms with ``Rollout.EXACT`` among their rollouts define it."""
        raise NotImplementedError


class Metrics(Mapping[str, torch.Tensor]):
    """An update's metrics (``Algorithm.metrics``), computed under no_grad when first read: a few dozen small tensor
    operations (30–170 µs on a CPU), which a bandit step of ~0.5 ms that does not read them does not pay."""

    def __init__(self, algorithm: Algorithm, logp: torch.Tensor, groups: Groups, signal: torch.Tensor | None):
        self._inputs, self._values = (algorithm, logp, groups, signal), None

    def _computed(self) -> dict[str, torch.Tensor]:
        if self._values is None:
            algorithm, logp, groups, signal = self._inputs
            with torch.no_grad():
                self._values = algorithm.metrics(logp, groups, signal)
            self._inputs = None
        return self._values

    def __getitem__(self, name: str) -> torch.Tensor:
        return self._computed()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._computed())

    def __len__(self) -> int:
        return len(self._computed())


ALGORITHMS: dict[str, type[Algorithm]] = {}


def register(cls: type[Algorithm]) -> type[Algorithm]:
    """Class decorator: add an algorithm to the registry under ``cls.id`` (an id may be registered once)."""
    if cls.__dict__.get("id") is None:
        raise TypeError(f"{cls.__name__} sets no id")
    if cls.id in ALGORITHMS:
        raise ValueError(f"algorithm id {cls.id!r} is registered twice ({ALGORITHMS[cls.id].__name__}, "
                         f"{cls.__name__})")
    ALGORITHMS[cls.id] = cls
    return cls


def get_algorithm(name: str) -> type[Algorithm]:
    """The registered class of ``name``; ValueError naming the valid ids otherwise."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"algorithm={name!r} is unknown; valid choices: {', '.join(ALGORITHMS)}") from None


def declarations(cls: type[Algorithm]) -> dict[str, dataclasses.Field]:
    """Name → declaration (``algorithms.hyperparameters.hyperparameter``) of every hyperparameter of ``cls``."""
    return declared.declarations(cls.Hyperparameters)


def build(cfg) -> Algorithm:
    """The algorithm of an ``algorithm`` config node, its hyperparameters checked and typed once by their
    declarations.

    ConfigError (one line, naming the key and its valid range) for an unknown id, an unknown key or a bad value."""
    try:
        cls = get_algorithm(cfg.name)
    except ValueError as error:
        raise ConfigError(str(error)) from None
    return cls(declared.build(cls.Hyperparameters, cfg, "algorithm", f"algorithm={cls.id}", others=("name",),
                              kind="hyperparameter"))


def neutral_hyperparameters(name: Any) -> dict[str, Any]:
    """The hyperparameters of algorithm ``name`` declared ``added_later``, at their default: the value its runs
    recorded before the key joined its YAML ran with ({} for an unknown name)."""
    cls = ALGORITHMS.get(name) if isinstance(name, str) else None
    if cls is None:
        return {}
    return {key: field.default.value if isinstance(field.default, Enum) else field.default
            for key, field in declarations(cls).items() if field.metadata["added_later"]}
