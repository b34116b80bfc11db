"""Every speed-up equals the plain path: distinct-answer training, seed chunking and shared-prompt rows give the
same log-probs, losses, gradients and optimizer step as training on every rollout of all seeds at once; block
random draws, the softmax primitives and the MNIST step's fast gathers and fused Adam equal their plain versions."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from common import kernels
from conftest import compose_config
from tasks import rng
from harness.config import build_task
from harness.trainers import episode
from harness.trainers.batched import GroupTrainer
from tasks import TASKS, get_task
from tasks import token_reversal as tr
from tasks.models import transformer
from test_mnist_closed_form import mnist_closed_form
from test_token_reversal import naive_log_probs

# H = 3, V = 2 and K = 8: at most 8 distinct answers per prompt, so groups are full of duplicates
DUPLICATES = ["task=token_reversal", "task.H=3", "task.V=2", "task.K=8", "task.batch_size=6", "seeds=3"]


def make_task(*overrides: str):
    return build_task(compose_config([*DUPLICATES, *overrides]))


def test_distinct_answers_maps_every_rollout_to_an_identical_answer_of_its_own_group():
    actions = torch.tensor([[[[0, 1], [0, 1], [1, 1]], [[1, 0], [1, 0], [1, 0]]],
                            [[[0, 0], [1, 1], [0, 1]], [[0, 0], [0, 1], [0, 0]]]])  # (S=2, B=2, K=3, H=2)
    keep, inverse = tr.distinct_answers(actions)
    assert keep.tolist()[0][:3] == [0, 2, 3] and keep.shape == (2, 5)  # seed 0 has 3 distinct rows, seed 1 has 5
    assert keep.tolist()[1] == [0, 1, 2, 3, 4]
    assert inverse.tolist() == [[0, 0, 1, 2, 2, 2], [0, 1, 2, 3, 4, 3]]
    flat = actions.flatten(1, 2)
    rows = keep.gather(1, inverse)  # the kept position each rollout reads its log-prob from
    assert torch.equal(flat.gather(1, rows.unsqueeze(-1).expand(-1, -1, 2)), flat)
    assert torch.equal(rows // 3, torch.arange(6).div(3, rounding_mode="floor").expand(2, 6))  # same prompt


def test_answers_continuing_arbitrary_prompt_rows_match_the_full_forward():
    S, B, N, H, V = 2, 3, 5, 4, 3
    params = {k: v.detach() for k, v in transformer.init_params(torch.arange(S), V, 2 * H).items()}
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, V, (S, B, H), generator=gen)
    answers = torch.randint(0, V, (S, N, H), generator=gen)
    rows = torch.randint(0, B, (S, N), generator=gen)
    fast = tr.answer_log_probs(params, prompts, answers, rows).gather(-1, answers.unsqueeze(-1))
    own_prompts = prompts[torch.arange(S)[:, None], rows]
    naive = naive_log_probs(params, own_prompts, answers, answers.unsqueeze(-1))
    torch.testing.assert_close(fast, naive, atol=1e-5, rtol=0)


def _first_epoch(task, step=0):
    """Rollout, first-epoch log-probs, loss and gradient of every chunk, then one optimizer step."""
    task.optimizer.zero_grad(set_to_none=True)
    logps, loss_values = [], []
    for seeds in task.chunks:
        batch = task.rollout_batch(step, seeds)
        logp = task.log_probs(batch)
        loss, _ = GroupTrainer.batch_loss(task, batch, logp)
        loss.sum().backward()
        logps.append(logp.detach())
        loss_values.append(loss.detach())
    grads = {k: v.grad.clone() for k, v in task.params.items()}
    task.optimizer.step(active=task.active)
    return torch.cat(logps), torch.cat(loss_values), grads, {k: v.detach().clone() for k, v in task.params.items()}


def _assert_same_step(fast, plain):
    """Log-probs, losses, gradients and the optimizer step agree to float tolerance.

    The attention key biases are the exception: softmax ignores a constant added to every key score, so their
    exact gradient is 0 and what autograd returns is round-off (~1e-8), which Muon's orthogonalisation (the
    reference's split puts them on Muon) turns into a full-size step in a direction set by that round-off. They
    cannot change any output, so only their zero gradient is checked."""
    (logp_a, loss_a, grad_a, params_a), (logp_b, loss_b, grad_b, params_b) = fast, plain
    torch.testing.assert_close(logp_a, logp_b, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(loss_a, loss_b, atol=1e-6, rtol=1e-6)
    for name in grad_b:
        if name.endswith("attn.k.bias"):
            assert grad_a[name].abs().max() < 1e-6 and grad_b[name].abs().max() < 1e-6
            continue
        torch.testing.assert_close(grad_a[name], grad_b[name], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(params_a[name], params_b[name], atol=1e-5, rtol=1e-4)


def _trained(*overrides):
    """A task a few episodes into training (so some groups agree), then the state copied into its variants."""
    task = make_task(*overrides)
    for step in range(6):
        episode(task, step)
    return task


@pytest.mark.parametrize("algorithm", ["tpo", "grpo", "grpo_masked", "tpo_no_anchor", "group_pg"])
def test_distinct_answer_training_equals_training_on_every_rollout(algorithm):
    state = _trained(f"algorithm={algorithm}").state_dict()
    results = []
    for dedup in (True, False):
        task = make_task(f"algorithm={algorithm}", f"task.dedup={str(dedup).lower()}")
        task.load_state_dict(copy.deepcopy(state))  # the optimizer steps its state in place
        results.append(_first_epoch(task, step=6))
    task = make_task(f"algorithm={algorithm}")
    task.load_state_dict(copy.deepcopy(state))
    assert task.rollout_batch(6).distinct[0].shape[1] < 6 * 8  # the comparison exercises real duplicates
    _assert_same_step(*results)


@pytest.mark.parametrize("algorithm", ["tpo", "ppo", "tpo_token"])
def test_seed_chunks_equal_one_batched_program(algorithm):
    reward = "task.reward=bag_of_tokens"
    state = _trained(f"algorithm={algorithm}", reward).state_dict()
    results = []
    for chunk in (1, 2, 3):
        task = make_task(f"algorithm={algorithm}", reward, f"task.seed_chunk={chunk}")
        assert len(task.chunks) == {1: 3, 2: 2, 3: 1}[chunk]
        task.load_state_dict(copy.deepcopy(state))  # the optimizer steps its state in place
        results.append(_first_epoch(task, step=6))
    for chunked in results[:2]:
        _assert_same_step(chunked, results[2])


def test_whole_episodes_agree_across_chunking_and_dedup():
    """Two full episodes (4 epochs each, Muon): every logged metric agrees to float tolerance, but the size of Muon's
    step: the loss is invariant to the attention key biases (a shift of every key's score), so their true gradient
    is 0 and their float gradient is rounding noise, which Muon orthogonalises into a full-size step (as optax does
    for the reference) whose direction depends on the rounding. It moves no output, so every other metric agrees."""
    runs = []
    for overrides in (["task.seed_chunk=1"], ["task.seed_chunk=3", "task.dedup=false"]):
        task = make_task("algorithm=tpo", "task.reward=terminal", *overrides)
        runs.append([episode(task, step).metrics for step in range(2)])
    for fast, plain in zip(*runs):
        for name in tr.METRICS:
            tolerance = 0.1 if name == "update_muon" else 1e-4
            torch.testing.assert_close(fast[name], plain[name], atol=1e-4, rtol=tolerance, equal_nan=True)


# ---- bandit fast paths ---------------------------------------------------------------------------------------------
def test_block_draws_equal_per_step_draws():
    seeds = torch.tensor([0, 5, 9])
    block = rng.randint(seeds, "contexts", range(7, 12), (4, 3), 1000)
    uniforms = rng.uniform(seeds, "actions", range(7, 12), (6,))
    assert block.shape == (3, 5, 4, 3) and uniforms.shape == (3, 5, 6)
    for offset, step in enumerate(range(7, 12)):
        assert torch.equal(block[:, offset], rng.randint(seeds, "contexts", step, (4, 3), 1000))
        assert torch.equal(uniforms[:, offset], rng.uniform(seeds, "actions", step, (6,)))


@pytest.mark.parametrize("shape", [(3, 7, 10), (2, 5, 2), (4, 1)])
def test_softmax_primitives_equal_torch_values_and_gradients(shape):
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 5).requires_grad_()
    weights = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for ours, theirs in [(kernels.log_softmax, torch.log_softmax), (kernels.softmax, torch.softmax)]:
        (grad_ours,) = torch.autograd.grad((ours(x) * weights).sum(), x)
        (grad_theirs,) = torch.autograd.grad((theirs(x, -1) * weights).sum(), x)
        torch.testing.assert_close(ours(x), theirs(x, -1), atol=1e-6, rtol=1e-6)
        torch.testing.assert_close(grad_ours, grad_theirs, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 2e-6), (torch.float64, 1e-14)])
def test_gelu_through_the_logistic_function_equals_torchs_tanh_gelu(dtype, tolerance):
    x = torch.linspace(-12.0, 12.0, 20001, dtype=dtype).requires_grad_()
    upstream = torch.randn(x.shape, generator=torch.Generator().manual_seed(2), dtype=dtype)
    ours, theirs = kernels.gelu_tanh(x), torch.nn.functional.gelu(x, approximate="tanh")
    torch.testing.assert_close(ours, theirs, atol=tolerance, rtol=0)
    (grad_ours,) = torch.autograd.grad((ours * upstream).sum(), x)
    (grad_theirs,) = torch.autograd.grad((theirs * upstream).sum(), x)
    torch.testing.assert_close(grad_ours, grad_theirs, atol=tolerance, rtol=2 * tolerance)
    with torch.no_grad():  # sampling's forward skips the derivative
        torch.testing.assert_close(kernels.gelu_tanh(x), theirs.detach(), atol=tolerance, rtol=0)


@pytest.mark.parametrize("overrides", [["algorithm=tpo"], ["algorithm=tpo", "algorithm.zero_variance=zero"],
                                       ["algorithm=group_pg"], ["algorithm=grpo"], ["algorithm=dg"],
                                       ["algorithm=dg", "algorithm.surprisal_clip=0.5"], ["algorithm=pg"],
                                       ["algorithm=ce"]])
def test_mnist_closed_form_loss_and_gradient_equal_the_library_loss(overrides):
    """The MNIST step's loss and gradient on the logits (no autograd) against the algorithm's library loss and its
    autograd at the rollout policy, for sampled actions (five of them forced to one class) and for a batch where
    every answer is right (GRPO's advantages then have zero variance)."""
    from tasks.models.mlp import mlp_forward

    task = build_task(compose_config(["task=mnist_bandit", *overrides, "seeds=2"]))
    images, labels, u = task.batch(0)
    logits = mlp_forward(task.params, images)[0].double().requires_grad_()
    sampled = rng.sample_categorical(torch.log_softmax(logits.detach(), -1), u)
    sampled[:, :5] = 3
    for actions in (sampled, labels):
        log_probs = torch.log_softmax(logits, -1)
        expected_loss = task.loss(logits, log_probs, actions, labels)
        (expected,) = torch.autograd.grad(expected_loss.sum(), logits)
        loss, grad = mnist_closed_form(task, log_probs.detach(), actions, labels)
        torch.testing.assert_close(loss, expected_loss.detach(), rtol=0, atol=1e-15)
        torch.testing.assert_close(grad, expected, rtol=0, atol=1e-15)
        assert expected.abs().max() > (1e-4 if actions is sampled else -1)  # not a comparison of two zeros


@pytest.mark.parametrize("algorithm", ["tpo", "grpo", "dg", "pg", "group_pg", "ce"])
def test_mnist_steps_equal_the_plain_path(algorithm):
    """Three steps of the task (block draws, images gathered by index_select, our log-softmax, closed-form loss
    gradient, hand-written MLP backward through oneDNN, direct fused Adam) against the same steps written plainly
    (per-step draws, advanced indexing, torch's log_softmax, autograd through the whole MLP, torch's Adam)."""
    from tasks.models.mlp import mlp_logits

    task = build_task(compose_config(["task=mnist_bandit", f"algorithm={algorithm}", "seeds=2"]))
    params = {k: v.detach().clone().requires_grad_() for k, v in task.params.items()}
    adam = torch.optim.Adam(params.values(), lr=1e-3)
    images_u8 = task.train_images
    for step in range(3):
        out = episode(task, step)
        index = rng.randint(task.seeds, "contexts", step, (task.batch_size,), len(task.train_labels))
        images = images_u8[index].float().div_(255.0)
        logits = mlp_logits(params, images)
        log_probs = torch.log_softmax(logits, -1)
        u = rng.uniform(task.seeds, "actions", step, (task.batch_size,))
        loss = task.loss(logits, log_probs, rng.sample_categorical(log_probs.detach(), u), task.train_labels[index])
        adam.zero_grad()
        loss.sum().backward()
        adam.step()
        torch.testing.assert_close(out.loss, loss.detach(), atol=1e-6, rtol=1e-5)
        for name, value in params.items():  # Adam's step lr·m/(√v+ε) turns a rounding difference of a
            # near-zero gradient (|g| ~ ε) into up to ~0.1% of a step: allow 1% of lr = 1e-3
            torch.testing.assert_close(task.params[name].detach(), value.detach(), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("trained", [False, True])
def test_shared_prefix_sampling_equals_one_row_per_sample(trained):
    """Decoding each distinct (prompt, prefix) once draws the same answers with the same log-probs."""
    task = _trained("algorithm=tpo") if trained else make_task("algorithm=tpo")
    params = {k: v.detach() for k, v in task.params.items()}
    prompts = rng.randint(task.seeds, "contexts", 50, (6, 3), 2)
    uniforms = rng.uniform(task.seeds, "actions", 50, (6, 8, 3))
    shared, shared_logp = tr.sample_sequences(params, prompts, uniforms, shared_prefixes=True)
    plain, plain_logp = tr.sample_sequences(params, prompts, uniforms, shared_prefixes=False)
    assert torch.equal(shared, plain)
    torch.testing.assert_close(shared_logp, plain_logp, atol=1e-6, rtol=0)
    if trained:
        assert len({tuple(a) for a in shared[0].flatten(0, 1).tolist()}) < 6 * 8  # samples do share prefixes


def test_auto_settings_on_cpu():
    task = make_task("algorithm=tpo")
    assert task.dedup is True and task.chunks == [slice(0, 1), slice(1, 2), slice(2, 3)]
    assert make_task("algorithm=ppo").chunks == [slice(None)]  # small single-sample batches run batched
    task = make_task("algorithm=tpo", "task.dedup=false", "task.seed_chunk=8")
    assert task.dedup is False and task.chunks == [slice(None)]


def test_mlp_backward_equals_autograd():
    from tasks.models.mlp import init_mlp, mlp_backward, mlp_forward, mlp_logits

    params = {k: v.requires_grad_() for k, v in init_mlp(torch.arange(3)).items()}
    images = torch.rand(3, 16, 784, generator=torch.Generator().manual_seed(0))
    images[0, :, :400] = 0.0  # dead units: ReLU passes no gradient where its output is 0
    grad_logits = torch.randn(3, 16, 10, generator=torch.Generator().manual_seed(1))
    logits, layer_inputs = mlp_forward(params, images)
    expected_logits = mlp_logits(params, images)
    torch.testing.assert_close(logits, expected_logits.detach(), atol=1e-6, rtol=1e-6)
    expected = torch.autograd.grad(expected_logits, list(params.values()), grad_logits)
    ours = mlp_backward(params, layer_inputs, grad_logits)
    assert (layer_inputs[1] == 0).any()
    for (name, value), reference in zip(params.items(), expected):
        assert ours[name].shape == value.shape
        torch.testing.assert_close(ours[name], reference, atol=1e-5, rtol=1e-5)


def test_mlp_on_inputs_shared_by_every_seed_equals_per_seed_inputs():
    from tasks.models.mlp import init_mlp, mlp_logits

    params = init_mlp(torch.arange(3))
    for layer in range(3):  # nonzero biases, different per seed
        params[f"b{layer}"] += torch.randn(params[f"b{layer}"].shape, generator=torch.Generator().manual_seed(layer))
    images = torch.rand(40, 784, generator=torch.Generator().manual_seed(0))
    shared = mlp_logits(params, images)
    assert shared.shape == (3, 40, 10)
    torch.testing.assert_close(shared, mlp_logits(params, images.expand(3, 40, 784)), atol=1e-6, rtol=1e-6)


class _HostReads(TorchDispatchMode):
    """Records ops that make a CUDA device wait for the host to read a value back: scalar reads (.item(), int(),
    bool()), outputs whose size depends on the data (nonzero, masked_select, unique, boolean indexing), and
    repeat_interleave without a known output size."""

    DATA_DEPENDENT = {"aten._local_scalar_dense.default", "aten.nonzero.default", "aten.masked_select.default",
                      "aten._unique2.default", "aten.unique_consecutive.default", "aten.unique_dim.default"}

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = str(func)
        if (name in self.DATA_DEPENDENT
                or name == "aten.repeat_interleave.Tensor" and kwargs.get("output_size") is None
                or name == "aten.index.Tensor" and any(i is not None and i.dtype == torch.bool for i in args[1])):
            self.reads.append(name)
        return func(*args, **kwargs)


@pytest.mark.parametrize("overrides", [
    *[["task=token_reversal", f"algorithm={a}"] for a in ("tpo", "grpo", "ppo", "dg")],
    ["task=token_reversal", "algorithm=tpo_token", "task.reward=bag_of_tokens"],
    ["task=mnist_bandit", "algorithm=tpo"], ["task=mnist_bandit", "algorithm=grpo"],
    ["task=tabular_single", "algorithm=tpo"], ["task=tabular_multi", "algorithm=grpo"]])
def test_gpu_settings_read_nothing_back_from_the_device_during_a_step(overrides):
    """The GPU path (no host round-trips per token), checked on CPU: with the settings ``auto`` picks on a
    GPU (no dedup, all seeds in one program) a training step issues no op that would wait for the device."""
    token = overrides[0] == "task=token_reversal"
    gpu_like = ["task.dedup=false", "task.seed_chunk=3", "task.H=4", "task.batch_size=8"] if token else []
    task = build_task(compose_config([*overrides, *gpu_like, "seeds=3", "logger=none"]))
    episode(task, 0)
    with _HostReads() as mode:
        episode(task, 1)
    assert mode.reads == []


class _HostTensors(TorchDispatchMode):
    """Records every op that receives a tensor stored on the host."""

    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if any(isinstance(x, torch.Tensor) and x.device.type == "cpu" for x in tree_leaves((args, kwargs))):
            self.ops.append(str(func))
        return func(*args, **kwargs)


NON_LLM_TASKS = [name for name, entry in TASKS.items() if not entry.path.startswith("tasks.llm.")]


@pytest.mark.parametrize("task_name, algorithm", [
    (task_name, algorithm) for task_name in NON_LLM_TASKS for algorithm in get_task(task_name).supported_algorithms()])
def test_gpu_path_makes_every_tensor_on_the_device(task_name, algorithm):
    """``device=cuda`` with tensors born on the device, checked without a GPU: the task is built on the ``meta``
    device (shapes without data; ``auto`` settings as on a GPU) and trained for two steps with evaluation. An op
    mixing a host tensor into device tensors, or reading a value back, fails there, and no op may receive a host
    tensor at all (on a GPU each would be a copy from the host every step)."""
    overrides = [f"task={task_name}", f"algorithm={algorithm}", "seeds=2", "logger=none"]
    if task_name == "mnist_bandit":
        overrides.append("task.eval_every=1")
    if algorithm.endswith("_token"):
        overrides.append("task.reward=bag_of_tokens")
    task = build_task(compose_config(overrides), device=torch.device("meta"))
    episode(task, 0)
    with _HostTensors() as mode:
        out = episode(task, 1)
    assert mode.ops == []
    assert all(value.device.type == "meta" for value in [out.loss, *(out.metrics or {}).values()])


# ---- exact fast paths (tasks.token_reversal.set_fast_paths): bit-identical, not merely close ----------------------
SECTION4_LIKE = ["task=token_reversal", "task.reward=terminal", "task.target=reverse_copy", "task.V=2", "task.H=4",
                 "task.batch_size=16", "task.K=8", "seeds=2"]


def _bits(x: torch.Tensor) -> torch.Tensor:
    """The float tensor's bit patterns (so that -0 ≠ +0 and NaN = NaN of the same payload)."""
    return x.detach().contiguous().view(torch.int32)


def _episodes_with_fast_paths(enabled: bool, algorithm: str, episodes: int = 3):
    """Per episode: the first epoch's ℓ (every rollout), the parameters' gradient of the last epoch, every metric,
    and the parameters after the episode."""
    tr.set_fast_paths(enabled)
    try:
        task = build_task(compose_config([*SECTION4_LIKE, f"algorithm={algorithm}"]))
        seen = []
        log_probs = task.log_probs

        def recording(batch):
            logp = log_probs(batch)
            seen.append(logp.detach().clone())
            return logp

        task.log_probs = recording
        out = []
        for step in range(episodes):
            seen.clear()
            metrics = episode(task, step).metrics
            out.append({"logp": torch.cat(seen[:len(task.chunks)]),
                        "grads": {k: v.grad.clone() for k, v in task.params.items() if v.grad is not None},
                        "metrics": {k: v.clone() for k, v in metrics.items()},
                        "params": {k: v.detach().clone() for k, v in task.params.items()}})
        return out
    finally:
        tr.set_fast_paths(True)


@pytest.mark.parametrize("algorithm", ["tpo", "grpo"])
def test_exact_fast_paths_are_bit_identical_to_the_plain_path(algorithm):
    """Section-4-like config (terminal reverse copy, V = 2, H = 4, B = 16, K = 8, 2 seeds, 3 episodes of 4 epochs,
    seeds computed one at a time): with the fast paths (the rollout's prefill reused by the first epoch, the row
    selection's backward on a contiguous gradient, integer answer codes) the log-probs, gradients, metrics and
    parameters are those of the plain path bit for bit."""
    fast, plain = _episodes_with_fast_paths(True, algorithm), _episodes_with_fast_paths(False, algorithm)
    for a, b in zip(fast, plain):
        assert torch.equal(_bits(a["logp"]), _bits(b["logp"]))
        assert a["grads"].keys() == b["grads"].keys()
        for name in b["grads"]:
            assert torch.equal(_bits(a["grads"][name]), _bits(b["grads"][name])), name
        for name in b["metrics"]:
            assert torch.equal(_bits(a["metrics"][name]), _bits(b["metrics"][name])), name
        for name in b["params"]:
            assert torch.equal(_bits(a["params"][name]), _bits(b["params"][name])), name


def test_rollout_prefill_is_reused_once_and_only_with_unchanged_parameters():
    task = build_task(compose_config([*SECTION4_LIKE, "algorithm=tpo", "task.seed_chunk=2"]))
    batch = task.rollout_batch(0)
    assert batch.prefill is not None and batch.prefill.valid_for(task.params)
    task.log_probs(batch)
    assert batch.prefill is None  # taken by the first forward
    batch = task.rollout_batch(0)
    with torch.no_grad():
        task.params["head.bias"].add_(1.0)  # an in-place change (as the optimizer's step) invalidates it
    assert not batch.prefill.valid_for(task.params)
    stale_refused = task.log_probs(batch)  # recomputes the prefill with the current parameters
    tr.set_fast_paths(False)
    try:
        expected = task.log_probs(task.rollout_batch(0))  # the plain path, current parameters
    finally:
        tr.set_fast_paths(True)
    assert torch.equal(_bits(stale_refused), _bits(expected))
    with torch.no_grad():
        assert task.rollout_batch(0).prefill is None  # no graph to record: nothing to keep


@pytest.mark.parametrize("sorted_rows", [True, False])
def test_row_selection_backward_equals_index_add_bit_for_bit(sorted_rows):
    gen = torch.Generator().manual_seed(3)
    for _ in range(10):
        S, rows_cached, N = 2, int(torch.randint(1, 40, (1,), generator=gen)), int(torch.randint(1, 300, (1,),
                                                                                                 generator=gen))
        cached = torch.randn(S, rows_cached, 2, 3, 4, generator=gen, requires_grad=True)
        rows = torch.randint(0, rows_cached, (S, N), generator=gen)
        rows = rows.sort(1).values if sorted_rows else rows
        new = torch.randn(S, N, 2, 5, 4, generator=gen)
        upstream = torch.randn(S, N, 2, 8, 4, generator=gen)
        upstream[:, ::3] = -0.0
        grads = []
        for fast in (True, False):
            transformer.CONTIGUOUS_ROW_GRAD = fast
            try:
                selected = transformer._select_rows(cached, rows, row_sums=True)
                keys = torch.cat((selected, new), -2)  # as the attention does: the gradient arrives as a slice
                grads.append(torch.autograd.grad((keys * upstream).sum(), cached)[0])
            finally:
                transformer.CONTIGUOUS_ROW_GRAD = True
        assert torch.equal(_bits(grads[0]), _bits(grads[1]))


def test_distinct_answers_codes_equal_the_tokenwise_comparison():
    gen = torch.Generator().manual_seed(4)
    for vocab, H in ((2, 8), (3, 5), (16, 10), (200, 9)):  # the last: 9·log2(200) > 62 bits, the token-wise path
        actions = torch.randint(0, vocab, (2, 5, 12, H), generator=gen)
        actions[:, :, 6:] = actions[:, :, :6]  # duplicates in every group
        tr.set_fast_paths(False)
        try:
            plain = tr.distinct_answers(actions)
        finally:
            tr.set_fast_paths(True)
        fast = tr.distinct_answers(actions)
        assert all(torch.equal(a, b) for a, b in zip(fast, plain))
