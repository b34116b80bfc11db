"""``TRLTrainer``: one RLVR run of an LLM task on TRL's GRPOTrainer (``harness/llm/trainer.py``), writing the files
every other run writes.

One step = one rollout batch (``task.batch_size`` prompts × ``task.K`` completions) and its ``epochs`` optimizer
updates (TRL's ``num_iterations``); ``metrics.csv`` has one row per step. Row s holds the step's rollout metrics
(the policy after s steps) and, every ``task.eval_every`` steps and at the last step, the greedy held-out score of
that same policy. LLM runs train one seed per run: sweep ``seed_offset`` for more (the report pools them).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from transformers import PrinterCallback, ProgressCallback, TrainerCallback
from transformers.trainer_utils import get_last_checkpoint

from algorithms import ALGORITHMS
from harness import process, rundir
from harness.config import RunSettings, run_settings
from harness.rundir import outputs
from harness.llm.models import load_policy, lora_config, model_dtype
from harness.llm.trainer import RLVRTrainer, make_reward_function
from harness.session import Session
from harness.trainers.base import Resume, Trainer, device_hardware
from harness.tracking import TRL_PREFIX, TRL_STEP
from tasks import get_task
from common.checks import (
    ConfigError, check_non_negative, check_number, check_positive_float)

log = logging.getLogger(__name__)
STATE_FILE = "tpo_bench_state.json"  # in each TRL checkpoint folder: metrics rows written, pending evaluation


def check_llm_config(cfg: DictConfig, algorithm, task, world_size: int) -> int:
    """Check what the task's settings (each checked alone by its declaration, ``tasks/llm/base.py``) and the rest of
    the run's config allow together; return the updates per rollout batch (epochs)."""
    if cfg.seeds != 1:
        raise ConfigError(f"seeds={cfg.seeds} is not valid for task={cfg.task.name}: an LLM run trains one seed; valid "
                          "choices: 1 (sweep seed_offset=0,1,2 for more seeds)")
    if task.loss_impl == "trl" and not algorithm.trl_loss:
        valid = ", ".join(name for name, cls in ALGORITHMS.items() if cls.trl_loss)
        raise ConfigError(f"task.loss_impl=trl runs TRL's own GRPO loss; valid algorithms with it: {valid} "
                          f"(got algorithm={algorithm.id})")
    if task.sequence_logprob == "mean" and (algorithm.token_level or algorithm.length_normalised):
        raise ConfigError(f"task.sequence_logprob=mean is not valid for algorithm={algorithm.id}, which "
                          f"{'reads per-token log-probs' if algorithm.token_level else 'divides by the length itself'}"
                          "; valid choices: sum")
    check_llm_optim(cfg.optim)
    epochs = get_task(str(cfg.task.name)).epochs_for(algorithm)  # the run's task: the report reads it so too
    if task.batch_size % (world_size * task.micro_batch_groups):
        raise ConfigError(f"task.batch_size={task.batch_size} is not valid: it must be a multiple of devices "
                          f"({world_size}) × task.micro_batch_groups ({task.micro_batch_groups}), so every "
                          "micro-batch holds whole prompt groups")
    if task.ref_kl and not task.lora_rank:
        raise ConfigError(f"task.ref_kl={task.ref_kl} needs a LoRA policy (the reference is the base model with the "
                          "adapter disabled); valid choices: task.lora_rank > 0, or task.ref_kl=0")
    if task.vllm and not str(cfg.device).startswith("cuda"):
        raise ConfigError("task.vllm=true needs device=cuda; valid choices here: task.vllm=false")
    return int(epochs)


def check_llm_optim(optim: DictConfig) -> None:
    """The AdamW settings an LLM run hands to TRL."""
    check_positive_float("optim.lr", optim.lr)
    betas = optim.betas
    if not OmegaConf.is_list(betas) or len(betas) != 2:
        raise ConfigError(f"optim.betas={betas!r} is not valid; expected two numbers in [0, 1)")
    for beta in betas:
        check_number("optim.betas", beta, low=0, high=1, high_open=True)
    check_positive_float("optim.eps", optim.eps)
    check_non_negative("optim.weight_decay", optim.weight_decay)
    check_non_negative("optim.max_grad_norm", optim.max_grad_norm)  # 0 = no clipping


