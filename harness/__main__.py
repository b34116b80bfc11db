"""``python -m harness task=<task> algorithm=<algorithm> seeds=<n> trainer.steps=<n>`` (Hydra; ``-m`` sweeps)."""

from __future__ import annotations

import logging
import sys
import traceback
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from harness import outputs
from harness.run import CONFIG_DIR, train
from tasks.base import ConfigError

log = logging.getLogger("harness")


@hydra.main(version_base="1.3", config_path=str(CONFIG_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """Train one configuration; return the final mean error (for Hydra sweepers that optimise it)."""
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    multirun = HydraConfig.get().mode == RunMode.MULTIRUN
    try:
        summary = train(cfg, run_dir)
    except KeyboardInterrupt:
        raise
    except Exception as error:  # recorded in the run directory; a sweep goes on with its other jobs
        outputs.write_json(run_dir / outputs.SUMMARY_FILE, {
            "status": "failed", "experiment": cfg.experiment_name, "task": cfg.task.name,
            "algorithm": cfg.algorithm.name,
            "error": f"{type(error).__name__}: {error}"})
        (run_dir / outputs.ERROR_FILE).write_text(traceback.format_exc())
        if isinstance(error, ConfigError):
            log.error("configuration error: %s", error)
            if not multirun:
                print(f"Error: {error}", file=sys.stderr)
                sys.exit(2)
        else:
            log.exception("run failed; traceback in %s", run_dir / outputs.ERROR_FILE)
            if not multirun:
                raise
        return None
    final = summary["final"].get("error", {}).get("mean")
    log.info("%s/%s: status=%s final error=%s steps_to=%s (%.1fs) → %s", cfg.task.name, cfg.algorithm.name,
             summary["status"], final, summary["steps_to"].get("error"), summary["wall_seconds"], run_dir)
    return final


if __name__ == "__main__":
    main()
