"""Live mirrors of the local run files: Weights & Biases (one W&B run per seed, or one per configuration above
``logger.seed_runs`` seeds) and TensorBoard event files.

Local files stay the source of truth; the mirror is for watching runs as they train and comparing them.

W&B (``WandbTracker``):

- group ``<experiment>/<task>/<algorithm>[/<key>=<value>,...]``: the identity keys the launch overrode
  (``wandb_group``), so each point of a sweep is a group of its own; job type the task; the resolved config as flat
  dotted keys (``task.H``, what W&B's filters take);
- layout: up to ``logger.seed_runs`` seeds (default 8), one run per seed, named ``<group>/seed<N>``, with ``seed`` in
  its config. Each run costs its own ``wandb.init``, config, summary and finish (0.1 s offline, more online), which
  at 100 seeds cost several times the run itself; so above it, one run for the configuration, named ``<group>``, with
  the seed ids as ``seed_ids`` in its config, the seeds a dimension of its keys: each row logs every metric's seed
  mean under the metric's own name (what a dashboard plots; over the seeds with a finite value) and each seed's value as
  ``<metric>/seed<N>``. A run keeps the layout of the launch that started it (its ``.hydra/config.yaml``), so a
  resume never splits its history between layouts; the report reads either layout into the same frames
  (harness/report/load.py);
- every row carries ``step`` (metrics.csv's), every metric's x-axis (``define_metric``); the LLM trainer also
  forwards TRL's own metrics, in rows of their own (``trl/<name>``, marked by ``trl/global_step``);
- rows reach W&B as they are produced, through a bounded queue to a background thread that also starts the runs
  (``wandb.init`` takes seconds): training never waits on W&B but at ``flush`` (each checkpoint) and ``finish``,
  which return once every row logged before them is in the runs. If W&B cannot keep up and the queue is full, a row
  is dropped rather than waited for (one warning; the count is the summary's ``dropped_rows``);
- a resumed run's W&B runs end up with every metrics.csv row exactly once: a killed launch's wandb service may not
  have written its last rows (its file lags the checkpoint by seconds), or may have written rows past the
  checkpoint. On resume each run is sent the kept rows W&B does not hold, and the resumed rows it already holds
  (a resume reproduces them exactly) are not sent again: what it holds is read from the earlier launches' offline
  files, online from the resumed run's summary (its last ``step``);
- the summary is summary.json's (``seed_summary``), with ``dropped_rows`` and ``metrics_rows`` (the rows per seed
  in metrics.csv: the report checks that the history holds each of them); a configuration's run holds each seed's
  values as ``<key>/seed<N>`` and their seed mean under the key itself (``configuration_summary``);
- the first failure, on any run (an ``init`` past ``logger.init_timeout``, an error, no progress for ``PATIENCE``
  seconds past it), is reported once and turns W&B off for every seed; training continues.

TensorBoard (``TensorBoardTracker``): event files under ``<run dir>/tensorboard/seed<N>/``, one TensorBoard run per
seed (its run selector picks seeds; one chart per metric overlays them), tags the metrics.csv columns, step
metrics.csv's; TRL's own metrics are W&B's only.
"""

from __future__ import annotations

import json
import logging
import math
import netrc
import os
import queue
import socket
import struct
import threading
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from harness import rundir, wandb_offline
from harness.identity import RENAMED

log = logging.getLogger(__name__)
STEP_METRIC = "step"  # metrics.csv's step column: in every row, every metric's x-axis
TRL_PREFIX = "trl/"  # TRL's own metrics (harness/trainers/trl.py), kept apart from the metrics.csv columns
TRL_STEP = f"{TRL_PREFIX}global_step"  # in every row forwarded from TRL, and only there: the report skips those
MAX_QUEUED_ROWS = 10_000  # rows waiting for W&B (a few KB each); beyond, rows are dropped, never waited for
PATIENCE = 30.0  # seconds past logger.init_timeout that flush/finish wait on a W&B that makes no progress
# seconds between writes of a run's .wandb file, what an offline run shows (wandb sync, wandb leet); wandb's 15
FILE_FLUSH_SECONDS = 2.0
GROUP_PATH = ("experiment", "task", "algorithm")  # choices the group's path already names
NOT_GROUP = ("seeds", "seed_offset")  # the seed ids name the runs, and one configuration's seed ranges merge
SEED_IDS = "seed_ids"  # a configuration's run: its seeds, in its config (``seeds`` is their count)
SEED_KEYS = ("status", "final/", "mean/")  # summary keys of one seed; the others are the run's
# a requirements.txt per run (a pip freeze) was half of each later run's cost, 0.16 → 0.09 s offline; the other
# options of bench/wandb_overhead.py saved 0.03 s or less each
WANDB_SETTINGS = {"x_save_requirements": False}
TENSORBOARD_DIR = rundir.TENSORBOARD_DIR


