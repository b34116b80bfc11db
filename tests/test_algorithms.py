"""The algorithm registry and the modern baselines (RLOO, Dr. GRPO, DAPO, GSPO, CISPO): hand-computed losses,
their documented special cases, zero-variance groups, first-epoch weights, and runs on every task."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

import algorithms
from algorithms import ALGORITHMS, Aggregation, Groups, Rollout
from algorithms.registry import aggregate
from conftest import ROOT, compose_config, run_config
from algorithms.checks import ConfigError

MODERN = ("rloo", "dr_grpo", "dapo", "gspo", "cispo")


def build(name: str, **hp) -> algorithms.Algorithm:
    cfg = OmegaConf.load(ROOT / "conf" / "algorithm" / f"{name}.yaml")
    return algorithms.build(OmegaConf.merge(cfg, hp))


def loss_of(algorithm, logp, logp_old, scores, **fields):
    groups = Groups(scores, logp_old, Rollout.GROUP, **fields)
    return algorithm.loss(logp, groups, algorithm.signal(groups))


# ---- the registry ---------------------------------------------------------------------------------------------

def test_a_duplicate_id_is_refused():
    with pytest.raises(ValueError, match="'tpo' is registered twice"):
        @algorithms.register
        class Again(ALGORITHMS["tpo"]):
            id = "tpo"


def test_an_unknown_id_or_key_is_refused_naming_the_valid_ones():
    with pytest.raises(ConfigError, match="algorithm='rlooo' is unknown; valid choices: tpo, .*cispo"):
        algorithms.build(OmegaConf.create({"name": "rlooo"}))
    with pytest.raises(ConfigError, match="algorithm.eta is not a hyperparameter of algorithm=rloo; valid keys: "
                                          "epochs, clip_eps, beta, log_ratio_clip"):
        build("rloo", eta=1.0)
    with pytest.raises(ConfigError, match=r"algorithm.is_clip=0 is not valid; expected a number > 0"):
        build("cispo", is_clip=0)


def test_hyperparameters_are_typed_once_from_the_yaml():
    hp = build("dapo", clip_eps_high=1).hp  # an integer in a float slot
    assert hp == type(hp)(clip_eps_low=0.2, clip_eps_high=1.0, filter_groups=False)
    assert isinstance(hp.clip_eps_high, float)
    with pytest.raises(Exception):
        hp.clip_eps_low = 0.3  # frozen


def test_every_algorithm_has_one_yaml_whose_keys_are_its_hyperparameters():
    for name, cls in ALGORITHMS.items():
        cfg = OmegaConf.load(ROOT / "conf" / "algorithm" / f"{name}.yaml")
        # an optional field (metadata "optional") is left out of the YAML, so that runs recorded before it existed
        # keep their identity; it is set with +algorithm.<field>
        fields = {f.name for f in dataclasses.fields(cls.Hyperparameters) if not f.metadata.get("optional")}
        assert set(cfg) - {"name", "epochs"} == fields, name
        assert build(name).hp == cls.Hyperparameters(), f"{name}: YAML defaults and the class's differ"


# ---- hand-computed losses --------------------------------------------------------------------------------------

def _clip_term(delta: float, advantage: float, low: float, high: float) -> float:
    ratio = math.exp(delta)
    return min(ratio * advantage, min(max(ratio, 1 - low), 1 + high) * advantage)


def test_rloo_on_a_hand_example():
    scores = torch.tensor([[[1.0, 0.0, 0.0, 1.0]]])
    delta = [0.1, 0.0, 0.0, -0.5]
    logp_old = torch.tensor([[[-1.0, -2.0, -0.5, -3.0]]])
    logp = logp_old + torch.tensor(delta)
    advantages = [r - (2.0 - r) / 3 for r in (1.0, 0.0, 0.0, 1.0)]  # leave-one-out means
    expected = -sum(_clip_term(d, a, 0.2, 0.2) for d, a in zip(delta, advantages)) / 4  # mean over sequences
    assert loss_of(build("rloo"), logp, logp_old, scores).item() == pytest.approx(expected, rel=1e-6)


def test_dr_grpo_on_a_hand_example_with_a_constant_denominator():
    scores = torch.tensor([[[1.0, 0.0]]])
    delta = torch.tensor([[[[0.1, 0.0], [0.0, -0.3]]]])  # (1, 1, K=2, T=2)
    logp_old = torch.full_like(delta, -0.7)
    advantages = (0.5, -0.5)  # r − μ, no σ
    terms = [[_clip_term(d, a, 0.2, 0.2) for d in row] for row, a in zip(delta[0, 0].tolist(), advantages)]
    expected = -sum(map(sum, terms)) / (2 * 2)  # candidates × longest answer
    assert loss_of(build("dr_grpo"), logp_old + delta, logp_old, scores).item() == pytest.approx(expected, rel=1e-6)
    mask = torch.tensor([[[[1, 1], [1, 0]]]])  # a shorter second answer: its term leaves, the denominator stays
    masked = -(sum(terms[0]) + terms[1][0]) / 4
    assert loss_of(build("dr_grpo"), logp_old + delta, logp_old, scores, mask=mask).item() == pytest.approx(masked)


def test_dapo_clips_higher_and_takes_the_token_mean():
    scores = torch.tensor([[[1.0, 0.0]]])
    delta = torch.tensor([[[[0.25, 0.0], [0.0, -0.3]]]])  # e^0.25 = 1.284 > 1 + 0.28: clipped for A > 0
    logp_old = torch.full_like(delta, -0.7)
    z = (0.5 / (0.5 + 1e-8), -0.5 / (0.5 + 1e-8))
    terms = [_clip_term(d, a, 0.2, 0.28) for row, a in zip(delta[0, 0].tolist(), z) for d in row]
    assert terms[0] == pytest.approx(1.28 * z[0])
    mask = torch.tensor([[[[1, 1], [1, 0]]]])
    expected = -(terms[0] + terms[1] + terms[2]) / 3  # three answer tokens
    assert loss_of(build("dapo"), logp_old + delta, logp_old, scores, mask=mask).item() == pytest.approx(expected)


def test_dapo_group_filter_changes_only_the_denominator():
    scores = torch.tensor([[[1.0, 0.0], [1.0, 1.0]]])  # the second group has zero variance
    generator = torch.Generator().manual_seed(0)
    logp_old = -torch.rand(1, 2, 2, 3, generator=generator)
    logp = (logp_old + 0.1 * torch.randn(1, 2, 2, 3, generator=generator)).requires_grad_(True)
    plain = loss_of(build("dapo"), logp, logp_old, scores)
    filtered = loss_of(build("dapo", filter_groups=True), logp, logp_old, scores)
    torch.testing.assert_close(filtered, plain * 12 / 6)  # 12 tokens in the batch, 6 in informative groups


def test_gspo_on_a_hand_example_with_length_normalised_ratios():
    scores = torch.tensor([[[1.0, 0.0]]])
    delta, lengths = [0.0006, -0.002], torch.tensor([[[2.0, 2.0]]])
    logp_old = torch.tensor([[[-1.0, -1.5]]], dtype=torch.float64)
    z = (0.5 / (0.5 + 1e-8), -0.5 / (0.5 + 1e-8))
    terms = [_clip_term(d / 2, a, 3e-4, 4e-4) for d, a in zip(delta, z)]
    assert terms[1] == pytest.approx((1 - 3e-4) * z[1])  # e^-0.001 < 1 − 3e-4: clipped for A < 0
    loss = loss_of(build("gspo"), logp_old + torch.tensor(delta, dtype=torch.float64), logp_old,
                   scores.double(), lengths=lengths.double())
    assert loss.item() == pytest.approx(-sum(terms) / 2, rel=1e-9)


def test_cispo_gradient_is_the_clipped_stopped_weight():
    scores = torch.tensor([[[1.0, 0.0]]])
    delta = torch.tensor([[[[2.0, 0.1], [0.0, 0.0]]]])  # e^2 = 7.4 is clipped to 5
    logp_old = torch.full_like(delta, -3.0)
    logp = (logp_old + delta).requires_grad_(True)
    loss = loss_of(build("cispo"), logp, logp_old, scores)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    z = 0.5 / (0.5 + 1e-8)
    expected = torch.tensor([[[[-5 * z, -math.exp(0.1) * z], [z, z]]]]) / 4  # −sg(min(ρ, 5))·A / tokens
    torch.testing.assert_close(grad, expected)


# ---- documented special cases ----------------------------------------------------------------------------------

def _random_groups(generator, shape=(2, 3, 4), dtype=torch.float64):
    logp_old = -torch.rand(*shape, generator=generator, dtype=dtype) * 3
    logp = (logp_old + 0.2 * torch.randn(*shape, generator=generator, dtype=dtype)).requires_grad_(True)
    scores = torch.rand(*shape, generator=generator, dtype=dtype).round()
    scores[0, 0] = 1.0  # one zero-variance group
    return logp, logp_old, scores


def test_rloo_advantage_is_k_over_k_minus_1_times_the_centred_score():
    _, logp_old, scores = _random_groups(torch.Generator().manual_seed(1))
    signal = build("rloo").signal(Groups(scores, logp_old, Rollout.GROUP))
    torch.testing.assert_close(signal, 4 / 3 * (scores - scores.mean(-1, keepdim=True)))


def test_gspo_with_unit_length_is_grpos_sequence_clip():
    logp, logp_old, scores = _random_groups(torch.Generator().manual_seed(2))
    gspo = build("gspo", clip_eps_low=0.2, clip_eps_high=0.2, log_ratio_clip=20.0)
    gspo_loss = loss_of(gspo, logp, logp_old, scores)
    grpo_loss = loss_of(build("grpo_no_kl"), logp, logp_old, scores)
    torch.testing.assert_close(gspo_loss * 4, grpo_loss)  # mean over sequences = GRPO's group sum / K
    torch.testing.assert_close(torch.autograd.grad(gspo_loss.sum() * 4, logp)[0],
                               torch.autograd.grad(grpo_loss.sum(), logp)[0])


def test_dr_grpo_is_grpo_without_sigma():
    logp, logp_old, scores = _random_groups(torch.Generator().manual_seed(3))
    groups = Groups(scores, logp_old, Rollout.GROUP)
    sigma = scores.std(-1, unbiased=False, keepdim=True)
    informative = sigma > 1e-6
    dr, grpo = build("dr_grpo").signal(groups), build("grpo").signal(groups)
    torch.testing.assert_close(dr[informative.expand_as(dr)], (grpo * (sigma + 1e-8))[informative.expand_as(dr)])
    # with one token per answer, its constant denominator is the number of candidates: GRPO (β = 0) with A = r − μ
    dr_loss = loss_of(build("dr_grpo"), logp.unsqueeze(-1), logp_old.unsqueeze(-1), scores)
    centred = scores - scores.mean(-1, keepdim=True)
    grpo_terms = -algorithms.losses.clipped_objective(logp, logp_old, centred, 0.2)
    torch.testing.assert_close(dr_loss, grpo_terms.flatten(1).mean(1))


@pytest.mark.parametrize("name", MODERN)
def test_zero_variance_groups_give_no_gradient(name):
    """Exactly none for 0/1 scores; for other equal scores, the z-scored methods are guarded (A = 0) and RLOO and
    Dr. GRPO, which have no σ to guard (as in TRL and verl), give float rounding of the centred scores (≤ 1e-15)."""
    generator = torch.Generator().manual_seed(4)
    logp, logp_old, _ = _random_groups(generator)
    algorithm = build(name)
    if algorithm.token_level:
        logp, logp_old = logp.unsqueeze(-1).repeat(1, 1, 1, 3), logp_old.unsqueeze(-1).repeat(1, 1, 1, 3)
    for constant in (0.0, 1.0, 0.37):
        scores = torch.full((2, 3, 4), constant, dtype=torch.float64)
        (grad,) = torch.autograd.grad(loss_of(algorithm, logp, logp_old, scores).sum(), logp)
        if constant in (0.0, 1.0) or name not in ("rloo", "dr_grpo"):
            assert torch.count_nonzero(grad) == 0, (name, constant)
        else:
            assert grad.abs().max() < 1e-15, (name, constant)


@pytest.mark.parametrize("name", sorted(set(ALGORITHMS) - {"ppo", "dg", "pg", "ce"}))
def test_first_epoch_weights_give_the_losss_gradient(name):
    """At θ = θ_old, ∇loss = −∇ aggregate(w ⊙ ℓ̃), ℓ̃ = ℓ (log-softmax over the group for a target method)."""
    logp, logp_old, scores = _random_groups(torch.Generator().manual_seed(5))
    algorithm = build(name)
    token_level = algorithm.token_level
    if token_level:
        logp_old = logp_old.unsqueeze(-1).repeat(1, 1, 1, 3) / 3
    logp = logp_old.clone().requires_grad_(True)
    groups = Groups(scores, logp_old, Rollout.GROUP, lengths=torch.full(scores.shape, 3.0, dtype=scores.dtype))
    signal = algorithm.signal(groups)
    (actual,) = torch.autograd.grad(algorithm.loss(logp, groups, signal).sum(), logp)
    weights = algorithm.weights(groups, signal).detach()
    scored = torch.log_softmax(logp, -1) if algorithm.target else logp
    count = algorithm.count(groups) if algorithm.aggregation in (Aggregation.TOKENS,
                                                                 Aggregation.INFORMATIVE_GROUPS) else None
    surrogate = aggregate(-(weights * scored), groups, algorithm.aggregation, token_level, count)
    (expected,) = torch.autograd.grad(surrogate.sum(), logp)
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("name", ["ppo", "dg", "pg"])
def test_first_epoch_weights_of_single_sample_methods(name):
    generator = torch.Generator().manual_seed(6)
    logp_old = -torch.rand(2, 5, 3, generator=generator, dtype=torch.float64)
    rewards = torch.rand(2, 5, 3, generator=generator, dtype=torch.float64)
    groups = Groups(rewards, logp_old, Rollout.SINGLE, advantages=rewards - rewards.mean(1, keepdim=True))
    algorithm, logp = build(name), logp_old.clone().requires_grad_(True)
    signal = algorithm.signal(groups)
    (actual,) = torch.autograd.grad(algorithm.loss(logp, groups, signal).sum(), logp)
    expected = -algorithm.weights(groups, signal) / 5  # sum over tokens, mean over the 5 samples
    torch.testing.assert_close(actual, expected)


# ---- every task runs them --------------------------------------------------------------------------------------

TOKEN = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "trainer.steps=3",
         "model.d_model=16", "model.layers=1", "model.ffn=32", "seeds=2", "task.checkpoint_every=0"]


@pytest.mark.parametrize("reward", ["terminal", "bag_of_tokens"])
@pytest.mark.parametrize("name", MODERN)
def test_modern_baselines_train_on_token_reversal(name, reward, tmp_path):
    summary = run_config([*TOKEN, f"task.reward={reward}", f"algorithm={name}"], tmp_path)
    assert summary["status"] == "completed"
    metrics = pd.read_csv(tmp_path / "metrics.csv")
    assert metrics.grad_norm.notna().all() and (metrics.grad_norm > 0).any()


@pytest.mark.parametrize("name", MODERN)
def test_modern_baselines_run_on_the_bandits_and_are_refused_without_an_exact_direction(name, tmp_path):
    mnist = ["task=mnist_bandit", "task.eval_every=5", "trainer.steps=5", "task.checkpoint_every=0", "seeds=2",
             "task.batch_size=16", f"algorithm={name}"]
    assert run_config(mnist, tmp_path / "mnist")["status"] == "completed"
    tabular = ["task=tabular_single", "task.arms=10", "task.batch_size=8", "trainer.steps=5", "seeds=2",
               f"algorithm={name}"]
    assert run_config(tabular, tmp_path / "tabular")["status"] == "completed"
    with pytest.raises(ConfigError, match=f"algorithm={name} cannot run on task=tabular_multi.*valid algorithms "
                                          "for tabular_multi: tpo, grpo, dg, pg, ce$"):
        run_config(["task=tabular_multi", f"algorithm={name}"], tmp_path / "multi")


def test_no_algorithm_id_appears_in_tasks_or_trainers():
    """Tasks and trainers call only the registry: no algorithm id as a string literal outside the report's
    table definitions (which, like conf/experiment, name the paper's rows)."""
    import ast

    ids = set(ALGORITHMS)
    allowed = {"harness/report/specs.py", "harness/report/synthetic.py", "harness/report/dynamics.py"}
    offenders = []
    for path in [*(ROOT / "tasks").rglob("*.py"), *(ROOT / "harness").rglob("*.py")]:
        relative = str(path.relative_to(ROOT))
        if relative in allowed:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in ids:
                offenders.append(f"{relative}:{node.lineno} {node.value!r}")
    assert not offenders, offenders


FLOORS = ("algorithms", "tasks", "harness", "bench")  # each imports only from its own floor and the ones before


def import_graph(root: Path, packages=FLOORS) -> dict[str, set[str]]:
    """Module → the project's modules it imports, at module level or inside a function (a lazy import is still a
    dependency: it only hides a loop until the function runs)."""
    import ast

    modules = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            modules[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = path
    graph = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:  # a submodule, or the module
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            edges |= {t for t in targets if t in modules and t != name}
        graph[name] = edges
    return graph


def import_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}

    def visit(node, trail):
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = 2
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node, []))), None)


