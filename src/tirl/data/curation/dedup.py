"""Duplicate removal inside a problem collection: exact duplicates of the normalised text, then near-duplicates
by word n-gram Jaccard similarity.

For problems in order (the first of a group is kept, so put preferred sources first):

* *exact*: two problems with the same comparison tokens (:func:`tirl.data.curation.text.word_tokens`: spacing,
  LaTeX spacing commands, case and punctuation do not count);
* *near*: the Jaccard similarity of the problems' word ``n``-gram sets (``|A & B| / |A | B|``) is at least
  ``threshold`` with an earlier kept problem *that has the same answer* (when answers are given). Texts that
  differ only in a number usually ask different questions (MATH train has ``Find $f(-7)$`` and ``Find $f(3)$``
  for one piecewise ``f``, and the letters of MADAM and of RADII to arrange), so a different answer means a
  variant, not a copy.

Near-duplicates are found exactly (no sampling, unlike MinHash) and fast with the prefix filter of AllPairs
(Bayardo, Ma and Srikant, "Scaling up all pairs similarity search", WWW 2007): under one global order of the
n-grams (rarest first), two sets with Jaccard >= t share at least one n-gram among the first
``|A| - ceil(t |A|) + 1`` of each, so only those prefix n-grams are indexed and probed, and each candidate pair
is then checked with the exact similarity.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class DuplicateOf:
    """Why a problem is a duplicate: the index of the earlier kept problem, the similarity, and the kind.

    Attributes:
        index: position (in the input order) of the kept problem it duplicates.
        similarity: Jaccard similarity of the n-gram sets (1.0 for exact duplicates).
        exact: True when the comparison tokens are identical.
    """

    index: int
    similarity: float
    exact: bool


def find_duplicates(
    tokens: Sequence[Sequence[str]],
    gram_sets: Sequence[set[int]],
    threshold: float = 0.8,
    answers: Sequence[str] | None = None,
) -> list[DuplicateOf | None]:
    """Mark each problem that duplicates an earlier kept one.

    Args:
        tokens: comparison tokens per problem (:func:`~tirl.data.curation.text.word_tokens`).
        gram_sets: n-gram hash sets per problem (:func:`~tirl.data.curation.text.ngram_hashes`), same order.
        threshold: the Jaccard similarity from which two problems are near-duplicates, in (0, 1]; 1.0 finds
            equal n-gram sets only.

    Returns:
        Per problem, None when kept, else the :class:`DuplicateOf` (for several matches: the most similar
        one, then the earliest).

    Raises:
        ValueError: different lengths of ``tokens`` and ``gram_sets``, or a threshold outside (0, 1].
    """
    if len(tokens) != len(gram_sets):
        raise ValueError(f"{len(tokens)} token lists but {len(gram_sets)} n-gram sets")
    if answers is not None and len(answers) != len(tokens):
        raise ValueError(f"{len(tokens)} token lists but {len(answers)} answers")
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    result: list[DuplicateOf | None] = [None] * len(tokens)
    first: dict[tuple[str, ...], int] = {}
    for i, toks in enumerate(tokens):
        key = tuple(toks)
        if key in first:
            result[i] = DuplicateOf(first[key], 1.0, True)
        else:
            first[key] = i
    df: Counter[int] = Counter()
    for i, grams in enumerate(gram_sets):
        if result[i] is None:
            df.update(grams)
    index: dict[int, list[int]] = {}
    for i, grams in enumerate(gram_sets):
        if result[i] is not None or not grams:
            continue
        size = len(grams)
        order = sorted(grams, key=lambda g: (df[g], g))
        prefix = order[: size - math.ceil(threshold * size - 1e-9) + 1]
        best: DuplicateOf | None = None
        seen: set[int] = set()
        for gram in prefix:
            for j in index.get(gram, ()):
                if j in seen:
                    continue
                seen.add(j)
                if answers is not None and answers[j] != answers[i]:
                    continue
                other = gram_sets[j]
                if len(other) < threshold * size or size < threshold * len(other):
                    continue
                common = len(grams & other) if size <= len(other) else len(other & grams)
                similarity = common / (size + len(other) - common)
                if similarity >= threshold and (
                    best is None or similarity > best.similarity or (similarity == best.similarity and j < best.index)
                ):
                    best = DuplicateOf(j, similarity, False)
        if best is not None:
            result[i] = best
            continue
        for gram in prefix:
            index.setdefault(gram, []).append(i)
    return result


__all__ = ["DuplicateOf", "find_duplicates"]
