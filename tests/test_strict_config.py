"""Strict configuration: ``+key`` adds only what something reads, seed ids that fit an int64, η bounded where float32
stays finite, and sizes refused up front when a run's memory estimate exceeds ``memory_cap_gb``."""

from __future__ import annotations

import math
import re

import pytest
import torch

from algorithms import mechanism
from algorithms.library import DG, TPO, GroupPG
from algorithms.registry import declarations
from common.checks import SEED_ID_MAX, ConfigError, check_seed_ids
from conftest import CONF, ROOT, compose_config, run_cli
from harness.__main__ import PASS_THROUGH, check_launch, optional_keys
from harness.config import build_task
from harness.trainers import episode
from tasks.memory import GB, check_memory, estimate_memory, machine_memory
from tasks.mnist_bandit import MECHANISM_ETA_MIN

SINGLE, MULTI, TOKEN, MNIST = "task=tabular_single", "task=tabular_multi", "task=token_reversal", "task=mnist_bandit"
TINY_TOKEN = [TOKEN, "task.H=2", "task.K=2", "task.batch_size=4", "model.d_model=8", "model.heads=1",
              "model.layers=1", "model.ffn=8"]


def refused(args: list[str]) -> str:
    with pytest.raises(ConfigError) as raised:
        check_launch(args)
    message = str(raised.value)
    assert "\n" not in message
    return message


# ---- 1. +key / ++key: only keys that something reads ------------------------------------------------------------
@pytest.mark.parametrize("args, fragment", [
    (["+foo=1"], "foo is not a config key and nothing reads it (top-level keys are: "),
    ([SINGLE, "+task.lrr=0.5"], "task.lrr is not a config key and nothing reads it (task has: name, arms, "),
    ([SINGLE, "+optim.lr=5"], "optim.lr is not a config key and nothing reads it (top-level keys are: "),
    ([TOKEN, "+task.epochs=4"], "task.epochs is not a config key and nothing reads it (task has: name, H, V"),
    ([TOKEN, "+optim.weight_decay=0.1"], "optim.weight_decay is not a config key and nothing reads it (optim has: "),
    ([TOKEN, "+model.layerz=9"], "did you mean model.layers?"),
    ([SINGLE, "++task.newkey=1"], "task.newkey is not a config key and nothing reads it"),
    ([TOKEN, "algorithm=ppo", "+algorithm.eta=0.5"], "algorithm.eta is not a config key and nothing reads it "
                                                     "(algorithm has: name, epochs, aggregation, clip_eps)"),
    ([TOKEN, "algorithm=dapo", "+algorithm.beta=0.04"], "algorithm.beta is already a config key; set it with "
                                                        "algorithm.beta=0.04"),
    (["+algorithm.etaa=2"], "did you mean algorithm.eta?"),
    ([SINGLE, "+task.generator.colour=3"], "task.generator.colour is not a config key"),  # no generator here
    (["-m", SINGLE, "algorithm=tpo,grpo", "+task.lrr=0.5"], "task.lrr is not a config key and nothing reads it"),
])
def test_an_added_key_that_nothing_reads_is_refused(args, fragment):
    """``+key`` and ``++key`` of a key nothing reads are refused in one line, with the node's keys or the nearest name.
    Bug caught: harness/__main__.py:_check_added — `key.startswith(node + ".") and isinstance(_node(cfg, node),
    DictConfig)` → `key.startswith(node + ".")` (+task.generator.colour accepted where there is no generator)."""
    assert fragment in refused(args)


