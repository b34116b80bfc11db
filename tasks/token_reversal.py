"""Token reversal and its variations (paper §3.4-3.7, §4; docs/reproduction.md §2.2-2.3, §2.7-2.10, §2.13-2.16,
§5.1, §6.5-6.12).

Each episode draws B prompts x ∈ {0..V-1}^H; the transformer of docs/reproduction.md §3.1 writes H answer tokens after
the prompt (context [x_0 … x_{H-1}, a_0 … a_{H-1}], action a_t read at position H-1+t), sampled at temperature 1 with
a KV cache. Correctness c_t = 1{a_t = y_t} against the target y (copy, flip, reversed copy or reversed flip) gives
per-token rewards: bag_of_tokens r_t = c_t, sequential r_t = Π_{s≤t} c_s, terminal r_t = Π_s c_s.

Three rollout shapes, chosen by the algorithm registry:
* single (PPO, DG, PG): one sequence per prompt; A_t = r_t − mean over the batch of r_t.
* group (TPO, GRPO, ...): K sequences per prompt; score = mean_t r_t, sequence log-prob = Σ_t log π(a_t).
* token candidates (TPO_token, GRPO_token): at each state of one behaviour path K next tokens are sampled and
  scored; candidate 0 is the behaviour token. Under sequential reward a candidate scores only while the behaviour
  path is still correct. All states lie on the behaviour path, so one causal forward gives every state's logits.

Old log-probs ℓ_old are those of the first epoch's teacher-forced forward: the parameters have not moved since
sampling, so this is exactly the rollout policy. The reference reads ℓ_old from its separate sampling pass instead,
which differs by float rounding, and that rounding is all the gradient of a batch without signal (every group
all-fail or all-success) has: Muon's orthogonalisation and Adam's normalisation turn it into a step of ordinary size
in an arbitrary direction. ``task.logp_old``: ``sampled`` (the reference) adds one float32 rounding error per
candidate to ℓ_old, drawn from its own stream, so a batch without signal moves as in the reference; ``exact`` (the
paper) keeps ℓ_old as computed, and such a batch adds nothing to the optimizer's momentum (docs/reproduction.md
§14.19). Success (for the diagnostics) is a correct full sequence for sequence rollouts (score = 1, i.e. exact match
under every reward) and a candidate reward of 1 for token candidates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from algorithms import Groups, Rollout
from algorithms.scores import ZERO_VARIANCE_THRESHOLD, batch_mean_baseline, population_std
from tasks import rng
from tasks.models.optim import GUARDS, MUON_SPLITS, Guard, transformer_optimizer
from common.checks import ConfigError, check_choice, check_number, check_positive_float, check_positive_int
from common.declared import required
from tasks.base import RolloutBatch, StepOutput, Task
from tasks.memory import FLOAT, INDEX, size
from tasks.models import transformer

TARGETS = ("copy", "flip", "reverse_copy", "reverse_flip")
REWARDS = ("bag_of_tokens", "sequential", "terminal")
MATCHES = ("prompts", "interactions")
LOGP_OLD = ("sampled", "exact")
ROUNDING = 2.0**-24  # float32's unit roundoff: the relative size of one rounding error
OPTIMIZERS = ("muon", "adam")  # conf/optim/muon.yaml (the reference) | adam.yaml (Nesterov-Adam everywhere)
METRICS = ("error", "grad_norm", "frac_success", "all_fail", "frac_zero_var", "weight_winners", "weight_losers",
           "target_entropy", "update_muon", "update_adam")


def target_tokens(prompts: torch.Tensor, target: str, vocab: int) -> torch.Tensor:
    """y for prompts (..., H): copy y = x, flip y = V−1−x, reverse_* the same on the reversed prompt."""
    y = prompts.flip(-1) if target.startswith("reverse") else prompts
    return vocab - 1 - y if target.endswith("flip") else y


def token_rewards(actions: torch.Tensor, y: torch.Tensor, reward: str) -> torch.Tensor:
    """Per-token rewards (..., H) of full sequences."""
    correct = (actions == y).float()
    if reward == "bag_of_tokens":
        return correct
    if reward == "sequential":
        return correct.cumprod(-1)
    return correct.prod(-1, keepdim=True).expand_as(correct)


def partial_credit(rewards: torch.Tensor, actions: torch.Tensor, y: torch.Tensor, credit: float) -> torch.Tensor:
    """Terminal reward with partial credit: a wrong answer gets credit · (its fraction of correct tokens) at every
    token instead of 0, so most groups are no longer all-0 but differ by less than ``credit``: the low-variance groups
    that standardisation amplifies (a failure mode beyond the paper)."""
    accuracy = (actions == y).float().mean(-1, keepdim=True)
    return torch.where(rewards == 1, rewards, credit * accuracy.expand_as(rewards))


def candidate_rewards(candidates: torch.Tensor, y: torch.Tensor, reward: str) -> torch.Tensor:
    """Rewards (..., H, K) of K next-token candidates per state; candidate 0 is the behaviour token.

    sequential: r_{t,k} = alive_t · c_{t,k} with alive_t = 1{behaviour tokens 0..t−1 all correct}
    (docs/reproduction.md §2.3).
    """
    correct = (candidates == y.unsqueeze(-1)).float()
    if reward == "sequential":
        behaviour = correct[..., 0]
        alive = torch.cat([torch.ones_like(behaviour[..., :1]), behaviour[..., :-1].cumprod(-1)], -1)
        correct = correct * alive.unsqueeze(-1)
    return correct


@torch.no_grad()
def sample_sequences(params: dict, prompts: torch.Tensor, uniforms: torch.Tensor, shared_prefixes: bool = True,
                     prefilled: tuple[transformer.Cache, torch.Tensor] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """K full answers per prompt with the KV cache: prompts (S, B, H), uniforms (S, B, K, H) → actions and their
    sampling log-probs, both (S, B, K, H).

    Each prompt is prefilled once. With ``shared_prefixes``, samples that have so far written the same tokens for
    the same prompt share one decoding row (their next-token distribution is the same), so each step decodes only
    the distinct (prompt, prefix) pairs: fewer rows early in the answer, and far fewer once the policy is
    confident and most of a group's samples agree. Otherwise every sample decodes its own row. ``prefilled``: the
    prompts' ``transformer.prefill`` when the caller has it (``Prefill``)."""
    S, B, K, H = uniforms.shape
    V = params["tok_emb"].shape[1]
    cache, logp = _detached(prefilled) if prefilled is not None else transformer.prefill(params, prompts)
    node = transformer.repeat_rows(S, B, K, prompts.device)  # each sample's decoding row
    seed = torch.arange(S, device=prompts.device)[:, None]
    u = uniforms.reshape(S, B * K, H)
    actions, taken = [], []
    for t in range(H):
        sample_logp = logp[seed, node]
        action = rng.sample_categorical(sample_logp, u[..., t])
        actions.append(action)
        taken.append(sample_logp.gather(-1, action.unsqueeze(-1)).squeeze(-1))
        if t == H - 1:
            break
        if shared_prefixes:
            node, parent, token = _distinct_children(node * V + action, V)
            cache, logp = transformer.decode(params, cache, token, H + t, rows=parent)
        else:
            cache, logp = transformer.decode(params, cache, action, H + t, rows=node)
            node = torch.arange(B * K, device=prompts.device).expand(S, B * K)
    return torch.stack(actions, -1).view(S, B, K, H), torch.stack(taken, -1).view(S, B, K, H)


