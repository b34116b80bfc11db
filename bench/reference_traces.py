"""Record the paper's own code, step by step, for the parity tests (tests/test_reference_parity.py).

    make reference-traces REFERENCE=/path/to/tpo      # a checkout of the paper's repository (github JeanKaddour/tpo)

runs this script in the reference's throwaway venv (the one ``bench/reference_side_by_side.py`` builds: jax 0.9.2,
optax 0.2.8, flax 0.12.6) and rewrites ``tests/reference_traces/``. CI replays the committed traces without
JAX.

Each case runs the reference's own step function from its own initial parameters for a few steps, with JAX's jit
off and ``lax.scan`` as a Python loop, so that everything a step computes can be read as it happens:

* token reversal (``tpo.experiments._trial``): the step closures the reference's runner builds, at a small model
  (d_model 8, 2 heads, 1 layer, FFN 16; the reference's ``TRANSFORMER_MODEL`` replaced) so that the traces stay
  small. Recorded: the initial Flax parameters; per step the arrays the loss closes over (prompts, sampled answers
  or token candidates, advantages / targets, old log-probs), the loss of every epoch, the first epoch's gradient and
  the optimizer's update of every epoch (the parameters after a step are the parameters before it plus the updates,
  as ``optax.apply_updates`` adds them in float32).
* tabular (``tpo.experiments.tabular``): ``_run_single_seed`` / ``_run_multi_seed`` at small sizes; recorded: the
  sampled actions and the logit table before every step, and the step's logged error and misalignment.
* MNIST bandit (``tpo.experiments.mnist``): the per-step closure of its runner; recorded: the batch indices, the
  sampled actions (the same ``jr.categorical`` call on the same key and logits), loss, gradient and Adam update of
  each step, at a smaller MLP (784-2-5-10). Images are a fixed random stand-in (the arithmetic does not depend on the
  data).

Everything is float32 as the reference computes it; the npz files are compressed. The temperatures are not 1 (DG's
η = 0.5, TPO's η = 0.7), so that a temperature put in the wrong place changes the numbers.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "reference_traces"

# token reversal: (case name, reference algorithm, reward, target, sizes that differ from TOKEN). The terminal-reward
# cases run at H = 2, V = 2 (single-sample methods at B = 16), where a batch has signal from the first step; the
# all-fail cases keep H = 3, V = 3, where seed 0's first batch has no success at all (what the reference does then:
# docs/reproduction.md §14.19).
TOKEN_ALGORITHMS = ("reinforce", "dg", "ppo", "tpo", "tpo_no_anchor", "tpo_token", "group_pg", "grpo", "grpo_no_kl",
                    "grpo_token", "grpo_token_no_kl")
TERMINAL = {"H": 2, "V": 2}
TOKEN_CASES = (
    [(f"bag_{a}", a, "bag_of_tokens", "reverse_copy", {}) for a in TOKEN_ALGORITHMS]
    + [(f"seq_{a}", a, "sequential", "reverse_copy", {})
       for a in ("dg", "ppo", "tpo_token", "grpo_token", "tpo", "grpo")]
    + [(f"term_{a}", a, "terminal", "reverse_copy", {**TERMINAL, "batch_size": 16})  # one answer per prompt
       for a in ("reinforce", "dg", "ppo")]
    + [(f"term_{a}", a, "terminal", "reverse_copy", TERMINAL)
       for a in ("tpo", "tpo_no_anchor", "group_pg", "grpo", "grpo_no_kl")]
    + [(f"allfail_{a}", a, "terminal", "reverse_copy", {}) for a in ("tpo", "grpo", "grpo_no_kl")]
    + [(f"flip_{a}", a, "bag_of_tokens", "reverse_flip", {}) for a in ("dg", "tpo_token")]
)
TOKEN = dict(H=3, V=3, batch_size=4, K=4, epochs=2, learning_rate=1e-4, eta=0.5, ppo_epsilon=0.2, tpo_eta=0.7,
             d_model=8, heads=2, layers=1, ffn_mult=2, steps=2, seed=0)
TABULAR_SINGLE = dict(arms=10, batch_size=8, alpha=0.1, eta=0.5, steps=6, seed=0)
TABULAR_MULTI = dict(contexts=5, arms=4, alpha=0.1, eta=0.5, steps=6, seed=0)
MNIST = dict(batch_size=8, learning_rate=1e-3, eta=0.5, steps=2, seed=0, train=64, hidden=(2, 5))
MNIST_ALGORITHMS = ("pg", "dg", "ce", "tpo", "group_pg", "grpo")


def leaf_layout(tree) -> list[list]:
    """[Flax path joined with '/', shape] of each leaf, in the order ``packed`` concatenates them."""
    import jax

    return [["/".join(str(getattr(k, "key", k)) for k in path), list(np.shape(leaf))]
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def packed(tree) -> np.ndarray:
    """A parameter-shaped pytree as one flat float32 vector (the layout is ``leaf_layout``): one npz entry per
    snapshot keeps the traces small."""
    import jax

    return np.concatenate([np.asarray(leaf, np.float32).ravel() for leaf in jax.tree_util.tree_leaves(tree)])


def python_scan(f, init, xs=None, length=None, **_):
    """``lax.scan`` as a Python loop, so the values inside a step are concrete and can be recorded."""
    import jax
    import jax.numpy as jnp

    n = length if xs is None else len(jax.tree_util.tree_leaves(xs)[0])
    carry, ys = init, []
    for i in range(n):
        carry, y = f(carry, None if xs is None else jax.tree_util.tree_map(lambda a: a[i], xs))
        ys.append(y)
    if not ys or ys[0] is None:
        return carry, None
    return carry, jax.tree_util.tree_map(lambda *a: jnp.stack(a), *ys)


@contextlib.contextmanager
def patched(owner, name, value):
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)


def closure_arrays(fun) -> dict[str, np.ndarray]:
    """The arrays (and ints) a loss function closes over: the step's batch in the reference's own names."""
    out = {}
    for name, cell in zip(fun.__code__.co_freevars, fun.__closure__ or ()):
        value = cell.cell_contents
        if hasattr(value, "shape") and hasattr(value, "dtype"):
            out[name] = np.asarray(value)
    return out


class Recorder:
    """Wraps ``jax.value_and_grad`` / ``jax.grad`` and the optimizer's ``update`` to record every epoch."""

    def __init__(self):
        self.losses, self.grads, self.updates, self.batch = [], [], [], None

    def value_and_grad(self, original):
        def make(fun, *args, **kwargs):
            inner = original(fun, *args, **kwargs)

            def wrapped(p):
                loss, grads = inner(p)
                if self.batch is None:
                    self.batch = closure_arrays(fun)
                self.losses.append(np.asarray(loss))
                self.grads.append(grads)
                return loss, grads

            return wrapped

        return make

    def optimizer(self, optimizer):
        import optax

        def update(grads, state, params=None):
            updates, new_state = optimizer.update(grads, state, params)
            self.updates.append(updates)
            return updates, new_state

        return optax.GradientTransformation(optimizer.init, update)


