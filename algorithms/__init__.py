"""Pure tensor functions for TPO and its baselines: scores → signals, losses, exact tabular directions."""

from algorithms.registry import ALGORITHMS, Advantage, AlgorithmSpec, Rollout, get_algorithm

__all__ = ["ALGORITHMS", "Advantage", "AlgorithmSpec", "Rollout", "get_algorithm"]
