"""Human-readable evaluation reports: the rich table printed by ``tirl eval``.

Covers formatting of :class:`tirl.eval.metrics.BenchmarkSummary` rows as a table with one *column* per
benchmark and one row per metric (so that it stays readable in an 80-column terminal or a CI log). It does not
compute metrics.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.table import Table

from tirl.eval.metrics import BenchmarkSummary


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def _with_interval(s: BenchmarkSummary, value: float, key: str) -> str:
    """``value`` in percent, followed by its bootstrap interval over problems (``[low, high]``) when the summary
    has one (:attr:`BenchmarkSummary.intervals`)."""
    interval = (s.intervals or {}).get(key)
    if not interval:
        return _pct(value)
    return f"{_pct(value)} [{_pct(interval[0])}, {_pct(interval[1])}]"


def _classes(s: BenchmarkSummary) -> str:
    c = s.tool_call_classes
    return f"{c.get('ok', 0)}/{c.get('error', 0)}/{c.get('timeout', 0)}/{c.get('parse_error', 0)}"


ROWS: tuple[tuple[str, Callable[[BenchmarkSummary], str]], ...] = (
    ("problems x samples (K)", lambda s: f"{s.num_problems} x {s.samples_per_problem}"),
    ("avg pass@1 (%) [95% CI]", lambda s: _with_interval(s, s.avg_pass1, "avg_pass1")),
    ("pass@K (%) [95% CI]", lambda s: _with_interval(s, s.pass_at_k[s.samples_per_problem], "pass_at_k")),
    ("maj@K (%) [95% CI]", lambda s: _with_interval(s, s.maj_at_k, "maj_at_k")),
    ("response tokens, mean", lambda s: f"{s.mean_response_tokens:.0f}"),
    ("response tokens, p90", lambda s: f"{s.p90_response_tokens:.0f}"),
    ("tool calls / trajectory", lambda s: f"{s.tool_calls_per_trajectory:.2f}"),
    ("tool calls ok/error/timeout/parse", _classes),
    ("truncated (%)", lambda s: _pct(s.truncation_rate)),
    ("no answer (%)", lambda s: _pct(s.no_answer_rate)),
    ("unparsable gold (problems)", lambda s: str(s.unparsable_gold_problems)),
)
"""The table's rows: label and cell formatter. Lengths count model-generated tokens only; the intervals are the
bootstrap over problems of :func:`tirl.eval.metrics.problem_intervals`; "truncated" is the share of samples that
ran out of the token budget or the context window."""

FALLBACK_ROW: tuple[str, Callable[[BenchmarkSummary], str]] = (
    "answers by fallback",
    lambda s: "-" if s.fallback_answers is None else str(s.fallback_answers),
)
"""Shown when a run used the evaluation answer fallback (``tirl eval --answer-fallback``)."""


def _audit(s: BenchmarkSummary) -> str:
    a = s.audit or {}
    if not a:
        return "-"
    return (
        f"{a.get('flagged', 0)}: {a.get('tool_output_tags', 0)}/{a.get('hedged_answers', 0)}/"
        f"{a.get('probe_calls', 0)} ({a.get('failed_probe_calls', 0)} failed)/{a.get('answer_in_tool_output', 0)}"
    )


AUDIT_ROW: tuple[str, Callable[[BenchmarkSummary], str]] = ("audit flagged: tags/hedged/probes/seen in tool", _audit)
"""The reward-hacking audit (:mod:`tirl.protocol.audit`): flagged samples, then tool outputs with template
strings, hedged answers, memory or socket probes (failed ones), answers first seen in a tool response."""


INFRA_ROW: tuple[str, Callable[[BenchmarkSummary], str]] = (
    "failed by tirl, not the model (engine/tool/verifier)",
    lambda s: "/".join(str(s.infra_failures.get(c, 0)) for c in ("engine", "tool_internal", "verifier")),
)
"""Shown when some sample was touched by an infrastructure failure (``BenchmarkSummary.infra_failures``)."""


def _rows(summaries: Sequence[BenchmarkSummary]) -> tuple[tuple[str, Callable[[BenchmarkSummary], str]], ...]:
    rows = ROWS
    if any(s.fallback_answers is not None for s in summaries):
        rows = rows + (FALLBACK_ROW,)
    if any(s.audit is not None for s in summaries):
        rows = rows + (AUDIT_ROW,)
    if any(sum(s.infra_failures.values()) for s in summaries):
        rows = rows + (INFRA_ROW,)
    return rows


def summary_table(summaries: Sequence[BenchmarkSummary], title: str | None = None) -> Table:
    """A rich table: one column per benchmark, one row per metric of :data:`ROWS` (and :data:`FALLBACK_ROW`
    when a summary used the answer fallback, :data:`AUDIT_ROW` when the summaries carry the audit)."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric", justify="left")
    for s in summaries:
        table.add_column(s.benchmark, justify="right")
    for label, cell in _rows(summaries):
        table.add_row(label, *(cell(s) for s in summaries))
    return table
