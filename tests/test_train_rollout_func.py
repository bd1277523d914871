"""The GRPO-RoC rollout function without a model: slots, groups, placeholders, rewards, metrics."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace
from typing import Any

import pytest

from tirl.algo.advantages import group_advantages
from tirl.data.problem import Problem
from tirl.protocol import ToolCall, ToolCallRecord, Trajectory, TurnRecord
from tirl.reward.scorer import Score, outcome_reward
from tirl.sandbox import ExecutionResult
from tirl.train.config import load_config
from tirl.train.rollout_func import ADVANTAGE_KEY, METRICS_KEY, REWARD_KEY, RocRolloutFunc, passthrough_reward

PAD = 2
PROBLEMS = [Problem(id=f"q{i}", problem=f"problem {i}", answer=str(i)) for i in range(3)]


def _traj(
    prompt: list[int], correct: bool, errors: int = 0, calls: int = 1, length: int = 5, finish: str = "answer"
) -> Trajectory:
    records = [
        ToolCallRecord(
            call=ToolCall(name="f", arguments={"code": "x"}),
            result=ExecutionResult(status="error" if k < errors else "ok", duration_s=0.5),
            cls="error" if k < errors else "ok",
        )  # type: ignore[arg-type]
        for k in range(calls)
    ]
    ids = list(range(100, 100 + length))
    mask = [1] * length
    if calls and length >= 4:
        mask[1:3] = [0, 0]  # a tool segment
    return Trajectory(
        prompt_ids=prompt,
        response_ids=ids,
        loss_mask=mask,
        logprobs=[-0.5] * length,
        turns=[TurnRecord(text="", tool_calls=records), TurnRecord(text="", answer_blocks=1)],
        final_answer="ok" if correct else "bad",
        finish_reason=finish,
    )


class ListSource:
    """Returns pre-built groups of trajectories (one list per problem id), in the order asked."""

    def __init__(self, groups: dict[str, list[Trajectory]]) -> None:
        self.groups = groups
        self.asked: list[tuple[list[str], int]] = []

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
        self.asked.append(([p.id for p in problems], n))
        return [t for p in problems for t in self.groups[p.id][:n]]


class AnswerScorer:
    def __init__(self, overrides: dict[int, Score] | None = None) -> None:
        self.overrides = overrides or {}

    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        out = []
        for i, t in enumerate(trajectories):
            out.append(self.overrides.get(i, Score(1.0 if t.final_answer == "ok" else 0.0)))
        return out


def _cfg(**kw: Any):
    base = {
        "rollout.group_size": 4,
        "rollout.oversample": 2,
        "roc.min_per_class": 1,
        "problems_per_step": 1,
        "optim.per_device_train_batch_size": 4,
    }
    base.update(kw)
    return load_config(None, [f"{k}={v}" for k, v in base.items()])


def _trainer(step: int = 0) -> Any:
    return SimpleNamespace(state=SimpleNamespace(global_step=step), accelerator=SimpleNamespace(process_index=0))


def _groups(pattern: dict[str, list[bool]]) -> dict[str, list[Trajectory]]:
    out = {}
    for pid, flags in pattern.items():
        prompt = [1, int(pid[1:]) + 10]
        out[pid] = [_traj(prompt, ok, errors=(k % 2)) for k, ok in enumerate(flags)]
    return out


def test_each_block_of_g_gets_g_trajectories_of_its_problem():
    groups = _groups({"q0": [True, False] * 4, "q1": [False] * 7 + [True]})
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4 + ["problem 1"] * 4, _trainer())
    assert len(out["completion_ids"]) == 8
    assert out["prompt_ids"][:4] == [[1, 10]] * 4 and out["prompt_ids"][4:] == [[1, 11]] * 4
    assert fn.source.asked == [(["q0", "q1"], 8)]
    # each slot holds a real trajectory of its own group, no duplicates
    sources = fn.last.slot_sources
    assert all(s is not None and s // 8 == slot // 4 for slot, s in enumerate(sources))
    assert len(set(sources)) == 8


def test_kept_group_advantages_are_per_group_eq7():
    groups = _groups({"q0": [True, False] * 4, "q1": [False] * 7 + [True]})
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4 + ["problem 1"] * 4, _trainer())
    for g in range(2):
        rewards = out[REWARD_KEY][4 * g : 4 * g + 4]
        assert out[ADVANTAGE_KEY][4 * g : 4 * g + 4] == pytest.approx(group_advantages(rewards))
    assert sum(out[REWARD_KEY][4:]) == 1.0  # the single positive of q1 is kept


def test_outputs_line_up_and_carry_the_tool_mask():
    groups = _groups({"q0": [True, False] * 4})
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4, _trainer())
    for ids, mask, logps in zip(out["completion_ids"], out["env_mask"], out["logprobs"]):
        assert len(ids) == len(mask) == len(logps)  # F86
        assert mask[1:3] == [0, 0] and mask[0] == 1


def test_misaligned_groups_raise():
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(_groups({"q0": [True] * 8})), AnswerScorer(), PAD)
    with pytest.raises(RuntimeError, match="not a multiple"):
        fn(["problem 0"] * 3, _trainer())
    with pytest.raises(RuntimeError, match="copies"):
        fn(["problem 0"] * 3 + ["problem 1"], _trainer())
    with pytest.raises(RuntimeError, match="known"):
        fn(["unknown"] * 4, _trainer())


def test_conversational_prompts_map_to_problems():
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(_groups({"q2": [True, False] * 4})), AnswerScorer(), PAD)
    out = fn([[{"role": "user", "content": "problem 2"}]] * 4, _trainer())
    assert len(out["completion_ids"]) == 4


def test_dropped_all_equal_group_becomes_masked_placeholders():
    groups = _groups({"q0": [True] * 8, "q1": [True, False] * 4})
    fn = RocRolloutFunc(_cfg(**{"roc.drop_all_equal": "true"}), PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4 + ["problem 1"] * 4, _trainer())
    assert out["completion_ids"][:4] == [[PAD]] * 4
    assert out["env_mask"][:4] == [[0]] * 4
    assert out[REWARD_KEY][:4] == [None] * 4 and out[ADVANTAGE_KEY][:4] == [0.0] * 4
    assert out[METRICS_KEY]["groups/dropped"] == 1.0
    assert all(len(ids) > 1 for ids in out["completion_ids"][4:])


def test_unscorable_trajectories_fill_slots_with_placeholders():
    # 8 sampled, 5 unscorable -> 3 scorable < G=4: the group is kept whole plus one placeholder
    groups = _groups({"q0": [True, False] * 4})
    overrides = {i: Score(None, "verifier_error") for i in range(5)}
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(groups), AnswerScorer(overrides), PAD)
    out = fn(["problem 0"] * 4, _trainer())
    assert fn.last.slot_sources == [5, 6, 7, None]
    assert out["env_mask"][3] == [0] and out[REWARD_KEY][3] is None
    assert out[METRICS_KEY]["groups/undersized"] == 1.0
    assert out[METRICS_KEY]["reward/unscored"] == 5.0
    assert out[METRICS_KEY]["verify/verifier_error"] == 5.0


def test_empty_response_is_never_trained_on():
    # F80: a trajectory with no response tokens places nothing: its slot is a masked placeholder
    prompt = [1, 10]
    trajs = [Trajectory(prompt_ids=prompt, finish_reason="error")] * 4 + [_traj(prompt, True)] * 4
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource({"q0": trajs}), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4, _trainer())
    for sid, ids, mask in zip(fn.last.slot_sources, out["completion_ids"], out["env_mask"]):
        if sid is None or sid < 4:
            assert ids == [PAD] and mask == [0]
    assert out[METRICS_KEY]["finish/error"] == 0.5


def test_without_roc_only_g_are_sampled_and_all_kept():
    groups = _groups({"q0": [True, False, False, True, True, True, True, True]})
    fn = RocRolloutFunc(
        _cfg(**{"roc.enabled": "false", "rollout.oversample": 1}), PROBLEMS, ListSource(groups), AnswerScorer(), PAD
    )
    fn(["problem 0"] * 4, _trainer())
    assert fn.source.asked == [(["q0"], 4)]
    assert fn.last.slot_sources == [0, 1, 2, 3]


def test_roc_prefers_error_free_positives_in_figure4_metric():
    # positives: half with a failing call; RoC must lower the failing share inside kept positives
    prompt = [1, 10]
    trajs = [_traj(prompt, True, errors=1, calls=2) for _ in range(4)] + [
        _traj(prompt, True, errors=0, calls=2) for _ in range(2)
    ]
    trajs += [_traj(prompt, False) for _ in range(2)]
    fn = RocRolloutFunc(_cfg(**{"roc.mode": "topk"}), PROBLEMS, ListSource({"q0": trajs}), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4, _trainer())
    m = out[METRICS_KEY]
    assert m["tool_error_in_correct/before"] == pytest.approx(4 / 12)
    assert m["tool_error_in_correct/after"] < m["tool_error_in_correct/before"]
    assert all(math.isfinite(v) for v in m.values())


def test_selection_is_reproducible_per_step():
    groups = _groups({"q0": [True, False] * 4})
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    fn(["problem 0"] * 4, _trainer(3))
    first = list(fn.last.slot_sources)
    fn(["problem 0"] * 4, _trainer(3))
    assert fn.last.slot_sources == first


def test_outcome_reward_ignores_tool_calls_and_masks_infrastructure_failures():
    # F91: ten tool calls and a wrong answer earn nothing
    assert outcome_reward(False, "ok") == 0.0
    assert outcome_reward(True, "ok") == 1.0
    assert outcome_reward(False, "timeout") == 0.0
    assert outcome_reward(False, "no_answer") == 0.0
    assert outcome_reward(False, "verifier_error") is None
    assert outcome_reward(False, "unparsable_gold") is None  # F83: flagged, never scored as [1, 1]


def test_outcome_reward_through_rollout_ignores_tool_call_count():
    prompt = [1, 10]
    trajs = [_traj(prompt, False, calls=10, length=30) for _ in range(4)] + [_traj(prompt, True, calls=0)] * 4
    fn = RocRolloutFunc(_cfg(), PROBLEMS, ListSource({"q0": trajs}), AnswerScorer(), PAD)
    out = fn(["problem 0"] * 4, _trainer())
    for sid, r in zip(fn.last.slot_sources, out[REWARD_KEY]):
        assert r == (0.0 if sid < 4 else 1.0)


def test_passthrough_reward_returns_rewards_and_logs_metrics():
    logged: dict[str, float] = {}
    rewards = passthrough_reward(
        ["a", "b", "c"],
        tirl_reward=[1.0, None, 0.0],
        tirl_metrics=[{"accuracy": 0.5}] * 3,
        log_metric=lambda k, v: logged.__setitem__(k, v),
    )
    assert rewards == [1.0, None, 0.0]
    assert logged == {"tirl/accuracy": 0.5}
    with pytest.raises(ValueError, match="tirl_reward"):
        passthrough_reward(["a"])


def test_log_trajectories_writes_every_sampled_trajectory(tmp_path):
    groups = _groups({"q0": [True, False] * 4})
    cfg = _cfg(**{"logging.log_trajectories": "true", "output_dir": str(tmp_path)})
    fn = RocRolloutFunc(cfg, PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    fn(["problem 0"] * 4, _trainer(6))
    rows = [json.loads(x) for x in (tmp_path / "trajectories" / "step_00007_rank0.jsonl").read_text().splitlines()]
    assert len(rows) == 8 and sum(r["kept"] for r in rows) == 4
    assert {r["reward"] for r in rows} == {0.0, 1.0} and all(r["problem_id"] == "q0" for r in rows)


def test_logged_trajectories_carry_the_exact_tokens_and_the_roc_decision(tmp_path):
    groups = _groups({"q0": [True, False] * 4})
    cfg = _cfg(**{"logging.log_trajectories": "true", "output_dir": str(tmp_path)})
    fn = RocRolloutFunc(cfg, PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    fn(["problem 0"] * 4, _trainer(6))
    rows = [json.loads(x) for x in (tmp_path / "trajectories" / "step_00007_rank0.jsonl").read_text().splitlines()]
    sampled = fn.last.trajectories
    for row, traj in zip(rows, sampled, strict=True):
        assert row["response_ids"] == list(traj.response_ids) and row["loss_mask"] == list(traj.loss_mask)
        assert row["prompt_ids"] == list(traj.prompt_ids)
        assert row["step"] == 7 and row["group"] == 0 and row["problem"] == "problem 0"
        assert row["selection"] == fn.last.selections[0].status and row["roc_mode"] == cfg.roc.mode
        assert [t["text"] for t in row["turns"]] == [t.text for t in traj.turns]


def test_plain_grpo_groups_are_not_reported_undersized():
    groups = _groups({"q0": [True, False] * 2})
    fn = RocRolloutFunc(
        _cfg(**{"roc.enabled": "false", "rollout.oversample": 1}), PROBLEMS, ListSource(groups), AnswerScorer(), PAD
    )
    out = fn(["problem 0"] * 4, _trainer())
    assert out[METRICS_KEY]["groups/undersized"] == 0.0


def test_vllm_source_does_not_unwrap_the_training_model():
    from tirl.train.rollout_func import AgentLoopSource

    class Boom:
        def __getattr__(self, name):
            raise AssertionError(f"the training model was touched ({name})")

    engine_calls = []
    src = AgentLoopSource(_cfg(), tokenizer=None)
    src._make_engine = lambda model, trainer: engine_calls.append(model) or object()  # type: ignore[method-assign]
    trainer = SimpleNamespace(
        args=SimpleNamespace(use_vllm=True), model_wrapped=Boom(), accelerator=Boom(), model=Boom()
    )

    src.runtime = SimpleNamespace(rollouts=lambda *args, **kwargs: [])  # no loop, no executor, no agent loop
    assert src.generate([], 2, seed=0, trainer=trainer) == []
    assert engine_calls == [None]


@pytest.mark.slow
def test_the_rl_scorer_verifies_on_the_runs_executor_not_a_second_pool(qwen_tokenizer):
    """build_trainer's default scorer sends symbolic comparisons to the rollout source's executor (a service URL
    in sandbox.backend means the service), on the source's own event loop."""
    import asyncio

    import tirl.reward.verifier as reward_verifier
    from tirl.reward.scorer import VerifierScorer
    from tirl.sandbox import LocalSandbox
    from tirl.train.rollout_func import AgentLoopSource

    class CountingExecutor:
        def __init__(self) -> None:
            self.inner = LocalSandbox(workers=1)
            self.requests = 0
            self.loops: set[int] = set()

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        async def run(self, request: Any) -> Any:
            self.requests += 1
            self.loops.add(id(asyncio.get_running_loop()))
            return await self.inner.run(request)

        async def run_batch(self, requests: Any) -> Any:
            return [await self.run(r) for r in requests]

    spy = CountingExecutor()
    config = load_config(None, ["sandbox.workers=1"])
    source = AgentLoopSource(config, qwen_tokenizer, executor_factory=lambda: spy)
    scorer = VerifierScorer(qwen_tokenizer, source.verify)
    answers = ["\\frac{2}{4}", "0.25", "7"]  # what the agent loop extracted from the model's turns
    trajectories = [SimpleNamespace(response_ids=[], final_answer=a) for a in answers]
    problem = Problem(id="p", problem="Half of one?", answer="\\frac{1}{2}")
    default_before = reward_verifier._default_executor
    try:
        scores = scorer.score(trajectories, [problem] * 3)
        run_loop = id(source.runtime._loop.loop)
    finally:
        source.close()
    assert [s.reward for s in scores] == [1.0, 0.0, 0.0]
    assert spy.requests >= 1  # the symbolic comparison ran on the run's executor
    assert spy.loops == {run_loop}  # on the run's event loop
    assert reward_verifier._default_executor is default_before  # no second, module-global pool was started


