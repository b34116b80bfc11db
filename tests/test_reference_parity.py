"""Step-for-step parity with the paper's own code: every ported update replays a committed trace of the reference.

``bench/reference_traces.py`` (``make reference-traces REFERENCE=<checkout>``) ran the reference's step functions
and recorded its initial parameters, its sampled batches (prompts, answers or token candidates, bandit actions, batch
indices) and, per step, its signal, losses, first-epoch gradient and every epoch's optimizer update. Here our task is
built at the same
sizes, given the reference's parameters, and fed exactly the reference's samples: prompts through ``rng.randint``'s
"contexts" stream, and each categorical draw by a uniform at the middle of the recorded action's interval of our own
CDF, so our inverse-CDF sampler itself picks the recorded action (checked). Everything downstream — rewards,
advantages or targets, losses, gradients, Muon/Adam with their moments and bias corrections, the parameters after
each step — is ours, compared to the reference's.

Tolerances (float32 on both sides; docs/reproduction.md §17): signals, losses and gradients within 1e-4 relative
to the largest entry of their array (max |ours − reference| / max |reference|); updates and parameters within 2e-3,
because Muon's Newton–Schulz iteration amplifies the last bits of a gradient; tabular logits and errors within 1e-5,
the misalignment 1 − cos within 1e-5 absolute. ``bench/parity_margins.py`` measures the largest errors on this CPU
and under both emulated other CPUs (results/bench/parity_margins.txt): every tolerance is at least 4× above them, and
``bench/parity_mutants.py`` shows that each one-line formula bug it tries fails at least one case
(results/bench/parity_mutants.txt). The module runs again under the emulations (``cross_cpu``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.config import build_task, compose_config
from harness.trainers import episode
from harness.trainers.batched import updates_per_batch
from tasks import rng

pytestmark = pytest.mark.cross_cpu

TRACES = Path(__file__).parent / "reference_traces"
SIGNAL_RTOL, LOSS_RTOL, GRAD_RTOL, UPDATE_RTOL, PARAM_RTOL = 1e-4, 1e-4, 1e-4, 2e-3, 2e-3

# The attention key bias shifts every score of a query by the same q·b, which softmax ignores: its gradient is zero
# but for rounding, on both sides, and Muon orthogonalises that noise into a full-size step of arbitrary direction that
# no output depends on. Its gradient is compared in absolute terms (against the largest gradient entry of the model);
# its updates and values are not compared.
NO_EFFECT = ("h0.attn.k.bias",)

# the reference's algorithm names → ours (with the overrides that make the same method)
OURS = {"reinforce": ["algorithm=pg"], "grpo_token_no_kl": ["algorithm=grpo_token", "algorithm.beta=0.0"]}


def load(name: str) -> tuple[dict, dict[str, np.ndarray]]:
    with np.load(TRACES / f"{name}.npz") as z:
        arrays = {k: z[k] for k in z.files}
    return json.loads(str(arrays.pop("config"))), arrays


def cases(family: str) -> list[str]:
    names = sorted(p.stem for p in TRACES.glob("*.npz"))
    return [n for n in names if load(n)[0]["family"] == family]


def cases_named(prefix: str) -> list[str]:
    return sorted(p.stem for p in TRACES.glob(f"{prefix}*.npz"))


def relative_error(ours, reference) -> float:
    """max |ours − reference| / max |reference| (0 when both are 0)."""
    ours, reference = np.asarray(ours, np.float64), np.asarray(reference, np.float64)
    assert ours.shape == reference.shape, (ours.shape, reference.shape)
    scale = np.abs(reference).max() if reference.size else 0.0
    diff = np.abs(ours - reference).max() if reference.size else 0.0
    return 0.0 if scale == 0 and diff == 0 else diff / (scale or 1e-30)


def loss_error(ours, reference, signal) -> float:
    """|ours − reference| against the loss's scale: its value, or the largest signal entry where terms cancel (GRPO's
    first-epoch loss is Σ_k A_k = 0 up to rounding)."""
    return abs(float(ours) - float(reference)) / max(abs(float(reference)), float(np.abs(signal).max()), 1e-30)


def flax_to_ours(path: str, layers: int) -> str:
    """A Flax parameter path of the reference's transformer (``params/SelfAttention_0/query/kernel``) → our name
    (``h0.attn.q.kernel``; tasks/models/transformer.py keeps the Flax shapes)."""
    _, module, *rest = path.split("/")
    if module == "pos_emb":
        return "pos_emb"
    kind, index = module.rsplit("_", 1)
    index = int(index)
    if kind == "Embed":
        return "tok_emb"
    if kind == "LayerNorm":
        base = "ln_f" if index == 2 * layers else f"h{index // 2}.ln{index % 2 + 1}"
    elif kind == "SelfAttention":
        base = f"h{index}.attn." + {"query": "q", "key": "k", "value": "v", "out": "out"}[rest[0]]
    else:  # Dense: two per layer (FFN up, down), then the head
        base = "head" if index == 2 * layers else f"h{index // 2}.mlp." + ("up", "down")[index % 2]
    return f"{base}.{rest[-1]}"


def unpack(vector: np.ndarray, layout: list, rename) -> dict[str, np.ndarray]:
    """A packed snapshot → {our name: array} (``bench/reference_traces.py`` packed)."""
    out, at = {}, 0
    for path, shape in layout:
        size = int(np.prod(shape))
        out[rename(path)] = vector[at:at + size].reshape(shape)
        at += size
    assert at == vector.size
    return out


SAMPLE_CATEGORICAL, RANDINT = rng.sample_categorical, rng.randint  # ours, which a Replay stands in for


class Replay:
    """Stands in for ``tasks.rng``'s prompt draw and categorical sampler with the reference's recorded samples."""

    def __init__(self, monkeypatch):
        self.prompts: list[torch.Tensor] = []
        self.samples: list[torch.Tensor] = []
        monkeypatch.setattr(rng, "sample_categorical", self._sample)
        monkeypatch.setattr(rng, "randint", self._randint)

    def _randint(self, seeds, stream, step, shape, high):
        if stream != "contexts" or not self.prompts:
            return RANDINT(seeds, stream, step, shape, high)
        prompts = self.prompts.pop(0)
        assert tuple(prompts.shape) == (len(seeds), *shape) and int(prompts.max()) < high
        return prompts

    def _sample(self, log_probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """The next recorded draw, picked by our own sampler from a uniform at the middle of its CDF interval."""
        actions = self.samples.pop(0).to(log_probs.device)
        log_probs = log_probs.expand(*actions.shape, log_probs.shape[-1])
        cdf = log_probs.exp().cumsum(-1)
        upper = cdf.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        lower = torch.where(actions > 0, cdf.gather(-1, (actions - 1).clamp_min(0).unsqueeze(-1)).squeeze(-1), 0.0)
        middle = (lower + upper) / 2 / cdf[..., -1]
        picked = SAMPLE_CATEGORICAL(log_probs, middle)
        assert torch.equal(picked, actions), "our sampler does not pick the reference's draw from its own CDF"
        return picked


# ---- token reversal ---------------------------------------------------------------------------------------------

def token_task(config: dict, logp_old: str = "exact"):
    c = config
    algorithm = OURS.get(c["algorithm"], [f"algorithm={c['algorithm']}"])
    single = c["algorithm"] in ("reinforce", "dg", "ppo")
    epochs = 1 if c["algorithm"] == "dg" else c["epochs"]  # the reference's DG takes one step per batch
    overrides = [
        "task=token_reversal", *algorithm, f"task.H={c['H']}", f"task.V={c['V']}", f"task.batch_size={c['batch_size']}",
        f"task.K={c['K']}", f"task.reward={c['reward']}", f"task.target={c['target']}", "seeds=1",
        f"task.steps={c['steps']}", f"model.d_model={c['d_model']}", f"model.heads={c['heads']}",
        f"model.layers={c['layers']}", f"model.ffn={c['d_model'] * c['ffn_mult']}",
        f"optim.lr={c['learning_rate'] * 10}", f"algorithm.epochs={epochs}", f"task.logp_old={logp_old}", "logger=none",
        "device=cpu"]
    if c["algorithm"] in ("dg",):
        overrides.append(f"algorithm.eta={c['eta']}")
    elif not single and "grpo" not in c["algorithm"]:
        overrides.append(f"algorithm.eta={c['tpo_eta']}")
    if c["algorithm"] in ("ppo",) or "grpo" in c["algorithm"]:
        overrides.append(f"algorithm.clip_eps={c['ppo_epsilon']}")
    return build_task(compose_config(overrides))


def recorded_batch(config: dict, batch: dict[str, np.ndarray]) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The reference's prompts (1, B, H) and its draws in our sampler's call order."""
    B, H, K = config["batch_size"], config["H"], config["K"]
    if "flat_states" in batch:  # token candidates: states (B·H, 2H), candidates (B·H, K)
        prompts = batch["flat_states"].reshape(B, H, 2 * H)[:, 0, :H]
        candidates = batch["flat_candidate_actions"].reshape(B, H, K)
        draws = [torch.from_numpy(candidates[:, t]).long()[None] for t in range(H)]
    elif "flat_prompts" in batch:  # K sequences per prompt
        prompts = batch["flat_prompts"].reshape(B, K, H)[:, 0]
        actions = batch["flat_actions"].reshape(B * K, H)
        draws = [torch.from_numpy(actions[:, t]).long()[None] for t in range(H)]
    else:  # one sequence per prompt
        prompts, actions = batch["prompts"], batch["actions"]
        draws = [torch.from_numpy(actions[:, t]).long()[None] for t in range(H)]
    return torch.from_numpy(np.ascontiguousarray(prompts)).long()[None], draws


