"""Cost proxy of the paper's JAX reference code, written from docs/reproduction.md, to re-baseline the reference
figures on a host.

The perf targets are set relative to "the paper's JAX reference code measured on this machine class" (CPU-s per
episode and seed, 1 thread). Those figures were taken on an older host; this script performs the same computation
per episode as the reference does (per docs/reproduction.md: shapes, the reference's redundant work, one jitted
program with seeds vmapped), in plain jax.numpy + optax at the versions the reference pins, so its timings on a new
host stand in for the reference's there. It is a cost proxy, not a correctness reference.

    make bench-jax          # builds .venv-jax (jax 0.9.2, optax 0.2.8) and runs every setting at 1 seed
    .venv-jax/bin/python bench/jax_reference.py [--settings mnist,terminal,terminal7,dense] [--seeds 1]
        [--episodes 3] [--unroll]

The process pins itself to one core and XLA to one thread (the figures are 1-thread, like the harness's defaults).

Settings (reference figures measured on the old host in parentheses):
  mnist     MNIST contextual bandit, MLP 784-50-50-10, B = 100, TPO (docs/reproduction.md §2.5), optax.adam(1e-3)
            (0.53–0.66 ms per step at 1 seed, 12–13.5 ms for 20 vmapped seeds). Two timings: "step" = one jitted
            step per Python call (batch gather from a 60,000 × 784 float32 table, sampling, loss, grad, Adam),
            median of 5 × 300 steps; "scan200+eval" = 200 steps in one lax.scan followed by the greedy evaluation on
            10,000 test images (docs/reproduction.md §6.3: per-step keys split up front, evaluation after each
            block of 200), per step amortised, median of 5 blocks.
  terminal  token reversal, terminal reward, H = 10, V = 2, K = 8, B = 100, TPO and GRPO (1.83 and 2.09 CPU-s)
  terminal7 the same at H = 7, TPO and GRPO (TPO 1.16 CPU-s)
  dense     bag-of-tokens reward, V = 16, H = 10, K = 8, B = 100, TPO_token (1.37 CPU-s)

What one token episode computes (all in one jitted function, seeds vmapped, loops as lax.scan):
  * transformer of docs/reproduction.md §3.1 (d 64, 2 heads of 32, 2 pre-LN layers, FFN 256, learned positions,
    untied head with log-softmax over V at every position), Flax's parameter tree shapes, so optax.contrib.muon's rank
    rule splits Muon / Adam as the reference's does (§4.1: attention kernels (64,2,32) on Adam, q/k/v biases (2,32) on
    Muon);
  * sampling (§3.1, §5.1): H steps, each a full forward of the zero-padded 2H-token buffer (no KV cache), reading the
    log-probs at position H+t−1; grouped rollouts (TPO, GRPO, §2.2/§2.7) run B·K = 800 rows, the token-candidate
    rollout (TPO_token, §2.3) runs B = 100 behaviour rows and draws K candidates per state;
  * old log-probs are the ones recorded by the sampling pass (§2.2 step 3, §2.7): no extra forward;
  * E = 4 epochs (§2.0), each a forward + backward + optax.contrib.muon(1e-3) step: grouped methods teacher-force the
    B·K sequences of 2H tokens (prompt recomputed for each candidate); TPO_token forwards each of the B·H stored
    states (2H tokens) separately and reads the K candidates' log-probs at position H+t−1.
Not reproduced: the reference's init and RNG streams (so learning curves differ), metric logging and W&B, Python-side
bookkeeping between jitted calls, and anything after the first few episodes (the reference's cost per episode is
fixed, it never skips duplicate work). `--unroll` replaces the token episode's scans by straight-line code (a
structure check: same FLOPs, and XLA's cost analysis then counts every loop trip, where it counts a scan body once).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false").strip()
if hasattr(os, "sched_setaffinity"):  # one core: XLA's CPU client runs its own threads beside the compute thread
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

import argparse
import datetime
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import jaxlib
import optax

D_MODEL, HEADS, HEAD_DIM, LAYERS, FFN = 64, 2, 32, 2, 256
LN_EPS = 1e-6
EPOCHS, TPO_ETA, GRPO_EPS, GRPO_BETA = 4, 1.0, 0.2, 0.04
MUON_LR = 10 * 1e-4
MNIST_TRAIN, MNIST_TEST, MNIST_B, MNIST_HIDDEN = 60_000, 10_000, 100, 50

TOKEN_SETTINGS = {  # name: (H, V, K, B, reward, algorithms)
    "terminal": (10, 2, 8, 100, "terminal", ["tpo", "grpo"]),
    "terminal7": (7, 2, 8, 100, "terminal", ["tpo", "grpo"]),
    "dense": (10, 16, 8, 100, "bag_of_tokens", ["tpo_token"]),
}


# ---------------------------------------------------------------------------------------------------------- model
def truncated_lecun(key, shape, fan_in):
    """Flax default kernel init: truncated normal in [−2, 2] with effective std 1/sqrt(fan_in)."""
    return jax.random.truncated_normal(key, -2.0, 2.0, shape) * (fan_in ** -0.5 / 0.87962566)


def init_transformer(key, vocab, length):
    """Parameters with the Flax tree's shapes (docs/reproduction.md §3.1); 101,634 of them for V = 2, H = 10."""
    keys = iter(jax.random.split(key, 32))

    def layer_norm_params():
        return {"scale": jnp.ones(D_MODEL), "bias": jnp.zeros(D_MODEL)}

    def dense(fan_in, fan_out):
        return {"kernel": truncated_lecun(next(keys), (fan_in, fan_out), fan_in), "bias": jnp.zeros(fan_out)}

    def attention():
        qkv = {name: {"kernel": truncated_lecun(next(keys), (D_MODEL, HEADS, HEAD_DIM), D_MODEL),
                      "bias": jnp.zeros((HEADS, HEAD_DIM))} for name in ("query", "key", "value")}
        out = {"kernel": truncated_lecun(next(keys), (HEADS, HEAD_DIM, D_MODEL), D_MODEL), "bias": jnp.zeros(D_MODEL)}
        return {**qkv, "out": out}

    return {
        "embed": jax.random.normal(next(keys), (vocab, D_MODEL)) / 8.0,
        "pos_emb": 0.02 * jax.random.normal(next(keys), (length, D_MODEL)),
        "layers": [{"ln1": layer_norm_params(), "attn": attention(), "ln2": layer_norm_params(),
                    "up": dense(D_MODEL, FFN), "down": dense(FFN, D_MODEL)} for _ in range(LAYERS)],
        "ln_f": layer_norm_params(),
        "head": dense(D_MODEL, vocab),
    }