class NullTracker:
    def log(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        pass

    def flush(self) -> None:
        pass

    def finish(self, summary: dict[str, Any]) -> None:
        pass


def resolve_mode(mode: str) -> str:
    """``auto`` → online when an API key is configured (env or netrc), else offline."""
    if mode != "auto":
        return mode
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    try:
        hosts = netrc.netrc().hosts
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        hosts = {}
    return "online" if any("wandb" in host for host in hosts) else "offline"


MODES = ("auto", "online", "offline", "disabled")
LOGGERS = ("wandb", "tensorboard", "none")
DEFAULT_INIT_TIMEOUT = 10.0  # seconds; wandb's own default, 90 s, is how long an unreachable server stalls a run
DEFAULT_SEED_RUNS = 8  # up to this many seeds, a W&B run per seed; above, one for the configuration


def check_logger_config(logger_cfg) -> None:
    """Validate the ``logger`` node before any work (ConfigError naming the key and the valid values)."""
    from common.checks import check_choice, check_number

    if check_choice("logger.name", logger_cfg.name, LOGGERS) != "wandb":
        return
    check_choice("logger.mode", logger_cfg.mode, MODES)
    check_number("logger.init_timeout", logger_cfg.get("init_timeout", DEFAULT_INIT_TIMEOUT), low=0, low_open=True)
    check_number("logger.seed_runs", logger_cfg.get("seed_runs", DEFAULT_SEED_RUNS), low=0, integer=True)


def seed_runs(logger_cfg, run_dir: Path) -> float:
    """Up to how many seeds a W&B run each: ``logger.seed_runs`` of the launch that started the run in ``run_dir``
    (``.hydra/config.yaml``), which a resume keeps, so that a W&B run never changes layout midway; every seed when
    that launch mirrored to W&B before the key existed; this launch's when none did."""
    from omegaconf import OmegaConf

    try:
        started = OmegaConf.load(run_dir / rundir.HYDRA_DIR / "config.yaml").get("logger")
    except Exception:  # noqa: BLE001 - absent or unreadable: no run started there yet
        started = None
    if started is not None and started.get("name") == "wandb":
        return started.get("seed_runs", math.inf)
    return logger_cfg.get("seed_runs", DEFAULT_SEED_RUNS)


def overridden(cfg, overrides: list[str]) -> dict[str, Any]:
    """Dotted key → value of each of ``overrides`` that sets part of the run's identity (``rundir.identity``: what
    changes the numbers; not logging, threads, resume, nor a neutral default), as resolved; a config group's
    choice (``model=hf``) by its name. Not the choices the group's path names, nor the seeds (``NOT_GROUP``). A key
    since renamed (``RENAMED``: a resumed run's recorded overrides) keeps its recorded name, so its group stays."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    identity = rundir.flatten(rundir.identity(cfg))
    found = {}
    for override in OverridesParser.create().parse_overrides(overrides):
        key = override.key_or_group
        if override.is_delete() or key in GROUP_PATH or key in NOT_GROUP:
            continue
        if RENAMED.get(key, key) in identity:
            found[key] = identity[RENAMED.get(key, key)]
        elif any(name.startswith(f"{key}.") for name in identity):
            found[key] = override.value()
    return found


def _text(value: Any) -> str:
    """A value as a group shows it: numbers by value (``eta=1.0`` runs what ``eta=1`` runs), YAML's literals."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (list, tuple)):
        return f"[{','.join(map(_text, value))}]"
    return str(value)


def wandb_group(cfg, overrides: list[str] | None) -> str:
    """``<experiment>/<task>/<algorithm>``, then ``/<key>=<value>,...`` for the identity keys ``overrides`` set
    (``overridden``), sorted by key, each named by its last component (the full key where two share it):
    ``table3_terminal/token_reversal/tpo/H=7,match=prompts``. ``overrides``: the launch's, as Hydra recorded them
    (``rundir.recorded_overrides``); None (a run composed outside Hydra) gives the plain path."""
    path = f"{cfg.experiment_name}/{cfg.task.name}/{cfg.algorithm.name}"
    values = overridden(cfg, overrides or [])
    if not values:
        return path
    leaves = [key.rsplit(".", 1)[-1] for key in values]
    short = {key: leaf if leaves.count(leaf) == 1 else key for key, leaf in zip(values, leaves)}
    return f"{path}/{','.join(f'{short[key]}={_text(values[key])}' for key in sorted(values))}"


def seed_summary(summary: dict[str, Any], index: int, seed: int) -> dict[str, Any]:
    """The W&B summary of seed ``seed`` (``index`` in the run's seeds), read from summary.json's
    (``harness.rundir.summary.run_summary``): status, last step (the report checks the history against it), final value
    and mean over the run of each metric, steps-to of each threshold (the seed-mean curve's, as the paper reports
    it), CPU and wall seconds, hardware, commit and package version."""
    row = {"status": summary.get("seed_status", {}).get(str(seed), summary.get("status")),
           "last_step": summary.get("last_step"), "cpu_seconds": summary.get("cpu_seconds"),
           "wall_seconds": summary.get("wall_seconds"), "commit": summary.get("commit"),
           "version": summary.get("version")}
    for kind in ("final", "mean"):
        row.update({f"{kind}/{metric}": stats["per_seed"][index] for metric, stats in summary.get(kind, {}).items()})
    for metric, reached in summary.get("steps_to", {}).items():
        row.update({f"steps_to/{metric}<{threshold}": step for threshold, step in reached.items()})
    row.update({f"hardware/{key}": value for key, value in summary.get("hardware", {}).items()})
    return row


def configuration_summary(summary: dict[str, Any], seeds: list[int]) -> dict[str, Any]:
    """The W&B summary of one run for all of ``seeds``: the run's keys of ``seed_summary``, each seed's own
    (``SEED_KEYS``) as ``<key>/seed<N>``, and under the key itself the run's status and the seed mean of each final
    and run-mean value (summary.json's, over the finite ones)."""
    row = {key: value for key, value in seed_summary(summary, 0, seeds[0]).items() if not key.startswith(SEED_KEYS)}
    row["status"] = summary.get("status")
    for kind in ("final", "mean"):
        row.update({f"{kind}/{metric}": stats.get("mean") for metric, stats in summary.get(kind, {}).items()})
    for index, seed in enumerate(seeds):
        row.update({f"{key}/seed{seed}": value for key, value in seed_summary(summary, index, seed).items()
                    if key.startswith(SEED_KEYS)})
    return row


class WandbTracker:
    """Mirrors the rows of every seed to W&B, one run per seed up to ``seed_runs`` seeds, else one run for them all,
    live, from a background thread (module docstring).

    Each ``wandb.init`` waits at most ``init_timeout`` seconds (``logger.init_timeout``): without it an online run
    whose server cannot be reached waits 90 s inside wandb. The first failure, on any seed, disables W&B for every
    seed of the run (one warning, from the training thread; the runs already started are finished as failed), so a
    run never waits once per seed."""

    def __init__(self, *, project: str, entity: str | None, group: str, job_type: str, tags: list[str], mode: str,
                 config: dict[str, Any], run_dir: Path, seeds: list[int],
                 init_timeout: float = DEFAULT_INIT_TIMEOUT, run_uid: str = "", kept_rows: list[tuple] = (),
                 seed_runs: float = DEFAULT_SEED_RUNS):
        self.settings = dict(project=project, entity=entity, group=group, job_type=job_type, tags=tags,
                             mode=resolve_mode(mode))
        self.init_timeout = float(init_timeout)
        self.run_uid = run_uid  # new at every fresh start (identity.json): a replaced run never continues an old one
        self.config, self.run_dir, self.seeds = config, run_dir, seeds
        self.per_seed = len(seeds) <= seed_runs
        self.runs: list[Any] = []  # the worker's until it stops
        self.kept_rows = kept_rows  # a resumed run's metrics.csv rows before its checkpoint: (step, names, values)
        self._held: list[float] = []  # per run, the last metrics.csv step W&B held when this launch started it
        self._steps = {step for step, _, _ in kept_rows}  # the steps of the seed's metrics.csv rows
        self.dropped = 0
        self._rows: queue.Queue = queue.Queue(MAX_QUEUED_ROWS)  # (step, names, seeds × names values); None: stop
        self._queued = self._logged = 0
        self._changed = threading.Condition()  # the worker moved on: an init, a row, its end
        self._progress = time.monotonic()
        self._stopped = False
        self._error: BaseException | None = None  # the worker's, or a stall; reported once by ``_off``
        self._reported = False
        threading.Thread(target=self._work, name="wandb-mirror", daemon=True).start()

    def _off(self) -> bool:
        """Whether W&B is off; its first failure is reported here, in the training thread."""
        if self._error is not None and not self._reported:
            self._reported = True
            warnings.warn(f"W&B logging disabled after an error ({self._error!r}); training continues, local files "
                          "are complete.", stacklevel=3)
        return self._reported

    def _advance(self, rows: int = 0) -> None:
        with self._changed:
            self._logged += rows
            self._progress = time.monotonic()
            self._changed.notify_all()

    def _work(self) -> None:
        try:
            import wandb

            group = self.settings["group"]
            # (a configuration's run takes its first seed's id: the one a fresh start clears, ``rundir.housekeeping``)
            starts = ([(f"{group}/seed{seed}", seed, {**self.config, "seed": seed}) for seed in self.seeds]
                      if self.per_seed else [(group, self.seeds[0], {**self.config, SEED_IDS: list(self.seeds)})])
            for name, id_seed, config in starts:
                self.runs.append(wandb.init(
                    **self.settings, name=name, id=rundir.wandb_run_id(self.run_dir, self.run_uid, id_seed),
                    resume="allow", dir=str(self.run_dir), config=config, reinit="create_new",
                    settings=wandb.Settings(silent=True, init_timeout=self.init_timeout,
                                            x_transaction_log_flush_interval=FILE_FLUSH_SECONDS, **WANDB_SETTINGS)))
                self.runs[-1].define_metric(STEP_METRIC)
                self.runs[-1].define_metric("*", step_metric=STEP_METRIC)
                self._catch_up(len(self.runs) - 1)
                self._advance()
            log.info("W&B: %d %s runs in group %s (%s)", len(self.runs), self.settings["mode"],
                     self.settings["group"], "upload later with `wandb sync <run dir>/wandb/offline-run-*`"
                     if self.settings["mode"] == "offline" else self.settings["project"])
            while (item := self._rows.get()) is not None:
                for run, held, row in zip(self.runs, self._held, self._wandb_rows(*item)):
                    if item[0] > held:
                        run.log(row)
                self._advance(1)
        except BaseException as error:  # noqa: BLE001 - W&B must never stop training
            self._error = error
            for run in self.runs:  # close the runs started rather than leave them running
                try:
                    run.finish(exit_code=1)
                except Exception:  # noqa: BLE001
                    pass
        finally:
            self._stopped = True
            self._advance()

    def _catch_up(self, index: int) -> None:
        """Send run ``index`` the kept rows it does not hold, and note the last step it holds (module docstring)."""
        run = self.runs[index]
        held = -math.inf
        if self.kept_rows:
            this_launch = Path(run.dir).parent  # <run dir>/wandb/offline-run-<time>-<id>
            steps = [row[STEP_METRIC] for path in wandb_offline.run_files(self.run_dir, run.id)
                     if path.parent != this_launch
                     for row in wandb_offline.history(path) if STEP_METRIC in row and TRL_STEP not in row]
            online = run.summary.get(STEP_METRIC) if self.settings["mode"] == "online" else None
            held = max([*steps, *([online] if isinstance(online, (int, float)) else [])], default=-math.inf)
            for step, names, values in self.kept_rows:
                if step > held:
                    run.log(self._wandb_rows(step, names, values)[index])
        self._held.append(held)

    def _wandb_rows(self, step: int, names: tuple[str, ...], values: np.ndarray) -> list[dict[str, float]]:
        """The row of each W&B run for one logged row (``values``: seeds × names): a seed's own values, or the means
        over the seeds with a finite value (a diverged seed's are NaN; NaN when none is) and each seed's
        ``<name>/seed<N>`` (not TRL's update number, the same for every seed)."""
        if self.per_seed:
            return [{STEP_METRIC: step, **dict(zip(names, row))} for row in values.tolist()]
        row: dict[str, float] = {STEP_METRIC: step}
        for name, column in zip(names, values.T):
            finite = column[np.isfinite(column)]
            row[name] = float(finite.mean()) if finite.size else math.nan
            if name != TRL_STEP:
                row.update({f"{name}/seed{seed}": value for seed, value in zip(self.seeds, column.tolist())})
        return [row]

    def _wait(self, ready) -> None:
        """Wait until ``ready()``, the worker fails, or it makes no progress for ``init_timeout + PATIENCE`` s (then
        W&B is off: a wandb that stopped answering must not hold training)."""
        patience, since = self.init_timeout + PATIENCE, time.monotonic()
        with self._changed:
            while not ready() and self._error is None:
                if time.monotonic() - max(self._progress, since) > patience:
                    self._error = TimeoutError(f"W&B made no progress for {patience:.0f} s")
                    break
                self._changed.wait(timeout=1.0)

    def log(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        """Queue one row (``metrics``: name → one value per seed; copied, so the caller may reuse its arrays)."""
        if TRL_STEP not in metrics:
            self._steps.add(int(step))
        if self._off():
            return
        names = tuple(metrics)
        values = np.array([metrics[name] for name in names], dtype=np.float64).reshape(len(names), len(self.seeds)).T
        try:
            self._rows.put_nowait((int(step), names, values))
        except queue.Full:
            if not self.dropped:
                warnings.warn(f"W&B cannot keep up ({MAX_QUEUED_ROWS} rows waiting): rows are dropped from the W&B "
                              "runs, not waited for (their summary counts them); local files are complete.",
                              stacklevel=2)
            self.dropped += 1
            return
        self._queued += 1

    def flush(self) -> None:
        """Return once every row logged so far is in the W&B runs (at each checkpoint): handed to wandb's service,
        which writes it to the run's file (and server) within seconds, as ``run.log`` does."""
        if not self._off():
            queued = self._queued
            self._wait(lambda: self._logged >= queued)
            self._off()

    def finish(self, summary: dict[str, Any]) -> None:
        """Log what is queued, stop the worker, write each seed's summary and close its run."""
        self.flush()
        if self._reported:
            return
        self._rows.put_nowait(None)  # room for it: flush emptied the queue
        self._wait(lambda: self._stopped)
        if self._off():
            return
        try:
            rows = ([seed_summary(summary, index, seed) for index, seed in enumerate(self.seeds)] if self.per_seed
                    else [configuration_summary(summary, self.seeds)])
            for run, row in zip(self.runs, rows):
                run.summary.update({**row, "dropped_rows": self.dropped, "metrics_rows": len(self._steps)})
                run.finish()
        except Exception as error:  # noqa: BLE001
            self._error = error
            self._off()


class TensorBoardTracker:
    """Writes the metrics.csv rows of every seed to TensorBoard event files, ``<run dir>/tensorboard/seed<N>/``, in
    the training thread: per row and seed one event (tensorboardX's protobufs, TFRecord framing), buffered, written
    out every ``FILE_FLUSH_SECONDS`` and at each checkpoint. Not tensorboardX's ``SummaryWriter``: a thread per file
    and an fsync per flush cost 2.5 s where these writes cost 0.3 s, at 100 seeds × 150 rows.

    Each launch writes one new file per seed holding every row of the run: a resume writes the kept rows (metrics.csv's
    up to its checkpoint) first, then removes the earlier launches' files, so the folder holds each row exactly once
    whatever a kill cut short (rows past the last write). Each file begins with a purge from step 0 (what
    tensorboardX's ``purge_step`` writes), so a TensorBoard that read the earlier files while it ran drops them too.
    The first error turns TensorBoard off (one warning); training continues."""

    def __init__(self, run_dir: Path, seeds: list[int], kept_rows: list[tuple] = ()):
        from tensorboardX.proto.event_pb2 import Event, SessionLog
        from tensorboardX.proto.summary_pb2 import Summary
        from tensorboardX.record_writer import masked_crc32c

        self.Event, self.Summary, self.crc = Event, Summary, masked_crc32c
        folder = run_dir / TENSORBOARD_DIR
        earlier = list(folder.glob("seed*/events.out.tfevents.*"))
        # TensorBoard's file name, made unique: its time has seconds, which a quick resume would share
        name = f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{uuid.uuid4().hex[:8]}"
        self.files = []
        for seed in seeds:
            (folder / f"seed{seed}").mkdir(parents=True, exist_ok=True)
            self.files.append(open(folder / f"seed{seed}" / name, "wb"))
        start = [Event(wall_time=time.time(), file_version="brain.Event:2"),
                 Event(wall_time=time.time(), step=0, session_log=SessionLog(status=SessionLog.START))]
        for file in self.files:
            file.write(b"".join(self._record(event) for event in start))
        for step, names, values in kept_rows:
            self._write(step, names, values.tolist())
        self.flush()
        for path in earlier:
            path.unlink(missing_ok=True)

    def _record(self, event) -> bytes:
        """``event`` framed as a TFRecord: length, its masked CRC-32C, the event, its masked CRC-32C."""
        data = event.SerializeToString()
        header = struct.pack("<Q", len(data))
        return header + struct.pack("<I", self.crc(header)) + data + struct.pack("<I", self.crc(data))

    def _write(self, step: int, names: tuple[str, ...], values: list[list[float]]) -> None:
        """One row, ``values`` seeds × names: an event per seed holding every metric's value but NaN (a metric
        evaluated every few steps, a diverged seed's: TensorBoard would draw each as a marker, not a gap)."""
        Value, now = self.Summary.Value, time.time()
        for file, row in zip(self.files, values):
            file.write(self._record(self.Event(wall_time=now, step=step, summary=self.Summary(
                value=[Value(tag=name, simple_value=value) for name, value in zip(names, row) if value == value]))))

    def _off(self, error: Exception) -> None:
        warnings.warn(f"TensorBoard logging disabled after an error ({error!r}); training continues, local files "
                      "are complete.", stacklevel=3)
        for file in self.files:
            file.close()
        self.files = []

    def log(self, step: int, metrics: dict[str, np.ndarray]) -> None:
        """Write one row (``metrics``: name → one value per seed) into each seed's file; TRL's rows are W&B's."""
        if TRL_STEP in metrics or not self.files:
            return
        try:
            names = tuple(metrics)
            values = np.array([metrics[name] for name in names], dtype=np.float64).reshape(len(names), -1).T
            self._write(int(step), names, values.tolist())
            if time.monotonic() - self._flushed > FILE_FLUSH_SECONDS:
                self.flush()
        except Exception as error:  # noqa: BLE001 - TensorBoard must never stop training
            self._off(error)

    def flush(self) -> None:
        """Hand every row logged so far to the files (at each checkpoint; a kill then loses none of them)."""
        try:
            for file in self.files:
                file.flush()
        except Exception as error:  # noqa: BLE001
            self._off(error)
        self._flushed = time.monotonic()

    def finish(self, summary: dict[str, Any]) -> None:
        self.flush()
        for file in self.files:
            file.close()
        self.files = []


def make_tracker(cfg, run_dir: Path, seeds: list[int], resolved_config: dict[str, Any], run_uid: str = "",
                 kept_rows: list[tuple] = ()):
    """The run's tracker; ``kept_rows``: a resumed run's metrics.csv rows before its checkpoint
    (``MetricsWriter.kept_rows``), which the W&B runs may not all hold and TensorBoard's files rewrite."""
    logger_cfg = cfg.logger
    if logger_cfg.name == "none":
        return NullTracker()
    if logger_cfg.name == "tensorboard":
        try:
            return TensorBoardTracker(run_dir, seeds, kept_rows)
        except Exception as error:  # noqa: BLE001
            warnings.warn(f"TensorBoard unavailable ({error!r}); continuing with local files only.", stacklevel=2)
            return NullTracker()
    try:
        return WandbTracker(project=logger_cfg.project, entity=logger_cfg.entity,
                            group=wandb_group(cfg, rundir.recorded_overrides(run_dir)), job_type=cfg.task.name,
                            tags=[cfg.experiment_name, cfg.task.name, cfg.algorithm.name, *logger_cfg.tags],
                            mode=logger_cfg.mode, config=rundir.flatten(resolved_config), run_dir=run_dir,
                            seeds=seeds, init_timeout=logger_cfg.get("init_timeout", DEFAULT_INIT_TIMEOUT),
                            run_uid=run_uid, kept_rows=kept_rows, seed_runs=seed_runs(logger_cfg, run_dir))
    except Exception as error:  # noqa: BLE001
        warnings.warn(f"W&B unavailable ({error!r}); continuing with local files only.", stacklevel=2)
        return NullTracker()
