"""Infrastructure failures never become rewards: masking in the rollout function, RoC's error penalty, and the
trainer's inputs when a sandbox answers 20 % of calls ``internal`` and a verifier crashes on some answers."""

from __future__ import annotations

from typing import Any

import pytest

from tirl.algo.advantages import group_advantages
from tirl.algo.infra import infra_cause, masked_metrics
from tirl.algo.roc import p_err
from tirl.data.problem import Problem
from tirl.protocol import ToolCall, ToolCallRecord, Trajectory, TurnRecord
from tirl.reward.scorer import Score
from tirl.rollout.engine import GenerationOutput, SamplingParams
from tirl.sandbox import ExecutionResult
from tirl.train.config import load_config
from tirl.train.rollout_func import ADVANTAGE_KEY, METRICS_KEY, REWARD_KEY, RocRolloutFunc

PAD = 2


def _rec(status: str) -> ToolCallRecord:
    cls = {"ok": "ok", "timeout": "timeout"}.get(status, "error")
    return ToolCallRecord(
        call=ToolCall(name="f", arguments={"code": "x"}), result=ExecutionResult(status=status), cls=cls
    )  # type: ignore[arg-type]


def _traj(k: int, statuses: list[str], correct: bool, finish: str = "answer") -> Trajectory:
    ids = [100 + k, 101, 102, 103]
    return Trajectory(
        prompt_ids=[1, 10],
        response_ids=ids,
        loss_mask=[1, 0, 0, 1],
        logprobs=[-0.5] * 4,
        turns=[TurnRecord(text="", tool_calls=[_rec(s) for s in statuses]), TurnRecord(text="", answer_blocks=1)],
        final_answer="ok" if correct else "bad",
        finish_reason=finish,
        metadata={"k": k},
    )


def test_causes_and_the_models_own_errors():
    assert infra_cause(_traj(0, ["ok", "internal"], True)) == "tool_internal"
    assert infra_cause(_traj(0, ["error", "timeout", "killed"], True)) is None  # the model's programs
    assert infra_cause(_traj(0, [], True, finish="error")) == "engine"
    assert infra_cause(_traj(0, ["ok"], True), "verifier_error") == "verifier"
    assert infra_cause(_traj(0, ["ok"], True), "timeout") == "verifier"
    assert infra_cause(_traj(0, ["ok"], True), "timeout", mask_verifier_timeouts=False) is None
    assert infra_cause(_traj(0, ["ok"], True), "answer_timeout") is None  # the answer's doing: never masked
    assert infra_cause(_traj(0, ["ok"], True), "no_answer") is None
    m = masked_metrics(["tool_internal", None, "verifier", None])
    assert m["infra/masked"] == 2 and m["infra/masked_share"] == 0.5 and m["infra/masked_engine"] == 0


def test_roc_error_penalty_counts_only_the_models_errors():
    assert p_err(_traj(0, ["ok", "internal"], True)) == 0.0
    assert p_err(_traj(0, ["error", "internal", "ok"], True)) == 0.5
    assert p_err(_traj(0, ["internal"], True)) == 0.0
    assert p_err(_traj(0, [], True)) == 0.5  # no call at all: the paper's rule, unchanged


class ListSource:
    def __init__(self, trajs: list[Trajectory]) -> None:
        self.trajs = trajs

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
        return self.trajs[: len(problems) * n]


class Scorer:
    """Correct when ``final_answer == "ok"``; the verifier crashes on the samples named in ``crash``."""

    def __init__(self, crash: set[int]) -> None:
        self.crash = crash

    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        return [
            Score(0.0, "verifier_error")
            if t.metadata["k"] in self.crash
            else Score(1.0 if t.final_answer == "ok" else 0.0)
            for t in trajectories
        ]


