"""The algorithm library: every registered method, each one class here and one ``conf/algorithm/<id>.yaml``.

A class states the method's formula through three methods of ``registry.Algorithm``: ``signal`` (frozen per
batch), ``terms`` (the loss terms, aggregated by ``algorithm.aggregation``) and ``weights`` (first-epoch weights w
with ∇loss(θ_old) = −aggregate(w ∇ℓ)). The loss functions themselves are the pure ones of ``losses.py``. Its
``Hyperparameters`` declare each key of its YAML once (``hyperparameters.hyperparameter``: default, valid values,
doc); the keys several methods share are declared below, and a class may give one another default.

Paper methods: docs/reproduction.md §2 (TPO Eq. 1–3, GRPO App. F, PPO, DG, PG, the ablations). Modern baselines:
docs/reproduction.md §16 (RLOO, Dr. GRPO, DAPO, GSPO, CISPO as TRL and verl implement them).
On single-sample rollouts (the bandits' one action per context) the batch is the comparison set, as for the
paper's single-sample GRPO, and per-token and per-sequence forms coincide (T = 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import torch

from algorithms import exact, losses
from algorithms.hyperparameters import hyperparameter
from common.checks import ConfigError
from common.palette import BLACK, BLUE, GREEN, ORANGE, PURPLE, SKY_BLUE, VERMILLION
from algorithms.registry import AGGREGATION, Aggregation, Algorithm, Groups, Rollout, register, token_count
from algorithms.scores import ZERO_VARIANCE_MODES, Spread, standardize, zscore_advantages

# ---- hyperparameters several algorithms declare (a class may give another default: ``BETA(default=0.0)``) --------

# η ≥ 1e-6: the algorithms compute in float32, where η < 1.4e-45 rounds to 0 (u/η = ±inf, NaN: every row NaN) and
# u/η overflows below η ≈ √(K−1)/3.4e38 (standardised scores have |u| ≤ √(K−1)). TPO's target never evaluates exp(u/η)
# itself: it is a log-softmax of ℓ_old + u/η, shifted by its maximum (algorithms/losses.py tpo_target,
# exact.tpo_direction), finite for any finite u/η. The bound keeps u/η ≤ √(K−1)·1e6 ≤ 1e9 for K ≤ 10^6, so Group PG's
# weights, their gradients and Adam's second moments (≈ (u/η)²) stay far below float32's 3.4e38. The MNIST mechanism
# closed form (math.exp((10/3)/η)) needs η ≥ 0.0047, checked by tasks/mnist_bandit.py when task.mechanism is on.
ETA = partial(hyperparameter, default=1.0, doc="η: TPO's q ∝ p_old·exp(u/η), Group PG's weights u/η, DG's gate "
              "σ(A·ℓ/η)", low=1e-6)
ZERO_VARIANCE = partial(hyperparameter, default="centered", doc="popstd ≤ 1e-6: centered (reference code, ≈ 0) | "
                        "zero (paper, exactly 0)", choices=ZERO_VARIANCE_MODES)
CLIP_EPS = partial(hyperparameter, default=0.2, doc="ε of clip(ρ, 1 − ε, 1 + ε); ε = 0 would pin the ratio at 1",
                   low=0, low_open=True)
CLIP_EPS_LOW = partial(hyperparameter, doc="ρ ≥ 1 − ε_low", low=0, low_open=True, high=1, high_open=True)
CLIP_EPS_HIGH = partial(hyperparameter, doc="ρ ≤ 1 + ε_high (DAPO's clip-higher, GSPO's upper bound)", low=0,
                        low_open=True)
BETA = partial(hyperparameter, default=0.04, doc="weight of the k3 KL to the rollout snapshot π_old; 0 = none", low=0)
LOG_RATIO_CLIP = partial(hyperparameter, default=20.0, doc="|log ρ| ≤ c before exp; inf = no clip", low=0,
                         low_open=True, allow_inf=True)


# ---- the paper's methods ----------------------------------------------------------------------------------------

@register
class TPO(Algorithm):
    """Target Policy Optimization (Eq. 1–3): q ∝ p_old · exp(u/η) over the group, fit by cross-entropy, whose
    gradient on the group logits is p_θ − q."""

    id, label = "tpo", "TPO"
    look = (VERMILLION, "-", "o")
    rollouts = (Rollout.GROUP, Rollout.FULL_ACTION_SET, Rollout.EXACT)
    target = True
    anchor = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        eta: float = ETA()
        zero_variance: str = ZERO_VARIANCE()

    def signal(self, groups: Groups) -> torch.Tensor:
        return losses.tpo_target(groups.logp_old, groups.scores, self.hp.eta, self.anchor, self.hp.zero_variance,
                                 spread=self.hp)

    def terms(self, logp, groups, signal):
        return losses.cross_entropy_to_target(logp, signal).unsqueeze(-1)  # one term per group

    def weights(self, groups, signal):
        return signal

    def exact_direction(self, probs, correct):
        return exact.tpo_direction(probs, correct, self.hp.eta)


@register
class TPOToken(TPO):
    """TPO over K sampled next-token candidates at every state of one behaviour path."""

    id, label = "tpo_token", "TPO_token"
    rollouts = (Rollout.TOKEN_CANDIDATES,)


@register
class TPONoAnchor(TPO):
    """Ablation (Fig 8): q = softmax(u/η), without the p_old factor."""

    id, label = "tpo_no_anchor", "TPO-no-anchor"
    look = (PURPLE, "--", "v")
    rollouts = (Rollout.GROUP,)
    anchor = False


@register
class GroupPG(Algorithm):
    """Same-signal scalar ablation: −Σ_k (u_k/η) ℓ_k, TPO's standardized scores as policy-gradient weights; on a
    full-action-set group only the sampled members are weighted (docs/reproduction.md §2.16)."""

    id, label = "group_pg", "Group PG"
    look = (BLACK, ":", "X")
    rollouts = (Rollout.GROUP, Rollout.FULL_ACTION_SET)

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        eta: float = ETA()
        zero_variance: str = ZERO_VARIANCE()

    def signal(self, groups):
        weights = standardize(groups.scores.detach(), zero_variance=self.hp.zero_variance, spread=self.hp) / self.hp.eta
        return weights if groups.sampled is None else weights * groups.sampled

    def terms(self, logp, groups, signal):
        return -(signal * logp)

    def weights(self, groups, signal):
        return signal


class _Advantages(Algorithm):
    """A policy-gradient method whose signal is an advantage per candidate (per token: broadcast over T)."""

    def weights(self, groups, signal):
        return self._per_token(signal, groups)

    def _per_token(self, advantages: torch.Tensor, groups: Groups) -> torch.Tensor:
        """A per candidate, broadcast over the tokens when the log-probs are per token."""
        return advantages.unsqueeze(-1).expand_as(groups.logp_old) if self._token_level(groups) else advantages


class _Clipped(_Advantages):
    """A clipped-surrogate method: −min(ρA, clip(ρ, 1 − ε_low, 1 + ε_high)A) per item, on the ratio ``clip`` says."""

    metric_names = (*Algorithm.metric_names, "clip_fraction")

    def clip(self, groups: Groups) -> tuple[float, float, float | None, torch.Tensor | float | None]:
        """(ε_low, ε_high, log-ratio clip, length L): ρ = exp((ℓ − ℓ_old)/L), the log-ratio clipped first."""
        raise NotImplementedError

    def surrogate(self, logp: torch.Tensor, groups: Groups, advantages: torch.Tensor, beta: float = 0.0
                  ) -> torch.Tensor:
        """The negated clipped objective per item, with β·k3 of its log-ratio when β > 0."""
        low, high, log_ratio_clip, length = self.clip(groups)
        return -losses.clipped_objective(logp, groups.logp_old, advantages, low, beta, log_ratio_clip, high, length)

    def metrics(self, logp, groups, signal):
        """``Algorithm.metrics`` and ``clip_fraction``: the items whose gradient the clip removes."""
        metrics = super().metrics(logp, groups, signal)
        low, high, log_ratio_clip, length = self.clip(groups)
        ratio = losses.surrogate_log_ratio(logp, groups.logp_old, log_ratio_clip, length).exp()
        removed = losses.clip_removes_gradient(ratio, self._per_token(signal, groups), low, high)
        return {**metrics, "clip_fraction": losses.item_mean(removed, self.item_mask(groups))}


def _zscores(groups: Groups, spread: Spread, guard: bool = True) -> torch.Tensor:
    """GRPO's A = (s − mean)/(popstd + 1e-8) over the comparison set (the group, or the batch of single samples)."""
    return zscore_advantages(groups.scores, dim=groups.compare_dim, guard=guard, eps_in_sqrt=groups.zscore_eps_in_sqrt,
                             spread=spread)


