"""TPO and its baselines: the algorithm interface and registry, the library of methods, their pure formulas."""

from algorithms import library  # noqa: F401  (registers every algorithm)
from algorithms.registry import ALGORITHMS, Aggregation, Algorithm, Groups, Rollout, build, get_algorithm, register

__all__ = ["ALGORITHMS", "Aggregation", "Algorithm", "Groups", "Rollout", "build", "get_algorithm", "register"]
