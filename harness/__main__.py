"""``python -m harness task=<task> algorithm=<algorithm> seeds=<n> task.steps=<n>`` (Hydra; ``-m`` sweeps).

Before Hydra composes or launches anything, ``check_launch`` reads the command line against conf/ and the composed
config: an unknown choice of a config group or an unknown key, a sweep without ``-m`` (a comma list, or a preset
that defines one) is refused in one ``Error:`` line, with the nearest valid name, and exit 2. ``--help`` is
conf/hydra/help/harness.yaml, its groups listed from conf/ (``config_groups_help``)."""

from __future__ import annotations

from harness import process

if __name__ == "__main__":  # Ctrl-C or a kill while the modules load (seconds): nothing is written yet
    process.exit_at_once_on_stop("Interrupted before the run started")  # ``launch`` installs a launch's handlers
    process.checkpoint_on_signal()  # a scheduler's time limit, however early: the run stops at its first step

process.tune_memory()  # before torch allocates anything

import gc  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import shlex  # noqa: E402
import sys  # noqa: E402
import textwrap  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig, OmegaConf  # noqa: E402

from harness import interrupts, rundir, sweep  # noqa: E402
from harness.rundir import outputs  # noqa: E402
from harness.config import CONFIG_DIR  # noqa: E402
from harness.report.load import finished_run_problem  # noqa: E402
from harness.run import train  # noqa: E402
from common.checks import ConfigError, did_you_mean  # noqa: E402

log = logging.getLogger("harness")
REFUSED = (ConfigError, outputs.CheckpointError)  # raised before any work: the run directory is left as it was


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Train one configuration (``run_job``); a sweep job in a worker process ends with its launcher."""
    with interrupts.worker_job():
        return run_job(cfg)


def run_job(cfg: DictConfig) -> float | None:
    """Train one configuration; return the final mean error (for Hydra sweepers that optimise it).

    A single run that fails exits non-zero (2 when refused before any work: a bad value, a run directory that holds
    another run, a damaged checkpoint). A launch that fails before it starts writing leaves an earlier run's folder
    as it was, and a single run's new folder not at all. A sweep job that fails is recorded, in its folder unless
    that holds an earlier run, and for the sweep's closing report; the sweep goes on."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    if multirun:  # a job that SLURM requeued (preempted, or at its time limit) continues its run
        sweep.continue_if_requeued(cfg)
    launch_log = None if multirun else LaunchLog(run_dir / f"{hydra_cfg.job.name}.log")
    had_results = rundir.has_results(run_dir)
    try:
        if not multirun:  # until here ``launch`` ends a stop at once; from here it is handled below
            interrupts.raise_on_stop()
        process.checkpoint_on_signal()  # a scheduler's time limit or preemption: checkpoint at the next step, stop
        summary = train(cfg, run_dir, finished_run_problem)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the run wrote its summary ("interrupted"); one line, no traceback
        _interrupted(hydra_cfg, run_dir, multirun, had_results, launch_log)
    except Exception as error:
        _failed(error, cfg, hydra_cfg, run_dir, multirun, had_results, launch_log)
        return None
    if multirun:
        sweep.record_job(hydra_cfg.job.num, run_dir, summary["status"], summary.get("error"))
    final = summary["final"].get("error", {}).get("mean")
    steps_to = ", ".join(f"{threshold}: {step if step is not None else 'never'}"
                         for threshold, step in (summary["steps_to"].get("error") or {}).items())
    log.info("%s/%s: %s, final error %s, first step below (seed mean) %s (%.1f s) → %s", cfg.task.name,
             cfg.algorithm.name, summary["status"], "–" if final is None else f"{final:.3g}", steps_to or "–",
             summary["wall_seconds"], run_dir)
    return final


