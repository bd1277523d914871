"""Selection rules by name (tirl.algo.selection): each rule on small groups, the registry, the recipe keys."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tirl.algo.roc import Candidate, RocConfig, select_group
from tirl.algo.selection import RULES, apply_rule, get_rule, register_rule, rule_name
from tirl.train.config import load_config


def _group(rewards, penalties=None):
    penalties = penalties or [0.0] * len(rewards)
    return [Candidate(reward=r, penalty=p) for r, p in zip(rewards, penalties)]


def test_the_four_rules_are_registered_with_their_sampling():
    assert {"roc_paper", "roc_release", "random", "all"} <= set(RULES)
    assert get_rule("all").oversamples is False
    assert all(get_rule(n).oversamples for n in ("roc_paper", "roc_release", "random"))
    with pytest.raises(ValueError, match="roc.rule to one of"):
        get_rule("nope")


def test_roc_release_keeps_the_lowest_penalty_positives_deterministically():
    group = _group([1, 1, 1, 1, 0, 0, 0, 0], [0.5, 0.0, 1.0, 0.0, 0, 0, 0, 0])
    cfg = RocConfig(min_per_class=1)
    sel = apply_rule("roc_release", group, 4, 0, cfg)
    assert sel.indices == [1, 3, 4, 5] and sel.status == "selected"
    assert apply_rule("roc_release", group, 4, 99, cfg).indices == sel.indices  # no randomness


def test_roc_paper_is_select_group_in_paper_mode():
    group = _group([1, 1, 1, 1, 1, 0, 0, 0], [0.5, 0.0, 1.0, 0.0, 0.2, 0, 0, 0])
    cfg = RocConfig(min_per_class=1)
    for seed in range(20):
        expected = select_group(group, 4, random.Random(seed), "paper", min_per_class=1).indices
        assert apply_rule("roc_paper", group, 4, random.Random(seed), cfg).indices == expected
    # the two zero-penalty positives are always taken first
    assert all({1, 3} <= set(apply_rule("roc_paper", group, 4, s, cfg).indices) for s in range(20))


def test_random_rule_is_uniform_and_blind_to_penalties():
    group = _group([1, 1, 0, 0, 0, 0], [0.0, 2.0, 0, 0, 0, 0])
    counts: Counter[int] = Counter()
    rng = random.Random(0)
    trials = 3000
    for _ in range(trials):
        sel = apply_rule("random", group, 3, rng)
        assert len(sel.indices) == 3 and sel.kept_pos + sel.kept_neg == 3 and sel.status == "selected"
        counts.update(sel.indices)
    # every index is kept with probability 3/6, the zero- and the high-penalty positive alike
    for i in range(6):
        assert abs(counts[i] / trials - 0.5) < 0.05, counts


def test_random_rule_never_keeps_unscored_and_honours_the_shared_cases():
    group = _group([1, None, 0, float("nan"), 1, 0])
    for seed in range(10):
        sel = apply_rule("random", group, 3, seed)
        assert not {1, 3} & set(sel.indices) and len(sel.indices) == 3
    assert apply_rule("random", _group([1, 0, None]), 3, 0).status == "undersized"
    assert apply_rule("random", _group([None, None]), 1, 0).status == "empty"
    eq = apply_rule("random", _group([1, 1, 1, 1]), 2, 0, RocConfig(drop_all_equal=True))
    assert eq.status == "dropped_equal" and eq.indices == []


def test_all_keeps_every_scored_trajectory():
    sel = apply_rule("all", _group([1, 0, 0, 1]), 4, 0)
    assert sel.indices == [0, 1, 2, 3] and sel.status == "selected" and (sel.kept_pos, sel.kept_neg) == (2, 2)
    short = apply_rule("all", _group([1, None, 0, 1]), 4, 0)
    assert short.indices == [0, 2, 3] and short.status == "undersized"


def test_rule_name_keeps_the_old_keys_working():
    assert rule_name(RocConfig()) == "roc_paper"
    assert rule_name(RocConfig(mode="topk")) == "roc_release"
    assert rule_name(RocConfig(enabled=False)) == "all"
    assert rule_name(RocConfig(rule="random")) == "random"
    assert rule_name(RocConfig(enabled=False, rule="all")) == "all"
    with pytest.raises(ValueError, match="drop one"):
        rule_name(RocConfig(enabled=False, rule="random"))


def test_recipes_choose_the_rule_and_validation_checks_it():
    cfg = load_config(
        None, ["roc.rule=random", "rollout.group_size=4", "problems_per_step=1", "optim.per_device_train_batch_size=4"]
    )
    cfg.validate()
    assert rule_name(cfg.roc) == "random"
    with pytest.raises(ValueError, match="unknown selection rule"):
        load_config(None, ["roc.rule=bogus"]).validate()
    with pytest.raises(ValueError, match="oversample >= 2"):
        load_config(None, ["roc.rule=roc_release", "rollout.oversample=1"]).validate()
    plain = load_config(
        None,
        [
            "roc.rule=all",
            "rollout.oversample=1",
            "rollout.group_size=4",
            "problems_per_step=1",
            "optim.per_device_train_batch_size=4",
        ],
    )
    plain.validate()
    assert rule_name(plain.roc) == "all"


def test_a_registered_rule_is_callable_by_name():
    @register_rule("first_k_test", oversamples=True, description="the first K scored (test only)")
    def first_k(group, target_size, rng, config):
        return select_group(group, target_size, rng, "topk", min_per_class=0)

    try:
        assert apply_rule("first_k_test", _group([0, 0, 0, 0]), 2, 0).indices == [0, 1]
    finally:
        del RULES["first_k_test"]
