"""The pass-rate filter: the problems of a ``tirl eval`` run that the model solves sometimes, not always or never.

GRPO learns nothing from a group whose samples are all correct or all wrong (every advantage is zero), so the
rStar2-Agent recipe trains on problems of a middling pass rate. :func:`filter_pass_rate` reads an evaluation run
(``tirl eval --samples N`` at the RL temperature, through :mod:`tirl.runs.evals`), counts the correct samples of
each problem and writes the problems with ``min_correct <= correct <= max_correct`` (default ``1 .. N-1``) to a
problem JSONL, in the order of the source the evaluation read (:func:`tirl.data.load_benchmark`; the rows are
:meth:`tirl.data.Problem.to_dict`: ``id``, ``problem``, ``answer``, ``source`` and every other field of the
source row), with a small stats file beside it (:func:`stats_path`: the histogram, the counts by reason, the
evaluation's model and sampling settings). ``tirl data filter-pass-rate`` is its command line.

Rules (each failure is one line naming the fix, :class:`PassRateError`):

- **N** is the evaluation's samples per problem: ``summary.json``'s when the run finished with no sample
  missing, else the most any problem has (``samples`` overrides). Samples with an index outside 0..N-1 (an earlier,
  larger run in the same folder) are ignored and counted.
- **A partial run** (a problem with fewer than N samples, ``summary.json`` missing or counting missing samples)
  is refused, naming the problems; ``complete_only`` keeps the complete problems and drops the others
  (``incomplete``). The problems of the source after the last one with a sample are outside the run (an
  evaluation of ``FILE.jsonl:160`` reads the first 160): counted, never written.
- **Failures that are not the model's** (a tool call answered ``internal``, a verifier crash or deadline:
  :func:`tirl.eval.metrics.infra_cause_of`, the rule the evaluation's table uses) count as neither right nor
  wrong: a problem with such a sample is dropped (``infra_failed``). An engine failure is never stored by the
  evaluation, so it shows as a missing sample (above).
- A problem whose reference answer the evaluation could not parse (``summary.json``'s ``unparsable_gold_ids``;
  its samples all scored 0) is dropped (``unparsable_gold``).
- The source is checked against the run: every evaluated problem must be in it with the same text and answer
  (a file edited since the evaluation is refused, not silently mixed).

Covers reading and selecting; sampling is ``tirl eval``'s, the table's layout :func:`histogram_table`.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.table import Table

from tirl.data.benchmarks import BenchmarkError, load_benchmark
from tirl.data.problem import Problem
from tirl.data.training import write_problems
from tirl.eval.metrics import infra_cause_of
from tirl.eval.runner import outcome_from_record
from tirl.runs.evals import read_samples, read_settings, read_summary, record_key
from tirl.runs.layout import EVAL_SETTINGS, EVAL_SUMMARY, EVAL_TRAJECTORIES, has_metrics, is_eval_run

REASONS: tuple[str, ...] = ("below_min", "above_max", "incomplete", "infra_failed", "unparsable_gold")
"""Why a problem of the run is not written, in the order they are checked after completeness:
``incomplete`` (fewer than N samples, only with ``complete_only``), ``infra_failed``, ``unparsable_gold``,
then the bounds."""

PROVENANCE_KEYS: tuple[str, ...] = ("model", "temperature", "top_p", "max_turns", "max_tokens", "use_tools", "seed")
"""The evaluation's settings (``run.json``) copied into the stats file."""


class PassRateError(ValueError):
    """The run or the request cannot give a pass-rate subset; the message is one line that names the fix."""


@dataclass
class ProblemCount:
    """One problem of the run.

    Attributes:
        benchmark: the evaluation's benchmark name (a built-in name or the JSONL path it was given).
        problem: the source's problem (all its fields).
        samples: stored samples with an index below N.
        correct: correct samples among them.
        infra: samples touched by a failure that is not the model's, by cause (``tool_internal``, ``verifier``).
    """

    benchmark: str
    problem: Problem
    samples: int = 0
    correct: int = 0
    infra: dict[str, int] = field(default_factory=dict)