def layer_norm(p, x):
    """Flax LayerNorm: variance as E[x²] − E[x]², eps 1e-6."""
    mean = x.mean(-1, keepdims=True)
    var = jnp.maximum((x * x).mean(-1, keepdims=True) - mean * mean, 0.0)
    return (x - mean) * jax.lax.rsqrt(var + LN_EPS) * p["scale"] + p["bias"]


def self_attention(p, x, causal):
    """Flax MultiHeadDotProductAttention: per-head q/k/v einsums, 1/sqrt(head_dim) on q, most-negative masking."""
    q, k, v = (jnp.einsum("nld,dhk->nlhk", x, p[n]["kernel"]) + p[n]["bias"] for n in ("query", "key", "value"))
    scores = jnp.einsum("nqhk,nlhk->nhql", q / jnp.sqrt(HEAD_DIM).astype(x.dtype), k)
    weights = jax.nn.softmax(jnp.where(causal, scores, jnp.finfo(scores.dtype).min), axis=-1)
    mixed = jnp.einsum("nhql,nlhk->nqhk", weights, v)
    return jnp.einsum("nqhk,hkd->nqd", mixed, p["out"]["kernel"]) + p["out"]["bias"]


def transformer_log_probs(params, tokens):
    """(N, L) int tokens → (N, L, V) log-probs at every position (the reference's model output)."""
    length = tokens.shape[1]
    causal = jnp.tril(jnp.ones((length, length), bool))
    x = jnp.take(params["embed"], tokens, axis=0) + params["pos_emb"][:length]
    for layer in params["layers"]:
        x = x + self_attention(layer["attn"], layer_norm(layer["ln1"], x), causal)
        hidden = layer_norm(layer["ln2"], x) @ layer["up"]["kernel"] + layer["up"]["bias"]
        hidden = jax.nn.gelu(hidden, approximate=True)
        x = x + hidden @ layer["down"]["kernel"] + layer["down"]["bias"]
    logits = layer_norm(params["ln_f"], x) @ params["head"]["kernel"] + params["head"]["bias"]
    return jax.nn.log_softmax(logits, axis=-1)