@pytest.mark.parametrize("rule", ["random", "roc_release", "roc_paper"])
def test_rollout_calls_the_configured_selection_rule(rule, tmp_path):
    from tirl.algo.roc import candidate
    from tirl.algo.selection import apply_rule

    groups = _groups({"q0": [True, False, True, True, False, True, True, False]})
    cfg = _cfg(**{"roc.rule": rule, "logging.log_trajectories": "true", "output_dir": str(tmp_path)})
    fn = RocRolloutFunc(cfg, PROBLEMS, ListSource(groups), AnswerScorer(), PAD)
    fn(["problem 0"] * 4, _trainer(2))
    assert fn.source.asked == [(["q0"], 8)]
    # the same rule on the same candidates with the rollout's own rng gives the same kept set
    cands = [candidate(t, 1.0 if t.final_answer == "ok" else 0.0, cfg.roc) for t in fn.last.trajectories]
    expected = apply_rule(rule, cands, 4, fn._rng(2, "q0"), cfg.roc).indices
    assert fn.last.slot_sources == expected
    if rule == "roc_release":  # positives 0, 2, 3, 5, 6 (odd ones have a failing call): quotas 2/2, the first two
        assert expected == [0, 1, 2, 4]  # error-free positives and the first two negatives
    rows = [json.loads(x) for x in (tmp_path / "trajectories" / "step_00003_rank0.jsonl").read_text().splitlines()]
    assert {r["rule"] for r in rows} == {rule}
    assert [r["sample"] for r in rows if r["kept"]] == expected


