"""The run's protocol reaches every verifier (issue 27, item 4): ``protocol.answer_fallback: none`` scores a bare
``\\boxed{}`` 0 in RL (the GRPO-RoC rollout function on the agent loop, a scripted engine and executor, the
default verifier scorer) and in evaluation (``run_eval`` with the default grader), and 1 with the default policy;
the runtime's and the builders' verifiers carry the run's protocol."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from test_agent_loop import ScriptedEngine, ScriptedExecutor, stop_of
from tirl.data.problem import Problem
from tirl.eval.components import make_grader
from tirl.eval.runner import EvalComponents, EvalConfig, run_eval
from tirl.protocol.config import ProtocolConfig
from tirl.reward import VerifyItem
from tirl.reward.scorer import VerifierScorer
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.rollout.engine import SingleEngineRouter
from tirl.runtime import AgentRuntime, build_verifier
from tirl.train.config import load_config
from tirl.train.rollout_func import REWARD_KEY, AgentLoopSource, RocRolloutFunc

BARE = "so it is \\boxed{5}"  # no <answer> block
BLOCK = "so it is</reason><answer>\\boxed{5}</answer>"
NONE = ProtocolConfig(answer_fallback="none")


def _rl_rewards(tok, turn: str, fallback: str) -> tuple[list[Any], list[Any]]:
    config = load_config(
        None,
        [
            "rollout.group_size=2",
            "rollout.oversample=1",
            "roc.enabled=false",
            "problems_per_step=1",
            "optim.per_device_train_batch_size=2",
            "rollout.max_response_tokens=200",
            f"protocol.answer_fallback={fallback}",
        ],
    )
    source = AgentLoopSource(
        config,
        tok,
        executor_factory=ScriptedExecutor,
        engine_factory=lambda model: ScriptedEngine(tok, [turn], stop_of(tok)),
    )
    problem = Problem(id="p", problem="What is 2 + 3?", answer="5")
    fn = RocRolloutFunc(config, [problem], source, VerifierScorer(tok, source.verify), pad_token_id=0)
    trainer = SimpleNamespace(
        model=None, state=SimpleNamespace(global_step=0), accelerator=SimpleNamespace(process_index=0)
    )
    try:
        out = fn([problem.problem] * 2, trainer)
    finally:
        source.close()
    return out[REWARD_KEY], [t.final_answer for t in fn.last.trajectories]


def test_rl_with_answer_fallback_none_scores_a_bare_box_zero(qwen_tokenizer):
    rewards, answers = _rl_rewards(qwen_tokenizer, BARE, "none")
    assert rewards == [0.0, 0.0] and answers == [None, None]
    rewards, answers = _rl_rewards(qwen_tokenizer, BARE, "last_box_final_turn")
    assert rewards == [1.0, 1.0] and answers == ["5", "5"]
    rewards, _ = _rl_rewards(qwen_tokenizer, BLOCK, "none")  # an answer block still scores under "none"
    assert rewards == [1.0, 1.0]


class BareEngine:
    def __init__(self, tok, text):
        self.tok, self.text, self.stop = tok, text, stop_of(tok)

    async def generate(self, prompt_ids, params):
        from tirl.rollout.engine import GenerationOutput

        ids = self.tok.encode(self.text, add_special_tokens=False) + [self.stop]
        return GenerationOutput(ids, [-0.1] * len(ids))


async def _eval_correct(tmp_path, tok, protocol: ProtocolConfig, name: str) -> tuple[list[bool], dict]:
    config = EvalConfig(
        model="scripted",
        benchmarks=["toy"],
        out_dir=tmp_path / name,
        samples=2,
        rollout=AgentLoopSettings(max_response_tokens=200, max_turns=2),
        use_tools=False,
        protocol=protocol,
    )
    components = EvalComponents(
        router=SingleEngineRouter(BareEngine(tok, BARE)),
        tokenizer=tok,
        executor=None,
        grader=make_grader(None, protocol=protocol),
        load_problems=lambda _: [{"id": "a", "problem": "2 + 3?", "answer": "5"}],
    )
    await run_eval(config, components)
    records = [json.loads(x) for x in (tmp_path / name / "trajectories.jsonl").read_text().splitlines()]
    summary = json.loads((tmp_path / name / "summary.json").read_text())
    return [r["correct"] for r in records], summary


async def test_eval_with_answer_fallback_none_scores_a_bare_box_zero(tmp_path, smollm2_tokenizer):
    correct, summary = await _eval_correct(tmp_path, smollm2_tokenizer, NONE, "none")
    assert correct == [False, False]
    assert summary["benchmarks"]["toy"]["no_answer_rate"] == 1.0  # maj@k and grading agree: no answer
    correct, _ = await _eval_correct(tmp_path, smollm2_tokenizer, ProtocolConfig(), "default")
    assert correct == [True, True]


@pytest.mark.parametrize("protocol", [NONE, ProtocolConfig()])
def test_the_runtime_and_the_builders_give_the_verifier_the_runs_protocol(protocol):
    assert build_verifier(None, protocol).protocol_config is protocol
    runtime = AgentRuntime(ScriptedExecutor, protocol=protocol)
    try:
        [verdict] = runtime.verify([VerifyItem(BARE, "5")])  # a text item: extraction uses the run's protocol
    finally:
        runtime.close()
    assert verdict.correct is (protocol.answer_fallback != "none")


async def test_the_eval_grader_extracts_nothing_itself_for_a_trajectory_without_answer():
    from tirl.protocol.types import Trajectory, TurnRecord

    grade = make_grader(None, protocol=NONE)
    traj = Trajectory(prompt_ids=[1], turns=[TurnRecord(text=BARE)], final_answer=None)
    assert (await grade(traj, BARE, "5"))["status"] == "no_answer"