# ----------------------------------------------------------------------------------------------------- algorithms
def skill(scores):
    """Reproduction notes §1: centred scores over the last axis divided by the population std where it exceeds 1e-6."""
    centred = scores - scores.mean(-1, keepdims=True)
    std = scores.std(-1, keepdims=True)
    return jnp.where(std > 1e-6, centred / jnp.where(std > 1e-6, std, 1.0), centred)


def tpo_target(old_log_scores, scores):
    """Reproduction notes §2.1: q ∝ softmax(ℓ_old) · exp(skill(s)/η) over the last axis."""
    return jax.nn.softmax(old_log_scores + skill(scores) / TPO_ETA, axis=-1)


def grpo_objective(new, old, scores):
    """Reproduction notes §2.7: clipped surrogate, sequence-level ratio, z-scored advantages, k3 KL, summed over K."""
    advantages = (scores - scores.mean(-1, keepdims=True)) / (scores.std(-1, keepdims=True) + 1e-8)
    log_ratio = jnp.clip(new - old, -20.0, 20.0)
    ratio = jnp.exp(log_ratio)
    surrogate = jnp.minimum(ratio * advantages, jnp.clip(ratio, 1 - GRPO_EPS, 1 + GRPO_EPS) * advantages)
    return (surrogate - GRPO_BETA * (jnp.exp(-log_ratio) + log_ratio - 1.0)).sum(-1)


def token_rewards(actions, targets, reward):
    """Per-token reward (…, H): bag_of_tokens = correctness, terminal = exact match broadcast to every position."""
    correct = (actions == targets).astype(jnp.float32)
    if reward == "terminal":
        return jnp.broadcast_to(correct.prod(-1, keepdims=True), correct.shape)
    return correct


def sample_rows(key, log_probs, shape=()):
    """Categorical draws with one RNG key per row (docs/reproduction.md §2.3: a separate key per batch element)."""
    keys = jax.random.split(key, log_probs.shape[0])
    return jax.vmap(lambda k, lp: jax.random.categorical(k, lp, shape=shape))(keys, log_probs)