def test_no_import_cycle_and_no_import_up_a_floor():
    """The project's import graph, lazy imports included, has no cycle, and no module imports from a floor above
    its own (algorithms → tasks → harness → bench)."""
    graph = import_graph(ROOT)
    assert import_cycle(graph) is None, "import cycle: " + " → ".join(import_cycle(graph))
    up = [f"{a} → {b}" for a, targets in graph.items() for b in targets
          if FLOORS.index(b.split(".")[0]) > FLOORS.index(a.split(".")[0])]
    assert not up, up


def test_the_cycle_check_sees_an_import_inside_a_function(tmp_path):
    """A loop closed by a function-level import is a cycle. Bug caught: ``import_graph`` walking only the module's
    top-level statements (``ast.parse(...).body`` for ``ast.walk``): the lazy import below goes unseen."""
    package = tmp_path / "algorithms"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from algorithms import b\n")
    (package / "b.py").write_text("def later():\n    from algorithms.a import x\n    return x\n")
    assert import_cycle(import_graph(tmp_path, ("algorithms",))) == ["algorithms.a", "algorithms.b", "algorithms.a"]
    (package / "b.py").write_text("def later():\n    return 1\n")
    assert import_cycle(import_graph(tmp_path, ("algorithms",))) is None


def test_compose_builds_every_algorithm():
    for name in ALGORITHMS:
        assert algorithms.build(compose_config([f"algorithm={name}"]).algorithm).id == name


