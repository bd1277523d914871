"""Benchmark evaluation: runs (:mod:`tirl.eval.runner`), metrics (:mod:`tirl.eval.metrics`), resumable output
(:mod:`tirl.runs.evals`), tables (:mod:`tirl.eval.report`), the evaluation modes by name (:mod:`tirl.eval.modes`)
and the demo (:mod:`tirl.eval.demo`).

Entry points: :func:`run_eval` / :func:`run_eval_sync` with :class:`EvalConfig`, :class:`EvalListener` and
:class:`EvalResult`; :class:`EvalMode` and :func:`get_mode`; the metrics :func:`summarize`, :func:`pass_at_k`,
:func:`majority_correct` with :class:`SampleOutcome` and :class:`BenchmarkSummary`; :class:`RunStore` and
:class:`ResumeMismatch`. Helpers stay in their modules.

Names are imported on first use (module ``__getattr__``): importing the package imports no engine or model.
"""

from __future__ import annotations

from tirl._lazy import lazy_getattr

_EXPORTS = {
    "EvalConfig": "tirl.eval.config",
    "EvalListener": "tirl.eval.runner",
    "EvalResult": "tirl.eval.runner",
    "run_eval": "tirl.eval.runner",
    "run_eval_sync": "tirl.eval.runner",
    "EvalMode": "tirl.eval.modes",
    "get_mode": "tirl.eval.modes",
    "BenchmarkSummary": "tirl.eval.metrics",
    "SampleOutcome": "tirl.eval.metrics",
    "majority_correct": "tirl.eval.metrics",
    "pass_at_k": "tirl.eval.metrics",
    "summarize": "tirl.eval.metrics",
    "ResumeMismatch": "tirl.runs.evals",
    "RunStore": "tirl.runs.evals",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