def make_token_episode(H, V, K, B, reward, algorithm, optimizer, unroll):
    """One episode for one seed: (params, opt_state, key, episode) → (params, opt_state, error); `unroll` turns the
    sampling and epoch scans into straight-line code (as Python loops inside jit would be)."""

    def grouped_rollout(params, prompts, key):
        """B·K rows; every step re-runs the whole 2H buffer and samples token t from position H+t−1."""
        buffer = jnp.concatenate([jnp.repeat(prompts, K, axis=0), jnp.zeros((B * K, H), jnp.int32)], axis=1)

        def step(buffer, inputs):
            t, step_key = inputs
            position_log_probs = jax.lax.dynamic_index_in_dim(transformer_log_probs(params, buffer), H + t - 1,
                                                              axis=1, keepdims=False)
            actions = sample_rows(step_key, position_log_probs)
            buffer = jax.lax.dynamic_update_index_in_dim(buffer, actions, H + t, axis=1)
            return buffer, jnp.take_along_axis(position_log_probs, actions[:, None], axis=1)[:, 0]

        buffer, token_log_probs = jax.lax.scan(step, buffer, (jnp.arange(H), jax.random.split(key, H)), unroll=unroll)
        return buffer, token_log_probs.T  # (B·K, 2H), (B·K, H)

    def candidate_rollout(params, prompts, key):
        """B behaviour rows; K candidates per state, candidate 0 executed; every state's buffer stored."""
        buffer = jnp.concatenate([prompts, jnp.zeros((B, H), jnp.int32)], axis=1)

        def step(buffer, inputs):
            t, step_key = inputs
            position_log_probs = jax.lax.dynamic_index_in_dim(transformer_log_probs(params, buffer), H + t - 1,
                                                              axis=1, keepdims=False)
            candidates = sample_rows(step_key, position_log_probs, shape=(K,))
            old = jnp.take_along_axis(position_log_probs, candidates, axis=1)
            next_buffer = jax.lax.dynamic_update_index_in_dim(buffer, candidates[:, 0], H + t, axis=1)
            return next_buffer, (buffer, candidates, old)

        _, (states, candidates, old) = jax.lax.scan(step, buffer, (jnp.arange(H), jax.random.split(key, H)),
                                                    unroll=unroll)
        return states.transpose(1, 0, 2), candidates.transpose(1, 0, 2), old.transpose(1, 0, 2)  # (B, H, ·)

    def sequence_log_probs(params, buffer):
        """Teacher-forced Σ_t log π(a_t) of each of the B·K sequences, as (B, K)."""
        log_probs = transformer_log_probs(params, buffer)[:, H - 1:2 * H - 1]
        taken = jnp.take_along_axis(log_probs, buffer[:, H:, None], axis=2)[..., 0]
        return taken.sum(-1).reshape(B, K)

    def candidate_log_probs(params, states, candidates):
        """Forward each of the B·H stored states separately; the K candidates' log-probs at position H+t−1."""
        log_probs = transformer_log_probs(params, states.reshape(B * H, 2 * H)).reshape(B, H, 2 * H, V)
        positions = jnp.arange(H) + H - 1
        at_state = jnp.take_along_axis(log_probs, positions[None, :, None, None], axis=2)[:, :, 0]  # (B, H, V)
        return jnp.take_along_axis(at_state, candidates, axis=2)

    def episode(params, opt_state, key, episode_index):
        prompt_key, sample_key = jax.random.split(jax.random.fold_in(key, episode_index))
        prompts = jax.random.randint(prompt_key, (B, H), 0, V)
        targets = prompts[:, ::-1]  # reverse copy
        if algorithm == "tpo_token":
            states, candidates, old = candidate_rollout(params, prompts, sample_key)
            rewards = token_rewards(candidates, targets[:, :, None], reward)  # per candidate: correctness
            target_weights = tpo_target(old, rewards)
            error = 1.0 - rewards[:, :, 0].mean()

            def loss(params):
                current = jax.nn.log_softmax(candidate_log_probs(params, states, candidates), axis=-1)
                return -(target_weights * current).sum(-1).mean()
        else:
            buffer, token_log_probs = grouped_rollout(params, prompts, sample_key)
            rewards = token_rewards(buffer[:, H:], jnp.repeat(targets, K, axis=0), reward)
            scores = rewards.mean(-1).reshape(B, K)
            old = token_log_probs.sum(-1).reshape(B, K)
            error = 1.0 - rewards.mean()
            if algorithm == "tpo":
                target_weights = tpo_target(old, scores)

                def loss(params):
                    return -(target_weights * jax.nn.log_softmax(sequence_log_probs(params, buffer), -1)).sum(-1).mean()
            else:
                def loss(params):
                    return -grpo_objective(sequence_log_probs(params, buffer), old, scores).mean()

        def epoch(carry, _):
            params, opt_state = carry
            grads = jax.grad(loss)(params)
            updates, opt_state = optimizer.update(grads, opt_state, params)
            return (optax.apply_updates(params, updates), opt_state), None

        (params, opt_state), _ = jax.lax.scan(epoch, (params, opt_state), None, length=EPOCHS, unroll=unroll)
        return params, opt_state, error

    return episode


# -------------------------------------------------------------------------------------------------- FLOP counting
def transformer_forward_flops(rows, length, vocab):
    """Matmul FLOPs of one forward of `rows` sequences of `length` tokens (2 per multiply-add)."""
    tokens = rows * length
    per_layer = 2 * tokens * D_MODEL * (3 * D_MODEL + D_MODEL + 2 * FFN) + 2 * 2 * rows * length * length * D_MODEL
    return LAYERS * per_layer + 2 * tokens * D_MODEL * vocab


