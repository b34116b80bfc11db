"""The algorithm registry and the modern baselines (RLOO, Dr. GRPO, DAPO, GSPO, CISPO): hand-computed losses,
their documented special cases, zero-variance groups, first-epoch weights, and runs on every task."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf

import algorithms
from algorithms import ALGORITHMS, Aggregation, Groups, Rollout
from algorithms.registry import aggregate, declarations
from conftest import ROOT, compose_config, run_config
from common.checks import ConfigError

MODERN = ("rloo", "dr_grpo", "dapo", "gspo", "cispo")


def build(name: str, **hp) -> algorithms.Algorithm:
    cfg = OmegaConf.load(ROOT / "conf" / "algorithm" / f"{name}.yaml")
    return algorithms.build(OmegaConf.merge(cfg, hp))


def loss_of(algorithm, logp, logp_old, scores, **fields):
    groups = Groups(scores, logp_old, Rollout.GROUP, **fields)
    return algorithm.loss(logp, groups, algorithm.signal(groups))[0]


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
                                          "epochs, aggregation, clip_eps, beta, log_ratio_clip"):
        build("rloo", eta=1.0)
    with pytest.raises(ConfigError, match=r"algorithm.is_clip=0 is not valid; expected a number > 0"):
        build("cispo", is_clip=0)


def test_hyperparameters_are_typed_once_from_the_yaml():
    hp = build("dapo", clip_eps_high=1).hp  # an integer in a float slot
    assert hp == type(hp)(clip_eps_low=0.2, clip_eps_high=1.0, filter_groups=False)
    assert isinstance(hp.clip_eps_high, float)
    assert build("dapo", aggregation="sequences").hp.aggregation is Aggregation.SEQUENCES
    assert build("dapo", epochs=2).hp.epochs == 2 and build("dapo").hp.epochs is None
    with pytest.raises(Exception):
        hp.clip_eps_low = 0.3  # frozen


def yaml_declaration_mismatches(folder: Path) -> list[str]:
    """Where the YAMLs of ``folder`` (conf/algorithm) and the algorithms' declarations disagree: a YAML key without a
    declaration, a declaration without a YAML key, a YAML value other than the declared default, a YAML without a
    registered class or a class without a YAML."""
    files = {path.stem: path for path in folder.glob("*.yaml")}
    problems = [f"{name}: {'no registered class' if name in files else 'no YAML'}"
                for name in sorted(set(files) ^ set(ALGORITHMS))]
    for name in sorted(set(files) & set(ALGORITHMS)):
        values = OmegaConf.to_container(OmegaConf.load(files[name]))
        if values.pop("name", None) != name:
            problems.append(f"{name}.yaml: name is not {name}")
        declared = declarations(ALGORITHMS[name])
        problems += [f"{name}.yaml: {key} has no declaration" for key in sorted(set(values) - set(declared))]
        problems += [f"{name}: {key} is declared but not in its YAML" for key in sorted(set(declared) - set(values))]
        problems += [f"{name}.yaml: {key}={values[key]!r}, declared default {declared[key].default!r}"
                     for key in sorted(set(values) & set(declared)) if values[key] != declared[key].default]
    return problems


def test_every_hyperparameter_is_declared_once_and_in_its_yaml_with_its_default():
    """One class and one YAML per algorithm; every YAML key is a declared hyperparameter with the declared default,
    every declaration is in the YAML, and each declaration carries a doc."""
    assert yaml_declaration_mismatches(ROOT / "conf" / "algorithm") == []
    for name, cls in ALGORITHMS.items():
        assert build(name).hp == cls.Hyperparameters(), name
        assert all(field.metadata["doc"] for field in declarations(cls).values()), name


def test_the_yaml_check_sees_a_stray_key_a_missing_one_and_another_default(tmp_path):
    """Bug caught: a key added to a YAML and not declared, a declaration left out of its YAML, a YAML value that is
    not the default: each is named."""
    shutil.copytree(ROOT / "conf" / "algorithm", tmp_path, dirs_exist_ok=True)
    with (tmp_path / "dapo.yaml").open("a") as handle:
        handle.write("stray: 1\n")
    grpo, ppo = tmp_path / "grpo.yaml", tmp_path / "ppo.yaml"
    grpo.write_text("".join(line for line in grpo.read_text().splitlines(True) if not line.startswith("beta:")))
    ppo.write_text(ppo.read_text().replace("clip_eps: 0.2", "clip_eps: 0.3"))
    assert yaml_declaration_mismatches(tmp_path) == [
        "dapo.yaml: stray has no declaration", "grpo: beta is declared but not in its YAML",
        "ppo.yaml: clip_eps=0.3, declared default 0.2"]


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
    (actual,) = torch.autograd.grad(algorithm.loss(logp, groups, signal)[0].sum(), logp)
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
    (actual,) = torch.autograd.grad(algorithm.loss(logp, groups, signal)[0].sum(), logp)
    expected = -algorithm.weights(groups, signal) / 5  # sum over tokens, mean over the 5 samples
    torch.testing.assert_close(actual, expected)


# ---- every task runs them --------------------------------------------------------------------------------------

TOKEN = ["task=token_reversal", "task.H=3", "task.V=2", "task.batch_size=6", "task.K=4", "task.steps=3",
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
    mnist = ["task=mnist_bandit", "task.eval_every=5", "task.steps=5", "task.checkpoint_every=0", "seeds=2",
             "task.batch_size=16", f"algorithm={name}"]
    assert run_config(mnist, tmp_path / "mnist")["status"] == "completed"
    tabular = ["task=tabular_single", "task.arms=10", "task.batch_size=8", "task.steps=5", "seeds=2",
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


# each imports only from its own floor and the ones before
FLOORS = ("common", "algorithms", "tasks", "harness", "bench")


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
    its own (common → algorithms → tasks → harness → bench)."""
    graph = import_graph(ROOT)
    assert import_cycle(graph) is None, "import cycle: " + " → ".join(import_cycle(graph))
    up = [f"{a} → {b}" for a, targets in graph.items() for b in targets
          if FLOORS.index(b.split(".")[0]) > FLOORS.index(a.split(".")[0])]
    assert not up, up