def _interrupted(hydra_cfg, run_dir: Path, multirun: bool, had_results: bool, launch_log) -> None:
    """A stopped run or sweep job: one line saying how it continues, then exit 130."""
    if multirun:  # one line, and the sweep stops (exit 130 ends every launcher's sweep: basic, joblib)
        sys.stderr.flush()  # one write of the whole line: workers stopped together share the terminal
        line = f"Interrupted: sweep job {run_dir}; {_sweep_resume_hint(hydra_cfg)}\n"
        os.write(sys.stderr.fileno(), line.encode())  # (a pipe takes up to 4 KB in one write whole)
        process.exit_interrupted()  # (a worker whose launcher is gone ends here: ``interrupts.worker_job``)
    if rundir.started(run_dir):
        print(f"Interrupted: {run_dir} keeps its last checkpoint; trainer.resume=auto continues it (or starts it "
              "again if it has none)", file=sys.stderr)
    else:
        print("Interrupted before the run started", file=sys.stderr)
        if not had_results:  # as a refused launch: the folder it made goes
            _remove_launch_files(run_dir, launch_log, sweep.launch_folders("run"))
    process.exit_interrupted()


def _failed(error: Exception, cfg: DictConfig, hydra_cfg, run_dir: Path, multirun: bool, had_results: bool,
            launch_log) -> None:
    """A run that failed: recorded in its folder (or its new folder removed, an earlier run's left untouched); a
    refused single run exits 2 with one line, another failure of a single run is raised; a sweep job's is logged."""
    refused = isinstance(error, REFUSED)
    message = str(error) if refused else f"{type(error).__name__}: {error}"
    if multirun:
        sweep.record_job(hydra_cfg.job.num, run_dir, "failed", message)
    recorded = rundir.started(run_dir) or (multirun and not had_results)
    written = False
    if recorded:  # this launch's folder keeps why it failed
        written = outputs.record_failure(run_dir, {  # best effort: never raised over the run's own error
            "status": "failed", "experiment": cfg.experiment_name, "task": cfg.task.name,
            "algorithm": cfg.algorithm.name, "error": message},
            message + "\n" if refused else traceback.format_exc())
    elif not had_results and not multirun:  # a single run that failed before any work leaves no folder
        _remove_launch_files(run_dir, launch_log, sweep.launch_folders("run"))
    # else: an earlier run's folder, untouched by a launch that failed before writing into it
    if refused:
        if not multirun:
            print(f"Error: {message}", file=sys.stderr)
            sys.exit(2)
        log.error("refused: %s", message)
        return
    where = (f"; traceback in {run_dir / outputs.ERROR_FILE}" if written else
             f"; its failure could not be recorded in {run_dir} (the warning above says why)" if recorded else "")
    if not multirun:  # raised: Hydra prints its traceback once
        log.error("run failed%s", where)
        raise error
    log.exception("run failed%s", where)


def _sweep_resume_hint(hydra_cfg) -> str:
    """How to continue an interrupted sweep: the same command into the same sweep folder, with trainer.resume=auto
    (finished jobs are skipped, the interrupted one resumes from its last checkpoint, the others start)."""
    sweep_dir = Path(str(hydra_cfg.sweep.dir)).resolve()
    kept = [arg for arg in interrupts.launch_argv() if arg.split("=", 1)[0].lstrip("+~") not in ("hydra.sweep.dir",
                                                                                      "trainer.resume")]
    again = shlex.join(["python", "-m", "harness", *kept, f"hydra.sweep.dir={sweep_dir}", "trainer.resume=auto"])
    if "-m" not in kept and "--multirun" not in kept:
        again = again.replace("python -m harness", "python -m harness -m", 1)
    return f"it keeps its last checkpoint; re-run the sweep to continue it: {again}"


