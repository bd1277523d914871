"""``HFEngine``: an in-process transformers engine that batches concurrent ``generate`` calls.

Covers the :class:`~tirl.rollout.engine.Engine` protocol on a local ``transformers`` causal LM: many
coroutines call :meth:`HFEngine.generate` at once; a background task gathers them into batches (left padding,
attention mask, per-row positions) and runs each batch in a worker thread, off the event loop. Each row keeps
its own sampling settings (temperature, top-p, max new tokens, stop ids, seed). Decoding uses the model's KV
cache; rows that finish are dropped from the batch (and the cache) right away.

Token in, token out: the returned ids are exactly the sampled ids (nothing is decoded or re-encoded), the stop
token included. Log-probs (``HFEngineConfig.logprobs_mode``):

- ``"processed"`` (default): log-prob of the sampled token under the distribution it was sampled from, i.e.
  ``log_softmax(logits / temperature)`` restricted to the top-p nucleus and renormalised; vLLM's
  ``--logprobs-mode processed_logprobs``, which is what TRL's GRPO importance-sampling correction asks vLLM
  for. With ``top_p == 1`` (RL training) it equals TRL's own recomputation ``log_softmax(logits / T)``.
- ``"raw"``: ``log_softmax(logits)`` of the unscaled logits (vLLM's default ``raw_logprobs``).

Greedy rows (``temperature == 0``) report ``log_softmax(logits)`` in both modes. Logits are computed in the
model's dtype and sampled in float32.

The model can be one being trained (RL): construct the engine from the model object; generation runs under
``torch.no_grad`` in eval mode and restores the previous mode afterwards; :meth:`HFEngine.set_model` and
:meth:`HFEngine.load_state_dict` swap or refresh weights between batches. Do not run an optimizer step on the
same model while a batch is generating (the engine holds a lock during a batch; use :meth:`HFEngine.hold`).

Rows of one batch with the same prompt (the samples of a problem in their first turn) are prefilled once and
share copies of that KV cache. :attr:`HFEngine.stats` (:class:`EngineStats`) sums prefill and decode time and
tokens. Not covered: continuous batching (a request arriving during a batch waits for the next one), prefix
caching across calls (turn k of a trajectory re-reads turns 1..k-1), speculative decoding,
paged KV memory, GPU-specific tuning. Batch composition can change sampled tokens slightly (padding
changes float rounding), so a per-request ``seed`` reproduces a sample only for the same batch layout.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tirl.rollout.engine import GenerationOutput, SamplingParams


@dataclass
class EngineStats:
    """Where an engine's time went, summed since it was created (read deltas around a rollout).

    Attributes:
        prefill_s: seconds in prompt forward passes (one per batch, distinct prompts only).
        prefill_tokens: prompt tokens actually computed (a prompt shared by several rows counts once).
        prompt_tokens_requested: prompt tokens of all rows (``prefill_tokens`` plus those served from a shared
            prefill).
        decode_s: seconds in the one-token decoding passes.
        decode_tokens: tokens produced by decoding passes (rows x passes).
    """

    prefill_s: float = 0.0
    prefill_tokens: int = 0
    prompt_tokens_requested: int = 0
    decode_s: float = 0.0
    decode_tokens: int = 0

    def add_prefill(self, seconds: float, computed_tokens: int, requested_tokens: int) -> None:
        """Count one batch's prefill."""
        self.prefill_s += seconds
        self.prefill_tokens += computed_tokens
        self.prompt_tokens_requested += requested_tokens

    def add_decode(self, seconds: float, tokens: int) -> None:
        """Count one batch's decoding passes."""
        self.decode_s += seconds
        self.decode_tokens += tokens

    def snapshot(self) -> dict[str, float]:
        """The counters as a dict."""
        return dataclasses.asdict(self)


@dataclass
class HFEngineConfig:
    """Settings of :class:`HFEngine`.

    Attributes:
        max_batch_size: most requests in one batch.
        max_batch_tokens: most padded prompt tokens in one batch (rows x longest prompt); a single longer
            request still runs alone.
        batch_wait_s: after the first request arrives, how long (seconds) to wait for more before running.
        logprobs_mode: ``"processed"`` or ``"raw"`` (see the module docstring).
        max_model_len: context limit in tokens (prompt + generated); default the model's
            ``max_position_embeddings``. Generation stops with ``finish_reason="length"`` there.
        seed: seed of the engine's generator for requests without their own seed (``None``: random).
    """

    max_batch_size: int = 32
    max_batch_tokens: int = 65536
    batch_wait_s: float = 0.01
    logprobs_mode: Literal["processed", "raw"] = "processed"
    max_model_len: int | None = None
    seed: int | None = None