@dataclass
class PassRateResult:
    """What :func:`filter_pass_rate` found and wrote.

    Attributes:
        samples: N, the samples per problem.
        samples_from: where N came from (``summary.json``, ``the records``, ``--samples``).
        min_correct: lowest correct count kept.
        max_correct: highest correct count kept.
        histogram: ``histogram[c]`` = problems with exactly c of N correct (c = 0..N), over the problems with N
            graded samples (not incomplete, no infrastructure failure, a parsable reference).
        problems: every problem of the run, in source order.
        kept: the problems written, in source order.
        dropped: reason (:data:`REASONS`) -> problem ids, in source order.
        not_evaluated: problems of the sources after the last one with a sample (outside the run).
        ignored_samples: stored samples with an index outside ``0..N-1``.
        bad_lines: lines of the run's samples file that were not records (a torn last line included).
        partial: the run is partial (then ``complete_only`` was given).
        stats: the stats file's content.
        out: the subset file; ``stats_file``: the stats file.
    """

    samples: int
    samples_from: str
    min_correct: int
    max_correct: int
    histogram: list[int]
    problems: list[ProblemCount]
    kept: list[Problem]
    dropped: dict[str, list[str]]
    not_evaluated: int
    ignored_samples: int
    bad_lines: int
    partial: bool
    stats: dict[str, Any]
    out: Path
    stats_file: Path


def stats_path(out: str | Path) -> Path:
    """The stats file beside a subset file: ``OUT.jsonl`` -> ``OUT.jsonl.stats.json``."""
    out = Path(out)
    return out.with_name(out.name + ".stats.json")


