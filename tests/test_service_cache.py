"""Idempotency of the service: each request id runs at most once per server (tirl.service.cache)."""

from __future__ import annotations

import asyncio

import pytest

from test_service_support import ScriptedExecutor
from tirl.sandbox.types import ExecutionRequest
from tirl.service.cache import ResultCache, request_fingerprint


def req(code: str, rid: str, **kw) -> ExecutionRequest:
    return ExecutionRequest(code=code, request_id=rid, **kw)


async def test_concurrent_duplicates_share_one_execution():
    ex = ScriptedExecutor()
    cache = ResultCache()
    gate = ex.gate("g")
    tasks = [asyncio.ensure_future(cache.get_or_run(req("gate g; echo hi", "a"), ex.run)) for _ in range(5)]
    await asyncio.sleep(0.01)
    assert ex.runs["a"] == 1 and ex.running == 1
    gate.set()
    answers = await asyncio.gather(*tasks)
    assert ex.runs["a"] == 1
    assert [r.stdout for r, _ in answers] == ["hi\n"] * 5
    assert sorted(s for _, s in answers) == ["executed"] + ["joined"] * 4


async def test_later_retry_is_answered_from_cache_without_running():
    ex = ScriptedExecutor()
    cache = ResultCache()
    first, s1 = await cache.get_or_run(req("echo 1", "a"), ex.run)
    again, s2 = await cache.get_or_run(req("echo 1", "a"), ex.run)
    assert (s1, s2) == ("executed", "cached")
    assert ex.runs["a"] == 1
    assert again == first


async def test_get_returns_a_copy_that_callers_may_change():
    ex = ScriptedExecutor()
    cache = ResultCache()
    await cache.get_or_run(req("echo 1", "a"), ex.run)
    copy = cache.get("a")
    copy.stdout = "changed by caller"
    again, _ = await cache.get_or_run(req("echo 1", "a"), ex.run)
    assert again.stdout == "1\n"


@pytest.mark.parametrize("field,value", [("code", "echo 2"), ("stdin", "x"), ("timeout_s", 3.0), ("memory_mb", 7)])
async def test_id_reused_for_a_different_request_is_refused_not_run(field, value):
    ex = ScriptedExecutor()
    cache = ResultCache()
    await cache.get_or_run(req("echo 1", "a"), ex.run)
    other = req("echo 1", "a")
    setattr(other, field, value)
    result, source = await cache.get_or_run(other, ex.run)
    assert source == "conflict" and result.status == "internal"
    assert "already used" in result.stderr
    assert ex.runs["a"] == 1


async def test_id_reused_while_first_runs_is_refused():
    ex = ScriptedExecutor()
    cache = ResultCache()
    first = asyncio.ensure_future(cache.get_or_run(req("gate g", "a"), ex.run))
    await asyncio.sleep(0.01)
    result, source = await cache.get_or_run(req("echo other", "a"), ex.run)
    ex.gate("g").set()
    await first
    assert source == "conflict" and result.status == "internal"
    assert ex.runs["a"] == 1


async def test_internal_results_are_not_cached_so_a_retry_runs_again():
    ex = ScriptedExecutor()
    cache = ResultCache()
    r1, _ = await cache.get_or_run(req("internal-once; echo ok", "a"), ex.run)
    r2, s2 = await cache.get_or_run(req("internal-once; echo ok", "a"), ex.run)
    assert r1.status == "internal"
    assert (r2.status, r2.stdout, s2) == ("ok", "ok\n", "executed")
    assert ex.runs["a"] == 2


async def test_cancelled_caller_does_not_cancel_the_execution():
    ex = ScriptedExecutor()
    cache = ResultCache()
    waiter = asyncio.ensure_future(cache.get_or_run(req("gate g; echo done", "a"), ex.run))
    await asyncio.sleep(0.01)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    ex.gate("g").set()
    result, source = await cache.get_or_run(req("gate g; echo done", "a"), ex.run)
    assert result.stdout == "done\n"
    assert source in ("joined", "cached")
    assert ex.runs["a"] == 1


async def test_executor_exception_becomes_internal_result():
    ex = ScriptedExecutor()
    cache = ResultCache()
    result, _ = await cache.get_or_run(req("raise", "a"), ex.run)
    assert result.status == "internal" and "scripted executor bug" in result.stderr
    assert result.request_id == "a"


async def test_result_always_carries_the_request_id():
    async def wrong_id(request):
        from tirl.sandbox.types import ExecutionResult

        return ExecutionResult("ok", stdout="x", request_id="someone-else")

    result, _ = await ResultCache().get_or_run(req("x", "mine"), wrong_id)
    assert result.request_id == "mine"


async def test_entry_bound_evicts_least_recently_used():
    ex = ScriptedExecutor()
    cache = ResultCache(max_entries=2)
    for rid in ("a", "b"):
        await cache.get_or_run(req("echo 1", rid), ex.run)
    await cache.get_or_run(req("echo 1", "a"), ex.run)  # touch a: b is now least recently used
    await cache.get_or_run(req("echo 1", "c"), ex.run)
    assert len(cache) == 2
    assert cache.get("a") is not None and cache.get("c") is not None and cache.get("b") is None
    assert cache.evictions == 1


async def test_byte_bound_keeps_estimate_under_limit():
    ex = ScriptedExecutor()
    cache = ResultCache(max_entries=1000, max_bytes=4000)
    for i in range(20):
        await cache.get_or_run(req(f"echo {'x' * 500}", f"id{i}"), ex.run)
    assert 0 < cache.nbytes <= 4000
    assert len(cache) < 20
    assert cache.get("id19") is not None


async def test_zero_entries_disables_caching_but_still_dedups_in_flight():
    ex = ScriptedExecutor()
    cache = ResultCache(max_entries=0)
    tasks = [asyncio.ensure_future(cache.get_or_run(req("sleep 0.02", "a"), ex.run)) for _ in range(3)]
    await asyncio.gather(*tasks)
    assert ex.runs["a"] == 1
    await cache.get_or_run(req("sleep 0.02", "a"), ex.run)
    assert ex.runs["a"] == 2


def test_fingerprint_accepts_lone_surrogates_and_separates_fields():
    a = request_fingerprint(req("ab", "x", stdin="c"))
    b = request_fingerprint(req("a", "x", stdin="bc"))
    assert a != b
    assert request_fingerprint(req("\ud800", "x")) != request_fingerprint(req("\udc00", "x"))


def test_negative_bounds_rejected():
    with pytest.raises(ValueError):
        ResultCache(max_entries=-1)