def reference_signal(config: dict, batch: dict[str, np.ndarray]) -> np.ndarray:
    """The reference's frozen per-batch signal, in our layout (B, K) / (B, H, K) / (B, H)."""
    B, H, K = config["batch_size"], config["H"], config["K"]
    for name in ("q_target", "flat_advantages", "group_scores", "advantages"):
        if name in batch:
            value = batch[name]
            return value.reshape(B, H, K) if value.shape[0] == B * H else value
    raise AssertionError(f"no signal among {sorted(batch)}")


def replay_token(name: str, monkeypatch, logp_old: str = "exact"):
    """Our token task from the reference's parameters, stepped on the reference's batches; yields per step the
    recorded batch (the reference's names), our episode's output, our batch, and the gradient and update of every
    epoch (our names)."""
    config, trace = load(name)
    layout = json.loads(str(trace["layout"]))
    rename = lambda path: flax_to_ours(path, config["layers"])  # noqa: E731
    task = token_task(config, logp_old)
    with torch.no_grad():
        for key, value in unpack(trace["params0"], layout, rename).items():
            task.params[key].copy_(torch.from_numpy(value)[None])
    replay = Replay(monkeypatch)
    seen: dict = {}
    optimizer_step, rollout_batches = task.optimizer_step, task.rollout_batches

    def recording_step(epoch, loss):
        params = {k: p.detach().clone() for k, p in task.params.items()}
        seen["grads"].append({k: p.grad[0].clone() for k, p in task.params.items()})
        optimizer_step(epoch, loss)
        seen["updates"].append({k: (p.detach() - params[k])[0] for k, p in task.params.items()})

    def recording_rollouts(step):
        seen["batches"] = rollout_batches(step)
        return seen["batches"]

    monkeypatch.setattr(task, "optimizer_step", recording_step)
    monkeypatch.setattr(task, "rollout_batches", recording_rollouts)
    for step in range(config["steps"]):
        batch = {k.split("/", 2)[2]: v for k, v in trace.items() if k.startswith(f"s{step}/batch/")}
        prompts, draws = recorded_batch(config, batch)
        replay.prompts.append(prompts)
        replay.samples.extend(draws)
        seen.update(grads=[], updates=[])
        out = episode(task, step)
        assert not replay.samples and not replay.prompts
        (ours,) = seen["batches"]
        yield batch, out, ours, seen["grads"], seen["updates"], {k: p[0].detach() for k, p in task.params.items()}


