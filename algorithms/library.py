"""The algorithm library: every registered method, each one class here and one ``conf/algorithm/<id>.yaml``.

A class states the method's formula through three methods of ``registry.Algorithm``: ``signal`` (frozen per
batch), ``terms`` (the loss terms, aggregated by ``aggregation``) and ``weights`` (first-epoch weights w with
∇loss(θ_old) = −aggregate(w ∇ℓ)). The loss functions themselves are the pure ones of ``losses.py``.

Paper methods: docs/reproduction.md §2 (TPO Eq. 1–3, GRPO App. F, PPO, DG, PG, the ablations). Modern baselines:
docs/reproduction.md §16 (RLOO, Dr. GRPO, DAPO, GSPO, CISPO as TRL and verl implement them).
On single-sample rollouts (the bandits' one action per context) the batch is the comparison set, as for the
paper's single-sample GRPO, and per-token and per-sequence forms coincide (T = 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from algorithms import exact, losses
from algorithms.checks import ConfigError
from algorithms.registry import Aggregation, Algorithm, Groups, Rollout, register, token_count
from algorithms.scores import Spread, standardize, zscore_advantages

_G, _S, _T, _F, _E = Rollout.GROUP, Rollout.SINGLE, Rollout.TOKEN_CANDIDATES, Rollout.FULL_ACTION_SET, Rollout.EXACT


# ---- the paper's methods ----------------------------------------------------------------------------------------

@register
class TPO(Algorithm):
    """Target Policy Optimization (Eq. 1–3): q ∝ p_old · exp(u/η) over the group, fit by cross-entropy, whose
    gradient on the group logits is p_θ − q."""

    id, label, style, summary = "tpo", "TPO", ("#d62728", "-"), "Target Policy Optimization"
    rollouts = (_G, _F, _E)
    target = True
    anchor = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        eta: float = 1.0
        zero_variance: str = "centered"

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
    id, label, summary = "tpo_token", "TPO_token", "TPO over K next-token candidates"
    rollouts = (_T,)


@register
class TPONoAnchor(TPO):
    """Ablation (Fig 8): q = softmax(u/η), without the p_old factor."""

    id, label, style, summary = "tpo_no_anchor", "TPO-no-anchor", ("#ff9896", "--"), "TPO, q = softmax(u/η)"
    rollouts = (_G,)
    anchor = False


@register
class GroupPG(Algorithm):
    """Same-signal scalar ablation: −Σ_k (u_k/η) ℓ_k, TPO's standardized scores as policy-gradient weights; on a
    full-action-set group only the sampled members are weighted (docs/reproduction.md §2.16)."""

    id, label, style, summary = "group_pg", "Group PG", ("#9467bd", "--"), "PG weighted by TPO's u"
    rollouts = (_G, _F)

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        eta: float = 1.0
        zero_variance: str = "centered"

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


def _zscores(groups: Groups, spread: Spread, guard: bool = True) -> torch.Tensor:
    """GRPO's A = (s − mean)/(popstd + 1e-8) over the comparison set (the group, or the batch of single samples)."""
    return zscore_advantages(groups.scores, dim=groups.compare_dim, guard=guard, eps_in_sqrt=groups.zscore_eps_in_sqrt,
                             spread=spread)


@register
class GRPO(_Advantages):
    """GRPO as in the paper (docs/reproduction.md §2.7): group z-scores, clipped surrogate on the sequence ratio
    (log-ratio clipped to ±20), k3 KL to the rollout snapshot, summed over the K candidates, averaged over groups."""

    id, label, style, summary = "grpo", "GRPO", ("#1f77b4", "-"), "GRPO, clip + k3 KL to π_old"
    rollouts = (_G, _S, _E)
    trl_loss = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        clip_eps: float = 0.2
        beta: float = 0.04
        log_ratio_clip: float = 20.0
        zero_variance_guard: bool = True

    def signal(self, groups):
        return _zscores(groups, self.hp, self.hp.zero_variance_guard)

    def terms(self, logp, groups, signal):
        hp = self.hp
        return -losses.clipped_objective(logp, groups.logp_old, signal, hp.clip_eps, hp.beta, hp.log_ratio_clip)

    def exact_direction(self, probs, correct):
        return exact.grpo_direction(probs, correct)


