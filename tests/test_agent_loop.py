"""The multi-turn agent loop with a scripted engine and a scripted executor (turn texts given in the tests).

Checks tokens, loss masks, log-probs, tool results and stop reasons exactly, and the rollout field cases
F85 (token-in/token-out), F88 (tool outputs capped, context end) and F89 (sandbox health check).
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest

from tirl.protocol.parse import render_tool_call
from tirl.protocol.render import tool_response_segment_ids
from tirl.rollout.agent_loop import (
    AgentLoop,
    AgentLoopConfig,
    RolloutRequest,
    SandboxUnavailable,
    check_executor,
    run_trajectories,
    run_trajectories_sync,
)
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.sandbox.types import ExecutionResult

PROBLEM = "What is 2 + 3?"


class ScriptedEngine:
    """Returns, for each call, the next scripted turn: token ids (text encoded, or ids given), then the stop id.

    ``script`` maps a problem marker to a list of turns; each turn is a str (encoded, stop id appended,
    finish 'stop'), or a GenerationOutput returned as is (cut to max_new_tokens with finish 'length').
    Records every call's prompt ids and max_new_tokens.
    """

    def __init__(self, tokenizer, turns, stop_id, on_generate=None):
        self.tok = tokenizer
        self.turns = list(turns)
        self.stop_id = stop_id
        self.calls: list[tuple[list[int], int]] = []
        self.on_generate = on_generate
        self.step = 0

    async def generate(self, prompt_ids, params):
        self.calls.append((list(prompt_ids), params.max_new_tokens))
        if self.on_generate is not None:
            await self.on_generate(self)
        turn = self.turns[min(self.step, len(self.turns) - 1)]
        self.step += 1
        if isinstance(turn, GenerationOutput):
            out = turn
        else:
            ids = self.tok.encode(turn, add_special_tokens=False) + [self.stop_id]
            out = GenerationOutput(token_ids=ids, logprobs=[-0.5 - 0.001 * i for i in range(len(ids))])
        if len(out.token_ids) > params.max_new_tokens:
            n = params.max_new_tokens
            return GenerationOutput(out.token_ids[:n], out.logprobs[:n], finish_reason="length")
        return out


def _print_expression(code):
    """Answers ``print(<arithmetic>)`` (the test's own code strings) like Python would."""
    assert code.startswith("print(") and code.endswith(")"), code
    return ExecutionResult(status="ok", stdout=f"{eval(code[6:-1], {'__builtins__': {}})}\n")


class ScriptedExecutor:
    """A CodeExecutor double: ``answer(code) -> ExecutionResult``; records requests."""

    def __init__(self, answer=None, gate=None):
        self.requests = []
        self.answer = answer or _print_expression
        self.gate = gate

    async def run(self, request):
        return (await self.run_batch([request]))[0]

    async def run_batch(self, requests):
        self.requests.extend(requests)
        if self.gate is not None:
            await self.gate(requests)
        return [self.answer(r.code) for r in requests]

    async def aclose(self):
        pass


def call_text(code, stdin=""):
    return render_tool_call(code, stdin)


@pytest.fixture(params=["smollm2", "qwen"])
def tok(request, smollm2_tokenizer, qwen_tokenizer):
    return smollm2_tokenizer if request.param == "smollm2" else qwen_tokenizer


def stop_of(tok):
    return tok.convert_tokens_to_ids("<|im_end|>")


def make_loop(tok, turns, executor=None, **cfg):
    engine = ScriptedEngine(tok, turns, stop_of(tok))
    loop = AgentLoop(SingleEngineRouter(engine), executor or ScriptedExecutor(), tok, AgentLoopConfig(**cfg))
    return loop, engine


async def test_three_turn_trajectory_tokens_masks_logprobs_and_results_exactly(tok):
    t1 = "Let me compute.\n" + render_tool_call("print(2+3)")
    t2 = "Check again.\n<tool_call>{not json</tool_call>"
    t3 = "So it is 5.</reason>\n<answer>\\boxed{5}</answer>"
    executor = ScriptedExecutor()
    loop, engine = make_loop(tok, [t1, t2, t3], executor, max_response_tokens=4000)
    traj = await loop.run_one(RolloutRequest(PROBLEM))

    stop = stop_of(tok)
    ids = [tok.encode(t, add_special_tokens=False) + [stop] for t in (t1, t2, t3)]
    assert traj.finish_reason == "answer"
    assert [t.tool_calls[0].cls if t.tool_calls else None for t in traj.turns] == ["ok", "parse_error", None]
    assert [r.code for r in executor.requests] == ["print(2+3)"]
    seg1 = tool_response_segment_ids(tok, [traj.turns[0].tool_calls[0].response_text])
    seg2 = tool_response_segment_ids(tok, [traj.turns[1].tool_calls[0].response_text])
    assert traj.response_ids == ids[0] + seg1 + ids[1] + seg2 + ids[2]
    assert traj.loss_mask == (
        [1] * len(ids[0]) + [0] * len(seg1) + [1] * len(ids[1]) + [0] * len(seg2) + [1] * len(ids[2])
    )
    # log-probs: the engine's at model tokens, 0.0 at injected ones
    lp = [-0.5 - 0.001 * i for i in range(max(map(len, ids)))]
    expected_lp = lp[: len(ids[0])] + [0.0] * len(seg1) + lp[: len(ids[1])] + [0.0] * len(seg2) + lp[: len(ids[2])]
    assert traj.logprobs == pytest.approx(expected_lp)
    # the tool segment carries the execution output and the parse error, inside <tool_response>
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(seg1)
    assert "invalid_json" in tok.decode(seg2)
    assert traj.final_answer == "5"
    assert [t.answer_blocks for t in traj.turns] == [0, 0, 1]
    assert traj.metadata["tool_internal_errors"] == 0
    # token-in/token-out: each engine call continues exactly the ids so far; the budget shrinks accordingly
    prompt = traj.prompt_ids
    assert [c[0] for c in engine.calls] == [prompt, prompt + ids[0] + seg1, prompt + ids[0] + seg1 + ids[1] + seg2]
    assert [c[1] for c in engine.calls] == [4000, 4000 - len(ids[0] + seg1), 4000 - len(ids[0] + seg1 + ids[1] + seg2)]


async def test_f85_sampled_ids_are_kept_even_when_re_encoding_differs(smollm2_tokenizer):
    tok = smollm2_tokenizer
    stop = stop_of(tok)
    he, llo = tok.encode("he", add_special_tokens=False), tok.encode("llo", add_special_tokens=False)
    assert tok.encode("hello", add_special_tokens=False) != he + llo  # the fixture's premise
    tool = tok.encode(render_tool_call("print(5)"), add_special_tokens=False)
    first = he + llo + tool + [stop]
    turns = [GenerationOutput(first, [-1.0] * len(first)), "done <answer>\\boxed{5}</answer>"]
    loop, engine = make_loop(tok, turns)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.response_ids[: len(first)] == first
    assert engine.calls[1][0][len(traj.prompt_ids) :][: len(first)] == first
    assert traj.logprobs[: len(first)] == [-1.0] * len(first)
    assert len(traj.logprobs) == len(traj.response_ids) == len(traj.loss_mask)


async def test_max_turns_stops_without_executing_the_last_call(tok):
    loop, engine = make_loop(tok, [call_text("print(1)")], max_turns=2)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "max_turns"
    assert len(traj.turns) == 2 and len(engine.calls) == 2
    assert len(loop.executor.requests) == 1
    assert traj.metadata["unexecuted_tool_calls"] == 1
    assert traj.loss_mask[-1] == 1  # ends on the model's turn, no dangling tool segment


async def test_f34_turn_cut_by_budget_never_runs_partial_code(tok):
    long_call = "<tool_call>" + json.dumps(
        {"name": "execute_python_code_with_standard_io", "arguments": {"code": "for i in range(3):\n    print(i)" * 20}}
    )
    loop, _ = make_loop(tok, [long_call], max_response_tokens=30)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "length" and traj.truncated
    assert loop.executor.requests == []
    assert len(traj.response_ids) == 30 and traj.turns[0].finish_reason == "length"


async def test_tool_segment_that_does_not_fit_the_budget_ends_with_length(tok):
    t1 = call_text("print(2+3)")
    n1 = len(tok.encode(render_tool_call("print(2+3)"), add_special_tokens=False)) + 1
    loop, engine = make_loop(tok, [t1, "never generated"], max_response_tokens=n1 + 5)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "length"
    assert len(traj.response_ids) == n1 and all(traj.loss_mask)
    assert len(engine.calls) == 1
    assert traj.turns[0].tool_calls[0].cls == "ok"  # it ran; its output just did not fit


async def test_f88_tool_outputs_are_capped_per_call(smollm2_tokenizer):
    tok = smollm2_tokenizer
    big = ExecutionResult(status="ok", stdout="1234567 " * 1000)  # ~2,000+ tokens of output
    loop, _ = make_loop(
        tok,
        [call_text("print('x')")] * 3 + ["<answer>\\boxed{1}</answer>"],
        ScriptedExecutor(lambda code: big),
        max_response_tokens=16384,
    )
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "answer"
    for turn in traj.turns[:3]:
        text = turn.tool_calls[0].response_text
        assert len(text) <= loop.config.protocol.tool_response_max_chars < len(big.stdout)
    # injected tokens stay bounded: at most about one token per kept character, plus the segment's tags
    assert len(traj.response_ids) - traj.num_model_tokens < 3 * (1024 + 64)


async def test_f88_context_window_ends_cleanly(smollm2_tokenizer):
    import dataclasses

    from tirl.protocol.config import ProtocolConfig

    tok = smollm2_tokenizer
    big = ExecutionResult(status="ok", stdout="1234567 " * 1000)
    cfg = dict(
        max_response_tokens=30000,
        context_window=16384,
        protocol=dataclasses.replace(ProtocolConfig(), tool_response_max_chars=0),
    )
    loop, engine = make_loop(
        tok, [call_text("print('x')")] * 12 + ["<answer>\\boxed{1}</answer>"], ScriptedExecutor(lambda code: big), **cfg
    )
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "context" and traj.truncated
    assert len(traj.prompt_ids) + len(traj.response_ids) <= 16384
    assert traj.final_answer is None
    assert all(len(p) + n <= 16384 for p, n in engine.calls)


async def test_eos_and_engine_error_finish_reasons(smollm2_tokenizer):
    tok = smollm2_tokenizer
    loop, _ = make_loop(tok, [GenerationOutput([5, 6], [-1.0, -1.0], finish_reason="eos")])
    assert (await loop.run_one(RolloutRequest(PROBLEM))).finish_reason == "eos"
    loop, _ = make_loop(tok, [GenerationOutput([], [], finish_reason="error", error="boom")])
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "error" and traj.metadata["error"] == "boom"


async def test_engine_exception_ends_only_that_trajectory(smollm2_tokenizer):
    tok = smollm2_tokenizer

    class Raising:
        async def generate(self, prompt_ids, params):
            raise RuntimeError("engine died")

    good = ScriptedEngine(tok, ["<answer>\\boxed{5}</answer>"], stop_of(tok))

    class ByGroup:
        @contextlib.asynccontextmanager
        async def lease(self, trajectory_id, budget_tokens):
            yield Raising() if trajectory_id.startswith("bad/") else good

    loop = AgentLoop(ByGroup(), ScriptedExecutor(), tok)
    trajs = await loop.run_many([RolloutRequest(PROBLEM, group_id=g) for g in ("ok1", "bad", "ok2")])
    assert [t.finish_reason for t in trajs] == ["answer", "error", "answer"]
    assert "engine died" in trajs[1].metadata["error"]
    assert [t.final_answer for t in trajs] == ["5", None, "5"]


async def test_failed_lease_is_an_error_trajectory(smollm2_tokenizer):
    class Broken:
        @contextlib.asynccontextmanager
        async def lease(self, trajectory_id, budget_tokens):
            raise RuntimeError("no server alive")
            yield  # pragma: no cover

    loop = AgentLoop(Broken(), ScriptedExecutor(), smollm2_tokenizer)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "error" and "no server alive" in traj.metadata["error"]
    assert traj.response_ids == [] and traj.prompt_ids


async def test_internal_sandbox_failure_is_a_tool_error_and_counted(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ex = ScriptedExecutor(lambda code: ExecutionResult.internal_error("worker died"))
    loop, _ = make_loop(tok, [call_text("print(1)"), "<answer>\\boxed{1}</answer>"], ex)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.turns[0].tool_calls[0].cls == "error"
    assert traj.metadata["tool_internal_errors"] == 1


async def test_executor_that_raises_becomes_internal_results(smollm2_tokenizer):
    tok = smollm2_tokenizer

    class Raising(ScriptedExecutor):
        async def run_batch(self, requests):
            raise ConnectionError("refused")

    loop, _ = make_loop(tok, [call_text("print(1)"), "<answer>\\boxed{1}</answer>"], Raising())
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    rec = traj.turns[0].tool_calls[0]
    assert rec.cls == "error" and rec.result.status == "internal" and "refused" in rec.result.stderr
    assert traj.finish_reason == "answer"


async def test_several_calls_in_one_turn_run_as_one_batch_in_order(smollm2_tokenizer):
    tok = smollm2_tokenizer
    ex = ScriptedExecutor(lambda code: ExecutionResult(status="ok", stdout=code[6:-1] + "\n"))
    turn = render_tool_call("print(111)") + "\n" + render_tool_call("print(222)")
    loop, _ = make_loop(tok, [turn, "<answer>\\boxed{1}</answer>"], ex)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert [r.response_text for r in traj.turns[0].tool_calls] == ["111", "222"]
    seg = tok.decode(traj.response_ids[traj.loss_mask.index(0) :])
    assert seg.index("111") < seg.index("222")


def _many_calls_turn(n: int, malformed: int = 0) -> str:
    """One turn with ``malformed`` undecodable calls and then ``n`` calls ``print(1)`` ... ``print(n)``."""
    bad = ["<tool_call>\n{not json\n</tool_call>"] * malformed
    return "\n".join(bad + [render_tool_call(f"print({i})") for i in range(1, n + 1)])


async def test_calls_past_the_per_turn_cap_are_not_executed_and_the_model_is_told(smollm2_tokenizer):
    # Issue 41: one turn of one trajectory could send any number of calls at once and hold every pool slot.
    assert AgentLoopConfig().max_tool_calls_per_turn == 4  # the stated default
    loop, _ = make_loop(smollm2_tokenizer, [_many_calls_turn(6), "<answer>\\boxed{1}</answer>"])
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert [r.code for r in loop.executor.requests] == [f"print({i})" for i in range(1, 5)]
    records = traj.turns[0].tool_calls
    assert [r.response_text for r in records[:4]] == ["1", "2", "3", "4"]
    assert [r.cls for r in records] == ["ok"] * 4 + ["error"] * 2
    for rec in records[4:]:
        assert rec.response_text.startswith("Not executed: this turn has 6 tool calls and at most 4 run per turn")
        assert rec.details == {"not_executed": "max_tool_calls_per_turn"} and rec.call.arguments["code"]
    assert traj.metadata["unexecuted_tool_calls"] == 2 and traj.metadata["tool_internal_errors"] == 0
    segment = smollm2_tokenizer.decode(traj.response_ids[traj.loss_mask.index(0) :])
    assert segment.count("Not executed") == 2  # the model reads it


@pytest.mark.parametrize(("cap", "ran"), [(None, 6), (1, 1), (6, 6)])
async def test_the_per_turn_cap_is_a_setting(smollm2_tokenizer, cap, ran):
    turns = [_many_calls_turn(6), "<answer>\\boxed{1}</answer>"]
    loop, _ = make_loop(smollm2_tokenizer, turns, max_tool_calls_per_turn=cap)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert len(loop.executor.requests) == ran and len(traj.turns[0].tool_calls) == 6
    assert traj.metadata["unexecuted_tool_calls"] == 6 - ran


async def test_parse_errors_do_not_count_against_the_per_turn_cap(smollm2_tokenizer):
    turns = [_many_calls_turn(2, malformed=3), "<answer>\\boxed{1}</answer>"]
    loop, _ = make_loop(smollm2_tokenizer, turns, max_tool_calls_per_turn=2)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert [r.cls for r in traj.turns[0].tool_calls] == ["parse_error"] * 3 + ["ok"] * 2
    assert traj.metadata["unexecuted_tool_calls"] == 0


def test_the_per_turn_cap_must_be_positive():
    with pytest.raises(ValueError, match="max_tool_calls_per_turn"):
        AgentLoopConfig(max_tool_calls_per_turn=0)


async def test_no_tools_mode_renders_no_schema_and_never_executes(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = ScriptedEngine(tok, [call_text("print(1)")], stop_of(tok))
    loop = AgentLoop(SingleEngineRouter(engine), None, tok, AgentLoopConfig(use_tools=False))
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    prompt = tok.decode(traj.prompt_ids)
    assert "execute_python_code_with_standard_io" not in prompt and "<tools>" not in prompt
    assert prompt.endswith("<|im_start|>assistant\n<reason>") and PROBLEM in prompt
    assert traj.finish_reason == "answer" and traj.turns[0].tool_calls == []
    assert all(traj.loss_mask)


def test_tools_mode_requires_an_executor(smollm2_tokenizer):
    with pytest.raises(ValueError, match="executor"):
        AgentLoop(SingleEngineRouter(None), None, smollm2_tokenizer, AgentLoopConfig(use_tools=True))


async def test_missing_logprobs_give_an_empty_list(smollm2_tokenizer):
    tok = smollm2_tokenizer
    loop, _ = make_loop(tok, [GenerationOutput([5, 6, stop_of(tok)], [])])
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.logprobs == [] and len(traj.response_ids) == 3


async def test_one_lease_per_trajectory_with_prompt_plus_budget_and_all_turns_on_it(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engines = [
        ScriptedEngine(tok, [call_text("print(1)"), "<answer>\\boxed{1}</answer>"], stop_of(tok)) for _ in range(2)
    ]

    class TwoEngines:
        def __init__(self):
            self.leases, self.released, self.n = [], [], 0

        @contextlib.asynccontextmanager
        async def lease(self, trajectory_id, budget_tokens):
            engine = engines[self.n % 2]
            self.n += 1
            self.leases.append((trajectory_id, budget_tokens, engine))
            try:
                yield engine
            finally:
                self.released.append(trajectory_id)

    router = TwoEngines()
    loop = AgentLoop(router, ScriptedExecutor(), tok, AgentLoopConfig(max_response_tokens=777, max_concurrency=1))
    trajs = await loop.run_many([RolloutRequest(PROBLEM, sample_index=i) for i in range(2)])
    assert [b for _, b, _ in router.leases] == [len(trajs[0].prompt_ids) + 777] * 2
    assert sorted(router.released) == sorted(t for t, _, _ in router.leases)
    # each engine served both turns of exactly one trajectory
    assert [len(e.calls) for e in engines] == [2, 2]


async def test_tool_calls_run_while_other_trajectories_generate(smollm2_tokenizer):
    """Trajectory A's tool call only finishes after trajectory B generated: a sequential loop would deadlock."""
    tok = smollm2_tokenizer
    b_generated = asyncio.Event()

    async def gate(requests):
        await asyncio.wait_for(b_generated.wait(), timeout=10)

    ex = ScriptedExecutor(gate=gate)

    class Split:
        def __init__(self):
            self.a = ScriptedEngine(tok, [call_text("print(1)"), "<answer>\\boxed{1}</answer>"], stop_of(tok))

            async def mark(_):
                await asyncio.sleep(0.05)  # let A reach its tool call first
                b_generated.set()

            self.b = ScriptedEngine(tok, ["<answer>\\boxed{2}</answer>"], stop_of(tok), on_generate=mark)

        @contextlib.asynccontextmanager
        async def lease(self, trajectory_id, budget_tokens):
            yield self.a if trajectory_id.startswith("A/") else self.b

    loop = AgentLoop(Split(), ex, tok)
    trajs = await loop.run_many([RolloutRequest(PROBLEM, group_id="A"), RolloutRequest(PROBLEM, group_id="B")])
    assert [t.final_answer for t in trajs] == ["1", "2"]


async def test_run_trajectories_is_flat_prompt_major_with_group_ids(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = ScriptedEngine(tok, ["<answer>\\boxed{1}</answer>"], stop_of(tok))
    problems = ["p0", {"problem": "p1", "id": "x7", "source": "aime"}]
    trajs = await run_trajectories(problems, 3, SingleEngineRouter(engine), ScriptedExecutor(), tok, seed=1)
    assert [(t.metadata["group_id"], t.metadata["sample_index"]) for t in trajs] == [
        ("0", 0),
        ("0", 1),
        ("0", 2),
        ("x7", 0),
        ("x7", 1),
        ("x7", 2),
    ]
    assert trajs[4].metadata["source"] == "aime" and trajs[4].metadata["group_index"] == 1
    assert len({t.metadata["seed"] for t in trajs}) == 6


async def test_run_trajectories_takes_problems_as_the_id_dicts_callers_built(smollm2_tokenizer):
    from tirl.data import Problem

    tok = smollm2_tokenizer
    problems = [Problem("a-1", "What is 6 * 7?", "42", source="s", meta={"level": 3}), Problem("b-2", "p1", "7")]
    runs = []
    for rows in (problems, [{"problem": p.problem, "id": p.id} for p in problems]):
        engine = ScriptedEngine(tok, ["<answer>\\boxed{1}</answer>"], stop_of(tok))
        trajs = await run_trajectories(rows, 2, SingleEngineRouter(engine), ScriptedExecutor(), tok, seed=3)
        metadata = [
            {k: v for k, v in t.metadata.items() if not k.endswith("time_s") and k != "trajectory_id"} for t in trajs
        ]  # timings and the random trajectory suffix differ between runs
        runs.append((metadata, [t.prompt_ids for t in trajs], [c[0] for c in engine.calls]))
    assert runs[0] == runs[1]  # same groups, seeds, metadata and prompts as the dicts RL and the sampler built
    metadata, _, prompts = runs[0]
    assert [(m["group_id"], m["id"], m["sample_index"]) for m in metadata] == [
        ("a-1", "a-1", 0),
        ("a-1", "a-1", 1),
        ("b-2", "b-2", 0),
        ("b-2", "b-2", 1),
    ]
    assert "What is 6 * 7?" in tok.decode(prompts[0])
    assert not any(k in m for m in metadata for k in ("answer", "source", "level"))  # the reference is not read
    with pytest.raises(ValueError, match="must be a Problem"):
        await run_trajectories([3], 1, SingleEngineRouter(engine), ScriptedExecutor(), tok)


def test_run_trajectories_sync_outside_and_inside_a_running_loop(smollm2_tokenizer):
    tok = smollm2_tokenizer

    def go():
        engine = ScriptedEngine(tok, ["<answer>\\boxed{1}</answer>"], stop_of(tok))
        return run_trajectories_sync(["p"], 2, SingleEngineRouter(engine), ScriptedExecutor(), tok)

    assert [t.final_answer for t in go()] == ["1", "1"]

    async def inside():
        return go()

    assert len(asyncio.run(inside())) == 2


@pytest.mark.parametrize(
    "bad", [ExecutionResult.internal_error("unreachable"), ExecutionResult(status="ok", stdout="41\n")]
)
async def test_f89_health_check_fails_fast_on_a_broken_sandbox(bad):
    with pytest.raises(SandboxUnavailable):
        await check_executor(ScriptedExecutor(lambda code: bad))


async def test_f89_health_check_on_raising_or_hanging_executor():
    class Hanging(ScriptedExecutor):
        async def run(self, request):
            await asyncio.sleep(60)

    class Raising(ScriptedExecutor):
        async def run(self, request):
            raise OSError("connection refused")

    with pytest.raises(SandboxUnavailable, match="TimeoutError"):
        await check_executor(Hanging(), timeout_s=0.2)
    with pytest.raises(SandboxUnavailable, match="connection refused"):
        await check_executor(Raising())
    await check_executor(ScriptedExecutor(lambda code: ExecutionResult(status="ok", stdout="42\n")))


async def test_f89_run_trajectories_checks_the_sandbox_before_generating(smollm2_tokenizer):
    tok = smollm2_tokenizer
    engine = ScriptedEngine(tok, ["x"], stop_of(tok))
    with pytest.raises(SandboxUnavailable):
        await run_trajectories(
            ["p"],
            2,
            SingleEngineRouter(engine),
            ScriptedExecutor(lambda c: ExecutionResult.internal_error("down")),
            tok,
        )
    assert engine.calls == []


async def test_f89_health_probe_of_a_service_client_fails_before_running_code():
    class Client(ScriptedExecutor):
        async def check_health(self):
            return {"http://127.0.0.1:9": False}

    client = Client()
    with pytest.raises(SandboxUnavailable, match="no healthy server"):
        await check_executor(client)
    assert client.requests == []