# Inside harness/: run files and settings, then what trains (the trainers, the lifecycle), then what launches many runs
# or reads them back (the CLI, the campaign, the report). The run side never imports the report.
HARNESS_FLOORS = (
    ("harness.identity", "harness.artefacts", "harness.rundir", "harness.tracking", "harness.wandb_offline",
     "harness.config", "harness.process", "harness.sweep", "harness.interrupts", "harness.cli", "harness.locations",
     "harness.progress"),
    ("harness.session", "harness.trainers", "harness.llm", "harness.run"),
    ("harness.__main__", "harness.campaign", "harness.report"),
    ("harness.scorecard", "harness.command"),  # runs through the campaign, reads through the report; every tool
)


def harness_floor(module: str) -> int | None:
    """The floor of a harness module (a package's prefix covers its modules); None for the package itself."""
    return next((level for level, names in enumerate(HARNESS_FLOORS)
                 if any(module == name or module.startswith(name + ".") for name in names)), None)


def imports_up_a_harness_floor(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} → {b}" for a, targets in graph.items() if a.startswith("harness.") for b in targets
            if b.startswith("harness.") and harness_floor(b) > harness_floor(a)]


def test_every_harness_module_has_a_floor_and_none_imports_up_one():
    graph = import_graph(ROOT)
    assert [m for m in graph if m.startswith("harness.") and harness_floor(m) is None] == []
    assert imports_up_a_harness_floor(graph) == []
    # a one-line change that puts the report under the run files is caught
    assert imports_up_a_harness_floor({**graph, "harness.rundir.outputs": {"harness.report.dynamics"}}) == [
        "harness.rundir.outputs → harness.report.dynamics"]


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


