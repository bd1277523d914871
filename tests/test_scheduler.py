"""The asyncio rollout scheduler (tirl.rollout.scheduler) over in-process fake engines."""

import asyncio

import pytest

from tirl.rollout.engine import EngineRouter, GenerationOutput, SamplingParams
from tirl.rollout.scheduler import (
    BudgetTooLargeError,
    Endpoint,
    NoEndpointAvailableError,
    RolloutScheduler,
    SchedulerConfig,
)

PARAMS = SamplingParams(max_new_tokens=4)


class FakeEngine:
    """Answers with its own tag; can be switched to fail (exception or error output) or to block."""

    def __init__(self, tag: int) -> None:
        self.tag = tag
        self.calls = 0
        self.mode = "ok"  # ok | raise | error_output
        self.gate: asyncio.Event | None = None

    async def generate(self, prompt_ids, params):
        self.calls += 1
        if self.gate is not None:
            await self.gate.wait()
        if self.mode == "raise":
            raise ConnectionError("connection refused")
        if self.mode == "error_output":
            return GenerationOutput(token_ids=[], finish_reason="error", error="HTTP 502")
        return GenerationOutput(token_ids=[self.tag], finish_reason="stop")


def make(caps, policy="kv_aware", alive=None, **cfg):
    engines = [FakeEngine(i) for i in range(len(caps))]
    alive = alive if alive is not None else [True] * len(caps)

    def health(i):
        async def probe():
            return alive[i]

        return probe

    eps = [Endpoint(f"e{i}", engines[i], caps[i], health=health(i)) for i in range(len(caps))]
    return RolloutScheduler(eps, SchedulerConfig(policy=policy, **cfg)), engines, alive


