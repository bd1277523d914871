"""The curation report: counts per step and per source, drop reasons with examples, the contamination matches
and a histogram of answer lengths, as a JSON-serialisable dict (:func:`build_report`) and as Markdown
(:func:`render_markdown`).

Only presentation: the numbers come from a :class:`tirl.data.curation.pipeline.CurationResult`.
"""

from __future__ import annotations

import json
from typing import Any

STEP_ORDER: tuple[str, ...] = ("normalise", "answer", "dedup", "decontam", "consistency")
LENGTH_BUCKETS: tuple[tuple[str, int, int], ...] = (
    ("1", 1, 1),
    ("2", 2, 2),
    ("3", 3, 3),
    ("4", 4, 4),
    ("5-6", 5, 6),
    ("7-10", 7, 10),
    ("11-20", 11, 20),
    ("21+", 21, 10**18),
)
"""Answer-length histogram buckets (characters of the normalised answer; for integers, digits plus sign)."""

_EXCERPT = 240


def _excerpt(text: str, limit: int = _EXCERPT) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def answer_length_histogram(answers: list[str]) -> dict[str, int]:
    """Counts of answers per :data:`LENGTH_BUCKETS` bucket (all buckets present, in order)."""
    hist = {label: 0 for label, _, _ in LENGTH_BUCKETS}
    for answer in answers:
        n = len(answer)
        for label, lo, hi in LENGTH_BUCKETS:
            if lo <= n <= hi:
                hist[label] += 1
                break
    return hist


def build_report(result: Any, sources: list[str], config: Any, *, ran_consistency: bool) -> dict[str, Any]:
    """The report dict of a curation run.

    Keys: ``sources`` (specs), ``config``, ``total_in``, ``kept``, ``steps`` (per step: ``in``, ``dropped``,
    ``out``, ``by_reason``; ``consistency`` only when it ran), ``per_source`` (per source label: ``in``, dropped
    per step, ``kept``), ``reasons`` (per reason: ``step``, ``count``, ``examples``), ``contamination``
    (``by_benchmark``: dropped training problems per benchmark; ``matches``: every contaminated problem with
    the benchmark ids and one shared n-gram), ``answer_length_histogram`` (kept answers) and ``seconds`` per step.
    """
    steps = [s for s in STEP_ORDER if s != "consistency" or ran_consistency]
    total = sum(result.loaded.values())
    report_steps = []
    remaining = total
    for step in steps:
        dropped = [d for d in result.dropped if d.step == step]
        by_reason: dict[str, int] = {}
        for d in dropped:
            by_reason[d.reason] = by_reason.get(d.reason, 0) + 1
        report_steps.append(
            {
                "step": step,
                "in": remaining,
                "dropped": len(dropped),
                "out": remaining - len(dropped),
                "by_reason": by_reason,
            }
        )
        remaining -= len(dropped)
    per_source: dict[str, dict[str, int]] = {}
    for label, n in result.loaded.items():
        per_source[label] = {"in": n, **{s: 0 for s in steps}, "kept": 0}
    for d in result.dropped:
        per_source.setdefault(d.source, {"in": 0, **{s: 0 for s in steps}, "kept": 0})[d.step] += 1
    for label in result.kept_sources:
        per_source[label]["kept"] += 1
    reasons: dict[str, dict[str, Any]] = {}
    for d in result.dropped:
        entry = reasons.setdefault(d.reason, {"step": d.step, "count": 0, "examples": []})
        entry["count"] += 1
        if len(entry["examples"]) < config.examples_per_reason:
            entry["examples"].append(
                {
                    "id": d.id,
                    "source": d.source,
                    "problem": _excerpt(d.problem),
                    "answer": _excerpt(d.answer, 80),
                    "detail": d.detail,
                }
            )
    matches = [
        {
            "id": d.id,
            "source": d.source,
            "benchmark_ids": d.detail.get("benchmark_ids", []),
            "ngram": d.detail.get("ngram", ""),
        }
        for d in result.dropped
        if d.reason == "contaminated"
    ]
    by_benchmark: dict[str, int] = {}
    for m in matches:
        for bench in sorted({b.split("/", 1)[0] for b in m["benchmark_ids"]}):
            by_benchmark[bench] = by_benchmark.get(bench, 0) + 1
    return {
        "sources": sources,
        "config": config.to_dict(),
        "total_in": total,
        "kept": len(result.kept),
        "steps": report_steps,
        "per_source": per_source,
        "reasons": reasons,
        "contamination": {"by_benchmark": by_benchmark, "matches": matches},
        "answer_length_histogram": answer_length_histogram([p.answer for p in result.kept]),
        "seconds": {k: round(v, 3) for k, v in result.seconds.items()},
    }


