"""Human-readable evaluation reports: the rich table printed by ``tirl eval`` and a Markdown variant.

Covers formatting of :class:`tirl.eval.metrics.BenchmarkSummary` rows. It does not compute metrics.
"""

from __future__ import annotations

from typing import Sequence

from rich.table import Table

from tirl.eval.metrics import BenchmarkSummary

COLUMNS = (
    "benchmark",
    "problems x K",
    "avg pass@1",
    "pass@K",
    "maj@K",
    "len mean",
    "len p90",
    "tools/traj",
    "tool ok/err/timeout/parse",
    "truncated",
    "no answer",
)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def summary_cells(s: BenchmarkSummary) -> list[str]:
    """The cells of one table row, in the order of :data:`COLUMNS` (rates in percent)."""
    k = s.samples_per_problem
    c = s.tool_call_classes
    return [
        s.benchmark,
        f"{s.num_problems} x {k}",
        _pct(s.avg_pass1),
        f"{_pct(s.pass_at_k[k])} (k={k})",
        _pct(s.maj_at_k),
        f"{s.mean_response_tokens:.0f}",
        f"{s.p90_response_tokens:.0f}",
        f"{s.tool_calls_per_trajectory:.2f}",
        f"{c.get('ok', 0)}/{c.get('error', 0)}/{c.get('timeout', 0)}/{c.get('parse_error', 0)}",
        _pct(s.truncation_rate),
        _pct(s.no_answer_rate),
    ]


def summary_table(summaries: Sequence[BenchmarkSummary], title: str | None = None) -> Table:
    """A rich table with one row per benchmark; pass rates and shares in percent, lengths in model tokens."""
    table = Table(title=title, title_justify="left")
    for i, name in enumerate(COLUMNS):
        table.add_column(name, justify="left" if i == 0 else "right")
    for s in summaries:
        table.add_row(*summary_cells(s))
    return table


def summary_markdown(summaries: Sequence[BenchmarkSummary]) -> str:
    """The same table as GitHub Markdown (for the README and docs)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(summary_cells(s)) + " |" for s in summaries]
    return "\n".join(lines)