def test_rule_all_samples_g_and_keeps_them():
    groups = _groups({"q0": [True, False, False, True, True, True, True, True]})
    fn = RocRolloutFunc(
        _cfg(**{"roc.rule": "all", "rollout.oversample": 1}), PROBLEMS, ListSource(groups), AnswerScorer(), PAD
    )
    fn(["problem 0"] * 4, _trainer())
    assert fn.source.asked == [(["q0"], 4)] and fn.last.slot_sources == [0, 1, 2, 3]


def test_outcome_metrics_count_statuses_finish_reasons_and_tool_seconds():
    from tirl.algo.metrics import COUNTED_STATUSES, outcome_metrics

    trajs = [_traj([1], True, calls=2), _traj([1], False, calls=1, finish="max_turns"), _traj([1], False, calls=0)]
    m = outcome_metrics(trajs, ["ok", "timeout", "timeout"])
    assert m["time/tool_exec_s"] == 1.5  # 3 calls of 0.5 s
    assert m["verify/timeout"] == 2.0
    assert all(m[f"verify/{s}"] == 0.0 for s in COUNTED_STATUSES if s != "timeout")
    assert "verify/ok" not in m  # a plain verdict is not counted
    assert m["finish/answer"] == 2 / 3 and m["finish/max_turns"] == 1 / 3
    assert outcome_metrics([], [])["finish/answer"] == 0.0  # no trajectory: no division by zero


