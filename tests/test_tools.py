"""Tools as a registry (``protocol.tool``, ``tirl.protocol.tools``): the ``python`` tool, the stateful
``python_session`` tool end to end (prompt, parsing, execution in the real local sandbox, rendering, the agent loop,
evaluation and the RL rollout function, the viewer's data), and a tool defined outside tirl in one class.
"""

from __future__ import annotations

import dataclasses
import json
import re
from types import SimpleNamespace
from typing import Any

import pytest

from tirl.protocol.config import ProtocolConfig
from tirl.protocol.parse import parse_tool_calls, render_tool_call
from tirl.protocol.prompt import tool_schema, tools_block
from tirl.protocol.render import render_prompt_text
from tirl.protocol.tools import Tool, ToolContext, ToolResult, get_tool, register_tool, tool_names, unregister_tool
from tirl.protocol.tools.python import PYTHON_DESCRIPTION
from tirl.protocol.tools.python_session import CELLS_KEY, SESSION_DESCRIPTION, cell_result, session_program
from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.sandbox.types import ExecutionResult

SESSION = ProtocolConfig(tool="python_session")


@pytest.fixture
async def sandbox():
    """A real local sandbox pool on the test's event loop (each call still runs in its own isolated process)."""
    from tirl.sandbox import LocalSandbox

    async with LocalSandbox(workers=1, preload=()) as sb:
        yield sb


# -- the registry ------------------------------------------------------------------------------------------------


@pytest.fixture
def registered():
    """Registers a test's tools (replacing any of the same name) and removes them after the test, so no test's
    tool leaks into another's registry."""
    names: list[str] = []

    def register(tool: Tool) -> Tool:
        names.append(tool.name)
        return register_tool(tool, replace=True)

    yield register
    for name in names:
        unregister_tool(name)


def test_the_registry_names_both_built_in_tools_and_the_config_validates_against_it():
    assert {"python", "python_session"} <= set(tool_names())
    assert ProtocolConfig().tool == "python"
    assert get_tool("python").name == "python" and get_tool("python_session").name == "python_session"
    with pytest.raises(ValueError, match="tool must be one of"):
        ProtocolConfig(tool="bash")
    with pytest.raises(ValueError, match="tool must be one of"):
        get_tool("bash")
    with pytest.raises(ValueError, match="already registered"):
        register_tool(type(get_tool("python"))())


def test_the_schema_comes_from_the_tool_and_the_default_is_unchanged():
    default = tool_schema()
    assert default["function"]["name"] == "execute_python_code_with_standard_io"
    assert default["function"]["description"] == PYTHON_DESCRIPTION
    assert default["function"]["parameters"]["required"] == ["code", "input"]
    session = tool_schema(SESSION)
    assert session["function"]["description"] == SESSION_DESCRIPTION
    assert session["function"]["parameters"] == default["function"]["parameters"]
    assert (
        tool_schema(ProtocolConfig(tool="python_session", function_description="Mine."))["function"]["description"]
        == "Mine."
    )


@pytest.mark.parametrize("style", ["full", "compact"])
def test_the_prompt_tells_the_model_that_state_persists(style, smollm2_tokenizer, qwen_tokenizer):
    cfg = dataclasses.replace(SESSION, prompt_style=style)
    for tok in (smollm2_tokenizer, qwen_tokenizer):  # tirl's tools block (ChatML) and Qwen2.5's own tools block
        text = render_prompt_text(tok, "What is 2 + 3?", cfg)
        plain = render_prompt_text(tok, "What is 2 + 3?", dataclasses.replace(cfg, tool="python"))
        marker = "keeps its state" if style == "full" else "earlier successful calls"
        assert marker in text and marker not in plain
    assert "x = 2 + 2" in tools_block(cfg)


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_xml"])
def test_parse_and_render_round_trip_with_the_session_tool(fmt):
    cfg = dataclasses.replace(SESSION, tool_call_format=fmt)
    code, stdin = "total = sum(range(10))\nprint(total)", "7\n"
    [call] = parse_tool_calls("Compute.\n" + render_tool_call(code, stdin, cfg), cfg)
    assert call.arguments == {"code": code, "input": stdin}
    assert render_tool_call(call.code, call.stdin, cfg) == render_tool_call(code, stdin, cfg)