def token_case(name: str, algorithm: str, reward: str, target: str, sizes: dict) -> dict[str, np.ndarray]:
    import jax
    import jax.random as jr

    from tpo.config import TransformerModelConfig
    from tpo.experiments import _trial

    c = {**TOKEN, **sizes}
    model = TransformerModelConfig(d_model=c["d_model"], num_heads=c["heads"], num_layers=c["layers"],
                                   ffn_mult=c["ffn_mult"])
    recorder = Recorder()
    with patched(_trial, "TRANSFORMER_MODEL", model):
        _trial._build_trial_run_fns.cache_clear()
        import optax.contrib

        original_muon = optax.contrib.muon
        with patched(optax.contrib, "muon", lambda **kw: recorder.optimizer(original_muon(**kw))):
            runners = _trial._build_trial_run_fns(
                (algorithm,), c["H"], c["V"], c["steps"], c["batch_size"], c["learning_rate"], c["eta"],
                c["ppo_epsilon"], c["epochs"], c["K"], target, reward, tpo_eta=c["tpo_eta"])
    runner = runners[algorithm]
    while hasattr(runner, "__wrapped__"):
        runner = runner.__wrapped__
    step_fn = runner.__defaults__[0]
    run_seed = dict(zip(runner.__code__.co_freevars, (cell.cell_contents for cell in runner.__closure__)))["run_seed"]
    scope = dict(zip(run_seed.__code__.co_freevars, (cell.cell_contents for cell in run_seed.__closure__)))
    init_params, optimizer = scope["init_params"], scope["optimizer"]

    out = {"config": np.array(json.dumps({**c, "case": name, "algorithm": algorithm, "reward": reward,
                                          "target": target, "family": "token"}))}
    with jax.disable_jit(), patched(jax.lax, "scan", python_scan), \
            patched(jax, "value_and_grad", recorder.value_and_grad(jax.value_and_grad)):
        key = jr.PRNGKey(c["seed"])
        params = init_params(key)
        opt_state = optimizer.init(params)
        out["params0"] = packed(params)
        out["layout"] = np.array(json.dumps(leaf_layout(params)))
        for step in range(c["steps"]):
            recorder.losses, recorder.grads, recorder.updates, recorder.batch = [], [], [], None
            params, opt_state, error = step_fn(params, opt_state, jr.fold_in(key, step))
            out[f"s{step}/error"] = np.asarray(error)
            out[f"s{step}/losses"] = np.stack(recorder.losses)
            for k, v in recorder.batch.items():
                out[f"s{step}/batch/{k}"] = v
            out[f"s{step}/grad0"] = packed(recorder.grads[0])
            for epoch, updates in enumerate(recorder.updates):
                out[f"s{step}/update{epoch}"] = packed(updates)
    return out