def _with_turns(traj: Trajectory, turns: int) -> Trajectory:
    """``traj`` with plain model turns added before its answer turn, up to ``turns`` turns."""
    traj.turns[-1:-1] = [TurnRecord(text="") for _ in range(turns - len(traj.turns))]
    return traj


def test_trained_vs_sampled_distribution_at_k_0_is_the_roc_kept_subset():
    """RoC keeps the short, error-free positives: the step reports the trained (kept) distribution of length,
    turns and tool calls beside the sampled one, so the bias towards short trajectories is visible."""
    prompt = [1, 10]
    trajs = (
        [_traj(prompt, True, errors=0, calls=1, length=12) for _ in range(2)]  # 10 model tokens, 2 turns, 1 call
        + [_with_turns(_traj(prompt, True, errors=2, calls=3, length=32), 4) for _ in range(2)]  # 30, 4 turns, 3
        + [_traj(prompt, False, calls=1, length=8) for _ in range(4)]  # 6 model tokens, 2 turns, 1 call
    )
    fn = RocRolloutFunc(_cfg(**{"roc.mode": "topk"}), PROBLEMS, ListSource({"q0": trajs}), AnswerScorer(), PAD)
    m = fn(["problem 0"] * 4, _trainer())[METRICS_KEY]
    sel = fn.last.selections[0]
    assert sel.kept_pos == 2 and sel.kept_neg == 2 and sel.indices[:2] == [0, 1]  # the two error-free positives
    # sampled: lengths 10 10 30 30 6 6 6 6; trained: 10 10 6 6
    assert (m["length/mean"], m["length/p90"]) == (13.0, 30.0)  # p90 at position 6.3 of 8 sorted
    assert (m["length/kept_mean"], m["length/kept_p90"]) == (8.0, 10.0)  # p90 at position 2.7 of 4
    assert (m["turns/mean"], m["turns/kept_mean"]) == (20 / 8, 2.0)
    assert (m["tool_calls/per_traj"], m["tool_calls/kept_per_traj"]) == (12 / 8, 1.0)