# ---- the update's metrics (Algorithm.metrics) --------------------------------------------------------------------

CLIPPING = ("grpo", "grpo_token", "grpo_no_kl", "grpo_masked", "ppo", "rloo", "dr_grpo", "dapo", "gspo", "cispo")


def _first_epoch_batch(name: str, generator: torch.Generator):
    """(logp = ℓ_old, groups) on the algorithm's first rollout shape that takes a loss: θ = θ_old."""
    cls = ALGORITHMS[name]
    shape = next(shape for shape in cls.rollouts if shape is not Rollout.EXACT)
    logp_old = -torch.rand(2, 3, 4, generator=generator, dtype=torch.float64) * 3
    scores = torch.rand(2, 3, 4, generator=generator, dtype=torch.float64).round()
    if shape is Rollout.SINGLE:
        groups = Groups(scores, logp_old, shape, advantages=scores - scores.mean(1, keepdim=True))
    elif shape is Rollout.SUPERVISED:
        groups = Groups(torch.zeros_like(scores), logp_old, shape)
    elif cls.token_level:
        logp_old = logp_old.unsqueeze(-1).repeat(1, 1, 1, 3)
        groups = Groups(scores, logp_old, shape, mask=torch.ones_like(logp_old).tril(1)[..., :3])
    else:
        groups = Groups(scores, logp_old, shape)
    return logp_old.clone().requires_grad_(True), groups


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_metrics_are_exactly_zero_at_the_rollout_policy_and_leave_the_loss_alone(name):
    """At θ = θ_old every ratio is 1: ratio_dev, kl_snapshot (and clip_fraction) are exactly 0. The metrics are
    detached (R,) tensors, and the loss and its gradient are those of the aggregated terms, bit for bit."""
    algorithm = build(name)
    logp, groups = _first_epoch_batch(name, torch.Generator().manual_seed(20))
    signal = algorithm.signal(groups)
    loss, metrics = algorithm.loss(logp, groups, signal)
    assert set(metrics) == {"ratio_dev", "kl_snapshot", *(("clip_fraction",) if name in CLIPPING else ())}
    for value in metrics.values():
        assert value.shape == (2,) and not value.requires_grad and torch.equal(value, torch.zeros(2, dtype=value.dtype))
    count = algorithm.count(groups) if algorithm.aggregation in (Aggregation.TOKENS,
                                                                 Aggregation.INFORMATIVE_GROUPS) else None
    terms = aggregate(algorithm.terms(logp, groups, signal), groups, algorithm.aggregation,
                      algorithm._token_level(groups), count)
    assert torch.equal(loss, terms)
    assert torch.equal(torch.autograd.grad(loss.sum(), logp)[0], torch.autograd.grad(terms.sum(), logp)[0])


def test_ratio_dev_and_kl_snapshot_are_the_mean_over_the_unmasked_items():
    """Written here: mean |e^x − 1| and mean (e^{−x} + x − 1), x = ℓ − ℓ_old, over the answer tokens only (DAPO's
    per-token log-probs); for a target method (TPO) x is that of the group softmax, so logits and log-probs agree."""
    generator = torch.Generator().manual_seed(21)
    logp_old = -torch.rand(2, 3, 4, 5, generator=generator, dtype=torch.float64) * 2
    x = 0.4 * torch.randn(2, 3, 4, 5, generator=generator, dtype=torch.float64)
    mask = (torch.rand(2, 3, 4, 5, generator=generator) > 0.3).double()
    scores = torch.rand(2, 3, 4, generator=generator, dtype=torch.float64).round()
    groups = Groups(scores, logp_old, Rollout.GROUP, mask=mask)
    _, metrics = build("dapo").loss(logp_old + x, groups, build("dapo").signal(groups))
    for r in range(2):
        kept = x[r][mask[r] == 1]
        assert metrics["ratio_dev"][r].item() == pytest.approx((kept.exp() - 1).abs().mean().item(), rel=1e-12)
        assert metrics["kl_snapshot"][r].item() == pytest.approx((torch.exp(-kept) + kept - 1).mean().item(),
                                                                 rel=1e-12)
    tpo, logits = build("tpo"), logp_old[..., 0] + x[..., 0]
    old = torch.log_softmax(logp_old[..., 0], -1)
    _, from_logits = tpo.loss(logits + 7.0, Groups(scores, old, Rollout.GROUP), torch.ones_like(old) / 4)
    moved = torch.log_softmax(logits, -1) - old
    torch.testing.assert_close(from_logits["ratio_dev"], (moved.exp() - 1).abs().flatten(1).mean(1))
    torch.testing.assert_close(from_logits["kl_snapshot"], (torch.exp(-moved) + moved - 1).flatten(1).mean(1))