# -- python_session without a sandbox: the program and the traceback lines ----------------------------------------


def test_the_first_cell_is_sent_as_is_and_later_ones_after_one_header_line():
    assert session_program([], "print(1)") == "print(1)"
    program = session_program([("x = 1", ""), ("y = input()", "a\nb")], "print(x)\nprint(y)")
    header, rest = program.split("\n", 1)
    assert rest == "print(x)\nprint(y)"
    assert "'x = 1'" in header and "'a\\nb'" in header and "\n" not in header
    compile(program, "<code>", "exec")  # one valid program


def test_traceback_lines_are_the_new_cells_own():
    result = ExecutionResult(
        status="error",
        error_type="ZeroDivisionError",
        traceback='Traceback (most recent call last):\n  File "<code>", line 4, in <module>\n'
        "    print(1 / 0)\nZeroDivisionError: division by zero\n",
    )
    assert 'File "<code>", line 3,' in cell_result(result, replayed=2).traceback
    assert cell_result(result, replayed=0) is result
    syntax = ExecutionResult(
        status="error",
        error_type="IndentationError",
        traceback='  File "<code>", line 3\n    print(i)\n    ^\nIndentationError: expected an '
        "indented block after 'for' statement on line 2\n",
    )
    shifted = cell_result(syntax, replayed=1).traceback
    assert 'File "<code>", line 2\n' in shifted and "statement on line 1" in shifted


# -- python_session in the real sandbox -----------------------------------------------------------------------------


async def _cell(tool: Tool, context: ToolContext, code: str, stdin: str = "") -> ToolResult:
    return await tool.run({"code": code, "input": stdin}, context)


async def test_variables_persist_across_the_calls_of_one_session_and_only_its_output_is_shown(sandbox):
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    first = await _cell(tool, ctx, "x = int(input()) * 7\nprint('replayed output must not show')", "6")
    assert first.cls == "ok" and first.details == {"replayed_cells": 0, "session_cells": 1}
    second = await _cell(tool, ctx, "import math\ndef f(n):\n    return math.factorial(n)\nprint(x)")
    assert (second.cls, second.text) == ("ok", "42")  # no output of the re-run first cell
    third = await _cell(tool, ctx, "f(x // 14) + x")  # the last expression's value, as in a notebook
    assert (third.cls, third.text, third.details["replayed_cells"]) == ("ok", "48", 2)
    stdin = await _cell(tool, ctx, "print(input().upper(), x)", "hello")  # each cell reads its own input
    assert stdin.text == "HELLO 42"


async def test_a_failed_call_leaves_the_session_as_it_was_and_its_traceback_has_the_cells_lines(sandbox):
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    await _cell(tool, ctx, "x = 1")
    failed = await _cell(tool, ctx, "y = 2\n\nz = 1 / 0")
    assert failed.cls == "error" and 'File "<code>", line 3, in <module>' in failed.text
    assert "z = 1 / 0" in failed.text and "ZeroDivisionError" in failed.text
    after = await _cell(tool, ctx, "print(x, 'y' in globals())")
    assert after.text == "1 False"  # the failed cell's y is not kept
    assert len(ctx.session[CELLS_KEY]) == 2
    syntax = await _cell(tool, ctx, "for i in range(2):\nprint(i)")
    assert syntax.cls == "error" and 'File "<code>", line 2' in syntax.text and "on line 1" in syntax.text


async def test_sessions_of_two_trajectories_never_see_each_other(sandbox):
    tool = get_tool("python_session")
    a = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    b = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    await _cell(tool, a, "secret = 'from a'")
    leaked = await _cell(tool, b, "print(secret)")
    assert leaked.cls == "error" and "NameError" in leaked.text
    assert (await _cell(tool, a, "print(secret)")).text == "from a"


