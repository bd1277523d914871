"""The multi-turn agent loop: generate, parse tool calls, execute them, append the tool segment, repeat.

Covers one trajectory's life at the token level and running many of them concurrently (asyncio): the engine
batches the generations in flight while other trajectories wait on their tool calls. It does not implement
engines (``tirl.rollout.engine`` and its implementations), scheduling across engines (an ``EngineRouter``), the
conversation format (``tirl.protocol``), code execution (a ``CodeExecutor``) or answer verification
(``tirl.reward``).

Token-in/token-out (report §3.1; field case F85): the prompt is tokenized once; every later engine call gets
``prompt_ids + response_ids`` exactly as sampled, never re-tokenized from text; only the tool-response segment
is newly tokenized (``tirl.protocol.render.tool_response_segment_ids``) and appended with loss mask 0 and log-prob 0.0.
Tool output is data (issue 23): each response is escaped (``tirl.protocol.escape``) before it is stored and
rendered, so nothing a program prints becomes a tag or a special token, and the final answer is read from the
model's turn records only (``tirl.protocol.answer.extract_answer_from_turns``), never from the tool segments.

Stops (the trajectory's ``finish_reason``):

``answer``
    A turn without a tool call (or any turn with ``use_tools=False`` or the tool-free ``cot`` prompt style).
``max_turns``
    The ``max_turns``-th assistant turn still called a tool. Its calls are not executed (no later turn could
    read them) and not recorded as tool calls; ``metadata["unexecuted_tool_calls"]`` counts them, with the calls
    past ``max_tool_calls_per_turn`` of earlier turns (recorded, answered "Not executed", class ``error``).
``length``
    The response token budget ``max_response_tokens`` ran out. Tool tokens count against it. A turn cut by the
    budget is kept; its tool calls are never executed (field case F34: partial code never runs). A tool segment
    that does not fit the budget is not appended and ends the trajectory.
``context``
    The model's context window (``context_window``) would be exceeded: by the next generation or by the tool
    segment (field case F88; tool outputs are also capped per call by the protocol's response limit).
``eos``
    The engine ended on end-of-sequence without the end-of-turn token.
``error``
    The engine failed, and its control shows the engine at fault (``metadata["error"]`` says why). The trajectory
    is kept; callers decide (evaluation does not store it, so a re-run retries it; training masks it).
``rejected``
    The engine refused the trajectory's own text twice while the prompt alone was answered: the model's doing
    (scored like any other end, never masked).

Failures and their controls (:mod:`tirl.algo.infra`, "the rule"): a failure is the infrastructure's only when
an independent control shows it. A generation that fails is sent again, then the prompt alone is sent for one
token (:func:`_generate_controlled`); a tool call answered ``internal`` is run again, then the tool's own example
call runs on an empty session (:func:`_control_tool_call`). What the model's text or program reproduces while the
control succeeds is charged to the model (``rejected``; a tool ``error``); what a retry answers is used as the
real outcome (the model never saw the failure); only a failed control leaves the failure masked.
``metadata["controls"]`` counts each outcome (``tool_recovered``, ``tool_charged``, ``tool_masked``, and the same
for ``engine``).

Tool calls run with the configured tool (``protocol.tool``, :mod:`tirl.protocol.tools`): the default ``python``
runs the calls of one turn concurrently through ``CodeExecutor.run_batch``; ``python_session`` runs them in order
and keeps the trajectory's variables across its calls, in state that belongs to the trajectory alone (created
when it starts, dropped when it ends). A sandbox ``internal`` failure that its control leaves with the
infrastructure is shown to the model as a tool error (class ``error``) and counted in
``metadata["tool_internal_errors"]``.
:func:`check_executor` is the start-up health check (field case F89): it fails fast when the sandbox is
unreachable instead of letting every tool call fail.

Output order of :func:`run_trajectories`: flat, prompt-major: trajectory ``i * samples_per_prompt + j`` is
sample ``j`` of prompt ``i``; ``metadata`` holds ``group_id`` (the prompt's id, or its index as a string),
``group_index`` (``i``) and ``sample_index`` (``j``).
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import hashlib
import inspect
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.protocol.answer import count_answer_blocks, extract_answer_from_turns
from tirl.protocol.config import ProtocolConfig
from tirl.protocol.escape import safe_tool_text
from tirl.protocol.parse import parse_tool_calls
from tirl.protocol.problem import Problem
from tirl.protocol.render import render_prompt_ids, stop_token_ids, tool_response_segment_ids
from tirl.protocol.response import render_parse_error
from tirl.protocol.tools import ToolContext, ToolResult, get_tool
from tirl.protocol.types import (
    CONTROL_KINDS,
    CONTROL_OUTCOMES,
    ToolCall,
    ToolCallError,
    ToolCallRecord,
    Trajectory,
    TurnRecord,
    classify_tool_call,
)
from tirl.rollout.engine import Engine, EngineRouter, GenerationOutput, SamplingParams
from tirl.sandbox.types import (
    DEFAULT_MEMORY_MB,
    DEFAULT_TIMEOUT_S,
    CodeExecutor,
    ExecutionRequest,
    ExecutionResult,
)

OnTrajectory = Callable[["RolloutRequest", Trajectory], "Awaitable[None] | None"]


class SandboxUnavailable(RuntimeError):
    """The code executor failed its start-up health check (unreachable, misconfigured, or broken)."""


@dataclass
class AgentLoopSettings:
    """Limits and sampling of the agent loop: the settings every run configuration shares, defined once here.

    The RL recipe's ``rollout`` section (:class:`tirl.train.config.RolloutConfig`, with the training defaults of
    :class:`TrainingLoopSettings`), the ``rollout`` section of ``tirl eval`` (:class:`tirl.eval.config.EvalConfig`)
    and the policy sampler of ``tirl data`` (:class:`tirl.runtime.sampler.SamplerConfig`) are these fields under
    these names; the defaults here are the report's evaluation protocol. :meth:`agent_loop_config` turns them into
    the loop's :class:`AgentLoopConfig`.

    Attributes:
        max_turns: most assistant turns per trajectory (report: 10/15 in training, 30 in evaluation).
        max_response_tokens: budget for everything after the prompt, model and tool tokens together.
        temperature: sampling temperature (report: 1.0 in training, 0.6 in evaluation).
        top_p: nucleus mass in (0, 1].
        context_window: most prompt + response tokens the model can hold; None for no limit beyond the budget
            (the run configurations read the model's window then).
        tool_timeout_s: wall-clock deadline of each tool call, seconds.
        tool_memory_mb: memory limit of each tool call, MiB.
        max_concurrency: trajectories in flight at once in :meth:`AgentLoop.run_many`; None for all.
        max_tool_calls_per_turn: most tool calls of one turn that run (default 4, half of the 8 sandbox slots
            of an RL run's default pool, so one turn of one trajectory cannot hold every slot); the calls after
            them are not executed, their tool response says so, and ``metadata["unexecuted_tool_calls"]``
            counts them (class ``error``). Parse errors do not count. None: no cap.

    Raises:
        ValueError: ``max_turns`` or ``max_response_tokens`` below 1, ``tool_timeout_s`` not above 0, or
            ``max_concurrency`` or ``max_tool_calls_per_turn`` below 1.
    """

    max_turns: int = 30
    max_response_tokens: int = 30720
    temperature: float = 0.6
    top_p: float = 1.0
    context_window: int | None = None
    tool_timeout_s: float = DEFAULT_TIMEOUT_S
    tool_memory_mb: int = DEFAULT_MEMORY_MB
    max_concurrency: int | None = None
    max_tool_calls_per_turn: int | None = 4

    def __post_init__(self) -> None:
        if self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {self.max_turns}")
        if self.max_response_tokens < 1:
            raise ValueError(f"max_response_tokens must be >= 1, got {self.max_response_tokens}")
        if not self.tool_timeout_s > 0:
            raise ValueError(f"tool_timeout_s must be > 0, got {self.tool_timeout_s}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1 or None, got {self.max_concurrency}")
        if self.max_tool_calls_per_turn is not None and self.max_tool_calls_per_turn < 1:
            raise ValueError(f"max_tool_calls_per_turn must be >= 1 or None, got {self.max_tool_calls_per_turn}")

    def agent_loop_config(
        self, protocol: ProtocolConfig | None = None, *, use_tools: bool = True, **changes: Any
    ) -> AgentLoopConfig:
        """The :class:`AgentLoopConfig` of these settings (a subclass's own fields are left out).

        Args:
            protocol: the conversation format (None: the default ``ProtocolConfig``).
            use_tools: False for plain chain-of-thought.
            changes: settings of :class:`AgentLoopSettings` to replace (``context_window`` read from the
                model, ``max_concurrency`` picked for the engine).

        Raises:
            TypeError: a name in ``changes`` that is not a field of :class:`AgentLoopSettings`.
            ValueError: the resulting settings are invalid (see the class).
        """
        names = [f.name for f in dataclasses.fields(AgentLoopSettings)]
        unknown = sorted(set(changes) - set(names))
        if unknown:
            raise TypeError(f"not agent-loop settings: {', '.join(unknown)}")
        values = {name: changes.get(name, getattr(self, name)) for name in names}
        return AgentLoopConfig(
            **values, use_tools=use_tools, protocol=protocol if protocol is not None else ProtocolConfig()
        )


@dataclass
class TrainingLoopSettings(AgentLoopSettings):
    """:class:`AgentLoopSettings` with the report's training defaults (10 turns, 8K tokens, temperature 1.0):
    how RL samples its policy (:class:`tirl.train.config.RolloutConfig`) and how ``tirl data`` samples one as
    in training (:class:`tirl.runtime.sampler.SamplerConfig`). The fields are described in
    :class:`AgentLoopSettings`."""

    max_turns: int = 10
    max_response_tokens: int = 8192
    temperature: float = 1.0


@dataclass
class AgentLoopConfig(AgentLoopSettings):
    """Everything the agent loop reads: the shared :class:`AgentLoopSettings` plus the tool switch and the format.

    Attributes:
        use_tools: False renders no tool schema and never executes anything (plain chain-of-thought).
        protocol: the conversation format.
    """

    use_tools: bool = True
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)

    @property
    def tools_active(self) -> bool:
        """Whether the loop declares, parses and runs the tool: ``use_tools`` and a prompt style that has one
        (``protocol.prompt_style="cot"`` has none: its turns are never parsed for calls)."""
        return self.use_tools and self.protocol.declares_tool


@dataclass
class RolloutRequest:
    """One trajectory to generate.

    Attributes:
        problem: the problem text (the user message).
        group_id: id shared by the samples of one problem (GRPO group).
        sample_index: index of this sample within its group.
        seed: sampling seed of this trajectory (turn ``t`` uses a seed derived from it), or None.
        metadata: copied into the trajectory's metadata.
    """

    problem: str
    group_id: str = "0"
    sample_index: int = 0
    seed: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from any values (the same parts give the same seed in every process)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF


async def check_executor(executor: CodeExecutor, timeout_s: float = 30.0) -> None:
    """Start-up health check: run ``print(6 * 7)`` and require ``ok`` with stdout ``42``.

    An executor with a ``check_health()`` coroutine returning ``{url: healthy}`` (``SandboxClient``) is probed
    first, so an unreachable service fails in one probe instead of after the client's retries.

    Raises:
        SandboxUnavailable: no server is healthy, or the executor raised, timed out, or answered anything
            else (the message quotes its status and stderr).
    """
    probe = getattr(executor, "check_health", None)
    if callable(probe):
        try:
            health = await asyncio.wait_for(probe(), timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - any failure means the sandbox is not usable
            raise SandboxUnavailable(f"code executor failed its health check: {type(exc).__name__}: {exc}") from exc
        if isinstance(health, dict) and health and not any(health.values()):
            raise SandboxUnavailable(f"code executor failed its health check: no healthy server in {sorted(health)}")
    try:
        result = await asyncio.wait_for(
            executor.run(ExecutionRequest(code="print(6 * 7)", timeout_s=min(timeout_s, DEFAULT_TIMEOUT_S))),
            timeout=timeout_s,
        )
    except Exception as exc:  # noqa: BLE001 - any failure means the sandbox is not usable
        raise SandboxUnavailable(f"code executor failed its health check: {type(exc).__name__}: {exc}") from exc
    if result.status != "ok" or result.stdout.strip() != "42":
        raise SandboxUnavailable(
            f"code executor failed its health check: status={result.status!r} "
            f"stdout={result.stdout[:200]!r} stderr={result.stderr[:500]!r}"
        )


class AgentLoop:
    """Runs trajectories through leased engines and a code executor.

    Args:
        router: hands out one engine per trajectory (``SingleEngineRouter`` for one engine). Each trajectory
            leases once with budget ``len(prompt_ids) + max_response_tokens`` and runs all turns on it.
        executor: the code executor the tool runs calls on (``LocalSandbox`` or ``SandboxClient``); may be None
            when ``config.use_tools`` is False or the configured tool needs none (``Tool.needs_executor``).
        tokenizer: a Hugging Face tokenizer (renders the prompt and tool segments, decodes turns).
        config: limits and sampling.

    Raises:
        ValueError: ``use_tools`` is True and ``executor`` is None.
    """

    def __init__(
        self,
        router: EngineRouter,
        executor: CodeExecutor | None,
        tokenizer: Any,
        config: AgentLoopConfig | None = None,
    ) -> None:
        self.router = router
        self.executor = executor
        self.tokenizer = tokenizer
        self.config = config or AgentLoopConfig()
        if self.config.tools_active and executor is None and get_tool(self.config.protocol.tool).needs_executor:
            raise ValueError("use_tools=True needs a code executor")
        self._stop_ids = list(stop_token_ids(tokenizer, self.config.protocol))
        self._prompt_cache: dict[str, list[int]] = {}

    # -- public API -----------------------------------------------------------------------------------
    def prompt_ids(self, problem: str) -> list[int]:
        """Token ids of the rendered prompt (system, tools when enabled, user, generation prompt); cached."""
        ids = self._prompt_cache.get(problem)
        if ids is None:
            ids = render_prompt_ids(self.tokenizer, problem, self.config.protocol, use_tools=self.config.tools_active)
            self._prompt_cache[problem] = ids
        return list(ids)

    def response_text(self, response_ids: Sequence[int]) -> str:
        """The decoded response (model turns and tool segments, special tokens kept), for reading and storing;
        never re-encoded, and not what answers are read from (the turn records are)."""
        return self.tokenizer.decode(list(response_ids), skip_special_tokens=False) if response_ids else ""

    async def check_tools(self, timeout_s: float = 30.0) -> None:
        """Run :func:`check_executor` when tools are enabled; a no-op otherwise.

        Raises:
            SandboxUnavailable: the executor is not usable.
        """
        tool = get_tool(self.config.protocol.tool)
        if self.config.tools_active and self.executor is not None and tool.needs_executor:
            await check_executor(self.executor, timeout_s)

    async def run_one(self, request: RolloutRequest) -> Trajectory:
        """Generate one trajectory (see the module docstring for stops and invariants).

        Engine failures become a trajectory with finish reason ``error``; cancellation propagates (the lease
        is released on the way out).
        """
        prompt_ids = self.prompt_ids(request.problem)
        trajectory_id = f"{request.group_id}/{request.sample_index}/{uuid.uuid4().hex[:8]}"
        budget = len(prompt_ids) + self.config.max_response_tokens
        started = time.perf_counter()
        try:
            async with self.router.lease(trajectory_id, budget) as engine:
                traj = await self._run_turns(engine, prompt_ids, request, trajectory_id)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed lease must not lose the other trajectories
            traj = Trajectory(prompt_ids=prompt_ids, finish_reason="error")
            traj.metadata["error"] = f"{type(exc).__name__}: {exc}"
        traj.metadata.update(request.metadata)
        traj.metadata.update(
            trajectory_id=trajectory_id,
            group_id=request.group_id,
            sample_index=request.sample_index,
            seed=request.seed,
            total_time_s=time.perf_counter() - started,
        )
        traj.check()
        return traj

    async def run_many(
        self, requests: Sequence[RolloutRequest], on_trajectory: OnTrajectory | None = None
    ) -> list[Trajectory]:
        """Generate every request concurrently (at most ``config.max_concurrency`` in flight).

        Args:
            requests: the trajectories to generate.
            on_trajectory: called (and awaited when it returns an awaitable) as each trajectory finishes, in
                completion order; an exception from it cancels the remaining work and propagates.

        Returns:
            The trajectories in the order of ``requests``.
        """
        limit = self.config.max_concurrency or max(1, len(requests))
        semaphore = asyncio.Semaphore(limit)
        results: list[Trajectory | None] = [None] * len(requests)

        async def one(i: int, request: RolloutRequest) -> None:
            async with semaphore:
                traj = await self.run_one(request)
            results[i] = traj
            if on_trajectory is not None:
                maybe = on_trajectory(request, traj)
                if inspect.isawaitable(maybe):
                    await maybe

        tasks = [asyncio.create_task(one(i, r)) for i, r in enumerate(requests)]
        try:
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                if not task.done():
                    task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        return [t for t in results if t is not None]

    # -- one trajectory -------------------------------------------------------------------------------
    async def _run_turns(
        self, engine: Engine, prompt_ids: list[int], request: RolloutRequest, trajectory_id: str = ""
    ) -> Trajectory:
        cfg = self.config
        session: dict[str, Any] = {}  # this trajectory's tool state (python_session's cells); dies with it
        response_ids: list[int] = []
        loss_mask: list[int] = []
        logprobs: list[float] = []
        have_logprobs = True
        turns: list[TurnRecord] = []
        meta: dict[str, Any] = {"tool_internal_errors": 0, "unexecuted_tool_calls": 0, "controls": new_controls()}
        gen_time = tool_time = 0.0
        finish = "answer"

        while True:
            budget_left = cfg.max_response_tokens - len(response_ids)
            max_new, limited_by = budget_left, "length"
            if cfg.context_window is not None:
                context_left = cfg.context_window - len(prompt_ids) - len(response_ids)
                if context_left < max_new:
                    max_new, limited_by = context_left, "context"
            if max_new <= 0:
                finish = limited_by
                break

            seed = None if request.seed is None else derive_seed(request.seed, len(turns))
            params = SamplingParams(
                max_new_tokens=max_new,
                temperature=cfg.temperature,
                top_p=cfg.top_p,
                stop_token_ids=list(self._stop_ids),
                seed=seed,
            )
            t0 = time.perf_counter()
            out = await _generate_controlled(engine, prompt_ids, response_ids, params, meta["controls"])
            gen_time += time.perf_counter() - t0

            ids = [int(t) for t in out.token_ids]
            overshoot = len(ids) > max_new  # a misbehaving engine; the budget still holds
            ids = ids[:max_new]
            response_ids.extend(ids)
            loss_mask.extend([1] * len(ids))
            if len(out.logprobs) >= len(ids):
                logprobs.extend(float(x) for x in out.logprobs[: len(ids)])
            else:
                have_logprobs = False
            text = self.tokenizer.decode(ids, skip_special_tokens=False) if ids else ""
            turn = TurnRecord(
                text=text,
                num_tokens=len(ids),
                answer_blocks=count_answer_blocks(text, cfg.protocol),
                finish_reason=out.finish_reason,
            )
            turns.append(turn)

            if out.finish_reason in ("error", "rejected"):
                finish = out.finish_reason
                meta["error"] = out.error or "engine error"
                break
            if out.finish_reason == "length" or overshoot:
                finish = limited_by
                break
            if out.finish_reason == "eos":
                finish = "eos"
                break
            if not cfg.tools_active:
                finish = "answer"
                break
            calls = parse_tool_calls(text, cfg.protocol)
            if not calls:
                finish = "answer"
                break
            if len(turns) >= cfg.max_turns:
                finish = "max_turns"
                meta["unexecuted_tool_calls"] += len(calls)
                break

            t0 = time.perf_counter()
            records = await self._execute_capped(calls, session, trajectory_id)
            meta["unexecuted_tool_calls"] += sum(1 for r in records if r.details.get("not_executed"))
            tool_time += time.perf_counter() - t0
            turn.tool_calls = records
            meta["tool_internal_errors"] += sum(1 for r in records if _is_internal(r.result))
            for r in records:
                control = r.details.get("control")
                if control is not None:
                    meta["controls"][f"tool_{control}"] += 1
            segment = list(tool_response_segment_ids(self.tokenizer, [r.response_text for r in records], cfg.protocol))
            if len(response_ids) + len(segment) > cfg.max_response_tokens:
                finish = "length"
                break
            used = len(prompt_ids) + len(response_ids) + len(segment)
            if cfg.context_window is not None and used >= cfg.context_window:
                finish = "context"
                break
            response_ids.extend(segment)
            loss_mask.extend([0] * len(segment))
            logprobs.extend([0.0] * len(segment))

        meta.update(generation_time_s=gen_time, tool_time_s=tool_time, num_turns=len(turns))
        return Trajectory(
            prompt_ids=list(prompt_ids),
            response_ids=response_ids,
            loss_mask=loss_mask,
            logprobs=logprobs if have_logprobs else [],
            turns=turns,
            final_answer=extract_answer_from_turns([t.text for t in turns], cfg.protocol),  # model text only
            finish_reason=finish,
            metadata=meta,
        )

    async def _execute_capped(
        self, calls: Sequence[ToolCall | ToolCallError], session: dict[str, Any], trajectory_id: str
    ) -> list[ToolCallRecord]:
        """:meth:`_execute` for the first ``max_tool_calls_per_turn`` decoded calls of a turn; each later one is
        answered without running (its record's ``details["not_executed"]``), in text order."""
        cap = self.config.max_tool_calls_per_turn
        positions = [i for i, c in enumerate(calls) if isinstance(c, ToolCall)]
        over = set(positions[cap:]) if cap is not None else set()
        if not over:
            return await self._execute(calls, session, trajectory_id)
        ran = iter(await self._execute([c for i, c in enumerate(calls) if i not in over], session, trajectory_id))
        message = (
            f"Not executed: this turn has {len(positions)} tool calls and at most {cap} run per turn; the first "
            f"{cap} ran. Make at most {cap} tool calls in one turn."
        )
        tool = self.config.protocol.tool
        return [
            ToolCallRecord(
                call=call,
                result=ExecutionResult(status="error", stderr=message),
                cls="error",
                response_text=self._shown(message),
                tool=tool,
                details={"not_executed": "max_tool_calls_per_turn"},
            )
            if i in over
            else next(ran)
            for i, call in enumerate(calls)
        ]

    async def _execute(
        self, calls: Sequence[ToolCall | ToolCallError], session: dict[str, Any] | None = None, trajectory_id: str = ""
    ) -> list[ToolCallRecord]:
        """Run the decoded calls of one turn with the configured tool (``protocol.tool``,
        :mod:`tirl.protocol.tools`; ``python`` runs them concurrently as one executor batch); parse errors are
        answered without running. ``session`` is the trajectory's own tool state (created per trajectory by
        :meth:`_run_turns`, never shared)."""
        cfg = self.config
        tool = get_tool(cfg.protocol.tool)
        runnable = [c for c in calls if isinstance(c, ToolCall)]
        outcomes: list[ToolResult] = []
        if runnable:
            context = ToolContext(
                executor=self.executor,
                config=cfg.protocol,
                timeout_s=cfg.tool_timeout_s,
                memory_mb=cfg.tool_memory_mb,
                session=session if session is not None else {},
                trajectory_id=trajectory_id,
            )
            snapshot = _snapshot(context.session)
            message = ""
            try:
                outcomes = list(await tool.run_batch([c.arguments for c in runnable], context))
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - tools should not raise; never lose the trajectory
                message = f"tool {tool.name} raised {type(exc).__name__}: {_short(exc)}"
            if len(outcomes) != len(runnable):
                message = message or f"tool {tool.name} answered {len(outcomes)} of {len(runnable)} calls"
                if snapshot is not None:
                    # one call spoiled the batch: run the calls one at a time from the state before it, so that
                    # each gets its own outcome (a stateful tool's earlier calls are not applied twice)
                    context.session.clear()
                    context.session.update(snapshot)
                    outcomes = [await _run_one(tool, c.arguments, context) for c in runnable]
                else:
                    failed = [ExecutionResult.internal_error(message) for _ in runnable]
                    outcomes = [ToolResult(result=r, text=tool.render(r, cfg.protocol)) for r in failed]
            # an ``internal`` answer is masked only when a control shows the infrastructure at fault
            outcomes = [
                await _control_tool_call(tool, c.arguments, o, context) if _is_internal(o.result) else o
                for c, o in zip(runnable, outcomes)
            ]
        it = iter(outcomes)
        records: list[ToolCallRecord] = []
        for call in calls:
            if isinstance(call, ToolCallError):
                records.append(
                    ToolCallRecord(
                        call=call,
                        result=None,
                        cls="parse_error",
                        response_text=self._shown(render_parse_error(call, cfg.protocol)),
                    )
                )
            else:
                outcome = next(it)
                records.append(
                    ToolCallRecord(
                        call=call,
                        result=outcome.result,
                        cls=classify_tool_call(call, outcome.result),
                        response_text=self._shown(outcome.text),
                        tool=tool.name,
                        details=dict(outcome.details),
                    )
                )
        return records

    def _shown(self, text: str) -> str:
        """A tool response as the model reads it: escaped (``tirl.protocol.escape``), so that what a program
        prints is data, never tags or special tokens; the raw output stays in the record's result."""
        return safe_tool_text(text, self.tokenizer, self.config.protocol)


#: ``ToolResult.details["control"]`` / ``Trajectory.metadata["controls"]`` values: what the control of a failure
#: found (module docstring, "Failures and their controls").
CONTROL_RECOVERED = "recovered"
CONTROL_CHARGED = "charged"
CONTROL_MASKED = "masked"


def _short(exc: BaseException, limit: int = 300) -> str:
    """``str(exc)`` cut to ``limit`` characters (a message built from a program's output can be huge)."""
    try:
        text = str(exc)
    except Exception:  # noqa: BLE001 - an exception whose __str__ raises is still reported
        text = f"<unprintable {type(exc).__name__}>"
    return text if len(text) <= limit else text[:limit] + "..."


def _snapshot(session: dict[str, Any]) -> dict[str, Any] | None:
    """A deep copy of a tool session's state (to retry its calls from there), or None when it cannot be copied."""
    try:
        return copy.deepcopy(session)
    except Exception:  # noqa: BLE001 - a session holding something uncopyable is just not retried call by call
        return None


def _is_internal(result: ExecutionResult | None) -> bool:
    return result is not None and result.status == "internal"


async def _run_one(tool: Any, arguments: Any, context: ToolContext) -> ToolResult:
    """One call of ``tool``; a tool that raises is answered ``internal`` (never lost)."""
    try:
        return await tool.run(arguments, context)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - tools should not raise; the control decides whose fault it was
        result = ExecutionResult.internal_error(f"tool {tool.name} raised {type(exc).__name__}: {_short(exc)}")
        return ToolResult(result=result, text=tool.render(result, context.config))


def new_controls() -> dict[str, int]:
    """A trajectory's control counts, all zero: ``{tool,engine}_{recovered,charged,masked}``."""
    return {f"{kind}_{o}": 0 for kind in CONTROL_KINDS for o in CONTROL_OUTCOMES}


async def _generate_once(engine: Engine, ids: list[int], params: SamplingParams) -> GenerationOutput:
    try:
        return await engine.generate(ids, params)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - an engine failure ends this trajectory only
        return GenerationOutput(token_ids=[], finish_reason="error", error=f"{type(exc).__name__}: {_short(exc)}")


async def _generate_controlled(
    engine: Engine,
    prompt_ids: list[int],
    response_ids: list[int],
    params: SamplingParams,
    controls: dict[str, int],
) -> GenerationOutput:
    """One generation; an engine failure is attributed by controls (:mod:`tirl.algo.infra`, "the rule").

    1. The same request again: an answer is the turn's (``engine_recovered``).
    2. Else, when the trajectory has text of the model's, the prompt alone for one token: when that is answered,
       the engine works and refuses what the model wrote (a context it cannot hold, text it cannot take), so
       the trajectory ends ``rejected``, the model's (``engine_charged``); when it fails too, or there is no
       model text, the engine is at fault: ``error``, masked (``engine_masked``).
    """
    out = await _generate_once(engine, prompt_ids + response_ids, params)
    if out.finish_reason != "error":
        return out
    again = await _generate_once(engine, prompt_ids + response_ids, params)
    if again.finish_reason != "error":
        controls["engine_recovered"] += 1
        return again
    if response_ids:
        probe = await _generate_once(engine, list(prompt_ids), dataclasses.replace(params, max_new_tokens=1))
        if probe.finish_reason != "error":
            controls["engine_charged"] += 1
            return GenerationOutput(
                token_ids=[],
                finish_reason="rejected",
                error=f"the engine refused this trajectory's text twice; the prompt alone was answered: {out.error}",
            )
    controls["engine_masked"] += 1
    return out


async def _control_tool_call(tool: Any, arguments: Any, first: ToolResult, context: ToolContext) -> ToolResult:
    """Whose fault an ``internal`` answer is, decided by controls (:mod:`tirl.algo.infra`, "the rule").

    1. The same call again (a stateful tool's session is unchanged by a call that did not succeed). An answer
       other than ``internal`` is the call's real outcome: it replaces the first (the model has not read it yet),
       ``details["control"] = "recovered"``.
    2. Else the tool's own example call on an empty session: when it succeeds, the infrastructure works and the
       model's call reproducibly fails in it, so the failure is the model's: ``error`` with a message naming the
       control, ``details["control"] = "charged"``. When the example fails too, the infrastructure is at fault:
       the first ``internal`` answer stands, ``details["control"] = "masked"`` (the trajectory is masked).
    """
    again = await _run_one(tool, arguments, context)
    if not _is_internal(again.result):
        again.details["control"] = CONTROL_RECOVERED
        again.details["first_failure"] = first.result.stderr[-300:]
        return again
    probe_context = dataclasses.replace(context, session={})
    probe = await _run_one(tool, tool.example_arguments(), probe_context)
    if probe.result.status == "ok":
        detail = (first.result.stderr or "").strip().splitlines()
        result = dataclasses.replace(
            first.result,
            status="error",
            stderr=(
                "tirl: this call failed inside the tool twice while a control call succeeded, so the failure is "
                "the call's own" + (f" ({detail[-1][:200]})" if detail else "")
            ),
        )
        details = {**first.details, "control": CONTROL_CHARGED}
        return ToolResult(result=result, text=tool.render(result, context.config), details=details)
    first.details["control"] = CONTROL_MASKED
    return first


def _as_requests(
    problems: Sequence[Problem | str | dict[str, Any]], samples_per_prompt: int, seed: int | None
) -> list[RolloutRequest]:
    if samples_per_prompt < 1:
        raise ValueError(f"samples_per_prompt must be >= 1, got {samples_per_prompt}")
    requests = []
    for i, item in enumerate(problems):
        if isinstance(item, Problem):
            problem, group_id, extra = item.problem, item.id, {"id": item.id}
        elif isinstance(item, str):
            problem, group_id, extra = item, str(i), {}
        elif isinstance(item, dict) and isinstance(item.get("problem"), str):
            problem, group_id = item["problem"], str(item.get("id", i))
            extra = {k: v for k, v in item.items() if k != "problem"}
        else:
            raise ValueError(
                f"problem {i} must be a Problem, a string or a dict with a 'problem' string, got {item!r:.80}"
            )
        for j in range(samples_per_prompt):
            requests.append(
                RolloutRequest(
                    problem=problem,
                    group_id=group_id,
                    sample_index=j,
                    seed=None if seed is None else derive_seed(seed, group_id, j),
                    metadata={"group_index": i, **extra},
                )
            )
    return requests


async def run_trajectories(
    problems: Sequence[Problem | str | dict[str, Any]],
    samples_per_prompt: int,
    router: EngineRouter,
    executor: CodeExecutor | None,
    tokenizer: Any,
    config: AgentLoopConfig | None = None,
    *,
    seed: int | None = None,
    check_sandbox: bool = True,
    on_trajectory: OnTrajectory | None = None,
) -> list[Trajectory]:
    """Generate ``samples_per_prompt`` trajectories for each problem (the RL rollout's 2G per prompt).

    Args:
        problems: :class:`tirl.data.Problem` objects (the statement is the user message, the ``id`` the group
            id and ``metadata["id"]``; the reference answer is never read), problem texts, or dicts with
            ``problem`` (and optional ``id``, used as the group id; other keys are copied into each
            trajectory's metadata).
        samples_per_prompt: trajectories per problem (>= 1).
        router, executor, tokenizer, config: see :class:`AgentLoop`.
        seed: base seed; each trajectory gets ``derive_seed(seed, group_id, sample_index)``. None: unseeded.
        check_sandbox: run the start-up health check first (when tools are enabled).
        on_trajectory: see :meth:`AgentLoop.run_many`.

    Returns:
        Flat, prompt-major list (see the module docstring), ``len(problems) * samples_per_prompt`` long.

    Raises:
        SandboxUnavailable: the health check failed.
        ValueError: a malformed problem or ``samples_per_prompt < 1``.
    """
    loop = AgentLoop(router, executor, tokenizer, config)
    requests = _as_requests(problems, samples_per_prompt, seed)
    if check_sandbox:
        await loop.check_tools()
    return await loop.run_many(requests, on_trajectory)


def run_trajectories_sync(*args: Any, **kwargs: Any) -> list[Trajectory]:
    """Blocking :func:`run_trajectories` for synchronous callers (TRL's training loop).

    Without a running event loop in this thread it uses ``asyncio.run``; inside one (a notebook, an async
    framework) it runs a fresh event loop in a helper thread and waits. Either way the executor and engines
    must not be bound to another event loop (create them per call, or make them loop-agnostic).

    Raises:
        Whatever :func:`run_trajectories` raises.
    """
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(run_trajectories(*args, **kwargs))
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(run_trajectories(*args, **kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=target, name="tirl-rollout", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]
