"""``POST /v1/execute/stream`` and ``SandboxClient`` over it: each item answered as it finishes.

Server side: lines come in completion order, each as its item finishes (real sockets, real sandbox for the
``time.sleep`` case), the same 413/422 answers as the batch endpoint, the same lines with the fast path on and
off, idempotency shared with the other endpoints, and a client that disconnects mid-stream. Client side (in-process
apps behind ``RoutingTransport``, whose streams deliver each line as the app sends it): calls answered one by one
with the balancer's ``outstanding`` dropping per item, a stream cut mid-way (server alive, or dead) re-sending
only the unanswered ids, the fallback to ``/v1/execute/batch`` for a server without the endpoint, and the flush
policy of an idle client. Orderings are checked with events (gates, in-flight counts), never with timings.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from contextlib import asynccontextmanager

import httpx
import pytest

from test_service_app import metric
from test_service_support import RoutingTransport, ScriptedExecutor, serving
from tirl.sandbox.types import ExecutionRequest, ExecutionResult
from tirl.service.app import create_app
from tirl.service.client import ClientConfig, SandboxClient
from tirl.service.core import ExecutionService, ServiceConfig
from tirl.service.transport import AiohttpTransport

pytestmark = pytest.mark.timeout(120)

A, B = "a.test:9001", "b.test:9002"
URL_A, URL_B = f"http://{A}", f"http://{B}"
STREAM_TASKS = ("ExecutionService._execute_item", "NdjsonStream._write", "NdjsonStream._until_disconnect")


def item(code: str, rid: str, **kw) -> dict:
    return {"request_id": rid, "code": code, **kw}


def body_of(*items: dict) -> bytes:
    return json.dumps({"requests": list(items)}).encode()


def req(code: str, rid: str, **kw) -> ExecutionRequest:
    return ExecutionRequest(code=code, request_id=rid, **kw)


def fast(**kw) -> ClientConfig:
    base = dict(flush_interval_s=0.002, probe_interval_s=0.02, unavailable_wait_s=0.3, senders=4)
    base.update(kw)
    return ClientConfig(**base)


async def until(predicate, what: str, tries: int = 2000) -> None:
    """Yield to the event loop until ``predicate()`` holds (a guard against hanging, not a timing check)."""
    for _ in range(tries):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never happened: {what}")


def stream_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if getattr(t.get_coro(), "__qualname__", "") in STREAM_TASKS]


def lines_of(text: str | bytes) -> list[dict]:
    out = []
    for line in (text.decode() if isinstance(text, bytes) else text).splitlines():
        data = json.loads(line)
        data["result"].pop("duration_s")
        out.append(data)
    return out


# -- the server ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast_path", "routes"])
async def test_each_line_is_sent_as_its_item_finishes_in_completion_order(fast_path):
    ex = ScriptedExecutor(workers=4)
    app = create_app(ex, ServiceConfig(fast_path=fast_path))
    http = AiohttpTransport(max_connections=2, keepalive_expiry_s=4)
    try:
        async with serving(app) as url:
            body = body_of(item("gate g0; echo 0", "s0"), item("echo 1", "s1"), item("gate g2; echo 2", "s2"))
            async with http.stream_lines(
                "POST", url + "/v1/execute/stream", body=body, read_timeout_s=30, connect_timeout_s=5
            ) as stream:
                lines = stream.lines()
                first = json.loads(await anext(lines))
                running_at_first = ex.running  # the two gated items are still executing
                ex.gate("g2").set()
                second = json.loads(await anext(lines))
                ex.gate("g0").set()
                rest = [json.loads(line) async for line in lines]
                status = stream.status
    finally:
        await http.aclose()
    assert status == 200
    assert running_at_first == 2
    assert [first["index"], second["index"]] == [1, 2] and [r["index"] for r in rest] == [0]
    assert [x["result"]["stdout"] for x in (first, second, *rest)] == ["1\n", "2\n", "0\n"]
    assert [x["result"]["request_id"] for x in (first, second, *rest)] == ["s1", "s2", "s0"]


@pytest.mark.slow
async def test_a_fast_call_is_answered_while_a_slow_time_sleep_call_of_its_batch_still_runs():
    """A real sandbox: the slow item blocks a worker in ``time.sleep``; its batch's fast item arrives first, and
    when it arrives the slow one is still executing (the server's in-flight count says so)."""
    from tirl.sandbox import LocalSandbox

    events: list[str] = []

    class Recording(LocalSandbox):
        async def run(self, request: ExecutionRequest) -> ExecutionResult:
            result = await super().run(request)
            events.append(f"finished {request.request_id}")
            return result

    sandbox = Recording(workers=2, preload=())
    app = create_app(sandbox)
    http = AiohttpTransport(max_connections=2, keepalive_expiry_s=4)
    try:
        async with serving(app) as url:
            await sandbox.run(ExecutionRequest("print(0)"))  # workers up before the batch
            events.clear()
            body = body_of(
                item("import time\ntime.sleep(5)\nprint('slow')", "slow", timeout_s=60),
                item("print('fast')", "fast", timeout_s=60),
            )
            async with http.stream_lines(
                "POST", url + "/v1/execute/stream", body=body, read_timeout_s=90, connect_timeout_s=5
            ) as stream:
                received = []
                async for line in stream.lines():
                    data = json.loads(line)
                    events.append(f"line {data['result']['request_id']}")
                    if not received:
                        in_flight_at_first_line = app.state.service.in_flight
                    received.append(data)
    finally:
        await http.aclose()
        await sandbox.aclose()
    assert [r["index"] for r in received] == [1, 0]
    assert [r["result"]["stdout"] for r in received] == ["fast\n", "slow\n"]
    assert in_flight_at_first_line == 1
    assert events == ["finished fast", "line fast", "finished slow", "line slow"]


BAD_BODIES = [
    ("empty", body_of(), ServiceConfig()),
    ("malformed", b'{"requests": [', ServiceConfig()),
    ("lax type", body_of(item("echo 1", "a"), item("echo 1", "b", timeout_s="5")), ServiceConfig()),
    ("unknown field", body_of(item("echo 1", "a", stdn="")), ServiceConfig()),
    ("timeout over max", body_of(item("echo 1", "a", timeout_s=31)), ServiceConfig(max_timeout_s=30)),
    ("too many", body_of(*(item("echo", f"i{i}") for i in range(3))), ServiceConfig(max_batch_size=2)),
    ("code too big", body_of(item("echo 1", "a"), item("echo " + "x" * 50, "b")), ServiceConfig(max_code_bytes=20)),
    ("body too big", body_of(item("echo " + "x" * 500, "a")), ServiceConfig(max_body_bytes=100)),
]


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast_path", "routes"])
@pytest.mark.parametrize(("case", "body", "config"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
async def test_bad_requests_get_the_batch_endpoints_413_or_422_before_anything_runs(case, body, config, fast_path):
    ex = ScriptedExecutor()
    config = dataclasses.replace(config, fast_path=fast_path)
    app = create_app(ex, config)
    headers = {"content-type": "application/json"}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as c:
        streamed = await c.post("/v1/execute/stream", content=body, headers=headers)
        batch = await c.post("/v1/execute/batch", content=body, headers=headers)
    assert streamed.status_code in (413, 422)
    assert (streamed.status_code, streamed.headers["content-type"], streamed.json()) == (
        batch.status_code,
        batch.headers["content-type"],
        batch.json(),
    )
    assert sum(ex.runs.values()) == 0


async def test_fast_path_and_routes_give_the_same_lines(monkeypatch):
    from tirl.service import app as app_module

    parsed = []
    original = app_module.BatchExecuteRequest.model_validate_json
    monkeypatch.setattr(
        app_module.BatchExecuteRequest, "model_validate_json", lambda data: parsed.append(data) or original(data)
    )
    body = body_of(
        item("sleep 0.02; echo late", "l0"),
        item("echo a", "l1"),
        item("fail", "l2"),
        item("stdin", "l3", stdin="in\n"),
        item("raise", "l4"),
        item("echo é \U0001f600", "l5"),
    )
    answers, one_pass = [], []
    for fast_path in (True, False):
        app = create_app(ScriptedExecutor(), ServiceConfig(fast_path=fast_path))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as c:
            r = await c.post("/v1/execute/stream", content=body, headers={"content-type": "application/json"})
        answers.append((r.status_code, r.headers["content-type"], lines_of(r.content)))
        one_pass.append(len(parsed))
    assert one_pass[0] == 1  # the fast path validated the body in one pass (and answered it)
    assert answers[0] == answers[1]
    status, content_type, lines = answers[0]
    assert status == 200 and content_type == "application/x-ndjson"
    assert [x["index"] for x in lines] == [1, 2, 3, 4, 5, 0]  # completion order: the one that slept came last
    by_index = {x["index"]: x["result"] for x in lines}
    assert by_index[3]["stdout"] == "in\n" and by_index[5]["stdout"] == "é \U0001f600\n"
    assert by_index[4]["status"] == "internal" and "scripted executor bug" in by_index[4]["stderr"]


async def test_stream_shares_idempotency_and_metrics_with_the_other_endpoints():
    ex = ScriptedExecutor()
    app = create_app(ex)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://svc") as c:
        first = await c.post(
            "/v1/execute/stream",
            content=body_of(item("echo a", "x"), item("echo a", "x")),
            headers={"content-type": "application/json"},
        )
        again = await c.post(
            "/v1/execute/batch", content=body_of(item("echo a", "x")), headers={"content-type": "application/json"}
        )
        conflict = await c.post(
            "/v1/execute/stream", content=body_of(item("echo other", "x")), headers={"content-type": "application/json"}
        )
        metrics = (await c.get("/metrics")).text
    lines = lines_of(first.content)
    assert sorted(x["index"] for x in lines) == [0, 1] and {x["result"]["stdout"] for x in lines} == {"a\n"}
    assert again.json()["results"][0]["stdout"] == "a\n"
    assert lines_of(conflict.content)[0]["result"]["status"] == "internal"
    assert ex.runs["x"] == 1
    assert metric(metrics, "tirl_service_calls_total", source="executed", status="ok") == 1
    assert metric(metrics, "tirl_service_calls_total", source="joined", status="ok") == 1
    assert metric(metrics, "tirl_service_calls_total", source="cached", status="ok") == 1
    assert metric(metrics, "tirl_service_calls_total", source="conflict", status="internal") == 1
    assert metric(metrics, "tirl_service_batch_size_count") == 3


async def test_closing_execute_each_early_leaves_executions_to_finish_and_be_cached():
    ex = ScriptedExecutor()
    service = ExecutionService(ex)
    items = service.execute_each([req("gate g; echo slow", "slow"), req("echo quick", "quick")])
    first = await anext(items)
    await items.aclose()
    await until(lambda: not stream_tasks(), "the iterator's tasks are gone")
    assert first[0] == 1 and first[1].stdout == "quick\n"
    assert service.cache.running == 1  # the slow execution goes on without its iterator
    ex.gate("g").set()
    await until(lambda: service.cache.running == 0, "the slow execution finished")
    again = await service.execute(req("gate g; echo slow", "slow"))
    assert again.stdout == "slow\n" and ex.runs["slow"] == 1


@pytest.mark.parametrize("fast_path", [True, False], ids=["fast_path", "routes"])
async def test_client_disconnect_mid_stream_stops_the_stream_and_the_server_keeps_serving(fast_path):
    ex = ScriptedExecutor()
    app = create_app(ex, ServiceConfig(fast_path=fast_path))
    http = AiohttpTransport(max_connections=4, keepalive_expiry_s=4)
    errors: list[str] = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: errors.append(record.getMessage())  # type: ignore[method-assign]
    try:
        async with serving(app) as url:
            logging.getLogger("uvicorn.error").addHandler(handler)  # after uvicorn configured its loggers
            body = body_of(item("echo 0", "d0"), item("gate g; echo 1", "d1"))
            async with http.stream_lines(
                "POST", url + "/v1/execute/stream", body=body, read_timeout_s=30, connect_timeout_s=5
            ) as stream:
                first = json.loads(await anext(stream.lines()))
            # The client has gone while d1 still runs: the server's stream for it ends (nothing left waiting
            # to write to a closed connection), the execution itself goes on.
            await until(lambda: not stream_tasks(), "the server's stream tasks are gone")
            assert not ex.gate("g").is_set() and app.state.service.cache.running == 1
            health = await http.request("GET", url + "/healthz", read_timeout_s=5, connect_timeout_s=5)
            async with http.stream_lines(
                "POST",
                url + "/v1/execute/stream",
                body=body_of(item("echo 2", "d2")),
                read_timeout_s=30,
                connect_timeout_s=5,
            ) as stream:
                later = [json.loads(line) async for line in stream.lines()]
            ex.gate("g").set()
            await until(lambda: app.state.service.cache.running == 0, "d1 finished")
            retry = await http.request(
                "POST",
                url + "/v1/execute/batch",
                body=body_of(item("gate g; echo 1", "d1")),
                read_timeout_s=30,
                connect_timeout_s=5,
            )
    finally:
        logging.getLogger("uvicorn.error").removeHandler(handler)
        await http.aclose()
    assert first["index"] == 0
    assert health.status == 200
    assert [x["result"]["stdout"] for x in later] == ["2\n"]
    assert retry.json()["results"][0]["stdout"] == "1\n" and ex.runs["d1"] == 1  # finished, cached, not re-run
    assert errors == []  # no "Exception in ASGI application"


# -- the client ----------------------------------------------------------------------------------------------


def cluster(*names: str, old: tuple[str, ...] = (), workers: int = 8):
    """In-process servers behind a RoutingTransport; those in ``old`` lack ``/v1/execute/stream`` (404), like a
    server from before it."""
    executors = {name: ScriptedExecutor(workers=workers) for name in names}
    apps = {}
    for name, ex in executors.items():
        if name in old:
            app = create_app(ex, ServiceConfig(fast_path=False))
            app.router.routes = [r for r in app.router.routes if getattr(r, "path", "") != "/v1/execute/stream"]
        else:
            app = create_app(ex)
        apps[name] = app
    return executors, RoutingTransport(apps)


async def test_client_answers_each_call_as_its_line_arrives_and_outstanding_drops_per_item():
    executors, transport = cluster(A)
    ex = executors[A]
    async with SandboxClient(URL_A, fast(), transport=transport) as client:
        calls = [
            asyncio.ensure_future(client.run(req(code, f"c{i}")))
            for i, code in enumerate(["gate g; echo 0", "echo 1", "gate h; echo 2"])
        ]
        await until(lambda: calls[1].done(), "the quick call is answered")
        snapshots = [
            (client.stats().servers[URL_A]["outstanding"], client.stats().in_flight, [c.done() for c in calls])
        ]
        ex.gate("h").set()
        await until(lambda: calls[2].done(), "the second gated call is answered")
        snapshots.append(
            (client.stats().servers[URL_A]["outstanding"], client.stats().in_flight, [c.done() for c in calls])
        )
        ex.gate("g").set()
        results = await asyncio.gather(*calls)
        snapshots.append(
            (client.stats().servers[URL_A]["outstanding"], client.stats().in_flight, [c.done() for c in calls])
        )
    assert [(path, ids) for _, path, ids in transport.sent] == [("/v1/execute/stream", ["c0", "c1", "c2"])]
    assert snapshots == [(2, 2, [False, True, False]), (1, 1, [False, True, True]), (0, 0, [True, True, True])]
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]


async def test_stream_cut_mid_way_resends_only_the_unanswered_ids_to_the_same_live_server():
    executors, transport = cluster(A)
    ex = executors[A]
    transport.cut_stream_after[A] = 2  # the connection resets right after the stream's second line
    codes = ["echo 0", "gate g; echo 1", "echo 2", "gate g; echo 3", "echo 4"]
    async with SandboxClient(URL_A, fast(), transport=transport) as client:
        calls = [asyncio.ensure_future(client.run(req(code, f"k{i}"))) for i, code in enumerate(codes)]
        await until(lambda: calls[4].done(), "k4, whose line the cut lost, is answered by the re-send")
        answered_before_release = [i for i, c in enumerate(calls) if c.done()]
        ex.gate("g").set()
        results = await asyncio.gather(*calls)
        stats = client.stats()
    # Lines come in completion order (k0, k2, k4, then the gated ones): the cut came after k0's and k2's.
    assert [(netloc, ids) for netloc, _, ids in transport.sent] == [
        (A, ["k0", "k1", "k2", "k3", "k4"]),
        (A, ["k1", "k3", "k4"]),
    ]
    assert answered_before_release == [0, 2, 4]
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(5)]
    assert dict(ex.runs) == {f"k{i}": 1 for i in range(5)}  # the server de-duplicated the re-sent ids
    assert stats.resent_same_server == 1 and stats.failovers == 0
    assert stats.answered == {"ok": 5} and stats.servers[URL_A]["outstanding"] == 0


async def test_stream_cut_by_a_dying_server_moves_only_the_unanswered_ids_elsewhere():
    executors, transport = cluster(A, B)
    transport.cut_stream_after[A] = 1
    transport.on_cut = transport.down.add  # the server dies right after its first line
    executors[B].gate("g").set()
    async with SandboxClient([URL_A, URL_B], fast(), transport=transport) as client:
        client._ensure_started()
        client._pool.servers[1].outstanding = 1_000  # the batch goes to A first
        results = await client.run_batch(
            [req("echo 0", "m0"), req("gate g; echo 1", "m1"), req("gate g; echo 2", "m2")]
        )
        client._pool.servers[1].outstanding -= 1_000
        stats = client.stats()
    executors[A].gate("g").set()  # let A's orphaned executions end
    assert [(netloc, ids) for netloc, _, ids in transport.sent] == [(A, ["m0", "m1", "m2"]), (B, ["m1", "m2"])]
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]
    assert stats.failovers == 1 and stats.servers[URL_A]["up"] is False
    assert stats.answered == {"ok": 3} and stats.servers[URL_B]["outstanding"] == 0
    assert executors[B].runs["m0"] == 0


