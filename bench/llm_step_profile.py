"""Where a step of the LLM CPU demo goes, TPO against GRPO: generation, scoring, log-probs, loss, backward, optimizer.

    PYTHONPATH=. python bench/llm_step_profile.py [--steps 3] [--algorithms tpo,grpo] [--flush-denormal on,off]
        [--near-target-scales 1,1e-9,1e-17,1e-30] [--threads 1] [--out results/bench/llm_step_profile.txt]

The demo's settings (conf/experiment/demo_llm.yaml: SmolLM2-135M in float32, graph colouring with 4 vertices,
2 prompts × K = 4 completions of ≤ 40 tokens, full fine-tuning, AdamW 1e-5), the trainer built by the harness itself
(harness.trainers.trl.build_trainer), under a run's process settings: torch's intra-op threads (``--threads``, a run's
``threads=1``), transparent huge pages and kept freed memory (harness.process), subnormal floats flushed to zero
(``flush_denormal=true``, a run's default on CPU) or kept (``off``). Every variant starts from the same model and
seed, so each algorithm's first rollout is the same; later ones are its own.

Per step, each phase's exclusive CPU seconds (this process, all threads) and wall seconds:
  generation       TRL's ``_generate``: chat template and tokenisation of the prompts, ``model.generate``, decoding
  scoring          the reward function (the task's scorer) on every completion
  no-grad logps    old and reference log-probs at generation (TRL computes them only for a reused batch or β > 0)
  rollout rest     the rest of TRL's ``_generate_and_score_completions`` (padding, advantages, gathers, metrics)
  loss forward     the model's forward on prompt + completion with gradients (once per update)
  loss             the algorithm's loss on the sequence log-probs (``GroupLossTrainer.group_loss``)
  backward         autograd through the loss and the model
  grad norm        the norm before clipping and the clip (``max_grad_norm``)
  optimizer        AdamW's step
  other            the rest of the step (Trainer's loop, callbacks, logging)
with the updates per step (``algorithm.epochs``, else the TRL trainer's 1), the forward's tokens (padded, and of them
real), and the step's metrics (reward, completion length, loss, gradient norm) to set beside the demo's own rows.
Then, on the first rollout batch: its backward with the gradient scaled down to a near-target TPO step's,
subnormals flushed and kept (``near_target_backward``), and the prefill of its prompts, each K times as generation
computes it and once (``prompt_prefill``).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from harness import process  # noqa: E402

process.tune_memory()  # as python -m harness does (harness.process)
from section4_cost import machine_header  # noqa: E402
from transformers import TrainerCallback  # noqa: E402

from harness.config import apply_process_settings, compose_config  # noqa: E402
from harness.trainers.trl import build_trainer  # noqa: E402

PHASES = ("generation", "scoring", "no-grad logps", "rollout rest", "loss forward", "loss", "backward", "grad norm",
          "optimizer", "other")


class PhaseClock:
    """Exclusive CPU and wall seconds per phase: a phase timed inside another (generation inside the rollout) is
    taken out of the outer one."""

    def __init__(self):
        self.cpu, self.wall = defaultdict(float), defaultdict(float)
        self._open: list[list] = []  # [phase, cpu at start, wall at start, children's cpu, children's wall]

    def start(self, phase: str) -> None:
        self._open.append([phase, time.process_time(), time.perf_counter(), 0.0, 0.0])

    def stop(self) -> None:
        phase, cpu0, wall0, child_cpu, child_wall = self._open.pop()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        self.cpu[phase] += cpu - child_cpu
        self.wall[phase] += wall - child_wall
        if self._open:
            self._open[-1][3] += cpu
            self._open[-1][4] += wall

    def timed(self, phase, function):
        """``function`` timed as ``phase`` (a name, or a callable of the call's arguments that returns one)."""

        def call(*args, **kwargs):
            self.start(phase(*args, **kwargs) if callable(phase) else phase)
            try:
                return function(*args, **kwargs)
            finally:
                self.stop()

        return call


class StepClock(TrainerCallback):
    """Closes one demo step (``epochs`` optimizer updates) at a time: its phases' seconds, its total, its counts."""

    def __init__(self, trainer, clock: PhaseClock, epochs: int):
        self.trainer, self.clock, self.epochs = trainer, clock, epochs
        self.steps: list[dict] = []
        self.counts: dict[str, float] = defaultdict(float)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step % self.epochs == 0:
            self.counts = defaultdict(float)
            self._start = (time.process_time(), time.perf_counter(), dict(self.clock.cpu), dict(self.clock.wall))

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.clock.start("optimizer")

    def on_optimizer_step(self, args, state, control, **kwargs):
        self.clock.stop()
        self.counts["updates"] += 1

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.epochs:
            return
        cpu0, wall0, cpu_before, wall_before = self._start
        cpu = {p: self.clock.cpu[p] - cpu_before.get(p, 0.0) for p in PHASES if p != "other"}
        wall = {p: self.clock.wall[p] - wall_before.get(p, 0.0) for p in PHASES if p != "other"}
        total_cpu, total_wall = time.process_time() - cpu0, time.perf_counter() - wall0
        cpu["other"], wall["other"] = total_cpu - sum(cpu.values()), total_wall - sum(wall.values())
        self.steps.append({"cpu": cpu, "wall": wall, "total_cpu": total_cpu, "total_wall": total_wall,
                           "counts": dict(self.counts), "metrics": self.trainer.step_metrics()})


def instrument(trainer, clock: PhaseClock, steps: StepClock) -> None:
    """Time the trainer's phases on this instance (its own calls go through the instance attributes)."""

    def logps_phase(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        if torch.is_grad_enabled():
            steps.counts["loss forwards"] += 1
            steps.counts["forward tokens"] += input_ids.numel()
            steps.counts["real tokens"] += attention_mask.sum().item()
            steps.counts["completion slots"] += attention_mask[:, -logits_to_keep:].numel()
            steps.counts["completion tokens"] += attention_mask[:, -logits_to_keep:].sum().item()
            return "loss forward"
        steps.counts["no-grad forwards"] += 1
        return "no-grad logps"

    trainer._generate_and_score_completions = clock.timed("rollout rest", trainer._generate_and_score_completions)
    trainer._generate = clock.timed("generation", trainer._generate)
    trainer._calculate_rewards = clock.timed("scoring", trainer._calculate_rewards)
    trainer._get_per_token_logps_and_entropies = clock.timed(logps_phase, trainer._get_per_token_logps_and_entropies)
    trainer.group_loss = clock.timed("loss", trainer.group_loss)
    trainer.accelerator.backward = clock.timed("backward", trainer.accelerator.backward)
    trainer._clip_grad_norm = clock.timed("grad norm", trainer._clip_grad_norm)
    trainer._get_grad_norm = clock.timed("grad norm", trainer._get_grad_norm)


def profile(algorithm: str, steps: int, flush: bool, threads: int) -> tuple[list[dict], int]:
    """(the timed steps, updates per step) of the demo's first ``steps`` steps with ``algorithm``."""
    cfg = compose_config(["experiment=demo_llm", f"algorithm={algorithm}", f"task.steps={steps}", "logger=none",
                          f"threads={threads}", f"flush_denormal={str(flush).lower()}"])
    apply_process_settings(cfg)
    torch.set_flush_denormal(flush)  # as a run sets it on CPU (flush_denormal)
    try:
        with tempfile.TemporaryDirectory() as run_dir:
            trainer, _, epochs = build_trainer(cfg, Path(run_dir))
            clock = PhaseClock()
            step_clock = StepClock(trainer, clock, epochs)
            instrument(trainer, clock, step_clock)
            trainer.add_callback(step_clock)
            trainer.train()
            timed = step_clock.steps
            del trainer
            gc.collect()
    finally:
        torch.set_flush_denormal(False)
    return timed, epochs


def report(algorithm: str, flush: bool, timed: list[dict], epochs: int) -> list[str]:
    """One block per variant: per step, total and phases (CPU s), counts and metrics; then the mean over steps."""
    lines = [f"{algorithm} flush_denormal={'on' if flush else 'off'}: {epochs} update(s) per step"]
    lines.append(f"  {'step':<6}{'CPU s':>8}{'wall s':>8}" + "".join(f"{p:>15}" for p in PHASES))
    for index, step in enumerate(timed):
        lines.append(f"  {index:<6}{step['total_cpu']:>8.2f}{step['total_wall']:>8.2f}"
                     + "".join(f"{step['cpu'][p]:>15.2f}" for p in PHASES))
    mean = {p: sum(s["cpu"][p] for s in timed) / len(timed) for p in PHASES}
    total = sum(s["total_cpu"] for s in timed) / len(timed)
    lines.append(f"  {'mean':<6}{total:>8.2f}{sum(s['total_wall'] for s in timed) / len(timed):>8.2f}"
                 + "".join(f"{mean[p]:>9.2f} {mean[p] / total:>4.0%}" for p in PHASES))
    for index, step in enumerate(timed):
        counts, metrics = step["counts"], step["metrics"]
        lines.append(
            f"  step {index}: {counts.get('updates', 0):.0f} update(s), {counts.get('loss forwards', 0):.0f} loss "
            f"forward(s), {counts.get('no-grad forwards', 0):.0f} no-grad forward(s); loss forward tokens "
            f"{counts.get('forward tokens', 0):.0f} ({counts.get('real tokens', 0):.0f} real), completion slots "
            f"{counts.get('completion slots', 0):.0f} ({counts.get('completion tokens', 0):.0f} real); "
            f"reward_mean={metrics['reward_mean']:.4g} completion_length={metrics['completion_length']:.4g} "
            f"loss={metrics['loss']:.4g} grad_norm={metrics['grad_norm']:.4g}")
    return lines


def first_batch_checks(scales: list[float], threads: int) -> list[str]:
    """The demo's first rollout batch (TPO) built by the trainer, then ``near_target_backward`` and
    ``prompt_prefill`` on it."""
    cfg = compose_config(["experiment=demo_llm", "algorithm=tpo", "task.steps=1", "logger=none",
                          f"threads={threads}"])
    apply_process_settings(cfg)
    with tempfile.TemporaryDirectory() as run_dir:
        trainer, _, _ = build_trainer(cfg, Path(run_dir))
        trainer.model.train()
        inputs = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        return near_target_backward(trainer, inputs, scales) + prompt_prefill(trainer, inputs)


def near_target_backward(trainer, inputs: dict, scales: list[float]) -> list[str]:
    """Backward CPU seconds of one batch under gradients scaled down to a near-target step's, subnormals flushed and
    kept. Near the target (p_θ ≈ q, TPO's gradient on ℓ is p_θ − q) autograd carries gradients as small as the
    demo's smallest TPO gradient norms (1e-9 to 1e-18), whose products with the softmax's tails over the vocabulary
    can fall below float32's smallest normal number, 1.2e-38."""
    lines = ["", "backward of the first rollout batch (tpo), loss = scale · Σ_k c_k ℓ_k with c = ±1/8 alternating "
             "(zero sum per group, like p_θ − q), one forward, the graph kept"]
    mask = inputs["completion_mask"]
    token_logp, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], mask], 1), mask.size(1))
    ell = (token_logp * mask).sum(-1)
    direction = torch.tensor([1.0, -1.0]).repeat(ell.numel() // 2) / ell.numel()
    tiny = torch.finfo(torch.float32).tiny
    for flush in (True, False):
        for scale in scales:
            trainer.model.zero_grad(set_to_none=True)
            torch.set_flush_denormal(flush)
            cpu = time.process_time()
            (scale * (direction * ell).sum()).backward(retain_graph=True)
            cpu = time.process_time() - cpu
            torch.set_flush_denormal(False)
            grads = [p.grad for p in trainer.model.parameters() if p.grad is not None]
            norm = torch.stack([grad.norm() for grad in grads]).norm()
            subnormal = sum(((grad != 0) & (grad.abs() < tiny)).sum().item() for grad in grads)
            lines.append(f"  flush_denormal={'on' if flush else 'off':<4} scale={scale:<8.0e} backward {cpu:6.2f} "
                         f"CPU s, gradient norm {norm.item():.3g}, subnormal gradient entries {subnormal} of "
                         f"{sum(grad.numel() for grad in grads)}")
    trainer.model.zero_grad(set_to_none=True)
    return lines


def prompt_prefill(trainer, inputs: dict) -> list[str]:
    """CPU seconds of a no-grad forward over the batch's prompt rows (generation's prefill: each prompt K times, as
    TRL's ``_generate_single_turn`` hands ``model.generate`` one row per completion) against its distinct prompts."""
    K = trainer.num_generations
    ids, mask = inputs["prompt_ids"], inputs["prompt_mask"]
    seconds = []
    with torch.no_grad():
        for rows in (slice(None), slice(None, None, K)):
            cpu = time.process_time()
            trainer.model(input_ids=ids[rows], attention_mask=mask[rows])
            seconds.append(time.process_time() - cpu)
    return ["", f"prompt prefill (no-grad forward of the prompts, {ids.size(1)} columns): every row, {ids.size(0)} "
            f"rows: {seconds[0]:.2f} CPU s; one row per prompt, {ids.size(0) // K} rows: {seconds[1]:.2f} CPU s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--algorithms", default="tpo,grpo", help="the step profiles' algorithms (empty: none)")
    parser.add_argument("--flush-denormal", default="on,off", help="on, off, or both: on,off")
    parser.add_argument("--near-target-scales", default="1,1e-9,1e-17,1e-30",
                        help="gradient scales of the near-target backward (empty: skip the first-batch checks)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(ROOT / "results" / "bench" / "llm_step_profile.txt"))
    args = parser.parse_args()
    flushes = []
    for value in args.flush_denormal.split(","):
        if value not in ("on", "off"):
            parser.error(f"--flush-denormal={value!r} is not valid; valid choices: on, off (comma-separated)")
        flushes.append(value == "on")
    lines = [machine_header(),
             f"# demo_llm (SmolLM2-135M float32, graph colouring, 2 prompts x K=4, <= 40 tokens, full fine-tuning), "
             f"first {args.steps} steps per variant, threads={args.threads}, pid {os.getpid()}; exclusive CPU seconds "
             f"per phase"]
    for line in lines:
        print(line, flush=True)
    for flush in flushes:
        for algorithm in filter(None, args.algorithms.split(",")):
            timed, epochs = profile(algorithm, args.steps, flush, args.threads)
            block = ["", *report(algorithm, flush, timed, epochs)]
            print("\n".join(block), flush=True)
            lines += block
    if args.near_target_scales:
        block = first_batch_checks([float(scale) for scale in args.near_target_scales.split(",")], args.threads)
        print("\n".join(block), flush=True)
        lines += block
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
