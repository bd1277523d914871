"""A small inference server for tests: an :class:`~tirl.rollout.engine.Engine` behind vLLM- and SGLang-shaped HTTP.

Covers what :class:`~tirl.rollout.openai_engine.OpenAIEngine` and the rollout scheduler talk to, so they can be
tested without vLLM or SGLang (neither runs on CPU-only machines here):

- ``POST /v1/completions`` (vLLM shape): ``prompt`` must be token ids; ``return_tokens_as_token_ids``,
  ``return_token_ids``, ``logprobs``, ``stop_token_ids``, ``seed``, ``max_tokens``, ``temperature``, ``top_p``;
  ``n`` must be 1, ``stream``/``echo`` are refused (400).
- ``POST /generate`` (SGLang native shape): ``input_ids``, ``sampling_params``, ``return_logprob``.
- ``GET /get_server_info`` (SGLang shape, with ``max_total_num_tokens`` = the configured KV capacity),
  ``GET /health``, ``GET /v1/models``.
- vLLM's runtime LoRA routes, when an ``on_load_lora(name, path)`` hook is given (else 404, as a vLLM
  server started without ``--enable-lora``): ``POST /v1/load_lora_adapter`` (``lora_name``, ``lora_path``,
  ``load_inplace``; loading an existing name without ``load_inplace`` is a 400, as in vLLM), after which
  completions may name the adapter as their ``model``; and ``POST /reset_prefix_cache``. SGLang's, with the
  same hook: ``POST /load_lora_adapter`` (a loaded name is a 400: SGLang wants ``/unload_lora_adapter``
  first), ``POST /unload_lora_adapter``, ``POST /flush_cache``; ``/generate`` may then name the adapter in
  ``lora_path`` (an unknown name is a 400).

Malformed requests get a 4xx with a message (pydantic validation: 422; semantic problems, including the
engine's own ``validate(prompt_ids, params)`` when it has one: 400); an engine failure gets a 500 with the
engine's message. :class:`TestingServer` runs the app with uvicorn in a background
thread on ``127.0.0.1`` and a free port, as a context manager. Failure injection for client tests:
``TestingServer.fail_next(n, status)`` answers the next ``n`` generation requests with ``status``;
``TestingServer.kill()`` drops every connection and stops listening at once, as a killed server process.

Not covered: authentication, streaming, production use (it is a test double with real generation).
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from tirl.rollout.engine import Engine, GenerationOutput, SamplingParams


class CompletionRequest(BaseModel):
    """The subset of vLLM's ``/v1/completions`` body this server understands (other fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    prompt: list[int] | str
    max_tokens: int = Field(16, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    n: int = 1
    stream: bool = False
    echo: bool = False
    logprobs: int | None = None
    seed: int | None = None
    stop_token_ids: list[int] = Field(default_factory=list)
    return_tokens_as_token_ids: bool = False
    return_token_ids: bool = False


class LoadLoraRequest(BaseModel):
    """vLLM's ``/v1/load_lora_adapter`` body."""

    lora_name: str = Field(min_length=1)
    lora_path: str = Field(min_length=1)
    load_inplace: bool = False


class SGLangSampling(BaseModel):
    model_config = ConfigDict(extra="allow")
    max_new_tokens: int = Field(128, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    stop_token_ids: list[int] = Field(default_factory=list)
    sampling_seed: int | None = None


class SGLangGenerateRequest(BaseModel):
    """The subset of SGLang's native ``/generate`` body this server understands."""

    model_config = ConfigDict(extra="allow")
    input_ids: list[int]
    sampling_params: SGLangSampling = Field(default_factory=SGLangSampling)
    return_logprob: bool = False
    lora_path: str | None = None  # the name of a loaded LoRA adapter (SGLang's runtime LoRA)


class SGLangLoadLoraRequest(BaseModel):
    """SGLang's ``/load_lora_adapter`` body (``/unload_lora_adapter`` sends ``lora_name`` only)."""

    lora_name: str = Field(min_length=1)
    lora_path: str | None = None


def build_app(
    engine: Engine,
    *,
    tokenizer: Any = None,
    model_name: str = "tirl-testing",
    kv_capacity_tokens: int = 65536,
    faults: dict[str, Any] | None = None,
    on_load_lora: Any = None,
    on_reload_weights: Any = None,
) -> FastAPI:
    """The FastAPI app serving ``engine``.

    Args:
        engine: any :class:`~tirl.rollout.engine.Engine` (typically an ``HFEngine``).
        tokenizer: optional, only to fill the ``text`` fields of answers; ids never pass through it.
        model_name: the id listed by ``/v1/models``.
        kv_capacity_tokens: reported as ``max_total_num_tokens`` by ``/get_server_info``.
        faults: shared dict ``{"count": n, "status": code}``; while ``count > 0`` generation requests are
            answered with ``status`` (and ``count`` decremented).
        on_load_lora: ``(name, path) -> None`` applies an adapter to the served model (the test decides how);
            None disables the LoRA routes.
        on_reload_weights: ``(weights_path) -> None`` loads full weights into the served model (vLLM's
            ``POST /collective_rpc`` ``reload_weights``); None disables that route.
    """
    app = FastAPI(title="tirl testing inference server")
    faults = faults if faults is not None else {"count": 0, "status": 503}
    stats = {"generate_requests": 0}
    app.state.stats = stats

    def text_of(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False) if tokenizer is not None else ""

    def maybe_fault() -> JSONResponse | None:
        stats["generate_requests"] += 1
        if faults.get("count", 0) > 0:
            faults["count"] -= 1
            code = int(faults.get("status", 503))
            return JSONResponse({"error": {"message": f"injected fault {code}"}}, status_code=code)
        return None

    async def run(prompt: list[int], params: SamplingParams) -> GenerationOutput:
        validate = getattr(engine, "validate", None)
        problem = validate(prompt, params) if validate is not None else None
        if problem:
            raise HTTPException(status_code=400, detail=problem)
        out = await engine.generate(prompt, params)
        if out.finish_reason == "error":
            raise HTTPException(status_code=500, detail=out.error or "engine error")
        return out

    adapters: dict[str, str] = {}
    app.state.adapters = adapters
    app.state.lora_requests = {}  # /generate requests per lora_path (None: the base model)
    app.state.prefix_cache_resets = 0

    @app.get("/health")
    async def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(req: LoadLoraRequest) -> Any:
        if on_load_lora is None:
            raise HTTPException(status_code=404, detail="LoRA is not enabled on this server")
        if req.lora_name in adapters and not req.load_inplace:
            raise HTTPException(
                status_code=400,
                detail=f"The lora adapter '{req.lora_name}' has already been "
                "loaded. If you want to load the adapter in place, set "
                "'load_inplace' to True.",
            )
        on_load_lora(req.lora_name, req.lora_path)
        adapters[req.lora_name] = req.lora_path
        return JSONResponse(f"Success: LoRA adapter '{req.lora_name}' added successfully.")

    @app.post("/load_lora_adapter")
    async def sglang_load_lora(req: SGLangLoadLoraRequest) -> Any:
        if on_load_lora is None:
            raise HTTPException(status_code=404, detail="LoRA is not enabled on this server")
        if not req.lora_path:
            raise HTTPException(status_code=400, detail="lora_path is required")
        if req.lora_name in adapters:
            return JSONResponse(
                {
                    "success": False,
                    "error_message": f"LoRA adapter {req.lora_name!r} is already loaded; unload it first",
                }
            )
        on_load_lora(req.lora_name, req.lora_path)
        adapters[req.lora_name] = req.lora_path
        return JSONResponse({"success": True, "loaded_adapters": dict(adapters)})

    @app.post("/unload_lora_adapter")
    async def sglang_unload_lora(req: SGLangLoadLoraRequest) -> Any:
        if on_load_lora is None:
            raise HTTPException(status_code=404, detail="LoRA is not enabled on this server")
        if req.lora_name not in adapters:
            raise HTTPException(status_code=400, detail=f"LoRA adapter {req.lora_name!r} is not loaded")
        del adapters[req.lora_name]
        return JSONResponse({"success": True, "loaded_adapters": dict(adapters)})

    @app.post("/flush_cache")
    async def flush_cache() -> Any:
        app.state.prefix_cache_resets += 1
        return JSONResponse({})

    app.state.weight_reloads = []

    @app.post("/collective_rpc")
    async def collective_rpc(req: dict[str, Any]) -> Any:
        if on_reload_weights is None or req.get("method") != "reload_weights":
            raise HTTPException(status_code=404, detail="only reload_weights is served here")
        path = (req.get("kwargs") or {}).get("weights_path")
        if not isinstance(path, str):
            raise HTTPException(status_code=400, detail="kwargs.weights_path must be a string")
        on_reload_weights(path)
        app.state.weight_reloads.append(path)
        return JSONResponse({"results": [None]})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Any:
        app.state.prefix_cache_resets += 1
        return JSONResponse({})

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "tirl"}]}

    @app.get("/get_server_info")
    async def server_info() -> dict[str, Any]:
        return {"max_total_num_tokens": kv_capacity_tokens, "model_path": model_name, "server": "tirl-testing"}

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> Any:
        if isinstance(req.prompt, str):
            raise HTTPException(400, "this server takes the prompt as a list of token ids, not text")
        if req.n != 1 or req.stream or req.echo:
            raise HTTPException(400, "n must be 1; stream and echo are not supported")
        if req.model is not None and req.model != model_name and req.model not in adapters:
            raise HTTPException(404, f"model {req.model!r} does not exist; this server serves {model_name!r}")
        if (fault := maybe_fault()) is not None:
            return fault
        params = SamplingParams(
            max_new_tokens=req.max_tokens,
            temperature=req.temperature,
            top_p=req.top_p,
            stop_token_ids=req.stop_token_ids,
            seed=req.seed,
        )
        out = await run(req.prompt, params)
        stop_reason = out.token_ids[-1] if out.finish_reason == "stop" else None
        choice: dict[str, Any] = {
            "index": 0,
            "text": text_of(out.token_ids),
            "finish_reason": "length" if out.finish_reason == "length" else "stop",
            "stop_reason": stop_reason,
            "logprobs": None,
        }
        if req.logprobs is not None:
            tokens = (
                [f"token_id:{t}" for t in out.token_ids]
                if req.return_tokens_as_token_ids
                else [text_of([t]) for t in out.token_ids]
            )
            choice["logprobs"] = {
                "tokens": tokens,
                "token_logprobs": out.logprobs,
                "top_logprobs": None,
                "text_offset": [],
            }
        if req.return_token_ids:
            choice["token_ids"] = out.token_ids
            choice["prompt_token_ids"] = req.prompt
        return {
            "id": f"cmpl-{uuid.uuid4().hex}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(req.prompt),
                "completion_tokens": len(out.token_ids),
                "total_tokens": len(req.prompt) + len(out.token_ids),
            },
        }

    @app.post("/generate")
    async def generate(req: SGLangGenerateRequest) -> Any:
        if req.lora_path is not None and req.lora_path not in adapters:
            raise HTTPException(400, f"LoRA adapter {req.lora_path!r} is not loaded")
        app.state.lora_requests[req.lora_path] = app.state.lora_requests.get(req.lora_path, 0) + 1
        if (fault := maybe_fault()) is not None:
            return fault
        sp = req.sampling_params
        params = SamplingParams(
            max_new_tokens=sp.max_new_tokens,
            temperature=sp.temperature,
            top_p=sp.top_p,
            stop_token_ids=sp.stop_token_ids,
            seed=sp.sampling_seed,
        )
        out = await run(req.input_ids, params)
        if out.finish_reason == "length":
            finish: dict[str, Any] = {"type": "length", "length": len(out.token_ids)}
        else:
            finish = {"type": "stop", "matched": out.token_ids[-1]}
        meta: dict[str, Any] = {
            "id": uuid.uuid4().hex,
            "finish_reason": finish,
            "prompt_tokens": len(req.input_ids),
            "completion_tokens": len(out.token_ids),
        }
        if req.return_logprob:
            meta["output_token_logprobs"] = [[lp, t, None] for lp, t in zip(out.logprobs, out.token_ids)]
        return {"text": text_of(out.token_ids), "output_ids": out.token_ids, "meta_info": meta}

    return app


