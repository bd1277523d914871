"""The client's real HTTP layer (aiohttp) over loopback sockets: what it returns, what it raises, and how
``SandboxClient`` turns a server's 5xx and an HTTP read timeout into structured ``internal`` results.

The servers are small FastAPI apps served by uvicorn in this process on 127.0.0.1 (port 0), stopped by each test.
"""

from __future__ import annotations

import asyncio
import socket

import pytest
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse

from test_service_support import serving
from tirl.sandbox.types import ExecutionRequest
from tirl.service.client import ClientConfig, SandboxClient
from tirl.service.transport import AiohttpTransport, TransportError

pytestmark = pytest.mark.timeout(60)


BIG_LINE = b"x" * 300_000  # over aiohttp's readline limit (128 KiB by default)


def misbehaving_app() -> tuple[FastAPI, dict[str, int], asyncio.Event]:
    """``/healthz`` answers; ``/v1/execute/batch`` answers 500 for code ``boom``, and for ``hang`` only once the
    returned event is set (so the server can stop without cancelling handlers). There is no
    ``/v1/execute/stream`` (a server from before it: 404). ``/lines`` streams lines, the second only once
    ``release`` is set; ``/cut`` streams one line and then breaks the connection."""
    app = FastAPI()
    hits: dict[str, int] = {"batch": 0, "healthz": 0, "stream": 0}
    release = asyncio.Event()

    @app.exception_handler(404)
    async def not_found(request: Request, exc: Exception) -> Response:
        if request.url.path == "/v1/execute/stream":
            hits["stream"] += 1
        return Response('{"detail": "Not Found"}', status_code=404, media_type="application/json")

    @app.get("/lines")
    async def lines() -> Response:
        async def body():
            yield b"first\n"
            await release.wait()
            yield b"sec"  # a line in two chunks
            yield b"ond\n" + BIG_LINE + b"\n\nlast without newline"

        return StreamingResponse(body(), media_type="application/x-ndjson")

    @app.get("/cut")
    async def cut() -> Response:
        async def body():
            yield b"only\n"
            raise RuntimeError("the server broke mid-stream (on purpose)")

        return StreamingResponse(body(), media_type="application/x-ndjson")

    @app.get("/healthz")
    async def healthz() -> dict:
        hits["healthz"] += 1
        return {"status": "ok", "limits": {"deadline_grace_s": 0}}

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type=request.headers.get("content-type", "text/plain"))

    @app.get("/boom")
    async def boom() -> Response:
        return Response("boom", status_code=500)

    @app.get("/slow")
    async def slow() -> dict:
        await release.wait()
        return {}

    @app.post("/v1/execute/batch")
    async def batch(request: Request) -> Response:
        hits["batch"] += 1
        codes = [r["code"] for r in (await request.json())["requests"]]
        if "hang" in codes:
            await release.wait()
        return Response("boom", status_code=500)

    return app, hits, release


def free_port() -> int:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


async def test_aiohttp_transport_returns_every_http_answer_and_raises_only_without_one():
    app, _, release = misbehaving_app()
    async with serving(app, graceful_shutdown_s=1, before_stop=release) as url:
        http = AiohttpTransport(max_connections=2, keepalive_expiry_s=4)
        body = '{"x":"é\\udcff"}'.encode()
        echoes = [
            await http.request("POST", url + "/echo", body=body, read_timeout_s=5, connect_timeout_s=5)
            for _ in range(5)
        ]  # more requests than connections: keep-alive reuse
        boom = await http.request("GET", url + "/boom", read_timeout_s=5, connect_timeout_s=5)
        with pytest.raises(TransportError, match="Timeout"):
            await http.request("GET", url + "/slow", read_timeout_s=0.2, connect_timeout_s=5)
        with pytest.raises(TransportError):
            await http.request("GET", f"http://127.0.0.1:{free_port()}/healthz", read_timeout_s=5, connect_timeout_s=5)
        await http.aclose()
        await http.aclose()
        with pytest.raises(TransportError, match="closed"):
            await http.request("GET", url + "/healthz", read_timeout_s=5, connect_timeout_s=5)
    assert all(e.status == 200 and e.body == body and e.json() == {"x": "é\udcff"} for e in echoes)
    assert boom.status == 500 and boom.text == "boom"


async def test_aiohttp_stream_lines_gives_each_line_as_it_arrives_and_raises_when_cut():
    app, _, release = misbehaving_app()
    async with serving(app, graceful_shutdown_s=1, before_stop=release) as url:
        http = AiohttpTransport(max_connections=2, keepalive_expiry_s=4)
        got: list[bytes] = []
        async with http.stream_lines("GET", url + "/lines", read_timeout_s=10, connect_timeout_s=5) as stream:
            status = stream.status
            lines = stream.lines()
            got.append(await anext(lines))
            assert not release.is_set()  # the first line came while the server still held back the rest
            release.set()
            got.extend([line async for line in lines])
        async with http.stream_lines("GET", url + "/boom", read_timeout_s=10, connect_timeout_s=5) as stream:
            boom = (stream.status, await stream.read())
        cut: list[bytes] = []
        with pytest.raises(TransportError, match="ClientPayloadError"):
            async with http.stream_lines("GET", url + "/cut", read_timeout_s=10, connect_timeout_s=5) as stream:
                async for line in stream.lines():
                    cut.append(line)
        with pytest.raises(TransportError):
            async with http.stream_lines(
                "GET", f"http://127.0.0.1:{free_port()}/lines", read_timeout_s=5, connect_timeout_s=5
            ):
                pass
        after = await http.request("GET", url + "/healthz", read_timeout_s=5, connect_timeout_s=5)
        await http.aclose()
    assert status == 200
    assert got == [b"first", b"second", BIG_LINE, b"", b"last without newline"]
    assert boom == (500, b"boom")
    assert cut == [b"only"]
    assert after.status == 200


async def test_client_turns_a_5xx_and_a_read_timeout_into_internal_results():
    app, hits, release = misbehaving_app()
    config = ClientConfig(
        server_grace_s=0, http_timeout_margin_s=0.3, max_attempts=2, batch_size=1, senders=2, probe_interval_s=0.05
    )
    async with serving(app, graceful_shutdown_s=1, before_stop=release) as url:
        async with SandboxClient(url, config) as client:
            boom, hang = await asyncio.gather(
                client.run(ExecutionRequest("boom", timeout_s=0.1, request_id="b")),
                client.run(ExecutionRequest("hang", timeout_s=0.1, request_id="h")),
            )
            stats = client.stats()
    assert boom.status == "internal" and boom.request_id == "b"
    assert "gave up after 2 attempts" in boom.stderr and "HTTP 500: boom" in boom.stderr
    assert hang.status == "internal" and hang.request_id == "h"
    assert "gave up after 2 attempts" in hang.stderr and "Timeout" in hang.stderr
    # The server answered its health probe each time, so every batch went back to it with the same ids.
    assert stats.resent_same_server >= 2 and stats.failovers == 0
    assert stats.servers[url]["up"] is True
    assert hits["batch"] == 4 and hits["healthz"] >= 2
    # The server has no /v1/execute/stream: a 404 there (one per sender that posted before the first 404 came
    # back), then batches only; the 404 is not counted as a failed attempt.
    assert 1 <= hits["stream"] <= config.senders