def reference_snapshot(config: dict, trace: dict, key: str) -> dict[str, np.ndarray]:
    return unpack(trace[key], json.loads(str(trace["layout"])), lambda path: flax_to_ours(path, config["layers"]))


def token_errors(name: str, monkeypatch) -> list[dict[str, float]]:
    """Per step, ours against the reference: error, signal, loss, first-epoch gradient, each epoch's update,
    parameters (relative errors as ``relative_error``, the loss as ``loss_error``)."""
    config, trace = load(name)
    report, reference_params = [], reference_snapshot(config, trace, "params0")
    for step, (batch, out, ours, grads, updates, params) in enumerate(replay_token(name, monkeypatch)):
        signal = reference_signal(config, batch)
        errors = {"error": relative_error(out.metrics["error"][0], trace[f"s{step}/error"]),
                  "signal": relative_error(ours.signal[0].detach(), signal),
                  "loss": loss_error(out.loss[0].detach(), trace[f"s{step}/losses"][0], signal)}
        reference = reference_snapshot(config, trace, f"s{step}/grad0")
        scale = max(np.abs(v).max() for v in reference.values())
        errors["grad"] = max(relative_error(grads[0][k], v) for k, v in reference.items() if k not in NO_EFFECT)
        errors["grad_no_effect"] = max(np.abs(grads[0][k].numpy() - reference[k]).max() / max(scale, 1e-30)
                                       for k in NO_EFFECT)
        assert len(updates) == sum(k.startswith(f"s{step}/update") for k in trace)
        for epoch, update in enumerate(updates):
            reference = reference_snapshot(config, trace, f"s{step}/update{epoch}")
            errors[f"update{epoch}"] = max(relative_error(update[k], v) for k, v in reference.items()
                                           if k not in NO_EFFECT)
            reference_params = {k: (p + reference[k]).astype(np.float32) for k, p in reference_params.items()}
        errors["params"] = max(relative_error(params[k], v) for k, v in reference_params.items() if k not in NO_EFFECT)
        report.append(errors)
    return report