class LaunchLog:
    """Hydra's ``<job>.log`` of a single run's launch, and whether a launch refused before any work may remove it.

    Two launches into one new folder share that log (Hydra appends to it). Each launch holds a shared ``flock`` on
    it from the start of ``main``, and notes every line it writes there itself; a refused launch removes the log only
    when no other launch holds it and it holds nothing but this launch's own lines (an empty log too: there is
    nothing in it to lose). A launch whose log a racing launch removed (between Hydra opening it and ``main``
    locking it) reopens it at its path."""

    def __init__(self, path: Path, handlers: list[logging.FileHandler] | None = None):
        """``handlers``: those that write the log (default: the root logger's file handlers on ``path``)."""
        import fcntl
        import os

        self.path, self._lines, self._size, self._descriptor = path, [], 0, None
        self.handlers = handlers if handlers is not None else [
            handler for handler in logging.getLogger().handlers
            if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename) == path.resolve()]
        if not self.handlers:
            return  # Hydra writes no log here (another hydra/job_logging): nothing to remove
        for _ in range(5):  # lock the file that is at ``path`` now (a racing launch may remove it meanwhile)
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
                fcntl.flock(descriptor, fcntl.LOCK_SH)
            except OSError:
                return  # no lock (a file system without flock): the log is never removed
            try:
                same = os.fstat(descriptor).st_ino == os.stat(path).st_ino
            except OSError:
                same = False
            if same:
                self._descriptor = descriptor
                break
            os.close(descriptor)
        if self._descriptor is None:
            return
        inode = os.fstat(self._descriptor).st_ino
        for handler in self.handlers:
            handler.acquire()
            try:
                if handler.stream is not None and os.fstat(handler.stream.fileno()).st_ino != inode:
                    handler.stream.close()  # removed by a racing launch: write to the file at ``path``
                    handler.stream = handler._open()
            finally:
                handler.release()
            handler.addFilter(lambda record, handler=handler: self._note(handler, record))

    def _note(self, handler: logging.Handler, record: logging.LogRecord) -> bool:
        """A filter on the log's handler: passes every record and notes the text it writes (up to 64 kB; past
        that, only that there was more: the log is then kept)."""
        if self._size <= 65536:
            line = handler.format(record) + handler.terminator
            self._lines.append(line)
            self._size += len(line)
        return True

    def remove_if_own(self) -> bool:
        """Remove the log if only this launch wrote into it and no other launch holds it or wrote beside it;
        returns whether it did."""
        import fcntl
        import os

        if self._descriptor is None:
            return False
        for handler in self.handlers:
            handler.flush()
        try:
            fcntl.flock(self._descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while another launch holds it
        except OSError:
            return False
        try:
            if os.fstat(self._descriptor).st_ino != os.stat(self.path).st_ino or self._size > 65536:
                return False
            if self.path.read_text(errors="replace") != "".join(self._lines):
                return False
            for handler in self.handlers:  # detached too: a closed FileHandler reopens its file on the next record
                handler.close()
                logging.getLogger().removeHandler(handler)
            self.path.unlink()
            return True
        except OSError:
            return False
        finally:
            os.close(self._descriptor)
            self._descriptor = None


def _remove_unstarted_run() -> None:
    """A single run stopped before ``main`` handles stops: the folders Hydra made for it go, with a log in the run
    folder if it is empty and no other launch holds it (nothing of this launch is in it yet); nothing when none was
    made yet."""
    created = sweep.launch_folders("run")
    if created:  # the run folder first (harness.sweep.LaunchFolders)
        for path in created[0].glob("*.log"):
            _remove_empty_log(path)
        sweep.remove_new_folders(created)


def _remove_empty_log(path: Path) -> None:
    """Remove the log at ``path`` when it is empty and no other launch holds it (``LaunchLog``'s shared lock). This
    process's own locks on it are dropped first: ``main``'s LaunchLog may hold one by the time a stop comes, and a
    process about to end has nothing left to guard. (Logging creates the file before it attaches the handler, so
    which handlers write it says nothing here.)"""
    import fcntl

    target = os.path.realpath(path)
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == target:
                fcntl.flock(int(name), fcntl.LOCK_UN)
        except OSError:
            continue
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)  # fails while another launch holds it
        if os.fstat(descriptor).st_size == 0 and os.fstat(descriptor).st_ino == os.stat(path).st_ino:
            path.unlink()
    except OSError:
        pass
    finally:
        os.close(descriptor)


def _remove_launch_files(run_dir: Path, launch_log: LaunchLog | None, created: list[Path] | None) -> None:
    """Remove what Hydra made for a launch that did no work: its log, if this launch alone wrote it
    (``LaunchLog.remove_if_own``), and the folders the launch created (``created``, as harness.sweep.LaunchFolders
    noted them: the run folder and its new parents) that this leaves empty; with no such note, the run folder if it
    is left empty."""
    if launch_log is not None:
        launch_log.remove_if_own()
    if created is not None:
        sweep.remove_new_folders(created)
        return
    try:
        run_dir.rmdir()
    except OSError:
        pass


