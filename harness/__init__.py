"""tpo-bench's harness: Hydra entry point, training loop, run directories, outputs, W&B mirror, campaign runner and
the paper report. Importing it has no side effects; the entry points tune the process (``harness.process``)."""
