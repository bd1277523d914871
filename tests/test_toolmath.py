"""The toolmath task: generated tool-decisive problems and their fixed held-out split."""

from __future__ import annotations

import re

import pytest

from tirl.data.benchmarks import BENCHMARK_DIR, load_benchmark
from tirl.data.toolmath import HELDOUT_SEED, TOOLMATH_KINDS, heldout_problems, training_sources, write_heldout
from tirl.data.training import load_training_problems, synthetic_problems


def test_the_packaged_heldout_file_is_exactly_the_generator_output(tmp_path):
    rebuilt = tmp_path / "toolmath.jsonl"
    write_heldout(rebuilt)
    assert rebuilt.read_bytes() == (BENCHMARK_DIR / "toolmath.jsonl").read_bytes()


def test_heldout_has_at_least_100_problems_covering_every_kind_equally():
    problems = load_benchmark("toolmath")
    assert len(problems) >= 100
    kinds = [p.meta["kind"] for p in problems]
    assert set(kinds) == set(TOOLMATH_KINDS)
    assert len({kinds.count(k) for k in TOOLMATH_KINDS}) == 1


def test_heldout_answers_are_integers_and_ids_unique():
    problems = load_benchmark("toolmath")
    assert all(re.fullmatch(r"-?\d+", p.answer) for p in problems)
    assert len({p.id for p in problems}) == len(problems)


@pytest.mark.parametrize("seed", [0, 1, 7, 42, 12345])
def test_no_training_source_yields_a_heldout_problem(seed):
    heldout = {p.problem for p in heldout_problems()}
    raw = synthetic_problems(3000, seed=seed, kinds=TOOLMATH_KINDS)
    train = load_training_problems(training_sources(3000), seed=seed)
    assert heldout.isdisjoint(p.problem for p in train)
    # the filter removes exactly the colliding draws (small problem spaces do collide), nothing else
    assert len(train) == sum(p.problem not in heldout for p in raw)


def test_the_generator_alone_does_collide_with_the_heldout_split_so_the_filter_is_needed():
    heldout = {p.problem for p in heldout_problems()}
    assert any(p.problem in heldout for s in range(5) for p in synthetic_problems(3000, seed=s, kinds=TOOLMATH_KINDS))


def test_training_sources_load_the_same_kinds_as_the_heldout_split():
    problems = load_training_problems(training_sources(50, gsm8k=10), seed=3)
    kinds = {p.meta.get("kind") for p in problems if p.id.startswith("synthetic-")}
    assert kinds == set(TOOLMATH_KINDS)
    assert sum(p.id.startswith("gsm8k") for p in problems) == 10
    assert HELDOUT_SEED != 3


def test_generated_answers_are_right_for_a_few_checked_by_independent_code():
    import math

    import sympy

    for p in synthetic_problems(60, seed=5, kinds=("gcd", "divisor_count", "prime_count", "count_digit")):
        nums = [int(x) for x in re.findall(r"\d+", p.problem)]
        kind = p.meta["kind"]
        if kind == "gcd":
            expected = math.gcd(nums[0], nums[1])
        elif kind == "divisor_count":
            expected = sympy.divisor_count(nums[0])
        elif kind == "prime_count":
            expected = sympy.primepi(nums[0] - 1)
        else:
            d, n = nums[0], nums[2]
            expected = "".join(map(str, range(1, n + 1))).count(str(d))
        assert int(p.answer) == expected, p.problem


def test_training_sources_reject_negative_counts():
    with pytest.raises(ValueError):
        training_sources(-1)