# ---- refusals and masks ----------------------------------------------------------------------------------------

def test_settings_that_mean_nothing_on_the_chosen_rollout_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="algorithm.filter_groups=true is not valid on a single-sample rollout"):
        run_config(["task=tabular_single", "algorithm=dapo", "algorithm.filter_groups=true"], tmp_path / "a")
    assert not (tmp_path / "a" / "metrics.csv").exists()
    with pytest.raises(ValueError, match="rloo needs at least 2 members per comparison set"):
        build("rloo").signal(Groups(torch.ones(2, 1, 1), torch.zeros(2, 1, 1), Rollout.SINGLE))


def test_every_aggregation_ignores_masked_tokens():
    """Padding (mask 0) leaves every aggregation's value unchanged, whatever its terms hold."""
    mask = torch.tensor([[[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]]])
    terms = torch.ones(1, 1, 2, 3)
    scores = torch.tensor([[[1.0, 0.0]]])
    groups = Groups(scores, torch.zeros_like(terms), Rollout.GROUP, mask=mask)
    expected = {Aggregation.GROUPS: 4.0, Aggregation.INFORMATIVE_GROUPS: 4.0, Aggregation.SEQUENCES: 2.0,
                Aggregation.TOKENS: 1.0, Aggregation.CONSTANT: 4.0 / 6}
    for how, value in expected.items():
        count = torch.tensor([4.0]) if how is Aggregation.TOKENS else torch.tensor([1.0])
        assert aggregate(terms, groups, how, token_level=True, count=count).item() == pytest.approx(value), how
        garbage = terms + (1 - mask) * 1e3  # what padded positions hold does not matter
        assert aggregate(garbage, groups, how, token_level=True, count=count).item() == pytest.approx(value), how