@register
class GRPO(_Clipped):
    """GRPO as in the paper (docs/reproduction.md §2.7): group z-scores, clipped surrogate on the sequence ratio
    (log-ratio clipped to ±20), k3 KL to the rollout snapshot, summed over the K candidates, averaged over groups."""

    id, label = "grpo", "GRPO"
    look = (BLUE, "-", "^")
    rollouts = (Rollout.GROUP, Rollout.SINGLE, Rollout.EXACT)
    trl_loss = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        clip_eps: float = CLIP_EPS()
        beta: float = BETA()
        log_ratio_clip: float = LOG_RATIO_CLIP()
        zero_variance_guard: bool = hyperparameter(True, "A = 0 where popstd ≤ 1e-6 (paper) | false: the unguarded "
                                                   "reference (docs/reproduction.md §2.7)")

    def signal(self, groups):
        return _zscores(groups, self.hp, self.hp.zero_variance_guard)

    def clip(self, groups):
        return self.hp.clip_eps, self.hp.clip_eps, self.hp.log_ratio_clip, None

    def terms(self, logp, groups, signal):
        return self.surrogate(logp, groups, signal, self.hp.beta)

    def exact_direction(self, probs, correct):
        return exact.grpo_direction(probs, correct)


@register
class GRPOToken(GRPO):
    """GRPO over K sampled next-token candidates at every state of one behaviour path."""

    id, label = "grpo_token", "GRPO_token"
    rollouts = (Rollout.TOKEN_CANDIDATES,)
    trl_loss = False


