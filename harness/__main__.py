"""``python -m harness task=<task> algorithm=<algorithm> seeds=<n> trainer.steps=<n>`` (Hydra; ``-m`` sweeps)."""

from __future__ import annotations

from harness import process

process.tune_memory()  # before torch allocates anything

import logging  # noqa: E402
import sys  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import hydra  # noqa: E402
from hydra.core.hydra_config import HydraConfig  # noqa: E402
from hydra.types import RunMode  # noqa: E402
from omegaconf import DictConfig  # noqa: E402

from harness import outputs, rundir, sweep  # noqa: E402
from harness.run import CONFIG_DIR, train  # noqa: E402
from algorithms.checks import ConfigError  # noqa: E402

log = logging.getLogger("harness")
REFUSED = (ConfigError, outputs.CheckpointError)  # raised before any work: the run directory is left as it was


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Train one configuration; return the final mean error (for Hydra sweepers that optimise it).

    A single run that fails exits non-zero (2 when refused before any work: a bad value, a run directory that holds
    another run, a damaged checkpoint). A launch that fails before it starts writing leaves an earlier run's folder
    as it was, and a single run's new folder not at all. A sweep job that fails is recorded, in its folder unless
    that holds an earlier run, and for the sweep's closing report; the sweep goes on."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    had_results = rundir.has_results(run_dir)
    try:
        summary = train(cfg, run_dir)
    except KeyboardInterrupt:
        raise
    except Exception as error:
        refused = isinstance(error, REFUSED)
        message = str(error) if refused else f"{type(error).__name__}: {error}"
        if multirun:
            sweep.record_job(hydra_cfg.job.num, run_dir, "failed", message)
        recorded = rundir.started(run_dir) or (multirun and not had_results)
        if recorded:  # this launch's folder keeps why it failed
            outputs.write_json(run_dir / outputs.SUMMARY_FILE, {
                "status": "failed", "experiment": cfg.experiment_name, "task": cfg.task.name,
                "algorithm": cfg.algorithm.name, "error": message})
            outputs.atomic_write_text(run_dir / outputs.ERROR_FILE, [message + "\n" if refused else
                                                                     traceback.format_exc()])
        elif not had_results and not multirun:  # a single run that failed before any work leaves no folder
            _remove_launch_files(run_dir, hydra_cfg.job.name)
        # else: an earlier run's folder, untouched by a launch that failed before writing into it
        if refused:
            if not multirun:
                print(f"Error: {message}", file=sys.stderr)
                sys.exit(2)
            log.error("refused: %s", message)
        else:
            log.exception("run failed%s", f"; traceback in {run_dir / outputs.ERROR_FILE}" if recorded else "")
            if not multirun:
                raise
        return None
    if multirun:
        sweep.record_job(hydra_cfg.job.num, run_dir, summary["status"], summary.get("error"))
    final = summary["final"].get("error", {}).get("mean")
    log.info("%s/%s: status=%s final error=%s steps_to=%s (%.1fs) → %s", cfg.task.name, cfg.algorithm.name,
             summary["status"], final, summary["steps_to"].get("error"), summary["wall_seconds"], run_dir)
    return final


def _remove_launch_files(run_dir: Path, job_name: str) -> None:
    """Remove what Hydra made for a launch that did no work (its log), and the folder if that leaves it empty."""
    (run_dir / f"{job_name}.log").unlink(missing_ok=True)
    try:
        run_dir.rmdir()
    except OSError:
        pass


# another primary config, config dir or search path may hold other presets: Hydra's own composition checks then
_OTHER_CONFIG_FLAGS = ("--config-path", "-cp", "--config-name", "-cn", "--config-dir", "-cd", "--experimental-rerun",
                       "--shell-completion", "-sc", "--version")


def refuse_unknown_presets(argv: list[str]) -> None:
    """Before Hydra composes or launches anything: an ``experiment=`` override (every value of a sweep) that names
    no conf/experiment/*.yaml prints one ``Error:`` line naming it and listing the presets, and exits 2."""
    from hydra._internal.utils import get_args_parser

    from harness.run import check_experiment_overrides

    if any(arg.split("=", 1)[0] in _OTHER_CONFIG_FLAGS or arg.startswith("hydra.searchpath") for arg in argv):
        return
    parser = get_args_parser()
    parser.exit_on_error = False
    try:
        overrides = parser.parse_known_args(argv)[0].overrides
    except Exception:  # noqa: BLE001 - Hydra reports bad arguments itself
        return
    try:
        check_experiment_overrides(overrides)
    except ConfigError as error:
        print(f"Error: {error}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    refuse_unknown_presets(sys.argv[1:])
    main()
