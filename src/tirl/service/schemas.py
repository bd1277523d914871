"""Wire format of the code-execution service: pydantic models for requests, results and health.

This module covers the JSON bodies of ``/v1/execute``, ``/v1/execute/batch``, ``/v1/execute/stream`` (its
request body and the objects on its lines) and ``/healthz`` and their conversion to and from the shared
dataclasses of :mod:`tirl.sandbox.types`. It does not check sizes against
the server's limits (that is a 413, decided by the app) and does not run anything.

The request and result models mirror :class:`~tirl.sandbox.types.ExecutionRequest` and
:class:`~tirl.sandbox.types.ExecutionResult` field for field (a test keeps them in step). On the wire the
``request_id`` is required: it is the idempotency key, so a request without one could not be retried safely.
Unknown fields are rejected (422) so that a misspelt field is never silently ignored, and request fields are
strict (422 otherwise): numbers must be JSON numbers (``"5"`` and ``true`` are not; an integer is accepted
where a float is expected, ``memory_mb`` must be an integer, ``timeout_s`` finite), strings JSON strings, as
:func:`tirl.sandbox.pool.validate_request` demands of the dataclass, so both executors refuse the same input.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tirl.sandbox.types import (
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    ExecutionRequest,
    ExecutionResult,
    ExecutionStatus,
)

MAX_REQUEST_ID_CHARS = 256


#: Request models: unknown fields and lax types (``"5"`` or ``true`` for a number, a number for a string) are 422s.
STRICT_REQUEST = ConfigDict(extra="forbid", strict=True)


class ExecuteRequest(BaseModel):
    """One piece of code to run (the body of ``POST /v1/execute``, an item of a batch)."""

    model_config = STRICT_REQUEST

    request_id: str = Field(
        min_length=1,
        max_length=MAX_REQUEST_ID_CHARS,
        description="Idempotency key: a retried id is answered from its first execution.",
    )
    code: str = Field(description="Python source, run as __main__ in a fresh process.")
    stdin: str = Field(default="", description="Standard input (UTF-8 text); empty means EOF.")
    timeout_s: float = Field(
        default=DEFAULT_TIMEOUT_S,
        gt=0,
        allow_inf_nan=False,
        description="Wall-clock deadline in seconds (a JSON number; integers accepted).",
    )
    memory_mb: int = Field(
        default=DEFAULT_MEMORY_MB,
        gt=0,
        description="Memory limit in MiB (a JSON integer): address space per process, and "
        "all processes of the call together where the sandbox has cgroups.",
    )

    def to_request(self) -> ExecutionRequest:
        """The shared dataclass with the same fields."""
        return ExecutionRequest(
            code=self.code,
            stdin=self.stdin,
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
            request_id=self.request_id,
        )


class BatchExecuteRequest(BaseModel):
    """The body of ``POST /v1/execute/batch`` (requests answered in the same order) and of
    ``POST /v1/execute/stream`` (each answered on its own line as it finishes)."""

    model_config = STRICT_REQUEST

    requests: list[ExecuteRequest] = Field(min_length=1)


class ExecuteResult(BaseModel):
    """What happened when a request ran; see :mod:`tirl.sandbox.types` for the meaning of ``status``."""

    status: ExecutionStatus
    stdout: str = ""
    stderr: str = ""
    display: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    exit_code: int | None = None
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    request_id: str = ""


class BatchExecuteResponse(BaseModel):
    """The answer to ``POST /v1/execute/batch``: ``results[i]`` answers ``requests[i]``."""

    results: list[ExecuteResult]


class StreamedResult(BaseModel):
    """One line of the answer to ``POST /v1/execute/stream``: ``result`` answers ``requests[index]``."""

    index: int = Field(ge=0, description="Position of the answered request in the body's requests.")
    result: ExecuteResult


class ServiceLimits(BaseModel):
    """Input limits of a server; over them a request gets a 413 (sizes) or 422 (timeout)."""

    max_code_bytes: int
    max_stdin_bytes: int
    max_batch_size: int
    max_body_bytes: int
    max_timeout_s: float
    deadline_grace_s: float = Field(description="An execution is answered at most this long after timeout_s.")


class HealthResponse(BaseModel):
    """The body of ``GET /healthz``."""

    status: str = Field(description="'ok' while serving, 'draining' during shutdown (answered with 503).")
    boot_id: str = Field(description="Random id of this server process; changes on restart.")
    version: str
    in_flight: int
    queue_depth: int
    max_concurrency: int
    limits: ServiceLimits


class ErrorResponse(BaseModel):
    """The body of every 4xx/5xx answer: a readable ``message`` plus machine-readable ``detail``."""

    error: str
    message: str
    detail: Any = None


_RESULT_FIELDS = tuple(ExecutionResult.__dataclass_fields__)


def result_to_wire(result: ExecutionResult) -> dict[str, Any]:
    """The JSON dict of a result: same keys as ``ExecutionResult.to_dict`` without its deep copy (every field
    is a scalar or a string)."""
    return {name: getattr(result, name) for name in _RESULT_FIELDS}


def result_from_wire(data: Any, request_id: str) -> ExecutionResult:
    """Parse one result dict from a server; anything unusable becomes an ``internal`` result.

    Args:
        data: the decoded JSON object (any type: a server could be broken).
        request_id: the id the result must answer; a result naming another id is rejected as ``internal``.
    """
    if not isinstance(data, dict):
        return ExecutionResult.internal_error(f"server sent a non-object result: {data!r:.200}", request_id)
    try:
        result = ExecutionResult.from_dict(data)
    except (TypeError, ValueError) as exc:
        return ExecutionResult.internal_error(f"server sent an unreadable result: {exc}", request_id)
    if result.request_id != request_id:
        return ExecutionResult.internal_error(
            f"server answered request {request_id!r} with the result of {result.request_id!r}", request_id
        )
    return result


def encode_json(payload: Any) -> bytes:
    """Compact UTF-8 JSON for the wire; text with lone surrogates (which UTF-8 cannot hold) is written
    ``\\uXXXX``-escaped instead, so encoding never fails on what a sandboxed program printed."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(payload, ensure_ascii=True, separators=(",", ":")).encode("ascii")