@pytest.mark.parametrize("roc", [True, False])
def test_masked_trajectories_are_never_kept_and_out_of_the_group_statistics(roc):
    from types import SimpleNamespace

    # 8 samples of one problem: 0, 3 touched by an internal call, 5 graded by a crashing verifier
    statuses = [["internal"], ["ok"], ["error"], ["ok", "internal"], ["ok"], ["ok"], ["ok"], ["timeout"]]
    correct = [True, True, False, True, False, True, False, False]
    trajs = [_traj(k, s, c) for k, (s, c) in enumerate(zip(statuses, correct))]
    g = 4 if roc else 8
    cfg = load_config(
        None,
        [
            f"rollout.group_size={g}",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            "problems_per_step=1",
            f"optim.per_device_train_batch_size={g}",
            f"roc.enabled={str(roc).lower()}",
        ],
    )
    problem = Problem(id="q0", problem="problem 0", answer="1")
    fn = RocRolloutFunc(cfg, [problem], ListSource(trajs), Scorer(crash={5}), PAD)
    trainer = SimpleNamespace(state=SimpleNamespace(global_step=0), accelerator=SimpleNamespace(process_index=0))
    out = fn(["problem 0"] * g, trainer)
    masked = {0, 3, 5}
    sources = fn.last.slot_sources
    assert not masked & {s for s in sources if s is not None}
    for slot, src in enumerate(sources):
        if src is None:  # a placeholder: nothing to train on
            assert out["env_mask"][slot] == [0] and out[ADVANTAGE_KEY][slot] == 0.0
            assert out[REWARD_KEY][slot] is None
    kept = [s for s in sources if s is not None]
    expected = group_advantages([1.0 if trajs[s].final_answer == "ok" else 0.0 for s in kept])
    assert [out[ADVANTAGE_KEY][i] for i, s in enumerate(sources) if s is not None] == pytest.approx(expected)
    metrics = out[METRICS_KEY]
    assert metrics["infra/masked"] == 3 and metrics["infra/masked_tool_internal"] == 2
    assert metrics["infra/masked_verifier"] == 1
    assert metrics["reward/mean"] == pytest.approx(1 / 5)  # over the 5 unmasked (1, 2, 4, 6, 7): only 1 correct
    if not roc:
        assert sources.count(None) == 3  # plain GRPO keeps all 8: the 3 masked slots are placeholders


# ---------------------------------------------------------------------------------------------------------------
# through the trainer: the agent loop on a sandbox that answers every 5th call internal

TOOL_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(6*7)", "input": ""}}\n'
    "</tool_call><|im_end|>"
)
PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(2)]


class CyclingEngine:
    """Turn 1: a tool call; turn 2: the answer 42, 41 or 40 in turn (one correct in three)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer
        self.n = 0

    def set_model(self, model: Any) -> None:
        pass

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        text = self.tok.decode(prompt_ids, skip_special_tokens=False)
        if "<tool_response>" not in text.rsplit("<|im_start|>user", 1)[-1]:
            ids = self.tok.encode(TOOL_TURN, add_special_tokens=False)
        else:
            answer = 42 - self.n % 3
            self.n += 1
            ids = self.tok.encode(
                f"So {answer}.</reason>\n<answer>\\boxed{{{answer}}}</answer><|im_end|>", add_special_tokens=False
            )
        ids = ids[: params.max_new_tokens]
        return GenerationOutput(token_ids=list(ids), logprobs=[-0.5] * len(ids))

    async def aclose(self) -> None:
        pass


class FlakySandbox:
    """Answers the start-up check, then, with trajectories run one at a time: call 10k+3 ``internal`` once (a
    worker that died: its retry succeeds) and calls 10k+5 to 10k+7 ``internal`` (an outage that takes the retry
    and the control call with it); the others ``ok``."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, request: Any) -> ExecutionResult:
        self.calls += 1
        if self.calls > 1 and self.calls % 10 in (3, 5, 6, 7):
            return ExecutionResult(status="internal", stderr="worker died", request_id=request.request_id)
        return ExecutionResult(status="ok", stdout="42\n", request_id=request.request_id)

    async def run_batch(self, requests: Any) -> list[ExecutionResult]:
        return [await self.run(r) for r in requests]

    async def aclose(self) -> None:
        pass


