"""The HTTP app: endpoints, ordering, limits (413/422), robustness to bad input, health, metrics, routers."""

from __future__ import annotations

import asyncio
import dataclasses
import json

import httpx
import pytest
from fastapi import APIRouter, Depends, Request
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_service_support import ScriptedExecutor
from tirl.sandbox.types import ExecutionRequest, ExecutionResult
from tirl.service.app import create_app, get_service
from tirl.service.core import ExecutionService, ServiceConfig
from tirl.service.schemas import ExecuteRequest, ExecuteResult, result_from_wire, result_to_wire


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc")


def item(code: str, rid: str, **kw) -> dict:
    return {"request_id": rid, "code": code, **kw}


def metric(text: str, name: str, **labels) -> float:
    """Value of one sample in Prometheus text (0 when absent)."""
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    key = f"{name}{{{want}}}" if labels else name
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        if sample == key or (labels and sample.startswith(name + "{") and _same_labels(sample, labels)):
            return float(value)
    return 0.0


def _same_labels(sample: str, labels: dict) -> bool:
    inside = sample[sample.index("{") + 1 : -1]
    pairs = dict(p.split("=", 1) for p in inside.split(",") if p)
    return {k: v.strip('"') for k, v in pairs.items()} == {k: str(v) for k, v in labels.items()}


# -- wire format ----------------------------------------------------------------------------------


def test_result_to_wire_equals_the_dataclass_dict():
    result = ExecutionResult(
        "error",
        stdout="o",
        stderr="e",
        display="d",
        error_type="E",
        traceback="t",
        exit_code=1,
        duration_s=0.5,
        stdout_truncated=True,
        request_id="r",
    )
    assert result_to_wire(result) == result.to_dict()


def test_schemas_mirror_the_shared_dataclasses():
    assert set(ExecuteRequest.model_fields) == {f.name for f in dataclasses.fields(ExecutionRequest)}
    assert set(ExecuteResult.model_fields) == {f.name for f in dataclasses.fields(ExecutionResult)}


@pytest.mark.parametrize(
    "data,why",
    [
        (["x"], "non-object"),
        ({"status": "weird", "request_id": "a"}, "unknown"),
        ({"status": "ok", "request_id": "b"}, "of 'b'"),
    ],
)
def test_result_from_wire_turns_bad_results_into_internal(data, why):
    result = result_from_wire(data, "a")
    assert result.status == "internal" and result.request_id == "a"
    assert why in result.stderr


# -- execution ------------------------------------------------------------------------------------


async def test_single_execute_returns_result_for_that_id():
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute", json=item("echo hello", "r1"))
    assert r.status_code == 200
    assert r.json()["stdout"] == "hello\n" and r.json()["request_id"] == "r1" and r.json()["status"] == "ok"


async def test_batch_answers_in_request_order_even_when_completion_order_differs():
    items = [item(f"sleep {0.05 - i * 0.01:.2f}; echo {i}", f"id{i}") for i in range(5)]
    async with client_for(create_app(ScriptedExecutor(workers=5))) as c:
        r = await c.post("/v1/execute/batch", json={"requests": items})
    assert r.status_code == 200
    results = r.json()["results"]
    assert [x["request_id"] for x in results] == [f"id{i}" for i in range(5)]
    assert [x["stdout"] for x in results] == [f"{i}\n" for i in range(5)]


async def test_batch_items_run_concurrently_up_to_max_concurrency():
    ex = ScriptedExecutor(workers=3)
    items = [item("sleep 0.03", f"id{i}") for i in range(9)]
    async with client_for(create_app(ex)) as c:
        r = await c.post("/v1/execute/batch", json={"requests": items})
    assert r.status_code == 200
    assert ex.max_running == 3


async def test_duplicate_id_inside_one_batch_runs_once():
    ex = ScriptedExecutor()
    async with client_for(create_app(ex)) as c:
        r = await c.post("/v1/execute/batch", json={"requests": [item("echo a", "same")] * 3})
    assert [x["stdout"] for x in r.json()["results"]] == ["a\n"] * 3
    assert ex.runs["same"] == 1


async def test_retried_id_answered_from_first_execution_across_endpoints():
    ex = ScriptedExecutor()
    async with client_for(create_app(ex)) as c:
        first = (await c.post("/v1/execute", json=item("echo a", "x"))).json()
        second = (await c.post("/v1/execute/batch", json={"requests": [item("echo a", "x")]})).json()["results"][0]
    assert first == second
    assert ex.runs["x"] == 1


