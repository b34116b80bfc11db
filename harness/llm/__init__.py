"""LLM RLVR (paper §3.8, Fig 9) on Hugging Face TRL's GRPOTrainer, every loss from ``algorithms/``.

The run itself is ``harness.trainers.trl.TRLTrainer``, imported only for LLM tasks, since TRL is slow to import. For
any TRL user: ``from harness.llm import TPOConfig, TPOTrainer`` (``harness/llm/tpo_trl.py``), imported on first use
for the same reason.
"""

__all__ = ["TPOConfig", "TPOTrainer"]


def __getattr__(name: str):
    if name in __all__:
        from harness.llm import tpo_trl

        return getattr(tpo_trl, name)
    raise AttributeError(f"module 'harness.llm' has no attribute {name!r}")