@pytest.mark.parametrize("args", [
    [SINGLE, "++task.alpha=0.5"],  # an existing key: ++ sets it
    [TOKEN, "optim=adam", "+optim.muon_split=matrices"],  # read: the task refuses it for adam, in its own words
    [TOKEN, "+memory_cap_gb=30"],
    ["task=knights_knaves", "+task.generator.colour=3"],  # reasoning-gym's config: the task checks its fields
    ["task=gsm8k", "+model.chat_template_kwargs.enable_thinking=false"],
    ["task=gsm8k", "+model.chat_template_kwargs.enable_thinking=false",
     "model.chat_template_kwargs.enable_thinking=true"],
    [SINGLE, "+hydra.job.env_set.FOO=1"],  # Hydra's own
    [TOKEN, "algorithm=tpo", "++algorithm.eta=0.5"],
])
def test_keys_that_are_read_can_be_added(args):
    """``+key`` of a key that something reads (optional keys, pass-through nodes, Hydra's own) is accepted.
    Bug caught: harness/__main__.py:optional_keys — `keys = {"": ("memory_cap_gb",),` → `keys = {"": (),`."""
    check_launch(args)


def test_an_unknown_key_no_longer_invites_adding_it():
    """An unknown key is refused without suggesting ``+key``, unless it is an optional key something reads.
    Bug caught: harness/__main__.py:_check_key — `... if readable and not line.startswith("~") else ""` →
    `... if not line.startswith("~") else ""`."""
    message = refused([SINGLE, "task.lrr=3"])
    assert message == ("task.lrr is not a config key (task has: name, arms, batch_size, alpha, steps, "
                       "checkpoint_every, steps_to)")
    assert "+memory_cap_gb=10" in refused([TOKEN, "memory_cap_gb=10"])  # optional: the + is the way to set it
    assert "+model.chat_template_kwargs.enable_thinking=false" in refused(
        ["task=gsm8k", "model.chat_template_kwargs.enable_thinking=false"])


@pytest.mark.parametrize("task", [SINGLE, MULTI, MNIST, TOKEN, "task=gsm8k", "task=knights_knaves"])
def test_every_optional_key_is_read_somewhere(task):
    """The declared optional keys are keys the code reads (``.get("key"``, a dataclass field), searched outside
    harness/__main__.py, where they are declared (its own quoted names would match every key).
    Bug caught: harness.rundir — `cfg.trainer.get("overwrite", ...)` → `get("replace", ...)`."""
    declared = ROOT / "harness" / "__main__.py"
    sources = "\n".join(path.read_text() for folder in ("harness", "tasks", "algorithms")
                        for path in (ROOT / folder).rglob("*.py") if path != declared)
    for node, keys in optional_keys(compose_config([task])).items():
        for key in keys:
            assert re.search(rf"""["']{key}["']|\b{key}: """, sources), f"{node}.{key} is read nowhere"
    for node in PASS_THROUGH:
        assert re.search(rf"{node.split('.')[-1]}\b", sources)


def test_a_refused_add_exits_2_before_any_folder(tmp_path):
    """A refused ``+key`` on the command line exits 2 with one ``Error:`` line, before any folder is made.
    Bug caught: harness/__main__.py:refuse_bad_launch — `sys.exit(2)` → `raise` (a traceback, exit 1)."""
    result = run_cli([SINGLE, "+task.lrr=0.5", "logger=none"], tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "Error: task.lrr is not a config key and nothing reads it (task has: name, arms, batch_size, alpha, steps, "
        "checkpoint_every, steps_to)"]
    assert list(tmp_path.iterdir()) == []


# ---- 2. seed ids fit an int64 -----------------------------------------------------------------------------------
def test_seed_offset_beyond_int64_is_refused_in_one_line():
    """A launch whose seed ids leave int64 (an LLM run's: NumPy's 32-bit seed) is refused in one line; the edges run.
    Bug caught: harness/__main__.py:_check_values — `check_seed_ids(..., llm=llm)` → `check_seed_ids(...)`."""
    message = refused([SINGLE, f"seed_offset={SEED_ID_MAX}"])
    assert message.startswith(f"seed_offset={SEED_ID_MAX} is not valid with seeds=1; expected an integer in [0, "
                              f"{SEED_ID_MAX - 1}]")
    assert "seed_offset=9223372036854775804 is not valid with seeds=4" in refused(
        [SINGLE, "seeds=4", "seed_offset=9223372036854775804"])
    assert "seed_offset=4294967296 is not valid; expected an integer in [0, 4294967295]" in refused(
        ["task=gsm8k", "seed_offset=4294967296"])  # transformers.set_seed: NumPy's 32-bit seed
    check_launch([SINGLE, "seeds=4", "seed_offset=9223372036854775803"])
    check_launch(["task=gsm8k", "seed_offset=4294967295"])


