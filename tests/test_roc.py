"""Resample-on-Correct: penalties from structured records, class quotas, selection in paper and topk modes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tirl.algo.roc import (
    Candidate,
    RocConfig,
    candidate,
    class_quotas,
    p_err,
    p_format,
    p_total,
    select,
    select_group,
)
from tirl.protocol import ToolCall, ToolCallError, ToolCallRecord, Trajectory, TurnRecord
from tirl.sandbox import ExecutionResult

# ---------------------------------------------------------------------------------------------------------------
# helpers


def _call(cls: str, stdout: str = "") -> ToolCallRecord:
    if cls == "parse_error":
        return ToolCallRecord(call=ToolCallError(kind="invalid_json", message="bad"), result=None, cls="parse_error")
    status = {"ok": "ok", "error": "error", "timeout": "timeout"}[cls]
    return ToolCallRecord(
        call=ToolCall(name="execute_python_code_with_standard_io", arguments={"code": "print(1)"}),
        result=ExecutionResult(status=status, stdout=stdout),
        cls=cls,  # type: ignore[arg-type]
        response_text=stdout,
    )


def _traj(turns: list[tuple[list[ToolCallRecord], int]]) -> Trajectory:
    """A trajectory from (tool-call records, answer blocks) per assistant turn."""
    return Trajectory(
        prompt_ids=[1],
        turns=[TurnRecord(text="", tool_calls=calls, answer_blocks=answers) for calls, answers in turns],
    )


def _group(n_pos: int, n: int = 32, penalty: float = 0.5) -> list[Candidate]:
    """n_pos positives spread over the group (every other slot first), the rest negatives."""
    slots = list(range(0, n, 2)) + list(range(1, n, 2))
    pos = set(slots[:n_pos])
    return [Candidate(reward=1.0 if i in pos else 0.0, penalty=penalty) for i in range(n)]


# The release's counts for 32 -> 16 (the public release, github.com/microsoft/rStar at ecbfb94: banker's rounding of
# proportional quotas, minimum 2 per class with `<=` comparisons). The rows the notes list are 1-6, 16, 29-31; the
# others follow from the same rule and are checked against it below.
TOPK_TABLE = {
    0: (0, 16),
    1: (1, 15),
    2: (2, 14),
    3: (2, 14),
    4: (2, 14),
    5: (2, 14),
    6: (3, 13),
    7: (4, 12),
    8: (4, 12),
    9: (4, 12),
    10: (5, 11),
    11: (6, 10),
    12: (6, 10),
    13: (6, 10),
    14: (7, 9),
    15: (8, 8),
    16: (8, 8),
    17: (8, 8),
    18: (9, 7),
    19: (10, 6),
    20: (10, 6),
    21: (10, 6),
    22: (11, 5),
    23: (12, 4),
    24: (12, 4),
    25: (12, 4),
    26: (13, 3),
    27: (14, 2),
    28: (14, 2),
    29: (14, 2),
    30: (14, 2),
    31: (15, 1),
    32: (16, 0),
}
NOTES_ROWS = {
    1: (1, 15),
    2: (2, 14),
    3: (2, 14),
    4: (2, 14),
    5: (2, 14),
    6: (3, 13),
    16: (8, 8),
    29: (14, 2),
    30: (14, 2),
    31: (15, 1),
}


# ---------------------------------------------------------------------------------------------------------------
# penalties


def test_p_err_no_call_is_half():
    assert p_err(_traj([([], 1)])) == 0.5


def test_p_err_counts_structured_classes_not_text():
    # a successful call whose output mentions "error" is not a failure; timeout and parse errors are
    traj = _traj(
        [
            ([_call("ok", stdout="relative error 1e-9")], 0),
            ([_call("timeout"), _call("parse_error")], 0),
            ([_call("error")], 1),
        ]
    )
    assert p_err(traj) == pytest.approx(3 / 4)


def test_p_err_all_ok_is_zero():
    assert p_err(_traj([([_call("ok"), _call("ok")], 0), ([], 1)])) == 0.0


@pytest.mark.parametrize(
    "answers_per_turn,expected",
    [([0, 0], 1.0), ([0, 1], 0.0), ([1, 1, 1, 0], 0.5), ([5], 1.0), ([1, 0, 0, 0, 0, 0, 0, 0, 0, 1], 0.1)],
)
def test_p_format(answers_per_turn, expected):
    assert p_format(_traj([([], a) for a in answers_per_turn])) == pytest.approx(expected)


def test_p_total_switches():
    traj = _traj([([_call("error")], 0), ([], 0)])  # p_err 1, p_format 1
    assert p_total(traj) == 2.0
    assert p_total(traj, use_error_penalty=False) == 1.0
    assert p_total(traj, use_format_penalty=False) == 1.0
    assert p_total(traj, use_error_penalty=False, use_format_penalty=False) == 0.0


def test_candidate_respects_config_switches():
    traj = _traj([([_call("error"), _call("ok")], 0), ([], 1)])
    c = candidate(traj, 1.0, RocConfig(use_format_penalty=False))
    assert (c.p_err, c.p_format, c.penalty) == (0.5, 0.0, 0.5)
    assert candidate(traj, 1.0, RocConfig(use_error_penalty=False)).penalty == 0.0


# ---------------------------------------------------------------------------------------------------------------
# quotas: every number of positives 0..32, selecting 16 of 32


def test_topk_table_matches_release_rows():
    for n_pos, expected in NOTES_ROWS.items():
        assert TOPK_TABLE[n_pos] == expected


@pytest.mark.parametrize("n_pos", range(33))
def test_topk_kept_counts(n_pos):
    group = _group(n_pos)
    sel = select_group(group, 16, mode="topk")
    assert (sel.kept_pos, sel.kept_neg) == TOPK_TABLE[n_pos]
    kept_rewards = Counter(group[i].reward for i in sel.indices)
    assert (kept_rewards[1.0], kept_rewards[0.0]) == TOPK_TABLE[n_pos]
    assert len(set(sel.indices)) == 16


@pytest.mark.parametrize("n_pos", range(33))
def test_paper_kept_counts(n_pos):
    n_neg = 32 - n_pos
    # paper: floor(|O_neg| / 2) negatives, the rest positives; then at least min(2, class size) per class
    neg_k = n_neg // 2
    if neg_k < min(2, n_neg):
        neg_k = min(2, n_neg)
    pos_k = 16 - neg_k
    if pos_k < min(2, n_pos):
        pos_k, neg_k = min(2, n_pos), 16 - min(2, n_pos)
    group = _group(n_pos)
    sel = select_group(group, 16, random.Random(n_pos), mode="paper")
    assert (sel.kept_pos, sel.kept_neg) == (pos_k, neg_k)
    assert len(set(sel.indices)) == 16 and all(0 <= i < 32 for i in sel.indices)


@pytest.mark.parametrize("mode", ["paper", "topk"])
@pytest.mark.parametrize("n,k", [(8, 4), (20, 16), (48, 16), (31, 16), (7, 3), (12, 5)])
def test_quotas_sum_and_bounds_for_any_size(mode, n, k):
    m = min(2, k // 2)
    for n_pos in range(n + 1):
        pos_k, neg_k = class_quotas(n_pos, n - n_pos, k, mode, m)
        assert pos_k + neg_k == k
        assert 0 <= pos_k <= n_pos and 0 <= neg_k <= n - n_pos
        assert pos_k >= min(m, n_pos) and neg_k >= min(m, n - n_pos)


def test_paper_quota_keeps_success_ratio():
    for n_pos in range(2, 31):
        pos_k, _ = class_quotas(n_pos, 32 - n_pos, 16, "paper", 0)
        assert abs(pos_k / 16 - n_pos / 32) <= 1 / 32 + 1e-12


def test_min_per_class_configurable():
    assert class_quotas(1, 31, 16, "paper", 0) == (1, 15)
    assert class_quotas(6, 26, 16, "paper", 4) == (4, 12)
    assert class_quotas(30, 2, 16, "paper", 4) == (14, 2)  # clipped to what exists


def test_invalid_configurations_raise():
    with pytest.raises(ValueError):
        class_quotas(3, 3, 6)  # nothing to down-sample
    with pytest.raises(ValueError):
        class_quotas(3, 5, 4, "paper", 3)  # 2 * min > target
    with pytest.raises(ValueError):
        select_group(_group(4, 8), 4, mode="best")
    with pytest.raises(ValueError):
        RocConfig(min_per_class=9).validate(16)
    with pytest.raises(ValueError):
        select_group([Candidate(1.0, float("nan"))] * 3 + [Candidate(0.0)] * 3, 4)


# ---------------------------------------------------------------------------------------------------------------
# which ones are kept


def test_paper_mode_prefers_low_penalty_positives():
    # 16 positives (8 clean with p=0.1 at even slots, 8 noisy with p=1.0 at odd slots) and 16 negatives
    group = [Candidate(1.0, 0.1 if i % 2 == 0 else 1.0) for i in range(16)] + [Candidate(0.0, 0.0)] * 16
    rng = random.Random(1234)
    kept = Counter()
    trials = 1000
    for _ in range(trials):
        kept.update(select(group, 16, rng, "paper"))
    clean = [kept[i] / trials for i in range(0, 16, 2)]
    noisy = [kept[i] / trials for i in range(1, 16, 2)]
    assert min(clean) > max(noisy) + 0.3
    # but it is sampling, not top-k: noisy positives are still kept sometimes
    assert sum(noisy) > 0


def test_paper_mode_negatives_uniform_and_penalty_blind():
    # negatives carry very different penalties; they must be kept uniformly regardless
    group = [Candidate(1.0, 0.2)] * 8 + [Candidate(0.0, 0.0 if i < 12 else 2.0) for i in range(24)]
    rng = random.Random(7)
    kept = Counter()
    trials = 1500
    for _ in range(trials):
        kept.update(i for i in select(group, 16, rng, "paper") if i >= 8)
    freqs = [kept[i] / trials for i in range(8, 32)]
    expected = 12 / 24  # neg quota floor(24/2) = 12
    assert all(abs(f - expected) < 0.06 for f in freqs)


def test_paper_mode_zero_penalty_positives_first():
    group = [Candidate(1.0, 0.0), Candidate(1.0, 0.5), Candidate(1.0, 0.0), Candidate(1.0, 1.5)] + [Candidate(0.0)] * 4
    for seed in range(50):
        sel = select_group(group, 4, random.Random(seed), "paper", min_per_class=1)
        assert sel.kept_pos == 2
        assert {i for i in sel.indices if i < 4} == {0, 2}


def test_paper_mode_is_seeded():
    group = _group(12)
    group = [Candidate(c.reward, 0.1 + 0.05 * i) for i, c in enumerate(group)]
    assert select(group, 16, random.Random(5)) == select(group, 16, random.Random(5))
    draws = {tuple(select(group, 16, random.Random(s))) for s in range(20)}
    assert len(draws) > 1


def test_topk_lowest_penalty_positives_stable_ties_and_first_negatives():
    penalties = [0.5, 0.0, 0.5, 1.0, 0.5, 0.0]
    group = [Candidate(1.0, p) for p in penalties] + [Candidate(0.0, 9.0 - i) for i in range(6)]
    sel = select_group(group, 6, mode="topk", min_per_class=1)
    assert sel.kept_pos == 3 and sel.kept_neg == 3
    # positives: the two zeros, then the first 0.5 in rollout order (index 0); negatives: first three
    assert sel.indices == [0, 1, 5, 6, 7, 8]


def test_topk_is_deterministic():
    group = _group(9)
    assert select(group, 16, random.Random(1), "topk") == select(group, 16, random.Random(2), "topk")


@pytest.mark.parametrize("mode", ["paper", "topk"])
@pytest.mark.parametrize("reward", [0.0, 1.0])
def test_all_equal_groups(mode, reward):
    group = [Candidate(reward, 0.3)] * 32
    sel = select_group(group, 16, random.Random(0), mode)
    assert len(sel.indices) == 16 and sel.status == "selected"
    dropped = select_group(group, 16, random.Random(0), mode, drop_all_equal=True)
    assert dropped.indices == [] and dropped.status == "dropped_equal"


def test_drop_all_equal_keeps_mixed_groups():
    sel = select_group(_group(1), 16, random.Random(0), drop_all_equal=True)
    assert sel.status == "selected" and sel.kept_pos == 1


@pytest.mark.parametrize("mode", ["paper", "topk"])
def test_one_positive_is_always_kept(mode):
    for where in (0, 13, 31):
        group = [Candidate(1.0 if i == where else 0.0, 1.5) for i in range(32)]
        assert where in select(group, 16, random.Random(where), mode)


@pytest.mark.parametrize("mode", ["paper", "topk"])
def test_undersized_group_kept_whole(mode):
    group = _group(3, n=10)
    sel = select_group(group, 16, random.Random(0), mode)
    assert sel.status == "undersized" and sel.indices == list(range(10))
    assert (sel.kept_pos, sel.kept_neg) == (3, 7)


@pytest.mark.parametrize("mode", ["paper", "topk"])
def test_unscorable_rewards_never_kept(mode):
    group = [Candidate(None)] * 6 + [Candidate(float("nan"))] * 6 + _group(5, n=20)
    sel = select_group(group, 10, random.Random(0), mode)
    assert sel.n_unscored == 12
    assert all(i >= 12 for i in sel.indices) and len(sel.indices) == 10
    only_unscored = select_group([Candidate(None)] * 4, 2, random.Random(0), mode)
    assert only_unscored.status == "empty" and only_unscored.indices == []