# another primary config, config dir or search path may hold other groups and presets: Hydra's own checks then;
# and no check where Hydra launches nothing (help, info, completion)
_OTHER_CONFIG_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun",
                       "--shell-completion", "-sc", "--version", "--help", "-h", "--hydra-help", "--info", "-i")

# the config groups picked on this command line (conf/ has more: campaign/ is for python -m harness.campaign,
# scorecard/ for python -m harness.scorecard, accelerate/ for `accelerate launch`, task/llm/ holds the LLM tasks'
# shared keys): what --help lists
GROUPS = {
    "algorithm": "the RL method",
    "task": "the problem it learns",
    "optim": "the optimiser (token_reversal and the LLM tasks)",
    "model": "the policy network (token_reversal and the LLM tasks)",
    "logger": "where metrics go besides the run folder",
    "experiment": "a preset: the paper's figures and tables, demos, follow-ups (a sweep: run it with -m)",
    "hydra/launcher": "where -m runs its jobs (joblib: in parallel on this machine; submitit_*: SLURM)",
}
_NOUNS = {"optim": "optimiser", "hydra/launcher": "launcher", "experiment": "experiment preset"}
_BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def config_groups_help(*, _root_: DictConfig | None = None) -> str:
    """The ``GROUPS`` with their choices, for conf/hydra/help/harness.yaml (``${harness_config_groups:}``)."""
    from hydra.core.global_hydra import GlobalHydra

    loader = GlobalHydra.instance().config_loader() if GlobalHydra.instance().is_initialized() else None
    choices = _root_.hydra.runtime.choices if _root_ is not None else {}
    lines = []
    for group, what in GROUPS.items():
        options = sorted(loader.get_group_options(group) if loader is not None else
                         (path.stem for path in (CONFIG_DIR / group).glob("*.yaml")))
        chosen = choices.get(group)
        lines.append(f"  {group:<16}{what}{f' (now: {chosen})' if chosen not in (None, 'None') else ''}")
        lines.append(textwrap.fill(", ".join(options), width=118, initial_indent=" " * 18,
                                   subsequent_indent=" " * 18, break_on_hyphens=False))
    return "\n".join(lines)


OmegaConf.register_new_resolver("harness_config_groups", config_groups_help, replace=True)


def check_launch(argv: list[str]) -> None:
    """Raise a one-line ConfigError, before Hydra composes or launches anything, for: an ``experiment=`` that names
    no preset (``check_experiment_overrides``), a choice of a config group that names no option (every value of a
    sweep, a preset's sweep too), a key that the composed config lacks (``key=value`` and ``~key``; every job of a
    sweep), a sweep without ``-m``, and, without ``-m``, a preset that defines a sweep whose keys are not all set on
    the command line (it would run one of its jobs silently). What this leaves out Hydra reports itself."""
    from hydra._internal.utils import get_args_parser

    from harness.config import check_experiment_overrides

    if any(arg.split("=", 1)[0] in _OTHER_CONFIG_FLAGS or arg.startswith("hydra.searchpath") for arg in argv):
        return
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        args = parser.parse_known_args(argv)[0]
    except Exception:  # noqa: BLE001 - Hydra reports bad arguments itself
        return
    check_experiment_overrides(list(args.overrides))
    from hydra import initialize_config_dir

    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIG_DIR)):
        _LaunchCheck(args, argv).check()


