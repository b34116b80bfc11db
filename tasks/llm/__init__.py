"""RLVR tasks for language models (paper §3.8, Fig 9): prompts as chat messages and a verifiable score in [0, 1].

They run through the TRL trainer in ``harness/llm`` rather than the seed-batched loop; see ``LLMTask``.
"""