async def settle(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_scheduler_is_an_engine_router():
    sched, _, _ = make([100])
    assert isinstance(sched, EngineRouter)


async def test_waiting_trajectory_is_admitted_by_the_release_event_without_polling():
    sched, _, _ = make([100])
    entered = asyncio.Event()
    first_out = asyncio.Event()

    async def second():
        async with sched.lease("b", 80):
            entered.set()

    async with sched.lease("a", 80) as engine:
        await engine.generate([1], PARAMS)
        task = asyncio.create_task(second())
        await settle()
        assert not entered.is_set() and sched.metrics().queue_length == 1
        first_out.set()
    # release happened on exit; a handful of loop iterations (not a 0.1 s poll) suffice
    await settle()
    assert entered.is_set()
    await task
    assert sched.metrics().endpoints[0].reserved_tokens == 0


async def test_all_turns_of_a_trajectory_stay_on_the_leased_endpoint():
    sched, engines, _ = make([1000, 1000, 1000])
    seen: dict[str, set[int]] = {}

    async def trajectory(tid):
        async with sched.lease(tid, 300) as engine:
            for _turn in range(5):
                out = await engine.generate([1, 2], PARAMS)
                seen.setdefault(tid, set()).add(out.token_ids[0])
                await asyncio.sleep(0)

    await asyncio.gather(*(trajectory(f"t{i}") for i in range(9)))
    assert all(len(tags) == 1 for tags in seen.values())
    assert sorted(e.calls for e in engines) == [15, 15, 15]  # 3 per endpoint at 300 of 1000 tokens


async def test_reservation_is_released_when_the_trajectory_raises():
    sched, _, _ = make([100])
    with pytest.raises(RuntimeError, match="tool crashed"):
        async with sched.lease("a", 100):
            raise RuntimeError("tool crashed")
    stats = sched.metrics().endpoints[0]
    assert stats.reserved_tokens == 0 and stats.in_flight == 0 and stats.completed_total == 1


async def test_cancelling_an_admitted_trajectory_releases_and_admits_the_next():
    sched, engines, _ = make([100])
    engines[0].gate = asyncio.Event()  # generation blocks until cancelled
    order = []

    async def run(tid):
        async with sched.lease(tid, 100) as engine:
            order.append(tid)
            await engine.generate([1], PARAMS)

    first = asyncio.create_task(run("a"))
    await settle()
    second = asyncio.create_task(run("b"))
    await settle()
    assert order == ["a"]
    first.cancel()
    await settle()
    assert order == ["a", "b"]
    engines[0].gate.set()
    await second
    with pytest.raises(asyncio.CancelledError):
        await first
    assert sched.metrics().endpoints[0].reserved_tokens == 0


async def test_cancelling_a_waiting_trajectory_leaves_the_queue_without_reserving():
    sched, _, _ = make([100])
    async with sched.lease("a", 100):
        waiting = asyncio.create_task(sched.lease("b", 100).__aenter__())
        await settle()
        assert sched.metrics().queue_length == 1
        waiting.cancel()
        await settle()
        assert sched.metrics().queue_length == 0
    stats = sched.metrics().endpoints[0]
    assert stats.reserved_tokens == 0 and stats.assigned_total == 1


async def test_cancellation_racing_with_admission_does_not_leak_the_reservation():
    sched, _, _ = make([100])
    outer = sched.lease("a", 100)
    await outer.__aenter__()
    waiter = asyncio.create_task(sched.lease("b", 100).__aenter__())
    await settle()
    await outer.__aexit__(None, None, None)  # admits "b": its future is resolved ...
    waiter.cancel()  # ... and the waiter is cancelled before it runs again
    with pytest.raises(asyncio.CancelledError):
        await waiter
    stats = sched.metrics().endpoints[0]
    assert stats.reserved_tokens == 0 and stats.in_flight == 0


async def test_budget_larger_than_any_capacity_fails_clearly_instead_of_waiting():
    sched, _, _ = make([100, 200])
    with pytest.raises(BudgetTooLargeError, match="200"):
        async with asyncio.timeout(1):
            async with sched.lease("huge", 201):
                pass


async def test_dead_endpoint_waiting_trajectories_go_to_the_other_one():
    sched, engines, alive = make([100, 100], max_failovers=0)
    hold = [asyncio.Event(), asyncio.Event()]
    results = {}

    async def run(tid, gate=None):
        async with sched.lease(tid, 100) as engine:
            out = await engine.generate([1], PARAMS)
            results[tid] = out
            if gate is not None:
                await gate.wait()
                results[tid] = await engine.generate([1, 2], PARAMS)

    a = asyncio.create_task(run("a", hold[0]))  # e0
    b = asyncio.create_task(run("b", hold[1]))  # e1
    await settle()
    waiters = [asyncio.create_task(run(f"w{i}")) for i in range(3)]
    await settle()
    assert sched.metrics().queue_length == 3
    # e0 dies; a's next call fails, the probe says dead, e0 leaves rotation, a ends with an error
    alive[0] = False
    engines[0].mode = "raise"
    hold[0].set()
    with pytest.raises(ConnectionError):
        await a  # no fail-over allowed here: its error reaches the agent loop, the lease is released
    hold[1].set()
    await asyncio.gather(b, *waiters)
    assert all(results[f"w{i}"].token_ids == [1] for i in range(3))  # all served by e1
    stats = sched.metrics().endpoints
    assert not stats[0].alive and stats[0].assigned_total == 1
    assert stats[1].assigned_total == 4


async def test_failover_moves_a_trajectory_and_retries_the_call():
    sched, engines, alive = make([100, 100])
    engines[0].mode = "error_output"
    alive[0] = False
    async with sched.lease("a", 100) as engine:  # most free: tie -> e0
        first_endpoint = engine.endpoint
        out = await engine.generate([1, 2, 3], PARAMS)
    assert first_endpoint == "e0"
    assert out.finish_reason == "stop" and out.token_ids == [1]
    assert engine.endpoint == "e1" and engine.failovers == 1
    stats = sched.metrics().endpoints
    assert not stats[0].alive and "HTTP 502" in stats[0].down_reason
    assert stats[0].reserved_tokens == 0 and stats[1].reserved_tokens == 0


async def test_a_request_error_on_a_healthy_endpoint_is_returned_not_failed_over():
    sched, engines, _ = make([100, 100])
    engines[0].mode = "error_output"  # e.g. a 400 for one bad request; the probe says alive
    async with sched.lease("a", 100) as engine:
        out = await engine.generate([1], PARAMS)
    assert out.finish_reason == "error" and engine.endpoint == "e0"
    assert sched.metrics().endpoints[0].alive


async def test_when_every_endpoint_dies_the_error_is_clear():
    sched, engines, alive = make([100])
    engines[0].mode = "raise"
    alive[0] = False
    with pytest.raises(NoEndpointAvailableError):
        async with sched.lease("a", 100) as engine:
            await engine.generate([1], PARAMS)
    with pytest.raises(NoEndpointAvailableError):
        async with sched.lease("b", 100):
            pass


async def test_static_policy_assigns_all_at_once_and_round_robin_balances_counts():
    static, _, _ = make([None, None], policy="static")
    static.plan(["a", "b", "c", "d"])
    async with (
        static.lease("a", 10) as ea,
        static.lease("b", 10) as eb,
        static.lease("c", 10) as ec,
        static.lease("d", 10) as ed,
    ):
        assert [e.endpoint for e in (ea, eb, ec, ed)] == ["e0", "e0", "e1", "e1"]
    rr, _, _ = make([None, None, None], policy="round_robin")
    async with rr.lease("a", 10), rr.lease("b", 10), rr.lease("c", 10):
        assert sorted(s.in_flight for s in rr.metrics().endpoints) == [1, 1, 1]


async def test_metrics_expose_in_flight_reserved_free_and_waits_for_logging():
    now = [0.0]
    sched, _, _ = make([100, 50])
    sched._clock = lambda: now[0]
    second = sched.lease("b", 60)
    async with sched.lease("a", 60):
        task = asyncio.create_task(second.__aenter__())
        await settle()
        now[0] = 2.5
    await task
    logged = sched.metrics().as_log_dict()
    assert logged["scheduler/e0/in_flight"] == 1.0
    assert logged["scheduler/e0/reserved_tokens"] == 60.0
    assert logged["scheduler/e0/free_tokens"] == 40.0
    assert logged["scheduler/e1/free_tokens"] == 50.0
    assert logged["scheduler/e0/queue_wait_max_s"] == pytest.approx(2.5)
    assert logged["scheduler/queue_length"] == 0.0
    await second.__aexit__(None, None, None)
    assert sched.metrics().as_log_dict()["scheduler/e0/reserved_tokens"] == 0.0


async def test_aclose_closes_every_engine_that_can_be_closed():
    sched, engines, _ = make([100, 100])
    closed = []

    async def aclose(i=0):
        closed.append(i)

    engines[0].aclose = lambda: aclose(0)
    engines[1].aclose = lambda: aclose(1)
    await sched.aclose()
    assert sorted(closed) == [0, 1]


def test_one_scheduler_serves_successive_event_loops():
    """The RL trainer calls the rollout through asyncio.run once per step: state must carry over, not break."""
    sched, _, _ = make([100, 100])

    async def step():
        async def one(i):
            async with sched.lease(f"t{i}", 100) as engine:
                await asyncio.sleep(0)
                return (await engine.generate([1], PARAMS)).token_ids[0]

        return await asyncio.gather(*(one(i) for i in range(4)))

    first = asyncio.run(step())
    second = asyncio.run(step())
    assert sorted(first) == sorted(second) == [0, 0, 1, 1]
    assert all(s.reserved_tokens == 0 and s.completed_total == 4 for s in sched.metrics().endpoints)


async def test_metrics_are_logged_as_json_lines_at_most_every_interval(tmp_path):
    import json

    now = [0.0]
    log = tmp_path / "sub" / "scheduler.jsonl"
    sched, _, _ = make([100], metrics_log=str(log), metrics_log_interval_s=10.0)
    sched._clock = lambda: now[0]
    for t in (0.0, 1.0, 2.0, 12.5):  # releases at 0 (logged), 1 and 2 (too soon), 12.5 (logged)
        now[0] = t
        async with sched.lease(f"t{t}", 50):
            pass
    await sched.aclose()  # one more
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert len(lines) == 3
    assert [x["scheduler/e0/completed_total"] for x in lines] == [1.0, 4.0, 4.0]


def test_kv_capacity_option_parsing():
    from tirl.rollout.scheduler import parse_kv_capacities

    assert parse_kv_capacities([], 2) is None
    assert parse_kv_capacities(["5000"], 3) == [5000, 5000, 5000]
    assert parse_kv_capacities(["100,200"], 2) == parse_kv_capacities(["100", "200"], 2) == [100, 200]
    with pytest.raises(ValueError, match="one per server"):
        parse_kv_capacities(["1", "2"], 3)
    with pytest.raises(ValueError, match="positive"):
        parse_kv_capacities(["-4"], 1)