@register
class GRPOToken(GRPO):
    id, label, summary = "grpo_token", "GRPO_token", "GRPO over K next-token candidates"
    rollouts = (_T,)
    trl_loss = False


@register
class GRPONoKL(GRPO):
    id, label, style, summary = "grpo_no_kl", "GRPO (no KL)", ("#aec7e8", "--"), "GRPO with β = 0"
    rollouts = (_G,)

    @dataclass(frozen=True)
    class Hyperparameters(GRPO.Hyperparameters):
        beta: float = 0.0


@register
class GRPOMasked(GRPO):
    """GRPO with zero-variance groups masked out of the mean (docs/reproduction.md §2.10)."""

    id, label, style, summary = "grpo_masked", "GRPO (masked)", ("#17becf", ":"), "GRPO, zero-variance masked"
    rollouts = (_G,)
    aggregation = Aggregation.INFORMATIVE_GROUPS
    trl_loss = False


@register
class PPO(_Advantages):
    """PPO (docs/reproduction.md §2.13): per-token ratios clipped at 1 ± ε, no log-ratio clip, no KL, the task's
    baseline."""

    id, label, style, summary = "ppo", "PPO", ("#2ca02c", "-"), "PPO, clipped per-token ratio"
    rollouts = (_S,)

    @dataclass(frozen=True)
    class Hyperparameters:
        clip_eps: float = 0.2

    def signal(self, groups):
        return groups.advantages

    def terms(self, logp, groups, signal):
        return -losses.clipped_objective(logp, groups.logp_old, signal, self.hp.clip_eps)


@register
class DG(_Advantages):
    """Delightful gradient (docs/reproduction.md §2.14): −Σ_t sg(σ(A·ℓ/η)·A) log π, surprisal ℓ = −log π at the current
    parameters, optionally clipped to [−c, c]."""

    id, label, style, summary = "dg", "DG", ("#ff7f0e", "-"), "Delightful gradient, σ(A·ℓ/η) gate"
    rollouts = (_S, _E)
    epochs = 1

    @dataclass(frozen=True)
    class Hyperparameters:
        eta: float = 1.0
        surprisal_clip: float | None = None

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

    id, label, style, summary = "pg", "PG", ("#7f7f7f", "-"), "REINFORCE with a baseline"
    rollouts = (_S, _E)

    def signal(self, groups):
        return groups.advantages

    def terms(self, logp, groups, signal):
        return -(signal.detach() * logp)

    def exact_direction(self, probs, correct):
        return exact.pg_direction(probs, correct)


@register
class CE(Algorithm):
    """Supervised cross-entropy oracle: −log π(y), the label given (full information, no sampling)."""

    id, label, style, summary = "ce", "CE", ("#000000", ":"), "cross-entropy oracle"
    rollouts = (Rollout.SUPERVISED, _E)
    epochs = 1

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
class RLOO(_Advantages):
    """RLOO: leave-one-out baseline A_i = r_i − mean_{j≠i} r_j (= K/(K−1)·(r_i − μ)), PPO clip on the sequence
    ratio, mean over sequences; no KL by default (β > 0: the k3 KL to the rollout snapshot, as GRPO's)."""

    id, label, style, summary = "rloo", "RLOO", ("#8c564b", "-"), "leave-one-out baseline, clipped ratio"
    rollouts = (_G, _S)
    aggregation = Aggregation.SEQUENCES

    @dataclass(frozen=True)
    class Hyperparameters:
        clip_eps: float = 0.2
        beta: float = 0.0
        log_ratio_clip: float = 20.0

    def signal(self, groups):
        scores, dim = groups.scores, groups.compare_dim
        K = scores.shape[dim]
        if K < 2:
            raise ValueError(f"rloo needs at least 2 members per comparison set for its leave-one-out baseline; "
                             f"got {K}")
        return scores - (scores.sum(dim, keepdim=True) - scores) / (K - 1)

    def terms(self, logp, groups, signal):
        hp = self.hp
        return -losses.clipped_objective(logp, groups.logp_old, signal, hp.clip_eps, hp.beta, hp.log_ratio_clip)