@register
class GRPONoKL(GRPO):
    """Ablation: GRPO with β = 0 (no KL to the rollout snapshot), clipping kept."""

    id, label = "grpo_no_kl", "GRPO (no KL)"
    look = (ORANGE, "-.", "D")
    rollouts = (Rollout.GROUP,)

    @dataclass(frozen=True)
    class Hyperparameters(GRPO.Hyperparameters):
        beta: float = BETA(default=0.0)


@register
class GRPOMasked(GRPO):
    """GRPO with zero-variance groups masked out of the mean (docs/reproduction.md §2.10): GRPO whose aggregation
    defaults to the mean over informative groups."""

    id, label = "grpo_masked", "GRPO (masked)"
    look = (SKY_BLUE, "--", "P")
    rollouts = (Rollout.GROUP,)
    trl_loss = False

    @dataclass(frozen=True)
    class Hyperparameters(GRPO.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.INFORMATIVE_GROUPS)


@register
class PPO(_Clipped):
    """PPO (docs/reproduction.md §2.13): per-token ratios clipped at 1 ± ε, no log-ratio clip, no KL, the task's
    baseline."""

    id, label = "ppo", "PPO"
    look = (PURPLE, "-", ">")
    rollouts = (Rollout.SINGLE,)

    @dataclass(frozen=True)
    class Hyperparameters(Algorithm.Hyperparameters):
        clip_eps: float = CLIP_EPS()

    def signal(self, groups):
        return groups.advantages

    def clip(self, groups):
        return self.hp.clip_eps, self.hp.clip_eps, None, None

    def terms(self, logp, groups, signal):
        return self.surrogate(logp, groups, signal)


@register
class DG(_Advantages):
    """Delightful gradient (docs/reproduction.md §2.14): −Σ_t sg(σ(A·ℓ/η)·A) log π, surprisal ℓ = −log π at the current
    parameters, optionally clipped to [−c, c]."""

    id, label = "dg", "DG"
    look = (GREEN, "--", "s")
    rollouts = (Rollout.SINGLE, Rollout.EXACT)
    default_epochs = 1

    @dataclass(frozen=True)
    class Hyperparameters(Algorithm.Hyperparameters):
        eta: float = ETA()
        surprisal_clip: float | None = hyperparameter(None, "clip the surprisal to [−c, c]; null = never (the paper)",
                                                      low=0, low_open=True, optional=True, allow_inf=True)

    def signal(self, groups):
        return groups.advantages

    def terms(self, logp, groups, signal):
        return -(losses.dg_gate(logp, signal, self.hp.eta, self.hp.surprisal_clip) * logp)

    def weights(self, groups, signal):
        return losses.dg_gate(groups.logp_old, signal, self.hp.eta, self.hp.surprisal_clip)

    def exact_direction(self, probs, correct):
        return exact.dg_direction(probs, correct, self.hp.eta)


@register
class PG(_Advantages):
    """REINFORCE with the task's baseline: −Σ_t A_t log π(a_t)."""

    id, label = "pg", "PG"
    look = (ORANGE, ":", "<")
    rollouts = (Rollout.SINGLE, Rollout.EXACT)

    def signal(self, groups):
        return groups.advantages

    def terms(self, logp, groups, signal):
        return -(signal.detach() * logp)

    def exact_direction(self, probs, correct):
        return exact.pg_direction(probs, correct)