async def test_server_without_the_stream_endpoint_gets_batches_and_is_remembered():
    executors, transport = cluster(A, B, old=(A,))
    async with SandboxClient([URL_A, URL_B], fast(senders=1), transport=transport) as client:
        client._ensure_started()
        pool = client._pool
        for round_ in range(2):
            pool.servers[0].outstanding, pool.servers[1].outstanding = 0, 1_000  # to A (old)
            first = await client.run(req(f"echo a{round_}", f"a{round_}"))
            pool.servers[0].outstanding, pool.servers[1].outstanding = 1_000, 0  # to B (new)
            second = await client.run(req(f"echo b{round_}", f"b{round_}"))
        stats = client.stats()
    assert [(netloc, path, ids) for netloc, path, ids in transport.sent] == [
        (A, "/v1/execute/stream", ["a0"]),
        (A, "/v1/execute/batch", ["a0"]),
        (B, "/v1/execute/stream", ["b0"]),
        (A, "/v1/execute/batch", ["a1"]),
        (B, "/v1/execute/stream", ["b1"]),
    ]
    assert (first.stdout, second.stdout) == ("a1\n", "b1\n")
    assert stats.failovers == 0 and stats.resent_same_server == 0 and executors[A].runs["a0"] == 1


async def test_stream_off_sends_batches():
    executors, transport = cluster(A)
    async with SandboxClient(URL_A, fast(stream=False), transport=transport) as client:
        results = await client.run_batch([req("echo 0", "o0"), req("echo 1", "o1")])
    assert [path for _, path, _ in transport.sent] == ["/v1/execute/batch"]
    assert [r.stdout for r in results] == ["0\n", "1\n"]


