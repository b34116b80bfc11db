"""LLM RLVR (paper §3.8, Fig 9) on Hugging Face TRL's GRPOTrainer, every loss from ``algorithms/``.

``train_llm`` lives in ``harness.llm.train``; it is imported only for LLM tasks, since TRL is slow to import.
"""
