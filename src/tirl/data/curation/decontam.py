"""Decontamination: drop a training problem that shares a word n-gram with an evaluation problem.

The report decontaminates its RL set with 8-gram overlap against the evaluation benchmarks (rStar2-Agent,
arXiv 2508.20722, section 4.1). :class:`ContaminationIndex` holds the word n-grams of every reference problem
(the letter and digit tokens of :func:`tirl.data.curation.text.word_tokens`, operators left out by
:func:`~tirl.data.curation.text.words_only`, so spacing, LaTeX spacing commands, case and punctuation do not
hide a copy) in one hash table from n-gram hash to the reference ids; checking a problem
costs one lookup per n-gram, so 100K problems take seconds. A problem with fewer than ``n`` tokens is
contaminated only when its whole token sequence equals a reference problem's.

Boilerplate: with the report's rule (any shared 8-gram) most matches on the packaged sources are benchmark
phrasing, not copied problems (``find the remainder when n is divided by`` 1000, ``frac m n where m and n are``
relatively prime, Asymptote's ``draw a - - b - - c``; see docs/data.md). ``common_refs=K`` ignores an n-gram
that occurs in at least K distinct reference problems: a phrase several benchmark problems share is phrasing.
A copied benchmark problem still shares its own n-grams. ``common_refs=0`` (the default) is the report's rule.

:func:`benchmark_references` loads the packaged evaluation sets (every built-in benchmark that tirl does not
generate: AIME24, AIME25, AMC23, HMMT25 Feb, MATH-500, GSM8K test) and any JSONL file with a ``problem``
field through :func:`tirl.data.benchmarks.load_benchmark`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tirl.data.benchmarks import BENCHMARKS, GENERATED_BENCHMARKS, load_benchmark
from tirl.data.curation.text import ngram_hashes, ngrams, word_tokens, words_only

DEFAULT_BENCHMARKS: tuple[str, ...] = tuple(name for name in BENCHMARKS if name not in GENERATED_BENCHMARKS)
"""The evaluation sets a curated problem must not overlap by default: every packaged benchmark that is not
generated (:data:`tirl.data.benchmarks.GENERATED_BENCHMARKS`), so a new one is covered by being registered."""


@dataclass(frozen=True)
class Contamination:
    """A training problem's overlap with the references.

    Attributes:
        reference_ids: ids of the reference problems it shares an n-gram with (``aime24/2024-I-1``), sorted.
        ngram: one shared n-gram, as text, for the report.
        shared: how many of the problem's n-grams occur in some reference problem.
    """

    reference_ids: tuple[str, ...]
    ngram: str
    shared: int


class ContaminationIndex:
    """The n-grams of reference problems, for :meth:`check`.

    Args:
        references: ``(reference id, problem text)`` pairs.
        n: n-gram length in comparison tokens (8 in the report).
        common_refs: ignore n-grams found in at least this many distinct reference problems (0: ignore none).

    Raises:
        ValueError: ``n < 1`` or ``common_refs < 0``.
    """

    def __init__(self, references: Iterable[tuple[str, str]], n: int = 8, common_refs: int = 0) -> None:
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if common_refs < 0:
            raise ValueError(f"common_refs must be >= 0, got {common_refs}")
        self.n = n
        self.common_refs = common_refs
        self._grams: dict[int, list[str]] = {}
        self._short: dict[tuple[str, ...], list[str]] = {}
        self.size = 0
        for ref_id, text in references:
            self.size += 1
            tokens = words_only(word_tokens(text))
            if len(tokens) < n:
                if tokens:
                    self._short.setdefault(tuple(tokens), []).append(ref_id)
            for gram in ngram_hashes(tokens, n) if len(tokens) >= n else ():
                ids = self._grams.setdefault(gram, [])
                if not ids or ids[-1] != ref_id:
                    ids.append(ref_id)
        self.ignored = 0
        if common_refs:
            common = [g for g, ids in self._grams.items() if len(set(ids)) >= common_refs]
            for g in common:
                del self._grams[g]
            self.ignored = len(common)

    def __len__(self) -> int:
        """Number of distinct reference n-grams in use (ignored common ones not counted; see ``ignored``)."""
        return len(self._grams)

    def check(self, tokens: Sequence[str]) -> Contamination | None:
        """The problem's overlap with the references, or None when it shares no n-gram.

        Args:
            tokens: the problem's comparison tokens (:func:`~tirl.data.curation.text.word_tokens`; operator
                tokens are left out here).
        """
        tokens = words_only(list(tokens))
        if len(tokens) < self.n:
            ids = self._short.get(tuple(tokens))
            return Contamination(tuple(sorted(set(ids))), " ".join(tokens), 1) if ids else None
        grams = ngram_hashes(tokens, self.n)
        hits = [g for g in grams if g in self._grams]
        if not hits:
            return None
        found: set[str] = set()
        for gram in hits:
            found.update(self._grams[gram])
        hit_set = set(hits)
        example = next(" ".join(t) for t in ngrams(tokens, self.n) if hash(t) in hit_set)
        return Contamination(tuple(sorted(found)), example, len(hits))


def benchmark_references(names: Sequence[str] = DEFAULT_BENCHMARKS) -> list[tuple[str, str]]:
    """``(id, problem)`` pairs of benchmarks by name or JSONL path, ids prefixed with the benchmark (``math500/...``).

    Raises:
        tirl.data.benchmarks.BenchmarkError: an unknown name or a malformed file.
    """
    refs = []
    for name in names:
        label = str(name).rsplit("/", 1)[-1].split(".")[0] if str(name).endswith(".jsonl") else str(name)
        refs.extend((f"{label}/{p.id}", p.problem) for p in load_benchmark(name))
    return refs


__all__ = ["Contamination", "ContaminationIndex", "DEFAULT_BENCHMARKS", "benchmark_references"]