LIMITS = {"error": 1e-6, "signal": SIGNAL_RTOL, "loss": LOSS_RTOL, "grad": GRAD_RTOL, "grad_no_effect": GRAD_RTOL,
          "update": UPDATE_RTOL, "params": PARAM_RTOL, "logits": 1e-5, "misalignment": 1e-5}


def limit(quantity: str) -> float:
    return LIMITS[quantity.rstrip("0123456789")]


def assert_within(name: str, report: list[dict[str, float]]) -> None:
    bad = [(step, key, value) for step, errors in enumerate(report) for key, value in errors.items()
           if value > limit(key)]
    assert not bad, f"{name}: beyond tolerance (step, quantity, error): {bad}; all: {report}"


@pytest.mark.parametrize("name", [n for n in cases("token") if not n.startswith("allfail_")])
def test_token_update_matches_the_reference(name, monkeypatch):
    """Token reversal: rewards, signal, loss, gradient, Muon/Adam update and parameters, step for step."""
    assert_within(name, token_errors(name, monkeypatch))


def update_norm(update: dict) -> float:
    return float(np.sqrt(sum(float((np.asarray(v, np.float64) ** 2).sum()) for k, v in update.items()
                             if k not in NO_EFFECT)))


@pytest.mark.parametrize("name", cases_named("allfail_"))
def test_a_batch_without_signal_moves_as_in_the_reference(name, monkeypatch):
    """A first batch in which every answer fails (terminal reward): the reference's gradient is float rounding only,
    yet TPO and GRPO with its KL take a step of ordinary size (Muon and Adam normalise whatever they get), while GRPO
    without KL, whose advantages are exactly 0, takes none. With ``task.logp_old=sampled`` ours does the same (a step
    within 4× of the reference's size); with ``exact`` it takes exactly none."""
    config, trace = load(name)
    assert float(trace["s0/error"]) == 1.0 and np.abs(trace["s0/grad0"]).max() < 1e-5  # no signal, only rounding
    reference = update_norm(reference_snapshot(config, trace, "s0/update0"))
    _, _, _, _, exact, _ = next(replay_token(name, monkeypatch, "exact"))
    assert update_norm(exact[0]) == 0.0
    _, _, _, _, sampled, _ = next(replay_token(name, monkeypatch, "sampled"))
    ours = update_norm(sampled[0])
    if reference == 0.0:
        assert ours == 0.0
    else:
        assert reference / 4 < ours < reference * 4, (ours, reference)


