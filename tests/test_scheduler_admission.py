"""The admission policy core (tirl.rollout.admission): reservations, FIFO, policies, dead endpoints."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.rollout.admission import (
    AdmissionController,
    BudgetTooLargeError,
    NoEndpointAvailableError,
)


def kv(caps, coef=1.0):
    return AdmissionController("kv_aware", [(f"e{i}", c) for i, c in enumerate(caps)], admission_coef=coef)


def test_kv_aware_admits_only_what_fits_then_admits_on_release():
    ctl = kv([100])
    a, adm_a = ctl.submit("a", 60, now=0.0)
    b, adm_b = ctl.submit("b", 60, now=1.0)
    assert adm_a is not None and adm_a.endpoint == "e0" and adm_a.reserved_tokens == 60
    assert adm_b is None and ctl.queue_length == 1
    admitted = ctl.release(a, now=3.0)
    assert [x.trajectory_id for x in admitted] == ["b"]
    assert admitted[0].wait_s == pytest.approx(2.0)
    assert ctl.stats()[0].reserved_tokens == 60


def test_kv_aware_chooses_endpoint_with_most_free_capacity():
    ctl = kv([100, 300, 200])
    _, first = ctl.submit("a", 150, now=0)
    _, second = ctl.submit("b", 100, now=0)  # e1 has 150 free, e2 has 200 free
    assert first.endpoint == "e1"
    assert second.endpoint == "e2"


def test_kv_aware_is_strict_fifo_a_large_head_blocks_small_followers():
    ctl = kv([100])
    a, _ = ctl.submit("a", 50, now=0)
    _, big = ctl.submit("big", 80, now=0)
    _, small = ctl.submit("small", 10, now=0)  # would fit (50 free) but must not overtake "big"
    assert big is None and small is None
    order = [x.trajectory_id for x in ctl.release(a, now=1)]
    assert order == ["big", "small"]


def test_budget_larger_than_every_capacity_fails_at_once():
    ctl = kv([100, 120])
    with pytest.raises(BudgetTooLargeError, match="largest alive endpoint 'e1'"):
        ctl.submit("x", 121, now=0)
    assert ctl.queue_length == 0


def test_admission_coefficient_scales_reservations():
    ctl = kv([100], coef=0.5)
    admitted = [ctl.submit(f"t{i}", 50, now=0)[1] for i in range(5)]
    assert [a is not None for a in admitted] == [True, True, True, True, False]
    assert admitted[0].reserved_tokens == 25
    # the coefficient also decides whether a budget can ever fit: 190 x 0.5 = 95 <= 100, so it queues
    _, queued = ctl.submit("fits_only_with_coef", 190, now=0)
    assert queued is None and ctl.queue_length == 2
    with pytest.raises(ValueError):
        kv([100], coef=0.0)


def test_releasing_a_waiting_lease_removes_it_from_the_queue_and_is_idempotent():
    ctl = kv([100])
    a, _ = ctl.submit("a", 100, now=0)
    b, _ = ctl.submit("b", 100, now=0)
    c, _ = ctl.submit("c", 100, now=0)
    assert ctl.release(b, now=1) == []  # cancelled while waiting
    assert ctl.release(b, now=1) == []  # twice is harmless
    assert [x.trajectory_id for x in ctl.release(a, now=2)] == ["c"]
    assert ctl.release(a, now=2) == []
    assert ctl.stats()[0].in_flight == 1


def test_mark_down_sends_waiting_trajectories_to_the_other_endpoint():
    ctl = kv([100, 100])
    a, _ = ctl.submit("a", 100, now=0)  # e0
    b, _ = ctl.submit("b", 100, now=0)  # e1
    c, adm_c = ctl.submit("c", 100, now=0)
    assert adm_c is None
    admissions, rejections = ctl.mark_down("e0", now=1, reason="gone")
    assert admissions == [] and rejections == []  # still waits: e1 is full
    admitted = ctl.release(a, now=2)  # a's capacity is on the dead endpoint: must not admit there
    assert admitted == []
    admitted = ctl.release(b, now=3)
    assert [(x.trajectory_id, x.endpoint) for x in admitted] == [("c", "e1")]
    assert not ctl.stats()[0].alive and ctl.stats()[0].down_reason == "gone"


def test_mark_down_rejects_waiters_that_no_alive_endpoint_can_hold():
    ctl = kv([500, 100])
    ctl.submit("a", 500, now=0)
    big, adm = ctl.submit("big", 400, now=0)
    small, adm2 = ctl.submit("small", 100, now=0)
    assert adm is None and adm2 is None
    admissions, rejections = ctl.mark_down("e0", now=1)
    assert [r.trajectory_id for r in rejections] == ["big"]
    assert isinstance(rejections[0].error, BudgetTooLargeError)
    assert [a.trajectory_id for a in admissions] == ["small"]  # head left; small fits e1
    ctl.mark_down("e1", now=2)
    with pytest.raises(NoEndpointAvailableError):
        ctl.submit("late", 10, now=3)


def test_requeue_puts_a_failed_over_lease_ahead_of_later_arrivals():
    ctl = kv([100, 100])
    a, adm = ctl.submit("a", 100, now=0)
    b, _ = ctl.submit("b", 100, now=0)
    w, _ = ctl.submit("w", 100, now=0)
    ctl.mark_down(adm.endpoint, now=1)
    assert ctl.requeue(a, now=1) == []
    admitted = ctl.release(b, now=2)
    assert [x.trajectory_id for x in admitted] == ["a"]  # the failed-over one first, then "w"
    assert ctl.endpoint_of(a) == "e1"


def test_static_plan_assigns_contiguous_equal_blocks():
    ctl = AdmissionController("static", [("e0", None), ("e1", None)])
    ids = [f"p{p}-s{s}" for p in range(2) for s in range(4)]
    ctl.plan(ids)
    got = [ctl.submit(t, 1000, now=0)[1].endpoint for t in ids]
    assert got == ["e0"] * 4 + ["e1"] * 4
    assert ctl.queue_length == 0  # never waits, no capacity check


def test_static_without_plan_splits_each_batch_by_arrival_order():
    ctl = AdmissionController("static", [("e0", None), ("e1", None), ("e2", None)], static_batch_size=6)
    got = [ctl.submit(f"t{i}", 10, now=0)[1].endpoint for i in range(8)]
    assert got == ["e0", "e0", "e1", "e1", "e2", "e2", "e0", "e0"]  # the 7th starts the next step's blocks


def test_round_robin_counts_assignments_and_never_decrements_them():
    ctl = AdmissionController("round_robin", [("e0", None), ("e1", None)], seed=0)
    a, first = ctl.submit("a", 10, now=0)
    _, second = ctl.submit("b", 10, now=0)
    assert {first.endpoint, second.endpoint} == {"e0", "e1"}
    ctl.release(a, now=1)  # releasing does not make first's endpoint "less loaded"
    _, third = ctl.submit("c", 10, now=1)
    assert third.endpoint == first.endpoint  # tie on counts -> same shuffled order as the first pick
    stats = {s.name: s.assigned_total for s in ctl.stats()}
    assert sorted(stats.values()) == [1, 2]


def test_round_robin_is_sticky_by_trajectory_id():
    ctl = AdmissionController("round_robin", [("e0", None), ("e1", None), ("e2", None)], seed=3)
    lease, first = ctl.submit("traj", 10, now=0)
    ctl.release(lease, now=0)
    for _ in range(3):
        lease, again = ctl.submit("traj", 10, now=0)
        assert again.endpoint == first.endpoint
        ctl.release(lease, now=0)


def test_invalid_configurations_are_rejected():
    with pytest.raises(ValueError, match="no KV capacity"):
        AdmissionController("kv_aware", [("e0", None)])
    with pytest.raises(ValueError, match="unknown scheduling policy"):
        AdmissionController("fastest", [("e0", 1)])
    with pytest.raises(ValueError, match="duplicate"):
        AdmissionController("static", [("e0", 1), ("e0", 1)])
    with pytest.raises(ValueError, match="positive int"):
        kv([10]).submit("x", 0, now=0)


ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 120)),
        st.tuples(st.just("release"), st.integers(0, 50)),
        st.tuples(st.just("down"), st.integers(0, 2)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(caps=st.lists(st.integers(50, 200), min_size=1, max_size=3), ops=ops)
def test_kv_aware_invariants_under_random_operations(caps, ops):
    """Reservations never exceed capacity and match the admitted leases, admissions follow submission order
    (FIFO), and the head of the queue never waits while an alive endpoint could hold it."""
    ctl = kv(caps)
    admitted: dict[int, tuple[str, int]] = {}
    live: list[int] = []  # submitted, not yet released or rejected
    admission_sequence: list[int] = []
    now = 0.0
    for op, arg in ops:
        now += 1
        if op == "submit":
            try:
                lease, adm = ctl.submit(f"t{now}", arg, now)
            except (BudgetTooLargeError, NoEndpointAvailableError):
                continue
            live.append(lease)
            new = [adm] if adm else []
        elif op == "release":
            if not live:
                continue
            lease = live.pop(arg % len(live))
            admitted.pop(lease, None)
            new = ctl.release(lease, now)
        else:
            new, rejections = ctl.mark_down(f"e{arg % len(caps)}", now)
            for r in rejections:
                live.remove(r.lease_id)
        for a in new:
            admitted[a.lease_id] = (a.endpoint, a.reserved_tokens)
            admission_sequence.append(a.lease_id)
        for s in ctl.stats():
            held = sum(r for (e, r) in admitted.values() if e == s.name)
            assert s.reserved_tokens == held
            assert 0 <= s.reserved_tokens <= s.capacity_tokens
        if ctl.queue_length:
            head = ctl._leases[ctl._queue[0]]
            assert all(s.free_tokens < head.reservation for s in ctl.stats() if s.alive)
    assert admission_sequence == sorted(admission_sequence)  # lease ids grow with submission time
