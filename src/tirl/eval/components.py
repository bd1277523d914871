"""What an evaluation run needs besides its config: :class:`EvalComponents`, and the grading adapters.

Covers :func:`build_default_components`, the default set of ``tirl eval``, put together from
:mod:`tirl.runtime` (the one wiring of eval, RL training and data sampling): the engine router
(:func:`build_router`, here rather than in :mod:`tirl.runtime` because it reads an :class:`EvalConfig`; over
the engines the runtime builds), one code executor that serves both the tool calls and the symbolic answer
checks (:func:`tirl.runtime.build_executor` of the config's ``sandbox:`` section), and the verifier on it with the
config's ``verifier:`` section and protocol (:func:`tirl.runtime.build_verifier`) seen
through the run's adapters :func:`make_grader` and :func:`make_gold_checker`. A test gives its own
:class:`EvalComponents` instead. It does not run anything.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tirl.protocol.types import Trajectory
from tirl.rollout.engine import Engine, EngineRouter
from tirl.sandbox.types import CodeExecutor

if TYPE_CHECKING:
    from tirl.eval.config import EvalConfig
    from tirl.reward.types import VerifierConfig


Grader = Callable[[Trajectory, str, str], Awaitable[dict[str, Any]]]
"""``(trajectory, decoded response text incl. tool segments, gold answer) -> verdict dict`` with at least
``correct`` (bool) and ``status`` (str): a sample's grade (over a :class:`tirl.reward.Verifier`)."""


@dataclass
class EvalComponents:
    """What a run needs besides its config; built by :func:`build_default_components` or given by a test.

    Attributes:
        router: engine router (one engine: ``SingleEngineRouter``); None in the components of a run with every
            sample already stored (:func:`build_grading_components`), which generates nothing.
        tokenizer: the model's tokenizer (None there too).
        executor: code executor (None with ``use_tools=False``).
        grader: see :data:`Grader`.
        load_problems: ``name -> list of {"id", "problem", "answer"}`` (defaults to ``tirl.data.load_benchmark``).
        check_golds: ``references -> why each cannot be parsed (None when it can)``; None skips the check
            (problems are then found unparsable only through their samples' verdicts).
        context_window: the model's context window in tokens, when known.
        closers: called (and awaited when needed) at the end of the run, in order.
    """

    router: EngineRouter | None
    tokenizer: Any
    executor: CodeExecutor | None
    grader: Grader
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


def make_grader(
    executor: CodeExecutor | None,
    *,
    answer_fallback: bool = False,
    protocol: Any = None,
    verifier: VerifierConfig | None = None,
    checker: Any = None,
) -> Grader:
    """The runner's grader over ``tirl.reward``: the trajectory's final answer against the gold answer, symbolic
    checks on ``executor``, with the run's ``verifier:`` settings (None: the defaults); returns
    ``Verdict.to_dict()``. The grader's :class:`tirl.reward.Verifier` is its ``verifier`` attribute.

    The answer graded is ``traj.final_answer``, what the agent loop extracted from the model's own turns with
    the run's ``protocol`` (:func:`tirl.protocol.answer.extract_answer_from_turns`), the very answer maj@k votes
    on; the response text, which holds tool output too, is not read, so no printed text can supply an answer
    and ``protocol.answer_fallback: none`` holds in grading. The verifier gets the run's ``protocol`` as well.

    The problem text (``traj.metadata["problem"]``) goes along as the question (read only for the base a
    base-written reference asks for). With ``answer_fallback``, a response without a boxed answer is verified
    with the answer :func:`tirl.protocol.answer.extract_answer_fallback` finds in its final turn's text, and
    the verdict says so (``answer_source: "fallback"``).
    """
    from tirl.protocol.answer import extract_answer_fallback
    from tirl.reward import VerifyItem
    from tirl.runtime import build_verifier

    if checker is None:  # the run's one Verifier when the caller has it (build_default_components does)
        checker = build_verifier(executor, protocol, verifier)

    async def grade(traj: Trajectory, response_text: str, gold: str) -> dict[str, Any]:
        question = traj.metadata.get("problem")
        question = question if isinstance(question, str) else None
        item = VerifyItem(None, gold, answer=traj.final_answer, question=question)
        verdict = (await checker.averify_batch([item]))[0]
        if answer_fallback and verdict.status == "no_answer" and traj.turns:
            answer = extract_answer_fallback(traj.turns[-1].text, protocol)
            if answer is not None:
                item = VerifyItem(None, gold, answer=answer, question=question)
                return {**(await checker.averify_batch([item]))[0].to_dict(), "answer_source": "fallback"}
        return verdict.to_dict()

    grade.verifier = checker  # type: ignore[attr-defined]  # what a test or a caller inspects
    return grade


