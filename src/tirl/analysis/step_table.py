"""A run's steps as a Markdown table (``tirl plot --table FILE.md``): what docs and reviews show per step.

One row per RL step of the runs read by :func:`tirl.analysis.plot.load_runs` (stages chained), one column per
metric in :data:`COLUMNS`; a metric a run did not log is shown as ``-``. It does not draw (``tirl.analysis.plot``)
and does not compute metrics (``tirl.algo.metrics``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tirl.analysis.plot import PREFIX, load_runs

# (metric key without the "tirl/" prefix, column heading, format)
COLUMNS: list[tuple[str, str, str]] = [
    ("reward/mean", "reward", "{:.3f}"),
    ("reward/kept_mean", "kept reward", "{:.3f}"),
    ("tool_calls/per_traj", "calls/traj", "{:.2f}"),
    ("tool_calls/error_rate", "failing calls", "{:.2f}"),
    ("tool_error_in_correct/before", "failing in correct, sampled", "{:.2f}"),
    ("tool_error_in_correct/after", "failing in correct, kept", "{:.2f}"),
    ("truncation_rate", "truncated", "{:.2f}"),
    ("length/mean", "length", "{:.0f}"),
    ("time/step_s", "step s", "{:.0f}"),
    ("time/rollout_s", "rollout s", "{:.0f}"),
    ("time/update_s", "update s", "{:.0f}"),
]


def _cell(record: dict[str, Any], key: str, fmt: str) -> str:
    value = record.get(PREFIX + key, record.get(key))
    if isinstance(value, (int, float)) and math.isfinite(value):
        return fmt.format(value)
    return "-"


def step_table(paths: Sequence[str | Path], columns: Sequence[tuple[str, str, str]] = COLUMNS) -> str:
    """The Markdown table (header, separator, one row per step; a final newline).

    Raises:
        FileNotFoundError: a run has no metrics file.
        ValueError: no step records.
    """
    records = load_runs(paths)
    if not records:
        raise ValueError("no step records with rollout metrics")
    header = ["step"] + [title for _, title, _ in columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" for _ in header) + "|"]
    for rec in records:
        cells = [str(rec["global_step"])] + [_cell(rec, key, fmt) for key, _, fmt in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