async def test_a_cell_that_fails_when_re_run_is_reported_and_the_new_cell_still_runs(sandbox):
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    # succeeds when it runs for real, fails when re-run with its output discarded
    await _cell(tool, ctx, "import sys\nassert type(sys.stdout).__name__ != '_Discard'\nkept = 5")
    out = await _cell(tool, ctx, "print('new cell ran')")
    assert out.cls == "ok" and out.text.startswith("new cell ran\n[stderr]\n")
    assert "call 1 (AssertionError)" in out.text


#: A cell that behaves otherwise when it is re-run (a hostile model can tell: its output goes nowhere).
_ON_REPLAY = "import os, sys\nx = 5\nif type(sys.stdout).__name__ == '_Discard':\n    {action}\n"


@pytest.mark.parametrize(
    ("first", "note"),
    [
        ("import os\nx = 5\nos._exit(0)", None),
        ("import posix\nx = 5\nposix._exit(0)", None),
        ("from os import _exit\nx = 5\n_exit(0)", None),
        (_ON_REPLAY.format(action="os._exit(0)"), None),
        (_ON_REPLAY.format(action="os._exit(3)"), "call 1 (exit 3)"),
        (_ON_REPLAY.format(action="os.abort()"), "call 1 (exit 'abort')"),
    ],
    ids=["os._exit", "posix._exit", "kept_exit", "exit_on_replay", "exit_3_on_replay", "abort_on_replay"],
)
async def test_a_re_run_cell_cannot_end_the_process(sandbox, first, note):
    # Issue 41: a re-run cell that ended the process (os._exit) ended the new cell's call too: its feedback
    # was the empty output of a program that never reached the new cell.
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    assert (await _cell(tool, ctx, first)).cls == "ok"
    out = await _cell(tool, ctx, "print(x * 2)")
    assert out.cls == "ok" and out.text.splitlines()[0] == "10", out.text
    assert ("[session]" in out.text) == (note is not None) and (note or "") in out.text
    later = await _cell(tool, ctx, "from os import _exit\nprint('kept', x)\n_exit(0)")  # the real one again
    assert later.text.splitlines()[0] == "kept 5"


@pytest.mark.parametrize(
    "first",
    [
        "import atexit\natexit.register(print, 'bye from call 1')\nx = 5",
        "import weakref\nclass A:\n    pass\na = A()\nweakref.finalize(a, print, 'finalized in call 1')\nx = 5",
        "import os\nos.write(1, b'raw from call 1\\n')\nos.write(2, b'raw err\\n')\nx = 5",
        "import subprocess\nsubprocess.run(['echo', 'child of call 1'])\nx = 5",
    ],
    ids=["atexit", "weakref_finalize", "os_write", "subprocess"],
)
async def test_a_re_run_cell_prints_nothing_now_or_at_exit(sandbox, first):
    # Issue 41: the re-run cells' exit handlers ran after the new cell and their direct writes reached its output.
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    assert (await _cell(tool, ctx, first)).cls == "ok"
    out = await _cell(tool, ctx, "print(x)")
    assert (out.cls, out.text) == ("ok", "5")
    assert out.result.stdout == "5\n" and out.result.stderr == ""


async def test_a_re_run_cell_reads_its_own_input_not_the_new_cells(sandbox):
    # Issue 41: a re-run cell reading descriptor 0 (os.read, a subprocess, sys.stdin.buffer) took the new cell's input.
    tool = get_tool("python_session")
    ctx = ToolContext(executor=sandbox, config=SESSION, timeout_s=30)
    first = "import os, sys\nraw = os.read(0, 100)\nbuf = sys.stdin.buffer.read()\nprint(raw, buf)"
    assert (await _cell(tool, ctx, first, "abc")).text == "b'abc' b''"
    second = "import sys\nbuf2 = sys.stdin.buffer.read()"
    assert (await _cell(tool, ctx, second, "de")).cls == "ok"
    out = await _cell(tool, ctx, "print(input(), raw, buf2)", "hello")
    assert (out.cls, out.text) == ("ok", "hello b'abc' b'de'")


