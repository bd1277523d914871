"""The toolfix task: generated problems whose obvious program fails, exact answers, a held-out split."""

from __future__ import annotations

import math
import sys

import pytest

from tirl.data.benchmarks import load_benchmark
from tirl.data.toolfix import (
    HELDOUT_PER_KIND,
    TOOLFIX_KINDS,
    heldout_problems,
    heldout_texts,
    toolfix_problems,
    training_problems,
)
from tirl.data.training import load_training_problems


def test_generation_is_deterministic_and_cycles_kinds():
    a, b = toolfix_problems(12, seed=3), toolfix_problems(12, seed=3)
    assert [p.to_dict() for p in a] == [p.to_dict() for p in b]
    assert [p.meta["kind"] for p in a[:6]] == list(TOOLFIX_KINDS)
    assert toolfix_problems(6, seed=4)[0].problem != a[0].problem
    with pytest.raises(ValueError, match="unknown toolfix kinds"):
        toolfix_problems(1, kinds=["nope"])


def test_answers_are_exact():
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        for p in toolfix_problems(30, seed=1):
            kind, text, ans = p.meta["kind"], p.problem, int(p.answer)
            nums = [int(x) for x in "".join(c if c.isdigit() else " " for c in text).split()]
            if kind == "digit_sum_power":
                b, e = nums
                assert ans == sum(map(int, str(b**e)))
            elif kind == "digit_count_power":
                d, b, e = nums
                assert ans == str(b**e).count(str(d))
            elif kind == "digit_sum_factorial":
                assert ans == sum(map(int, str(math.factorial(nums[0]))))
            elif kind == "leading_digits_power":
                b, e = nums[0], nums[1]
                assert ans == int(str(b**e)[:6])
            elif kind == "trailing_zeros_factorial":
                s = str(math.factorial(nums[0]))
                assert ans == len(s) - len(s.rstrip("0"))
            else:
                s = str(math.factorial(nums[0]))
                assert ans == len(s) - s.count("0")
    finally:
        sys.set_int_max_str_digits(old)
    assert sys.get_int_max_str_digits() == old  # the generator restores the interpreter's limit


def test_many_problems_exceed_the_int_string_limit_and_some_do_not():
    # the point of the task: the obvious str() program fails on most, not all
    limit = sys.get_int_max_str_digits() or 4300
    sizes = []
    for p in toolfix_problems(120, seed=2, kinds=["digit_sum_power", "digit_count_power", "leading_digits_power"]):
        nums = [int(x) for x in "".join(c if c.isdigit() else " " for c in p.problem).split()]
        b, e = nums[-2], nums[-1]
        sizes.append(math.floor(e * math.log10(b)) + 1)
    over = sum(s > limit for s in sizes)
    assert 0.4 * len(sizes) < over < len(sizes)


def test_heldout_split_is_fixed_and_never_trained_on():
    held = heldout_problems()
    assert len(held) == HELDOUT_PER_KIND * len(TOOLFIX_KINDS)
    assert [p.problem for p in load_benchmark("toolfix")] == [p.problem for p in held]
    train = load_training_problems(["toolfix:600"], seed=0)
    assert train and not {p.problem for p in train} & heldout_texts()
    assert {p.meta["kind"] for p in train} == set(TOOLFIX_KINDS)
    assert len(training_problems(60, seed=0)) <= 60
