"""Idempotency for the code-execution service: a bounded result cache plus the table of runs in flight.

Every request carries a ``request_id``. :meth:`ResultCache.get_or_run` guarantees, within one server process:

* a request id seen for the first time is executed once;
* a duplicate that arrives while the first execution is still running awaits that same execution (it is
  never started twice), including a duplicate inside the same batch;
* a duplicate that arrives later is answered from the cache while the entry is still held (bounded LRU, by
  entry count and by an estimate of bytes);
* an id reused for a *different* request (other code, stdin or limits) is not run and gets an ``internal``
  result that says so, because answering it with another request's output would be silently wrong.

Policies: ``internal`` results (tirl's own failures: a worker died, the executor broke) are not cached, so a
retry of the same id runs again; every other status is final and cached. Executions are owned by the cache,
not by the HTTP request that started them, so a client that disconnects or times out does not cancel work
that a retry of the same id will then pick up.

This module does not know about HTTP, metrics or limits; it does not share state between processes (each
``serve`` process has its own cache, which is why ``serve`` uses one event loop per process).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Literal

from tirl.sandbox.types import ExecutionRequest, ExecutionResult

CacheSource = Literal["executed", "joined", "cached", "conflict"]
"""How :meth:`ResultCache.get_or_run` answered: ran it, joined a run in flight, from the cache, or refused."""

RunFn = Callable[[ExecutionRequest], Awaitable[ExecutionResult]]


def request_fingerprint(request: ExecutionRequest) -> str:
    """A digest of everything that determines a request's result (code, stdin, timeout, memory).

    Strings are encoded with ``surrogatepass`` so that text holding lone surrogates (legal in JSON) never raises.
    """
    h = hashlib.blake2b(digest_size=16)
    for part in (request.code, request.stdin, repr(float(request.timeout_s)), str(int(request.memory_mb))):
        data = part.encode("utf-8", "surrogatepass")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def _result_bytes(result: ExecutionResult) -> int:
    """Rough memory cost of a cached result, in characters plus a fixed overhead."""
    return (
        len(result.stdout)
        + len(result.stderr)
        + len(result.traceback or "")
        + len(result.display or "")
        + len(result.request_id)
        + 256
    )


class ResultCache:
    """Bounded LRU of finished results keyed by request id, with de-duplication of runs in flight.

    Args:
        max_entries: most finished results kept (oldest used are evicted first); 0 keeps none.
        max_bytes: most estimated bytes of results kept (see ``_result_bytes``).

    Raises:
        ValueError: a negative bound.
    """

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 256 << 20) -> None:
        if max_entries < 0 or max_bytes < 0:
            raise ValueError("cache bounds must be >= 0")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._done: OrderedDict[str, tuple[str, ExecutionResult, int]] = OrderedDict()
        self._bytes = 0
        self._running: dict[str, tuple[str, asyncio.Task[ExecutionResult]]] = {}
        self.evictions = 0

    def __len__(self) -> int:
        """Number of finished results held."""
        return len(self._done)

    @property
    def nbytes(self) -> int:
        """Estimated bytes held by finished results."""
        return self._bytes

    @property
    def running(self) -> int:
        """Number of distinct request ids executing now."""
        return len(self._running)

    def get(self, request_id: str) -> ExecutionResult | None:
        """The cached result of ``request_id`` (a copy), or None. Marks the entry as recently used."""
        entry = self._done.get(request_id)
        if entry is None:
            return None
        self._done.move_to_end(request_id)
        return dataclasses.replace(entry[1])

    def put(self, request: ExecutionRequest, result: ExecutionResult, fingerprint: str | None = None) -> None:
        """Store a finished result for ``request.request_id`` (``internal`` results are ignored). The cache
        keeps ``result`` itself, not a copy: do not change it afterwards."""
        if result.status == "internal" or self.max_entries == 0:
            return
        fp = fingerprint or request_fingerprint(request)
        size = _result_bytes(result)
        if size > self.max_bytes:
            return
        old = self._done.pop(request.request_id, None)
        if old is not None:
            self._bytes -= old[2]
        self._done[request.request_id] = (fp, result, size)
        self._bytes += size
        while self._done and (len(self._done) > self.max_entries or self._bytes > self.max_bytes):
            _, (_, _, evicted) = self._done.popitem(last=False)
            self._bytes -= evicted
            self.evictions += 1

    async def get_or_run(self, request: ExecutionRequest, run: RunFn) -> tuple[ExecutionResult, CacheSource]:
        """Answer ``request`` at most once per id: from the cache, by joining a run in flight, or by running it.

        Args:
            request: the request; its ``request_id`` is the key.
            run: coroutine function that executes a request; it should not raise, but if it does the error
                becomes an ``internal`` result.

        Returns:
            ``(result, source)``; ``result.request_id`` is always ``request.request_id``. The result object is
            shared with the cache and other callers of the same id: treat it as read-only (copy it with
            ``dataclasses.replace`` before changing it). Cancelling the caller does not cancel the execution.
        """
        rid = request.request_id
        fp = request_fingerprint(request)
        entry = self._done.get(rid)
        if entry is not None:
            if entry[0] != fp:
                return self._conflict(rid), "conflict"
            self._done.move_to_end(rid)
            return entry[1], "cached"
        running = self._running.get(rid)
        if running is not None:
            if running[0] != fp:
                return self._conflict(rid), "conflict"
            return await asyncio.shield(running[1]), "joined"
        task = asyncio.ensure_future(self._execute(request, run, fp))
        self._running[rid] = (fp, task)
        return await asyncio.shield(task), "executed"

    async def _execute(self, request: ExecutionRequest, run: RunFn, fp: str) -> ExecutionResult:
        rid = request.request_id
        try:
            try:
                result = await run(request)
            except asyncio.CancelledError:
                result = ExecutionResult.internal_error("execution was cancelled (server shutting down)", rid)
            except Exception as exc:  # the executor broke; never propagate to the HTTP layer
                result = ExecutionResult.internal_error(f"executor failed: {type(exc).__name__}: {exc}", rid)
            if not isinstance(result, ExecutionResult):
                result = ExecutionResult.internal_error(f"executor returned {type(result).__name__}", rid)
            if result.request_id != rid:
                result = dataclasses.replace(result, request_id=rid)
            self.put(request, result, fp)
            return result
        finally:
            self._running.pop(rid, None)

    async def drain(self) -> None:
        """Wait until every execution in flight has finished."""
        while self._running:
            await asyncio.gather(*(t for _, t in list(self._running.values())), return_exceptions=True)

    @staticmethod
    def _conflict(request_id: str) -> ExecutionResult:
        return ExecutionResult.internal_error(
            f"request_id {request_id!r} was already used for a different request (other code, stdin or "
            "limits); it was not run. Use a fresh id for each distinct request.",
            request_id,
        )