@dataclass
class _Request:
    prompt_ids: list[int]
    params: SamplingParams
    future: asyncio.Future


class HFEngine:
    """Batched, asynchronous generation with a transformers causal LM (implements ``Engine``).

    Args:
        model: a transformers ``*ForCausalLM`` (any dtype/device; used as is, not copied).
        config: :class:`HFEngineConfig`.
        eos_token_ids: ids that end generation with ``finish_reason="eos"`` when they are not among the
            request's stop ids; default ``model.generation_config.eos_token_id``.

    Thread/loop safety: ``generate`` may be called from any event loop (one background task is kept per
    loop); batches from all loops run one at a time on the model.
    """

    def __init__(
        self, model: Any, config: HFEngineConfig | None = None, *, eos_token_ids: list[int] | None = None
    ) -> None:
        import torch

        self.config = config or HFEngineConfig()
        if self.config.max_batch_size < 1:
            raise ValueError("max_batch_size must be >= 1")
        if self.config.logprobs_mode not in ("processed", "raw"):
            raise ValueError(f"logprobs_mode must be 'processed' or 'raw', got {self.config.logprobs_mode!r}")
        self._model_lock = threading.RLock()
        self._generator = torch.Generator(device="cpu")
        if self.config.seed is None:
            self._generator.seed()
        else:
            self._generator.manual_seed(self.config.seed)
        self._explicit_eos = eos_token_ids
        self._set_model(model)
        self._queues: dict[asyncio.AbstractEventLoop, tuple[asyncio.Queue, asyncio.Task]] = {}
        self.batches_run = 0  # number of batches executed (for tests and stats)
        self.max_batch_seen = 0
        self.stats = EngineStats()

    # ------------------------------------------------------------------ construction and weights

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | Path, dtype: str = "auto", config: HFEngineConfig | None = None
    ) -> HFEngine:
        """Load a model reference with :func:`tirl.models.load` (``dtype="auto"``: bf16 where the CPU computes it
        natively, else float32)."""
        from tirl.models import load

        model, _ = load(name_or_path, dtype=dtype)
        return cls(model, config)

    def _set_model(self, model: Any) -> None:
        eos = self._explicit_eos
        if eos is None:
            gen = getattr(model, "generation_config", None)
            eos = getattr(gen, "eos_token_id", None) if gen is not None else None
            if eos is None:
                eos = getattr(model.config, "eos_token_id", None)
        self.eos_token_ids = set([eos] if isinstance(eos, int) else list(eos or []))
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.max_model_len = self.config.max_model_len or int(
            getattr(model.config, "max_position_embeddings", 0) or 1 << 30
        )
        self.model = model

    def set_model(self, model: Any) -> None:
        """Generate with ``model`` from the next batch on (waits for the running batch)."""
        with self._model_lock:
            self._set_model(model)

    def load_state_dict(self, state_dict: dict, strict: bool = True) -> None:
        """Copy ``state_dict`` into the engine's model between batches (weights refresh for RL)."""
        with self._model_lock:
            self.model.load_state_dict(state_dict, strict=strict)

    @contextlib.contextmanager
    def hold(self) -> Iterator[Any]:
        """Context manager that keeps batches from running (e.g. during an optimizer step); yields the model."""
        with self._model_lock:
            yield self.model

    # ------------------------------------------------------------------ the Engine protocol

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Continue ``prompt_ids`` under ``params``; see the module docstring for log-probs and stops.

        Never raises for a bad request or a failed batch: returns ``finish_reason="error"`` with ``error`` set
        (empty prompt, ids outside the vocabulary, prompt longer than the context, invalid params, a model
        exception). Cancelling the caller drops the request (or its result, if it was already batched).
        """
        problem = self.validate(prompt_ids, params)
        if problem:
            return GenerationOutput(token_ids=[], logprobs=[], finish_reason="error", error=problem)
        loop = asyncio.get_running_loop()
        queue = self._queue_for(loop)
        future: asyncio.Future = loop.create_future()
        await queue.put(_Request(list(prompt_ids), params, future))
        return await future

    async def aclose(self) -> None:
        """Stop this loop's background task; pending requests get ``finish_reason="error"``."""
        loop = asyncio.get_running_loop()
        entry = self._queues.pop(loop, None)
        if entry is None:
            return
        queue, task = entry
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        while not queue.empty():
            req = queue.get_nowait()
            if not req.future.done():
                req.future.set_result(GenerationOutput([], [], "error", "engine closed"))

    def validate(self, prompt_ids: list[int], params: SamplingParams) -> str | None:
        """Why this request cannot run (a message), or None when it can. Used by servers to answer 400."""
        if not prompt_ids:
            return "empty prompt"
        if any((not isinstance(t, int)) or t < 0 or t >= self.vocab_size for t in prompt_ids):
            return f"prompt holds ids outside the vocabulary [0, {self.vocab_size})"
        if len(prompt_ids) >= self.max_model_len:
            return f"prompt of {len(prompt_ids)} tokens leaves no room in the context of {self.max_model_len}"
        if params.max_new_tokens < 1:
            return f"max_new_tokens must be >= 1, got {params.max_new_tokens}"
        if params.temperature < 0:
            return f"temperature must be >= 0, got {params.temperature}"
        if not 0 < params.top_p <= 1:
            return f"top_p must be in (0, 1], got {params.top_p}"
        return None

    # ------------------------------------------------------------------ batching (event-loop side)

    def _queue_for(self, loop: asyncio.AbstractEventLoop) -> asyncio.Queue:
        for other in [lp for lp in self._queues if lp.is_closed()]:
            del self._queues[other]
        entry = self._queues.get(loop)
        if entry is None or entry[1].done():
            queue: asyncio.Queue = asyncio.Queue()
            entry = (queue, loop.create_task(self._batch_loop(queue), name="tirl-hf-engine-batcher"))
            self._queues[loop] = entry
        return entry[0]

    async def _batch_loop(self, queue: asyncio.Queue) -> None:
        carry: _Request | None = None
        while True:
            first = carry or await queue.get()
            carry = None
            batch = [first]
            if self.config.batch_wait_s > 0 and queue.empty():
                await asyncio.sleep(self.config.batch_wait_s)  # let concurrent callers join
            while len(batch) < self.config.max_batch_size and not queue.empty():
                req = queue.get_nowait()
                longest = max(len(r.prompt_ids) for r in batch + [req])
                if longest * (len(batch) + 1) > self.config.max_batch_tokens:
                    carry = req
                    break
                batch.append(req)
            batch = [r for r in batch if not r.future.done()]  # drop cancelled callers
            if not batch:
                continue
            try:
                outputs = await asyncio.to_thread(self._run_batch, [(r.prompt_ids, r.params) for r in batch])
            except Exception as exc:  # the model failed: answer every row, keep serving
                outputs = [GenerationOutput([], [], "error", f"{type(exc).__name__}: {exc}") for _ in batch]
            for req, out in zip(batch, outputs):
                if not req.future.done():
                    req.future.set_result(out)

    # ------------------------------------------------------------------ decoding (worker-thread side)

    def _run_batch(self, rows: list[tuple[list[int], SamplingParams]]) -> list[GenerationOutput]:
        """Generate for ``rows`` (prompt ids, params) in one padded batch. Runs in a worker thread."""
        import torch

        with self._model_lock:
            model = self.model
            was_training = model.training
            model.eval()
            try:
                with torch.no_grad():
                    return self._decode(model, rows)
            finally:
                model.train(was_training)
                self.batches_run += 1
                self.max_batch_seen = max(self.max_batch_seen, len(rows))

    def _decode(self, model: Any, rows: list[tuple[list[int], SamplingParams]]) -> list[GenerationOutput]:
        import torch
        from transformers import DynamicCache

        device = next(model.parameters()).device
        n = len(rows)
        width = max(len(p) for p, _ in rows)
        input_ids = torch.zeros((n, width), dtype=torch.long)
        mask = torch.zeros((n, width), dtype=torch.long)
        for i, (prompt, _) in enumerate(rows):
            input_ids[i, width - len(prompt) :] = torch.tensor(prompt)
            mask[i, width - len(prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        limits = [min(p.max_new_tokens, self.max_model_len - len(prompt)) for prompt, p in rows]
        stops = [set(p.stop_token_ids) for _, p in rows]
        generators = []
        for _, p in rows:
            if p.seed is None:
                generators.append(self._generator)
            else:
                g = torch.Generator(device="cpu")
                g.manual_seed(int(p.seed))
                generators.append(g)
        out_ids: list[list[int]] = [[] for _ in range(n)]
        out_lps: list[list[float]] = [[] for _ in range(n)]
        reasons: list[str] = ["length"] * n
        active = list(range(n))  # original row index of each live batch row
        cache = DynamicCache(config=model.config)
        # transformers 5 renamed ``past_key_values`` to ``cache``; accept models of either generation
        cache_kw = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
        step_ids, step_mask, step_pos = input_ids.to(device), mask.to(device), positions.to(device)
        full_mask = step_mask
        # prefill each distinct prompt once (the 2G samples of a problem share their first-turn prompt) and
        # give every row a copy of its prompt's KV cache
        firsts: dict[tuple[int, ...], int] = {}
        owner = [firsts.setdefault(tuple(prompt), i) for i, (prompt, _) in enumerate(rows)]
        unique = sorted(set(owner))
        t0 = time.perf_counter()
        u_idx = torch.tensor(unique, device=device)
        logits = model(
            input_ids=step_ids[u_idx],
            attention_mask=full_mask[u_idx],
            position_ids=step_pos[u_idx],
            use_cache=True,
            logits_to_keep=1,
            **{cache_kw: cache},
        ).logits[:, -1, :]
        if len(unique) < n:
            expand = torch.tensor([unique.index(o) for o in owner], device=device)
            cache.batch_select_indices(expand)
            logits = logits[expand]
        self.stats.add_prefill(
            time.perf_counter() - t0, sum(len(rows[i][0]) for i in unique), sum(len(p) for p, _ in rows)
        )
        t_decode, decoded = time.perf_counter(), 0
        first = True
        while active:
            if not first:
                logits = model(
                    input_ids=step_ids,
                    attention_mask=full_mask,
                    position_ids=step_pos,
                    use_cache=True,
                    logits_to_keep=1,
                    **{cache_kw: cache},
                ).logits[:, -1, :]
                decoded += len(active)
            first = False
            tokens, lps = self._sample(
                logits.float().cpu(), [rows[i][1] for i in active], [generators[i] for i in active]
            )
            keep = []
            for b, i in enumerate(active):
                tok = tokens[b]
                out_ids[i].append(tok)
                out_lps[i].append(lps[b])
                if tok in stops[i]:
                    reasons[i] = "stop"
                elif tok in self.eos_token_ids:
                    reasons[i] = "eos"
                elif len(out_ids[i]) < limits[i]:
                    keep.append(b)
                    continue
            if len(keep) < len(active):
                if not keep:
                    break
                idx = torch.tensor(keep, device=device)
                cache.batch_select_indices(idx)
                full_mask, step_pos = full_mask[idx], step_pos[idx]
                tokens = [tokens[b] for b in keep]
                active = [active[b] for b in keep]
            step_ids = torch.tensor(tokens, device=device).unsqueeze(1)
            full_mask = torch.cat([full_mask, torch.ones((len(active), 1), dtype=full_mask.dtype, device=device)], 1)
            step_pos = step_pos[:, -1:] + 1
        self.stats.add_decode(time.perf_counter() - t_decode, decoded)
        return [GenerationOutput(token_ids=out_ids[i], logprobs=out_lps[i], finish_reason=reasons[i]) for i in range(n)]

    def _sample(
        self, logits: Any, params: list[SamplingParams], generators: list[Any]
    ) -> tuple[list[int], list[float]]:
        """Pick one token per row of ``logits`` [rows, vocab] (float32) and its log-prob (module docstring)."""
        import torch

        raw = torch.log_softmax(logits, dim=-1)
        tokens: list[int] = []
        lps: list[float] = []
        for b, p in enumerate(params):
            if p.temperature == 0:
                tok = int(torch.argmax(logits[b]))
                tokens.append(tok)
                lps.append(float(raw[b, tok]))
                continue
            dist = torch.log_softmax(logits[b] / p.temperature, dim=-1)
            if p.top_p < 1.0:
                dist = _top_p_filter(dist, p.top_p)
            tok = int(torch.multinomial(dist.exp(), 1, generator=generators[b]))
            tokens.append(tok)
            lps.append(float(dist[tok] if self.config.logprobs_mode == "processed" else raw[b, tok]))
        return tokens, lps


def _top_p_filter(logprobs: Any, top_p: float) -> Any:
    """Restrict a log-distribution [vocab] to its top-p nucleus and renormalise (others get -inf).

    The nucleus is the smallest set of most likely tokens whose mass reaches ``top_p`` (the most likely
    token is always kept), as in Holtzman et al. 2020 and vLLM/transformers.
    """
    import torch

    sorted_lp, order = torch.sort(logprobs, descending=True)
    mass_before = sorted_lp.exp().cumsum(-1) - sorted_lp.exp()
    drop_sorted = mass_before >= top_p
    drop_sorted[0] = False
    drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
    return torch.log_softmax(logprobs.masked_fill(drop, float("-inf")), dim=-1)