# -- the agent loop: state per trajectory, calls of a turn in order ----------------------------------------------


class CellEngine:
    """Writes the scripted cells of its problem (``problem -> [code, ...]``) one turn each, then answers with the
    last tool response's first line."""

    def __init__(self, tok, cells: dict[str, list[str | list[str]]], cfg: ProtocolConfig) -> None:
        self.tok, self.cells, self.cfg = tok, cells, cfg
        self.stop = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, params):
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        problem = next(p for p in self.cells if p in text)
        turn = text.count("<|im_start|>assistant") - 1  # assistant turns already written
        cells = self.cells[problem]
        if turn < len(cells):
            codes = cells[turn] if isinstance(cells[turn], list) else [cells[turn]]
            out = "Compute.\n" + "\n".join(render_tool_call(c, "", self.cfg) for c in codes)
        else:
            responses = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)
            first = responses[-1].splitlines()[0] if responses and responses[-1] else ""
            value = first if re.fullmatch(r"-?\d+", first) else "-1"
            out = f"Done.</reason>\n<answer>\\boxed{{{value}}}</answer>"
        ids = self.tok.encode(out, add_special_tokens=False) + [self.stop]
        return GenerationOutput(ids, [-0.1] * len(ids))


def _loop(tok, sandbox, cells, cfg):
    engine = CellEngine(tok, cells, cfg)
    return AgentLoop(
        SingleEngineRouter(engine),
        sandbox,
        tok,
        AgentLoopConfig(protocol=cfg, max_turns=6, max_response_tokens=3000, tool_timeout_s=30),
    )


async def test_the_agent_loop_keeps_state_per_trajectory_and_runs_a_turns_calls_in_order(smollm2_tokenizer, sandbox):
    cells = {
        "PROBLEM-A": ["x = 6 * 7", "print(x)"],
        "PROBLEM-C": [["y = 40", "print(y + 2)"]],  # two calls in one turn: the second sees the first
        "PROBLEM-B": ["print(x)"],
    }  # after A on the same loop: must not see A's x
    loop = _loop(smollm2_tokenizer, sandbox, cells, SESSION)
    a, c = await loop.run_many([RolloutRequest(p, group_id=p) for p in ("PROBLEM-A", "PROBLEM-C")])
    [b] = await loop.run_many([RolloutRequest("PROBLEM-B", group_id="PROBLEM-B")])
    assert a.final_answer == "42" and c.final_answer == "42"
    assert b.final_answer == "-1" and "NameError" in b.turns[0].tool_calls[0].response_text
    records = a.tool_call_records
    assert [r.tool for r in records] == ["python_session"] * 2
    assert [r.details["replayed_cells"] for r in records] == [0, 1]
    assert [r.details["replayed_cells"] for r in c.tool_call_records] == [0, 1]
    assert all(r.cls == "ok" for r in records + c.tool_call_records)
    # the same script with the default tool: nothing is kept between calls
    plain = ProtocolConfig()
    [a_plain] = await _loop(smollm2_tokenizer, sandbox, {"PROBLEM-A": cells["PROBLEM-A"]}, plain).run_many(
        [RolloutRequest("PROBLEM-A")]
    )
    assert a_plain.final_answer == "-1" and [r.cls for r in a_plain.tool_call_records] == ["ok", "error"]
    assert a_plain.tool_call_records[0].tool == "python"


