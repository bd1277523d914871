"""Datasets: evaluation benchmarks (:mod:`tirl.data.benchmarks`) and RL training problems (:mod:`tirl.data.training`).

This package module re-exports the benchmark API only; import training-set helpers from
:mod:`tirl.data.training`.
"""

from tirl.data.benchmarks import BENCHMARKS, BenchmarkError, Problem, list_benchmarks, load_benchmark

__all__ = ["BENCHMARKS", "BenchmarkError", "Problem", "list_benchmarks", "load_benchmark"]