@register
class CE(Algorithm):
    """Supervised cross-entropy oracle: −log π(y), the label given (full information, no sampling)."""

    id, label = "ce", "CE"
    look = (BLACK, "--", "*")
    rollouts = (Rollout.SUPERVISED, Rollout.EXACT)
    default_epochs = 1

    def signal(self, groups):
        return None

    def terms(self, logp, groups, signal):
        return -logp

    def weights(self, groups, signal):
        return torch.ones_like(groups.logp_old)

    def exact_direction(self, probs, correct):
        return exact.ce_direction(probs, correct)


# ---- modern group-RL baselines (docs/reproduction.md §16) -------------------------------------------------------

@register
class RLOO(_Clipped):
    """RLOO: leave-one-out baseline A_i = r_i − mean_{j≠i} r_j (= K/(K−1)·(r_i − μ)), PPO clip on the sequence
    ratio, mean over sequences; no KL by default (β > 0: the k3 KL to the rollout snapshot, as GRPO's)."""

    id, label = "rloo", "RLOO"
    look = (GREEN, "-", "h")
    rollouts = (Rollout.GROUP, Rollout.SINGLE)

    @dataclass(frozen=True)
    class Hyperparameters(Algorithm.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.SEQUENCES)
        clip_eps: float = CLIP_EPS()
        beta: float = BETA(default=0.0)
        log_ratio_clip: float = LOG_RATIO_CLIP()

    def signal(self, groups):
        scores, dim = groups.scores, groups.compare_dim
        K = scores.shape[dim]
        if K < 2:
            raise ValueError(f"rloo needs at least 2 members per comparison set for its leave-one-out baseline; "
                             f"got {K}")
        return scores - (scores.sum(dim, keepdim=True) - scores) / (K - 1)

    def clip(self, groups):
        return self.hp.clip_eps, self.hp.clip_eps, self.hp.log_ratio_clip, None

    def terms(self, logp, groups, signal):
        return self.surrogate(logp, groups, signal, self.hp.beta)


@register
class DrGRPO(_Clipped):
    """Dr. GRPO (Liu et al. 2025): A = r − μ (no division by σ), per-token clipped ratio, token sum over a constant
    denominator (candidates · longest answer): no length or difficulty normalisation. No KL by default (β > 0: GRPO's
    k3 KL to the rollout snapshot, per token, in the same token sum)."""

    id, label = "dr_grpo", "Dr. GRPO"
    look = (SKY_BLUE, "-.", "d")
    rollouts = (Rollout.GROUP, Rollout.SINGLE)
    token_level = True

    @dataclass(frozen=True)
    class Hyperparameters(Algorithm.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.CONSTANT)
        clip_eps: float = CLIP_EPS()
        beta: float = BETA(default=0.0, added_later=True)

    def signal(self, groups):
        return groups.scores - groups.scores.mean(groups.compare_dim, keepdim=True)

    def clip(self, groups):
        return self.hp.clip_eps, self.hp.clip_eps, None, None

    def terms(self, logp, groups, signal):
        return self.surrogate(logp, groups, self._per_token(signal, groups), self.hp.beta)


@register
class DAPO(_Clipped):
    """DAPO (Yu et al. 2025): GRPO's z-scores, per-token ratio clipped to [1 − ε_low, 1 + ε_high] (clip-higher),
    token mean over the batch, no KL by default (β > 0: GRPO's k3 KL to the rollout snapshot, per token, in the same
    token mean); ``filter_groups`` drops zero-variance groups from the mean (dynamic sampling without the resampling),
    their KL included."""

    id, label = "dapo", "DAPO"
    look = (ORANGE, "--", "p")
    rollouts = (Rollout.GROUP, Rollout.SINGLE)
    token_level = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.TOKENS)
        clip_eps_low: float = CLIP_EPS_LOW(default=0.2)
        clip_eps_high: float = CLIP_EPS_HIGH(default=0.28)
        filter_groups: bool = hyperparameter(False, "dynamic sampling without resampling: zero-variance groups leave "
                                                    "the token mean")
        beta: float = BETA(default=0.0, added_later=True)

    def signal(self, groups):
        return _zscores(groups, self.hp)

    def clip(self, groups):
        return self.hp.clip_eps_low, self.hp.clip_eps_high, None, None

    def terms(self, logp, groups, signal):
        terms = self.surrogate(logp, groups, self._per_token(signal, groups), self.hp.beta)
        if self.hp.beta and self.hp.filter_groups and groups.rollout is not Rollout.SINGLE:
            # a dropped group's clipped terms are 0 (A = 0) but its KL is not: drop it too, as ``count`` does
            keep = groups.informative()
            terms = terms * (keep[..., None, None] if self._token_level(groups) else keep[..., None])
        return terms

    def check(self, rollout):
        super().check(rollout)
        if self.hp.filter_groups and rollout is Rollout.SINGLE:
            raise ConfigError("algorithm.filter_groups=true is not valid on a single-sample rollout (the batch is "
                              "the one comparison set: there is no group to drop); valid choices: false")

    def count(self, groups):
        if self.hp.filter_groups and groups.rollout is not Rollout.SINGLE:  # their terms are 0: A = 0 there
            return token_count(groups, self._token_level(groups), keep=groups.informative())
        return super().count(groups)


