"""The RL watch-dog: warnings, then a clean stop, when the sandbox fails, tool use collapses or the context is
too small; and the context window on the training path."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from tirl.data.problem import Problem
from tirl.rollout.engine import GenerationOutput, SamplingParams
from tirl.sandbox.types import ExecutionResult
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from tirl.train.watchdog import RunStopped, RunWatchdog, WatchdogConfig

TOOL_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(6*7)", "input": ""}}\n'
    "</tool_call><|im_end|>"
)
ANSWER_TURN = "It is 42.</reason>\n<answer>\\boxed{42}</answer><|im_end|>"
PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]


# ---------------------------------------------------------------------------------------------------------------
# the pure watch-dog


def test_one_bad_step_warns_but_does_not_stop(caplog):
    dog = RunWatchdog(WatchdogConfig(patience=3))
    with caplog.at_level(logging.WARNING, logger="tirl.train.watchdog"):
        alarms = dog.observe(
            1,
            {"tool_calls/per_traj": 1.0, "tool_calls/error_rate": 1.0, "tool_calls/count": 8, "tool_calls/internal": 8},
        )
    assert [a.kind for a in alarms] == ["tool_errors"]
    assert dog.stop_reason is None
    assert "answered internal by the sandbox" in caplog.text and "1 of 3" in caplog.text


def test_patience_consecutive_bad_steps_stop_the_run():
    dog = RunWatchdog(WatchdogConfig(patience=3))
    for step in (1, 2, 3):
        dog.observe(step, {"tool_calls/per_traj": 0.0})
    assert dog.stop_reason is not None
    assert "step 3" in dog.stop_reason and "watchdog.min_tool_calls_per_traj" in dog.stop_reason


def test_a_model_that_never_called_the_tool_is_not_collapsing(caplog):
    dog = RunWatchdog(WatchdogConfig(patience=3))
    with caplog.at_level(logging.WARNING, logger="tirl.train.watchdog"):
        dog.observe(1, {"tool_calls/per_traj": 0.0})
    assert "collapsing" not in caplog.text
    assert "does not call the tool" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="tirl.train.watchdog"):
        dog.observe(2, {"tool_calls/per_traj": 1.5})
        dog.observe(3, {"tool_calls/per_traj": 0.0})
    assert "tool use is collapsing" in caplog.text  # it had used the tool at step 2


def test_one_parse_error_among_four_trajectories_does_not_blame_the_sandbox(caplog):
    dog = RunWatchdog(WatchdogConfig(patience=3))
    with caplog.at_level(logging.WARNING, logger="tirl.train.watchdog"):
        alarms = dog.observe(
            1,
            {
                "tool_calls/per_traj": 0.25,
                "tool_calls/error_rate": 1.0,
                "tool_calls/count": 1,
                "tool_calls/internal": 0,
            },
        )
    assert alarms == [] and "sandbox" not in caplog.text
    # many failing calls of the model's own are its programs, not the sandbox
    alarms = dog.check(
        {"tool_calls/per_traj": 2.0, "tool_calls/error_rate": 1.0, "tool_calls/count": 16, "tool_calls/internal": 0}
    )
    assert [a.kind for a in alarms] == ["tool_errors"] and "down" not in alarms[0].message
    assert "not the sandbox" in alarms[0].message


def test_messages_name_only_real_recipe_keys(caplog):
    from dataclasses import fields

    from tirl.train.watchdog import RECIPE_KEYS

    keys = {f.name for f in fields(WatchdogConfig)}
    assert set(RECIPE_KEYS.values()) <= keys
    import re

    fired: set[str] = set()
    for per_traj in (0.0, 2.0):
        dog = RunWatchdog(WatchdogConfig(patience=1))
        with caplog.at_level(logging.WARNING, logger="tirl.train.watchdog"):
            dog.observe(
                1,
                {
                    "tool_calls/per_traj": per_traj,
                    "tool_calls/error_rate": 1.0,
                    "tool_calls/count": 9,
                    "tool_calls/internal": 9,
                    "finish/context": 1.0,
                    "finish/error": 1.0,
                    "infra/masked_share": 1.0,
                    "infra/masked_tool_internal": 4.0,
                },
            )
        named = set(re.findall(r"watchdog\.(\w+)", " ".join(caplog.messages) + (dog.stop_reason or "")))
        assert named and named <= keys, named - keys
        fired |= set(dog.streaks)
    assert fired == set(RECIPE_KEYS)  # every condition's messages were read


def test_masked_share_above_the_limit_stops_the_run():
    dog = RunWatchdog(WatchdogConfig(patience=2, max_masked_share=0.2))
    assert dog.check({"infra/masked_share": 0.2}) == []
    dog.observe(1, {"infra/masked_share": 0.5, "infra/masked_tool_internal": 2.0, "infra/masked_verifier": 0.0})
    dog.observe(2, {"infra/masked_share": 0.5, "infra/masked_tool_internal": 2.0, "infra/masked_verifier": 0.0})
    assert dog.stop_reason is not None and "watchdog.max_masked_share" in dog.stop_reason
    assert "tool internal 2" in dog.stop_reason


def test_a_good_step_resets_the_streak():
    dog = RunWatchdog(WatchdogConfig(patience=2))
    dog.observe(1, {"tool_calls/per_traj": 0.0})
    dog.observe(2, {"tool_calls/per_traj": 1.5})
    dog.observe(3, {"tool_calls/per_traj": 0.0})
    assert dog.stop_reason is None
    dog.observe(4, {"tool_calls/per_traj": 0.0})
    assert dog.stop_reason is not None


def test_error_rate_without_any_call_is_not_a_sandbox_alarm():
    dog = RunWatchdog(WatchdogConfig(min_tool_calls_per_traj=-1.0 + 1.0))
    kinds = {a.kind for a in dog.check({"tool_calls/per_traj": 0.0, "tool_calls/error_rate": 0.0})}
    assert "tool_errors" not in kinds


def test_context_alarm_over_the_limit_only():
    dog = RunWatchdog(WatchdogConfig(max_context_rate=0.5))
    assert [a.kind for a in dog.check({"finish/context": 0.75})] == ["context"]
    assert dog.check({"finish/context": 0.5}) == []


def test_disabled_watchdog_never_stops():
    dog = RunWatchdog(WatchdogConfig(enabled=False, patience=1))
    dog.observe(1, {"tool_calls/per_traj": 0.0, "tool_calls/error_rate": 1.0, "finish/context": 1.0})
    assert dog.stop_reason is None


@pytest.mark.parametrize(
    "override", ["watchdog.patience=0", "watchdog.max_tool_error_rate=1.5", "rollout.context_window=1"]
)
def test_bad_watchdog_settings_are_rejected(override):
    config = load_config(None, [override])
    with pytest.raises(ValueError):
        config.validate()


# ---------------------------------------------------------------------------------------------------------------
# end to end on the tiny model: the run stops itself


class ScriptedEngine:
    """Turn 1: a tool call (or, with ``call_tools=False``, the answer); later turns: the answer."""

    def __init__(self, tokenizer: Any, call_tools: bool) -> None:
        self.call_tools = call_tools
        self.tool_ids = tokenizer.encode(TOOL_TURN, add_special_tokens=False)
        self.answer_ids = tokenizer.encode(ANSWER_TURN, add_special_tokens=False)
        self.tokenizer = tokenizer
        self.prompt_lengths: list[int] = []

    def set_model(self, model: Any) -> None:
        pass

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        self.prompt_lengths.append(len(prompt_ids))
        text = self.tokenizer.decode(prompt_ids, skip_special_tokens=False)
        first_turn = "<tool_response>" not in text.rsplit("<|im_start|>user", 1)[-1]
        ids = self.tool_ids if (first_turn and self.call_tools) else self.answer_ids
        ids = ids[: params.max_new_tokens]
        return GenerationOutput(token_ids=list(ids), logprobs=[-0.5] * len(ids))

    async def aclose(self) -> None:
        pass


class FailingSandbox:
    """Passes the start-up health check, then fails every call as the infrastructure's fault."""

    def __init__(self) -> None:
        self.calls = 0

    async def run(self, request: Any) -> ExecutionResult:
        self.calls += 1
        if self.calls == 1:
            return ExecutionResult(status="ok", stdout="42\n", request_id=request.request_id)
        return ExecutionResult(status="internal", stderr="sandbox worker pool is gone", request_id=request.request_id)

    async def run_batch(self, requests: Any) -> list[ExecutionResult]:
        return [await self.run(r) for r in requests]

    async def aclose(self) -> None:
        pass