def muon_step_flops(H, V):
    """Newton–Schulz matmul FLOPs of one Muon step: 5 × (X Xᵀ, A A, (bA + cA²) X) per Muon-group matrix."""
    shapes = [(D_MODEL, FFN), (FFN, D_MODEL)] * LAYERS + [(D_MODEL, V), (V, D_MODEL), (2 * H, D_MODEL)]
    shapes += [(HEADS, HEAD_DIM)] * 3 * LAYERS
    return sum(5 * (4 * min(s) ** 2 * max(s) + 2 * min(s) ** 3) for s in shapes)


def token_episode_flops(H, V, K, B, algorithm):
    """Hand count of one token episode's matmul FLOPs: sampling, E × (forward + 2 × forward for backward), Muon."""
    length = 2 * H
    if algorithm == "tpo_token":
        sampling, training_rows = H * transformer_forward_flops(B, length, V), B * H
    else:
        sampling, training_rows = H * transformer_forward_flops(B * K, length, V), B * K
    return sampling + EPOCHS * (3 * transformer_forward_flops(training_rows, length, V) + muon_step_flops(H, V))


def mlp_flops(rows):
    """Forward matmul FLOPs of the MNIST MLP on `rows` images."""
    return 2 * rows * (784 * MNIST_HIDDEN + MNIST_HIDDEN * MNIST_HIDDEN + MNIST_HIDDEN * 10)


def mnist_step_flops():
    """Forward + backward (weight grads everywhere, input grads except for the image layer) of one step."""
    return 2 * mlp_flops(MNIST_B) + 2 * MNIST_B * (MNIST_HIDDEN * MNIST_HIDDEN + MNIST_HIDDEN * 10)


def xla_flops(compiled):
    """XLA's own estimate (all ops, not only matmuls; loop bodies may be counted once, not per trip)."""
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return analysis.get("flops", float("nan"))


# ---------------------------------------------------------------------------------------------------------- MNIST
def init_mlp(key):
    keys = jax.random.split(key, 3)
    sizes = [(784, MNIST_HIDDEN), (MNIST_HIDDEN, MNIST_HIDDEN), (MNIST_HIDDEN, 10)]
    return [{"kernel": truncated_lecun(k, s, s[0]), "bias": jnp.zeros(s[1])} for k, s in zip(keys, sizes)]


def mlp_logits(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["kernel"] + layer["bias"])
    return x @ params[-1]["kernel"] + params[-1]["bias"]


def make_mnist_step(optimizer):
    """One bandit step (docs/reproduction.md §2.5, §5.2): B rows drawn with replacement, one sampled class each,
    TPO loss, Adam."""

    def loss(params, images, labels, key):
        log_probs = jax.nn.log_softmax(mlp_logits(params, images))
        fixed = jax.lax.stop_gradient(log_probs)
        actions = jax.random.categorical(key, fixed)
        advantage = (actions == labels).astype(jnp.float32) - jnp.exp(2 * fixed).sum(-1)
        scores = advantage[:, None] * jax.nn.one_hot(actions, 10)
        target = jax.nn.softmax(fixed + skill(scores) / TPO_ETA, axis=-1)
        return -(target * log_probs).sum(-1).mean()

    def step(params, opt_state, key, train_images, train_labels):
        batch_key, loss_key = jax.random.split(key)
        rows = jax.random.randint(batch_key, (MNIST_B,), 0, MNIST_TRAIN)
        grads = jax.grad(loss)(params, train_images[rows], train_labels[rows], loss_key)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    return step


