"""LLM RLVR (paper §3.8, Fig 9) on Hugging Face TRL's GRPOTrainer, every loss from ``algorithms/``.

The run itself is ``harness.trainers.trl.TRLTrainer``, imported only for LLM tasks, since TRL is slow to import.
"""
