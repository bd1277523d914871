"""Test doubles shared by the service tests (this module holds no tests).

* :class:`ScriptedExecutor`: a ``CodeExecutor`` whose "code" is a tiny command language, so service and client
  behaviour (ordering, de-duplication, deadlines, failures) can be tested deterministically without running
  Python in subprocesses. Commands, separated by ``;``:
  ``echo TEXT`` (append ``TEXT\\n`` to stdout), ``sleep SECONDS``, ``gate NAME`` (wait for ``gates[NAME]``),
  ``fail`` (status ``error``), ``timeout`` (status ``timeout``), ``internal`` (status ``internal``),
  ``internal-once`` (``internal`` on the first run of this request id, then carry on), ``raise`` (the executor
  itself raises), ``hang`` (never returns), ``stdin`` (echo the request's stdin).
* :class:`RoutingTransport`: a :class:`~tirl.service.transport.HttpTransport` (what ``SandboxClient`` sends
  through) that hands each request to an in-process ASGI app chosen by the URL's host:port (no sockets:
  ``request`` through httpx's ASGI transport, ``stream_lines`` through a small ASGI driver that gives each
  body chunk as the app sends it, so streamed lines arrive one by one), and can simulate a dead server
  (connection refused), a lost response (the server ran the batch, the client never got the answer), garbage,
  and a stream cut after some lines. The client's real transport (aiohttp) is tested over sockets in
  tests/test_service_transport.py, tests/test_service_stream.py and tests/test_service_fault.py.
* :func:`serving`: serve an ASGI app with uvicorn in this process on 127.0.0.1 (port 0) for a ``with`` block.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from tirl.sandbox.types import ExecutionRequest, ExecutionResult
from tirl.service.server import serve_app
from tirl.service.transport import HttpResponse, TransportError

EXECUTE_PATHS = ("/v1/execute/batch", "/v1/execute/stream")


@dataclass
class ScriptedExecutor:
    workers: int = 4
    gates: dict[str, asyncio.Event] = field(default_factory=dict)
    runs: Counter = field(default_factory=Counter)
    running: int = 0
    max_running: int = 0
    closed: bool = False

    def gate(self, name: str) -> asyncio.Event:
        return self.gates.setdefault(name, asyncio.Event())

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        self.runs[request.request_id] += 1
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        try:
            return await self._interpret(request)
        finally:
            self.running -= 1

    async def _interpret(self, request: ExecutionRequest) -> ExecutionResult:
        out: list[str] = []
        rid = request.request_id
        for command in filter(None, (c.strip() for c in request.code.split(";"))):
            op, _, arg = command.partition(" ")
            if op == "echo":
                out.append(arg + "\n")
            elif op == "stdin":
                out.append(request.stdin)
            elif op == "sleep":
                await asyncio.sleep(float(arg))
            elif op == "gate":
                await self.gate(arg).wait()
            elif op == "hang":
                await asyncio.Event().wait()
            elif op == "fail":
                return ExecutionResult(
                    "error", stdout="".join(out), error_type="RuntimeError", exit_code=1, request_id=rid
                )
            elif op == "timeout":
                return ExecutionResult("timeout", stdout="".join(out), exit_code=-9, request_id=rid)
            elif op == "internal":
                return ExecutionResult.internal_error("scripted internal failure", rid)
            elif op == "internal-once":
                if self.runs[rid] == 1:
                    return ExecutionResult.internal_error("scripted internal failure (first run)", rid)
            elif op == "raise":
                raise RuntimeError("scripted executor bug")
            else:
                return ExecutionResult(
                    "error", stderr=f"unknown command {op!r}", error_type="NameError", request_id=rid
                )
        return ExecutionResult("ok", stdout="".join(out), exit_code=0, request_id=rid)

    async def run_batch(self, requests):
        return list(await asyncio.gather(*(self.run(r) for r in requests)))

    async def aclose(self) -> None:
        self.closed = True


class RoutingTransport:
    """Route by ``host:port`` to in-process ASGI apps; simulate dead servers, lost responses and cut streams.

    Faults, each keyed by ``host:port``: ``down`` (connection refused); ``lose_next_batch_response`` (the next
    batch or stream POST runs to the end on the server, then the connection resets before the client read
    anything); ``garbage_batch_response`` (200 with a body that is not a batch answer or stream lines);
    ``cut_stream_after[netloc] = n`` (the next stream breaks with a ``TransportError`` after its ``n``-th line;
    ``on_cut(netloc)`` is called then, for example ``down.add`` for a server that died).

    Records: ``posts`` per server and ``batch_sizes`` / ``read_timeouts`` per batch or stream POST, and
    ``sent`` as ``(netloc, path, [request ids])`` per POST in order.
    """

    def __init__(self, apps: dict[str, object]) -> None:
        self.apps = apps
        self.transports = {netloc: httpx.ASGITransport(app=app) for netloc, app in apps.items()}
        self.down: set[str] = set()
        self.lose_next_batch_response: set[str] = set()
        self.garbage_batch_response: set[str] = set()
        self.cut_stream_after: dict[str, int] = {}
        self.on_cut: Callable[[str], Any] | None = None
        self.posts: Counter = Counter()
        self.batch_sizes: list[int] = []
        self.read_timeouts: list[float] = []
        self.sent: list[tuple[str, str, list[str]]] = []
        self.closed = False

    def _route(self, url: str, body: bytes | None, read_timeout_s: float) -> tuple[str, str]:
        parsed = httpx.URL(url)
        netloc = f"{parsed.host}:{parsed.port}"
        if netloc in self.down or netloc not in self.transports:
            raise TransportError("ConnectError: connection refused (simulated)")
        if parsed.path in EXECUTE_PATHS:
            ids = [r.get("request_id") for r in json.loads(body or b"")["requests"]]
            self.posts[netloc] += 1
            self.read_timeouts.append(read_timeout_s)
            self.batch_sizes.append(len(ids))
            self.sent.append((netloc, parsed.path, ids))
        return netloc, parsed.path

    async def request(
        self, method: str, url: str, *, body: bytes | None = None, read_timeout_s: float, connect_timeout_s: float
    ) -> HttpResponse:
        netloc, path = self._route(url, body, read_timeout_s)
        request = httpx.Request(
            method, url, content=body, headers={"content-type": "application/json"} if body is not None else None
        )
        response = await self.transports[netloc].handle_async_request(request)
        content = await response.aread()
        is_batch = path in EXECUTE_PATHS
        if is_batch and netloc in self.lose_next_batch_response:
            self.lose_next_batch_response.discard(netloc)
            raise TransportError("ReadError: connection reset after the server answered (simulated)")
        if is_batch and netloc in self.garbage_batch_response:
            return HttpResponse(200, json.dumps({"results": []}).encode())
        return HttpResponse(response.status_code, content)

    @asynccontextmanager
    async def stream_lines(
        self, method: str, url: str, *, body: bytes | None = None, read_timeout_s: float, connect_timeout_s: float
    ) -> AsyncIterator[_AsgiStream]:
        netloc, path = self._route(url, body, read_timeout_s)
        if path in EXECUTE_PATHS and netloc in self.garbage_batch_response:
            yield _AsgiStream.canned(200, b'{"results": []}\n')
            return
        stream = _AsgiStream(self.apps[netloc], method, httpx.URL(url), body)
        try:
            await stream.start()
            if path in EXECUTE_PATHS and netloc in self.lose_next_batch_response:
                self.lose_next_batch_response.discard(netloc)
                await stream.read()
                raise TransportError("ReadError: connection reset after the server answered (simulated)")
            if path in EXECUTE_PATHS and netloc in self.cut_stream_after:
                stream.cut_after = self.cut_stream_after.pop(netloc)
                stream.on_cut = lambda: self.on_cut(netloc) if self.on_cut is not None else None
            yield stream
        finally:
            await stream.disconnect()

    async def aclose(self) -> None:
        self.closed = True


class _AsgiStream:
    """One request to an ASGI app whose answer is read chunk by chunk as the app sends it (a LineStream)."""

    def __init__(self, app: Any, method: str, url: httpx.URL, body: bytes | None) -> None:
        self.app, self.method, self.url, self.body = app, method, url, body
        self.status = 0
        self.cut_after: int | None = None
        self.on_cut: Callable[[], Any] | None = None
        self._messages: asyncio.Queue[dict] = asyncio.Queue()
        self._gone = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._ended = False

    @classmethod
    def canned(cls, status: int, body: bytes) -> _AsgiStream:
        stream = cls(None, "POST", httpx.URL("http://canned/"), None)
        stream.status = status
        stream._messages.put_nowait({"type": "http.response.body", "body": body, "more_body": False})
        return stream

    async def start(self) -> None:
        sent_body = False

        async def receive() -> dict:
            nonlocal sent_body
            if not sent_body:
                sent_body = True
                return {"type": "http.request", "body": self.body or b"", "more_body": False}
            await self._gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict) -> None:
            if not self._gone.is_set():
                self._messages.put_nowait(message)

        headers = [(b"host", f"{self.url.host}:{self.url.port}".encode())]
        if self.body is not None:
            headers.append((b"content-type", b"application/json"))
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": self.method,
            "scheme": "http",
            "path": self.url.path,
            "raw_path": self.url.raw_path,
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "server": (self.url.host, self.url.port),
            "client": ("127.0.0.1", 40000),
        }
        self._task = asyncio.ensure_future(self.app(scope, receive, send))
        start = await self._next()
        self.status = start["status"]

    async def _next(self) -> dict:
        """The app's next message; TransportError when the app ended without one (as a closed connection)."""
        if self._messages.empty() and self._task is not None:
            getter = asyncio.ensure_future(self._messages.get())
            await asyncio.wait({getter, self._task}, return_when=asyncio.FIRST_COMPLETED)
            if getter.done():
                return getter.result()
            getter.cancel()
            if self._messages.empty():
                raise TransportError(f"ServerDisconnectedError: the app ended mid-answer ({self._task!r})")
        return self._messages.get_nowait()

    async def _chunks(self) -> AsyncIterator[bytes]:
        while not self._ended:
            message = await self._next()
            if not message.get("more_body", False):
                self._ended = True
            yield message.get("body", b"")

    async def read(self) -> bytes:
        return b"".join([chunk async for chunk in self._chunks()])

    async def lines(self) -> AsyncIterator[bytes]:
        count = 0
        partial = b""
        async for chunk in self._chunks():
            partial += chunk
            while b"\n" in partial:
                line, partial = partial.split(b"\n", 1)
                yield line
                count += 1
                if self.cut_after is not None and count >= self.cut_after:
                    if self.on_cut is not None:
                        self.on_cut()
                    raise TransportError("ReadError: connection reset mid-stream (simulated)")
        if partial:
            yield partial

    async def disconnect(self) -> None:
        """The client closes the connection: the app sees ``http.disconnect``; wait until it has returned."""
        self._gone.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)


@asynccontextmanager
async def serving(
    app: Any, graceful_shutdown_s: float = 2, before_stop: asyncio.Event | None = None
) -> AsyncIterator[str]:
    """Serve ``app`` on 127.0.0.1 (a free port) while the block runs; yields its base URL. On leaving,
    ``before_stop`` is set (to release handlers a test holds back), then the server stops."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    task = asyncio.ensure_future(
        serve_app(app, "127.0.0.1", 0, graceful_shutdown_s=graceful_shutdown_s, stop=stop, on_ready=ready.set_result)
    )
    try:
        yield await asyncio.wait_for(ready, 10)
    finally:
        if before_stop is not None:
            before_stop.set()
        stop.set()
        await asyncio.wait_for(task, 30)
