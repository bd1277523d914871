"""``SandboxClient``: the batching, load-balancing, fault-tolerant HTTP client of the execution service.

It implements :class:`~tirl.sandbox.types.CodeExecutor`, so rollout code takes it or ``LocalSandbox``.

How a call travels (rStar2-Agent report, environment service: a central queue, batches of up to 64 sent when
full or after a short timeout, by a pool of sender workers):

1. ``run(request)`` puts the call on a bounded queue (``max_queue``; a full queue makes callers wait:
   backpressure) and awaits its future, at most ``call_deadline_s`` when set.
2. ``senders`` sender tasks take turns filling a batch: the one whose turn it is takes a first call, then more
   until ``batch_size`` or until ``flush_interval_s`` passed, and POSTs the batch to the up server with the
   fewest outstanding items (:mod:`tirl.service.balancer`) while the next sender fills the next batch. When
   the client has nothing in flight the batch is sent at once, with the calls already queued
   (``flush_when_idle``): waiting only pays while earlier calls keep the servers busy.
   The POST goes to ``/v1/execute/stream`` (``stream``, the default): the server writes each item's result on
   its own line as soon as that item finishes, and the client answers that call at once, so no caller waits
   for the slowest item of its batch and the callers' next calls reach the server while the rest of the batch
   still runs (the sandbox workers do not go idle at each batch's tail). The server's ``outstanding`` count
   drops with each answered item. A server that answers 404 there (older than the endpoint) is sent
   ``/v1/execute/batch`` from then on, as is every server when ``stream`` is False: one JSON answer once the
   whole batch ran.
3. Failures. Retrying an id on the *same* server is always safe: the server de-duplicates by id (it joins the
   run in flight or answers from its cache). So after a connection error, a 5xx, an HTTP read timeout, or a
   stream that broke off or ended before every item was answered, the client first probes that server's
   ``/healthz``; if it answers, the calls still unanswered are re-sent there with the same ids; if not, the
   server is taken out of rotation (and re-probed in the background) and those calls move to another server
   with the same ids. Calls the stream already answered stay answered and are never sent again. The HTTP read
   timeout (each wait for the server's bytes) is the batch's largest ``timeout_s`` plus the server's grace plus
   ``http_timeout_margin_s``, so the client never gives up on a batch the server is still entitled to be
   running.
4. 413/422 answers name the offending items; those get ``internal`` results with the server's message, the
   others are re-sent. A 413 naming no item (the batch over the body size or item count) splits the batch in
   halves, down to single calls. An ``internal`` result (a worker died) is retried up to ``retry_internal`` times (the
   server does not cache ``internal``, so the retry runs again); on a stream that call is put back to be
   re-sent when its line comes, with the rest of the batch's leftovers. When no server is up for
   ``unavailable_wait_s``, or a batch failed ``max_attempts`` times, its calls get ``internal`` results.

The client never raises for a request's content. Use it from one event loop. It does not start servers
(see :mod:`tirl.service.server`) and keeps no results after answering them.

HTTP goes through :mod:`tirl.service.transport`: aiohttp, whose compiled HTTP/1.1 parser costs the client
about a third of the CPU per request that httpx's pure-Python one did (the client usually shares the cores
with the sandbox workers). Batches and health probes share one keep-alive pool of ``senders + 2 x servers``
connections (a stream holds its connection until its last line); a test passes its own transport instead (one
without ``stream_lines`` gets batch POSTs).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.sandbox.types import ExecutionRequest, ExecutionResult
from tirl.service.balancer import ServerPool, ServerState
from tirl.service.config import ClientConfig
from tirl.service.schemas import encode_json, result_from_wire
from tirl.service.transport import AiohttpTransport, HttpResponse, HttpTransport, TransportError

log = logging.getLogger(__name__)

_REQUEST_FIELDS = ("request_id", "code", "stdin", "timeout_s", "memory_mb")


@dataclass
class ClientStats:
    """Client-side metrics (a snapshot from :meth:`SandboxClient.stats`).

    Attributes:
        calls: calls submitted.
        answered: calls answered, by result status.
        batches: batch POSTs made (streamed or not, including re-sends and a 404 answered by a server without
            the stream endpoint).
        items_sent: items in those POSTs.
        resent_same_server: batches re-sent to the same server after it passed a health probe (only the calls
            still unanswered).
        failovers: batches moved to another server after their server failed.
        internal_retries: calls re-sent because a server answered ``internal``.
        rejected: calls answered ``internal`` because a server refused them (413/422).
        deadline_exceeded: calls answered ``internal`` because ``call_deadline_s`` passed.
        queue_depth: calls waiting to be sent now.
        in_flight: calls taken by a sender and not yet answered now.
        servers: per server URL: up, outstanding, times marked down, last error.
        latency_p50_s, latency_p99_s, latency_mean_s: over the last ``latency_window`` answered calls.
    """

    calls: int = 0
    answered: dict[str, int] = field(default_factory=dict)
    batches: int = 0
    items_sent: int = 0
    resent_same_server: int = 0
    failovers: int = 0
    internal_retries: int = 0
    rejected: int = 0
    deadline_exceeded: int = 0
    queue_depth: int = 0
    in_flight: int = 0
    servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    latency_p50_s: float = 0.0
    latency_p99_s: float = 0.0
    latency_mean_s: float = 0.0

    @property
    def mean_batch_size(self) -> float:
        """Items per POST."""
        return self.items_sent / self.batches if self.batches else 0.0


class _Call:
    __slots__ = ("request", "future", "start", "internal_retries", "in_flight")

    def __init__(self, request: ExecutionRequest, future: asyncio.Future[ExecutionResult]) -> None:
        self.request = request
        self.future = future
        self.start = time.perf_counter()
        self.internal_retries = 0
        self.in_flight = False  # counted in SandboxClient._in_flight


def _percentile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    index = min(len(sorted_values) - 1, max(0, round(q * (len(sorted_values) - 1))))
    return sorted_values[index]


def _finite(value: Any) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return 0.0
    return x if math.isfinite(x) and x > 0 else 0.0


def _encode_batch(calls: Sequence[_Call]) -> bytes:
    """The body of a batch or stream POST.

    Raises:
        TypeError, ValueError: a request field JSON cannot hold.
    """
    return encode_json({"requests": [{k: getattr(c.request, k) for k in _REQUEST_FIELDS} for c in calls]})


class _ServerFailed(Exception):
    """The POST failed for a reason that may be the server's (transport error, 5xx, bad body, broken stream)."""