async def test_executor_exception_is_an_internal_result_not_a_500():
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute/batch", json={"requests": [item("raise", "a"), item("echo fine", "b")]})
    assert r.status_code == 200
    a, b = r.json()["results"]
    assert a["status"] == "internal" and "scripted executor bug" in a["stderr"]
    assert b["status"] == "ok"


async def test_hung_executor_answered_internal_at_safety_deadline():
    cfg = ServiceConfig(deadline_grace_s=0.05)
    async with client_for(create_app(ScriptedExecutor(), cfg)) as c:
        r = await c.post("/v1/execute", json=item("hang", "a", timeout_s=0.05))
    assert r.status_code == 200
    assert r.json()["status"] == "internal" and "safety deadline" in r.json()["stderr"]


async def test_lone_surrogates_round_trip_without_server_error():
    body = json.dumps({"request_id": "s", "code": "stdin", "stdin": "a\ud800b"})
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 200
    assert json.loads(r.content)["stdout"] == "a\ud800b"


# -- bad input --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body,fragment",
    [
        (b'{"request_id": "a", "code": ', "not valid JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (json.dumps({"code": "echo 1"}).encode(), "request_id: Field required"),
        (json.dumps({"request_id": "", "code": "x"}).encode(), "request_id: String should have at least 1 character"),
        (json.dumps({"request_id": "a", "code": 5}).encode(), "code: Input should be a valid string"),
        (
            json.dumps({"request_id": "a", "code": "x", "timeout_s": 0}).encode(),
            "timeout_s: Input should be greater than 0",
        ),
        (json.dumps({"request_id": "a", "code": "x", "stdn": ""}).encode(), "stdn: Extra inputs are not permitted"),
        # FastAPI answered these three with a bare 400 "There was an error parsing the body"
        (b'{"request_id": "a", "code": "\xff"}', "body is not valid JSON: not valid UTF-8 (byte 29)"),
        (
            b'{"request_id": "a", "code": "x", "stdin": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            "body is not valid JSON: nested too deeply",
        ),
        # and this one (json.loads refuses integers over 4300 digits with a plain ValueError)
        (
            b'{"request_id": "a", "code": "x", "memory_mb": 1' + b"0" * 5000 + b"}",
            "body is not valid JSON: Exceeds the limit (4300 digits) for integer string conversion",
        ),
    ],
)
async def test_malformed_single_request_gets_readable_422(body, fragment):
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["error"] == "invalid_request"
    assert fragment in r.json()["message"]


async def test_malformed_batch_item_named_by_index():
    body = {"requests": [item("echo 1", "a"), {"request_id": "b", "code": "x", "memory_mb": "lots"}]}
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute/batch", json=body)
    assert r.status_code == 422
    assert "body.requests[1].memory_mb" in r.json()["message"]


@pytest.mark.parametrize(
    "fields,fragment",
    [
        ({"timeout_s": "5"}, 'timeout_s: Input should be a valid number, got a string ("5")'),
        ({"timeout_s": True}, "timeout_s: Input should be a valid number, got a boolean (true)"),
        ({"timeout_s": None}, "timeout_s: Input should be a valid number, got null"),
        ({"memory_mb": "512"}, 'memory_mb: Input should be a valid integer, got a string ("512")'),
        ({"memory_mb": False}, "memory_mb: Input should be a valid integer, got a boolean (false)"),
        ({"memory_mb": 512.5}, "memory_mb: Input should be a valid integer, got a number (512.5)"),
        ({"request_id": 7}, "request_id: Input should be a valid string, got a number (7)"),
        ({"stdin": ["a"]}, "stdin: Input should be a valid string, got an array"),
        ({"code": {"src": "x"}}, "code: Input should be a valid string, got an object"),
    ],
)
async def test_lax_types_are_422_and_never_run(fields, fragment):
    # pydantic's lax mode took "5" and true as numbers (true ran with a 1 s deadline); docs/service.md: 422.
    ex = ScriptedExecutor()
    async with client_for(create_app(ex)) as c:
        r = await c.post("/v1/execute", json={**item("echo 1", "a"), **fields})
        batch = [item("echo 1", "b"), {**item("echo 1", "c"), **fields}]
        rb = await c.post("/v1/execute/batch", json={"requests": batch})
    assert r.status_code == 422 and rb.status_code == 422
    assert fragment in r.json()["message"], r.json()["message"]
    assert "body.requests[1]." + fragment in rb.json()["message"], rb.json()["message"]
    assert sum(ex.runs.values()) == 0