async def test_a_cell_raising_a_five_thousand_digit_line_number_is_the_models_error(smollm2_tokenizer, sandbox):
    # Issue 41: after one good cell, renumbering this traceback raised (int() refuses 4,300+ digits), the tool
    # raised, and the agent loop answered the call internal: tirl's failure, masked out of the loss.
    bad = "raise Exception('File \"<code>\", line ' + '1' * 5000)"
    loop = _loop(smollm2_tokenizer, sandbox, {"PROBLEM-Z": ["x = 1", bad]}, SESSION)
    [traj] = await loop.run_many([RolloutRequest("PROBLEM-Z")])
    good, raised = traj.tool_call_records
    assert good.cls == "ok"
    assert (raised.result.status, raised.cls, raised.result.error_type) == ("error", "error", "Exception")
    assert raised.details["replayed_cells"] == 1
    assert traj.metadata["tool_internal_errors"] == 0
    assert 'File "<code>", line 1, in <module>' in raised.response_text  # the cell's own line
    assert len(raised.response_text) <= SESSION.tool_response_max_chars


# -- evaluation and the RL rollout function -----------------------------------------------------------------------

EVAL_PROBLEMS = [{"id": f"p{n}", "problem": f"PROBLEM-{n}: keep {n} and show it", "answer": str(n)} for n in (3, 8)]


class KeepEngine(CellEngine):
    """For ``PROBLEM-N``: turn 1 ``value = N``, turn 2 ``print(value)``, then the answer read from the response."""

    def __init__(self, tok, cfg: ProtocolConfig) -> None:
        super().__init__(tok, {}, cfg)

    async def generate(self, prompt_ids, params):
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        n = int(re.findall(r"PROBLEM-(\d+)", text)[-1])
        self.cells = {f"PROBLEM-{n}": [f"value = {n}", "print(value)"]}
        return await super().generate(prompt_ids, params)


@pytest.mark.parametrize("tool", ["python_session", "python"])
async def test_eval_runs_with_the_configured_tool(tool, tmp_path, smollm2_tokenizer, sandbox):
    from tirl.eval.runner import EvalComponents, EvalConfig, run_eval
    from tirl.rollout.agent_loop import AgentLoopSettings

    cfg = ProtocolConfig(tool=tool)

    async def grader(traj, response_text, gold):
        return {"correct": traj.final_answer == gold, "status": "ok", "extracted": traj.final_answer}

    components = EvalComponents(
        router=SingleEngineRouter(KeepEngine(smollm2_tokenizer, cfg)),
        tokenizer=smollm2_tokenizer,
        executor=sandbox,
        grader=grader,
        load_problems=lambda name: EVAL_PROBLEMS,
    )
    config = EvalConfig(
        model="scripted",
        benchmarks=["keep"],
        out_dir=tmp_path / "out",
        samples=2,
        protocol=cfg,
        rollout=AgentLoopSettings(max_response_tokens=3000, max_turns=4, tool_timeout_s=30),
    )
    result = await run_eval(config, components)
    [summary] = result.summaries
    assert summary.avg_pass1 == (1.0 if tool == "python_session" else 0.0)
    records = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    calls = [c for r in records for t in r["turns"] for c in t["tool_calls"]]
    assert len(calls) == 8 and {c["tool"] for c in calls} == {tool}
    if tool == "python_session":
        assert [c["details"]["replayed_cells"] for c in calls[:2]] == [0, 1]
        # the viewer shows which tool ran each call and what the session re-ran
        from tirl.view import view_records
        from tirl.view.load import read_run

        shown = [c for r in view_records(read_run(tmp_path / "out")) for t in r["turns"] for c in t["calls"]]
        assert {c["tool"] for c in shown} == {"python_session"}
        assert {c["session"] for c in shown} == {"0 earlier calls re-run", "1 earlier calls re-run"}