def grpo_config(cfg: DictConfig, settings: RunSettings, run_dir: Path, epochs: int, world_size: int, algorithm,
                task):
    """TRL's GRPOConfig for this run (see docs/llm.md, "How TRL's GRPO defaults differ from the paper's", for every
    setting that differs from TRL's); TRL's clip ε is the algorithm's, where it has one."""
    from trl import GRPOConfig

    optim, model = cfg.optim, cfg.model
    cuda = settings.device.startswith("cuda")
    checkpoint_every = settings.checkpoint_every
    return GRPOConfig(
        output_dir=str(run_dir / "trl"), seed=settings.seed_offset, use_cpu=not cuda,
        bf16=model_dtype(model, str(cfg.device)) == torch.bfloat16,
        per_device_train_batch_size=task.micro_batch_groups * task.K,
        gradient_accumulation_steps=task.batch_size // (world_size * task.micro_batch_groups),
        num_generations=task.K, num_iterations=epochs, max_steps=settings.steps * epochs,
        max_completion_length=task.max_completion_length, temperature=float(task.temperature), top_p=1.0, top_k=0,
        learning_rate=float(optim.lr), adam_beta1=float(optim.betas[0]), adam_beta2=float(optim.betas[1]),
        adam_epsilon=float(optim.eps), weight_decay=float(optim.weight_decay),
        max_grad_norm=float(optim.max_grad_norm), lr_scheduler_type="constant", warmup_steps=0,
        beta=float(task.ref_kl), epsilon=float(getattr(algorithm.hp, "clip_eps", 0.2)),
        disable_dropout=True, gradient_checkpointing=bool(model.gradient_checkpointing),
        chat_template_kwargs=OmegaConf.to_container(model.chat_template_kwargs),
        use_vllm=bool(task.vllm), vllm_mode="colocate",
        logging_steps=1, report_to="none", disable_tqdm=True, dataloader_num_workers=0,
        save_strategy="steps" if checkpoint_every else "no", save_steps=max(1, checkpoint_every * epochs),
        save_total_limit=1, log_completions=False,
    )