def test_check_seed_ids():
    """check_seed_ids accepts exactly the offsets whose seed ids and their end fit an int64 (an LLM's: 32 bits).
    Bug caught: common/checks.py:check_seed_ids — `high = SEED_ID_MAX - seeds` →
    `high = SEED_ID_MAX - seeds + 1`."""
    check_seed_ids(1, SEED_ID_MAX - 1)
    for seeds, offset in ((1, SEED_ID_MAX), (2, SEED_ID_MAX - 1), (SEED_ID_MAX + 1, 0), (1, -1)):
        with pytest.raises(ConfigError, match=r"is not valid"):
            check_seed_ids(seeds, offset)
    check_seed_ids("x", 0)  # not an integer: build_task's own check says so
    with pytest.raises(ConfigError, match="seed_offset"):
        check_seed_ids(1, 2**32, llm=True)


def test_the_largest_valid_seed_offset_runs():
    """The largest valid seed_offset builds and steps with finite metrics.
    Bug caught: common/checks.py:check_seed_ids — `high = SEED_ID_MAX - seeds` →
    `high = SEED_ID_MAX - seeds - 1`."""
    task = build_task(compose_config([SINGLE, "seeds=2", f"seed_offset={SEED_ID_MAX - 2}", "task.arms=5",
                                      "task.batch_size=3"]))
    assert task.seeds.tolist() == [SEED_ID_MAX - 2, SEED_ID_MAX - 1]
    out = episode(task, 0)
    assert torch.isfinite(out.metrics["error"]).all()


# ---- 3. η: bounded where the algorithms' float32 stays finite ----------------------------------------------------
@pytest.mark.parametrize("overrides", [
    [SINGLE, "algorithm=tpo"], [SINGLE, "algorithm=group_pg"], [SINGLE, "algorithm=dg"], [MULTI, "algorithm=tpo"],
    [TOKEN, "algorithm=tpo_token"]])
def test_a_vanishing_eta_is_refused(overrides):
    """An η below 1e-6, where the algorithms' float32 overflows, is refused before any work.
    Bug caught: algorithms/library.py:ETA — `low=1e-6` → `low=0, low_open=True`."""
    with pytest.raises(ConfigError, match=re.escape("algorithm.eta=1e-300 is not valid; expected a number >= 1e-06")):
        build_task(compose_config([*overrides, "algorithm.eta=1e-300"]))


@pytest.mark.parametrize("overrides", [
    [SINGLE, "algorithm=tpo"], [SINGLE, "algorithm=group_pg"], [SINGLE, "algorithm=dg"], [MULTI, "algorithm=tpo"],
    [MULTI, "algorithm=dg"], [*TINY_TOKEN, "algorithm=tpo"], [*TINY_TOKEN, "algorithm=group_pg"],
    [*TINY_TOKEN, "algorithm=tpo_token"], [*TINY_TOKEN, "algorithm=dg"]])
def test_the_smallest_valid_eta_trains_finite(overrides):
    """At η = 1e-6 every algorithm's loss and metrics stay finite for a few steps.
    Bug caught: common/kernels.py:softmax — `e = (x - x.amax(-1, keepdim=True)).exp()` → `e = x.exp()`
    (tabular_multi/tpo: NaN)."""
    task = build_task(compose_config([*overrides, "algorithm.eta=1e-6", "seeds=2"]))
    for step in range(3):
        out = episode(task, step)
        assert out.loss is None or torch.isfinite(out.loss).all(), step
        for name, value in (out.metrics or {}).items():
            if name in ("error", "misalignment"):
                assert torch.isfinite(value).all(), (step, name)