def _ratio_batch(ratios, advantages, **fields):
    """One replica, one group: ℓ = ℓ_old + ln ρ, and the given advantages as the signal."""
    ratios = torch.tensor([[ratios]], dtype=torch.float64)
    logp_old = torch.full_like(ratios, -1.0)
    advantages = torch.tensor([[advantages]], dtype=torch.float64)
    return logp_old + ratios.log(), Groups(advantages, logp_old, Rollout.GROUP, **fields), advantages


def test_clip_fraction_counts_the_items_whose_gradient_the_clip_removes():
    """A hand-built ratio vector with ε = 0.2: removed are ρ > 1.2 with A > 0 (3 items) and ρ < 0.8 with A < 0 (2);
    not ρ > 1.2 with A < 0 (1), ρ < 0.8 with A > 0 (1) or 0.8 ≤ ρ ≤ 1.2 (3): 5 of 10. The same items have no gradient
    (β = 0). Bug caught: a flipped sign of A or inequality in ``losses.clip_removes_gradient`` (high clause: 3/10,
    4/10; low clause: 4/10, 6/10)."""
    ratios = [1.5, 1.3, 1.25, 0.7, 0.75, 1.4, 0.6, 0.9, 1.1, 0.95]
    advantages = [1.0, 0.5, 2.0, -1.0, -0.3, -1.0, 1.0, 1.0, -1.0, -0.5]
    removed = [1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
    logp, groups, signal = _ratio_batch(ratios, advantages)
    logp.requires_grad_(True)
    grpo = build("grpo_no_kl")
    loss, metrics = grpo.loss(logp, groups, signal)
    assert metrics["clip_fraction"].item() == pytest.approx(5 / 10)
    (grad,) = torch.autograd.grad(loss.sum(), logp)
    assert (grad == 0).flatten().tolist() == [bool(r) for r in removed]
    assert build("ppo").loss(logp.detach(), Groups(signal, groups.logp_old, Rollout.SINGLE, advantages=signal),
                             signal)[1]["clip_fraction"].item() == pytest.approx(5 / 10)
    # the ratio the objective clips: |log ρ| ≤ 0.1 first, so every ρ counts as one in [e^-0.1, e^0.1], inside the clip
    clipped_log_ratio = build("grpo_no_kl", log_ratio_clip=0.1).loss(logp.detach(), groups, signal)[1]
    assert clipped_log_ratio["clip_fraction"].item() == 0.0
    # a diverged policy (a NaN log-prob) has no clip fraction, as it has no ratio deviation
    diverged = logp.detach().clone()
    diverged[..., 0] = float("nan")
    assert grpo.loss(diverged, groups, signal)[1]["clip_fraction"].isnan().all()
    single = Groups(signal, groups.logp_old, Rollout.SINGLE, advantages=signal)
    assert build("cispo").loss(diverged, single, signal)[1]["clip_fraction"].isnan().all()


def test_clip_fraction_reads_each_methods_own_ratio_and_range():
    """DAPO clips to [1 − 0.2, 1 + 0.28] (ρ = 1.25 is inside, 0.79 is not); GSPO's ratio is e^{(ℓ − ℓ_old)/L}
    (with L = 4, a sequence log-ratio of 0.0012 is ρ = e^0.0003, inside 1 + 4e-4; 0.002 is outside); CISPO counts the IS
    weights min(ρ, 5) that are clipped; DAPO's masked tokens do not count."""
    logp, groups, signal = _ratio_batch([1.25, 0.79, 1.3, 0.9], [1.0, -1.0, 1.0, -1.0])
    tokens = Groups(groups.scores, groups.logp_old.unsqueeze(-1), Rollout.GROUP)
    _, dapo = build("dapo").loss(logp.unsqueeze(-1), tokens, signal)
    assert dapo["clip_fraction"].item() == pytest.approx(2 / 4)  # 0.79 (A < 0) and 1.3 (A > 0)
    masked = Groups(tokens.scores, tokens.logp_old, Rollout.GROUP, mask=torch.tensor([[[[1.0], [0.0], [1.0], [1.0]]]]))
    assert build("dapo").loss(logp.unsqueeze(-1), masked, signal)[1]["clip_fraction"].item() == pytest.approx(1 / 3)
    logp_old = torch.full((1, 1, 2), -4.0, dtype=torch.float64)
    lengths = torch.full((1, 1, 2), 4.0, dtype=torch.float64)
    gspo_groups = Groups(torch.tensor([[[1.0, 0.0]]], dtype=torch.float64), logp_old, Rollout.GROUP, lengths=lengths)
    gspo_logp = logp_old + torch.tensor([[[0.0012, 0.002]]], dtype=torch.float64)
    _, gspo = build("gspo").loss(gspo_logp, gspo_groups, torch.tensor([[[1.0, 1.0]]], dtype=torch.float64))
    assert gspo["clip_fraction"].item() == pytest.approx(1 / 2)
    logp, groups, signal = _ratio_batch([7.0, 5.5, 4.0, 0.5], [1.0, -1.0, 1.0, -1.0])
    _, cispo = build("cispo").loss(logp.unsqueeze(-1), Groups(groups.scores, groups.logp_old.unsqueeze(-1),
                                                             Rollout.GROUP), signal)
    assert cispo["clip_fraction"].item() == pytest.approx(2 / 4)  # ρ = 7, 5.5 > ε_max = 5, whatever A


# ---- aggregation is a hyperparameter -----------------------------------------------------------------------------

def test_a_baseline_with_another_aggregation_gives_that_aggregations_loss():
    """DAPO's terms (written here as in the hand example above) reduced by the sequence mean of token sums (verl's
    seq-mean-token-sum) and by the mean over groups of their sums, instead of its token mean."""
    scores = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    delta = torch.tensor([[[[0.25, 0.0], [0.0, -0.3]], [[0.1, -0.1], [0.05, 0.2]]]])  # (1, groups 2, K 2, T 2)
    logp_old = torch.full_like(delta, -0.7)
    mask = torch.tensor([[[[1, 1], [1, 0]], [[1, 1], [1, 1]]]])
    z = (0.5 / (0.5 + 1e-8), -0.5 / (0.5 + 1e-8))
    advantages = [z, z[::-1]]
    terms = [[[-_clip_term(d, a, 0.2, 0.28) * m for d, m in zip(row, mask_row)]
              for row, mask_row, a in zip(group, mask_group, group_advantages)]
             for group, mask_group, group_advantages in zip(delta[0].tolist(), mask[0].tolist(), advantages)]
    per_sequence = [sum(tokens) for group in terms for tokens in group]
    expected = {"sequences": sum(per_sequence) / 4, "groups": sum(per_sequence) / 2, "tokens": sum(per_sequence) / 7}
    for aggregation, value in expected.items():
        loss = loss_of(build("dapo", aggregation=aggregation), logp_old + delta, logp_old, scores, mask=mask)
        assert loss.item() == pytest.approx(value, rel=1e-6), aggregation


def test_grpo_masked_is_grpo_with_the_informative_groups_default(tmp_path):
    logp, logp_old, scores = _random_groups(torch.Generator().manual_seed(22))
    masked = loss_of(build("grpo_masked"), logp, logp_old, scores)
    assert torch.equal(masked, loss_of(build("grpo", aggregation="informative_groups"), logp, logp_old, scores))
    assert not torch.equal(masked, loss_of(build("grpo"), logp, logp_old, scores))
    summary = run_config([*TOKEN, "task.reward=bag_of_tokens", "algorithm=grpo", "algorithm.aggregation=tokens"],
                         tmp_path)
    assert summary["status"] == "completed"


def test_a_bad_aggregation_is_refused_naming_the_key_and_the_choices(tmp_path):
    with pytest.raises(ConfigError) as raised:
        run_config([*TOKEN, "algorithm=grpo", "algorithm.aggregation=mean"], tmp_path)
    assert str(raised.value) == ("algorithm.aggregation='mean' is not valid; valid choices: groups, "
                                 "informative_groups, sequences, tokens, constant")
    assert not (tmp_path / "metrics.csv").exists()


def test_epochs_is_a_typed_hyperparameter_with_the_algorithms_default():
    assert (build("tpo").epochs, build("dg").epochs, build("ce").epochs) == (4, 1, 1)
    assert build("dg", epochs=4).epochs == 4 and build("dg").hp.epochs is None
    with pytest.raises(ConfigError, match=r"^algorithm.epochs=0 is not valid; expected null or an integer >= 1$"):
        build("dg", epochs=0)


@pytest.mark.parametrize("name", ["grpo", "dapo", "cispo"])
def test_keys_added_to_the_yamls_leave_recorded_runs_identity_and_report_signature_alone(name):
    """``aggregation`` (every algorithm) and ``beta`` (Dr. GRPO, DAPO, GSPO, CISPO) joined the YAMLs after runs were
    recorded: at their defaults a run's identity and report signature are those of a run recorded without them; any
    other value is part of both."""
    from harness import rundir
    from harness.report.load import signature, as_current
    from harness.report.load import flatten

    cfg = compose_config([*TOKEN, f"algorithm={name}"])
    current = rundir.identity(cfg)
    older = OmegaConf.to_container(cfg, resolve=True)
    older["algorithm"].pop("aggregation")
    if name != "grpo":
        older["algorithm"].pop("beta")
    assert rundir.fingerprint(rundir._without_volatile(older)) == rundir.fingerprint(current)
    assert signature(as_current(flatten(older))) == signature(
        as_current(flatten(OmegaConf.to_container(cfg, resolve=True))))
    changed = compose_config([*TOKEN, f"algorithm={name}", "algorithm.aggregation=sequences"])
    assert rundir.identity(changed)["algorithm"]["aggregation"] == "sequences"
    assert signature(as_current(flatten(OmegaConf.to_container(changed, resolve=True)))) != signature(
        as_current(flatten(older)))


def harness_packages(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """``graph`` with each harness module folded into its top package or module (``harness.rundir.outputs`` →
    ``harness.rundir``): which parts of the harness use which."""
    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.startswith("harness."):
            folded.setdefault(part(module), set()).update(part(t) for t in targets if t.startswith("harness."))
    return {name: targets - {name} for name, targets in folded.items()}


def test_no_two_parts_of_the_harness_import_each_other():
    """A package and a module (or two packages) of the harness that import each other, even through different
    modules of a package, are one tangle: the run session sits above both the run files and the trackers.

    Bug caught: ``harness/rundir/session.py`` back in the run files' package (rundir → tracking → rundir)."""
    folded = harness_packages(import_graph(ROOT))
    assert import_cycle(folded) is None, " → ".join(import_cycle(folded))
    graph = import_graph(ROOT)
    tangled = import_cycle(harness_packages({**graph, "harness.rundir.session": {"harness.tracking"}}))
    assert tangled[-3:] in (["harness.rundir", "harness.tracking", "harness.rundir"],
                            ["harness.tracking", "harness.rundir", "harness.tracking"]), tangled