class _LaunchCheck:
    """``check_launch``'s checks of one command line, inside an initialised Hydra: its overrides parsed, the jobs
    of its sweep expanded, and the config of each job's group choices composed once."""

    def __init__(self, args, argv: list[str]):
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.override_parser.overrides_parser import OverridesParser

        self.args, self.again = args, f"python -m harness -m {shlex.join(argv)}"
        self.loader = GlobalHydra.instance().config_loader()
        self.overrides_parser = OverridesParser.create(config_loader=self.loader)
        self.composed: dict[tuple[str, ...], DictConfig] = {}
        self.params: list = []  # a multirun's sweeper parameters, parsed

    def check(self) -> None:
        try:
            parsed = self.overrides_parser.parse_overrides(list(self.args.overrides))
        except Exception:  # noqa: BLE001 - a syntax error: Hydra reports it with its own message
            return
        multirun = self.args.multirun or any(o.key_or_group == "hydra.mode" and str(o.value()).upper() == "MULTIRUN"
                                             for o in parsed)
        if not multirun:
            self.refuse_sweep_overrides(parsed)
        _check_choices(parsed, self.loader)
        jobs = self.sweep_jobs(parsed) if multirun else [parsed]
        if jobs is None:
            return
        for job in jobs:
            self.check_job(job, len(jobs), parsed)
        if not (multirun or self.args.cfg):
            self.refuse_unswept_preset(parsed)

    def compose_groups(self, job: list) -> DictConfig:
        """The config of a job's group choices (the keys do not depend on the values set)."""
        from hydra import compose
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        lines = tuple(o.input_line for o in job if _is_group(o, self.loader))
        if lines not in self.composed:
            try:
                self.composed[lines] = compose("config", overrides=list(lines), return_hydra_config=True)
            except (HydraException, OmegaConfBaseException, ValueError) as error:
                raise ConfigError(_one_line(error, lines)) from None
        return self.composed[lines]

    def refuse_sweep_overrides(self, parsed: list) -> None:
        for override in parsed:
            if override.is_sweep_override():
                raise ConfigError(f"{override.input_line} is a sweep (one job per value); run it with -m: "
                                  f"{self.again}")

    def sweep_jobs(self, parsed: list) -> list | None:
        """The jobs of a multirun as the basic sweeper expands them (its preset's sweep parameters first); None
        when another sweeper, or an expansion the basic sweeper refuses, leaves the checks to Hydra."""
        _check_preset_sweeps(parsed, self.compose_groups)
        base = self.compose_groups([o for o in parsed if not o.is_sweep_override()])
        if OmegaConf.select(base, "hydra.sweeper._target_") != _BASIC_SWEEPER:
            return None  # another sweeper expands its own parameters
        self.params = self.overrides_parser.parse_overrides([f"{key}={value}" for key, value in
                                                             (base.hydra.sweeper.params or {}).items()])
        _check_choices(self.params, self.loader)
        from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

        try:
            return [self.overrides_parser.parse_overrides(job)
                    for job in BasicSweeper.split_arguments([*self.params, *parsed], None)[0]]
        except Exception:  # noqa: BLE001 - a sweep the basic sweeper cannot expand: Hydra says so
            return None

    def check_job(self, job: list, jobs: int, parsed: list) -> None:
        """A job's keys and values; in a sweep of several jobs, the error names the job by its swept choices."""
        values = [o for o in job if not _is_group(o, self.loader)]
        try:
            _check_keys(values, self.compose_groups(job))
            _check_values(values, self.compose_groups(job))
        except ConfigError as error:
            if jobs == 1:
                raise
            swept = {o.key_or_group for o in [*self.params, *parsed] if o.is_sweep_override()}
            choices = " ".join(o.input_line for o in job if _is_group(o, self.loader) and o.key_or_group in swept)
            raise ConfigError(f"{error} (in the sweep's job {choices})" if choices else str(error)) from None

    def refuse_unswept_preset(self, parsed: list) -> None:
        """Without -m, a preset whose sweep keys are not all set would silently run one of its jobs."""
        params = self.compose_groups(parsed).hydra.sweeper.params or {}
        given = {override.key_or_group for override in parsed}
        unset = {key: value for key, value in params.items() if key not in given}
        if unset:
            preset = next((f"experiment={o.value()}" for o in parsed if o.key_or_group == "experiment"),
                          "this configuration")
            swept = "; ".join(f"{key}: {value}" for key, value in unset.items())
            one = " ".join(f"{key}={str(value).split(',')[0]}" for key, value in unset.items())
            raise ConfigError(f"{preset} defines a sweep ({swept}); run it with -m: {self.again} (or pick one of its "
                              f"runs: {one})")


