"""GRPO advantages over the kept group: per group, NaN-free, masked unscorable rewards, std floor (F82)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.algo.advantages import group_advantages, grouped_advantages

F82_GROUPS = [[1, 1, 1, 1], [1, 0, 0, 0], [None, 1, 0, 0], [0.35] * 7 + [0.95]]


def test_f82_all_equal_group_is_zero():
    assert group_advantages(F82_GROUPS[0]) == [0.0, 0.0, 0.0, 0.0]


def test_f82_one_correct_is_finite_and_matches_eq7():
    adv = group_advantages(F82_GROUPS[1])
    mean, std = 0.25, math.sqrt(sum((r - 0.25) ** 2 for r in [1, 0, 0, 0]) / 3)
    assert adv == pytest.approx([(r - mean) / (std + 1e-6) for r in [1, 0, 0, 0]])


def test_f82_none_reward_masked():
    adv = group_advantages(F82_GROUPS[2])
    assert adv[0] == 0.0
    # the other three are normalised among themselves
    assert adv[1:] == pytest.approx(group_advantages([1, 0, 0]))
    assert group_advantages([float("nan"), 1, 0]) == pytest.approx([0.0] + group_advantages([1, 0]))


def test_f82_no_amplification():
    adv = group_advantages(F82_GROUPS[3])
    assert all(math.isfinite(a) for a in adv)
    assert max(abs(a) for a in adv) <= 7 / math.sqrt(8) + 1e-9
    # a group whose rewards differ only by float noise is not blown up to unit advantages
    noisy = group_advantages([0.35] * 7 + [0.35 + 1e-9])
    assert max(abs(a) for a in noisy) < 1e-6


def test_advantages_are_per_group_not_per_batch():
    flat = [r for g in F82_GROUPS[:2] for r in g]
    adv = grouped_advantages(flat, 4)
    assert adv[:4] == [0.0] * 4  # batch normalisation would make these positive
    assert adv[4:] == pytest.approx(group_advantages(F82_GROUPS[1]))


def test_grouped_rejects_ragged_batches():
    with pytest.raises(ValueError):
        grouped_advantages([1, 0, 1], 2)


def test_singleton_and_empty_groups():
    assert group_advantages([1.0]) == [0.0]
    assert group_advantages([None, 1.0]) == [0.0, 0.0]
    assert group_advantages([]) == []


def test_population_std_and_unscaled_options():
    assert group_advantages([1, 0], unbiased=False) == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)])
    assert group_advantages([1, 0, 0, 0], scale=False) == pytest.approx([0.75, -0.25, -0.25, -0.25])


def test_invalid_arguments():
    with pytest.raises(ValueError):
        group_advantages([1, 0], eps=-1)
    with pytest.raises(ValueError):
        group_advantages([1, float("inf")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.just(float("nan")), st.floats(-10, 10)), min_size=0, max_size=40))
def test_advantages_finite_bounded_and_centred(rewards):
    adv = group_advantages(rewards)
    assert len(adv) == len(rewards)
    assert all(math.isfinite(a) for a in adv)
    scored = [a for a, r in zip(adv, rewards) if r is not None and not math.isnan(r)]
    n = len(scored)
    if n >= 2:
        assert max(abs(a) for a in scored) <= (n - 1) / math.sqrt(n) + 1e-6
        assert abs(sum(scored)) < 1e-6 * max(1.0, n)
    for a, r in zip(adv, rewards):
        if r is None or math.isnan(r):
            assert a == 0.0
