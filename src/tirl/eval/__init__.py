"""Benchmark evaluation: runs (``tirl.eval.runner``), metrics (``tirl.eval.metrics``), resumable output
(``tirl.eval.store``) and tables (``tirl.eval.report``).

Importing this package is cheap: the runner, which pulls in engines and models lazily, is imported on use.
"""

from tirl.eval.metrics import BenchmarkSummary, SampleOutcome, majority_correct, pass_at_k, summarize
from tirl.eval.store import ResumeMismatch, RunStore

__all__ = [
    "BenchmarkSummary",
    "ResumeMismatch",
    "RunStore",
    "SampleOutcome",
    "majority_correct",
    "pass_at_k",
    "summarize",
]
