"""The paper's losses as plain calls on tensors, each through the registry exactly as a task calls it: build the
registered algorithm with the given hyperparameters, wrap the tensors in ``Groups``, take its signal and loss.
Tests of a formula read like the formula; what they exercise is the library's one call site."""

from __future__ import annotations

import torch

import algorithms
from algorithms import Groups, Rollout


def algorithm(name: str, **hp) -> algorithms.Algorithm:
    cls = algorithms.get_algorithm(name)
    return cls(cls.Hyperparameters(**hp))


def loss(name: str, logp: torch.Tensor, groups: Groups, **hp) -> torch.Tensor:
    method = algorithm(name, **hp)
    return method.loss(logp, groups, method.signal(groups))[0]


def tpo_loss(logp_new, logp_old, scores, eta=1.0, anchor=True, zero_variance="centered"):
    return loss("tpo" if anchor else "tpo_no_anchor", logp_new, Groups(scores, logp_old, Rollout.GROUP),
                eta=float(eta), zero_variance=zero_variance)


def tpo_no_anchor_loss(logp_new, logp_old, scores, eta=1.0, zero_variance="centered"):
    return tpo_loss(logp_new, logp_old, scores, eta, anchor=False, zero_variance=zero_variance)


def group_pg_loss(logp_new, scores, eta=1.0, zero_variance="centered", sampled=None):
    rollout = Rollout.GROUP if sampled is None else Rollout.FULL_ACTION_SET
    return loss("group_pg", logp_new, Groups(scores, logp_new.detach(), rollout, sampled=sampled), eta=float(eta),
                zero_variance=zero_variance)


def _given_advantages(name, logp_new, logp_old, advantages, scores=None, **hp):
    """A GRPO-family loss on advantages given by the caller (its signal replaced by them)."""
    method = algorithm(name, **hp)
    groups = Groups(advantages if scores is None else scores, logp_old, Rollout.GROUP)
    return method.loss(logp_new, groups, advantages)[0]


def grpo_loss(logp_new, logp_old, advantages, clip_eps=0.2, beta=0.04, log_ratio_clip=20.0):
    return _given_advantages("grpo", logp_new, logp_old, advantages, clip_eps=float(clip_eps), beta=float(beta),
                             log_ratio_clip=float(log_ratio_clip))


def grpo_masked_loss(logp_new, logp_old, advantages, scores, clip_eps=0.2, beta=0.04, log_ratio_clip=20.0):
    return _given_advantages("grpo_masked", logp_new, logp_old, advantages, scores, clip_eps=float(clip_eps),
                             beta=float(beta), log_ratio_clip=float(log_ratio_clip))


def _single(name, logp_new, logp_old, advantages, **hp):
    groups = Groups(advantages, logp_new.detach() if logp_old is None else logp_old, Rollout.SINGLE,
                    advantages=advantages)
    return loss(name, logp_new, groups, **hp)


def ppo_loss(logp_new, logp_old, advantages, clip_eps=0.2):
    return _single("ppo", logp_new, logp_old, advantages, clip_eps=float(clip_eps))


def dg_loss(logp_new, advantages, eta=1.0, surprisal_clip=None):
    return _single("dg", logp_new, None, advantages, eta=float(eta), surprisal_clip=surprisal_clip)


def pg_loss(logp_new, advantages):
    return _single("pg", logp_new, None, advantages)


def ce_loss(logp_label):
    return loss("ce", logp_label, Groups(torch.zeros_like(logp_label), logp_label.detach(), Rollout.SUPERVISED))
