"""SandboxClient: batching, ordering, balancing, failover without re-running, deadlines, backpressure, closing.

Servers are in-process apps behind :class:`RoutingTransport` (no sockets), so faults are exact and fast; the
subprocess test with real servers and real kills is tests/test_service_fault.py. Tests marked with the
``stream`` parameter run both ways the client sends a batch (``/v1/execute/stream``, the default, and
``/v1/execute/batch``); what only streaming does is in tests/test_service_stream.py.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest

from test_service_support import RoutingTransport, ScriptedExecutor
from tirl.sandbox.types import CodeExecutor, ExecutionRequest
from tirl.service.app import create_app
from tirl.service.balancer import ServerPool, normalize_url
from tirl.service.client import ClientConfig, SandboxClient
from tirl.service.core import ServiceConfig

A, B = "a.test:9001", "b.test:9002"

both_ways = pytest.mark.parametrize("stream", [True, False], ids=["stream", "batch"])


def cluster(n: int = 2, workers: int = 8, service: ServiceConfig | None = None):
    names = [A, B, "c.test:9003"][:n]
    executors = {name: ScriptedExecutor(workers=workers) for name in names}
    transport = RoutingTransport({name: create_app(ex, service) for name, ex in executors.items()})
    return [f"http://{name}" for name in names], executors, transport


def fast(**kw) -> ClientConfig:
    base = dict(flush_interval_s=0.002, probe_interval_s=0.02, unavailable_wait_s=0.3, senders=4)
    base.update(kw)
    return ClientConfig(**base)


def req(code: str, rid: str, **kw) -> ExecutionRequest:
    return ExecutionRequest(code=code, request_id=rid, **kw)


def total_runs(executors) -> dict:
    runs: dict = {}
    for ex in executors.values():
        for rid, n in ex.runs.items():
            runs[rid] = runs.get(rid, 0) + n
    return runs


async def test_client_is_a_code_executor():
    client = SandboxClient("http://x.test")
    assert isinstance(client, CodeExecutor)
    await client.aclose()


async def test_many_coroutines_get_their_own_results_in_few_batches():
    urls, executors, transport = cluster(1)
    async with SandboxClient(urls, fast(batch_size=64, senders=2), transport=transport) as client:
        results = await asyncio.gather(*(client.run(req(f"echo {i}", f"r{i}")) for i in range(300)))
        stats = client.stats()
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(300)]
    assert [r.request_id for r in results] == [f"r{i}" for i in range(300)]
    assert max(transport.batch_sizes) <= 64
    assert stats.batches < 300 / 4  # coalesced, not one POST per call
    assert stats.answered == {"ok": 300}


@both_ways
async def test_run_batch_keeps_order_with_mixed_statuses(stream):
    urls, _, transport = cluster(2)
    codes = ["echo 0", "fail", "sleep 0.02; echo 2", "timeout", "echo 4"]
    async with SandboxClient(urls, fast(stream=stream), transport=transport) as client:
        results = await client.run_batch([req(c, f"k{i}") for i, c in enumerate(codes)])
    assert [r.status for r in results] == ["ok", "error", "ok", "timeout", "ok"]
    assert results[2].stdout == "2\n"


async def test_flush_interval_sends_a_partial_batch():
    urls, _, transport = cluster(1)
    async with SandboxClient(urls, fast(batch_size=64, flush_interval_s=0.01), transport=transport) as client:
        result = await asyncio.wait_for(client.run(req("echo lonely", "one")), 2)
    assert result.stdout == "lonely\n"
    assert transport.batch_sizes == [1]


async def test_work_spreads_over_both_servers():
    urls, executors, transport = cluster(2)
    async with SandboxClient(urls, fast(batch_size=8, senders=8), transport=transport) as client:
        await asyncio.gather(*(client.run(req("sleep 0.01", f"r{i}")) for i in range(160)))
    assert sum(executors[A].runs.values()) > 20 and sum(executors[B].runs.values()) > 20
    assert all(n == 1 for n in total_runs(executors).values())


def test_pool_picks_least_outstanding_up_server_and_prefers_pinned():
    pool = ServerPool(["a.test", "http://b.test/", "c.test"], http=None)  # type: ignore[arg-type]
    a, b, c = pool.servers
    assert [s.url for s in pool.servers] == ["http://a.test", "http://b.test", "http://c.test"]
    a.outstanding, b.outstanding, c.outstanding = 5, 1, 3
    assert pool.pick() is b
    b.up = False
    assert pool.pick() is c
    assert pool.pick(prefer=a) is a
    assert pool.pick(prefer=b) is c  # a pinned server that is down is not used
    a.up = c.up = False
    assert pool.pick() is None


def test_pool_ties_rotate():
    pool = ServerPool(["a.test", "b.test"], http=None)  # type: ignore[arg-type]
    assert {pool.pick().url for _ in range(4)} == {"http://a.test", "http://b.test"}


def test_bad_urls_and_config_rejected():
    with pytest.raises(ValueError):
        normalize_url("  ")
    with pytest.raises(ValueError):
        SandboxClient([])
    with pytest.raises(ValueError):
        ClientConfig(batch_size=0)


@both_ways
async def test_dead_server_calls_fail_over_with_same_ids_and_server_is_reprobed(stream):
    urls, executors, transport = cluster(2)
    transport.down.add(A)
    async with SandboxClient(urls, fast(stream=stream), transport=transport) as client:
        results = await asyncio.gather(*(client.run(req(f"echo {i}", f"r{i}")) for i in range(40)))
        stats = client.stats()
        assert stats.servers["http://a.test:9001"]["up"] is False
        transport.down.discard(A)
        for _ in range(500):
            await asyncio.sleep(0.01)
            if client.stats().servers["http://a.test:9001"]["up"]:
                break
        assert client.stats().servers["http://a.test:9001"]["up"] is True
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(40)]
    assert sum(executors[B].runs.values()) == 40 and not executors[A].runs
    assert stats.failovers >= 1


@both_ways
async def test_lost_response_is_resent_to_the_same_server_which_does_not_run_it_again(stream):
    urls, executors, transport = cluster(2)
    transport.lose_next_batch_response.add(A)
    transport.lose_next_batch_response.add(B)
    async with SandboxClient(urls, fast(senders=1, stream=stream), transport=transport) as client:
        results = await client.run_batch([req(f"echo {i}", f"r{i}") for i in range(10)])
        stats = client.stats()
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(10)]
    assert total_runs(executors) == {f"r{i}": 1 for i in range(10)}
    assert stats.resent_same_server >= 1 and stats.failovers == 0


@both_ways
async def test_garbage_answer_moves_batch_elsewhere(stream):
    urls, executors, transport = cluster(2)
    transport.garbage_batch_response.add(A)
    transport.garbage_batch_response.add(B)
    async with SandboxClient(urls, fast(max_attempts=3, stream=stream), transport=transport) as client:
        result = await client.run(req("echo 1", "g"))
    assert result.status == "internal" and "gave up after 3 attempts" in result.stderr
    assert ("unreadable stream line" if stream else "results for 1 requests") in result.stderr


async def test_all_servers_down_gives_internal_results_not_exceptions():
    urls, _, transport = cluster(2)
    transport.down.update({A, B})
    async with SandboxClient(urls, fast(unavailable_wait_s=0.1), transport=transport) as client:
        results = await client.run_batch([req("echo 1", f"r{i}") for i in range(5)])
    assert all(r.status == "internal" and "no server reachable" in r.stderr for r in results)
    assert [r.request_id for r in results] == [f"r{i}" for i in range(5)]


async def test_check_health_marks_unreachable_server_down():
    urls, _, transport = cluster(2)
    transport.down.add(B)
    async with SandboxClient(urls, fast(), transport=transport) as client:
        health = await client.check_health()
    assert health == {"http://a.test:9001": True, "http://b.test:9002": False}


async def test_call_deadline_returns_internal_and_the_caller_is_released():
    urls, _, transport = cluster(1)
    async with SandboxClient(urls, fast(call_deadline_s=0.05), transport=transport) as client:
        slow = await client.run(req("sleep 0.5", "slow"))
        quick = await client.run(req("echo 1", "quick"), deadline_s=5)
        stats = client.stats()
    assert slow.status == "internal" and "deadline" in slow.stderr
    assert quick.status == "ok"
    assert stats.deadline_exceeded == 1


async def test_http_read_timeout_exceeds_server_side_deadline():
    urls, _, transport = cluster(1)
    cfg = fast(server_grace_s=10, http_timeout_margin_s=5)
    async with SandboxClient(urls, cfg, transport=transport) as client:
        await client.run_batch([req("echo", "a", timeout_s=3), req("echo", "b", timeout_s=40)])
    assert transport.read_timeouts and min(transport.read_timeouts) >= 40 + 10


async def test_http_read_timeout_follows_grace_learnt_from_healthz():
    urls, _, transport = cluster(1, service=ServiceConfig(deadline_grace_s=100))
    async with SandboxClient(urls, fast(server_grace_s=1, http_timeout_margin_s=0), transport=transport) as client:
        await client.check_health()
        await client.run(req("echo", "a", timeout_s=2))
    assert transport.read_timeouts == [102]


async def test_bounded_queue_applies_backpressure():
    urls, executors, transport = cluster(1, workers=1)
    cfg = fast(max_queue=3, senders=1, batch_size=1)
    async with SandboxClient(urls, cfg, transport=transport) as client:
        tasks = [asyncio.ensure_future(client.run(req("gate g", f"r{i}"))) for i in range(20)]
        for _ in range(500):
            await asyncio.sleep(0.01)
            if client.stats().in_flight == 1 and client.stats().queue_depth == 3:
                break
        await asyncio.sleep(0.05)  # had the queue been unbounded, more callers would have got in by now
        depth = client.stats().queue_depth
        in_flight = client.stats().in_flight
        executors[A].gate("g").set()
        results = await asyncio.gather(*tasks)
    assert depth == 3 and in_flight == 1  # 16 callers are held back in run(), not queued
    assert all(r.ok for r in results)


@both_ways
async def test_oversize_item_rejected_alone_others_still_run(stream):
    urls, executors, transport = cluster(1, service=ServiceConfig(max_code_bytes=20))
    async with SandboxClient(urls, fast(flush_interval_s=0.05, stream=stream), transport=transport) as client:
        results = await asyncio.gather(
            client.run(req("echo ok", "small")),
            client.run(req("echo " + "x" * 50, "big")),
            client.run(req("echo 2", "s2")),
        )
        stats = client.stats()
    assert [r.status for r in results] == ["ok", "internal", "ok"]
    assert "HTTP 413" in results[1].stderr and "over the limit of 20" in results[1].stderr
    assert stats.rejected == 1 and executors[A].runs["big"] == 0


@both_ways
async def test_batch_over_the_body_limit_is_split_and_only_an_item_too_big_alone_is_rejected(stream):
    # Each item is within the server's limits, three together are over max_body_bytes: a 413 naming no item.
    urls, executors, transport = cluster(1, service=ServiceConfig(max_body_bytes=400, max_code_bytes=200))
    fits = [req("echo " + str(i) * 150, f"fits{i}") for i in range(3)]
    alone_too_big = req("echo x", "too_big", stdin="y" * 400)
    async with SandboxClient(urls, fast(stream=stream), transport=transport) as client:
        results = await client.run_batch([*fits, alone_too_big])
        stats = client.stats()
    assert [r.status for r in results] == ["ok", "ok", "ok", "internal"]
    assert [r.stdout for r in results[:3]] == [str(i) * 150 + "\n" for i in range(3)]
    assert "HTTP 413" in results[3].stderr and "over the limit of 400 bytes" in results[3].stderr
    assert stats.rejected == 1
    assert total_runs(executors) == {f"fits{i}": 1 for i in range(3)}


@both_ways
async def test_invalid_field_rejected_alone(stream):
    urls, _, transport = cluster(1)
    async with SandboxClient(urls, fast(flush_interval_s=0.05, stream=stream), transport=transport) as client:
        results = await asyncio.gather(client.run(req("echo ok", "fine")), client.run(req("echo", "neg", timeout_s=-1)))
    assert [r.status for r in results] == ["ok", "internal"]
    assert "HTTP 422" in results[1].stderr and "timeout_s" in results[1].stderr


@both_ways
async def test_a_request_json_cannot_hold_fails_alone_and_its_batch_still_runs(stream):
    urls, executors, transport = cluster(1)
    not_text = req("echo obj", "obj")
    not_text.stdin = object()  # type: ignore[assignment]
    huge = req("echo huge", "huge", memory_mb=10**5000)  # json.dumps refuses integers over 4300 digits
    async with SandboxClient(urls, fast(stream=stream), transport=transport) as client:
        results = await client.run_batch([req("echo 1", "fine"), not_text, huge, req("echo 2", "s2")])
        stats = client.stats()
    assert [r.status for r in results] == ["ok", "internal", "internal", "ok"]
    assert [r.stdout for r in (results[0], results[3])] == ["1\n", "2\n"]
    assert "cannot be sent as JSON" in results[1].stderr and "object" in results[1].stderr
    assert "cannot be sent as JSON" in results[2].stderr and "4300 digits" in results[2].stderr
    assert stats.batches == 1 and stats.items_sent == 2
    assert executors[A].runs["obj"] == executors[A].runs["huge"] == 0


@both_ways
@pytest.mark.parametrize("retries,expected", [(1, "ok"), (0, "internal")])
async def test_internal_result_retried_with_same_id(retries, expected, stream):
    urls, executors, transport = cluster(1)
    async with SandboxClient(urls, fast(retry_internal=retries, stream=stream), transport=transport) as client:
        result = await client.run(req("internal-once; echo second", "x"))
    assert result.status == expected
    assert executors[A].runs["x"] == 1 + retries


async def test_non_request_objects_and_odd_fields_become_internal_results():
    urls, _, transport = cluster(1)
    odd = req("echo", "odd")
    odd.timeout_s = float("nan")  # type: ignore[assignment]
    async with SandboxClient(urls, fast(), transport=transport) as client:
        not_a_request = await client.run({"code": "print(1)"})  # type: ignore[arg-type]
        nan_timeout = await client.run(odd)
    assert not_a_request.status == "internal" and "expects an ExecutionRequest" in not_a_request.stderr
    assert nan_timeout.status == "internal" and "HTTP 422" in nan_timeout.stderr


async def test_lone_surrogates_travel_both_ways():
    urls, _, transport = cluster(1)
    async with SandboxClient(urls, fast(), transport=transport) as client:
        result = await client.run(req("stdin", "s", stdin="x\udcff"))
    assert result.ok and result.stdout == "x\udcff"


async def test_aclose_answers_pending_calls_and_later_calls():
    urls, executors, transport = cluster(1)
    client = SandboxClient(urls, fast(), transport=transport)
    pending = [asyncio.ensure_future(client.run(req("gate never", f"p{i}"))) for i in range(5)]
    await asyncio.sleep(0.05)
    await client.aclose()
    await client.aclose()
    results = await asyncio.wait_for(asyncio.gather(*pending), 2)
    late = await client.run(req("echo 1", "late"))
    assert all(r.status == "internal" and "closed" in r.stderr for r in results)
    assert late.status == "internal"
    executors[A].gate("never").set()


async def test_cancelled_caller_is_not_sent():
    urls, executors, transport = cluster(1, workers=1)
    async with SandboxClient(urls, fast(senders=1, batch_size=1), transport=transport) as client:
        blocker = asyncio.ensure_future(client.run(req("gate g", "first")))
        await asyncio.sleep(0.05)
        doomed = asyncio.ensure_future(client.run(req("echo no", "doomed")))
        await asyncio.sleep(0.01)
        doomed.cancel()
        executors[A].gate("g").set()
        await blocker
        await client.run(req("echo after", "after"))
    assert executors[A].runs["doomed"] == 0


async def test_real_sockets_two_servers_in_process():
    """The client over real loopback HTTP (uvicorn) to two in-process servers."""
    from tirl.service.server import serve_app

    executors = [ScriptedExecutor(), ScriptedExecutor()]
    urls: list[str] = []
    ready = asyncio.Event()

    def on_ready(url: str) -> None:
        urls.append(url)
        if len(urls) == 2:
            ready.set()

    stop = asyncio.Event()
    servers = [
        asyncio.ensure_future(serve_app(create_app(ex), "127.0.0.1", 0, on_ready=on_ready, stop=stop))
        for ex in executors
    ]
    try:
        await asyncio.wait_for(ready.wait(), 10)
        async with SandboxClient(urls, fast(senders=4, batch_size=16)) as client:
            results = await asyncio.gather(*(client.run(req(f"echo {i}", f"n{i}")) for i in range(200)))
        async with httpx.AsyncClient() as http:
            metrics = (await http.get(urls[0] + "/metrics")).text
    finally:
        stop.set()
        await asyncio.wait_for(asyncio.gather(*servers), 10)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(200)]
    assert all(sum(ex.runs.values()) > 0 for ex in executors)
    assert "tirl_service_calls_total" in metrics