class _BatchTooLarge(Exception):
    """A 413 naming no item for a batch of several calls: the batch as a whole is over a server limit (body size,
    item count) that its items alone may well not be."""


class _NoStream(Exception):
    """The server answered 404 to ``/v1/execute/stream``: it predates the endpoint."""


class SandboxClient:
    """Async HTTP client of one or more execution servers; a :class:`~tirl.sandbox.types.CodeExecutor`.

    Args:
        urls: base URLs of the servers (``"http://127.0.0.1:8088"``), or one URL as a string.
        config: batching and retry policy; ``ClientConfig()`` when None.
        transport: optional :class:`~tirl.service.transport.HttpTransport` (tests); the default is an
            :class:`~tirl.service.transport.AiohttpTransport` (pooled keep-alive TCP). The client closes it in
            :meth:`aclose`.

    Raises:
        ValueError: no URL, or a bad config value.
    """

    def __init__(
        self,
        urls: str | Sequence[str],
        config: ClientConfig | None = None,
        *,
        transport: HttpTransport | None = None,
    ) -> None:
        self.urls = [urls] if isinstance(urls, str) else list(urls)
        if not self.urls:
            raise ValueError("SandboxClient needs at least one server URL")
        self.config = config or ClientConfig()
        self._transport = transport
        self._http: HttpTransport | None = None
        self._pool: ServerPool | None = None
        self._queue: asyncio.Queue[_Call] | None = None
        self._forming: asyncio.Lock | None = None  # held by the one sender filling a batch
        self._senders: list[asyncio.Task[None]] = []
        self._closed = False
        self._in_flight = 0
        self._no_stream: set[str] = set()  # servers that answered 404 to /v1/execute/stream
        self._unanswered: set[_Call] = set()
        self._counts: Counter[str] = Counter()
        self._answered: Counter[str] = Counter()
        self._latencies: deque[float] = deque(maxlen=self.config.latency_window)

    # -- lifecycle -------------------------------------------------------------------------------

    def _ensure_started(self) -> None:
        if self._queue is not None:
            return
        cfg = self.config
        # Every sender's batch plus a re-probe and a check_health probe per server: no request waits for a
        # connection.
        self._http = self._transport or AiohttpTransport(
            max_connections=cfg.senders + 2 * len(self.urls),
            keepalive_expiry_s=cfg.keepalive_expiry_s,
        )
        self._pool = ServerPool(self.urls, self._http, cfg.probe_interval_s, cfg.probe_timeout_s)
        self._queue = asyncio.Queue(maxsize=cfg.max_queue)
        self._forming = asyncio.Lock()
        self._senders = [asyncio.ensure_future(self._sender_loop()) for _ in range(cfg.senders)]

    async def check_health(self) -> dict[str, bool]:
        """Probe every server's ``/healthz`` now (fail fast at start-up). Returns ``{url: healthy}``;
        unhealthy servers are taken out of rotation and re-probed in the background."""
        self._ensure_started()
        assert self._pool is not None
        return await self._pool.probe_all()

    async def aclose(self) -> None:
        """Stop senders and probes, answer every pending call ``internal``, close connections. Idempotent."""
        if self._closed:
            return
        self._closed = True
        for task in self._senders:
            task.cancel()
        await asyncio.gather(*self._senders, return_exceptions=True)
        self._senders = []
        for call in list(self._unanswered):
            self._resolve(call, ExecutionResult.internal_error("SandboxClient was closed", call.request.request_id))
        if self._pool is not None:
            await self._pool.aclose()
        if self._http is not None:
            await self._http.aclose()

    async def __aenter__(self) -> SandboxClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # -- CodeExecutor ----------------------------------------------------------------------------

    async def run(self, request: ExecutionRequest, deadline_s: float | None = None) -> ExecutionResult:
        """Run one request on some server; never raises for the request's content.

        Args:
            request: what to run; its ``request_id`` is the idempotency key across retries.
            deadline_s: total seconds for this call; ``config.call_deadline_s`` when None.

        Returns:
            The server's result, or an ``internal`` result when no server could answer in time.
        """
        if not isinstance(request, ExecutionRequest):
            return ExecutionResult.internal_error(
                f"SandboxClient.run expects an ExecutionRequest, got {type(request).__name__}",
                str(getattr(request, "request_id", "") or ""),
            )
        rid = request.request_id
        if self._closed:
            return ExecutionResult.internal_error("SandboxClient is closed", rid)
        self._ensure_started()
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        call = _Call(request, loop.create_future())
        self._counts["calls"] += 1
        self._unanswered.add(call)
        deadline = deadline_s if deadline_s is not None else self.config.call_deadline_s
        try:
            if deadline is None:
                await self._queue.put(call)
                return await asyncio.shield(call.future)
            async with asyncio.timeout(deadline):
                await self._queue.put(call)
                return await asyncio.shield(call.future)
        except TimeoutError:
            if call.future.done():
                return call.future.result()
            self._counts["deadline_exceeded"] += 1
            result = ExecutionResult.internal_error(
                f"no answer within the call deadline of {deadline} s ({self._pool.describe() if self._pool else ''})",
                rid,
                time.perf_counter() - call.start,
            )
            self._resolve(call, result)
            return result
        except asyncio.CancelledError:
            # The caller gave up: a call still queued is then skipped by the senders.
            self._unanswered.discard(call)
            if not call.future.done():
                call.future.cancel()
            raise

    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run many requests (coalesced with every other caller's); results in the order of ``requests``."""
        return list(await asyncio.gather(*(self.run(r) for r in requests)))

    # -- metrics ---------------------------------------------------------------------------------

    def stats(self) -> ClientStats:
        """A snapshot of the client-side metrics."""
        lat = sorted(self._latencies)
        servers = {}
        if self._pool is not None:
            servers = {
                s.url: {
                    "up": s.up,
                    "outstanding": s.outstanding,
                    "marked_down": s.marked_down,
                    "last_error": s.last_error,
                }
                for s in self._pool.servers
            }
        return ClientStats(
            calls=self._counts["calls"],
            answered=dict(self._answered),
            batches=self._counts["batches"],
            items_sent=self._counts["items_sent"],
            resent_same_server=self._counts["resent_same_server"],
            failovers=self._counts["failovers"],
            internal_retries=self._counts["internal_retries"],
            rejected=self._counts["rejected"],
            deadline_exceeded=self._counts["deadline_exceeded"],
            queue_depth=self._queue.qsize() if self._queue is not None else 0,
            in_flight=self._in_flight,
            servers=servers,
            latency_p50_s=_percentile(lat, 0.50),
            latency_p99_s=_percentile(lat, 0.99),
            latency_mean_s=sum(lat) / len(lat) if lat else 0.0,
        )

    # -- internals -------------------------------------------------------------------------------

    def _resolve(self, call: _Call, result: ExecutionResult) -> None:
        self._unanswered.discard(call)
        self._landed(call)
        if call.future.done():
            return
        call.future.set_result(result)
        self._answered[result.status] += 1
        self._latencies.append(time.perf_counter() - call.start)

    def _landed(self, call: _Call) -> None:
        if call.in_flight:
            call.in_flight = False
            self._in_flight -= 1

    async def _next_batch(self) -> list[_Call]:
        assert self._queue is not None
        queue = self._queue
        batch = [await queue.get()]
        if self.config.flush_when_idle and self._in_flight == 0:
            while len(batch) < self.config.batch_size and not queue.empty():
                batch.append(queue.get_nowait())
            return batch
        loop = asyncio.get_running_loop()
        flush_at = loop.time() + self.config.flush_interval_s
        while len(batch) < self.config.batch_size:
            try:
                batch.append(queue.get_nowait())
                continue
            except asyncio.QueueEmpty:
                pass
            remaining = flush_at - loop.time()
            if remaining <= 0:
                break
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait({getter}, timeout=remaining)
            if not done:
                getter.cancel()
                await asyncio.wait({getter})
            if getter.cancelled():
                break
            batch.append(getter.result())
        return batch

    async def _sender_loop(self) -> None:
        assert self._forming is not None
        while True:
            # One sender fills a batch at a time: calls that arrive while it waits go into its batch, not to
            # other idle senders each starting a batch of one.
            async with self._forming:
                batch = await self._next_batch()
            live = [c for c in batch if not c.future.done()]
            if not live:
                continue
            for call in live:
                call.in_flight = True
            self._in_flight += len(live)
            try:
                await self._send(live)
            except asyncio.CancelledError:
                for call in live:
                    self._resolve(
                        call, ExecutionResult.internal_error("SandboxClient was closed", call.request.request_id)
                    )
                raise
            except Exception as exc:  # a bug here must not leave callers waiting forever
                log.exception("sandbox client sender failed")
                for call in live:
                    message = f"client error: {type(exc).__name__}: {exc}"
                    self._resolve(call, ExecutionResult.internal_error(message, call.request.request_id))
            finally:
                for call in live:  # callers that gave up (cancelled) were never resolved
                    self._landed(call)

    async def _send(self, batch: list[_Call]) -> None:
        """Deliver ``batch`` (same ids throughout) until every call is answered."""
        assert self._pool is not None
        cfg = self.config
        pending = batch
        prefer: ServerState | None = None
        attempts = 0
        errors: list[str] = []
        while True:
            pending = [c for c in pending if not c.future.done()]
            if not pending:
                return
            if attempts >= cfg.max_attempts:
                self._fail(pending, f"gave up after {attempts} attempts: " + " | ".join(errors[-3:]))
                return
            server = self._pool.pick(prefer)
            if server is None:
                if not await self._pool.wait_for_up(cfg.unavailable_wait_s):
                    self._fail(pending, f"no server reachable for {cfg.unavailable_wait_s} s: {self._pool.describe()}")
                    return
                continue
            attempts += 1
            try:
                retry = await self._post(server, pending)
            except _BatchTooLarge:  # send it in halves, down to single calls (which a 413 then answers)
                half = len(pending) // 2
                await asyncio.gather(self._send(pending[:half]), self._send(pending[half:]))
                return
            except _ServerFailed as exc:
                errors.append(f"{server.url}: {exc}")
                if await self._pool.probe(server):
                    prefer = server  # alive: the same server de-duplicates the ids, so no work runs twice
                    self._counts["resent_same_server"] += 1
                else:
                    self._pool.mark_down(server, str(exc))
                    prefer = None
                    self._counts["failovers"] += 1
                continue
            prefer = None
            pending = retry

    def _fail(self, calls: list[_Call], message: str) -> None:
        for call in calls:
            elapsed = time.perf_counter() - call.start
            self._resolve(call, ExecutionResult.internal_error(message, call.request.request_id, elapsed))

    async def _post(self, server: ServerState, calls: list[_Call]) -> list[_Call]:
        """POST one batch to ``server``; answer what can be answered and return the calls to send again.

        Streams (``/v1/execute/stream``) unless ``config.stream`` is off, the transport cannot stream, or the
        server answered 404 there before (then, and right after such a 404, ``/v1/execute/batch``).

        Raises:
            _ServerFailed: transport error, timeout, 5xx, a body that is not a matching result list, or a
                stream that broke off or ended early (the calls it answered are resolved already).
            _BatchTooLarge: a 413 naming no item for several calls (nothing ran).
        """
        assert self._http is not None
        cfg = self.config
        try:
            body = _encode_batch(calls)
        except (TypeError, ValueError):  # a field JSON cannot hold: answer those calls alone, send the rest
            calls = self._drop_unencodable(calls)
            if not calls:
                return []
            body = _encode_batch(calls)
        longest = max((_finite(c.request.timeout_s) for c in calls), default=0.0)
        grace = max(cfg.server_grace_s, _finite(server.limits.get("deadline_grace_s", 0.0)))
        read_timeout = longest + grace + cfg.http_timeout_margin_s
        if cfg.stream and server.url not in self._no_stream and hasattr(self._http, "stream_lines"):
            try:
                return await self._post_stream(server, calls, body, read_timeout)
            except _NoStream:
                log.info("sandbox server %s has no /v1/execute/stream (404): sending it batches", server.url)
                self._no_stream.add(server.url)
        return await self._post_batch(server, calls, body, read_timeout)

    def _drop_unencodable(self, calls: list[_Call]) -> list[_Call]:
        """Answer ``internal`` each call whose request JSON cannot hold (an ``object()`` or bytes for a string, an
        integer over 4300 digits); return the others."""
        sendable = []
        for call in calls:
            try:
                _encode_batch([call])
            except (TypeError, ValueError) as exc:
                message = f"request cannot be sent as JSON: {type(exc).__name__}: {exc}"
                self._resolve(call, ExecutionResult.internal_error(message, call.request.request_id))
            else:
                sendable.append(call)
        return sendable

    def _answer(self, call: _Call, data: Any, retry: list[_Call]) -> None:
        """Resolve ``call`` with the server's result ``data``, or put it on ``retry`` (the ``internal`` rule)."""
        result = result_from_wire(data, call.request.request_id)
        if result.status == "internal" and call.internal_retries < self.config.retry_internal:
            call.internal_retries += 1
            self._counts["internal_retries"] += 1
            retry.append(call)
        else:
            self._resolve(call, result)

    async def _post_batch(
        self, server: ServerState, calls: list[_Call], body: bytes, read_timeout: float
    ) -> list[_Call]:
        assert self._http is not None
        self._counts["batches"] += 1
        self._counts["items_sent"] += len(calls)
        server.outstanding += len(calls)
        try:
            resp = await self._http.request(
                "POST",
                server.url + "/v1/execute/batch",
                body=body,
                read_timeout_s=read_timeout,
                connect_timeout_s=self.config.connect_timeout_s,
            )
        except TransportError as exc:
            raise _ServerFailed(str(exc)) from exc
        finally:
            server.outstanding -= len(calls)
        if resp.status in (413, 422):
            return self._handle_rejection(resp, calls)
        if resp.status != 200:
            raise _ServerFailed(f"HTTP {resp.status}: {resp.text[:300]}")
        try:
            results = resp.json()["results"]
        except (ValueError, KeyError, TypeError) as exc:
            raise _ServerFailed(f"unreadable batch answer: {exc}") from exc
        if not isinstance(results, list) or len(results) != len(calls):
            count = len(results) if isinstance(results, list) else "?"
            raise _ServerFailed(f"batch answer has {count} results for {len(calls)} requests")
        retry: list[_Call] = []
        for call, data in zip(calls, results):
            self._answer(call, data, retry)
        return retry

    async def _post_stream(
        self, server: ServerState, calls: list[_Call], body: bytes, read_timeout: float
    ) -> list[_Call]:
        """POST to ``/v1/execute/stream`` and answer each call as its line arrives.

        Raises:
            _NoStream: the server answered 404 (nothing was run).
            _ServerFailed: as :meth:`_post`; calls answered before the stream broke stay answered, the others
                are left pending for the caller's failure handling.
        """
        assert self._http is not None
        self._counts["batches"] += 1
        self._counts["items_sent"] += len(calls)
        waiting = dict(enumerate(calls))  # index -> call without a line yet
        retry: list[_Call] = []
        server.outstanding += len(calls)
        try:
            async with self._http.stream_lines(
                "POST",
                server.url + "/v1/execute/stream",
                body=body,
                read_timeout_s=read_timeout,
                connect_timeout_s=self.config.connect_timeout_s,
            ) as stream:
                if stream.status != 200:
                    resp = HttpResponse(stream.status, await stream.read())
                    if resp.status == 404:
                        raise _NoStream()
                    if resp.status in (413, 422):
                        return self._handle_rejection(resp, calls)
                    raise _ServerFailed(f"HTTP {resp.status}: {resp.text[:300]}")
                async for line in stream.lines():
                    if not line.strip():
                        continue
                    try:
                        item = json.loads(line)
                        data = item["result"]
                        call = waiting.pop(item["index"])
                    except (ValueError, KeyError, TypeError) as exc:  # a line not of this batch's items
                        raise _ServerFailed(f"unreadable stream line ({exc!r}): {line[:200]!r}") from exc
                    server.outstanding -= 1
                    self._answer(call, data, retry)
        except TransportError as exc:
            answered = len(calls) - len(waiting)
            raise _ServerFailed(f"stream broke after {answered} of {len(calls)} results: {exc}") from exc
        finally:
            server.outstanding -= len(waiting)
        if waiting:
            raise _ServerFailed(f"stream ended after {len(calls) - len(waiting)} of {len(calls)} results")
        return retry

    def _handle_rejection(self, resp: HttpResponse, calls: list[_Call]) -> list[_Call]:
        """Answer the calls a 413/422 names with ``internal`` (the server's message); return the rest.

        Raises:
            _BatchTooLarge: a 413 that names no item, for more than one call (the batch is split instead).
        """
        try:
            body = resp.json()
        except ValueError:
            body = {}
        message = body.get("message") if isinstance(body, dict) else None
        message = f"server refused the request (HTTP {resp.status}): {message or resp.text[:300]}"
        bad: set[int] = set()
        detail = body.get("detail") if isinstance(body, dict) else None
        for item in detail if isinstance(detail, list) else ():
            if not isinstance(item, dict):
                continue
            if isinstance(item.get("index"), int):
                bad.add(item["index"])
            loc = item.get("loc")
            if isinstance(loc, list) and len(loc) >= 3 and loc[:2] == ["body", "requests"] and isinstance(loc[2], int):
                bad.add(loc[2])
        if not bad and resp.status == 413 and len(calls) > 1:
            raise _BatchTooLarge()
        if not bad or not all(0 <= i < len(calls) for i in bad):
            bad = set(range(len(calls)))
        for i in sorted(bad):
            self._counts["rejected"] += 1
            self._resolve(calls[i], ExecutionResult.internal_error(message, calls[i].request.request_id))
        return [c for i, c in enumerate(calls) if i not in bad]