async def test_infinite_timeout_is_422():
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post(
            "/v1/execute",
            content=b'{"request_id": "a", "code": "echo 1", "timeout_s": Infinity}',
            headers={"content-type": "application/json"},
        )
    assert r.status_code == 422 and "timeout_s: Input should be a finite number" in r.json()["message"]


async def test_integers_are_accepted_for_float_fields():
    seen: list[ExecutionRequest] = []

    class Recording(ScriptedExecutor):
        async def run(self, request: ExecutionRequest) -> ExecutionResult:
            seen.append(request)
            return await super().run(request)

    async with client_for(create_app(Recording())) as c:
        r = await c.post("/v1/execute", json=item("echo 1", "a", timeout_s=5, memory_mb=512))
    assert r.status_code == 200 and r.json()["stdout"] == "1\n"
    assert (seen[0].timeout_s, seen[0].memory_mb) == (5.0, 512)
    assert type(seen[0].timeout_s) is float and type(seen[0].memory_mb) is int


async def test_empty_batch_is_422():
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.post("/v1/execute/batch", json={"requests": []})
    assert r.status_code == 422


async def test_timeout_over_server_maximum_is_422_and_not_run():
    ex = ScriptedExecutor()
    async with client_for(create_app(ex, ServiceConfig(max_timeout_s=30))) as c:
        r = await c.post("/v1/execute", json=item("echo 1", "a", timeout_s=31))
    assert r.status_code == 422 and "over the limit of 30" in r.json()["message"]
    assert ex.runs["a"] == 0


async def test_code_over_limit_counted_in_utf8_bytes_is_413():
    ex = ScriptedExecutor()
    cfg = ServiceConfig(max_code_bytes=10)
    async with client_for(create_app(ex, cfg)) as c:
        fits = await c.post("/v1/execute", json=item("echo 12345", "a"))  # exactly 10 bytes
        over = await c.post("/v1/execute", json=item("echo é1234", "b"))  # 10 characters, 11 bytes
    assert fits.status_code == 200
    assert over.status_code == 413 and "11 bytes, over the limit of 10" in over.json()["message"]
    assert ex.runs["b"] == 0


async def test_stdin_over_limit_in_batch_is_413_naming_the_item():
    cfg = ServiceConfig(max_stdin_bytes=4)
    body = {"requests": [item("stdin", "a", stdin="abcd"), item("stdin", "b", stdin="abcde")]}
    async with client_for(create_app(ScriptedExecutor(), cfg)) as c:
        r = await c.post("/v1/execute/batch", json=body)
    assert r.status_code == 413
    assert r.json()["detail"] == [
        {"index": 1, "request_id": "b", "message": "stdin is 5 bytes, over the limit of 4 bytes"}
    ]


async def test_too_many_items_in_batch_is_413():
    async with client_for(create_app(ScriptedExecutor(), ServiceConfig(max_batch_size=2))) as c:
        r = await c.post("/v1/execute/batch", json={"requests": [item("echo", f"i{i}") for i in range(3)]})
    assert r.status_code == 413 and "3 requests, over the limit of 2" in r.json()["message"]


async def test_body_over_limit_is_413_before_parsing_declared_or_streamed():
    app = create_app(ScriptedExecutor(), ServiceConfig(max_body_bytes=100))
    big = json.dumps(item("echo " + "x" * 200, "a")).encode()

    async def chunks():
        for i in range(0, len(big), 50):
            yield big[i : i + 50]

    async with client_for(app) as c:
        declared = await c.post("/v1/execute", content=big, headers={"content-type": "application/json"})
        streamed = await c.post("/v1/execute", content=chunks(), headers={"content-type": "application/json"})
        small = await c.post("/v1/execute", json=item("echo 1", "b"))
    assert declared.status_code == 413 and streamed.status_code == 413
    assert "over the limit of 100 bytes" in streamed.json()["message"]
    assert small.status_code == 200


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
        lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
        max_leaves=12,
    )
)
def test_any_json_body_gets_a_json_answer_never_a_server_error(payload):
    async def go():
        app = create_app(ScriptedExecutor())
        async with client_for(app) as c:
            out = []
            for path in ("/v1/execute", "/v1/execute/batch"):
                for body in (payload, {"requests": [payload]}):
                    r = await c.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
                    out.append((r.status_code, r.json()))
            return out

    for status, body in asyncio.run(go()):
        assert status in (200, 413, 422)
        if status != 200:
            assert isinstance(body["message"], str) and body["message"]