def _distinct_children(code: torch.Tensor, vocab: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Group samples by code = row·V + token: → (each sample's new row (S, N), and for each new row its parent
    row and token (S, M)); M is the largest number of distinct codes over seeds (the rest is padding no sample
    refers to)."""
    sorted_code, order = code.sort(dim=1)
    is_new = torch.ones_like(sorted_code, dtype=torch.bool)
    is_new[:, 1:] = sorted_code[:, 1:] != sorted_code[:, :-1]
    rank = is_new.long().cumsum(1) - 1
    node = torch.empty_like(rank).scatter_(1, order, rank)
    count = int(is_new.sum(1).max())  # one host sync per decoding step: the number of rows to decode
    child = sorted_code.gather(1, torch.argsort((~is_new).byte(), dim=1, stable=True)[:, :count])
    return node, child // vocab, child % vocab


@torch.no_grad()
def sample_token_candidates(params: dict, prompts: torch.Tensor, uniforms: torch.Tensor,
                            prefilled: tuple[transformer.Cache, torch.Tensor] | None = None
                            ) -> tuple[torch.Tensor, torch.Tensor]:
    """K next-token candidates at each state of one behaviour path: uniforms (S, B, H, K) → candidates and their
    sampling log-probs (S, B, H, K); the behaviour path is candidates[..., 0]. ``prefilled`` as in
    ``sample_sequences``."""
    S, B, H, K = uniforms.shape
    cache, logp = _detached(prefilled) if prefilled is not None else transformer.prefill(params, prompts)
    candidates, taken = [], []
    for t in range(H):
        logp_k = logp.unsqueeze(-2).expand(S, B, K, logp.shape[-1])
        candidate = rng.sample_categorical(logp_k, uniforms[:, :, t])
        candidates.append(candidate)
        taken.append(logp_k.gather(-1, candidate.unsqueeze(-1)).squeeze(-1))
        if t < H - 1:
            cache, logp = transformer.decode(params, cache, candidate[..., 0], H + t)
    return torch.stack(candidates, -2), torch.stack(taken, -2)


def answer_log_probs(params: dict, prompts: torch.Tensor, actions: torch.Tensor, rows: torch.Tensor | None = None,
                     prefilled: tuple[transformer.Cache, torch.Tensor] | None = None, row_sums: bool = False
                     ) -> torch.Tensor:
    """Teacher-forced next-token log-probs at every answer state: prompts (S, B, H), answers (S, N, H) →
    (S, N, H, V). ``rows`` (S, N) names the prompt each answer continues; by default the N = B·K answers are K
    consecutive answers per prompt. One causal forward, with each prompt run once and shared by its answers, which
    nearly halves the work of grouped rollouts. ``prefilled``: ``transformer.prefill(params, prompts)`` already
    computed (with its graph), which is then not run again. ``row_sums``: as in ``transformer.extend`` (exact)."""
    (S, B, H), N = prompts.shape, actions.shape[1]
    if rows is None and N != B:
        rows = transformer.repeat_rows(S, B, N // B, prompts.device)
    cache, first = prefilled if prefilled is not None else transformer.prefill(params, prompts)
    if rows is not None:
        first = first[torch.arange(S, device=rows.device)[:, None], rows]
    # position 2H−1's output is never used
    _, rest = transformer.extend(params, cache, actions[..., :-1], H, rows, row_sums)
    return torch.cat([first.unsqueeze(2), rest], 2)


def distinct_answers(actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct answers of each group, to train on them once: actions (S, B, K, H) → (keep (S, N), inverse
    (S, B·K)).

    ``keep`` lists the flat positions b·K + k of the first occurrence of each distinct answer within its group
    (seeds with fewer than N = the largest count are padded with positions no rollout refers to); ``inverse`` maps
    every rollout to its row of ``keep``, so ℓ_all = ℓ_distinct.gather(1, inverse). Autograd sums the gradient of
    a shared row over its duplicates, so the loss and its gradient are those of all B·K rollouts: exact, and late in
    training, when most of a group's samples coincide, several times cheaper.
    """
    S, B, K, H = actions.shape
    vocab = int(actions.max()) + 1 if actions.numel() else 1  # one host sync
    if ANSWER_CODES and H * math.log2(max(vocab, 2)) < 62:  # an answer as one integer (base vocab): 8-32× less work
        powers = vocab ** torch.arange(H - 1, -1, -1, device=actions.device, dtype=torch.int64)
        codes = (actions.long() * powers).sum(-1)  # (S, B, K), exact integers: equal codes ⟺ equal answers
        same = codes.unsqueeze(3) == codes.unsqueeze(2)  # (S, B, K, K)
    else:
        same = (actions.unsqueeze(3) == actions.unsqueeze(2)).all(-1)  # (S, B, K, K)
    first = same.byte().argmax(-1)  # the first equal answer in the group (argmax returns the first maximum)
    is_first = (first == torch.arange(K, device=actions.device)).flatten(1)
    first_position = (torch.arange(B, device=actions.device)[:, None] * K + first).flatten(1)
    inverse = (is_first.long().cumsum(1) - 1).gather(1, first_position)
    count = int(is_first.sum(1).max())  # one host sync per episode: the compact batch's size
    keep = torch.argsort((~is_first).byte(), dim=1, stable=True)[:, :count]
    return keep, inverse


# Exact fast paths (bit-identical results; switches for tests/test_fast_paths.py and bench/section4_cost.py):
# ANSWER_CODES compares answers as integer codes in ``distinct_answers``; REUSE_ROLLOUT_PREFILL runs the rollout's
# prompt prefill with its graph and lets the first epoch's forward reuse it (``Prefill``).
ANSWER_CODES = True
REUSE_ROLLOUT_PREFILL = True


def set_fast_paths(enabled: bool) -> None:
    """Switch every exact fast path of this task and its transformer on or off (they never change a number)."""
    global ANSWER_CODES, REUSE_ROLLOUT_PREFILL
    ANSWER_CODES = REUSE_ROLLOUT_PREFILL = transformer.CONTIGUOUS_ROW_GRAD = enabled


def _detached(prefilled: tuple[transformer.Cache, torch.Tensor]) -> tuple[transformer.Cache, torch.Tensor]:
    cache, logp = prefilled
    return [(k.detach(), v.detach()) for k, v in cache], logp.detach()


@dataclass
class Prefill:
    """The rollout's prompt prefill, run with its autograd graph: sampling reads its values, and the first epoch's
    teacher-forced forward (same parameters, same prompts, same operations, so the same bits) reuses it instead of
    running the prompts again. Valid while ``params`` are the very tensors the forward gets and none has changed
    (``versions``: their in-place version counters; the optimizer's step bumps them)."""

    params: dict[str, torch.Tensor]
    cache: transformer.Cache
    first: torch.Tensor
    versions: tuple[int, ...]

    def valid_for(self, params: dict[str, torch.Tensor]) -> bool:
        return params is self.params and self.versions == tuple(p._version for p in params.values())


@dataclass
class Batch(RolloutBatch):
    """One episode's rollout for a chunk of seeds. Sequence rollouts: ``actions`` (S, B, K, H) (K = 1 for
    single-sample), ``scores`` (S, B, K) = mean_t r_t for groups or the per-token rewards (S, B, H) for single samples.
    Token candidates: ``actions`` = behaviour path (S, B, H), ``candidates`` and ``scores`` (S, B, H, K)."""

    prompts: torch.Tensor
    actions: torch.Tensor
    scores: torch.Tensor
    success: torch.Tensor  # per candidate (group / token) or per rollout (single)
    error: torch.Tensor  # (S,)
    candidates: torch.Tensor | None = None
    distinct: tuple[torch.Tensor, torch.Tensor] | None = None  # (keep, inverse) of ``distinct_answers``
    prefill: Prefill | None = None  # the rollout's prefill with its graph, until the first forward takes it
    params: dict[str, torch.Tensor] | None = None  # the parameter views the last forward ran on (for its backward)
    step: int = 0


def seed_chunk(chunk, on_cpu: bool, grouped: bool, seeds: int):
    """``task.seed_chunk``, ``auto`` resolved: measured (bench/README.md), on CPU one seed at a time keeps a seed's
    800-row groups in cache, while single-sample batches are small enough to batch; a GPU always runs one batched
    program. Any other value is returned as given (the task checks it)."""
    if chunk != "auto":
        return chunk
    return 1 if on_cpu and grouped else seeds


def check_group_size(key: str, value):
    """K >= 1 here; a grouped or token-candidate method's K >= 2 is checked with its rollout (``__init__``)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(f"{key}={value!r} is not valid; expected an integer >= 2 (>= 1 for a single-sample "
                          "method, whose K scales its batch under task.match=interactions)")
    return value


def check_seed_chunk(key: str, value):
    if value != "auto" and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
        raise ConfigError(f"{key}={value!r} is not valid; expected auto or a positive integer")
    return value


class TokenReversal(Task):
    name = "token_reversal"
    rollouts = frozenset({Rollout.SINGLE, Rollout.GROUP, Rollout.TOKEN_CANDIDATES})
    metric_names = METRICS
    multi_epoch = True

    @dataclass(frozen=True)
    class Settings(Task.Settings):
        H: int = required("prompt and answer length", check=check_positive_int)
        V: int = required("vocabulary size (1: every answer is right from step 0)", low=2, integer=True)
        target: str = required("the answer the prompt asks for", choices=TARGETS)
        reward: str = required("bag_of_tokens (r_t = c_t) | sequential (r_t = Π_{s≤t} c_s) | "
                               "terminal (exact match, every t)", choices=REWARDS)
        batch_size: int = required("prompts B per episode", check=check_positive_int)
        K: int = required("group size: sequences per prompt or next-token candidates per state (at least 2 for "
                          "those; a single-sample method's K scales its batch under match=interactions)",
                          check=check_group_size)
        logp_old: str = required("ℓ_old: sampled (the reference) | exact (the paper); reproduction notes "
                                 "§14.19", choices=LOGP_OLD)
        match: str = required("prompts | interactions: single-sample methods get B·K prompts at lr·√K "
                              "(reproduction notes §6.8)", choices=MATCHES)
        dedup: str | bool = required("decode shared prefixes and train distinct answers once (exact): auto "
                                     "(CPU on, GPU off) | true | false", choices=("auto", True, False))
        seed_chunk: str | int = required("seeds computed together: auto (CPU: 1 for grouped rollouts, all for "
                                         "single-sample; GPU: all) | n", check=check_seed_chunk)
        reward_noise: float = required("beyond the paper: σ of Gaussian noise on every score an algorithm reads "
                                       "(the error is clean)", low=0)
        partial_credit: float = required("beyond the paper, terminal reward: a wrong answer scores this × its "
                                         "token accuracy", low=0, high=1, high_open=True)

    @classmethod
    def inert_keys(cls, algorithm) -> frozenset[str]:
        """task.match rescales single-sample methods only (reproduction notes §6.8): a grouped or token-candidate
        method's run is the same under prompts and interactions."""
        return frozenset() if algorithm.rollout_for(cls.rollouts) is Rollout.SINGLE else frozenset({"task.match"})

    @classmethod
    def memory_estimate(cls, cfg, seeds):
        from algorithms import ALGORITHMS

        task, model = cfg.task, cfg.get("model") or {}
        H, V, K, B = (size(task.get(key)) for key in ("H", "V", "K", "batch_size"))
        d, heads, layers, ffn = (size(model.get(key)) for key in ("d_model", "heads", "layers", "ffn"))
        algorithm = ALGORITHMS.get(cfg.algorithm.get("name"))
        grouped = algorithm is None or algorithm.rollout_for(cls.rollouts) is not Rollout.SINGLE
        chunk = seed_chunk(task.get("seed_chunk"), str(cfg.get("device", "cpu")).startswith("cpu"), grouped, seeds)
        together = min(size(chunk) or seeds, seeds)  # seeds computed together
        sequences, length = B * K, 2 * H  # an upper bound for every rollout shape (interactions: B·K prompts of one)
        per_token = layers * (12 * d + 3 * ffn + 2 * heads * length) + 4 * V  # activations (attention: heads × T)
        forward = FLOAT * together * sequences * length * per_token  # kept for the backward (measured: ~0.6 of this)
        params = 2 * V * d + length * d + layers * (4 * d * d + 2 * d * ffn + 10 * d)
        state = 6 * FLOAT * seeds * params  # parameters, gradients, the optimiser's moments
        rollouts = seeds * sequences * H * (2 * INDEX + 6 * FLOAT)  # every chunk's batch: tokens, log-probs, scores
        return (forward + state + rollouts,
                f"seeds computed together={together} × task.batch_size={B} × task.K={K} × task.H={H} × task.V={V} × "
                f"model.d_model={d}")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        settings, model, optim = self.settings, self.model_cfg, self.optim_cfg
        self.H, self.V, self.K, self.target, self.reward = (settings.H, settings.V, settings.K, settings.target,
                                                            settings.reward)
        if self.rollout is not Rollout.SINGLE and self.K < 2:  # a single sample's K only scales an interactions batch
            raise ConfigError(f"task.K={self.K!r} is not valid for algorithm={self.algorithm.name}, which compares K "
                              f"{'sequences per prompt' if self.rollout is Rollout.GROUP else 'next tokens per state'}"
                              " (K = 1: every group has zero variance, never a gradient); expected an integer >= 2")
        match = settings.match
        self.logp_old, self.reward_noise, self.partial_credit = (settings.logp_old, settings.reward_noise,
                                                                 settings.partial_credit)
        if self.partial_credit and self.reward != "terminal":
            raise ConfigError(f"task.partial_credit={self.partial_credit} is not valid with task.reward={self.reward}: "
                              "it grades the wrong answers of the terminal reward; valid choices: 0, or "
                              "task.reward=terminal")
        if self.rollout is Rollout.TOKEN_CANDIDATES and self.reward == "terminal":
            raise ConfigError(f"algorithm={self.algorithm.name} scores next-token candidates and needs a dense "
                              f"reward; task.reward=terminal is not valid for it; valid choices: bag_of_tokens, "
                              f"sequential")
        # Interaction matching (docs/reproduction.md §6.8): single-sample methods see B·K prompts at lr·√K, so that
        # every method consumes B·K rollouts per episode; grouped and token-candidate methods are unchanged.
        scale = self.K if match == "interactions" and self.rollout is Rollout.SINGLE else 1
        self.batch_size = settings.batch_size * scale
        self.lr = float(check_positive_float("optim.lr", optim.lr)) * math.sqrt(scale)
        self.model = transformer.TransformerConfig.from_config(model)
        optimizer = check_choice("optim.name", optim.name, OPTIMIZERS)
        muon_split = check_choice("optim.muon_split", optim.muon_split, MUON_SPLITS) if optimizer == "muon" else "none"
        self.guard = Guard(check_choice("optim.guard", optim.get("guard", "none"), GUARDS),
                           float(check_number("optim.guard_tau", optim.get("guard_tau", 0.0), low=0)))
        if optimizer == "adam" and "muon_split" in optim:
            raise ConfigError("optim.muon_split is not valid for optim=adam, which puts every parameter on Adam; "
                              "valid choices: optim=muon, or leave optim.muon_split out")
        if self.guard.kind == "none" and self.guard.tau:
            raise ConfigError(f"optim.guard_tau={self.guard.tau} has no effect with optim.guard=none; valid choices: "
                              "optim.guard=skip or scale, or optim.guard_tau=0")
        if self.guard.kind == "scale" and not self.guard.tau > 0:
            raise ConfigError(f"optim.guard_tau={self.guard.tau} is not valid for optim.guard=scale (min(1, ‖g‖/τ)); "
                              "expected τ > 0")
        self.params = {k: v.detach().to(self.device).requires_grad_(True) for k, v in transformer.init_params(
            self.seeds, self.V, 2 * self.H, self.model).items()}
        self.optimizer = transformer_optimizer(self.params, muon_split, self.lr)
        self.active = torch.ones(len(self.seeds), dtype=torch.bool, device=self.device)
        # dedup auto: on for CPU; off on a GPU, where one padded batch beats a host sync per decoding step
        self.dedup = self.device.type == "cpu" if settings.dedup == "auto" else settings.dedup
        chunk = seed_chunk(settings.seed_chunk, self.device.type == "cpu", self.rollout is not Rollout.SINGLE,
                           len(self.seeds))
        S = len(self.seeds)
        self.chunks = [slice(None)] if chunk >= S else [slice(lo, lo + chunk) for lo in range(0, S, chunk)]

    def chunk_params(self, seeds: slice) -> dict[str, torch.Tensor]:
        """The parameters of a chunk of seeds: views into the seed-batched leaves, so gradients land in place."""
        return self.params if seeds == slice(None) else {k: v[seeds] for k, v in self.params.items()}

    # ---- rollout ---------------------------------------------------------------------------------------------
    def rollout_batch(self, step: int, seeds: slice = slice(None)) -> Batch:
        """Sample this episode's prompts (stream "contexts") and rollouts (stream "actions") for a chunk of seeds
        and score them; counter-based streams make the numbers independent of the chunking."""
        B, H, K = self.batch_size, self.H, self.K
        params, seed_ids = self.chunk_params(seeds), self.seeds[seeds]
        prompts = rng.randint(seed_ids, "contexts", step, (B, H), self.V).to(self.device)
        y = target_tokens(prompts, self.target, self.V)
        prefill = self._prefill(params, prompts)
        prefilled = None if prefill is None else (prefill.cache, prefill.first)
        if self.rollout is Rollout.TOKEN_CANDIDATES:
            uniforms = rng.uniform(seed_ids, "actions", step, (B, H, K)).to(self.device)
            candidates, _ = sample_token_candidates(params, prompts, uniforms, prefilled)
            scores = candidate_rewards(candidates, y, self.reward)
            return Batch(prompts, candidates[..., 0], self._noisy(scores, seed_ids, step), scores == 1,
                         1 - scores[..., 0].flatten(1).mean(1), seeds=seeds, candidates=candidates, prefill=prefill,
                         step=step)
        group = K if self.rollout is Rollout.GROUP else 1
        uniforms = rng.uniform(seed_ids, "actions", step, (B, group, H)).to(self.device)
        actions, _ = sample_sequences(params, prompts, uniforms, shared_prefixes=self.dedup, prefilled=prefilled)
        rewards = token_rewards(actions, y.unsqueeze(2), self.reward)  # (S, B, group, H)
        success = (rewards == 1).all(-1)
        error = 1 - rewards.flatten(1).mean(1)  # of the task's reward, before partial credit and noise
        if self.partial_credit:
            rewards = partial_credit(rewards, actions, y.unsqueeze(2), self.partial_credit)
        if self.rollout is Rollout.GROUP:
            distinct = distinct_answers(actions) if self.dedup and group > 1 else None
            return Batch(prompts, actions, self._noisy(rewards.mean(-1), seed_ids, step), success, error, seeds=seeds,
                         distinct=distinct, prefill=prefill, step=step)
        return Batch(prompts, actions, self._noisy(rewards.squeeze(2), seed_ids, step, per_sequence=True),
                     success.squeeze(2), error, seeds=seeds, prefill=prefill, step=step)

    def _prefill(self, params: dict[str, torch.Tensor], prompts: torch.Tensor) -> Prefill | None:
        """The prompts' prefill with its graph, for the rollout and the first epoch (``Prefill``); None where no
        gradient will be taken (no graph to record) or the fast path is off."""
        if not (REUSE_ROLLOUT_PREFILL and torch.is_grad_enabled()
                and any(p.requires_grad for p in params.values())):
            return None
        cache, first = transformer.prefill(params, prompts)
        return Prefill(params, cache, first, tuple(p._version for p in params.values()))

    def _take_prefill(self, batch: Batch, params: dict[str, torch.Tensor]
                      ) -> tuple[transformer.Cache, torch.Tensor] | None:
        """The batch's rollout prefill if it is still valid for ``params`` (then dropped: it is used once)."""
        prefill, batch.prefill = batch.prefill, None
        if prefill is None or not torch.is_grad_enabled() or not prefill.valid_for(params):
            return None
        return prefill.cache, prefill.first

    def _noisy(self, scores: torch.Tensor, seed_ids: torch.Tensor, step: int, per_sequence: bool = False
               ) -> torch.Tensor:
        """The scores the algorithm reads plus i.i.d. N(0, task.reward_noise²) per candidate (stream
        "reward_noise"): a sequence of a group, a token candidate, or a single sample, whose per-token rewards
        (the last axis, ``per_sequence``) all get its one draw."""
        if not self.reward_noise:
            return scores
        noise = rng.normal(seed_ids, "reward_noise", step, scores.shape[1:-1] if per_sequence else scores.shape[1:],
                           std=self.reward_noise)
        noise = noise.unsqueeze(-1) if per_sequence else noise
        return scores + noise.to(scores.device, scores.dtype)

    def log_probs(self, batch: Batch) -> torch.Tensor:
        """Current log-probs of the batch's candidates: sequence sums (S, B, K), or per token (S, B, K, H) for an
        algorithm that reads tokens, token candidates (S, B, H, K), or per-token (S, B, H) for single samples; one
        teacher-forced forward in every case (of the distinct answers only, when ``task.dedup``). The first forward
        takes the very parameter views the rollout's prefill graph was built on."""
        params = batch.prefill.params if batch.prefill is not None else self.chunk_params(batch.seeds)
        batch.params = params
        prefilled = self._take_prefill(batch, params)
        if self.rollout is Rollout.TOKEN_CANDIDATES:
            return answer_log_probs(params, batch.prompts, batch.actions, prefilled=prefilled).gather(
                -1, batch.candidates)
        S, B, K, H = batch.actions.shape
        per_token = self.rollout is Rollout.GROUP and self.algorithm.token_level
        actions = batch.actions.reshape(S, B * K, H)
        if batch.distinct is not None:
            keep, inverse = batch.distinct
            answers = actions.gather(1, keep.unsqueeze(-1).expand(-1, -1, H))
            taken = answer_log_probs(params, batch.prompts, answers, keep // K, prefilled, row_sums=True).gather(
                -1, answers.unsqueeze(-1))
            if per_token:
                return taken.squeeze(-1).gather(1, inverse.unsqueeze(-1).expand(-1, -1, H)).view(S, B, K, H)
            return taken.squeeze(-1).sum(-1).gather(1, inverse).view(S, B, K)
        taken = answer_log_probs(params, batch.prompts, actions, prefilled=prefilled).gather(
            -1, actions.unsqueeze(-1)).view(S, B, K, H)
        if per_token:
            return taken
        return taken.sum(-1) if self.rollout is Rollout.GROUP else taken.squeeze(2)

    def groups(self, batch: Batch, logp_old: torch.Tensor) -> Groups:
        """The algorithm's view of a batch: scores, ℓ_old (with ``task.logp_old=sampled``, one rounding error per
        entry, uniform in ±|ℓ|·2⁻²⁴, stream "logp_old") and, for single samples, the batch-mean baseline advantages
        A_t = r_t − mean over the batch of r_t."""
        if self.logp_old == "sampled":
            u = rng.uniform(self.seeds[batch.seeds], "logp_old", batch.step, logp_old.shape[1:]).to(logp_old.device)
            logp_old = logp_old + (2 * u - 1) * logp_old.abs() * ROUNDING
        single = self.rollout is Rollout.SINGLE
        return Groups(batch.scores, logp_old, self.rollout, lengths=float(self.H),
                      advantages=batch_mean_baseline(batch.scores, batch_dim=1) if single else None)

    # ---- update ----------------------------------------------------------------------------------------------
    def rollout_batches(self, step: int) -> list[Batch]:
        self.optimizer.record_updates()  # the episode's update norms, reported per episode
        return [self.rollout_batch(step, seeds) for seeds in self.chunks]

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, loss: torch.Tensor, batch: Batch) -> None:
        if len(self.chunks) == 1:
            loss.sum().backward()
        else:
            self._backward_into_slices(loss.sum(), batch.params, batch.seeds)

    def optimizer_step(self, epoch: int, loss: torch.Tensor) -> None:
        """Muon/Adam on the epoch's gradient. The first epoch's loss and gradient norm are the episode's: a seed whose
        loss or norm is not finite is frozen from then on, and the guard (``optim.guard``) decides from them which
        seeds move."""
        if epoch == 0:
            self._first_loss, self._grad_norm = loss, self.grad_norm()
            self.active &= torch.isfinite(loss) & torch.isfinite(self._grad_norm)  # freeze diverged seeds
            self._moving = self.guard.moving(self.active, self._grad_norm)
        factor = None
        if self.guard.kind == "scale":
            factor = self.guard.step_factor(self._grad_norm if epoch == 0 else self.grad_norm())
        self.optimizer.step(active=self._moving, factor=factor)

    def report(self, step: int, batches: list[Batch]) -> StepOutput:
        moved = self.optimizer.update_norms()
        diagnostics = [self.diagnostics(batch) for batch in batches]
        metrics = {"error": torch.cat([batch.error for batch in batches]), "grad_norm": self._grad_norm,
                   **{name: torch.cat([d[name] for d in diagnostics]) for name in diagnostics[0]},
                   "update_muon": moved["muon"], "update_adam": moved["adam"]}
        return StepOutput(loss=self._first_loss, metrics=metrics, log_step=step)

    def _backward_into_slices(self, loss: torch.Tensor, params: dict[str, torch.Tensor], seeds: slice) -> None:
        """Write a chunk's gradients into its seed slice of each leaf's ``.grad``. Backpropagating through the slice
        views instead would build a full-size (all seeds) gradient per chunk and parameter and add it to ``.grad``:
        work growing with the square of the seed count."""
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        for leaf, grad in zip(self.params.values(), grads):
            if grad is not None:
                if leaf.grad is None:
                    leaf.grad = torch.zeros_like(leaf)
                leaf.grad[seeds] = grad

    def grad_norm(self) -> torch.Tensor:
        """Global L2 norm of each seed's raw loss gradient over all parameters, (S,)."""
        return sum(p.grad.pow(2).flatten(1).sum(1) for p in self.params.values() if p.grad is not None).sqrt()

    @torch.no_grad()
    def diagnostics(self, batch: Batch) -> dict[str, torch.Tensor]:
        """Section 4 diagnostics (docs/reproduction.md §6.9) on the episode's rollout, with the pre-update (rollout)
        policy.

        Per-candidate weight: |w| of the algorithm's first-epoch weights (TPO family q, Group PG u/η, GRPO family
        A, DG gate·A), averaged over the tokens of a single sample or of a per-token group candidate; the target's
        entropy for algorithms whose signal is a target. Groups are the K sequences of a prompt or the K candidates
        of a state."""
        weights = self.algorithm.weights(batch.groups, batch.signal).abs()
        if weights.dim() > batch.success.dim():
            weights = weights.mean(-1)
        nan = torch.full_like(batch.error, math.nan)
        entropy = (torch.special.entr(batch.signal).sum(-1).flatten(1).mean(1) if self.algorithm.target else nan)
        success = batch.success.float()

        def weighted_mean(mask: torch.Tensor) -> torch.Tensor:
            return (weights * mask).flatten(1).sum(1) / mask.flatten(1).sum(1).clamp_min(1)

        metrics = {"weight_winners": weighted_mean(success), "weight_losers": weighted_mean(1 - success),
                   "target_entropy": entropy}
        if self.rollout is Rollout.SINGLE:
            return {**metrics, "frac_success": success.flatten(1).mean(1), "all_fail": nan, "frac_zero_var": nan}
        frac_success = success.amax(-1).flatten(1).mean(1)
        zero_var = (population_std(batch.scores) < ZERO_VARIANCE_THRESHOLD).float().flatten(1).mean(1)
        return {**metrics, "frac_success": frac_success, "all_fail": 1 - frac_success, "frac_zero_var": zero_var}

    # ---- checkpoints -----------------------------------------------------------------------------------------
    def state_dict(self):
        return {**super().state_dict(), "active": self.active}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.active = state["active"].to(self.device)