def test_mnist_mechanism_eta_bound():
    """TPO's mechanism closed form overflows below MECHANISM_ETA_MIN (after the training work: refused up front).
    Bug caught: algorithms/mechanism.py:TPO_ETA_MIN — `math.ceil(...) / 1e4` → `math.floor(...) / 1e4`."""
    probs, labels = torch.softmax(torch.randn(1, 64, 10) * 4, -1), torch.arange(64) % 10
    stats = mechanism.mechanism_per_example(probs, labels, TPO(TPO.Hyperparameters(eta=MECHANISM_ETA_MIN)))
    assert all(torch.isfinite(value.float()).all() for value in stats.values())
    with pytest.raises(OverflowError):
        mechanism.mechanism_per_example(probs, labels, TPO(TPO.Hyperparameters(eta=MECHANISM_ETA_MIN * 0.98)))
    with pytest.raises(ConfigError, match=re.escape("algorithm.eta=0.001 is not valid with task.mechanism=true")):
        build_task(compose_config([MNIST, "algorithm=tpo", "algorithm.eta=0.001", "task.source=idx",
                                   "task.data_dir=/nonexistent"]))  # refused before the data loads


def test_the_eta_bound_is_documented_in_its_declaration():
    """The η bound stays in η's one declaration, beside the float32 reasoning that justifies it.
    Bug caught: algorithms/library.py:ETA — `low=1e-6` → `low=1e-8`."""
    for cls in (TPO, GroupPG, DG):
        assert declarations(cls)["eta"].metadata["bounds"] == {"low": 1e-6}, cls.id
    text = (ROOT / "algorithms" / "library.py").read_text()
    declaration = text.index("\nETA = ")
    assert "low=1e-6" in text[declaration:text.index("\n", text.index("low=", declaration))]
    reasoning = text[:declaration].rsplit("\n\n", 1)[1]  # the comment block right above it
    assert "float32" in reasoning and "log-softmax" in reasoning


# ---- 4. memory: refused up front above memory_cap_gb --------------------------------------------------------------
@pytest.mark.parametrize("args, sizes", [
    ([SINGLE, "task.arms=1000000000"], "task.arms=1000000000"),
    ([MULTI, "task.contexts=100000", "task.arms=100000"], "task.contexts=100000 × task.arms=100000"),
    ([TOKEN, "task.H=100000"], "task.H=100000"),
    ([TOKEN, "task.K=100000"], "task.K=100000"),
    ([TOKEN, "task.V=100000000", "algorithm=tpo_token"], "task.V=100000000"),
    ([MNIST, "seeds=100000", "task.batch_size=10000"], "seeds=100000 × task.batch_size=10000"),
    (["-m", TOKEN, "task.K=8,100000"], "task.K=100000"),  # every job of a sweep
])
def test_a_run_too_large_for_the_cap_is_refused_in_one_line(args, sizes):
    """A launch whose memory estimate exceeds memory_cap_gb (any job of a sweep) is refused in one line naming sizes.
    Bug caught: tasks/memory.py:check_memory — `estimate[0] <= cap_bytes` → `estimate[0] / GB <= cap_bytes`."""
    message = refused([*args, "+memory_cap_gb=24"])
    assert re.match(r"task=\w+ needs about [0-9.e+]+ GB \(", message), message
    assert sizes in message and "over memory_cap_gb=24 GB; lower these sizes, or raise the cap with" in message