# ---- tabular bandits ----------------------------------------------------------------------------------------------

def tabular_task(config: dict):
    sizes = ([f"task.contexts={config['contexts']}"] if config["family"] == "tabular_multi"
             else [f"task.batch_size={config['batch_size']}"])
    eta = [f"algorithm.eta={config['eta']}"] if config["algorithm"] == "dg" else []  # its tabular TPO has no η
    return build_task(compose_config([
        f"task={config['family']}", f"algorithm={config['algorithm']}", f"task.arms={config['arms']}", *sizes,
        f"task.alpha={config['alpha']}", *eta, "seeds=1", f"task.steps={config['steps']}", "logger=none",
        "device=cpu"]))


def tabular_errors(name: str, monkeypatch) -> list[dict[str, float]]:
    """Per step: the logit table before it and the logged error (relative), the misalignment (absolute)."""
    config, trace = load(name)
    task = tabular_task(config)
    task.logits = torch.from_numpy(trace["logits"][0])[None].clone()
    replay = Replay(monkeypatch)
    if "actions" in trace:
        replay.samples.extend(torch.from_numpy(a).long()[None] for a in trace["actions"])
    report = []
    for step in range(config["steps"]):
        before = relative_error(task.logits[0], trace["logits"][step])
        out = episode(task, step)
        # 1 − cos cancels: its rounding is absolute, a few ulp of 1 (6e-8 each)
        misalignment = abs(float(out.metrics["misalignment"][0]) - float(trace["misalignment"][step]))
        report.append({"logits": before, "error": relative_error(out.metrics["error"][0], trace["error"][step]),
                       "misalignment": misalignment})
    assert not replay.samples
    return report


@pytest.mark.parametrize("name", cases("tabular_single") + cases("tabular_multi"))
def test_tabular_step_matches_the_reference(name, monkeypatch):
    """Tabular bandits: from the reference's initial table (and its sampled actions), the logit table before every
    step, the logged error and the misalignment."""
    assert_within(name, tabular_errors(name, monkeypatch))


# ---- MNIST bandit -------------------------------------------------------------------------------------------------