def _check_values(job: list, cfg: DictConfig) -> None:
    """The values of a job (its ``key=value`` overrides set on ``cfg``, its config of group choices) that would fail
    only once the run allocates: seed ids beyond int64 (``check_seed_ids``), a run whose memory estimate exceeds
    ``memory_cap_gb`` (tasks/memory.py ``check_memory``). Other values are checked where they are read."""
    import copy

    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    from common.checks import check_seed_ids
    from tasks.memory import check_memory

    cfg = copy.deepcopy(cfg)
    try:
        with open_dict(cfg):
            for override in job:
                key = override.key_or_group
                if override.is_delete() or override.package is not None or key.startswith("hydra."):
                    continue
                OmegaConf.update(cfg, key, override.value(), merge=True, force_add=True)
        llm = OmegaConf.select(cfg, "task.kind", default=None) == "llm"
        check_seed_ids(cfg.get("seeds"), cfg.get("seed_offset"), llm=llm)
        check_memory(cfg)
    except (OmegaConfBaseException, ValueError) as error:  # a value OmegaConf cannot set or resolve: Hydra says so
        if isinstance(error, ConfigError):
            raise
        return


def _check_preset_sweeps(parsed: list, compose_groups) -> None:
    """Refuse ``-m experiment=a,b`` when a swept preset defines a sweep of its own whose keys the command does not set:
    Hydra would run one job per preset and drop the presets' own sweeps, silently."""
    given = {o.key_or_group for o in parsed}
    for override in parsed:
        if override.key_or_group != "experiment" or not override.is_sweep_override():
            continue
        for name in override.sweep_string_iterator():
            params = compose_groups([*(o for o in parsed if o is not override), _experiment(name)]).hydra.sweeper.params
            own = {key: value for key, value in (params or {}).items() if key not in given}
            if own:
                swept = "; ".join(f"{key}: {value}" for key, value in own.items())
                raise ConfigError(f"{override.input_line} sweeps presets, and experiment={name} defines a sweep of "
                                  f"its own ({swept}) that Hydra would drop; run each preset with its own command: "
                                  f"python -m harness -m experiment={name}")


def _experiment(name: str):
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create().parse_overrides([f"experiment={name}"])[0]


def _one_line(error: Exception, lines: tuple[str, ...]) -> str:
    """Hydra's composition error in one line; a group choice that no defaults list has (model=hf where the task
    picks no model) in ours."""
    message = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    if "No match in the defaults list" in message:
        group = message.split("'")[1]
        line = next((line for line in lines if line.split("=", 1)[0] == group), group)
        context = ", ".join(line for line in lines if line.split("=", 1)[0] in ("task", "experiment"))
        return (f"{line} does not apply here: the config{f' ({context})' if context else ''} picks no {group}; "
                f"to add one anyway write +{line}")
    return message


def _is_group(override, loader) -> bool:
    return override.package is not None or loader.repository.group_exists(override.key_or_group)


def _check_choices(overrides: list, loader) -> None:
    """Every value of a config group's override (each of a sweep's, a list's) names one of the group's options."""
    from hydra.core.override_parser.types import ValueType

    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or group == "experiment" or not _is_group(override, loader):
            continue  # experiment: check_experiment_overrides
        if override.package is not None and not loader.repository.group_exists(group):
            continue  # Hydra: "looks like a config group override, but config group ... does not exist"
        options = sorted(loader.get_group_options(group))
        noun = _NOUNS.get(group, group.split("/")[-1])
        valid = f"valid choices: {', '.join(options)}"
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            if not override.value().filter(options):
                raise ConfigError(f"{override.input_line} matches no {noun}; {valid}")
            continue
        try:
            value = override.value()
            names = list(override.sweep_string_iterator()) if override.is_sweep_override() else (
                value if isinstance(value, list) else [value])
        except Exception:  # noqa: BLE001 - a range or interval: Hydra refuses it for a group itself
            continue
        for name in names:
            if name is None or name == "null" or str(name) in options:
                continue
            near = did_you_mean(name, options)
            hint = f"did you mean {near}? " if near else ""
            raise ConfigError(f"{group}={name} is not a known {noun} (no {group}/{name}.yaml); {hint}{valid}")


