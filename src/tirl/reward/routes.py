"""``POST /v1/verify/batch`` and ``GET /v1/verify/stats``: answer verification on the code-execution service.

Covers a FastAPI ``APIRouter`` (:func:`create_verify_router`) that the service app includes
(``tirl.service.app.create_app(..., routers=[create_verify_router()])``). A batch is verified with
:class:`~tirl.reward.verifier.Verifier`: fast paths in the server process, symbolic comparisons through the
app's :class:`~tirl.service.core.ExecutionService` (so they share its admission control and metrics) or, when
the app has none, its ``executor``. For fast symbolic verification the server's ``LocalSandbox`` should
preload :data:`tirl.reward.payload.PRELOAD_MODULES`; without it each comparison imports math-verify in its
forked child (correct, about 10 times slower).

Request: ``{"items": [{"response": str | null, "gold": str, "answer": str | null, "question": str | null}, ...],
"timeout_s": float?}`` (``answer``: an already extracted answer, skips extraction; ``question``: the problem
text, read only for the base an answer is asked in). Response: ``{"verdicts": [Verdict.to_dict(), ...],
"counts": {status: n}}`` in item order. Errors: malformed JSON or fields -> 422; more than ``max_items`` items
or a string over ``max_chars`` characters -> 413; ``timeout_s`` outside (0, ``max_timeout_s``] or not a JSON
number (``"5"``, ``true``) -> 422. A verification failure is a verdict (``verifier_error``, ``timeout``), never
an HTTP error.

It does not start a server (``tirl.service.server``) and does not verify anything itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from tirl.reward.types import VERIFY_STATUSES, VerifierConfig, VerifierStats, VerifyItem
from tirl.reward.verifier import Verifier
from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult
from tirl.service.app import JSONBytesResponse

DEFAULT_MAX_ITEMS = 4096
DEFAULT_MAX_CHARS = 1 << 20
DEFAULT_MAX_TIMEOUT_S = 60.0


class VerifyItemModel(BaseModel):
    """One item: a response and its reference answer (or an already extracted answer)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5"/true for a number: 422

    response: str | None = Field(default=None, description="model response text; ignored when answer is given")
    gold: str = Field(description="reference answer")
    answer: str | None = Field(default=None, description="already extracted answer (skips extraction)")
    question: str | None = Field(default=None, description="problem text (read for the base an answer is asked in)")


class VerifyBatchRequest(BaseModel):
    """A batch of items to verify."""

    model_config = ConfigDict(extra="forbid", strict=True)  # "5"/true for a number: 422

    items: list[VerifyItemModel]
    timeout_s: float | None = Field(default=None, description="per-item deadline in seconds (default 5)")


class VerdictModel(BaseModel):
    """One verdict (see ``tirl.reward.types.Verdict``)."""

    correct: bool
    reward: float
    status: str
    extracted: str | None
    gold: str
    path: str
    duration_s: float
    detail: str | None


class VerifyBatchResponse(BaseModel):
    """Verdicts in item order and their counts by status."""

    verdicts: list[VerdictModel]
    counts: dict[str, int]


class _ServiceExecutor:
    """A ``CodeExecutor`` over the app's ``ExecutionService`` (admission, cache, metrics)."""

    def __init__(self, service: Any) -> None:
        self._service = service

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        return await self._service.execute(request)

    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        return list(await self._service.execute_batch(list(requests)))

    async def aclose(self) -> None:  # the app owns the service
        return None


def _executor_of(request: Request) -> CodeExecutor | None:
    state = request.app.state
    # The checks' own pool when the app has one (``create_app(check_executor=...)``): reference answers then
    # never reach the workers that run /v1/execute's (the policy's) code.
    service = getattr(state, "check_service", None) or getattr(state, "service", None)
    if service is not None and hasattr(service, "execute_batch"):
        return _ServiceExecutor(service)
    return getattr(state, "executor", None)


def create_verify_router(
    config: VerifierConfig | None = None,
    *,
    stats: VerifierStats | None = None,
    max_items: int = DEFAULT_MAX_ITEMS,
    max_chars: int = DEFAULT_MAX_CHARS,
    max_timeout_s: float = DEFAULT_MAX_TIMEOUT_S,
) -> APIRouter:
    """The router with ``POST /v1/verify/batch`` and ``GET /v1/verify/stats``.

    Args:
        config: verification policies (a request's ``timeout_s`` overrides the deadline).
        stats: counters the router records into (a fresh :class:`VerifierStats` when None); served by
            ``GET /v1/verify/stats``.
        max_items: most items per batch (more: 413).
        max_chars: longest ``response``/``gold``/``answer``/``question`` in characters (longer: 413).
        max_timeout_s: largest accepted ``timeout_s``.

    Raises:
        ValueError: a limit is not positive.
    """
    if max_items <= 0 or max_chars <= 0 or max_timeout_s <= 0:
        raise ValueError("max_items, max_chars and max_timeout_s must be positive")
    base_config = config or VerifierConfig()
    counters = stats if stats is not None else VerifierStats()
    router = APIRouter(tags=["verify"])

    @router.post("/v1/verify/batch", response_model=VerifyBatchResponse)
    async def verify_batch_route(body: VerifyBatchRequest, request: Request) -> JSONBytesResponse:
        """Verify responses against reference answers; ``verdicts[i]`` answers ``items[i]``."""
        if len(body.items) > max_items:
            raise HTTPException(413, f"batch has {len(body.items)} items, over the limit of {max_items}")
        for i, item in enumerate(body.items):
            for name in ("response", "gold", "answer", "question"):
                value = getattr(item, name)
                if value is not None and len(value) > max_chars:
                    raise HTTPException(413, f"item {i}: {name} has {len(value)} characters, over {max_chars}")
        cfg = base_config
        if body.timeout_s is not None:
            if not 0 < body.timeout_s <= max_timeout_s:
                raise HTTPException(422, f"timeout_s must be in (0, {max_timeout_s}], got {body.timeout_s}")
            cfg = replace(cfg, timeout_s=body.timeout_s)
        executor = _executor_of(request)
        if executor is None:
            raise HTTPException(503, "this server has no executor for symbolic verification")
        verifier = Verifier(executor=executor, config=cfg, stats=counters)
        items = [
            VerifyItem(response=it.response, gold=it.gold, answer=it.answer, question=it.question) for it in body.items
        ]
        verdicts = await verifier.averify_batch(items)
        counts = {status: 0 for status in VERIFY_STATUSES}
        for verdict in verdicts:
            counts[verdict.status] = counts.get(verdict.status, 0) + 1
        # Answers and references may hold lone surrogates (legal in JSON strings): pydantic's serializer
        # raised on them (a 500); JSONBytesResponse escapes them instead.
        return JSONBytesResponse({"verdicts": [v.to_dict() for v in verdicts], "counts": counts})

    @router.get("/v1/verify/stats")
    async def verify_stats_route() -> dict[str, Any]:
        """Counters of every verdict this router gave: totals, by status, by path."""
        return counters.snapshot()

    return router
