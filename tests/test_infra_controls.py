"""Masking decided by a control (issue 41): a failure is the infrastructure's only when an independent control
shows it; what the model's program or text reproduces while the control succeeds is the model's.

Each route the red-team review found is reproduced with a double whose failure the model's input controls (a
tool that raises on one program, an executor answering ``internal`` for one program, an engine that refuses a
long context), and checked to be charged, never masked; an outage (the control fails too) stays masked; a lone
failure is retried and its real outcome used.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from test_agent_loop import ScriptedEngine, ScriptedExecutor, call_text, make_loop, stop_of
from tirl.algo.infra import control_metrics, infra_cause
from tirl.protocol.config import ProtocolConfig
from tirl.protocol.tools import Tool, ToolContext, ToolResult, register_tool, unregister_tool
from tirl.protocol.tools.python_session import CELLS_KEY
from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.sandbox.types import ExecutionResult

PROBLEM = "What is 2 + 3?"
ANSWER = "<answer>\\boxed{5}</answer>"


def _ok(code: str) -> ExecutionResult:
    return ExecutionResult(status="ok", stdout="5\n")


async def _one(loop: AgentLoop):
    return await loop.run_one(RolloutRequest(PROBLEM))


# ------------------------------------------------------------------------------------------------ tool calls


async def test_a_program_that_makes_the_executor_fail_is_charged_not_masked(smollm2_tokenizer):
    """The executor answers ``internal`` for one program, every time; the control program runs: charged."""
    tok = smollm2_tokenizer
    ex = ScriptedExecutor(lambda code: ExecutionResult.internal_error("worker died") if "POISON" in code else _ok(code))
    loop, _ = make_loop(tok, [call_text("print('POISON')"), ANSWER], ex)
    traj = await _one(loop)
    rec = traj.turns[0].tool_calls[0]
    assert rec.result.status == "error" and rec.cls == "error"
    assert "control call succeeded" in rec.result.stderr and rec.details["control"] == "charged"
    assert "control call succeeded" in rec.response_text  # the model reads why
    assert traj.metadata["tool_internal_errors"] == 0
    assert traj.metadata["controls"]["tool_charged"] == 1 and traj.metadata["controls"]["tool_masked"] == 0
    assert infra_cause(traj, "ok") is None  # graded as the model's: its wrong answer keeps its reward 0
    codes = [r.code for r in ex.requests]
    assert codes.count("print('POISON')") == 2 and len(codes) == 3  # the call, its retry, the control


async def test_an_outage_that_fails_the_control_too_stays_masked(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ex = ScriptedExecutor(lambda code: ExecutionResult.internal_error("sandbox unreachable"))
    loop, _ = make_loop(tok, [call_text("print(1)"), ANSWER], ex)
    traj = await _one(loop)
    rec = traj.turns[0].tool_calls[0]
    assert rec.result.status == "internal" and rec.details["control"] == "masked"
    assert traj.metadata["tool_internal_errors"] == 1 and traj.metadata["controls"]["tool_masked"] == 1
    assert infra_cause(traj, "ok") == "tool_internal"


async def test_a_lone_failure_is_retried_and_the_model_reads_the_real_outcome(smollm2_tokenizer):
    tok = smollm2_tokenizer
    answers = iter([ExecutionResult.internal_error("worker died")])

    def flaky(code: str) -> ExecutionResult:
        return next(answers, None) or ExecutionResult(status="ok", stdout="5\n")

    loop, _ = make_loop(tok, [call_text("print(2+3)"), ANSWER], ScriptedExecutor(flaky))
    traj = await _one(loop)
    rec = traj.turns[0].tool_calls[0]
    assert rec.result.status == "ok" and rec.cls == "ok" and rec.details["control"] == "recovered"
    assert "5" in rec.response_text and "worker died" not in rec.response_text
    assert traj.metadata["controls"]["tool_recovered"] == 1 and infra_cause(traj, "ok") is None


class _RaisingTool(Tool):
    """A tool whose own code raises on one program (as python_session's renumbering did on a huge line number)."""

    name = "raises_on_boom"

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        code = str(arguments.get("code", ""))
        if "BOOM" in code:
            raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")
        cells = context.session.setdefault(CELLS_KEY, [])
        cells.append(code)
        result = ExecutionResult(status="ok", stdout=f"{len(cells)}\n")
        return ToolResult(result=result, text=self.render(result, context.config))

    async def run_batch(self, calls: Any, context: ToolContext) -> list[ToolResult]:
        return [await self.run(arguments, context) for arguments in calls]  # stateful: in order


@pytest.fixture
def raising_tool():
    tool = register_tool(_RaisingTool())
    yield tool
    unregister_tool(tool.name)


async def test_a_program_that_makes_the_tool_raise_is_charged_and_the_session_is_not_replayed_twice(
    smollm2_tokenizer, raising_tool
):
    tok = smollm2_tokenizer
    turn = "Two calls.\n" + call_text("print(1)") + "\n" + call_text("BOOM") + "\n" + call_text("print(3)")
    engine = ScriptedEngine(tok, [turn, ANSWER], stop_of(tok))
    config = AgentLoopConfig(protocol=ProtocolConfig(tool=raising_tool.name))
    loop = AgentLoop(SingleEngineRouter(engine), ScriptedExecutor(), tok, config)
    traj = await _one(loop)
    recs = traj.turns[0].tool_calls
    assert [r.result.status for r in recs] == ["ok", "error", "ok"]
    # the batch raised after its first call had joined the session: it was run again call by call from the
    # state before the batch, so each call ran once (the session holds 1 then 2 cells, not 1, 2, 3)
    assert [r.result.stdout for r in (recs[0], recs[2])] == ["1\n", "2\n"]
    assert recs[1].details["control"] == "charged" and traj.metadata["controls"]["tool_charged"] == 1
    assert infra_cause(traj, "ok") is None


# ------------------------------------------------------------------------------------------------ the engine


class _LengthRefusingEngine:
    """Answers a prompt of at most ``limit`` tokens; refuses a longer one (as a server refuses a context longer
    than its window), or refuses everything when ``down``."""

    def __init__(self, tok: Any, limit: int, down: bool = False) -> None:
        self.inner = ScriptedEngine(tok, [call_text("print('x' * 10)"), ANSWER], stop_of(tok))
        self.limit, self.down = limit, down
        self.calls: list[int] = []

    async def generate(self, prompt_ids: list[int], params: Any) -> GenerationOutput:
        self.calls.append(len(prompt_ids))
        if self.down:
            raise ConnectionError("server unreachable")
        if len(prompt_ids) > self.limit:
            return GenerationOutput([], finish_reason="error", error="400: context longer than the model's window")
        return await self.inner.generate(prompt_ids, params)


async def test_text_the_engine_refuses_is_the_models_rejected_not_masked(smollm2_tokenizer):
    tok = smollm2_tokenizer
    prompt_len = len((await _one(make_loop(tok, [ANSWER])[0])).prompt_ids)
    engine = _LengthRefusingEngine(tok, limit=prompt_len + 2)  # the second turn (after the tool) is refused
    loop = AgentLoop(SingleEngineRouter(engine), ScriptedExecutor(_ok), tok)
    traj = await _one(loop)
    assert traj.finish_reason == "rejected" and "refused" in traj.metadata["error"]
    assert traj.metadata["controls"]["engine_charged"] == 1
    assert infra_cause(traj, "no_answer") is None
    assert engine.calls[-1] == prompt_len  # the control: the prompt alone


async def test_an_engine_that_answers_nothing_is_masked(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = _LengthRefusingEngine(tok, limit=10**6, down=True)
    traj = await _one(AgentLoop(SingleEngineRouter(engine), ScriptedExecutor(_ok), tok))
    assert traj.finish_reason == "error" and traj.metadata["controls"]["engine_masked"] == 1
    assert infra_cause(traj, "no_answer") == "engine"


async def test_a_transient_engine_failure_is_retried(smollm2_tokenizer):
    tok = smollm2_tokenizer
    loop, engine = make_loop(tok, [GenerationOutput([], finish_reason="error", error="503"), ANSWER])
    traj = await _one(loop)
    assert traj.finish_reason == "answer" and traj.final_answer == "5"
    assert traj.metadata["controls"]["engine_recovered"] == 1 and infra_cause(traj, "ok") is None


# ------------------------------------------------------------------------------------------------ per step


async def test_control_metrics_count_recovered_charged_and_masked(smollm2_tokenizer):
    tok = smollm2_tokenizer
    poison = ScriptedExecutor(lambda c: ExecutionResult.internal_error("x") if "POISON" in c else _ok(c))
    charged = await _one(make_loop(tok, [call_text("print('POISON')"), ANSWER], poison)[0])
    down = ScriptedExecutor(lambda c: ExecutionResult.internal_error("down"))
    masked = await _one(make_loop(tok, [call_text("print(1)"), ANSWER], down)[0])
    clean = await _one(make_loop(tok, [ANSWER])[0])
    m = control_metrics([charged, masked, clean], ["ok", "ok", "answer_timeout"])
    assert m["infra/charged_tool"] == 1 and m["infra/charged_verifier"] == 1 and m["infra/charged"] == 2
    assert m["infra/recovered"] == 0 and m["infra/controlled"] == 3  # two charged, one masked
    m = control_metrics([clean], ["timeout"])  # a deadline the control left with the verifier: masked
    assert m["infra/controlled"] == 1 and m["infra/charged"] == 0