def _run(tmp: Path, model_dir: Path, *, call_tools: bool, sandbox_factory: Any, extra: list[str] = ()):
    from tirl.models import load_tokenizer
    from tirl.reward.scorer import VerifierScorer
    from tirl.train.rl import train

    config = load_config(
        None,
        [
            f"output_dir={tmp}",
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            "max_steps=6",
            "problems_per_step=2",
            "save_steps=10",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "rollout.max_turns=3",
            "rollout.max_response_tokens=128",
            "optim.per_device_train_batch_size=2",
            "optim.warmup_steps=0",
            "roc.min_per_class=1",
            "logging.console=false",
            "watchdog.patience=2",
            *extra,
        ],
    )
    tokenizer = load_tokenizer(str(model_dir))
    holder: dict[str, Any] = {}

    def engine_factory(model: Any) -> Any:
        holder["engine"] = ScriptedEngine(tokenizer, call_tools)
        return holder["engine"]

    source = AgentLoopSource(config, tokenizer, executor_factory=sandbox_factory, engine_factory=engine_factory)
    return train, config, source, VerifierScorer(tokenizer, source.verify), holder


@pytest.mark.slow(seconds=30)
def test_a_sandbox_that_fails_every_call_stops_the_run_with_a_checkpoint(tmp_path, tiny_smollm2_model_dir):
    train, config, source, scorer, _ = _run(
        tmp_path, tiny_smollm2_model_dir, call_tools=True, sandbox_factory=FailingSandbox
    )
    with pytest.raises(RunStopped, match="tool calls failed"):
        train(config, problems=PROBLEMS, source=source, scorer=scorer, num_processes=1)
    assert (tmp_path / "checkpoint-2").is_dir()  # saved at the stopping step although save_steps=10
    assert not (tmp_path / "checkpoint-3").exists()
    assert not (tmp_path / "final").exists()


