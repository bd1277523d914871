"""Duplicate removal (tirl.data.curation.dedup): exact copies, near-copies, variants kept, exactness of the
prefix filter against brute force."""

from __future__ import annotations

import random

import pytest

from tirl.data.curation.dedup import find_duplicates
from tirl.data.curation.text import ngram_hashes, word_tokens


def run(texts: list[str], answers: list[str] | None = None, n: int = 3, threshold: float = 0.7):
    tokens = [word_tokens(t) for t in texts]
    return find_duplicates(tokens, [ngram_hashes(t, n) for t in tokens], threshold, answers)


GSM = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)


def test_an_exact_copy_with_other_spacing_and_case_is_a_duplicate_of_the_first() -> None:
    result = run([GSM, "Another problem about apples and pears entirely.", GSM.upper().replace(" ", "  ")])
    assert result[0] is None and result[1] is None
    assert result[2] is not None and result[2].index == 0 and result[2].exact


def test_a_reworded_copy_with_the_same_answer_is_a_near_duplicate() -> None:
    reworded = GSM.replace("altogether", "in total")
    result = run([GSM, reworded], answers=["72", "72"])
    assert result[1] is not None and not result[1].exact and 0.7 <= result[1].similarity < 1.0


def test_a_variant_with_a_different_answer_is_kept() -> None:
    # MATH train has both: same piecewise f, different question and answer
    f = "Let \\[f(x) = \\begin{cases} 2x + 9 &\\text{if }x<-2, \\\\ 5-2x&\\text{if }x\\ge -2. \\end{cases}\\]"
    texts = [f + " Find $f(-7).$", f + " Find $f(3).$"]
    assert run(texts, answers=["-5", "-1"]) == [None, None]
    assert run(texts, answers=["-5", "-5"])[1] is not None  # the same pair with one answer is a near-duplicate


def test_below_the_threshold_is_kept() -> None:
    other = "Natalia bought 48 stamps in April and sold a third of them in June. How many stamps are left?"
    assert run([GSM, other], answers=["72", "72"]) == [None, None]


def test_a_duplicate_points_at_a_kept_problem_not_at_a_dropped_one() -> None:
    result = run([GSM, GSM, GSM])
    assert [r.index if r else None for r in result] == [None, 0, 0]


def test_the_prefix_filter_finds_exactly_the_pairs_brute_force_finds() -> None:
    rng = random.Random(3)
    vocab = [f"w{i}" for i in range(30)]
    base = [[rng.choice(vocab) for _ in range(rng.randint(8, 25))] for _ in range(40)]
    docs = []
    for doc in base:  # each base doc plus a few mutated copies
        docs.append(doc)
        for _ in range(3):
            copy = list(doc)
            for _ in range(rng.randint(0, 3)):
                copy[rng.randrange(len(copy))] = rng.choice(vocab)
            docs.append(copy)
    rng.shuffle(docs)
    grams = [ngram_hashes(d, 3) for d in docs]
    got = find_duplicates(docs, grams, 0.6)
    kept: list[int] = []
    for i, d in enumerate(docs):  # brute force with the same keep-first rule
        exact = next((j for j in range(i) if docs[j] == d), None)
        if exact is not None:
            assert got[i] is not None and got[i].exact
            continue
        sims = [(len(grams[i] & grams[j]) / len(grams[i] | grams[j]), j) for j in kept]
        best = max((s for s in sims if s[0] >= 0.6), key=lambda s: (s[0], -s[1]), default=None)
        if best is None:
            assert got[i] is None, i
            kept.append(i)
        else:
            assert got[i] is not None and got[i].index == best[1] and got[i].similarity == pytest.approx(best[0])


def test_bad_arguments() -> None:
    with pytest.raises(ValueError):
        find_duplicates([["a"]], [], 0.8)
    with pytest.raises(ValueError):
        find_duplicates([["a"]], [{1}], 0.0)
