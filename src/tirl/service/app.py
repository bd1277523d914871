"""The HTTP face of the code-execution service: a FastAPI app over any ``CodeExecutor``.

Endpoints (OpenAPI at ``/openapi.json``, docs at ``/docs``):

``POST /v1/execute``         one :class:`~tirl.service.schemas.ExecuteRequest` -> one result
``POST /v1/execute/batch``   ``{"requests": [...]}`` -> ``{"results": [...]}`` in the same order, once all ran
``POST /v1/execute/stream``  ``{"requests": [...]}`` -> ``application/x-ndjson``: one line
                             ``{"index": i, "result": {...}}`` per item as soon as it finishes
``GET  /healthz``            200 with limits and load while serving, 503 while draining
``GET  /metrics``            Prometheus text (:mod:`tirl.service.metrics`)

The stream endpoint takes the same body as the batch endpoint, with the same checks and the same 413/422
answers, all decided before the 200 and the first line are sent. Then each item's line (the same result object
as in ``results``; ``index`` is its position in ``requests``) is written when that item finishes, in completion
order, each item exactly once, so a caller is not held back by the slowest item of its batch. The body ends
after the last item (the chunked encoding's end marks a complete answer; a connection that closes before it is a
broken stream, and the items without a line were not answered). Items go through the same cache, de-duplication,
admission, deadlines and metrics as the batch endpoint (:meth:`ExecutionService.execute_each`). A client that
disconnects mid-stream stops the stream; its executions still finish and are cached for a retry of the same ids.

Errors never crash the server and always have a JSON body ``{"error", "message", "detail"}``:
malformed JSON or fields (wrong JSON types included: ``"5"`` or ``true`` for a number) -> 422 with a readable
message naming the field; code/stdin over the configured size, too many items in a batch, or a body over
``max_body_bytes`` -> 413; ``timeout_s`` over ``max_timeout_s`` or ``memory_mb`` over ``max_memory_mb`` (default:
the executor's limit) -> 422. Anything the executor does wrong
becomes an ``internal`` result inside a 200.

Extending the app: pass extra ``fastapi.APIRouter`` objects as ``create_app(..., routers=[router])``. Their
handlers reach the shared objects through ``request.app.state``: ``service`` (:class:`ExecutionService`:
cache, admission, metrics), ``executor`` and ``config``; or use the :func:`get_service` dependency. They
inherit the error handlers and the body-size limit.

Well-formed execute requests (the three ``POST /v1/execute*`` paths) are answered by :class:`FastExecutePath`
before FastAPI's routing (same answers, less CPU; ``ServiceConfig.fast_path``); everything else, errors included,
goes through the routes.

This module does not start a server (see :mod:`tirl.service.server`) and does not run code itself.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tirl import __version__
from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult
from tirl.service.core import ExecutionService, ServiceConfig
from tirl.service.metrics import PROMETHEUS_CONTENT_TYPE
from tirl.service.schemas import (
    BatchExecuteRequest,
    BatchExecuteResponse,
    ErrorResponse,
    ExecuteRequest,
    ExecuteResult,
    HealthResponse,
    ServiceLimits,
    StreamedResult,
    encode_json,
    result_to_wire,
)


class JSONBytesResponse(Response):
    """JSON response that never fails on text holding lone surrogates (escaped as ``\\udXXX`` instead)."""

    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return encode_json(content)


class NdjsonStream(JSONResponse):
    """A 200 ``application/x-ndjson`` answer: one line per ``(index, result)`` of ``items``, written as each comes.

    (A ``JSONResponse`` subclass only so that FastAPI's OpenAPI shows the line's schema; nothing of it is used.)
    ``items`` is an async iterator (:meth:`ExecutionService.execute_each`); each pair is sent as
    ``{"index": i, "result": {...}}`` and a newline, in its own chunk. When the client disconnects (the server
    reports ``http.disconnect``, or a send raises ``OSError`` as ASGI 2.4 servers do) the iteration is cancelled
    and closed quietly: nothing is logged as an error and no task is left behind.
    """

    media_type = "application/x-ndjson"

    def __init__(self, items: AsyncIterator[tuple[int, ExecutionResult]]) -> None:
        self.items = items
        self.status_code = 200
        self.background = None
        self.init_headers()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        writer = asyncio.ensure_future(self._write(send))
        watcher = asyncio.ensure_future(self._until_disconnect(receive))
        try:
            await asyncio.wait({writer, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            writer.cancel()
            watcher.cancel()
            await asyncio.gather(writer, watcher, return_exceptions=True)
        if not writer.cancelled() and writer.exception() is not None:
            raise writer.exception()  # a bug: the server closes the connection, the client sees a broken stream

    async def _write(self, send: Send) -> None:
        items = self.items
        try:
            async for index, result in items:
                line = encode_json({"index": index, "result": result_to_wire(result)}) + b"\n"
                await send({"type": "http.response.body", "body": line, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        except OSError:
            return  # the client is gone (ASGI 2.4: send raises)
        finally:
            aclose = getattr(items, "aclose", None)
            if aclose is not None:
                await aclose()

    @staticmethod
    async def _until_disconnect(receive: Receive) -> None:
        while (await receive())["type"] != "http.disconnect":
            pass


def _error(status_code: int, error: str, message: str, detail: Any = None) -> JSONBytesResponse:
    return JSONBytesResponse({"error": error, "message": message, "detail": detail}, status_code=status_code)


class RequestTooLarge(Exception):
    """Raised by a handler to answer 413 with a readable message and per-item detail."""

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class InvalidField(Exception):
    """Raised by a handler to answer 422 for a value pydantic accepts but the server's limits do not."""

    def __init__(self, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail


class BodySizeLimit:
    """ASGI middleware: answer 413 to a request whose body is over ``max_bytes``, before it is parsed.

    Checks ``Content-Length`` first, then counts the streamed bytes (chunked uploads), buffering at most
    ``max_bytes`` and replaying them to the app.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, on_reject: Any = None) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.on_reject = on_reject

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared > self.max_bytes:
                    await self._reject(scope, receive, send, declared)
                    return
        chunks: list[bytes] = []
        total = 0
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body = message.get("body", b"")
            total += len(body)
            if total > self.max_bytes:
                await self._reject(scope, receive, send, total)
                return
            chunks.append(body)
            more = message.get("more_body", False)
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _reject(self, scope: Scope, receive: Receive, send: Send, size: int) -> None:
        if self.on_reject is not None:
            self.on_reject(413)
        response = _error(
            413,
            "request_too_large",
            f"request body is at least {size} bytes, over the limit of {self.max_bytes} bytes",
        )
        await response(scope, receive, send)


#: The paths :class:`FastExecutePath` answers itself when the request is well-formed.
FAST_PATHS = ("/v1/execute", "/v1/execute/batch", "/v1/execute/stream")


class FastExecutePath:
    """ASGI middleware: answers a well-formed ``POST /v1/execute``, ``/v1/execute/batch`` or ``/v1/execute/stream``
    without the
    Starlette/FastAPI routing, dependency and exception layers (about 0.2 ms of server CPU per single-call
    request: 0.66-0.73 ms instead of 0.86-0.95; docs/benchmarks.md).

    Only the success path is shortened: the body (``Content-Type: application/json``) is validated with the
    same pydantic models in one pass (``model_validate_json``) and checked with the same limits; anything
    else, a body that does not validate, is over a limit, has another content type or a JSON feature the
    one-pass parser refuses (lone surrogate escapes, ``NaN``), is replayed unchanged to the app, whose
    routes answer it (422, 413, ...) exactly as before. ``handler(path, body)`` returns the response, or None
    to fall back. Placed inside :class:`BodySizeLimit`, so bodies over the limit never get here.
    """

    def __init__(self, app: ASGIApp, handler: Any) -> None:
        self.app = app
        self.handler = handler

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or scope.get("path") not in FAST_PATHS
            or not _is_json(scope)
        ):
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []
        more = True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        response = await self.handler(scope["path"], body)
        if response is not None:
            await response(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


def _is_json(scope: Scope) -> bool:
    for name, value in scope.get("headers", ()):
        if name == b"content-type":
            return value.split(b";", 1)[0].strip().lower() == b"application/json"
    return False


def _loc(loc: Sequence[Any]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "request"


def _json_kind(value: Any) -> str:
    """How a decoded JSON value reads in a message: ``a string ("5")``, ``a boolean (true)``, ``null``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({'true' if value else 'false'})"
    if isinstance(value, (int, float)):
        return f"a number ({value!r:.40})"
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"a string ({text if len(text) <= 40 else text[:37] + '...'})"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def readable_validation_message(errors: Sequence[dict[str, Any]]) -> str:
    """One line per pydantic/FastAPI validation error: ``body.requests[3].timeout_s: Input should be > 0``."""
    lines = []
    for err in errors[:20]:
        if err.get("type") == "json_invalid":
            reason = (err.get("ctx") or {}).get("error", "")
            position = err.get("loc", ("body", "?"))[-1]
            lines.append(f"body is not valid JSON (at character {position}): {reason}".rstrip(": "))
        elif tuple(err.get("loc", ())) == ("body",) and err.get("type") in ("model_attributes_type", "dict_type"):
            lines.append("body must be a JSON object, sent with Content-Type: application/json")
        else:
            line = f"{_loc(err.get('loc', ()))}: {err.get('msg', 'invalid')}"
            if str(err.get("type", "")).endswith("_type") and "input" in err:
                line += f", got {_json_kind(err['input'])}"  # strict fields: say what was sent instead
            lines.append(line)
    if len(errors) > 20:
        lines.append(f"... and {len(errors) - 20} more errors")
    return "; ".join(lines)


def get_service(request: Request) -> ExecutionService:
    """FastAPI dependency for extra routers: the app's :class:`ExecutionService`."""
    return request.app.state.service


def _memory_limit(config: ServiceConfig, executor: CodeExecutor) -> int | None:
    """The largest ``memory_mb`` a request may ask for, in MB: ``config.max_memory_mb``, else the executor's own
    ``config.max_memory_mb``; None (the executor decides) when neither is an integer."""
    limit = (
        config.max_memory_mb
        if config.max_memory_mb is not None
        else getattr(getattr(executor, "config", None), "max_memory_mb", None)
    )
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None  # an executor without a known limit: it decides
    return limit


def _offenders(
    items: Sequence[ExecuteRequest], message: Callable[[ExecuteRequest], str | None]
) -> list[dict[str, Any]]:
    """``{"index", "request_id", "message"}`` of each item for which ``message(item)`` is not None."""
    out = []
    for i, it in enumerate(items):
        why = message(it)
        if why is not None:
            out.append({"index": i, "request_id": it.request_id, "message": why})
    return out


def _summary(offenders: list[dict[str, Any]]) -> str:
    """The first ten offenders as one line: ``item 3: ...; item 7: ...``."""
    return "; ".join(f"item {d['index']}: {d['message']}" for d in offenders[:10])


def check_requests(items: Sequence[ExecuteRequest], config: ServiceConfig, memory_limit: int | None) -> None:
    """Refuse a request the service's limits do not allow, before anything runs (one answer for the batch).

    Raises:
        InvalidField: (422) an item's ``timeout_s`` over ``config.max_timeout_s`` or ``memory_mb`` over
            ``memory_limit`` (MB; None: no limit here).
        RequestTooLarge: (413) an item's code or stdin over the configured sizes
            (:meth:`ServiceConfig.oversize_reason`).
    """
    too_slow = _offenders(
        items,
        lambda it: (
            f"timeout_s {it.timeout_s} is over the limit of {config.max_timeout_s}"
            if it.timeout_s > config.max_timeout_s
            else None
        ),
    )
    if too_slow:
        raise InvalidField(_summary(too_slow), too_slow)
    too_much = _offenders(
        items,
        lambda it: (
            f"memory_mb {it.memory_mb} is over the limit of {memory_limit}"
            if memory_limit is not None and it.memory_mb > memory_limit
            else None
        ),
    )
    if too_much:
        raise InvalidField(_summary(too_much), too_much)
    too_big = _offenders(items, lambda it: config.oversize_reason(it.code, it.stdin))
    if too_big:
        raise RequestTooLarge(_summary(too_big), too_big)


def _lifespan(
    service: ExecutionService, executors: Sequence[CodeExecutor]
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: at shutdown, drain the service (new requests get 503, the cache's in-flight work
    finishes), then close ``executors`` (those the app owns; empty when it owns none)."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        yield
        service.draining = True
        await service.cache.drain()
        for executor in executors:
            await executor.aclose()

    return lifespan


def _fast_handler(
    service: ExecutionService,
    config: ServiceConfig,
    check: Callable[[Sequence[ExecuteRequest]], None],
    count_reject: Callable[[int], None],
) -> Callable[[str, bytes], Awaitable[Response | None]]:
    """The handler of :class:`FastExecutePath`: answers a well-formed request to one of the three execute paths
    (``path``, the raw ``body``) as the routes would; None for anything else (malformed, over a limit), which
    the routes then answer with their messages. An unexpected error is a 500, never a second run."""

    async def fast_handler(path: str, body: bytes) -> Response | None:
        try:
            if path == "/v1/execute":
                item = ExecuteRequest.model_validate_json(body)
                check([item])
                batch = None
            else:
                batch = BatchExecuteRequest.model_validate_json(body)
                if len(batch.requests) > config.max_batch_size:
                    return None
                check(batch.requests)
        except (ValidationError, InvalidField, RequestTooLarge, ValueError):
            return None  # the routes below answer it, with their messages
        if path == "/v1/execute/stream":
            assert batch is not None
            return NdjsonStream(service.execute_each([r.to_request() for r in batch.requests]))
        try:
            if batch is None:
                return JSONBytesResponse(result_to_wire(await service.execute(item.to_request())))
            results = await service.execute_batch([r.to_request() for r in batch.requests])
            return JSONBytesResponse({"results": [result_to_wire(r) for r in results]})
        except Exception as exc:  # as _on_unexpected below; never run twice by falling back
            count_reject(500)
            return _error(500, "server_error", f"unexpected server error: {type(exc).__name__}: {exc}")

    return fast_handler


def _add_error_handlers(app: FastAPI, count_reject: Callable[[int], None]) -> None:
    """Every error as a JSON body ``{"error", "message", "detail"}``, counted by status code: malformed JSON or
    fields 422 (one readable line per field), over a limit 413 or 422, other HTTP errors as they are, anything
    unexpected 500."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(request: Request, exc: RequestValidationError) -> Response:
        count_reject(422)
        errors = exc.errors()
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
        return _error(422, "invalid_request", readable_validation_message(errors), detail)

    @app.exception_handler(InvalidField)
    async def _on_invalid(request: Request, exc: InvalidField) -> Response:
        count_reject(422)
        return _error(422, "invalid_request", exc.message, exc.detail)

    @app.exception_handler(RequestTooLarge)
    async def _on_too_large(request: Request, exc: RequestTooLarge) -> Response:
        count_reject(413)
        return _error(413, "request_too_large", exc.message, exc.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> Response:
        cause = exc.__cause__
        if exc.status_code == 400 and isinstance(cause, (ValueError, RecursionError)):
            # FastAPI answers a body json.loads refuses with other than JSONDecodeError (bad UTF-8, too deep, an
            # integer over 4300 digits) with a bare 400; it is a malformed body (422).
            count_reject(422)
            if isinstance(cause, UnicodeDecodeError):
                reason = f"not valid UTF-8 (byte {cause.start})"
            elif isinstance(cause, RecursionError):
                reason = "nested too deeply"
            else:
                reason = str(cause)
            return _error(422, "invalid_request", f"body is not valid JSON: {reason}")
        count_reject(exc.status_code)
        return _error(exc.status_code, "http_error", str(exc.detail))

    @app.exception_handler(Exception)
    async def _on_unexpected(request: Request, exc: Exception) -> Response:
        count_reject(500)
        return _error(500, "server_error", f"unexpected server error: {type(exc).__name__}: {exc}")


def _add_execute_routes(
    app: FastAPI,
    service: ExecutionService,
    config: ServiceConfig,
    check: Callable[[Sequence[ExecuteRequest]], None],
) -> None:
    """``POST /v1/execute``, ``/v1/execute/batch`` and ``/v1/execute/stream`` (see the module docstring), each
    request checked by ``check`` and a batch's size by ``config.max_batch_size`` before anything runs."""
    responses: dict[int | str, dict[str, Any]] = {
        413: {"model": ErrorResponse, "description": "code, stdin, batch or body over the configured size"},
        422: {"model": ErrorResponse, "description": "malformed JSON or fields"},
    }

    @app.post("/v1/execute", response_model=ExecuteResult, responses=responses, tags=["execute"])
    async def execute(body: ExecuteRequest) -> Response:
        """Run one request (idempotent by ``request_id``)."""
        check([body])
        result = await service.execute(body.to_request())
        return JSONBytesResponse(result_to_wire(result))

    def checked_batch(body: BatchExecuteRequest) -> list[ExecutionRequest]:
        if len(body.requests) > config.max_batch_size:
            raise RequestTooLarge(f"batch has {len(body.requests)} requests, over the limit of {config.max_batch_size}")
        check(body.requests)
        return [r.to_request() for r in body.requests]

    @app.post("/v1/execute/batch", response_model=BatchExecuteResponse, responses=responses, tags=["execute"])
    async def execute_batch(body: BatchExecuteRequest) -> Response:
        """Run many requests concurrently; ``results[i]`` answers ``requests[i]``."""
        results: list[ExecutionResult] = await service.execute_batch(checked_batch(body))
        return JSONBytesResponse({"results": [result_to_wire(r) for r in results]})

    error_json = {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorResponse"}}}
    stream_responses: dict[int | str, dict[str, Any]] = {
        200: {
            "model": StreamedResult,
            "description": "one StreamedResult JSON object per line, in completion "
            "order, each item once; the body ends after the last item",
        },
        413: {"description": responses[413]["description"], "content": error_json},
        422: {"description": responses[422]["description"], "content": error_json},
    }

    @app.post(
        "/v1/execute/stream", status_code=200, response_class=NdjsonStream, responses=stream_responses, tags=["execute"]
    )
    async def execute_stream(body: BatchExecuteRequest) -> Response:
        """Run many requests concurrently; answer each as soon as it finishes (``application/x-ndjson``, one
        ``{"index": i, "result": {...}}`` line per item, ``i`` its position in ``requests``). Same body, limits
        and 413/422 answers as ``/v1/execute/batch``, decided before the stream starts."""
        return NdjsonStream(service.execute_each(checked_batch(body)))


def _add_ops_routes(app: FastAPI, service: ExecutionService, config: ServiceConfig) -> None:
    """``GET /healthz`` (liveness, load and limits; 503 while draining) and ``GET /metrics`` (Prometheus)."""

    @app.get("/healthz", response_model=HealthResponse, responses={503: {"model": HealthResponse}}, tags=["ops"])
    async def healthz() -> Response:
        """Liveness and load; 503 while the server is draining for shutdown."""
        body = HealthResponse(
            status="draining" if service.draining else "ok",
            boot_id=service.boot_id,
            version=__version__,
            in_flight=service.in_flight,
            queue_depth=service.queue_depth,
            max_concurrency=service.max_concurrency,
            limits=ServiceLimits(
                max_code_bytes=config.max_code_bytes,
                max_stdin_bytes=config.max_stdin_bytes,
                max_batch_size=config.max_batch_size,
                max_body_bytes=config.max_body_bytes,
                max_timeout_s=config.max_timeout_s,
                deadline_grace_s=config.deadline_grace_s,
            ),
        )
        return JSONBytesResponse(body.model_dump(), status_code=503 if service.draining else 200)

    @app.get("/metrics", tags=["ops"], response_class=Response)
    async def metrics() -> Response:
        """Prometheus text exposition."""
        service.metrics.cache_entries.set(len(service.cache))
        return Response(service.metrics.render(), media_type=PROMETHEUS_CONTENT_TYPE)


def create_app(
    executor: CodeExecutor,
    config: ServiceConfig | None = None,
    *,
    routers: Sequence[APIRouter] = (),
    close_executor: bool = False,
    check_executor: CodeExecutor | None = None,
) -> FastAPI:
    """Build the service app over ``executor``: the services, the lifespan (:func:`_lifespan`), the fast path
    (:func:`_fast_handler`) and the body-size limit, the error handlers (:func:`_add_error_handlers`), the
    routes (:func:`_add_execute_routes`, :func:`_add_ops_routes`) and ``routers``.

    Args:
        executor: runs the code (``LocalSandbox``, or a test double).
        config: limits and policies; ``ServiceConfig()`` when None.
        routers: extra routers to include (for example ``POST /v1/verify/batch`` of the reward part).
        close_executor: await ``executor.aclose()`` when the app shuts down (set when the app owns it).
        check_executor: runs the answer checks of ``/v1/verify/batch`` (a pool of their own, so that reference
            answers never reach the workers of ``/v1/execute``); None checks on ``executor``. Closed with
            ``executor`` when ``close_executor``.

    Returns:
        The FastAPI app; ``app.state.service`` holds the :class:`ExecutionService`, ``app.state.check_service``
        the one over ``check_executor`` (None without it).
    """
    config = config or ServiceConfig()
    service = ExecutionService(executor, config)
    check_service = ExecutionService(check_executor, config) if check_executor is not None else None
    owned = [e for e in (executor, check_executor) if e is not None] if close_executor else []
    app = FastAPI(
        title="tirl code-execution service",
        version=__version__,
        description="Runs untrusted Python for tool-integrated reasoning; idempotent by request_id.",
        lifespan=_lifespan(service, owned),
    )
    app.state.service = service
    app.state.check_service = check_service
    app.state.executor = executor
    app.state.config = config

    def count_reject(code: int) -> None:
        service.metrics.rejected.labels(code=str(code)).inc()

    memory_limit = _memory_limit(config, executor)

    def check(items: Sequence[ExecuteRequest]) -> None:
        check_requests(items, config, memory_limit)

    if config.fast_path:
        app.add_middleware(FastExecutePath, handler=_fast_handler(service, config, check, count_reject))
    app.add_middleware(BodySizeLimit, max_bytes=config.max_body_bytes, on_reject=count_reject)
    _add_error_handlers(app, count_reject)
    _add_execute_routes(app, service, config, check)
    _add_ops_routes(app, service, config)
    for router in routers:
        app.include_router(router)
    return app