@pytest.mark.slow
def test_internal_calls_and_verifier_crashes_give_no_gradient(tmp_path, tiny_smollm2_model_dir):
    from tirl.models import load_tokenizer
    from tirl.reward.scorer import VerifierScorer
    from tirl.reward.types import Verdict
    from tirl.train.rl import build_trainer
    from tirl.train.rollout_func import AgentLoopSource

    config = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            f"model.name_or_path={tiny_smollm2_model_dir}",
            "model.dtype=float32",
            "max_steps=1",
            "problems_per_step=2",
            "save_steps=10",
            "rollout.group_size=4",
            "roc.enabled=false",
            "rollout.oversample=1",
            "rollout.max_turns=3",
            "rollout.max_response_tokens=128",
            "rollout.max_concurrency=1",  # one trajectory at a time: FlakySandbox's outages fall on known calls
            "optim.per_device_train_batch_size=4",
            "optim.warmup_steps=0",
            "logging.console=false",
            "watchdog.enabled=false",
        ],
    )
    tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
    source = AgentLoopSource(
        config, tokenizer, executor_factory=FlakySandbox, engine_factory=lambda model: CyclingEngine(tokenizer)
    )

    def crashing_verify(items: list[Any]) -> list[Any]:  # the verifier crashes on the answer 40
        verdicts = source.verify(items)
        return [
            Verdict(correct=False, status="verifier_error") if item.answer == "40" else v
            for item, v in zip(items, verdicts)
        ]

    run = build_trainer(
        config, problems=PROBLEMS, source=source, scorer=VerifierScorer(tokenizer, crashing_verify), num_processes=1
    )
    trainer = run.trainer
    captured: list[dict[str, Any]] = []
    original_loss = trainer.compute_loss

    def spy(model: Any, inputs: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        # what the trainer receives for a micro-batch, before tirl cuts the rows without gradient
        captured.append({k: v.detach().clone() for k, v in inputs.items() if hasattr(v, "detach")})
        return original_loss(model, inputs, *args, **kwargs)

    trainer.compute_loss = spy
    try:
        trainer.train()
    finally:
        run.close()
    last = run.rollout.last
    causes = last.infra
    assert "tool_internal" in causes and "verifier" in causes and None in causes  # some touched, not all
    assert all(
        (c == "tool_internal") == any(r.result.status == "internal" for r in t.tool_call_records)
        for t, c in zip(last.trajectories, causes)
    )
    masked_ids = {tuple(t.response_ids) for t, c in zip(last.trajectories, causes) if c}
    rows = placeholders = 0
    for batch in captured:
        for comp, cmask, tmask, adv in zip(
            batch["completion_ids"], batch["completion_mask"], batch["tool_mask"], batch["advantages"]
        ):
            ids = tuple(comp[cmask.bool()].tolist())
            trained = int((cmask * tmask).sum())
            if len(ids) <= 1:  # a placeholder: no token in the loss, no advantage
                placeholders += 1
                assert trained == 0 and float(adv) == 0.0
                continue
            rows += 1
            assert trained > 0
    assert placeholders == sum(c is not None for c in causes) and rows == len(causes) - placeholders
    # what reached the loss came from unmasked trajectories only
    trained = {tuple(c[m.bool()].tolist()) for b in captured for c, m in zip(b["completion_ids"], b["completion_mask"])}
    assert not (trained & masked_ids)
    from tirl.runs.metrics import read_metrics

    (record,) = [r for r in read_metrics(tmp_path) if "tirl/reward/mean" in r]
    assert record["tirl/infra/masked"] == sum(c is not None for c in causes)
    assert record["tirl/infra/masked_tool_internal"] == causes.count("tool_internal") >= 1
    assert record["tirl/infra/masked_verifier"] >= 1
    # the lone failures were retried and answered (nothing masked for them); the outages' controls failed too
    assert record["tirl/infra/recovered_tool"] >= 1 and record["tirl/infra/charged_tool"] == 0
    for t, c in zip(last.trajectories, causes):
        assert (t.metadata["controls"]["tool_masked"] > 0) == (c == "tool_internal")


def test_eval_reports_infrastructure_failures_apart_from_the_models():
    from rich.console import Console

    from tirl.eval.metrics import SampleOutcome, summarize
    from tirl.eval.report import summary_table

    outcomes = [
        SampleOutcome("a", 0, True),
        SampleOutcome("a", 1, False, tool_classes=["error"], tool_internal_errors=1),  # the sandbox's
        SampleOutcome("b", 0, False, finish_reason="error"),  # the engine's
        SampleOutcome("b", 1, False, verdict_status="verifier_error"),  # the verifier's
        SampleOutcome("c", 0, False, tool_classes=["error", "parse_error"]),  # the model's own
        SampleOutcome("c", 1, False, verdict_status="no_answer"),  # the model's own
    ]
    s = summarize("bench", outcomes)
    assert s.infra_failures == {"engine": 1, "tool_internal": 1, "verifier": 1}
    assert s.to_dict()["infra_failures"] == {"engine": 1, "tool_internal": 1, "verifier": 1}
    console = Console(width=200, record=True)
    console.print(summary_table([s]))
    text = console.export_text()
    assert "failed by tirl, not the model (engine/tool/verifier)" in text and "1/1/1" in text
    clean = summarize("bench", [SampleOutcome("a", 0, True), SampleOutcome("a", 1, False)])
    console = Console(width=200, record=True)
    console.print(summary_table([clean]))
    assert "failed by tirl" not in console.export_text()  # the row appears only when something failed