def _cell(value: Any) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any], max_matches: int = 40) -> str:
    """The report as Markdown: totals, per-step and per-source tables, reasons with examples, contamination
    matches (the first ``max_matches``; all are in the JSON) and the answer-length histogram."""
    steps = [s["step"] for s in report["steps"]]
    lines = [
        "# Curation report",
        "",
        f"Sources: {', '.join(f'`{s}`' for s in report['sources'])}. "
        f"{report['total_in']:,} problems in, **{report['kept']:,} kept**.",
        "",
        "## Per step",
        "",
        "| step | in | dropped | out | reasons |",
        "|---|---:|---:|---:|---|",
    ]
    for s in report["steps"]:
        reasons = ", ".join(f"{k} {v:,}" for k, v in sorted(s["by_reason"].items(), key=lambda kv: -kv[1]))
        lines.append(f"| {s['step']} | {s['in']:,} | {s['dropped']:,} | {s['out']:,} | {reasons or '-'} |")
    lines += [
        "",
        "## Per source (dropped per step)",
        "",
        "| source | in | " + " | ".join(steps) + " | kept |",
        "|---|---:|" + "---:|" * len(steps) + "---:|",
    ]
    for label, row in report["per_source"].items():
        lines.append(
            f"| {label} | {row['in']:,} | " + " | ".join(f"{row[s]:,}" for s in steps) + f" | {row['kept']:,} |"
        )
    lines += ["", "## Drop reasons and examples", ""]
    for reason, entry in sorted(
        report["reasons"].items(), key=lambda kv: (steps.index(kv[1]["step"]) if kv[1]["step"] in steps else 99, kv[0])
    ):
        lines += [
            f"**{reason}** ({entry['step']}, {entry['count']:,})",
            "",
            "| id | source | problem | answer | detail |",
            "|---|---|---|---|---|",
        ]
        for ex in entry["examples"]:
            lines.append(
                f"| {_cell(ex['id'])} | {ex['source']} | {_cell(ex['problem'])} | {_cell(ex['answer'])} "
                f"| {_cell(json.dumps(ex['detail'], ensure_ascii=False))} |"
            )
        lines.append("")
    cont = report["contamination"]
    lines += [
        "## Contamination",
        "",
        "Dropped training problems per benchmark: "
        + (", ".join(f"{k} {v}" for k, v in sorted(cont["by_benchmark"].items())) or "none")
        + ".",
        "",
    ]
    if cont["matches"]:
        lines += ["| id | benchmark problems | a shared n-gram |", "|---|---|---|"]
        for m in cont["matches"][:max_matches]:
            lines.append(f"| {_cell(m['id'])} | {_cell(', '.join(m['benchmark_ids']))} | {_cell(m['ngram'])} |")
        if len(cont["matches"]) > max_matches:
            lines.append(f"| ... | {len(cont['matches']) - max_matches} more in report.json | |")
        lines.append("")
    lines += [
        "## Answer length of the kept problems (characters)",
        "",
        "| length | " + " | ".join(report["answer_length_histogram"]) + " |",
        "|---|" + "---:|" * len(report["answer_length_histogram"]),
        "| problems | " + " | ".join(f"{v:,}" for v in report["answer_length_histogram"].values()) + " |",
        "",
        "Seconds per step: " + ", ".join(f"{k} {v}" for k, v in report["seconds"].items()) + ".",
        "",
    ]
    return "\n".join(lines)


__all__ = ["LENGTH_BUCKETS", "STEP_ORDER", "answer_length_histogram", "build_report", "render_markdown"]