@register
class GSPO(_Clipped):
    """GSPO (Zheng et al. 2025): GRPO's z-scores, the length-normalised sequence ratio s_i = exp((ℓ_i − ℓ_i^old)/L_i)
    clipped to [1 − 3e-4, 1 + 4e-4], mean over sequences, no KL by default. With L = 1 it is GRPO's sequence clip.
    β > 0 adds GRPO's KL term: β·k3 of the sequence log-ratio ℓ_i − ℓ_i^old (not length-normalised), clipped where the
    ratio is (|ℓ_i − ℓ_i^old| ≤ c·L_i), in the same mean over sequences; with L = 1 it is GRPO's without the K
    factor."""

    id, label = "gspo", "GSPO"
    look = (PURPLE, ":", "8")
    rollouts = (Rollout.GROUP, Rollout.SINGLE)
    length_normalised = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.SEQUENCES)
        clip_eps_low: float = CLIP_EPS_LOW(default=3e-4)
        clip_eps_high: float = CLIP_EPS_HIGH(default=4e-4)
        log_ratio_clip: float = LOG_RATIO_CLIP(default=10.0)
        beta: float = BETA(default=0.0, added_later=True)

    def signal(self, groups):
        return _zscores(groups, self.hp)

    def clip(self, groups):
        return self.hp.clip_eps_low, self.hp.clip_eps_high, self.hp.log_ratio_clip, groups.lengths

    def terms(self, logp, groups, signal):
        hp = self.hp
        terms = self.surrogate(logp, groups, signal)
        if hp.beta:
            terms = terms + hp.beta * losses.snapshot_kl(logp, groups.logp_old, hp.log_ratio_clip * groups.lengths)
        return terms

    def weights(self, groups, signal):
        return signal / groups.lengths  # ∂s_i/∂ℓ_i = s_i / L_i, and s_i = 1 at θ_old


@register
class CISPO(_Advantages):
    """CISPO (MiniMax-M1 2025): −sg(min(ρ_t, ε_max))·A·log π_t per token, GRPO's z-scores, token mean; the IS
    weight is clipped and stopped, so no token's gradient is ever dropped. No KL by default (β > 0: GRPO's k3 KL to
    the rollout snapshot, per token and not IS-weighted, in the same token mean)."""

    id, label = "cispo", "CISPO"
    look = (BLACK, "-.", "H")
    rollouts = (Rollout.GROUP, Rollout.SINGLE)
    token_level = True
    metric_names = (*Algorithm.metric_names, "clip_fraction")

    @dataclass(frozen=True)
    class Hyperparameters(Spread, Algorithm.Hyperparameters):
        aggregation: Aggregation = AGGREGATION(default=Aggregation.TOKENS)
        is_clip: float = hyperparameter(5.0, "ε_max: the IS weight is min(ρ, ε_max), stopped (ScaleRL; TRL's "
                                             "epsilon_high for cispo)", low=0, low_open=True)
        beta: float = BETA(default=0.0, added_later=True)

    def signal(self, groups):
        return _zscores(groups, self.hp)

    def terms(self, logp, groups, signal):
        advantages = self._per_token(signal, groups)
        weight = (logp.detach() - groups.logp_old.detach()).exp().clamp_max(self.hp.is_clip)
        terms = -(weight * advantages.detach() * logp)
        if self.hp.beta:
            terms = terms + self.hp.beta * losses.snapshot_kl(logp, groups.logp_old)
        return terms

    def weights(self, groups, signal):
        return super().weights(groups, signal) * min(1.0, self.hp.is_clip)  # ρ = 1 at θ_old

    def metrics(self, logp, groups, signal):
        """``Algorithm.metrics`` and ``clip_fraction``: the items whose IS weight min(ρ, ε_max) is clipped."""
        metrics = super().metrics(logp, groups, signal)
        clipped = losses.weight_clipped((logp - groups.logp_old).exp(), self.hp.is_clip)
        return {**metrics, "clip_fraction": losses.item_mean(clipped, self.item_mask(groups))}
