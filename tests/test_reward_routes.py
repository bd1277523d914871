"""``POST /v1/verify/batch`` on the service app: order, limits (413/422), deadline override, counters.

Most tests mount the router on ``tirl.service.app.create_app`` over a scripted executor (no processes); one
end-to-end test runs it over a real ``LocalSandbox`` that preloads the reward worker.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from test_reward_verifier import ScriptedExecutor, in_process  # noqa: E402  (tests dir is on sys.path)
from tirl.reward import PRELOAD_MODULES, VerifierStats
from tirl.reward.routes import create_verify_router
from tirl.service.app import create_app


def b(answer: str) -> str:
    return f"<answer>\\boxed{{{answer}}}</answer>"


async def client_for(executor: Any, **router_options: Any) -> httpx.AsyncClient:
    app = create_app(executor, routers=[create_verify_router(**router_options)])
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


@pytest.fixture
async def scripted() -> AsyncIterator[tuple[httpx.AsyncClient, ScriptedExecutor]]:
    executor = ScriptedExecutor(in_process)
    client = await client_for(executor, max_items=5, max_chars=1000)
    async with client:
        yield client, executor


async def test_batch_answers_in_order_with_counts(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, executor = scripted
    items = [
        {"response": b("\\frac{2}{4}"), "gold": "\\frac{1}{2}"},
        {"response": "no answer here", "gold": "3"},
        {"response": b("7"), "gold": "8"},
        {"answer": "1,000", "gold": "1000"},
    ]
    response = await client.post("/v1/verify/batch", json={"items": items})
    assert response.status_code == 200
    body = response.json()
    assert [v["reward"] for v in body["verdicts"]] == [1.0, 0.0, 0.0, 1.0]
    assert [v["status"] for v in body["verdicts"]] == ["ok", "no_answer", "ok", "ok"]
    assert [v["gold"] for v in body["verdicts"]] == ["\\frac{1}{2}", "3", "8", "1000"]
    assert body["counts"]["ok"] == 3 and body["counts"]["no_answer"] == 1
    assert len(executor.requests) == 1  # only the symbolic item reached the executor


async def test_timeout_override_reaches_the_worker_request(
    scripted: tuple[httpx.AsyncClient, ScriptedExecutor],
) -> None:
    client, executor = scripted
    body = {"items": [{"answer": "\\sqrt{4}", "gold": "2"}], "timeout_s": 1.5}
    response = await client.post("/v1/verify/batch", json=body)
    assert response.status_code == 200 and response.json()["verdicts"][0]["correct"] is True
    assert executor.requests[-1].timeout_s == 1.5


@pytest.mark.parametrize(
    "body",
    [
        {"items": [{"response": "x"}]},  # gold missing
        {"items": [{"response": "x", "gold": 5}]},  # gold not a string
        {"items": [{"response": "x", "gold": "5", "extra": 1}]},  # unknown field
        {"items": "not a list"},
        {"items": [], "timeout_s": 0},
        {"items": [], "timeout_s": 10_000},
        {"items": [], "timeout_s": "5"},  # a string, not a number (pydantic's lax mode took it)
        {"items": [], "timeout_s": True},  # a boolean, not 1 s
        {"items": [{"answer": 2, "gold": "2"}]},  # answer not a string
    ],
)
async def test_malformed_requests_get_422_with_a_json_error(
    scripted: tuple[httpx.AsyncClient, ScriptedExecutor], body: dict
) -> None:
    client, _ = scripted
    response = await client.post("/v1/verify/batch", json=body)
    assert response.status_code == 422
    assert response.json()["message"]


async def test_invalid_json_gets_422(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, _ = scripted
    response = await client.post("/v1/verify/batch", content=b"{not json", headers={"content-type": "application/json"})
    assert response.status_code == 422


async def test_lone_surrogates_in_answers_are_answered_not_a_server_error(
    scripted: tuple[httpx.AsyncClient, ScriptedExecutor],
) -> None:
    # JSON strings may hold lone surrogates; the verdicts echo them, and pydantic's serializer raised (500).
    client, _ = scripted
    items = [{"answer": "\ud800", "gold": "\ud800"}, {"response": b("7\udfff"), "gold": "7"}]
    response = await client.post(
        "/v1/verify/batch", content=json.dumps({"items": items}).encode(), headers={"content-type": "application/json"}
    )
    assert response.status_code == 200
    verdicts = response.json()["verdicts"]
    assert [v["extracted"] for v in verdicts] == ["\ud800", "7\udfff"]
    assert verdicts[0]["reward"] == 1.0 and verdicts[0]["gold"] == "\ud800"


async def test_too_many_items_get_413(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, executor = scripted
    items = [{"answer": "1", "gold": "1"}] * 6
    response = await client.post("/v1/verify/batch", json={"items": items})
    assert response.status_code == 413
    assert "6 items" in response.json()["message"]
    assert executor.requests == []


async def test_oversized_strings_get_413(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, _ = scripted
    response = await client.post("/v1/verify/batch", json={"items": [{"response": "x" * 1001, "gold": "1"}]})
    assert response.status_code == 413
    assert "item 0" in response.json()["message"]


async def test_stats_endpoint_counts_every_verdict() -> None:
    stats = VerifierStats()
    async with await client_for(ScriptedExecutor(in_process), stats=stats) as client:
        items = [{"answer": "1", "gold": "1"}, {"response": "", "gold": "1"}]
        await client.post("/v1/verify/batch", json={"items": items})
        body = (await client.get("/v1/verify/stats")).json()
    assert body["total"] == 2 and body["by_status"]["no_answer"] == 1
    assert stats.snapshot() == body


async def test_executor_failures_are_verdicts_not_http_errors() -> None:
    from tirl.sandbox.types import ExecutionResult

    broken = ScriptedExecutor(lambda _req, _n: ExecutionResult.internal_error("worker died"))
    async with await client_for(broken) as client:
        response = await client.post("/v1/verify/batch", json={"items": [{"answer": "\\sqrt{4}", "gold": "2"}]})
    assert response.status_code == 200
    assert response.json()["verdicts"][0]["status"] == "verifier_error"


def test_router_rejects_non_positive_limits() -> None:
    with pytest.raises(ValueError):
        create_verify_router(max_items=0)


@pytest.mark.slow
async def test_end_to_end_over_a_real_local_sandbox() -> None:
    from tirl.sandbox import LocalSandbox

    sandbox = LocalSandbox(workers=1, preload=PRELOAD_MODULES)
    try:
        async with await client_for(sandbox) as client:
            items = [
                {"response": b("\\frac{1}{2006!}"), "gold": "$\\frac{1}{2004!}$"},  # F59 false positive guarded
                {"response": b("\\frac{1}{\\sqrt{n}}"), "gold": "$\\sqrt{1/n}$"},  # F67
                {"response": b("\\binom{10000000}{5000000}"), "gold": "5"},  # runs into the deadline
            ]
            response = await client.post("/v1/verify/batch", json={"items": items, "timeout_s": 2})
            body = response.json()
            metrics = (await client.get("/metrics")).text
    finally:
        await sandbox.aclose()
    assert response.status_code == 200, json.dumps(body)[:500]
    assert [v["reward"] for v in body["verdicts"]] == [0.0, 1.0, 0.0]
    # the reference 5 compared with itself in time (the control), so the deadline is the answer's
    assert [v["status"] for v in body["verdicts"]] == ["ok", "ok", "answer_timeout"]
    assert all(v["path"] == "symbolic" for v in body["verdicts"])
    # The executions went through the service's admission and accounting.
    assert re.search(r'executions_total\{status="timeout"\} 1\.0', metrics), metrics


async def test_the_question_field_reaches_the_base_policy(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, _ = scripted
    items = [
        {"answer": "123", "gold": "123_8", "question": "Express your answer in base 8."},
        {"answer": "123", "gold": "123_8"},
        {"answer": "123", "gold": "123_8", "question": None},
    ]
    response = await client.post("/v1/verify/batch", json={"items": items})
    assert response.status_code == 200
    assert [v["reward"] for v in response.json()["verdicts"]] == [1.0, 0.0, 0.0]


async def test_a_long_or_non_string_question_is_refused(scripted: tuple[httpx.AsyncClient, ScriptedExecutor]) -> None:
    client, _ = scripted
    items = [{"answer": "1", "gold": "1", "question": "x" * 1001}]
    too_long = await client.post("/v1/verify/batch", json={"items": items})
    assert too_long.status_code == 413 and "question" in too_long.text
    wrong_type = await client.post("/v1/verify/batch", json={"items": [{"answer": "1", "gold": "1", "question": 5}]})
    assert wrong_type.status_code == 422
