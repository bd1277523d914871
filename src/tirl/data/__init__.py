"""Datasets: the one :class:`Problem` type, evaluation benchmarks (:mod:`tirl.data.benchmarks`), RL training
problems (:mod:`tirl.data.training`), curation (:mod:`tirl.data.curation`) and SFT sets (:mod:`tirl.data.sft`).

This package module exports the problem type and the two loaders; other helpers stay in their modules.
"""

from tirl.data.benchmarks import BENCHMARKS, BenchmarkError, list_benchmarks, load_benchmark
from tirl.data.problem import Problem
from tirl.data.training import load_training_problems

__all__ = ["BENCHMARKS", "BenchmarkError", "Problem", "list_benchmarks", "load_benchmark", "load_training_problems"]
