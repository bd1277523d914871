"""Test doubles shared by the service tests (this module holds no tests).

* :class:`ScriptedExecutor`: a ``CodeExecutor`` whose "code" is a tiny command language, so service and client
  behaviour (ordering, de-duplication, deadlines, failures) can be tested deterministically without running
  Python in subprocesses. Commands, separated by ``;``:
  ``echo TEXT`` (append ``TEXT\\n`` to stdout), ``sleep SECONDS``, ``gate NAME`` (wait for ``gates[NAME]``),
  ``fail`` (status ``error``), ``timeout`` (status ``timeout``), ``internal`` (status ``internal``),
  ``internal-once`` (``internal`` on the first run of this request id, then carry on), ``raise`` (the executor
  itself raises), ``hang`` (never returns), ``stdin`` (echo the request's stdin).
* :class:`RoutingTransport`: a :class:`~tirl.service.transport.HttpTransport` (what ``SandboxClient`` sends
  through) that hands each request to an in-process ASGI app chosen by the URL's host:port (through httpx's
  ASGI transport: no sockets), and can simulate a dead server (connection refused) or a lost response (the
  server ran the batch, the client never got the answer). The client's real transport (aiohttp) is tested
  over sockets in tests/test_service_client.py and tests/test_service_fault.py.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field

import httpx

from tirl.sandbox.types import ExecutionRequest, ExecutionResult
from tirl.service.transport import HttpResponse, TransportError


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
                return ExecutionResult("error", stdout="".join(out), error_type="RuntimeError", exit_code=1,
                                       request_id=rid)
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
                return ExecutionResult("error", stderr=f"unknown command {op!r}", error_type="NameError",
                                       request_id=rid)
        return ExecutionResult("ok", stdout="".join(out), exit_code=0, request_id=rid)

    async def run_batch(self, requests):
        return list(await asyncio.gather(*(self.run(r) for r in requests)))

    async def aclose(self) -> None:
        self.closed = True


class RoutingTransport:
    """Route by ``host:port`` to in-process ASGI apps; simulate dead servers and lost responses."""

    def __init__(self, apps: dict[str, object]) -> None:
        self.transports = {netloc: httpx.ASGITransport(app=app) for netloc, app in apps.items()}
        self.down: set[str] = set()
        self.lose_next_batch_response: set[str] = set()
        self.garbage_batch_response: set[str] = set()
        self.posts: Counter = Counter()
        self.batch_sizes: list[int] = []
        self.read_timeouts: list[float] = []
        self.closed = False

    async def request(self, method: str, url: str, *, body: bytes | None = None, read_timeout_s: float,
                      connect_timeout_s: float) -> HttpResponse:
        request = httpx.Request(method, url, content=body,
                                headers={"content-type": "application/json"} if body is not None else None)
        netloc = f"{request.url.host}:{request.url.port}"
        if netloc in self.down or netloc not in self.transports:
            raise TransportError("ConnectError: connection refused (simulated)")
        is_batch = request.url.path == "/v1/execute/batch"
        if is_batch:
            self.posts[netloc] += 1
            self.read_timeouts.append(read_timeout_s)
            self.batch_sizes.append(len(json.loads(body or b"")["requests"]))
        response = await self.transports[netloc].handle_async_request(request)
        content = await response.aread()
        if is_batch and netloc in self.lose_next_batch_response:
            self.lose_next_batch_response.discard(netloc)
            raise TransportError("ReadError: connection reset after the server answered (simulated)")
        if is_batch and netloc in self.garbage_batch_response:
            return HttpResponse(200, json.dumps({"results": []}).encode())
        return HttpResponse(response.status_code, content)

    async def aclose(self) -> None:
        self.closed = True