def test_the_rl_rollout_function_runs_with_python_session(smollm2_tokenizer):
    """``protocol.tool=python_session`` in an RL recipe reaches the RL rollout (AgentLoopSource on the runtime's
    own sandbox pool): the second call reads the first call's variable, so every trajectory is rewarded."""
    from tirl.data.problem import Problem
    from tirl.reward.scorer import Score
    from tirl.sandbox import LocalSandbox
    from tirl.train.config import load_config
    from tirl.train.rollout_func import METRICS_KEY, REWARD_KEY, AgentLoopSource, RocRolloutFunc

    problems = [Problem(id=p["id"], problem=p["problem"], answer=p["answer"]) for p in EVAL_PROBLEMS]
    overrides = {
        "protocol.tool": "python_session",
        "rollout.group_size": 2,
        "rollout.oversample": 2,
        "rollout.max_turns": 4,
        "rollout.max_response_tokens": 3000,
        "rollout.tool_timeout_s": 30,
        "roc.min_per_class": 1,
        "problems_per_step": 2,
        "optim.per_device_train_batch_size": 2,
    }
    config = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    assert config.protocol.tool == "python_session"

    class AnswerScorer:
        def score(self, trajectories: Any, probs: Any) -> list[Score]:
            return [Score(1.0 if t.final_answer == p.answer else 0.0) for t, p in zip(trajectories, probs)]

    source = AgentLoopSource(
        config,
        smollm2_tokenizer,
        executor_factory=lambda: LocalSandbox(workers=1, preload=()),
        engine_factory=lambda model: KeepEngine(smollm2_tokenizer, config.protocol),
    )
    fn = RocRolloutFunc(config, problems, source, AnswerScorer(), pad_token_id=2)
    trainer = SimpleNamespace(
        state=SimpleNamespace(global_step=0), accelerator=SimpleNamespace(process_index=0), model=None
    )
    try:
        out = fn([p.problem for p in problems for _ in range(2)], trainer)
    finally:
        source.close()
    trajectories = fn.last.trajectories
    assert len(trajectories) == 8  # 2 problems x 2G
    assert [t.final_answer for t in trajectories] == ["3"] * 4 + ["8"] * 4
    assert all(r.tool == "python_session" and r.cls == "ok" for t in trajectories for r in t.tool_call_records)
    assert out[REWARD_KEY] == [1.0] * 4
    assert out[METRICS_KEY]["tool_calls/per_traj"] == 2.0


# -- a tool defined outside tirl: one class and its registration -------------------------------------------------


class UpperTool(Tool):
    """A toy tool without the sandbox: answers ``code`` upper-cased; ``FAIL`` is an error."""

    name = "test_upper"
    description = "Upper-cases its code argument."
    needs_executor = False

    async def run(self, arguments, context):
        code = arguments.get("code", "")
        status = "error" if code == "FAIL" else "ok"
        result = ExecutionResult(
            status=status,
            stdout=code.upper() + "\n" if status == "ok" else "",
            error_type="ValueError" if status == "error" else None,
        )
        return ToolResult(result=result, text=self.render(result, context.config), details={"chars": len(code)})


async def test_a_new_tool_is_one_class_and_its_registration(smollm2_tokenizer, registered):
    registered(UpperTool())
    cfg = ProtocolConfig(tool="test_upper")
    assert "test_upper" in tool_names() and tool_schema(cfg)["function"]["description"] == UpperTool.description
    engine = CellEngine(smollm2_tokenizer, {"PROBLEM-U": [["shout", "FAIL"]]}, cfg)
    loop = AgentLoop(
        SingleEngineRouter(engine),
        None,
        smollm2_tokenizer,  # no executor needed
        AgentLoopConfig(protocol=cfg, max_turns=3, max_response_tokens=2000),
    )
    await loop.check_tools()  # nothing to check without the sandbox
    [traj] = await loop.run_many([RolloutRequest("PROBLEM-U")])
    records = traj.tool_call_records
    assert [(r.cls, r.tool, r.details) for r in records] == [
        ("ok", "test_upper", {"chars": 5}),
        ("error", "test_upper", {"chars": 4}),
    ]
    assert records[0].response_text == "SHOUT" and "ValueError" in records[1].response_text


# -- one GRPO-RoC step on the tiny random model with python_session -----------------------------------------------