def tabular_single_case(algorithm: str) -> dict[str, np.ndarray]:
    import jax
    import jax.random as jr

    from tpo.experiments import tabular

    c = TABULAR_SINGLE
    carries, samples = [], []
    original = jr.categorical

    def categorical(key, logits, *args, **kwargs):
        actions = original(key, logits, *args, **kwargs)
        samples.append(np.asarray(actions))
        return actions

    def scan(f, init, xs=None, length=None, **kw):
        def recorded(carry, x):
            carries.append(np.asarray(carry))
            return f(carry, x)

        return python_scan(recorded, init, xs, length)

    order = ("pg", "dg", "tpo", "grpo")  # the order _run_single_seed runs them in
    with jax.disable_jit(), patched(jax.lax, "scan", scan), patched(tabular.jr, "categorical", categorical):
        result = tabular._run_single_seed(jr.PRNGKey(c["seed"]), c["arms"], c["batch_size"], c["alpha"], c["eta"],
                                          c["steps"])
    i, n = order.index(algorithm), c["steps"]
    return {"config": np.array(json.dumps({**c, "algorithm": algorithm, "family": "tabular_single"})),
            "logits": np.stack(carries[i * n:(i + 1) * n]), "actions": np.stack(samples[i * n:(i + 1) * n]),
            "error": np.asarray(result[i]), "misalignment": np.asarray(result[4 + i])}


def tabular_multi_case(algorithm: str) -> dict[str, np.ndarray]:
    import jax
    import jax.random as jr

    from tpo.experiments import tabular

    c = TABULAR_MULTI
    carries = []

    def scan(f, init, xs=None, length=None, **kw):
        def recorded(carry, x):
            carries.append(np.asarray(carry))
            return f(carry, x)

        return python_scan(recorded, init, xs, length)

    order = ("pg", "dg", "tpo", "grpo", "ce")
    with jax.disable_jit(), patched(jax.lax, "scan", scan):
        result = tabular._run_multi_seed(jr.PRNGKey(c["seed"]), c["contexts"], c["arms"], c["alpha"], c["eta"],
                                         c["steps"])
    i, n = order.index(algorithm), c["steps"]
    return {"config": np.array(json.dumps({**c, "algorithm": algorithm, "family": "tabular_multi"})),
            "logits": np.stack(carries[i * n:(i + 1) * n]), "error": np.asarray(result[i]),
            "misalignment": np.asarray(result[5 + i])}