@pytest.mark.slow
def test_a_policy_that_stops_calling_tools_stops_the_run(tmp_path, tiny_smollm2_model_dir):
    from tirl.sandbox import LocalSandbox

    train, config, source, scorer, _ = _run(
        tmp_path, tiny_smollm2_model_dir, call_tools=False, sandbox_factory=lambda: LocalSandbox(workers=1)
    )
    with pytest.raises(RunStopped, match="does not call the tool"):
        train(config, problems=PROBLEMS, source=source, scorer=scorer, num_processes=1)
    assert (tmp_path / "checkpoint-2").is_dir()


@pytest.mark.slow
def test_the_training_path_bounds_trajectories_by_the_context_window(tmp_path, tiny_smollm2_model_dir):
    """With a context window just above the prompt, the tool call's response does not fit: the trajectories end
    with finish reason ``context`` and the watch-dog stops the run for it."""
    from tirl.models import load_tokenizer
    from tirl.protocol import render_prompt_ids
    from tirl.sandbox import LocalSandbox

    tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
    prompt_len = max(len(render_prompt_ids(tokenizer, p.problem)) for p in PROBLEMS)
    window = prompt_len + len(tokenizer.encode(TOOL_TURN, add_special_tokens=False)) + 2
    train, config, source, scorer, _ = _run(
        tmp_path,
        tiny_smollm2_model_dir,
        call_tools=True,
        sandbox_factory=lambda: LocalSandbox(workers=1),
        extra=[f"rollout.context_window={window}"],
    )
    with pytest.raises(RunStopped, match="context window"):
        train(config, problems=PROBLEMS, source=source, scorer=scorer, num_processes=1)
    assert source.context_window == window


def test_the_trainer_gives_the_rollout_the_models_context_window_by_default(tmp_path, tiny_smollm2_model_dir):
    from transformers import AutoConfig

    from tirl.models import load_tokenizer
    from tirl.train.rl import build_trainer

    config = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            f"model.name_or_path={tiny_smollm2_model_dir}",
            "model.dtype=float32",
            "problems_per_step=2",
            "rollout.group_size=2",
            "optim.per_device_train_batch_size=2",
            "roc.min_per_class=1",
        ],
    )
    run = build_trainer(config, problems=PROBLEMS, num_processes=1)
    try:
        expected = AutoConfig.from_pretrained(str(tiny_smollm2_model_dir)).max_position_embeddings
        assert run.rollout.source.context_window == expected
        assert run.rollout.source._agent_config().context_window == expected
    finally:
        run.close()
    assert load_tokenizer(str(tiny_smollm2_model_dir)) is not None


def test_engine_failures_are_an_alarm():
    dog = RunWatchdog(WatchdogConfig(patience=1))
    dog.observe(1, {"finish/error": 1.0, "tool_calls/per_traj": 1.0})
    assert dog.stop_reason is not None and "engine" in dog.stop_reason
