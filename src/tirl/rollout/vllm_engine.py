"""``VLLMEngine``: the ``Engine`` protocol over the vLLM instance TRL colocates with the policy (GPU runs).

With ``rollout.use_vllm: true`` and ``rollout.vllm_mode: colocate``, TRL's ``GRPOTrainer`` builds a ``vllm.LLM``
on each training process and pushes the current policy weights into it before every call of the rollout
function. This engine lets tirl's multi-turn agent loop generate with that instance: concurrent ``generate``
calls (one per trajectory turn) are gathered for ``batch_wait_s`` and sent as one ``LLM.generate`` call with
per-request ``SamplingParams`` (own token budget, seed, stop ids), token ids in and out, sampled-token
log-probs (``logprobs=0``).

Limits (documented, not hidden): a batch runs to completion before the next starts (no continuous batching
across turns of different trajectories: a turn that arrives while a batch runs waits for it); tensor
parallelism inside the colocated instance (``vllm_tensor_parallel_size > 1``) is not supported by this engine;
TRL's ``server`` mode has no token-level multi-turn API and is not supported. This module imports vLLM lazily
and was written against vLLM's documented offline API; it is exercised only on GPU machines (the CPU test
suite checks the batching and output mapping with a stand-in ``LLM``).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from tirl.rollout.engine import GenerationOutput, SamplingParams


@dataclass
class _Pending:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future


class VLLMEngine:
    """Batched token-in/token-out generation on a ``vllm.LLM`` (implements ``tirl.rollout.engine.Engine``).

    Args:
        llm: a ``vllm.LLM`` (TRL: ``trainer.vllm_generation.llm``).
        batch_wait_s: how long to wait for more requests after the first one arrives.
        max_batch_size: most requests per ``LLM.generate`` call.
        sampling_params_cls: vLLM's ``SamplingParams`` (injected for tests; default imported from vllm).
        send_seed: pass each request's seed to vLLM. None (default): yes, except on vLLM's CPU platform, whose
            0.32 engine dies on a seeded request that is prefilled in chunks (``RuntimeError: CPU Generator does
            not use offset``, then ``EngineDeadError``; turns of 32 trajectories exceed the 4,096-token prefill
            chunk TRL sets). Without seeds the samples come from the engine's own generator (TRL seeds it with the
            process index).
    """

    def __init__(
        self,
        llm: Any,
        batch_wait_s: float = 0.02,
        max_batch_size: int = 1024,
        sampling_params_cls: Any = None,
        send_seed: bool | None = None,
    ) -> None:
        self.llm = llm
        if send_seed is None:
            send_seed = not _vllm_on_cpu()
        self.send_seed = send_seed
        self.batch_wait_s = batch_wait_s
        self.max_batch_size = max_batch_size
        self._sp_cls = sampling_params_cls
        self._queue: asyncio.Queue | None = None
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.batches_run = 0

    def _sampling_params(self, p: SamplingParams) -> Any:
        cls = self._sp_cls
        if cls is None:
            import vllm

            cls = vllm.SamplingParams
        return cls(
            n=1,
            max_tokens=p.max_new_tokens,
            temperature=p.temperature,
            top_p=p.top_p,
            stop_token_ids=list(p.stop_token_ids),
            seed=p.seed if self.send_seed else None,
            logprobs=0,
            skip_special_tokens=False,
        )

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Continue ``prompt_ids``; failures come back as ``finish_reason="error"``, never raised."""
        if not prompt_ids or params.max_new_tokens < 1:
            return GenerationOutput([], [], "error", "empty prompt or max_new_tokens < 1")
        loop = asyncio.get_running_loop()
        if self._loop is not loop or self._task is None or self._task.done():
            self._loop, self._queue = loop, asyncio.Queue()
            self._task = loop.create_task(self._batch_loop(self._queue))
        fut: asyncio.Future = loop.create_future()
        assert self._queue is not None
        await self._queue.put(_Pending(list(prompt_ids), params, fut))
        return await fut

    async def _batch_loop(self, queue: asyncio.Queue) -> None:
        while True:
            batch = [await queue.get()]
            await asyncio.sleep(self.batch_wait_s)
            while not queue.empty() and len(batch) < self.max_batch_size:
                batch.append(queue.get_nowait())
            batch = [r for r in batch if not r.future.done()]
            if not batch:
                continue
            try:
                outputs = await asyncio.to_thread(self._run, batch)
            except Exception as exc:  # noqa: BLE001 - answer every caller, keep serving
                outputs = [GenerationOutput([], [], "error", f"{type(exc).__name__}: {exc}") for _ in batch]
            for req, out in zip(batch, outputs):
                if not req.future.done():
                    req.future.set_result(out)

    def _run(self, batch: list[_Pending]) -> list[GenerationOutput]:
        prompts = [{"prompt_token_ids": r.prompt_ids} for r in batch]
        params = [self._sampling_params(r.params) for r in batch]
        results = self.llm.generate(prompts, sampling_params=params, use_tqdm=False)
        self.batches_run += 1
        return [to_generation_output(res, req.params) for res, req in zip(results, batch)]

    async def aclose(self) -> None:
        """Stop the batching task; pending callers get ``finish_reason="error"``."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except (asyncio.CancelledError, Exception):  # noqa: BLE001
                pass
            self._task = None
        while self._queue is not None and not self._queue.empty():
            req = self._queue.get_nowait()
            if not req.future.done():
                req.future.set_result(GenerationOutput([], [], "error", "engine closed"))


def _vllm_on_cpu() -> bool:
    """Whether the installed vLLM runs on its CPU platform (False when vLLM cannot be imported)."""
    try:
        from vllm.platforms import current_platform
    except Exception:  # noqa: BLE001 - no vLLM (tests with a stand-in LLM)
        return False
    return bool(current_platform.is_cpu())


def to_generation_output(result: Any, params: SamplingParams) -> GenerationOutput:
    """Map one vLLM ``RequestOutput`` to a :class:`GenerationOutput`.

    The stop token is kept in ``token_ids`` (appended with log-prob 0.0 when vLLM reports it only as
    ``stop_reason``); ``finish_reason`` is ``stop`` for a stop id, ``eos`` for an end-of-sequence id that is not
    a stop id, ``length`` for the token budget.
    """
    out = result.outputs[0]
    ids = [int(t) for t in out.token_ids]
    logprobs: list[float] = []
    for tok, entry in zip(ids, out.logprobs or []):
        lp = entry.get(tok) if isinstance(entry, dict) else None
        value = getattr(lp, "logprob", lp)
        logprobs.append(float(value) if value is not None else float("nan"))
    if len(logprobs) != len(ids):
        logprobs = []
    stops = set(params.stop_token_ids)
    reason = getattr(out, "finish_reason", None)
    stop_reason = getattr(out, "stop_reason", None)
    if reason == "length":
        return GenerationOutput(ids, logprobs, "length")
    if isinstance(stop_reason, int) and (not ids or ids[-1] != stop_reason):
        ids.append(stop_reason)
        if logprobs:
            logprobs.append(0.0)
    if ids and ids[-1] in stops:
        return GenerationOutput(ids, logprobs, "stop")
    return GenerationOutput(ids, logprobs, "eos" if reason == "stop" else "stop")


__all__ = ["VLLMEngine", "to_generation_output"]
