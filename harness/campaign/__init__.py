"""``python -m harness.campaign [QUEUE] [--jobs N] [--dry-run] [--only P1,P2]``: run a queue of paper cells to the end.
``python -m harness.campaign [QUEUE] --launcher slurm [--partition P] [--max-jobs N]``: the same, as SLURM jobs.

A queue (``conf/campaign/<QUEUE>.yaml``, default ``paper``) lists cells in priority order: a preset, the points of its
sweep (``grid``, expanded into cells named by their values: ``queue.expand``; or one cell's overrides as written), how
many seeds, and the estimated CPU cost per seed-episode; ``cells: declared`` takes the entries the presets declare
for the queue (``artefact.campaign.<QUEUE>``, ``harness.artefacts``). Each cell's seeds are
split into runs of ``chunk`` seeds (``seed_offset`` ranges, merged by the report), run ``--jobs`` at a time as
``python -m harness experiment=<preset> <overrides> seeds=<n> seed_offset=<o> trainer.resume=auto`` in
``runs/campaign/<preset>/<cell>/seeds<a>-<b>/``, one core and one thread each. A finished run is copied to
``results/runs/<preset>/<cell>/seeds<a>-<b>/`` (summary.json, identity.json, config.yaml, gzipped metrics.csv: what
is committed) and the preset's report is regenerated into ``results/<preset>/``.

Everything is decided from files: the same command after an interruption (Ctrl-C, a kill, the end of a session)
exports runs that finished meanwhile, skips the exported ones, resumes the interrupted ones from their checkpoints
and starts the rest. ``--breadth`` runs each cell's first seed range before any cell's second (within a priority),
so a campaign stopped early compares all of a priority's methods on the same seeds. ``--hours H`` starts no run
after H hours; ``--finish-within H`` starts only runs expected to end within H hours (a session or a batch
allocation with a hard end, where a run cut off loses its work folder): each run's time is its cell's measured cost
plus a margin (``MARGIN``), for the episodes its checkpoint has left, and a run that does not fit is skipped for a
later one that does; with ``--dry-run`` it prints that plan. ``--stop-after H`` stops the runs after H hours and
starts no more (a hard end whose work folder stays: runs of any length progress, and resume). Ctrl-C, SIGTERM and
``--stop-after`` stop each run at a checkpoint it saves at the end of its step (``LocalLauncher.stop``; SLURM jobs go
on, below). Seeds already in
``results/runs/<preset>/<cell>/`` from earlier runs of the same configuration count as done, so a cell is extended,
not rerun. ``--dry-run`` prints the queue: what is done, what is left and its estimated CPU-hours.

On a SLURM cluster, ``--launcher slurm`` (from a login node; the work folder on a file system the nodes share) submits
each run as a SLURM job of the same command, through submitit (its log in ``<work>/.submitit/<job id>/``),
``--max-jobs`` (default 50) queued or running at once, on ``--partition`` (default: the cluster's); the runner exports
and reports the finished runs as a local one does. A cell may ask for ``cpus`` (default 1), ``mem_gb`` (4), ``time_min``
(default: its cost for the run's episodes × 2, ``TIME_MARGIN``, at least 10) and ``gpus`` (0, or 1: one GPU per job).
A job near its time limit, or preempted, is checkpointed and requeued under its job id (``CheckpointableCommand``:
SLURM's SIGUSR2 has the run save a checkpoint at its next step and stop), and resumes, at most ``MAX_REQUEUES``
times. A
*GPU cell* (``gpus: 1`` with the override ``device=cuda``, the two together) runs its seeds batched on the GPU,
``chunk`` seeds per job (a cell's own ``chunk`` overrides the queue's: all its seeds in one job), and gives its
projected ``gpu_hours`` (all seeds), its jobs' time limit; a local campaign leaves GPU cells to ``--launcher slurm``
unless this machine has a GPU. Each job is recorded in ``<work>/<preset>/<cell>/seeds<a>-<b>.slurm.json`` (job id,
submit time, command) as it is submitted. The jobs outlive the runner: Ctrl-C or SIGTERM stops the runner only, saying
so, and the same command re-attaches to each recorded job that squeue still lists with that command; a recorded job that
ended is judged by its run folder as a local run is (exported, else submitted again: it resumes from its checkpoint). A
run folder claimed by a live ``run.lock`` or by a recorded job squeue lists that is not re-attached is refused in one
line (``REFUSED``), never submitted to twice. ``--dry-run --launcher slurm`` prints each job's resources and whether it
is re-attached or to be submitted.

Nothing is trusted that was not checked. Every cell's overrides are composed before anything runs (a typo is
refused in one line naming the cell), and ``--only`` names must be priorities or ``<preset>/<cell>`` cells of the
queue (case-sensitive). A run
counts as done, is exported or is skipped only when its recorded configuration (``identity.json``, else the
``config.yaml`` of runs older than it, compared as ``harness.rundir`` fingerprints them) is the cell's as the queue
composes it now, and its step budget is the cell's: an exported run must match on everything but its seed range and
the keys the report ignores (``harness.identity.IGNORED``, such as ``flush_denormal``), and have a readable
summary and metrics; a run in the work folder must match exactly, seeds and steps included (its own launch would
refuse it otherwise). An exported run of fewer steps is not counted and its seeds run again (the report ignores it
beside full ones). Any other mismatch, in results/runs or in the work folder, is refused in one line naming the
differing keys, and nothing starts: ``--replace`` moves every such run aside, to
``<work>/.replaced/<time>/{results,work}/...`` (nothing is deleted), and runs the cells' seeds again. A damaged run
under results/runs (an unreadable summary.json, metrics file or record of its configuration) is skipped with a
one-line warning naming it. A cell with a value its run would refuse at its start (it composes, but its task or
algorithm rejects it: ``build_task`` on PyTorch's ``meta`` device says so) is refused in one line before anything
runs, by ``--dry-run`` too.

One campaign at a time per cell: a campaign holds ``.campaign-locks/<preset>/<cell>.lock`` (pid and host; a lock
whose process is gone is taken over) under ``--work`` and ``--results`` for every cell of the priorities it runs, and
a second campaign that wants one of them refuses in one line naming the cell (``--dry-run`` reads only and takes no
lock). Campaigns of other cells share the folders: other ``--only`` priorities, a queue of other cells, a scorecard.
Exports and reports are written one at a time (``.campaign-locks/results.lock`` under ``--results``; a campaign
waits for another's, saying so). At its start a campaign removes the export temporaries that campaigns cut short
left behind in its cells (``results/runs/<preset>/<cell>/seeds<a>-<b>[.<pid>-<id>][.old].tmp``). An export is
written to a folder of its own and renamed into place. A report that fails is named in one line (``REPORT FAILED``)
and the campaign exits non-zero at its end, as it does for a failed run; its folder is listed in
``<results>/.stale-reports.json`` and the next campaign regenerates it first.
"""

