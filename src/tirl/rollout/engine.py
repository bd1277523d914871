"""The generation-engine interface, token-in/token-out, and the router the agent loop leases engines from.

Covers the contract between the agent loop and whatever generates tokens (``HFEngine`` in process,
``OpenAIEngine`` against a vLLM/SGLang server), and the lease abstraction that lets a scheduler pin a
trajectory to one engine for all its turns. It does not implement an engine or a scheduling policy.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

EngineFinishReason = Literal["stop", "length", "eos", "error", "rejected"]


@dataclass
class SamplingParams:
    """Sampling settings for one generation call.

    Attributes:
        max_new_tokens: upper bound on generated tokens (>= 1).
        temperature: softmax temperature; 0 means greedy.
        top_p: nucleus mass in (0, 1].
        stop_token_ids: generation stops after emitting any of these (the end-of-turn token, e.g. ``<|im_end|>``);
            the stop token is included in the output.
        seed: optional per-request seed for reproducible sampling.
    """

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None


@dataclass
class GenerationOutput:
    """What one generation call produced.

    Attributes:
        token_ids: the generated ids, stop token included when one was emitted.
        logprobs: log-probability of each generated id under the sampling distribution (same length as
            ``token_ids``), or empty when the engine cannot return them.
        finish_reason: ``stop`` (a stop token), ``length`` (``max_new_tokens`` reached), ``eos`` (the model's
            end-of-sequence id that is not a stop token), ``error`` (the engine failed; ``error`` says why);
            ``rejected`` only from the agent loop's control (:func:`tirl.rollout.agent_loop._generate_controlled`),
            never from an engine.
        error: message when ``finish_reason`` is ``error`` or ``rejected``.
    """

    token_ids: list[int]
    logprobs: list[float] = field(default_factory=list)
    finish_reason: EngineFinishReason = "stop"
    error: str | None = None


@runtime_checkable
class Engine(Protocol):
    """Generates a continuation of a token sequence. Implementations batch concurrent calls internally."""

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Continue ``prompt_ids`` (the full history so far, never re-tokenized) under ``params``."""
        ...


@runtime_checkable
class EngineRouter(Protocol):
    """Hands out an engine for the whole life of one trajectory (all its turns).

    ``lease`` is an async context manager: entering may wait (for KV capacity, in a KV-aware scheduler);
    leaving releases whatever was reserved, on every way out (normal end, exception, cancellation).
    """

    def lease(self, trajectory_id: str, budget_tokens: int) -> contextlib.AbstractAsyncContextManager[Engine]:
        """Reserve ``budget_tokens`` (prompt + maximum response tokens) for ``trajectory_id``."""
        ...


class SingleEngineRouter:
    """An :class:`EngineRouter` over one engine with no admission control: every lease gets ``engine``."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextlib.asynccontextmanager
    async def lease(self, trajectory_id: str, budget_tokens: int) -> AsyncIterator[Engine]:
        """Yield the single engine; nothing is reserved or released."""
        yield self.engine