def make_gold_checker(
    executor: CodeExecutor | None,
    protocol: Any = None,
    verifier: VerifierConfig | None = None,
    *,
    checker: Any = None,
) -> Any:
    """``references -> why each cannot be parsed (None when it can)`` over ``tirl.reward``
    (:meth:`tirl.reward.Verifier.acheck_references`), symbolic checks on ``executor``, the run's ``protocol``
    and ``verifier:`` settings; ``checker``: the run's :class:`tirl.reward.Verifier` when the caller has one
    (the grader's, so that one run has one verifier and one set of counters). Its ``verifier`` attribute is the
    Verifier used."""
    from tirl.runtime import build_verifier

    if checker is None:
        checker = build_verifier(executor, protocol, verifier)

    async def check_golds(golds: list[str]) -> list[str | None]:
        return await checker.acheck_references(golds)

    check_golds.verifier = checker  # type: ignore[attr-defined]  # what a test or a caller inspects
    return check_golds


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
    from tirl.runtime import build_hf_engine, build_server_engine

    api = "sglang" if config.engine == "sglang" else "openai"
    if config.engine == "hf":
        assert model_and_tokenizer is not None
        model, _ = model_and_tokenizer
        engine = build_hf_engine(model, batch_size=config.concurrency, seed=config.seed)
        return SingleEngineRouter(engine), engine.aclose, engine.max_model_len
    from tirl.models import lora_adapter_folder

    served_name = None  # None: the served model name is discovered from /v1/models
    adapter = None if config.servers_merged else lora_adapter_folder(config.model)
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
            SchedulerConfig(
                policy=config.scheduler or "kv_aware",
                admission_coef=config.admission_coef,
                metrics_log=str(config.out_dir / "scheduler_metrics.jsonl"),
            ),
            capacities=config.kv_capacities,
            engine_factory=engine_for,
        )
        return scheduler, scheduler.aclose, None
    engine = engine_for(config.servers[0])
    return SingleEngineRouter(engine), getattr(engine, "aclose", None), None


async def build_default_components(config: EvalConfig) -> EvalComponents:
    """Everything :func:`tirl.eval.runner.run_eval` needs, from ``config`` (see the module docstring).

    Raises:
        tirl.models.ModelNotFoundError: unknown model.
        ValueError: a bad ``engine`` setting.
    """
    from tirl.models import load, load_tokenizer, model_reference
    from tirl.runtime import build_executor

    executor = build_executor(config.sandbox)
    close_executor = executor.aclose
    closers: list[Any] = [close_executor]
    try:
        if config.engine == "hf":
            # tiny:<tokenizer> smoke models too, as in training (model_reference builds one once)
            model, tokenizer = load(model_reference(config.model), dtype=config.dtype)
            router, close_router, context = build_router(config, (model, tokenizer))
        else:
            tokenizer = load_tokenizer(model_reference(config.model))
            router, close_router, context = build_router(config, None)
        if close_router is not None:
            closers.insert(0, close_router)
    except BaseException:
        await close_executor()
        raise
    return _with_verifier(config, executor, router, tokenizer, context, closers)


def _with_verifier(
    config: EvalConfig,
    executor: CodeExecutor,
    router: EngineRouter | None,
    tokenizer: Any,
    context: int | None,
    closers: list[Any],
) -> EvalComponents:
    """The components of ``config``'s run around one verifier on ``executor`` (grading and the reference check)."""
    from tirl.runtime import build_verifier

    checker = build_verifier(executor, config.protocol, config.verifier)  # one per run: grading and gold checks
    return EvalComponents(
        router=router,
        tokenizer=tokenizer,
        executor=executor if config.use_tools else None,
        grader=make_grader(executor, answer_fallback=config.answer_fallback, protocol=config.protocol, checker=checker),
        check_golds=make_gold_checker(executor, checker=checker),
        context_window=context,
        closers=closers,
    )


async def build_grading_components(config: EvalConfig) -> EvalComponents:
    """The components of a run whose samples are all stored already: the executor of the ``sandbox:`` section
    (a local pool starts its workers only when a reference needs a symbolic check) and the verifier with the
    run's protocol and ``verifier:`` section, for the reference check of the summary (the same verifier as
    :func:`build_default_components`, so the summary is the one the generating run wrote). No model, tokenizer,
    engine or server: ``router`` and ``tokenizer`` are None, and nothing may generate with them."""
    from tirl.runtime import build_executor

    executor = build_executor(config.sandbox)
    return _with_verifier(config, executor, None, None, None, [executor.aclose])