def mnist_case(algorithm: str) -> dict[str, np.ndarray]:
    import jax
    import jax.numpy as jnp
    import jax.random as jr

    from tpo.experiments import mnist
    from tpo.models import PolicyMLP

    c = MNIST
    images, labels = stand_in_mnist(c["train"])
    train_images = jnp.asarray(images.astype(np.float32) / 255.0)  # as the reference's loader scales the IDX bytes
    train_labels = jnp.asarray(labels)
    data = (train_images, train_labels, train_images[:4], train_labels[:4])
    recorder, indices, step_keys = Recorder(), [], []
    original_randint = jr.randint

    def randint(key, shape, low, high, *args, **kwargs):
        idx = original_randint(key, shape, low, high, *args, **kwargs)
        indices.append(np.asarray(idx))
        return idx

    def grad(fun, *args, **kwargs):
        recorded = recorder.value_and_grad(jax.value_and_grad)(fun, *args, **kwargs)
        step_keys.append(np.asarray(dict(zip(fun.__code__.co_freevars,
                                             (x.cell_contents for x in fun.__closure__)))["lk"]))
        return lambda p: recorded(p)[1]

    import optax

    original_adam = optax.adam
    mnist._build_mnist_run_fns.cache_clear()
    with patched(mnist, "_load_mnist", lambda: data), patched(mnist, "PolicyMLP",
                                                                lambda: PolicyMLP(hidden_sizes=c["hidden"])), \
            patched(optax, "adam", lambda lr: recorder.optimizer(original_adam(lr))):
        runners = mnist._build_mnist_run_fns((algorithm,), c["steps"], c["batch_size"], c["learning_rate"], c["eta"],
                                             c["steps"])
    train_one = runners[algorithm]
    while hasattr(train_one, "__wrapped__"):
        train_one = train_one.__wrapped__
    scope = dict(zip(train_one.__code__.co_freevars, (x.cell_contents for x in train_one.__closure__)))
    model, init_inputs = scope["model"], scope["init_inputs"]
    key = jr.PRNGKey(c["seed"])
    params0 = model.init(jr.split(key)[1], init_inputs)
    trajectory = []

    def scan(f, init, xs=None, length=None, **kw):
        def recorded(carry, x):
            carry, y = f(carry, x)
            if y is None and len(trajectory) < c["steps"]:  # the inner scan: one Adam step
                trajectory.append(carry[0])
            return carry, y

        return python_scan(recorded, init, xs, length)

    with jax.disable_jit(), patched(jax.lax, "scan", scan), patched(mnist.jr, "randint", randint), \
            patched(jax, "grad", grad):
        train_one(key)
    out = {"config": np.array(json.dumps({**c, "algorithm": algorithm, "family": "mnist_bandit"})),
           "data_checksum": np.asarray([int(images.sum()), int(labels.sum())]),
           "params0": packed(params0), "layout": np.array(json.dumps(leaf_layout(params0)))}
    for step in range(c["steps"]):
        params = params0 if step == 0 else trajectory[step - 1]
        images = train_images[indices[step]]
        logits = model.apply(params, images)
        out[f"s{step}/indices"] = indices[step]
        out[f"s{step}/actions"] = np.asarray(jr.categorical(jnp.asarray(step_keys[step]), logits))
        out[f"s{step}/loss"] = recorder.losses[step]
        out[f"s{step}/grad0"] = packed(recorder.grads[step])
        out[f"s{step}/update0"] = packed(recorder.updates[step])
    return out


def reference_defaults() -> dict[str, dict]:
    """The reference's config defaults (its ``tpo.config`` dataclasses), which the parity test holds ours to: the
    traces run at small sizes, so the defaults are checked on their own."""
    from dataclasses import asdict

    from tpo import config

    return {name: asdict(getattr(config, name)()) for name in (
        "TransformerConfig", "TransformerRlvrConfig", "MnistConfig", "TabularSingleConfig", "TabularMultiConfig")}


def stand_in_mnist(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n random 784-pixel uint8 images and labels, from numpy's PCG64 at seed 0 (the parity test draws the same
    ones; the trace stores their checksum)."""
    rng = np.random.default_rng(0)
    return rng.integers(0, 256, (n, 784), dtype=np.uint8), rng.integers(0, 10, n).astype(np.int32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reference", type=Path, required=True, help="a checkout of the paper's repository")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cases", default="", help="comma-separated case names (default: all)")
    args = parser.parse_args()
    sys.path.insert(0, str(args.reference / "src"))
    import jax
    import optax

    cases = {name: (token_case, (name, a, r, t, sizes)) for name, a, r, t, sizes in TOKEN_CASES}
    cases.update({f"tabular_single_{a}": (tabular_single_case, (a,)) for a in ("pg", "dg", "tpo", "grpo")})
    cases.update({f"tabular_multi_{a}": (tabular_multi_case, (a,)) for a in ("pg", "dg", "tpo", "grpo", "ce")})
    cases.update({f"mnist_{a}": (mnist_case, (a,)) for a in MNIST_ALGORITHMS})
    chosen = [name for name in args.cases.split(",") if name] or list(cases)
    unknown = sorted(set(chosen) - set(cases))
    if unknown:
        raise SystemExit(f"--cases: unknown {', '.join(unknown)}; valid choices: {', '.join(cases)}")
    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "-C", str(args.reference), "rev-parse", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    for name in chosen:
        fn, fn_args = cases[name]
        arrays = fn(*fn_args)
        np.savez_compressed(args.out / f"{name}.npz", **arrays)
        print(f"{name}: {sum(a.size for a in arrays.values())} values")
    (args.out / "SOURCE.json").write_text(json.dumps(
        {"reference_commit": commit, "jax": jax.__version__, "optax": optax.__version__,
         "command": "make reference-traces REFERENCE=<checkout of the paper's repository>",
         "defaults": reference_defaults()}, indent=1) + "\n")


if __name__ == "__main__":
    main()