@pytest.mark.slow
def test_one_rl_step_on_the_tiny_model_with_python_session(tmp_path, tiny_smollm2_model_dir):
    """``tirl train rl``'s trainer with ``protocol.tool=python_session``: a scripted first turn sets a variable, the
    second reads it back through the session (the trainer's own sandbox pool), every other third turn answers from
    it and the rest are sampled from the tiny policy; the step trains on tool-masked rows with mixed rewards."""
    from tirl.data.problem import Problem
    from tirl.models import load_tokenizer
    from tirl.reward.scorer import VerifierScorer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.sandbox import LocalSandbox
    from tirl.train.config import load_config
    from tirl.train.rl import build_trainer
    from tirl.train.rollout_func import AgentLoopSource

    overrides = {
        "output_dir": tmp_path,
        "model.name_or_path": tiny_smollm2_model_dir,
        "model.dtype": "float32",
        "max_steps": 1,
        "problems_per_step": 2,
        "save_steps": 100,
        "rollout.group_size": 2,
        "rollout.oversample": 2,
        "rollout.max_turns": 4,
        "rollout.max_response_tokens": 256,
        "rollout.tool_timeout_s": 30,
        "optim.per_device_train_batch_size": 2,
        "optim.warmup_steps": 0,
        "roc.min_per_class": 1,
        "logging.console": "false",
        "logging.report_to": "none",
        "protocol.tool": "python_session",
    }
    config = load_config(None, [f"{k}={v}" for k, v in overrides.items()])
    tokenizer = load_tokenizer(config.model.name_or_path)
    cells = ["x = 6 * 7", "print(x)"]

    class SessionEngine:
        def __init__(self, inner: Any) -> None:
            self.inner, self.third_turns = inner, 0
            self.stop = tokenizer.convert_tokens_to_ids("<|im_end|>")

        def set_model(self, model: Any) -> None:
            self.inner.set_model(model)

        async def generate(self, prompt_ids, params):
            text = tokenizer.decode(prompt_ids, skip_special_tokens=False)
            turn = text.count("<|im_start|>assistant") - 1
            if turn < len(cells):
                out = "Compute.\n" + render_tool_call(cells[turn], "", config.protocol)
            else:
                self.third_turns += 1
                if self.third_turns % 2 == 0:
                    return await self.inner.generate(prompt_ids, params)
                value = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", text, re.S)[-1]
                out = f"Done.</reason>\n<answer>\\boxed{{{value}}}</answer>"
            ids = tokenizer.encode(out, add_special_tokens=False) + [self.stop]
            return GenerationOutput(ids[: params.max_new_tokens], [0.0] * min(len(ids), params.max_new_tokens))

        async def aclose(self) -> None:
            await self.inner.aclose()

    problems = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(2)]
    source = AgentLoopSource(
        config,
        tokenizer,
        executor_factory=lambda: LocalSandbox(workers=1),
        engine_factory=lambda model: SessionEngine(HFEngine(model, HFEngineConfig(max_batch_size=8, seed=0))),
    )
    run = build_trainer(
        config, problems=problems, source=source, scorer=VerifierScorer(tokenizer, source.verify), num_processes=1
    )
    try:
        run.trainer.train()
    finally:
        run.close()
    assert run.trainer.state.global_step == 1
    trajectories = run.rollout.last.trajectories
    records = [t.tool_call_records for t in trajectories]
    assert len(records) == 8 and all(len(r) == 2 for r in records)
    for first, second in records:
        assert (first.tool, second.tool) == ("python_session", "python_session")
        assert second.cls == "ok" and second.result.stdout.strip() == "42"  # read back from the session
        assert (first.details["replayed_cells"], second.details["replayed_cells"]) == (0, 1)
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    rewards = [m["tirl/reward/mean"] for m in metrics if "tirl/reward/mean" in m]
    assert rewards and 0.0 < rewards[0] < 1.0  # scripted answers right, sampled ones (almost surely) wrong