async def test_a_transport_without_streaming_gets_batches():
    class Plain:
        """An HttpTransport from before ``stream_lines``."""

        def __init__(self, inner: RoutingTransport) -> None:
            self.inner = inner

        async def request(self, *args, **kwargs):
            return await self.inner.request(*args, **kwargs)

        async def aclose(self) -> None:
            await self.inner.aclose()

    executors, transport = cluster(A)
    async with SandboxClient(URL_A, fast(), transport=Plain(transport)) as client:
        result = await client.run(req("echo 0", "p0"))
    assert [path for _, path, _ in transport.sent] == ["/v1/execute/batch"] and result.stdout == "0\n"


async def test_idle_client_sends_at_once_and_a_busy_one_waits_to_fill_its_batch():
    executors, transport = cluster(A)
    # No flush wait would ever end by itself within the test: only "idle, send at once" and "batch full" send.
    async with SandboxClient(URL_A, fast(flush_interval_s=3600, batch_size=2), transport=transport) as client:
        lone = asyncio.ensure_future(client.run(req("echo lone", "i0")))
        await until(lone.done, "the lone call of an idle client is answered")
        gated = asyncio.ensure_future(client.run(req("gate g; echo gated", "i1")))
        await until(lambda: len(transport.sent) == 2, "the gated call is sent")
        x = asyncio.ensure_future(client.run(req("echo x", "i2")))
        for _ in range(5):
            await asyncio.sleep(0)
        sent_while_filling = len(transport.sent)
        y = asyncio.ensure_future(client.run(req("echo y", "i3")))
        await until(lambda: x.done() and y.done(), "x and y are answered once their batch is full")
        executors[A].gate("g").set()
        await gated
    assert lone.result().stdout == "lone\n"
    assert sent_while_filling == 2
    assert [ids for _, _, ids in transport.sent] == [["i0"], ["i1"], ["i2", "i3"]]


@pytest.mark.parametrize(
    "bad",
    [b'{"index": 7, "result": {}}', b'{"index": 0}', b"[0]", b"not json"],
    ids=["other index", "no result", "not an object", "not json"],
)
async def test_a_broken_line_is_a_server_failure_and_the_call_still_gets_its_answer(bad):
    executors, transport = cluster(A)

    original = transport.stream_lines

    @asynccontextmanager
    async def one_bad_line(*args, **kwargs):
        async with original(*args, **kwargs) as stream:
            lines = stream.lines

            async def patched():
                yield bad
                async for line in lines():
                    yield line

            stream.lines = patched
            transport.stream_lines = original  # only once
            yield stream

    transport.stream_lines = one_bad_line
    async with SandboxClient(URL_A, fast(), transport=transport) as client:
        result = await client.run(req("echo fine", "b0"))
        stats = client.stats()
    assert result.stdout == "fine\n" and stats.resent_same_server == 1
    assert stats.servers[URL_A]["outstanding"] == 0
    assert executors[A].runs["b0"] == 1