def test_a_kept_trajectory_without_a_model_token_is_not_in_the_trained_distribution():
    from tirl.algo.metrics import step_metrics
    from tirl.algo.roc import Candidate, Selection

    long_one = _with_turns(_traj([1], True, calls=2, length=22), 3)  # 20 model tokens, 3 turns, 2 calls
    short = _traj([1], False, calls=0, length=4)  # 4 model tokens (no tool segment without a call), 2 turns
    empty = Trajectory(prompt_ids=[1], finish_reason="eos")  # kept by the rule, a masked placeholder in training
    group = [long_one, short, empty, short, long_one, short]  # two groups of three
    m = step_metrics(
        group,
        [1.0, 0.0, 0.0, 0.0, 1.0, 0.0],
        [Candidate(reward=r) for r in (1.0, 0.0, 0.0, 0.0, 1.0, 0.0)],
        2,
        [Selection(indices=[1, 2]), Selection(indices=[0, 1])],  # trained: short (group 0), long_one and short
    )
    assert m["length/kept_mean"] == pytest.approx((4 + 20 + 4) / 3)
    assert m["turns/kept_mean"] == pytest.approx((2 + 3 + 2) / 3)
    assert m["tool_calls/kept_per_traj"] == pytest.approx(2 / 3)
    assert m["length/mean"] == pytest.approx((20 + 4 + 0 + 4 + 20 + 4) / 6)  # sampled: the empty one counts
    assert m["turns/mean"] == pytest.approx((3 + 2 + 0 + 2 + 3 + 2) / 6)
    # nothing kept (every group dropped): zeros, not a division by zero
    none = step_metrics([short], [0.0], [Candidate(reward=0.0)], 1, [Selection(indices=[], status="empty")])
    assert none["length/kept_mean"] == none["length/kept_p90"] == none["turns/kept_mean"] == 0.0