# The public API, from the modules that hold it. Each module has one job (its docstring says which) and imports
# the modules it needs, never this package; a name is looked up in the module whose code uses it, so a test
# that replaces one replaces it there (``monkeypatch.setattr(runner, "export", ...)``).
from harness.campaign.cells import (CELL_CACHE, CellCache, CellError, cell_identity, cell_refusal, node_refusal,
                                    preset_steps, source_fingerprint)
from harness.campaign.cli import MAX_HOURS, MAX_PARALLEL, campaign, main, share_gpu
from harness.campaign.exports import EXPORT_TMP, CellRuns, clean_exports, export, exported
from harness.campaign.jobs import FIXED, Job
from harness.campaign.launch import RUN_ENV, Ended, Launcher, run_environment
from harness.campaign.listing import plan_summary
from harness.campaign.local import LocalLauncher, pinned_load
from harness.campaign.locks import LOCKS, OLD_LOCK, campaign_lock, results_lock
from harness.campaign.planning import MARGIN, breadth_first, calibrate, fit_plan, plan, progress, seconds_needed
from harness.artefacts import QUEUES
from harness.campaign.queue import (CELL_KEYS, GPU_OVERRIDE, MEM_GB, check_cells, check_only, check_resources,
                                    expand, load_queue, queue_cells, selected)
from harness.campaign.records import (BUDGET, DONE, REPLACED, damaged_finish, damaged_record, differences, finished,
                                      recorded_identity, replace_stale, set_aside_damaged, work_mismatch)
from harness.campaign.reports import (SCORECARD_PRESETS, STALE_REPORTS, Reporter, note_stale_reports, report,
                                      retry_stale_reports)
from harness.campaign.runner import run
from harness.campaign.slurm import (MARK, MAX_JOBS, MAX_REQUEUES, SLURM_RECORD, SUBMITIT, TIME_MARGIN,
                                    CheckpointableCommand, Resources, SlurmError, SlurmLauncher, SlurmRun,
                                    sbatch_options, slurm_active_jobs, slurm_setup, submission_calls, time_limit)

__all__ = [
    "BUDGET", "CELL_CACHE", "CELL_KEYS", "DONE", "EXPORT_TMP", "FIXED", "GPU_OVERRIDE", "LOCKS", "MARGIN", "MARK",
    "MAX_HOURS", "MAX_JOBS", "MAX_PARALLEL", "MAX_REQUEUES", "MEM_GB", "OLD_LOCK", "QUEUES", "REPLACED", "RUN_ENV",
    "SCORECARD_PRESETS", "SLURM_RECORD", "STALE_REPORTS", "SUBMITIT", "TIME_MARGIN", "CellCache", "CellError",
    "CellRuns", "CheckpointableCommand", "Ended", "Job", "Launcher", "LocalLauncher", "Reporter", "Resources",
    "SlurmError", "SlurmLauncher", "SlurmRun", "breadth_first", "calibrate", "campaign", "campaign_lock",
    "cell_identity", "cell_refusal", "check_cells", "check_only", "check_resources", "clean_exports", "damaged_finish",
    "damaged_record", "differences", "expand", "export", "exported", "finished", "fit_plan", "load_queue", "main",
    "node_refusal", "note_stale_reports", "pinned_load", "plan", "plan_summary", "preset_steps", "progress",
    "queue_cells", "recorded_identity", "replace_stale", "report", "results_lock", "retry_stale_reports", "run",
    "run_environment", "sbatch_options", "seconds_needed", "selected", "set_aside_damaged", "share_gpu",
    "slurm_active_jobs", "slurm_setup", "source_fingerprint", "submission_calls", "time_limit", "work_mismatch"
]