def _check_keys(job: list, cfg: DictConfig) -> None:
    """Each ``key=value`` and ``~key`` of a job (its overrides but the group choices) names a key of ``cfg`` (its
    config before values are set); a key added by an earlier ``+key=`` / ``++key=`` of the job counts. A ``+key=`` /
    ``++key=`` of a key that ``cfg`` lacks adds only a key that something reads (``_check_added``)."""
    added: list[str] = []
    for override in job:
        key = override.key_or_group
        if override.package is not None or "/" in key or "[" in key:
            continue
        if override.is_add() or override.is_force_add():
            if override.is_add() and not isinstance(override.value(), (dict, list)) and _exists(cfg, key):
                raise ConfigError(f"{key} is already a config key; set it with {override.input_line[1:]} (+ adds a "
                                  "new key)")
            if not any(key == new or key.startswith(new + ".") for new in added) and not _has_key(cfg, key):
                _check_added(cfg, key)
            added.append(key)
            continue
        if any(key == new or key.startswith(new + ".") for new in added):
            continue
        _check_key(cfg, key, override.input_line)


# Keys that a composed config may lack and the code reads all the same (``.get(key, default)``): ``+key=value`` adds
# one of these. Any other key that no config has is refused, ``+`` or not: nothing would read it.
PASS_THROUGH = ("task.generator", "model.chat_template_kwargs")  # handed on as they are: reasoning-gym's dataset
# config (the task refuses a field it lacks), the chat template's keyword arguments


def optional_keys(cfg: DictConfig) -> dict[str, tuple[str, ...]]:
    """Config node ("" for the top level) → the optional keys read there, for the task that ``cfg`` composes."""
    keys = {"": ("memory_cap_gb",),  # tasks/memory.py check_memory (auto)
            "trainer": ("overwrite",),  # harness.rundir
            "logger": ("init_timeout",)}  # harness/tracking.py
    task = OmegaConf.select(cfg, "task.name", default=None)
    if task == "token_reversal":  # tasks/token_reversal.py (a task's own keys are all in its YAML: Task.Settings)
        keys["optim"] = ("guard", "guard_tau", "muon_split")
    if OmegaConf.select(cfg, "task.kind", default=None) == "llm":  # harness/llm/models.py
        keys["model"] = ("path", "package", "gguf_file")
    return keys


def _node(cfg: DictConfig, path: str):
    from omegaconf import DictConfig as Dict

    node = cfg
    for part in path.split(".") if path else ():
        if not isinstance(node, Dict) or part not in node.keys():
            return None
        node = node._get_node(part)
    return node


def _has_key(cfg: DictConfig, key: str) -> bool:
    """Whether the composed config has ``key`` (a null or missing value counts)."""
    parent, _, last = key.rpartition(".")
    node = _node(cfg, parent)
    return isinstance(node, DictConfig) and last in node.keys()


def _check_added(cfg: DictConfig, key: str) -> None:
    """``+key=`` / ``++key=`` of a key the config lacks: refused unless something reads it (``optional_keys``,
    ``PASS_THROUGH``, Hydra's own ``hydra.*``), in one line with the node's keys and the nearest one."""
    if key.startswith("hydra.") or any(key.startswith(node + ".") and isinstance(_node(cfg, node), DictConfig)
                                       for node in PASS_THROUGH):
        return
    parts, optional = key.split("."), optional_keys(cfg)
    parent = ".".join(parts[:-1])
    if parts[-1] in optional.get(parent, ()) and isinstance(_node(cfg, parent), DictConfig):
        return
    index = 0
    while index < len(parts) - 1 and isinstance(_node(cfg, ".".join(parts[:index + 1])), DictConfig):
        index += 1  # parts[index] is the first part the config lacks
    where = ".".join(parts[:index])
    node = _node(cfg, where)
    keys = [str(name) for name in node.keys() if where or name != "hydra"]
    if parts[index] in keys:
        return  # a key under a list or a value (task.steps_to.x): OmegaConf's own error
    extra = [name for name in optional.get(where, ()) if name not in keys]
    near = did_you_mean(parts[index], [*keys, *extra])
    hint = f"; did you mean {'.'.join([*parts[:index], near, *parts[index + 1:]])}?" if near else ""
    what = f"{where} has" if where else "top-level keys are"
    also = f"; optional: {', '.join(extra)}" if extra else ""
    raise ConfigError(f"{key} is not a config key and nothing reads it ({what}: {', '.join(keys)}{also}){hint}")