class TestingServer:
    """Run :func:`build_app` with uvicorn in a daemon thread on ``127.0.0.1`` (free port).

    Use as a context manager (``with TestingServer(engine) as srv: srv.url``) or call :meth:`start` /
    :meth:`stop`. ``url`` is the server root (``http://127.0.0.1:<port>``).

    Args:
        engine, tokenizer, model_name, kv_capacity_tokens, on_load_lora, on_reload_weights: see :func:`build_app`.
        port: 0 (default) picks a free port.
    """

    __test__ = False  # not a pytest test class despite the name

    def __init__(
        self,
        engine: Engine,
        *,
        tokenizer: Any = None,
        model_name: str = "tirl-testing",
        kv_capacity_tokens: int = 65536,
        port: int = 0,
        on_load_lora: Any = None,
        on_reload_weights: Any = None,
    ) -> None:
        self._faults: dict[str, Any] = {"count": 0, "status": 503}
        self.app = build_app(
            engine,
            tokenizer=tokenizer,
            model_name=model_name,
            kv_capacity_tokens=kv_capacity_tokens,
            faults=self._faults,
            on_load_lora=on_load_lora,
            on_reload_weights=on_reload_weights,
        )
        self._port = port
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.url = ""
        self.killed = False

    @property
    def generate_requests(self) -> int:
        """Generation requests received so far (faulted ones included)."""
        return self.app.state.stats["generate_requests"]

    def fail_next(self, count: int, status: int = 503) -> None:
        """Answer the next ``count`` generation requests with HTTP ``status``."""
        self._faults.update(count=count, status=status)

    def start(self, timeout_s: float = 30.0) -> TestingServer:
        """Start serving; returns once the socket is bound. Raises RuntimeError if it does not start."""
        import uvicorn

        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self._port, log_level="warning", lifespan="off", access_log=False
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, name="tirl-testing-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("testing server did not start")
            time.sleep(0.02)
        port = self._server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def kill(self) -> None:
        """Die as a killed process would, mid-request: the listening socket closes (new connections are
        refused), every open connection is aborted (in-flight requests get no answer, the client sees the
        connection drop) and the server's loop ends without finishing any request. Safe to call from the
        server's own loop (an engine's ``generate``) or from another thread; returns at once (``stop`` joins)."""
        server = self._server
        if server is None or not server.servers:
            return
        loop = server.servers[0].get_loop()

        def abort() -> None:
            for listener in server.servers:
                listener.close()
            for connection in list(server.server_state.connections):
                transport = getattr(connection, "transport", None)
                if transport is not None:
                    transport.abort()

        server.force_exit = True
        loop.call_soon_threadsafe(abort)
        server.should_exit = True
        self.killed = True

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving and join the thread (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._server, self._thread = None, None

    def __enter__(self) -> TestingServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