def mnist_stand_in(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The stand-in data ``bench/reference_traces.py`` trained the reference on (its own function: numpy only)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("reference_traces", TRACES.parent.parent / "bench" /
                                                  "reference_traces.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.stand_in_mnist(n)


# The reference's MNIST GRPO logs −mean(A·log π(a)); ours is GRPO's clipped surrogate −mean(min(ρA, clip(ρ)A)), whose
# value at ρ = 1 is −mean(A) but whose gradient is the same (∇ρ = ∇log π there): gradients and updates are compared.
SAME_GRADIENT_OTHER_VALUE = ("grpo",)


def mnist_errors(name: str, monkeypatch) -> list[dict[str, float]]:
    """Per step: loss, gradient, Adam update and parameters."""
    from tasks.models.optim import FusedAdam

    config, trace = load(name)
    images, labels = mnist_stand_in(config["train"])
    assert [int(images.sum()), int(labels.sum())] == trace["data_checksum"].tolist()
    task = build_task(compose_config([
        "task=mnist_bandit", f"algorithm={config['algorithm']}", f"task.batch_size={config['batch_size']}",
        f"task.lr={config['learning_rate']}", "task.mechanism=false", f"task.eval_every={config['steps']}", "seeds=1",
        f"task.steps={config['steps']}",
        "logger=none", "device=cpu", *([f"algorithm.eta={config['eta']}"] if config["algorithm"] in ("dg", "tpo")
                                       else [])]))
    task.train_images, task.train_labels = torch.from_numpy(images), torch.from_numpy(labels).long()
    layout = json.loads(str(trace["layout"]))

    def ours(vector):  # Flax Dense_i kernel (in, out) → w{i} (out, in)
        out = {}
        for path, value in unpack(vector, layout, lambda p: p).items():
            layer, leaf = int(path.split("/")[1].split("_")[1]), path.split("/")[2]
            out[f"w{layer}" if leaf == "kernel" else f"b{layer}"] = value.T if leaf == "kernel" else value
        return out

    task.params = {k: torch.from_numpy(np.ascontiguousarray(v))[None].clone()
                   for k, v in ours(trace["params0"]).items()}
    task.optimizer = FusedAdam(task.params.values(), lr=config["learning_rate"])
    monkeypatch.setattr(task, "draws", lambda step: (torch.from_numpy(trace[f"s{step}/indices"]).long()[None],
                                                     torch.zeros(1, config["batch_size"])))
    replay = Replay(monkeypatch)
    seen = {}
    optimizer_step = task.optimizer_step

    def recording_step(epoch, loss):
        seen["grads"] = {k: v[0].clone() for k, v in task._grads.items()}
        before = {k: p.clone() for k, p in task.params.items()}
        optimizer_step(epoch, loss)
        seen["update"] = {k: (p - before[k])[0] for k, p in task.params.items()}

    monkeypatch.setattr(task, "optimizer_step", recording_step)
    report, reference_params = [], ours(trace["params0"])
    for step in range(config["steps"]):
        replay.samples.append(torch.from_numpy(trace[f"s{step}/actions"]).long()[None])
        out = episode(task, step)
        errors = {"loss": 0.0 if config["algorithm"] in SAME_GRADIENT_OTHER_VALUE else
                  loss_error(out.loss[0], trace[f"s{step}/loss"], np.ones(1)),
                  "grad": max(relative_error(seen["grads"][k], v) for k, v in ours(trace[f"s{step}/grad0"]).items()),
                  "update": max(relative_error(seen["update"][k], v)
                                for k, v in ours(trace[f"s{step}/update0"]).items())}
        update = ours(trace[f"s{step}/update0"])
        reference_params = {k: (p + update[k]).astype(np.float32) for k, p in reference_params.items()}
        errors["params"] = max(relative_error(task.params[k][0], v) for k, v in reference_params.items())
        report.append(errors)
    return report


@pytest.mark.parametrize("name", cases("mnist_bandit"))
def test_mnist_step_matches_the_reference(name, monkeypatch):
    """MNIST bandit (a smaller MLP, the same functions): loss, gradient, Adam update and parameters, step for step,
    from the reference's parameters, batch indices and sampled classes."""
    assert_within(name, mnist_errors(name, monkeypatch))


# ---- the sampler ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("logits", [[0.3, -1.2, 2.0], [4.0] + [0.0] * 14 + [-3.0], [-2.0] * 15 + [5.0]],
                         ids=["V3", "V16_peaked_first", "V16_peaked_last"])
def test_the_sampler_draws_the_reference_distribution(logits):
    """The reference samples with ``jax.random.categorical`` (Gumbel-max: exactly softmax(logits)); ours inverts the
    CDF of 23-bit uniforms. 2^17 draws from one seed's "actions" stream against softmax(logits) in float64: Pearson's
    χ² over the categories with expected count ≥ 5 (pooled into one below), p > 1e-3."""
    from scipy.stats import chisquare

    logits = torch.tensor(logits, dtype=torch.float64)
    probs = torch.softmax(logits, -1).numpy()
    n = 1 << 17
    u = rng.uniform(torch.tensor([0]), "actions", 0, (n,))
    draws = rng.sample_categorical(torch.log_softmax(logits.float(), -1).expand(1, n, len(probs)), u)
    counts = np.bincount(draws.flatten().numpy(), minlength=len(probs)).astype(np.float64)
    expected = probs * n
    big = expected >= 5
    observed = np.append(counts[big], counts[~big].sum())
    expected = np.append(expected[big], expected[~big].sum())
    if expected[-1] == 0:
        observed, expected = observed[:-1], expected[:-1]
    assert chisquare(observed, expected).pvalue > 1e-3, (counts, probs * n)


# ---- defaults ---------------------------------------------------------------------------------------------------

def test_our_defaults_are_the_references():
    """The traces run at small sizes; the sizes and settings a default run uses are held to the reference's config
    defaults (recorded in SOURCE.json by ``make reference-traces``): token reversal (Table 1's config; the terminal
    presets' 2,000 episodes), MNIST, both tabular bandits. Muon's learning rate is the reference's ×10, as its runner
    passes it (docs/reproduction.md §14.2)."""
    defaults = json.loads((TRACES / "SOURCE.json").read_text())["defaults"]
    token, terminal = defaults["TransformerConfig"], defaults["TransformerRlvrConfig"]
    cfg = compose_config(["task=token_reversal", "algorithm=tpo"])
    assert (cfg.task.H, cfg.task.V, cfg.task.batch_size, cfg.task.K, cfg.task.steps) == (
        token["sequence_length"], token["vocab_size"], token["batch_size"], token["k_candidates"],
        token["num_episodes"])
    assert cfg.optim.lr == pytest.approx(token["learning_rate"] * 10)
    for algorithm, eta in (("tpo", "tpo_eta"), ("tpo_token", "tpo_eta"), ("group_pg", "tpo_eta"), ("dg", "eta")):
        task = build_task(compose_config(["task=token_reversal", f"algorithm={algorithm}", "seeds=1"]))
        assert task.algorithm.hp.eta == token[eta]
        assert updates_per_batch(task) == (1 if algorithm == "dg" else token["ppo_epochs"])  # reference DG: 1 step
    for algorithm in ("ppo", "grpo", "grpo_no_kl", "grpo_token"):
        task = build_task(compose_config(["task=token_reversal", f"algorithm={algorithm}", "seeds=1"]))
        assert task.algorithm.hp.clip_eps == token["ppo_epsilon"]
        assert updates_per_batch(task) == token["ppo_epochs"]
    assert compose_config(["experiment=table3_terminal"]).task.steps == terminal["num_episodes"]
    mnist = compose_config(["task=mnist_bandit"]).task
    reference = defaults["MnistConfig"]
    assert (mnist.batch_size, mnist.lr, mnist.eval_every, mnist.steps) == (
        reference["batch_size"], reference["learning_rate"], reference["eval_every"], reference["num_steps"])
    single, multi = compose_config(["task=tabular_single"]).task, compose_config(["task=tabular_multi"]).task
    reference = defaults["TabularSingleConfig"]
    assert (single.arms, single.batch_size, single.alpha, single.steps) == (
        reference["num_actions"], reference["batch_size"], reference["alpha"], reference["num_steps"])
    reference = defaults["TabularMultiConfig"]
    assert (multi.contexts, multi.arms, multi.alpha, multi.steps) == (
        reference["num_contexts"], reference["num_actions"], reference["alpha"], reference["num_steps"])
