"""The agent loop end to end on a real ``HFEngine`` over a tiny random model (Qwen2.5 tokenizer and template).

A random model writes arbitrary tokens: turns rarely end, tool calls are absent or malformed. The loop must
turn all of it into well-formed trajectories (token-level invariants, valid finish reasons), and after a
malformed tool call the real engine must continue from the injected tool-response segment.
"""

from __future__ import annotations

import math

import pytest

from tirl.protocol.types import FINISH_REASONS
from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.sandbox.types import ExecutionResult


class OkExecutor:
    def __init__(self):
        self.requests = []

    async def run(self, request):
        return (await self.run_batch([request]))[0]

    async def run_batch(self, requests):
        self.requests.extend(requests)
        return [ExecutionResult(status="ok", stdout="1\n") for _ in requests]

    async def aclose(self):
        pass


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    model.eval()
    return HFEngine(model, HFEngineConfig(seed=0)), AutoTokenizer.from_pretrained(str(tiny_model_dir))


def check_invariants(traj, budget):
    assert traj.finish_reason in FINISH_REASONS and traj.finish_reason != "error", traj.metadata
    assert len(traj.response_ids) == len(traj.loss_mask) == len(traj.logprobs) <= budget
    assert sum(t.num_tokens for t in traj.turns) == traj.num_model_tokens
    for m, lp in zip(traj.loss_mask, traj.logprobs):
        assert (lp == 0.0) if m == 0 else (math.isfinite(lp) and lp <= 0.0)


async def test_random_model_trajectories_are_well_formed(tiny):
    engine, tok = tiny
    loop = AgentLoop(
        SingleEngineRouter(engine),
        OkExecutor(),
        tok,
        AgentLoopConfig(max_response_tokens=48, max_turns=3, temperature=1.0),
    )
    trajs = await loop.run_many([RolloutRequest("What is 1 + 1?", sample_index=i, seed=i) for i in range(4)])
    assert len(trajs) == 4
    for traj in trajs:
        check_invariants(traj, 48)
        assert traj.prompt_ids == loop.prompt_ids("What is 1 + 1?")
        # random text almost never closes its turn: the budget ends it, and nothing partial was executed
        if traj.finish_reason == "length":
            assert traj.turns[-1].tool_calls == []


async def test_real_engine_continues_after_a_malformed_tool_call(tiny):
    """Turn 1 is a scripted malformed call (what random or untrained models write); turn 2 is sampled by the
    real engine from the history that now ends with the parse-error tool segment."""
    engine, tok = tiny
    stop = tok.convert_tokens_to_ids("<|im_end|>")

    class FirstTurnScripted:
        def __init__(self):
            self.turn = 0
            self.prompts = []

        async def generate(self, prompt_ids, params):
            self.prompts.append(list(prompt_ids))
            self.turn += 1
            if self.turn == 1:
                ids = tok.encode("<tool_call>{'code': print(1)</tool_call>", add_special_tokens=False) + [stop]
                return GenerationOutput(ids, [-2.0] * len(ids))
            return await engine.generate(prompt_ids, params)

    wrapper = FirstTurnScripted()
    executor = OkExecutor()
    loop = AgentLoop(
        SingleEngineRouter(wrapper),
        executor,
        tok,
        AgentLoopConfig(max_response_tokens=120, max_turns=2, temperature=1.0),
    )
    traj = await loop.run_one(RolloutRequest("What is 1 + 1?", seed=3))
    check_invariants(traj, 120)
    assert [r.cls for r in traj.turns[0].tool_calls] == ["parse_error"]
    assert executor.requests == []
    assert len(traj.turns) == 2 and traj.turns[1].num_tokens > 0
    n1 = traj.turns[0].num_tokens
    segment_len = traj.loss_mask.index(1, n1) - n1
    assert segment_len > 0 and wrapper.prompts[1] == traj.prompt_ids + traj.response_ids[: n1 + segment_len]
    assert "Tool call error" in tok.decode(traj.response_ids[n1 : n1 + segment_len])