def _check_run_dir(run_dir: Path) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(run.json, summary.json or None)`` of an evaluation folder.

    Raises:
        PassRateError: not a folder, a training run, no samples file or no settings, an unreadable file.
    """
    if not run_dir.is_dir():
        raise PassRateError(f"{run_dir} is not a folder: pass the --out-dir of a tirl eval run")
    if not is_eval_run(run_dir):
        what = "a training run" if has_metrics(run_dir) else "not a tirl eval run"
        raise PassRateError(
            f"{run_dir} is {what} (no {EVAL_TRAJECTORIES}): pass the --out-dir of a tirl eval run, "
            "e.g. tirl eval --samples 8 --out-dir DIR"
        )
    try:
        settings = read_settings(run_dir)
        summary = read_summary(run_dir, strict=True)
    except (OSError, ValueError) as exc:
        raise PassRateError(str(exc)) from None
    if settings is None:
        raise PassRateError(
            f"{run_dir} has {EVAL_TRAJECTORIES} but no {EVAL_SETTINGS}: not written by tirl eval; "
            "pass the --out-dir of a tirl eval run"
        )
    return settings, summary


def _read_records(run_dir: Path) -> tuple[dict[str, dict[tuple[str, int], dict[str, Any]]], int]:
    """benchmark -> {(problem id, sample index): record} (a key stored twice: the later line, as
    :class:`tirl.runs.evals.RunStore` reads it), and the lines that were not records."""
    rows, bad = read_samples(run_dir)
    by_benchmark: dict[str, dict[tuple[str, int], dict[str, Any]]] = {}
    for row in rows:
        try:
            bench, pid, j = record_key(row)
        except (KeyError, TypeError, ValueError):
            bad += 1
            continue
        by_benchmark.setdefault(bench, {})[(pid, j)] = row
    return by_benchmark, bad


def _samples_per_problem(
    summary: dict[str, Any] | None, records: dict[str, dict[tuple[str, int], dict[str, Any]]], samples: int | None
) -> tuple[int, str]:
    """N and where it came from: ``samples``; else a finished run's ``summary.json`` (no sample missing, so
    every problem has N, its ``samples_per_problem``); else the most samples any problem has (highest index + 1).
    """
    if samples is not None:
        if samples < 1:
            raise PassRateError(f"--samples must be >= 1, got {samples}")
        return samples, "--samples"
    if summary is not None and not summary.get("missing_samples"):
        counts = {b.get("samples_per_problem") for b in (summary.get("benchmarks") or {}).values()}
        if len(counts) == 1 and isinstance(next(iter(counts)), int) and next(iter(counts)) >= 1:
            return int(next(iter(counts))), EVAL_SUMMARY
    return 1 + max(j for recs in records.values() for _, j in recs), "the records"


def _load_source(benchmark: str, source: str | Path | None) -> list[Problem]:
    """The problems the evaluation read for ``benchmark`` (``source`` instead when given).

    Raises:
        PassRateError: the file or name cannot be read (the message says how to point at it).
    """
    name = str(source) if source is not None else benchmark
    try:
        return load_benchmark(name)
    except (BenchmarkError, OSError) as exc:
        raise PassRateError(
            f"cannot read the problems of benchmark {benchmark!r} ({exc}): run from the folder tirl eval ran in, "
            "or pass the file it read with --source PATH"
        ) from None


def _count(
    benchmark: str,
    problems: list[Problem],
    records: dict[tuple[str, int], dict[str, Any]],
    n: int,
) -> tuple[list[ProblemCount], int, int]:
    """The run's problems of one benchmark in source order (the source up to its last problem with a sample),
    how many problems follow outside the run, and how many samples have an index outside ``0..n-1``.

    Raises:
        PassRateError: a record's problem is not in the source, or its text or answer differ from the source's.
    """
    index = {p.id: k for k, p in enumerate(problems)}
    seen: set[str] = set()
    for (pid, _), rec in records.items():
        if pid not in index:
            raise PassRateError(
                f"problem {pid!r} of benchmark {benchmark!r} is not in its source: pass the file tirl eval read "
                "with --source PATH"
            )
        if pid in seen:
            continue
        seen.add(pid)
        p = problems[index[pid]]
        # the run graded the text and answer it stored; a source edited since would pair them with other rows
        if rec.get("problem", p.problem) != p.problem or str(rec.get("gold", p.answer)) != p.answer:
            raise PassRateError(
                f"problem {pid!r} of benchmark {benchmark!r} differs from the one tirl eval read (text or answer "
                "changed): pass the file it read with --source PATH"
            )
    last = max(index[pid] for pid in seen)
    counts = [ProblemCount(benchmark, p) for p in problems[: last + 1]]
    ignored = 0
    for (pid, j), rec in records.items():
        if not 0 <= j < n:  # another (larger) run's in the same folder, or a corrupt index: not one of the N
            ignored += 1
            continue
        c = counts[index[pid]]
        c.samples += 1
        cause = infra_cause_of(outcome_from_record(rec))
        if cause is not None:  # neither right nor wrong: the sample says nothing about the model
            c.infra[cause] = c.infra.get(cause, 0) + 1
        elif rec.get("correct") is True:
            c.correct += 1
    return counts, len(problems) - last - 1, ignored


def _partial_message(run_dir: Path, incomplete: list[ProblemCount], n: int, summary: dict[str, Any] | None) -> str:
    """One line: why ``run_dir`` is partial and the two ways on."""
    parts = []
    if incomplete:
        shown = ", ".join(f"{c.problem.id} ({c.samples}/{n})" for c in incomplete[:5])
        more = f" and {len(incomplete) - 5} more" if len(incomplete) > 5 else ""
        parts.append(f"{len(incomplete)} problem(s) have fewer than {n} samples: {shown}{more}")
    if summary is None:
        parts.append(f"it has no {EVAL_SUMMARY} (the evaluation has not finished)")
    elif summary.get("missing_samples"):
        parts.append(f"its {EVAL_SUMMARY} counts {summary['missing_samples']} missing sample(s)")
    return (
        f"{run_dir} is a partial eval run: {'; '.join(parts)}. Re-run the same tirl eval command to finish it, "
        "or pass --complete-only to keep only the problems with all their samples"
    )


def reason_label(reason: str, result: PassRateResult) -> str:
    """A drop reason in words (``never solved (0/8)`` for the default lower bound)."""
    n, lo, hi = result.samples, result.min_correct, result.max_correct
    if reason == "below_min":
        return f"never solved (0/{n})" if lo == 1 else f"fewer than {lo} of {n} correct"
    if reason == "above_max":
        return f"always solved ({n}/{n})" if hi == n - 1 else f"more than {hi} of {n} correct"
    return {
        "incomplete": f"incomplete (fewer than {n} samples)",
        "infra_failed": "a sample failed in tirl, not the model (tool internal error / verifier)",
        "unparsable_gold": "reference answer the evaluation could not parse",
    }[reason]


def filter_pass_rate(
    run_dir: str | Path,
    out: str | Path,
    *,
    min_correct: int = 1,
    max_correct: int | None = None,
    samples: int | None = None,
    complete_only: bool = False,
    source: str | Path | None = None,
) -> PassRateResult:
    """Write the problems of an evaluation run solved ``min_correct..max_correct`` times out of N.

    Args:
        run_dir: the ``--out-dir`` of a ``tirl eval`` run (finished, or partial with ``complete_only``).
        out: the subset file (JSONL, the benchmark/RL-source format); its stats go to :func:`stats_path`.
        min_correct: lowest number of correct samples kept (default 1: drop the never-solved).
        max_correct: highest number kept; None for N - 1 (drop the always-solved).
        samples: N, the samples per problem; None reads it from the run (module docstring).
        complete_only: from a partial run, keep only the problems with N samples instead of refusing.
        source: the file the evaluation read, when its benchmark name does not reach it from here (a run
            with one benchmark only).

    Returns:
        A :class:`PassRateResult`; nothing is written when an error is raised.

    Raises:
        PassRateError: every case of the module docstring's rules, bounds outside ``0 <= min <= max <= N``,
            ``out`` naming a source file, or two kept problems with the same id (from two benchmarks).
    """
    run_dir, out = Path(run_dir), Path(out)
    settings, summary = _check_run_dir(run_dir)
    records, bad_lines = _read_records(run_dir)
    if not records:
        raise PassRateError(f"{run_dir} holds no samples yet: run tirl eval with --out-dir {run_dir} first")
    n, n_from = _samples_per_problem(summary, records, samples)
    hi = n - 1 if max_correct is None else max_correct
    if min_correct < 0 or hi > n:
        raise PassRateError(f"bounds must lie in 0..{n} (the samples per problem), got {min_correct}..{hi}")
    if min_correct > hi:
        hint = " (one sample per problem: evaluate with --samples 8)" if n == 1 else ""
        raise PassRateError(f"--min-correct {min_correct} is above --max-correct {hi}: nothing can be kept{hint}")

    order = list((summary or {}).get("benchmarks") or {})  # the evaluation's benchmark order
    order = [b for b in order if b in records] + [b for b in records if b not in order]
    if source is not None and len(order) != 1:
        raise PassRateError(
            f"--source names the file of one benchmark, but {run_dir} has {len(order)}: {', '.join(order)}"
        )
    problems: list[ProblemCount] = []
    not_evaluated = ignored = 0
    sources: dict[str, str] = {}
    for bench in order:
        loaded = _load_source(bench, source)
        sources[bench] = str(source if source is not None else bench)
        counts, after, skipped = _count(bench, loaded, records[bench], n)
        problems += counts
        not_evaluated += after
        ignored += skipped
    source_paths = {Path(s).resolve() for s in sources.values() if Path(s).is_file()}
    if out.resolve() in source_paths:
        raise PassRateError(f"--out {out} is the file the evaluation read: write the subset to another file")

    incomplete = [c for c in problems if c.samples < n]
    partial = bool(incomplete) or summary is None or bool(summary.get("missing_samples"))
    if partial and not complete_only:
        raise PassRateError(_partial_message(run_dir, incomplete, n, summary))

    bad_gold = {
        (b, str(i))
        for b, s in ((summary or {}).get("benchmarks") or {}).items()
        for i in s.get("unparsable_gold_ids") or ()
    }
    histogram = [0] * (n + 1)
    kept: list[Problem] = []
    dropped: dict[str, list[str]] = {r: [] for r in REASONS}
    for c in problems:
        if c.samples < n:
            reason: str | None = "incomplete"
        elif c.infra:
            reason = "infra_failed"
        elif (c.benchmark, c.problem.id) in bad_gold:
            reason = "unparsable_gold"
        else:
            histogram[c.correct] += 1
            reason = "below_min" if c.correct < min_correct else "above_max" if c.correct > hi else None
        if reason is None:
            kept.append(c.problem)
        else:
            dropped[reason].append(c.problem.id)
    dup = [i for i, k in Counter(p.id for p in kept).items() if k > 1]
    if dup:
        raise PassRateError(
            f"kept problems share ids across benchmarks ({', '.join(dup[:5])}): filter one benchmark at a time"
        )

    infra_causes: Counter[str] = Counter()
    for c in problems:
        infra_causes.update(c.infra)
    stats = {
        "eval_run": str(run_dir.resolve()),
        **{k: settings.get(k) for k in PROVENANCE_KEYS},
        "samples": n,
        "samples_from": n_from,
        "benchmarks": sources,
        "min_correct": min_correct,
        "max_correct": hi,
        "complete_only": complete_only,
        "partial_run": partial,
        "problems": len(problems),
        "kept": len(kept),
        "dropped": {r: len(ids) for r, ids in dropped.items()},
        "histogram": {str(c): k for c, k in enumerate(histogram)},
        "infra_failed_samples": dict(infra_causes),
        "dropped_ids": {r: dropped[r] for r in ("incomplete", "infra_failed", "unparsable_gold")},
        "not_evaluated": not_evaluated,
        "ignored_samples": ignored,
        "bad_lines": bad_lines,
        "out": str(out),
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_problems(kept, out)
    side = stats_path(out)
    tmp = side.with_name(side.name + ".tmp")
    tmp.write_text(json.dumps(stats, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(tmp, side)
    return PassRateResult(
        samples=n,
        samples_from=n_from,
        min_correct=min_correct,
        max_correct=hi,
        histogram=histogram,
        problems=problems,
        kept=kept,
        dropped=dropped,
        not_evaluated=not_evaluated,
        ignored_samples=ignored,
        bad_lines=bad_lines,
        partial=partial,
        stats=stats,
        out=out,
        stats_file=side,
    )


def histogram_table(result: PassRateResult) -> Table:
    """A rich table: one row per correct count 0..N (problems, share, a bar, kept or the drop reason), over the
    problems with N graded samples."""
    total = sum(result.histogram) or 1
    widest = max(result.histogram) or 1
    table = Table(
        title=f"correct samples per problem, over the {sum(result.histogram)} problems with {result.samples} graded "
        f"samples ({result.stats.get('model')}, T={result.stats.get('temperature')})",
        title_justify="left",
    )
    for name in ("correct", "problems", "share"):
        table.add_column(name, justify="right")
    table.add_column("")
    table.add_column("kept?")
    for c, k in enumerate(result.histogram):
        if c < result.min_correct:
            verdict = "dropped: " + reason_label("below_min", result)
        elif c > result.max_correct:
            verdict = "dropped: " + reason_label("above_max", result)
        else:
            verdict = "kept"
        bar = "#" * round(30 * k / widest)
        table.add_row(f"{c}/{result.samples}", str(k), f"{100 * k / total:.1f}%", bar, verdict)
    return table


def summary_lines(result: PassRateResult) -> Sequence[str]:
    """The lines printed under the table: kept, dropped by reason, what was outside the run or ignored."""
    lines = [
        f"kept {len(result.kept)} of {len(result.problems)} problems "
        f"({result.min_correct} <= correct <= {result.max_correct} of {result.samples}; N from {result.samples_from})"
        f" -> {result.out}"
    ]
    for reason in REASONS:
        if result.dropped[reason]:
            lines.append(f"dropped {len(result.dropped[reason])}: {reason_label(reason, result)}")
    if result.stats["infra_failed_samples"]:
        causes = ", ".join(f"{k} {v}" for k, v in sorted(result.stats["infra_failed_samples"].items()))
        lines.append(f"samples that failed in tirl (neither right nor wrong): {causes}")
    if result.not_evaluated:
        lines.append(f"{result.not_evaluated} problems of the source after the last evaluated one: not in this run")
    if result.ignored_samples:
        lines.append(
            f"{result.ignored_samples} samples with an index outside 0..{result.samples - 1} ignored "
            "(another run's in the same folder; --samples to count them)"
        )
    if result.bad_lines:
        lines.append(f"{result.bad_lines} lines of the run's samples file were not records (skipped)")
    lines.append(f"stats: {result.stats_file}")
    return lines


__all__ = [
    "PROVENANCE_KEYS",
    "REASONS",
    "PassRateError",
    "PassRateResult",
    "ProblemCount",
    "filter_pass_rate",
    "histogram_table",
    "reason_label",
    "stats_path",
    "summary_lines",
]
