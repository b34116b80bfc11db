"""Which configuration keys make a run what it is, and which only how big it is or where it ran: the one list the
run files (``harness.rundir``: identity, resume), the campaign and the report read. No heavy imports: the campaign
reads it before anything loads PyTorch."""

from __future__ import annotations

from typing import Any

# How a run is computed or reported, not what it computes (threads and cpu_matmul move only float rounding, as a
# change of host does); artefact: how a preset is reported and queued (harness/artefacts.py), which a run drops.
NOT_IDENTITY = ("experiment_name", "artefact", "logger", "threads", "cpu_matmul", "memory_cap_gb", "trainer.progress",
                "trainer.resume", "trainer.overwrite", "task.checkpoint_every", "task.steps_to", "task.data_dir",
                "task.source", "trainer.solved_below", "trainer.relapse_above")
# Keys of a run's size, not of what it is: compared apart from its identity (seed ranges of a cell merge; a step
# budget is checked against the cell's). A resume must match them all.
BUDGET = ("seeds", "seed_offset", "task.steps")
# In a run's identity (a resume must match them) but moving only float rounding or where it ran: the report and the
# campaign compare results without them (flushing sets values below 1.2e-38 to zero, and runs recorded before the
# key existed did not flush; the token task's dedup trains each distinct answer once with its multiplicity; its
# seed_chunk computes the same seeds' gradients together or apart)
RESULT_NEUTRAL = ("device", "flush_denormal", "task.dedup", "task.seed_chunk")
# Keys that never distinguish results: those outside the identity, less the budget, and the result-neutral ones
IGNORED = (*(key for key in NOT_IDENTITY if key not in BUDGET), *RESULT_NEUTRAL)
# Keys added after runs were recorded, at the value that reproduces those runs: at that value a key is left out of
# the identity (and filled in for the report, harness/report/load.py), so older runs still resume, and their seed
# ranges merge with new ones; any other value is part of the identity. An algorithm's hyperparameters declared
# ``added_later`` are left out likewise at their default, its own (``algorithms.registry.neutral_hyperparameters``).
NEUTRAL_DEFAULTS: dict[str, Any] = {
    "optim.guard": "none", "optim.guard_tau": 0.0,
    "algorithm.std_floor": 0.0, "algorithm.std_shrinkage": 0.0, "algorithm.std_prior": 0.5,
    "algorithm.rank_scores": False,
    "task.reward_noise": 0.0, "task.partial_credit": 0.0, "task.logp_old": "exact",
}
# Keys removed from the configs after runs were recorded, at the value those runs hold: a recorded run with one at
# that value reads as without it (its identity, and its config for the report), so it still resumes and counts as
# done; at any other value it reads as RETIRED_INTO says. task.epochs: an LLM run's updates per batch are
# algorithm.epochs (null: the TRL trainer's 1), no second key.
RETIRED: dict[str, Any] = {"task.epochs": 1}
# A retired key at another value: the key that holds what it set now. The recorded value moves there where that key
# is null and is dropped where it is not, as the code of then read them (the TRL trainer's updates per batch were
# algorithm.epochs, else task.epochs): a recorded run reads as the current run that computes the same numbers.
RETIRED_INTO = {"task.epochs": "algorithm.epochs"}
# Keys renamed after runs were recorded: a recorded run's old key reads as the new one (its identity, its config for
# the report), its value replacing the new key's. The run's budget and checkpoint spacing were trainer.steps and
# trainer.checkpoint_every, set by default to the task's task.steps and task.checkpoint_every: one key each now.
RENAMED = {"trainer.steps": "task.steps", "trainer.checkpoint_every": "task.checkpoint_every"}
LEFT_OUT_AT_VALUE = {**NEUTRAL_DEFAULTS, **RETIRED}  # what a run's identity leaves out where it holds this value