class StepLogger(TrainerCallback):
    """Writes one metrics row per step (after its last update), forwards TRL's own metrics to the tracker, evaluates
    when due, saves its state with TRL's checkpoints, and stops training when a loss is not finite, or with a
    checkpoint of the step when ``harness.process.CHECKPOINT_SIGNAL`` asks (``stopped``; every process of a
    multi-GPU run must get the signal, as SLURM sends it to all of a job's)."""

    def __init__(self, trainer: RLVRTrainer, task, eval_rows: list[dict], epochs: int, steps: int, writer, tracker,
                 pending_test: float = math.nan, fingerprint: str = "", resumes: list[int] | None = None,
                 cpu_seconds=lambda: 0.0):
        self.trainer, self.task, self.eval_rows = trainer, task, eval_rows
        self.epochs, self.steps, self.writer, self.tracker = epochs, steps, writer, tracker
        self.fingerprint, self.resumes, self.cpu_seconds = fingerprint, resumes or [], cpu_seconds
        self.every = task.settings.eval_every
        self.pending_test = pending_test  # held-out score of the policy that generates the next step
        self.diverged_at: int | None = None
        self.stopped = False

    def _evaluate_if_due(self, step: int) -> None:
        if self.every and (step % self.every == 0 or step == self.steps - 1):
            batch_size = self.task.settings.eval_batch_size
            self.pending_test = self.trainer.held_out_score(self.task, self.eval_rows, batch_size)

    def on_train_begin(self, args, state, control, **kwargs):
        if state.global_step == 0:
            self._evaluate_if_due(0)

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step % self.epochs:
            return
        step = state.global_step // self.epochs - 1
        metrics = {**self.trainer.step_metrics(), "test_accuracy": self.pending_test}
        self.pending_test = math.nan
        if self.writer is not None:
            values = {name: np.asarray([metrics[name]], dtype=np.float64) for name in self.task.metric_names}
            self.writer.append(step, values)
            self.tracker.log(step, values)
        log.info("step %d/%d: %s", step + 1, self.steps,
                 " ".join(f"{k}={v:.4g}" for k, v in metrics.items() if not math.isnan(v)))
        if not math.isfinite(metrics["loss"]):
            self.diverged_at, control.should_training_stop = step, True
        elif step + 1 < self.steps:
            self._evaluate_if_due(step + 1)  # before a checkpoint asked for now: it saves the pending score
            if process.checkpoint_asked():
                self.stopped = control.should_save = control.should_training_stop = True

    def on_log(self, args, state, control, logs=None, **kwargs):
        """TRL's own metrics of each update (``Trainer.log``: loss, reward, KL, completion lengths, clip ratios ...)
        into this seed's W&B run as ``trl/<name>``, at the step whose rollout the update trains on, with the update's
        number (``trl/global_step``). Not TRL's W&B integration (``report_to="none"``): it would open a second run."""
        numbers = {f"{TRL_PREFIX}{name}": np.asarray([value], dtype=np.float64) for name, value in (logs or {}).items()
                   if isinstance(value, (int, float)) and not isinstance(value, bool)}
        if numbers:
            update = np.asarray([state.global_step], dtype=np.float64)
            self.tracker.log(max(state.global_step - 1, 0) // self.epochs, {**numbers, TRL_STEP: update})

    def on_save(self, args, state, control, **kwargs):
        if self.writer is None:
            return
        self.writer.flush()
        self.tracker.flush()
        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        outputs.write_json(folder / STATE_FILE, {
            "rows": self.writer.rows, "pending_test": _json_float(self.pending_test), "fingerprint": self.fingerprint,
            "step": state.global_step // self.epochs, "resumes": self.resumes, "cpu_seconds": self.cpu_seconds(),
            "sha256": _checksums(folder)})


def _checksums(folder: Path) -> dict[str, str]:
    """SHA-256 of every file TRL wrote into a checkpoint folder (model, optimizer, scheduler, RNG states)."""
    sums = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.name != STATE_FILE:
            digest = hashlib.sha256()
            with open(path, "rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            sums[str(path.relative_to(folder))] = digest.hexdigest()
    return sums


def _last_checkpoint(run_dir: Path) -> str | None:
    return get_last_checkpoint(str(run_dir / rundir.TRL_DIR)) if (run_dir / rundir.TRL_DIR).is_dir() else None


def _read_state(checkpoint: Path, fingerprint: str) -> dict[str, Any]:
    """This project's state in a TRL checkpoint folder, checked to belong to the run with ``fingerprint``."""
    path = checkpoint / STATE_FILE
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        raise outputs.CheckpointError(f"{path} is missing or unreadable; {outputs.CHECKPOINT_HELP}") from None
    if not isinstance(saved, dict) or saved.get("fingerprint") != fingerprint or "rows" not in saved:
        found = saved.get("fingerprint") if isinstance(saved, dict) else None
        raise outputs.CheckpointError(f"{path} belongs to another run (fingerprint {found}, this run's is "
                                      f"{fingerprint}); {outputs.CHECKPOINT_HELP}")
    recorded, found = saved.get("sha256"), _checksums(checkpoint)
    if not isinstance(recorded, dict) or recorded != found:
        damaged = sorted(name for name in set(recorded or {}) | set(found)
                         if (recorded or {}).get(name) != found.get(name))
        raise outputs.CheckpointError(f"{checkpoint} is damaged or incomplete (SHA-256 differs for "
                                      f"{', '.join(damaged[:3]) or STATE_FILE}); {outputs.CHECKPOINT_HELP}")
    return saved


def _json_float(value: float) -> float | None:
    return value if math.isfinite(value) else None


def validate_llm(cfg: DictConfig) -> tuple[Any, int, int]:
    """(task, epochs, world size) of a validated configuration; every ConfigError comes from here."""
    from accelerate import PartialState

    from harness.config import build_task

    task = build_task(cfg)
    world_size = PartialState().num_processes
    return task, check_llm_config(cfg, task.algorithm, task.settings, world_size), world_size


def build_trainer(cfg: DictConfig, run_dir: Path, validated: tuple[Any, int, int] | None = None
                  ) -> tuple[RLVRTrainer, Any, int]:
    """(trainer, task, epochs) for a configuration (``validated``: what validate_llm returned for it); every
    ConfigError comes before the model loads."""
    from datasets import Dataset

    task, epochs, world_size = validated or validate_llm(cfg)
    model, tokenizer = load_policy(cfg.model, str(cfg.device))
    settings = run_settings(cfg)
    rows = task.train_rows(settings.seed_offset, settings.steps * task.settings.batch_size)
    trainer = RLVRTrainer(
        model=model, reward_funcs=make_reward_function(task),
        args=grpo_config(cfg, settings, run_dir, epochs, world_size, task.algorithm, task.settings),
        train_dataset=Dataset.from_list(rows), processing_class=tokenizer, peft_config=lora_config(task.settings),
        algorithm=task.algorithm, task_settings=task.settings)
    trainer.remove_callback(PrinterCallback)  # StepLogger logs one line per step instead
    trainer.remove_callback(ProgressCallback)
    return trainer, task, epochs


class TRLTrainer(Trainer):
    """An LLM task's run: one seed, possibly over several processes (only the main one writes and locks)."""

    def __init__(self, cfg: DictConfig):
        from accelerate import PartialState

        super().__init__(cfg)
        self.validated = validate_llm(cfg)
        self.task = self.validated[0]
        self.seeds = list(self.settings.seed_ids)  # one: check_llm_config refuses more
        self.state = PartialState()
        self.is_main = self.state.is_main_process
        self.checkpoint: str | None = None
        self.saved: dict[str, Any] = {}
        self.trl_trainer: RLVRTrainer | None = None

    def lock(self, run_dir: Path):
        return rundir.locked(run_dir) if self.is_main else contextlib.nullcontext()

    def has_checkpoint(self, run_dir: Path) -> bool:
        return _last_checkpoint(run_dir) is not None

    def resume(self, run_dir: Path, fingerprint: str) -> Resume | None:
        self.checkpoint = _last_checkpoint(run_dir)
        if self.checkpoint is None:
            return None
        self.saved = _read_state(Path(self.checkpoint), fingerprint)
        return Resume(self.saved["step"], self.saved["rows"], [*self.saved.get("resumes", []), self.saved["step"]],
                      self.saved.get("cpu_seconds", 0.0))

    def prepare(self, run_dir: Path) -> None:
        """Load the model: its refusals (model path, dtype) come before the folder changes."""
        self.trl_trainer, _, self.epochs = build_trainer(self.cfg, run_dir, self.validated)
        self.device = self.trl_trainer.accelerator.device
        self.state.wait_for_everyone()  # every process has decided before the main one changes the directory

    def apply(self, plan: rundir.RunStart, run_dir: Path) -> None:
        if self.is_main:
            plan.apply(run_dir)
        self.state.wait_for_everyone()

    def fit(self, session: Session, start: Resume | None) -> None:
        task, trainer = self.task, self.trl_trainer
        eval_rows = task.eval_rows() if task.settings.eval_every else []
        pending = self.saved.get("pending_test")
        logger = StepLogger(trainer, task, eval_rows, self.epochs, self.settings.steps, session.writer,
                            session.tracker, math.nan if pending is None else pending,
                            fingerprint=session.fingerprint, resumes=session.resumes,
                            cpu_seconds=session.cpu_seconds)
        trainer.add_callback(logger)
        try:
            trainer.train(resume_from_checkpoint=self.checkpoint)
        finally:
            if logger.diverged_at is not None:
                self.diverged = {str(self.seeds[0]): logger.diverged_at}
        if logger.stopped:  # as the batched trainers' loop: the run ends "interrupted" at the checkpoint it saved
            raise KeyboardInterrupt(process.CHECKPOINT_SIGNAL.name)

    def resume_hint(self, run_dir: Path) -> str:
        return f"trainer.resume=true continues from the last TRL checkpoint in {run_dir}"

    def hardware(self) -> dict[str, Any]:
        accelerator = self.trl_trainer.accelerator
        return {**device_hardware(accelerator.device), "processes": accelerator.num_processes}