# -- health, metrics, OpenAPI, routers ----------------------------------------------------------------


async def test_queue_depth_and_in_flight_reported_while_busy():
    ex = ScriptedExecutor(workers=1)
    app = create_app(ex)
    async with client_for(app) as c:
        pending = asyncio.ensure_future(
            c.post("/v1/execute/batch", json={"requests": [item("gate g", f"i{i}") for i in range(3)]})
        )
        for _ in range(100):
            await asyncio.sleep(0.005)
            health = (await c.get("/healthz")).json()
            if health["queue_depth"] == 2:
                break
        text = (await c.get("/metrics")).text
        ex.gate("g").set()
        await pending
        after = (await c.get("/healthz")).json()
    assert (health["in_flight"], health["queue_depth"], health["max_concurrency"]) == (1, 2, 1)
    assert metric(text, "tirl_service_queue_depth") == 2 and metric(text, "tirl_service_in_flight") == 1
    assert (after["in_flight"], after["queue_depth"]) == (0, 0)


async def test_metrics_count_calls_by_status_and_source_and_latency():
    ex = ScriptedExecutor()
    async with client_for(create_app(ex)) as c:
        batch = [item("echo 1", "a"), item("fail", "b"), item("timeout", "c")]
        await c.post("/v1/execute/batch", json={"requests": batch})
        await c.post("/v1/execute", json=item("echo 1", "a"))
        await c.post("/v1/execute", json={"bad": 1})
        text = (await c.get("/metrics")).text
    assert metric(text, "tirl_service_calls_total", source="executed", status="ok") == 1
    assert metric(text, "tirl_service_calls_total", source="executed", status="error") == 1
    assert metric(text, "tirl_service_calls_total", source="executed", status="timeout") == 1
    assert metric(text, "tirl_service_calls_total", source="cached", status="ok") == 1
    assert metric(text, "tirl_service_executions_total", status="ok") == 1
    assert metric(text, "tirl_service_call_latency_seconds_count") == 4
    assert metric(text, "tirl_service_batch_size_count") == 1
    assert metric(text, "tirl_service_rejected_total", code="422") == 1


async def test_healthz_reports_limits_and_draining_is_503():
    app = create_app(ScriptedExecutor(workers=7), ServiceConfig(max_code_bytes=123))
    async with client_for(app) as c:
        ok = await c.get("/healthz")
        app.state.service.draining = True
        draining = await c.get("/healthz")
    assert ok.status_code == 200 and ok.json()["limits"]["max_code_bytes"] == 123
    assert ok.json()["max_concurrency"] == 7
    assert draining.status_code == 503 and draining.json()["status"] == "draining"


async def test_openapi_schema_lists_the_endpoints():
    async with client_for(create_app(ScriptedExecutor())) as c:
        spec = (await c.get("/openapi.json")).json()
    assert {"/v1/execute", "/v1/execute/batch", "/v1/execute/stream", "/healthz", "/metrics"} <= set(spec["paths"])
    assert "StreamedResult" in spec["components"]["schemas"]
    assert "ExecuteRequest" in spec["components"]["schemas"]


async def test_extra_router_is_included_and_reaches_the_service():
    router = APIRouter()

    @router.post("/v1/echo-count")
    async def echo_count(request: Request, service: ExecutionService = Depends(get_service)) -> dict:
        result = await service.execute(ExecutionRequest(code="echo via router", request_id="router-1"))
        return {"stdout": result.stdout, "same": service is request.app.state.service}

    async with client_for(create_app(ScriptedExecutor(), routers=[router])) as c:
        r = await c.post("/v1/echo-count")
    assert r.json() == {"stdout": "via router\n", "same": True}


def test_concurrency_follows_executor_capacity_unless_configured():
    from tirl.service.core import DEFAULT_MAX_CONCURRENCY, resolve_concurrency

    class Pool(ScriptedExecutor):
        max_concurrency = 12

    assert resolve_concurrency(ServiceConfig(), Pool(workers=6)) == 12
    assert resolve_concurrency(ServiceConfig(), ScriptedExecutor(workers=6)) == 6
    assert resolve_concurrency(ServiceConfig(max_concurrency=3), Pool(workers=6)) == 3
    assert resolve_concurrency(ServiceConfig(), object()) == DEFAULT_MAX_CONCURRENCY  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        resolve_concurrency(ServiceConfig(max_concurrency=0), Pool())


