"""Building what an evaluation run needs from its config: tokenizer, engine router, code executor, verifier.

Covers the default wiring of ``tirl eval``: :func:`build_router` (``hf``: one in-process ``HFEngine``;
``openai``: ``OpenAIEngine`` per ``--server``), :func:`build_executor` (``local``: one ``LocalSandbox`` pool
that serves both the tool calls and the symbolic answer checks, with math-verify preloaded next to numpy,
scipy and sympy; a URL: a ``SandboxClient``), and the verifier adapter. Each piece is a separate function so
that other parts (the scheduler for several servers) can replace one without touching the rest. It does not
run anything.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tirl.protocol.types import Trajectory
from tirl.rollout.engine import EngineRouter, SingleEngineRouter
from tirl.sandbox.types import CodeExecutor

if TYPE_CHECKING:
    from tirl.eval.config import EvalConfig


# (trajectory, decoded response text incl. tool segments, gold answer) -> verdict dict with at least
# "correct" (bool) and "status" (str)
Verifier = Callable[[Trajectory, str, str], Awaitable[dict[str, Any]]]


@dataclass
class EvalComponents:
    """What a run needs besides its config; built by :func:`build_default_components` or given by a test.

    Attributes:
        router: engine router (one engine: ``SingleEngineRouter``).
        tokenizer: the model's tokenizer.
        executor: code executor (None with ``use_tools=False``).
        verifier: see :data:`Verifier`.
        load_problems: ``name -> list of {"id", "problem", "answer"}`` (defaults to ``tirl.data.load_benchmark``).
        check_golds: ``references -> why each cannot be parsed (None when it can)``; None skips the check
            (problems are then found unparsable only through their samples' verdicts).
        context_window: the model's context window in tokens, when known.
        closers: called (and awaited when needed) at the end of the run, in order.
    """

    router: EngineRouter
    tokenizer: Any
    executor: CodeExecutor | None
    verifier: Verifier
    load_problems: Callable[[str], list[dict[str, Any]]] | None = None
    check_golds: Callable[[list[str]], Awaitable[list[str | None]]] | None = None
    context_window: int | None = None
    closers: list[Callable[[], Any]] = field(default_factory=list)

    async def aclose(self) -> None:
        """Run the closers, each at most once; errors in one do not stop the others."""
        closers, self.closers = self.closers, []
        for close in closers:
            try:
                maybe = close()
                if inspect.isawaitable(maybe):
                    await maybe
            except Exception:  # noqa: BLE001 - shutting down: report nothing, try the rest
                pass



def build_executor(config: EvalConfig) -> tuple[CodeExecutor, Any]:
    """The code executor for tools and verification, and its closer.

    ``config.sandbox == "local"``: a ``LocalSandbox`` whose workers preload the sandbox defaults plus the
    verifier's modules. Anything starting with ``http://`` or ``https://``: a ``SandboxClient`` of that URL
    (several URLs separated by commas).

    Raises:
        ValueError: any other ``sandbox`` value.
    """
    sandbox = config.sandbox.strip()
    if sandbox == "local":
        from tirl.reward import PRELOAD_MODULES
        from tirl.sandbox import DEFAULT_PRELOAD, LocalSandbox

        preload = tuple(dict.fromkeys((*DEFAULT_PRELOAD, *PRELOAD_MODULES)))
        executor = LocalSandbox(preload=preload)
        return executor, executor.aclose
    if sandbox.startswith(("http://", "https://")):
        from tirl.service.client import SandboxClient

        client = SandboxClient([u.strip() for u in sandbox.split(",") if u.strip()])
        return client, client.aclose
    raise ValueError(f"--sandbox must be 'local' or an http(s):// URL, got {config.sandbox!r}")


def build_router(
    config: EvalConfig, model_and_tokenizer: tuple[Any, Any] | None
) -> tuple[EngineRouter, Any, int | None]:
    """The engine router, its closer and the model's context window (tokens) for ``config.engine``.

    ``hf``: an ``HFEngine`` over the loaded model (``model_and_tokenizer``), batching up to
    ``config.concurrency`` rows. ``openai``: one ``OpenAIEngine`` for a single server (when ``config.model`` is a
    LoRA checkpoint folder, each server first loads the adapter and requests name it); with several servers
    (or an explicit ``config.scheduler`` or ``config.kv_capacities``) a ``RolloutScheduler`` over one ``OpenAIEngine``
    per server, logging its metrics to ``<out_dir>/scheduler_metrics.jsonl``.

    Raises:
        tirl.rollout.lora_server.ServerSyncError: a server refused the checkpoint's adapter.
        ValueError: a server without a KV capacity under ``kv_aware`` (neither reported nor configured).
        ImportError: the engine's module is missing.
    """
    if config.engine == "hf":
        from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

        assert model_and_tokenizer is not None
        model, _ = model_and_tokenizer
        engine = HFEngine(model, HFEngineConfig(max_batch_size=config.concurrency, seed=config.seed))
        return SingleEngineRouter(engine), engine.aclose, engine.max_model_len
    from tirl.models import lora_adapter_folder
    from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig

    served_name = None  # None: the served model name is discovered from /v1/models
    adapter = lora_adapter_folder(config.model)
    if adapter is not None:  # a LoRA checkpoint: every server loads it, requests name it
        from tirl.rollout.lora_server import load_adapter, served_adapter_name

        served_name = served_adapter_name(adapter)
        for url in config.servers:
            load_adapter(url, adapter, served_name)
    engine_config = OpenAIEngineConfig(model=served_name, send_seed=config.server_seed)

    if len(config.servers) > 1 or config.scheduler is not None or config.kv_capacities:
        from tirl.rollout.scheduler import RolloutScheduler, SchedulerConfig

        scheduler = RolloutScheduler.from_urls(
            config.servers,
            SchedulerConfig(policy=config.scheduler or "kv_aware", admission_coef=config.admission_coef,
                            metrics_log=str(config.out_dir / "scheduler_metrics.jsonl")),
            capacities=config.kv_capacities,
            engine_factory=lambda url: OpenAIEngine(url, engine_config),
        )
        return scheduler, scheduler.aclose, None
    engine = OpenAIEngine(config.servers[0], engine_config)
    return SingleEngineRouter(engine), getattr(engine, "aclose", None), None


def make_verifier(executor: CodeExecutor, *, answer_fallback: bool = False) -> Verifier:
    """The runner's verifier over ``tirl.reward``: the response text (tool responses are ignored by the
    answer extraction) against the gold answer, symbolic checks on ``executor``; returns ``Verdict.to_dict()``.

    The problem text (``traj.metadata["problem"]``) goes along as the question (read only for the base a
    base-written reference asks for). With ``answer_fallback``, a response without a boxed answer is verified
    with the answer :func:`tirl.protocol.answer.extract_answer_fallback` finds in its text, and the verdict
    says so (``answer_source: "fallback"``).
    """
    from tirl.protocol.answer import extract_answer_fallback
    from tirl.reward import Verifier as RewardVerifier
    from tirl.reward import VerifyItem

    verifier = RewardVerifier(executor=executor)

    async def verify(traj: Trajectory, response_text: str, gold: str) -> dict[str, Any]:
        question = traj.metadata.get("problem")
        question = question if isinstance(question, str) else None
        verdict = (await verifier.averify_batch([VerifyItem(response_text, gold, question=question)]))[0]
        if answer_fallback and verdict.status == "no_answer":
            answer = extract_answer_fallback(response_text)
            if answer is not None:
                item = VerifyItem(None, gold, answer=answer, question=question)
                return {**(await verifier.averify_batch([item]))[0].to_dict(), "answer_source": "fallback"}
        return verdict.to_dict()

    return verify


def make_gold_checker(executor: CodeExecutor) -> Any:
    """``references -> why each cannot be parsed (None when it can)`` over ``tirl.reward``
    (:meth:`tirl.reward.Verifier.acheck_references`), symbolic checks on ``executor``."""
    from tirl.reward import Verifier as RewardVerifier

    verifier = RewardVerifier(executor=executor)

    async def check_golds(golds: list[str]) -> list[str | None]:
        return await verifier.acheck_references(golds)

    return check_golds


async def build_default_components(config: EvalConfig) -> EvalComponents:
    """Everything :func:`tirl.eval.runner.run_eval` needs, from ``config`` (see the module docstring).

    Raises:
        tirl.models.ModelNotFoundError: unknown model.
        ValueError: a bad ``sandbox`` or ``engine`` setting.
    """
    from tirl.models import load, load_tokenizer

    closers: list[Any] = []
    executor, close_executor = build_executor(config)
    closers.append(close_executor)
    try:
        if config.engine == "hf":
            model, tokenizer = load(config.model, dtype=config.dtype)
            router, close_router, context = build_router(config, (model, tokenizer))
        else:
            tokenizer = load_tokenizer(config.model)
            router, close_router, context = build_router(config, None)
        if close_router is not None:
            closers.insert(0, close_router)
    except BaseException:
        await close_executor()
        raise
    return EvalComponents(
        router=router,
        tokenizer=tokenizer,
        executor=executor if config.use_tools else None,
        verifier=make_verifier(executor, answer_fallback=config.answer_fallback),
        check_golds=make_gold_checker(executor),
        context_window=context,
        closers=closers,
    )