def run_mnist(num_seeds):
    optimizer = optax.adam(1e-3)
    data_keys = jax.random.split(jax.random.PRNGKey(1), 4)  # stand-in data: uniform pixels in [0, 1), random labels
    train_images = jax.random.uniform(data_keys[0], (MNIST_TRAIN, 784))
    train_labels = jax.random.randint(data_keys[1], (MNIST_TRAIN,), 0, 10)
    test_images = jax.random.uniform(data_keys[2], (MNIST_TEST, 784))
    test_labels = jax.random.randint(data_keys[3], (MNIST_TEST,), 0, 10)
    seed_keys = jax.random.split(jax.random.PRNGKey(0), num_seeds)
    params = jax.vmap(init_mlp)(seed_keys)
    opt_state = jax.vmap(optimizer.init)(params)
    step = make_mnist_step(optimizer)

    batched_step = jax.vmap(step, in_axes=(0, 0, 0, None, None))

    def block(params, opt_state, keys, train_images, train_labels, test_images, test_labels):
        """200 steps in one scan, then the greedy test error (one seed; vmapped below)."""
        def body(carry, key):
            return step(*carry, key, train_images, train_labels), None

        (params, opt_state), _ = jax.lax.scan(body, (params, opt_state), keys)
        error = (mlp_logits(params, test_images).argmax(-1) != test_labels).mean()
        return params, opt_state, error

    batched_block = jax.vmap(block, in_axes=(0, 0, 0, None, None, None, None))
    step_keys = list(jax.vmap(lambda k: jax.random.split(k, 300), out_axes=1)(seed_keys))  # 300 × (seeds, key)
    block_keys = jax.vmap(lambda k: jax.random.split(k, 200))(seed_keys)
    train, test = (train_images, train_labels), (test_images, test_labels)

    start = time.perf_counter()
    step_compiled = jax.jit(batched_step).lower(params, opt_state, step_keys[0], *train).compile()
    step_compile = time.perf_counter() - start
    start = time.perf_counter()
    block_compiled = jax.jit(batched_block).lower(params, opt_state, block_keys, *train, *test).compile()
    block_compile = time.perf_counter() - start

    def timed_steps():
        nonlocal params, opt_state
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(300):
            params, opt_state = step_compiled(params, opt_state, step_keys[i], *train)
        jax.block_until_ready(params)
        return (time.perf_counter() - wall) / 300, (time.process_time() - cpu) / 300

    def timed_block():
        nonlocal params, opt_state
        wall, cpu = time.perf_counter(), time.process_time()
        params, opt_state, error = block_compiled(params, opt_state, block_keys, *train, *test)
        jax.block_until_ready(error)
        return (time.perf_counter() - wall) / 200, (time.process_time() - cpu) / 200

    hand = mnist_step_flops()
    print(f"mnist tpo seeds={num_seeds}: hand-counted matmul FLOPs per step and seed {hand / 1e6:.2f} M "
          f"(+ evaluation {mlp_flops(MNIST_TEST) / 1e6:.0f} M per 200 steps = {mlp_flops(MNIST_TEST) / 200e6:.2f} M "
          f"per step); XLA cost analysis: step {xla_flops(step_compiled) / num_seeds / 1e6:.2f} M per seed, "
          f"scan200+eval {xla_flops(block_compiled) / num_seeds / 1e6:.2f} M per seed (the scan body counted once)")
    for name, compile_seconds, timed in (("step", step_compile, timed_steps),
                                         ("scan200+eval", block_compile, timed_block)):
        timed()  # warm-up
        runs = [timed() for _ in range(5)]
        wall = statistics.median(r[0] for r in runs)
        cpu = statistics.median(r[1] for r in runs)
        spread = ", ".join(f"{r[0] * 1e3:.3f}" for r in runs)
        print(f"  {name:13s} compile {compile_seconds:6.2f} s | {wall * 1e3:7.3f} ms wall per step "
              f"(runs: {spread}) | {cpu * 1e3:7.3f} CPU-ms per step, {cpu / num_seeds * 1e3:.3f} per seed")