def test_the_cap_is_configurable():
    """memory_cap_gb is auto by default and takes null or a number of GB > 0; 0 is refused as a value.
    Bug caught: tasks/memory.py:check_memory — `cap > 0` → `cap >= 0` (0 read as a cap, not refused as a value)."""
    too_big = [TOKEN, "task.K=100000"]
    refused(too_big)  # auto: this machine's memory
    check_launch([*too_big, "+memory_cap_gb=null"])  # no check
    check_launch([*too_big, "+memory_cap_gb=1e6"])
    assert "memory_cap_gb=0 is not valid; expected auto, null (no check) or a number of GB > 0" in refused(
        [TOKEN, "+memory_cap_gb=0"])
    assert "memory_cap_gb=auto: " in refused(too_big) and "this machine's memory" in refused(too_big)
    assert machine_memory()[0] > GB / 10


def test_a_refused_size_exits_2_before_any_folder(tmp_path):
    """A size over the cap on the command line exits 2 with one ``Error:`` line, before any folder is made.
    Bug caught: harness/__main__.py:refuse_bad_launch — `sys.exit(2)` → `sys.exit(1)`."""
    result = run_cli([SINGLE, "task.arms=1000000000", "+memory_cap_gb=24", "logger=none"], tmp_path)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: task=tabular_single needs about 164 GB"), result.stderr
    assert list(tmp_path.iterdir()) == []


PRESETS = sorted(path.stem for path in (CONF / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("preset", PRESETS)
def test_every_preset_fits_a_24_gb_machine(preset):
    """Each job of each preset's sweep (its largest values too), composed as ``-m`` composes it, estimated under 24 GB
    (check_launch composes every job and checks its estimate against the cap).
    Bug caught: harness/__main__.py:_check_values — `check_memory(cfg)` deleted (the launch checks no estimate)."""
    check_launch(["-m", f"experiment={preset}", "+memory_cap_gb=24"])
    cfg = compose_config([f"experiment={preset}"])
    if cfg.task.name in ("tabular_single", "tabular_multi", "mnist_bandit", "token_reversal"):
        assert estimate_memory(cfg) is not None
        with pytest.raises(ConfigError, match="over memory_cap_gb=1e-06 GB"):  # the check runs on the preset's jobs
            check_launch(["-m", f"experiment={preset}", "+memory_cap_gb=1e-6"])


def test_the_largest_preset_jobs_are_estimated_under_24_gb():
    """The sweeps' largest values, explicitly: fig12's K = 64 at B = 256, 30 seeds; fig6's interaction matching.
    Bug caught: tasks/token_reversal.py:TokenReversal.memory_estimate — `together = min(size(chunk) or seeds,
    seeds)` → `together = seeds` (fig12 at K = 64: 101 GB)."""
    for overrides in (["experiment=fig12_k_sweep", "task.K=64", "algorithm=tpo"],
                      ["experiment=table3_terminal", "task.H=10", "task.match=interactions", "algorithm=ppo"],
                      ["experiment=fig6_variations", "task.match=interactions", "algorithm=ppo"],
                      ["experiment=table1_vocab_sweep", "task.V=16", "algorithm=tpo_token"],
                      ["experiment=fig2_tabular_single", "algorithm=tpo"], ["experiment=fig4_mnist", "algorithm=tpo"]):
        cfg = compose_config(overrides)
        need, _ = estimate_memory(cfg)
        assert need < 24 * GB, (overrides, need / GB)
        with pytest.raises(ConfigError, match="over memory_cap_gb"):
            check_memory(compose_config([*overrides, f"+memory_cap_gb={need / GB / 2}"]))


def test_the_estimate_bounds_a_measured_step():
    """An upper bound: a tabular step at a size where the (seeds, batch, arms) sampling table dominates.
    Bug caught: tasks/tabular.py:TabularSingle.memory_estimate — `16 * FLOAT * arms + batch * arms + ...` →
    `16 * FLOAT * arms + ...` (the sampling table left out)."""
    cfg = compose_config([SINGLE, "task.arms=20000", "task.batch_size=500", "seeds=2"])
    need, _ = estimate_memory(cfg)
    assert need >= 2 * 500 * 20000  # the bool comparison table of the inverse-CDF sampling
    assert math.isfinite(need) and need < GB