@register
class DrGRPO(_Advantages):
    """Dr. GRPO (Liu et al. 2025): A = r − μ (no division by σ), per-token clipped ratio, token sum over a constant
    denominator (candidates · longest answer): no length or difficulty normalisation. No KL by default (β > 0: GRPO's
    k3 KL to the rollout snapshot, per token, in the same token sum)."""

    id, label, style, summary = "dr_grpo", "Dr. GRPO", ("#e377c2", "-"), "GRPO without σ, constant denominator"
    rollouts = (_G, _S)
    aggregation = Aggregation.CONSTANT
    token_level = True

    @dataclass(frozen=True)
    class Hyperparameters:
        clip_eps: float = 0.2
        beta: float = field(default=0.0, metadata={"optional": True})  # +algorithm.beta: not in the YAML

    def signal(self, groups):
        return groups.scores - groups.scores.mean(groups.compare_dim, keepdim=True)

    def terms(self, logp, groups, signal):
        advantages = self._per_token(signal, groups)
        return -losses.clipped_objective(logp, groups.logp_old, advantages, self.hp.clip_eps, self.hp.beta)


@register
class DAPO(_Advantages):
    """DAPO (Yu et al. 2025): GRPO's z-scores, per-token ratio clipped to [1 − ε_low, 1 + ε_high] (clip-higher),
    token mean over the batch, no KL by default (β > 0: GRPO's k3 KL to the rollout snapshot, per token, in the same
    token mean); ``filter_groups`` drops zero-variance groups from the mean (dynamic sampling without the resampling),
    their KL included."""

    id, label, style, summary = "dapo", "DAPO", ("#bcbd22", "-"), "clip-higher, token mean, group filter"
    rollouts = (_G, _S)
    aggregation = Aggregation.TOKENS
    token_level = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        clip_eps_low: float = 0.2
        clip_eps_high: float = 0.28
        filter_groups: bool = False
        beta: float = field(default=0.0, metadata={"optional": True})  # +algorithm.beta: not in the YAML

    def signal(self, groups):
        return _zscores(groups, self.hp)

    def terms(self, logp, groups, signal):
        advantages = self._per_token(signal, groups)
        terms = -losses.clipped_objective(logp, groups.logp_old, advantages, self.hp.clip_eps_low, self.hp.beta,
                                          clip_eps_high=self.hp.clip_eps_high)
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
class GSPO(_Advantages):
    """GSPO (Zheng et al. 2025): GRPO's z-scores, the length-normalised sequence ratio s_i = exp((ℓ_i − ℓ_i^old)/L_i)
    clipped to [1 − 3e-4, 1 + 4e-4], mean over sequences, no KL by default. With L = 1 it is GRPO's sequence clip.
    β > 0 adds GRPO's KL term: β·k3 of the sequence log-ratio ℓ_i − ℓ_i^old (not length-normalised), clipped where the
    ratio is (|ℓ_i − ℓ_i^old| ≤ c·L_i), in the same mean over sequences; with L = 1 it is GRPO's without the K
    factor."""

    id, label, style, summary = "gspo", "GSPO", ("#17a589", "-"), "sequence ratio, length-normalised"
    rollouts = (_G, _S)
    aggregation = Aggregation.SEQUENCES
    length_normalised = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        clip_eps_low: float = 3e-4
        clip_eps_high: float = 4e-4
        log_ratio_clip: float = 10.0
        beta: float = field(default=0.0, metadata={"optional": True})  # +algorithm.beta: not in the YAML

    def signal(self, groups):
        return _zscores(groups, self.hp)

    def terms(self, logp, groups, signal):
        hp = self.hp
        terms = -losses.clipped_objective(logp, groups.logp_old, signal, hp.clip_eps_low, 0.0, hp.log_ratio_clip,
                                          clip_eps_high=hp.clip_eps_high, length=groups.lengths)
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

    id, label, style, summary = "cispo", "CISPO", ("#5d6d7e", "-"), "clipped, stopped IS weight"
    rollouts = (_G, _S)
    aggregation = Aggregation.TOKENS
    token_level = True

    @dataclass(frozen=True)
    class Hyperparameters(Spread):
        is_clip: float = 5.0
        beta: float = field(default=0.0, metadata={"optional": True})  # +algorithm.beta: not in the YAML

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
