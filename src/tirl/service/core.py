"""The server-side execution path, without HTTP: limits, admission, idempotency, safety deadline, metrics.

:class:`ExecutionService` wraps any :class:`~tirl.sandbox.types.CodeExecutor` (``LocalSandbox`` in
production, a test double in tests). For each request it

1. answers from the idempotency cache or joins a run of the same id in flight (:mod:`tirl.service.cache`);
2. otherwise waits for one of ``max_concurrency`` execution slots (the wait is the ``queue_depth`` metric);
3. runs it in the executor under a safety deadline of ``timeout_s + deadline_grace_s`` counted from when it
   got its slot, so a broken executor still yields an answer (``internal``) instead of a hung request.

Batches: :meth:`ExecutionService.execute_batch` answers all items at once, in request order (``POST
/v1/execute/batch``); :meth:`ExecutionService.execute_each` yields each item as soon as it finishes, in completion
order (``POST /v1/execute/stream``). Both run every item through :meth:`ExecutionService.execute`, so cache,
de-duplication, admission, deadlines and metrics are the same.

It never raises for a request: executor failures become ``internal`` results. Size checks (413) and schema
checks (422) happen before, in :mod:`tirl.service.app`; this module only offers
:meth:`ServiceConfig.oversize_reason`.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult
from tirl.service.cache import CacheSource, ResultCache
from tirl.service.metrics import ServiceMetrics

log = logging.getLogger(__name__)

DEFAULT_MAX_CONCURRENCY = 64


@dataclass
class ServiceConfig:
    """Limits and policies of one server.

    Attributes:
        max_code_bytes: largest ``code`` accepted, in UTF-8 bytes; larger gets a 413.
        max_stdin_bytes: largest ``stdin`` accepted, in UTF-8 bytes; larger gets a 413.
        max_batch_size: most items in one ``/v1/execute/batch`` or ``/v1/execute/stream`` request; more gets a
            413.
        max_body_bytes: largest HTTP request body read; larger gets a 413 before it is parsed.
        max_timeout_s: largest ``timeout_s`` accepted; larger gets a 422.
        max_memory_mb: largest ``memory_mb`` accepted; larger gets a 422 naming the field. None: the
            executor's own limit (``LocalSandbox``: ``config.max_memory_mb``), which would otherwise answer
            such a request ``internal`` (a status clients retry).
        max_concurrency: executions handed to the executor at once. None: the executor's
            ``max_concurrency`` or ``workers`` attribute (``LocalSandbox`` has both), else
            ``DEFAULT_MAX_CONCURRENCY``. Keep it at what the executor runs at once, so that the safety
            deadline never counts time queued inside the executor.
        deadline_grace_s: the safety deadline is ``timeout_s + deadline_grace_s`` after an execution got its
            slot; past it the execution is cancelled and answered ``internal``. Keep it above the executor's
            own grace (``LocalSandbox``: ``host_grace_s``, 10 s) so the executor's handling answers first.
        cache_max_entries: finished results kept for idempotent retries.
        cache_max_bytes: estimated bytes of finished results kept.
        fast_path: answer well-formed ``/v1/execute``, ``/v1/execute/batch`` and ``/v1/execute/stream`` requests
            without FastAPI's routing (:class:`tirl.service.app.FastExecutePath`: same answers, about 0.2 ms less
            server CPU per single-call request, see docs/benchmarks.md); False sends every request through the
            routes.
    """

    max_code_bytes: int = 1 << 20
    max_stdin_bytes: int = 1 << 20
    max_batch_size: int = 1024
    max_body_bytes: int = 64 << 20
    max_timeout_s: float = 600.0
    max_memory_mb: int | None = None
    max_concurrency: int | None = None
    deadline_grace_s: float = 15.0
    cache_max_entries: int = 100_000
    cache_max_bytes: int = 256 << 20
    fast_path: bool = True

    def oversize_reason(self, code: str, stdin: str) -> str | None:
        """Why a request with this ``code`` and ``stdin`` is over the size limits (a sentence), or None.

        Sizes are UTF-8 bytes; lone surrogates (legal in JSON strings) are counted, never raise.
        """
        code_bytes = len(code.encode("utf-8", "surrogatepass"))
        if code_bytes > self.max_code_bytes:
            return f"code is {code_bytes} bytes, over the limit of {self.max_code_bytes} bytes"
        stdin_bytes = len(stdin.encode("utf-8", "surrogatepass"))
        if stdin_bytes > self.max_stdin_bytes:
            return f"stdin is {stdin_bytes} bytes, over the limit of {self.max_stdin_bytes} bytes"
        return None


def resolve_concurrency(config: ServiceConfig, executor: CodeExecutor) -> int:
    """The execution slots to use: ``config.max_concurrency``; else the executor's own ``max_concurrency``
    (``LocalSandbox``: workers x slots per worker) or ``workers`` attribute; else ``DEFAULT_MAX_CONCURRENCY``.

    Raises:
        ValueError: ``config.max_concurrency`` below 1.
    """
    if config.max_concurrency is not None:
        if config.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {config.max_concurrency}")
        return config.max_concurrency
    for name in ("max_concurrency", "workers"):
        value = getattr(executor, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return value
    return DEFAULT_MAX_CONCURRENCY


class ExecutionService:
    """Runs requests through cache, admission and the executor, and keeps the metrics.

    Args:
        executor: what runs the code.
        config: limits and policies; defaults to ``ServiceConfig()``.
        metrics: where to count; a fresh :class:`ServiceMetrics` when None.

    Attributes:
        boot_id: random id of this service instance (changes when the process restarts).
        draining: True once shutdown began; ``/healthz`` then answers 503.
    """

    def __init__(
        self,
        executor: CodeExecutor,
        config: ServiceConfig | None = None,
        metrics: ServiceMetrics | None = None,
    ) -> None:
        self.executor = executor
        self.config = config or ServiceConfig()
        self.metrics = metrics or ServiceMetrics()
        self.cache = ResultCache(self.config.cache_max_entries, self.config.cache_max_bytes)
        self.max_concurrency = resolve_concurrency(self.config, executor)
        self.boot_id = uuid.uuid4().hex
        self.draining = False
        self._slots: asyncio.Semaphore | None = None
        self._waiting = 0
        self._running = 0

    @property
    def queue_depth(self) -> int:
        """Executions waiting for a slot."""
        return self._waiting

    @property
    def in_flight(self) -> int:
        """Executions inside the executor."""
        return self._running

    async def execute(self, request: ExecutionRequest) -> ExecutionResult:
        """Answer one request (idempotent by ``request_id``). Never raises for the request's content."""
        start = time.perf_counter()
        result, source = await self.cache.get_or_run(request, self._run_admitted)
        self._count(result, source, time.perf_counter() - start)
        return result

    async def execute_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Answer many requests concurrently; ``results[i]`` answers ``requests[i]``."""
        self.metrics.batch_size.observe(len(requests))
        return list(await asyncio.gather(*(self.execute(r) for r in requests)))

    async def execute_each(self, requests: Sequence[ExecutionRequest]) -> AsyncIterator[tuple[int, ExecutionResult]]:
        """Answer many requests concurrently; yield ``(i, result)`` for ``requests[i]`` as soon as it finishes.

        Items come in completion order, each exactly once. Every item goes through :meth:`execute` (cache,
        de-duplication by ``request_id``, admission, safety deadline, metrics), as in :meth:`execute_batch`. An
        item whose :meth:`execute` raised (a server bug: it never raises for a request's content) is answered
        ``internal`` instead of failing the others.

        Closing the iterator early (``aclose``, or cancelling the task iterating it: the client disconnected)
        cancels the per-item waits but not the executions: those belong to the idempotency cache, finish, and
        are cached for a retry of the same id. No task of this iterator outlives it.
        """
        self.metrics.batch_size.observe(len(requests))
        finished: asyncio.Queue[int] = asyncio.Queue()
        tasks: list[asyncio.Task[ExecutionResult]] = []
        for i, request in enumerate(requests):
            task = asyncio.ensure_future(self._execute_item(request))
            task.add_done_callback(lambda _task, i=i: finished.put_nowait(i))
            tasks.append(task)
        try:
            for _ in range(len(tasks)):
                i = await finished.get()
                yield i, tasks[i].result()
        finally:
            for task in tasks:
                task.cancel()  # no-op for finished ones; the executions themselves are shielded by the cache

    async def _execute_item(self, request: ExecutionRequest) -> ExecutionResult:
        try:
            return await self.execute(request)
        except Exception as exc:  # CancelledError is not an Exception: it propagates
            log.exception("execute failed for request %r", request.request_id)
            return ExecutionResult.internal_error(
                f"unexpected server error: {type(exc).__name__}: {exc}", request.request_id
            )

    def _count(self, result: ExecutionResult, source: CacheSource, latency_s: float) -> None:
        self.metrics.calls.labels(status=result.status, source=source).inc()
        self.metrics.call_latency.observe(latency_s)
        self.metrics.cache_entries.set(len(self.cache))

    async def _run_admitted(self, request: ExecutionRequest) -> ExecutionResult:
        if self._slots is None:  # created lazily: a Semaphore binds to the running loop
            self._slots = asyncio.Semaphore(self.max_concurrency)
        self._waiting += 1
        self.metrics.queue_depth.inc()
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
            self.metrics.queue_depth.dec()
        self._running += 1
        self.metrics.in_flight.inc()
        start = time.perf_counter()
        try:
            deadline = float(request.timeout_s) + self.config.deadline_grace_s
            safety = asyncio.timeout(deadline)
            try:
                async with safety:
                    result = await self.executor.run(request)
            except TimeoutError as exc:
                if safety.expired():
                    message = (
                        f"executor gave no answer within the safety deadline of {deadline:.1f} s "
                        f"(timeout_s {request.timeout_s} + grace {self.config.deadline_grace_s}); it was cancelled"
                    )
                else:  # the executor raised TimeoutError itself
                    message = f"executor failed: TimeoutError: {exc}"
                result = ExecutionResult.internal_error(message, request.request_id, time.perf_counter() - start)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # a broken executor must not take the request down
                result = ExecutionResult.internal_error(
                    f"executor failed: {type(exc).__name__}: {exc}", request.request_id, time.perf_counter() - start
                )
            if not isinstance(result, ExecutionResult):
                result = ExecutionResult.internal_error(
                    f"executor returned {type(result).__name__}, not ExecutionResult", request.request_id
                )
            self.metrics.executions.labels(status=result.status).inc()
            return result
        finally:
            self.metrics.execution_latency.observe(time.perf_counter() - start)
            self._running -= 1
            self.metrics.in_flight.dec()
            self._slots.release()
