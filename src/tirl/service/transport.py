"""The HTTP layer of :class:`~tirl.service.client.SandboxClient` and its server pool: one small interface and
its aiohttp implementation.

Why aiohttp: the client usually shares the machine's cores with the sandbox workers, and per single-call
request httpx (HTTP/1.1 parsed in pure Python by h11) spent about 1 ms of client CPU, more than the server
itself; aiohttp parses responses with a compiled parser (about 0.3-0.4 ms per call, docs/benchmarks.md,
"Client CPU per call").

The client sees only :class:`HttpTransport`: ``request(method, url, body, read_timeout_s, connect_timeout_s)``
returns an :class:`HttpResponse` (status and the whole body) for any HTTP answer, 4xx and 5xx included, and
raises :class:`TransportError` when no answer arrived (connection refused or reset, a timeout, a truncated
body). ``stream_lines(...)`` (same arguments) is an async context manager for an answer read line by line as it
arrives (``POST /v1/execute/stream``): it gives a :class:`LineStream` with the ``status`` and the body's lines;
``TransportError`` when no answer arrived, and from the line iterator when the connection breaks or times out
mid-body, after the lines that did arrive. Which of those is the server's fault is the client's decision, not
this module's. Tests give the client their own ``HttpTransport`` (in-process apps, simulated faults) instead
of :class:`AiohttpTransport`; one without ``stream_lines`` makes the client use ``/v1/execute/batch``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp


@dataclass(frozen=True, slots=True)
class HttpResponse:
    """An HTTP answer: ``status`` and the full ``body``."""

    status: int
    body: bytes

    def json(self) -> Any:
        """The body parsed as JSON.

        Raises:
            ValueError: the body is not UTF-8 JSON.
        """
        return json.loads(self.body)

    @property
    def text(self) -> str:
        """The body as text (undecodable bytes replaced)."""
        return self.body.decode("utf-8", "replace")


class TransportError(Exception):
    """No HTTP answer: connection refused or reset, connect or read timeout, a body cut short."""


class LineStream(Protocol):
    """An HTTP answer whose body is read as it arrives (from :meth:`HttpTransport.stream_lines`)."""

    status: int

    def lines(self) -> AsyncIterator[bytes]:
        """The body's lines, without their ``\n``, each as soon as it is complete (a last line without a
        newline is given at the end). Read it once.

        Raises:
            TransportError: the connection broke, or no bytes came for ``read_timeout_s``, before the body ended.
        """
        ...

    async def read(self) -> bytes:
        """The rest of the body at once (for an error answer).

        Raises:
            TransportError: the body did not arrive complete.
        """
        ...


class HttpTransport(Protocol):
    """What :class:`~tirl.service.client.SandboxClient` needs from an HTTP library."""

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> HttpResponse:
        """Send one request (``body`` as ``application/json`` when given) and read the whole answer.

        ``read_timeout_s`` bounds each wait for the server's bytes (as httpx's read timeout does), so a long
        execution that answers at the end needs a read timeout longer than the execution.

        Raises:
            TransportError: no complete answer arrived.
        """
        ...

    def stream_lines(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> AbstractAsyncContextManager[LineStream]:
        """Send one request as :meth:`request` does; entering gives the answer's status at once and its body
        line by line as it arrives. Leaving before the body ended closes that connection (it is not reused).

        Raises:
            TransportError: on entering, no answer arrived; from :meth:`LineStream.lines`, the body broke off.
        """
        ...

    async def aclose(self) -> None:
        """Close the connections. Idempotent."""
        ...


class AiohttpTransport:
    """:class:`HttpTransport` over one ``aiohttp.ClientSession`` with a bounded keep-alive pool.

    Args:
        max_connections: most open connections in all (requests beyond wait for a free one).
        keepalive_expiry_s: idle keep-alive connections are closed after this; keep it below the servers'
            keep-alive timeout so a connection the server has closed is never reused.

    The session is created on the first request, inside the running event loop; use the transport from that
    loop only. Proxies from the environment are ignored (``trust_env`` off): the servers are addressed directly.
    """

    def __init__(self, max_connections: int, keepalive_expiry_s: float) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections must be >= 1, got {max_connections}")
        self.max_connections = max_connections
        self.keepalive_expiry_s = keepalive_expiry_s
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    def _get_session(self) -> aiohttp.ClientSession:
        if self._closed:
            raise TransportError("transport is closed")
        if self._session is None:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, keepalive_timeout=self.keepalive_expiry_s
            )
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False)
        return self._session

    async def request(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> HttpResponse:
        session = self._get_session()
        try:
            async with session.request(
                method, url, data=body, headers=_headers(body), timeout=_timeout(read_timeout_s, connect_timeout_s)
            ) as resp:
                return HttpResponse(resp.status, await resp.read())
        except _ERRORS as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    @asynccontextmanager
    async def stream_lines(
        self,
        method: str,
        url: str,
        *,
        body: bytes | None = None,
        read_timeout_s: float,
        connect_timeout_s: float,
    ) -> AsyncIterator[LineStream]:
        session = self._get_session()
        try:
            resp = await session.request(
                method, url, data=body, headers=_headers(body), timeout=_timeout(read_timeout_s, connect_timeout_s)
            )
        except _ERRORS as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc
        try:
            yield _AiohttpLineStream(resp)
        finally:
            if resp.content.at_eof():
                resp.release()  # the whole body was read: the connection goes back to the pool
            else:
                resp.close()  # bytes may still come: never reuse this connection

    async def aclose(self) -> None:
        self._closed = True
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


#: What aiohttp raises when no (complete) answer arrived: connection errors, payload errors, timeouts.
_ERRORS = (aiohttp.ClientError, TimeoutError, OSError)


def _headers(body: bytes | None) -> dict[str, str] | None:
    return {"Content-Type": "application/json"} if body is not None else None


def _timeout(read_timeout_s: float, connect_timeout_s: float) -> aiohttp.ClientTimeout:
    # No total timeout and no bound on the wait for a pooled connection (the pool is sized for every sender and
    # probe, as httpx's pool timeout equalled the read timeout); sock_connect bounds the TCP connect, sock_read
    # each wait for the server's bytes.
    return aiohttp.ClientTimeout(total=None, connect=None, sock_connect=connect_timeout_s, sock_read=read_timeout_s)


class _AiohttpLineStream:
    """:class:`LineStream` over an aiohttp response. Lines are split here, not with aiohttp's ``readline``,
    which refuses lines over its buffer size (128 KiB by default; a result line can be megabytes)."""

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status

    async def read(self) -> bytes:
        try:
            return await self._resp.read()
        except _ERRORS as exc:
            raise TransportError(f"{type(exc).__name__}: {exc}") from exc

    async def lines(self) -> AsyncIterator[bytes]:
        content = self._resp.content
        partial = bytearray()
        while True:
            try:
                chunk = await content.readany()
            except _ERRORS as exc:
                raise TransportError(f"{type(exc).__name__}: {exc}") from exc
            if not chunk:
                break
            start = 0
            while (end := chunk.find(b"\n", start)) >= 0:
                if partial:
                    partial += chunk[start:end]
                    line = bytes(partial)
                    partial.clear()
                else:
                    line = chunk[start:end]
                yield line
                start = end + 1
            partial += chunk[start:]
        if partial:
            yield bytes(partial)