def _exists(cfg: DictConfig, key: str) -> bool:
    try:
        return OmegaConf.select(cfg, key, throw_on_missing=False) is not None
    except Exception:  # noqa: BLE001 - an interpolation that does not resolve yet: Hydra decides
        return False


def _check_key(cfg: DictConfig, key: str, line: str) -> None:
    from omegaconf import DictConfig as Dict

    parts = key.split(".")
    node = cfg
    for index, part in enumerate(parts):
        if not isinstance(node, Dict):
            return  # a list or a value: OmegaConf's own check
        keys = [str(name) for name in node.keys() if index or name != "hydra" or key.startswith("hydra.")]
        if part in keys:
            node = node._get_node(part)
            continue
        if not node._get_flag("struct"):
            return  # an open node takes new keys
        raise _unknown_key(cfg, key, line, index, keys)


def _unknown_key(cfg: DictConfig, key: str, line: str, index: int, keys: list[str]) -> ConfigError:
    """The refusal of ``key``, whose part ``index`` is not among its node's ``keys``: the nearest key, else the
    node's keys (and how to add an optional one)."""
    parts = key.split(".")
    parent = ".".join(parts[:index])
    near = did_you_mean(parts[index], keys)
    if near is not None:
        near = ".".join([*parts[:index], near, *parts[index + 1:]])
        if _has_key(cfg, near):  # not when the rest is no key there either (trainr.steps: no trainer.steps)
            return ConfigError(f"{key} is not a config key; did you mean {near}?")
    last = parts[-1]  # a misspelt parent (trainr.steps): the keys that end as this one does
    near = did_you_mean(key, [name for name in _dotted_keys(cfg, with_hydra=key.startswith("hydra."))
                              if name.split(".")[-1] == last and name.count(".") == key.count(".")])
    if near is not None:
        return ConfigError(f"{key} is not a config key; did you mean {near}?")
    where = f"{parent} has" if parent else "top-level keys are"
    readable = index == len(parts) - 1 and parts[index] in optional_keys(cfg).get(parent, ()) or any(
        parent == node or parent.startswith(node + ".") for node in PASS_THROUGH)
    add = f"; it is optional: add it with +{line}" if readable and not line.startswith("~") else ""
    return ConfigError(f"{key} is not a config key ({where}: {', '.join(keys)}){add}")


def _dotted_keys(node: DictConfig, prefix: str = "", with_hydra: bool = False) -> list[str]:
    from omegaconf import DictConfig as Dict

    found = []
    for name in node.keys():
        if not prefix and name == "hydra" and not with_hydra:
            continue
        full = f"{prefix}{name}"
        found.append(full)
        child = node._get_node(name)
        if isinstance(child, Dict):
            found.extend(_dotted_keys(child, full + "."))
    return found


def refuse_bad_launch(argv: list[str]) -> None:
    """``check_launch``: a refusal prints its one ``Error:`` line and exits 2."""
    try:
        check_launch(argv)
    except ConfigError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(2)


def launch(argv: list[str]) -> None:
    """Check, then run; a sweep whose jobs run in worker processes stops them at their checkpoints on Ctrl-C or
    SIGTERM (``harness.interrupts``) and ends in one line per stopped job (theirs), or one of its own."""
    gc.freeze()  # the modules' objects (torch's) live to the end: no full collection, nor the exit (1 s), walks them
    refuse_bad_launch(argv)
    interrupts.record_launch_argv(argv)
    interrupts.quiet_pool_teardown()
    stop = interrupts.StopJobs()
    if "-m" in argv or "--multirun" in argv:
        stop.install()
    else:  # a single run: until ``main`` starts, a stop ends the process at once and what Hydra made for it goes
        process.exit_at_once_on_stop("Interrupted before the run started", cleanup=_remove_unstarted_run)
    try:
        main()
    except KeyboardInterrupt:  # only a sweep's launching process gets here: a job's own interrupt ends in main()
        if not stop.stopped:
            print("Interrupted while no run of this process or its workers was training (jobs on a cluster go on); "
                  f"to continue, re-run: {shlex.join(['python', '-m', 'harness', *argv])}", file=sys.stderr)
        process.exit_interrupted()


if __name__ == "__main__":
    launch(sys.argv[1:])