async def test_the_session_works_through_the_sandbox_service_alike(sandbox):
    """The same tool on a ``SandboxClient`` in front of the service app (over the real local pool): the session is
    the agent loop's, so nothing on the service side needs to know about it."""
    from test_service_support import RoutingTransport
    from tirl.service.app import create_app
    from tirl.service.client import ClientConfig, SandboxClient

    transport = RoutingTransport({"svc.test:9001": create_app(sandbox)})
    async with SandboxClient(
        ["http://svc.test:9001"], ClientConfig(flush_interval_s=0.002), transport=transport
    ) as client:
        tool = get_tool("python_session")
        ctx = ToolContext(executor=client, config=SESSION, timeout_s=30)
        assert (await _cell(tool, ctx, "total = 40")).cls == "ok"
        shown = await _cell(tool, ctx, "print(total + 2)")
    assert (shown.cls, shown.text, shown.details["replayed_cells"]) == ("ok", "42", 1)


class LookupTool(Tool):
    """A toy tool with arguments of its own (``query`` required, ``limit`` an integer), no sandbox."""

    name = "test_lookup"
    description = "Looks a word up."
    needs_executor = False
    code_arguments = False

    def parameters(self, config):
        return {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        }

    def example_arguments(self):
        return {"query": "prime"}

    async def run(self, arguments, context):
        words = {"prime": "a number with exactly two divisors"}
        text = words.get(arguments["query"], "not found")[: arguments.get("limit", 100)]
        return ToolResult(
            result=ExecutionResult(status="ok", stdout=text + "\n"),
            text=self.render(ExecutionResult(status="ok", stdout=text + "\n"), context.config),
        )


@pytest.mark.parametrize("fmt", ["hermes", "qwen3_xml"])
async def test_a_tool_with_its_own_arguments_is_checked_against_its_schema_in_every_format(
    fmt, smollm2_tokenizer, registered
):
    from tirl.protocol.formats import get_format
    from tirl.protocol.tools import ARGUMENT_ERROR_KINDS

    registered(LookupTool())
    cfg = ProtocolConfig(tool="test_lookup", tool_call_format=fmt)

    def write(**arguments: Any) -> str:  # XML values are text: a non-string value is written as JSON
        if fmt == "qwen3_xml":
            arguments = {k: v if k == "query" else json.dumps(v) for k, v in arguments.items()}
        return get_format(fmt).render_call(cfg.function_name, arguments, cfg)

    assert tool_schema(cfg)["function"]["parameters"]["required"] == ["query"]
    assert write(query="prime") in tools_block(cfg)
    [call] = parse_tool_calls(write(query="prime", extra="x"), cfg)
    assert call.arguments == {"query": "prime"} and call.warnings == ["ignored_argument:extra"]
    [limited] = parse_tool_calls(write(query="prime", limit=7), cfg)
    assert limited.arguments == {"query": "prime", "limit": 7}
    [missing] = parse_tool_calls(write(limit=3), cfg)
    [wrong] = parse_tool_calls(write(query="prime", limit="7"), cfg)  # a string where the schema says integer
    assert (missing.kind, wrong.kind) == ("missing_argument", "bad_argument_type")
    assert set(ARGUMENT_ERROR_KINDS) == {missing.kind, wrong.kind}
    # and through the agent loop: the decoded arguments reach the tool
    stop = smollm2_tokenizer.convert_tokens_to_ids("<|im_end|>")

    class Engine:
        async def generate(self, prompt_ids, params):
            text = smollm2_tokenizer.decode(prompt_ids, skip_special_tokens=False)
            first = text.count("<|im_start|>assistant") == 1
            out = write(query="prime", limit=8) if first else "Done.</reason>\n<answer>\\boxed{1}</answer>"
            ids = smollm2_tokenizer.encode(out, add_special_tokens=False) + [stop]
            return GenerationOutput(ids, [-0.1] * len(ids))

    loop = AgentLoop(
        SingleEngineRouter(Engine()),
        None,
        smollm2_tokenizer,
        AgentLoopConfig(protocol=cfg, max_turns=3, max_response_tokens=2000),
    )
    [traj] = await loop.run_many([RolloutRequest("Define prime.")])
    [rec] = traj.tool_call_records
    assert (rec.cls, rec.tool, rec.response_text) == ("ok", "test_lookup", "a number")
