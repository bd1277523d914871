"""Decontamination (tirl.data.curation.decontam) against the packaged benchmarks, with real problems."""

from __future__ import annotations

import json
import re

import pytest

from tirl.data import load_benchmark
from tirl.data.curation.decontam import ContaminationIndex, benchmark_references
from tirl.data.curation.text import word_tokens
from tirl.data.training import load_rl_set


@pytest.fixture(scope="module")
def index() -> ContaminationIndex:
    return ContaminationIndex(benchmark_references(), n=8)


def disguise(text: str) -> str:
    """A copy as a scraper might make it: other spacing, LaTeX spacing commands, other punctuation."""
    text = re.sub(r"\s+", "   ", text)
    text = text.replace("=", "\\,=\\,").replace("+", "\\;+\\;").replace("$", "$\\! ")
    text = text.replace(",", " ;").replace(".", " !").replace("?", " .")
    return "\n" + text.upper() + "\n"


def test_a_disguised_math500_problem_is_caught_with_its_id(index: ContaminationIndex) -> None:
    problem = load_benchmark("math500")[0]  # polar coordinates of (0,3): LaTeX, numbers, punctuation
    copy = disguise(problem.problem)
    assert copy != problem.problem and copy.lower() != problem.problem.lower()
    hit = index.check(word_tokens(copy))
    assert hit is not None and f"math500/{problem.id}" in hit.reference_ids


@pytest.mark.parametrize("name", ["aime24", "aime25", "amc23", "hmmt25_feb"])
def test_every_packaged_benchmark_is_indexed(index: ContaminationIndex, name: str) -> None:
    problem = load_benchmark(name)[3]
    hit = index.check(word_tokens(disguise(problem.problem)))
    assert hit is not None and f"{name}/{problem.id}" in hit.reference_ids


def test_seven_shared_words_are_not_a_match_and_eight_are() -> None:
    ref = "alpha beta gamma delta epsilon zeta eta theta iota kappa"
    idx = ContaminationIndex([("ref/1", ref)], n=8)
    seven = "one two three alpha beta gamma delta epsilon zeta eta four five"
    eight = "one two three alpha beta gamma delta epsilon zeta eta theta four"
    assert idx.check(word_tokens(seven)) is None
    hit = idx.check(word_tokens(eight))
    assert hit is not None and hit.reference_ids == ("ref/1",)
    assert hit.ngram == "alpha beta gamma delta epsilon zeta eta theta"


def test_a_real_training_problem_without_overlap_is_clean(index: ContaminationIndex) -> None:
    natalia = load_rl_set("gsm8k", 1)[0]
    assert "Natalia" in natalia.problem and index.check(word_tokens(natalia.problem)) is None


def test_short_problems_match_only_whole_equal_texts() -> None:
    idx = ContaminationIndex([("ref/1", "Compute $7!$."), ("ref/2", "a b c d e f g h i j")], n=8)
    assert idx.check(word_tokens("compute 7")) is not None
    assert idx.check(word_tokens("compute 8")) is None
    assert idx.check(word_tokens("b c d")) is None  # a short text inside a long reference is not a copy


def test_common_phrasing_can_be_ignored() -> None:
    phrase = "find the remainder when n is divided by 1000"
    refs = [(f"ref/{i}", f"topic{i} something{i} {phrase}") for i in range(3)]
    train = word_tokens(f"A different question entirely. {phrase}.")
    assert ContaminationIndex(refs, n=8).check(train) is not None  # the report's rule: any shared 8-gram
    lenient = ContaminationIndex(refs, n=8, common_refs=3)
    assert lenient.check(train) is None and lenient.ignored > 0
    assert lenient.check(word_tokens(refs[1][1])) is not None  # a real copy still shares its own n-grams


def test_user_files_are_references(tmp_path) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(
        json.dumps(
            {
                "id": "q1",
                "problem": "How many lattice points lie strictly inside the big pentagon drawn on the board?",
                "answer": "3",
            }
        )
        + "\n"
    )
    refs = benchmark_references([str(path)])
    assert refs[0][0] == "mine/q1"
    hit = ContaminationIndex(refs).check(word_tokens("how many LATTICE points lie strictly inside the big pentagon"))
    assert hit is not None and hit.reference_ids == ("mine/q1",)


def test_every_registered_real_benchmark_is_decontaminated_against_by_default():
    """A benchmark added to the registry is covered without touching the curation code (issue 44)."""
    from tirl.data.benchmarks import BENCHMARKS, GENERATED_BENCHMARKS
    from tirl.data.curation.decontam import DEFAULT_BENCHMARKS

    assert "gsm8k" in DEFAULT_BENCHMARKS and "math500" in DEFAULT_BENCHMARKS
    assert set(DEFAULT_BENCHMARKS) == set(BENCHMARKS) - GENERATED_BENCHMARKS