async def test_unknown_path_gets_json_404():
    async with client_for(create_app(ScriptedExecutor())) as c:
        r = await c.get("/nope")
    assert r.status_code == 404 and r.json()["error"] == "http_error"


async def test_lifespan_drains_and_closes_owned_executor():
    ex = ScriptedExecutor()
    app = create_app(ex, close_executor=True)
    async with app.router.lifespan_context(app):
        pass
    assert ex.closed and app.state.service.draining


# -- the fast path (FastExecutePath) ---------------------------------------------------------------

FAST_CASES = [
    ("/v1/execute", item("echo hi", "f1")),
    ("/v1/execute", item("stdin", "f2", stdin="in\n", timeout_s=3, memory_mb=64)),
    ("/v1/execute", item("echo \u00e9\u00e8 \U0001f600", "f3")),
    ("/v1/execute/batch", {"requests": [item(f"echo {i}", f"fb{i}") for i in range(5)]}),
    # not well-formed: the fast path must hand these to the routes, which answer as before
    ("/v1/execute", item("echo x", "bad1", timeout_s="5")),
    ("/v1/execute", item("echo x", "bad2", timeout_s=10_000)),
    ("/v1/execute", {"request_id": "bad3", "code": "echo x", "extra": 1}),
    ("/v1/execute", item("x" * 2_000_000, "bad4")),
    ("/v1/execute/batch", {"requests": []}),
    ("/v1/execute/batch", {"requests": [item("echo y", "bad5", timeout_s=True)]}),
]


def _comparable(response: httpx.Response) -> tuple:
    body = response.json()
    for result in [body] if "status" in body else body.get("results", []):
        result.pop("duration_s", None)
    return response.status_code, response.headers["content-type"], body


@pytest.mark.parametrize(("path", "body"), FAST_CASES)
async def test_fast_path_answers_exactly_as_the_routes(path, body):
    answers = []
    for fast in (True, False):
        async with client_for(create_app(ScriptedExecutor(), ServiceConfig(fast_path=fast))) as c:
            answers.append(_comparable(await c.post(path, json=body)))
    assert answers[0] == answers[1]


async def test_raw_bodies_the_one_pass_parser_refuses_fall_back_to_the_routes():
    # a lone surrogate escape (json.loads accepts it, pydantic's JSON parser does not) and NaN
    for raw in (
        b'{"request_id": "s1", "code": "echo \\ud800"}',
        b'{"request_id": "s2", "code": "echo", "timeout_s": NaN}',
        b'{"request_id": "s3", "code": "echo a"',
        b"\xff\xfe",
    ):
        answers = []
        for fast in (True, False):
            async with client_for(create_app(ScriptedExecutor(), ServiceConfig(fast_path=fast))) as c:
                r = await c.post("/v1/execute", content=raw, headers={"content-type": "application/json"})
                answers.append((r.status_code, r.text))
        assert answers[0] == answers[1], raw


async def test_fast_path_is_taken_for_well_formed_requests_and_stays_idempotent(monkeypatch):
    from tirl.service import app as app_module

    seen = []
    original = app_module.ExecuteRequest.model_validate_json
    monkeypatch.setattr(
        app_module.ExecuteRequest, "model_validate_json", lambda data: seen.append(data) or original(data)
    )
    ex = ScriptedExecutor()
    async with client_for(create_app(ex)) as c:
        first = await c.post("/v1/execute", json=item("echo once", "same-id"))
        second = await c.post("/v1/execute", json=item("echo once", "same-id"))
    assert len(seen) == 2
    assert first.json() == second.json() and first.json()["stdout"] == "once\n"
    assert ex.runs["same-id"] == 1


async def test_a_failing_executor_is_an_internal_result_on_the_fast_path():
    class Broken(ScriptedExecutor):
        async def run(self, request):
            raise KeyError("boom")

    async with client_for(create_app(Broken())) as c:
        r = await c.post("/v1/execute", json=item("echo x", "b1"))
    # the service turns executor failures into internal results; nothing escapes as an exception
    assert r.status_code == 200 and r.json()["status"] == "internal", r.text