# ---------------------------------------------------------------------------------------------------------- token
def run_token(setting, algorithm, num_seeds, episodes, unroll):
    H, V, K, B, reward, _ = TOKEN_SETTINGS[setting]
    optimizer = optax.contrib.muon(learning_rate=MUON_LR)
    episode = make_token_episode(H, V, K, B, reward, algorithm, optimizer, unroll)
    seed_keys = jax.random.split(jax.random.PRNGKey(0), num_seeds)
    params = jax.vmap(lambda k: init_transformer(k, V, 2 * H))(seed_keys)
    opt_state = jax.vmap(optimizer.init)(params)
    batched = jax.vmap(episode, in_axes=(0, 0, 0, None))

    start = time.perf_counter()
    compiled = jax.jit(batched, donate_argnums=(0, 1)).lower(params, opt_state, seed_keys, 0).compile()
    compile_seconds = time.perf_counter() - start
    per_seed = jax.tree_util.tree_reduce(lambda total, leaf: total + leaf[0].size, params, 0)

    hand = token_episode_flops(H, V, K, B, algorithm)
    loops = "unrolled" if unroll else "lax.scan (XLA counts a loop body once)"
    print(f"{setting} {algorithm} H={H} V={V} K={K} B={B} seeds={num_seeds} ({per_seed:,} parameters per seed), "
          f"loops {loops}: compile {compile_seconds:.2f} s; matmul FLOPs per episode and seed: hand count "
          f"{hand / 1e9:.2f} G, XLA cost analysis (all ops) {xla_flops(compiled) / num_seeds / 1e9:.2f} G")
    walls, cpus = [], []
    for index in range(episodes + 1):
        wall, cpu = time.perf_counter(), time.process_time()
        params, opt_state, error = compiled(params, opt_state, seed_keys, index)
        jax.block_until_ready(error)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        label = "warm-up" if index == 0 else f"episode {index}"
        print(f"  {label:10s} {wall:7.3f} s wall | {cpu / num_seeds:7.3f} CPU-s per seed | "
              f"error {float(error.mean()):.3f}")
        if index:
            walls.append(wall)
            cpus.append(cpu / num_seeds)
    print(f"  => median {statistics.median(cpus):.3f} CPU-s per episode and seed, {statistics.median(walls):.3f} s "
          f"wall per episode ({num_seeds} seeds); {hand / statistics.median(walls) * num_seeds / 1e9:.1f} GFLOP/s")


def cpu_model():
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            return next(line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def forward_flops_check():
    """XLA's count for one forward of the grouped training batch (no loops) against the hand count."""
    H, V, K, B = 10, 2, 8, 100
    params = init_transformer(jax.random.PRNGKey(0), V, 2 * H)
    tokens = jnp.zeros((B * K, 2 * H), jnp.int32)
    compiled = jax.jit(transformer_log_probs).lower(params, tokens).compile()
    grad = jax.jit(jax.grad(lambda p, t: transformer_log_probs(p, t).sum())).lower(params, tokens).compile()
    print(f"check: one forward of {B * K} × {2 * H} tokens (V={V}): hand-counted matmul "
          f"{transformer_forward_flops(B * K, 2 * H, V) / 1e9:.3f} G, XLA {xla_flops(compiled) / 1e9:.3f} G (all ops); "
          f"forward + backward: hand 3 × = {3 * transformer_forward_flops(B * K, 2 * H, V) / 1e9:.3f} G, "
          f"XLA {xla_flops(grad) / 1e9:.3f} G")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--settings", default="mnist,terminal,terminal7,dense")
    parser.add_argument("--seeds", type=int, default=1, help="seeds vmapped in one program")
    parser.add_argument("--episodes", type=int, default=3, help="timed token episodes after the warm-up one")
    parser.add_argument("--algorithms", default=None, help="restrict token settings to these (comma-separated)")
    parser.add_argument("--unroll", action="store_true", help="unroll the token episode's sampling and epoch loops")
    args = parser.parse_args()

    print(f"{datetime.datetime.now():%Y-%m-%d %H:%M:%S}  {cpu_model()}, {os.cpu_count()} CPUs, "
          f"affinity {sorted(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.2f} "
          f"{os.getloadavg()[1]:.2f}; jax {jax.__version__}, jaxlib {jaxlib.__version__}, optax {optax.__version__}, "
          f"{jax.devices()[0].platform}; XLA_FLAGS={os.environ['XLA_FLAGS']}")
    forward_flops_check()
    for setting in args.settings.split(","):
        if setting == "mnist":
            run_mnist(args.seeds)
            continue
        for algorithm in TOKEN_SETTINGS[setting][-1]:
            if args.algorithms is None or algorithm in args.algorithms.split(","):
                run_token(setting, algorithm, args.seeds, args.episodes, args.unroll)


if __name__ == "__main__":
    main()
