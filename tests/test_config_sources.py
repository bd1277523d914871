"""One source of truth for the agent-loop settings: what a recipe or a command line sets is what the agent loop
runs with, and every default is the configuration dataclass's."""

from __future__ import annotations

import dataclasses
import types
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tirl.data.problem import Problem
from tirl.eval.config import EvalConfig
from tirl.protocol import ProtocolConfig
from tirl.protocol.render import render_prompt_ids
from tirl.rollout.agent_loop import AgentLoopConfig, AgentLoopSettings
from tirl.rollout.engine import GenerationOutput, SamplingParams
from tirl.runtime.sampler import SamplerConfig
from tirl.sandbox.types import ExecutionResult
from tirl.train.config import RolloutConfig, load_config
from tirl.train.rollout_func import AgentLoopSource

TOOL_CODE = "print(40 + 2)"
TOOL_TURN = (
    "Let me compute it.\n<tool_call>\n"
    '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(40 + 2)", "input": ""}}\n'
    "</tool_call><|im_end|>"
)
ANSWER_TURN = "It is 42.</reason>\n<answer>\\boxed{42}</answer><|im_end|>"


class RecordingEngine:
    """Turn 1 calls the tool, turn 2 answers; records the prompt ids of every call."""

    def __init__(self, tokenizer: Any) -> None:
        self.tool_ids = tokenizer.encode(TOOL_TURN, add_special_tokens=False)
        self.answer_ids = tokenizer.encode(ANSWER_TURN, add_special_tokens=False)
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        ids = self.answer_ids if self.prompts else self.tool_ids
        self.prompts.append(list(prompt_ids))
        return GenerationOutput(token_ids=list(ids), logprobs=[-0.5] * len(ids))

    async def aclose(self) -> None:
        pass


class RecordingExecutor:
    """Answers every call with ``42``; records the requests."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def run(self, request: Any) -> ExecutionResult:
        self.requests.append(request)
        return ExecutionResult(status="ok", stdout="42\n", exit_code=0, request_id=request.request_id)

    async def run_batch(self, requests: Any) -> list[ExecutionResult]:
        return [await self.run(r) for r in requests]

    async def aclose(self) -> None:
        pass


def test_protocol_and_tool_limits_of_an_rl_recipe_reach_the_agent_loop(tmp_path, smollm2_tokenizer):
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(
        "protocol:\n  prompt_style: compact\nrollout:\n  tool_timeout_s: 3.5\n  tool_memory_mb: 512\n  max_turns: 2\n"
    )
    config = load_config(recipe)
    tok = smollm2_tokenizer
    engines: list[RecordingEngine] = []
    executor = RecordingExecutor()

    def engine_factory(model: Any) -> RecordingEngine:
        engines.append(RecordingEngine(tok))
        return engines[-1]

    source = AgentLoopSource(config, tok, executor_factory=lambda: executor, engine_factory=engine_factory)
    problem = Problem(id="p0", problem="What is 40 plus 2?", answer="42")
    try:
        (traj,) = source.generate([problem], 1, seed=0, trainer=types.SimpleNamespace(model=None))
    finally:
        source.close()

    compact = render_prompt_ids(tok, problem.problem, ProtocolConfig(prompt_style="compact"))
    assert compact != render_prompt_ids(tok, problem.problem)  # the setting changes the prompt
    assert engines[0].prompts[0] == compact
    calls = [r for r in executor.requests if r.code == TOOL_CODE]  # not the start-up health check
    assert [(r.timeout_s, r.memory_mb) for r in calls] == [(3.5, 512)]
    assert traj.finish_reason == "answer" and len(engines[0].prompts) == 2


def test_rollout_settings_build_the_agent_loop_config_without_the_rl_only_fields():
    rollout = RolloutConfig(max_turns=7, tool_timeout_s=2.0, group_size=4, server_url="http://x")
    loop = rollout.agent_loop_config(ProtocolConfig(prompt_style="compact"), context_window=900)
    assert isinstance(loop, AgentLoopConfig) and not hasattr(loop, "group_size")
    assert (loop.max_turns, loop.tool_timeout_s, loop.context_window) == (7, 2.0, 900)
    assert loop.protocol.prompt_style == "compact" and loop.use_tools
    with pytest.raises(TypeError, match="group_size"):
        rollout.agent_loop_config(group_size=2)


def test_the_shared_settings_are_validated_wherever_they_appear():
    for cls in (AgentLoopSettings, AgentLoopConfig, RolloutConfig, SamplerConfig):
        with pytest.raises(ValueError, match="max_turns"):
            cls(max_turns=0)
    with pytest.raises(ValueError, match="max_turns"):
        load_config(None, ["rollout.max_turns=0"])


def test_the_data_sampler_samples_like_the_rl_rollout_by_default():
    shared = [f.name for f in dataclasses.fields(AgentLoopSettings)]
    sampler, rollout = SamplerConfig(), RolloutConfig()
    assert {n: getattr(sampler, n) for n in shared} == {n: getattr(rollout, n) for n in shared}
    assert (rollout.max_turns, rollout.max_response_tokens, rollout.temperature) == (10, 8192, 1.0)


def _capture_eval_config(monkeypatch) -> list[EvalConfig]:
    """Make ``tirl eval`` record its :class:`EvalConfig` instead of running it."""
    from tirl.cli import eval as cli_eval

    seen: list[EvalConfig] = []

    def run(config: EvalConfig, console: Any, progress: bool = True) -> Any:
        seen.append(config)
        return types.SimpleNamespace(new_samples=0, resumed_samples=0, elapsed_s=0.0)

    monkeypatch.setattr(cli_eval, "_run", run)
    return seen


def test_eval_cli_defaults_are_eval_configs(monkeypatch, tmp_path):
    from tirl.cli.main import app

    seen = _capture_eval_config(monkeypatch)
    out = tmp_path / "o"
    res = CliRunner().invoke(app, ["eval", "--model", "m", "--benchmarks", "aime24", "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    assert seen == [EvalConfig(model="m", benchmarks=["aime24"], out_dir=Path(out))]


def test_eval_cli_flags_reach_the_eval_config(monkeypatch, tmp_path):
    from tirl.cli.main import app

    seen = _capture_eval_config(monkeypatch)
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "-m",
            "m",
            "-b",
            "toolmath:3",
            "--out-dir",
            str(tmp_path),
            "--max-turns",
            "3",
            "--max-response-tokens",
            "512",
            "--tool-timeout-s",
            "4",
            "--max-concurrency",
            "5",
            "--prompt-style",
            "compact",
            "--temperature",
            "0.2",
        ],
    )
    assert res.exit_code == 0, res.output
    loop = seen[0].loop_config(context_window=2048)
    assert (loop.max_turns, loop.max_response_tokens, loop.tool_timeout_s, loop.max_concurrency) == (3, 512, 4.0, 5)
    assert (loop.temperature, loop.context_window, loop.protocol.prompt_style) == (0.2, 2048, "compact")
    assert seen[0].subsets == {"toolmath": 3}


def test_eval_resume_record_keeps_the_keys_of_existing_run_folders(tmp_path):
    config = EvalConfig(model="m", benchmarks=["aime24"], out_dir=tmp_path)
    assert config.resume_settings() == {
        "model": "m",
        "temperature": 0.6,
        "top_p": 1.0,
        "max_turns": 30,
        "max_tokens": 30720,
        "use_tools": True,
        "seed": 0,
        "tool_timeout_s": 10.0,
    }
    lower = EvalConfig(
        model="m", benchmarks=["aime24"], out_dir=tmp_path, rollout=AgentLoopSettings(tool_memory_mb=256)
    )
    assert lower.resume_settings()["tool_memory_mb"] == 256  # a different limit may change results: recorded


# ------------------------------------------------------------------------------------------------- tirl eval --config


def _eval(*args: str) -> Any:
    from tirl.cli.main import app

    return CliRunner().invoke(app, ["eval", *args])


def test_eval_config_file_sets_the_run_and_only_given_flags_override_it(monkeypatch, tmp_path):
    seen = _capture_eval_config(monkeypatch)
    path = tmp_path / "eval.yaml"
    path.write_text(
        "model: qwen2.5-coder-0.5b-tirl-sft\nbenchmarks: [toolmath:20, math500:10]\nsamples: 3\n"
        "rollout:\n  max_turns: 3\n  max_response_tokens: 512\n  tool_memory_mb: 1024\n"
        "protocol:\n  prompt_style: compact\n"
    )
    res = _eval("--config", str(path), "--samples", "5", "--tool-timeout-s", "2.5")
    assert res.exit_code == 0, res.output
    (config,) = seen
    assert (config.model, config.benchmarks, config.subsets) == (
        "qwen2.5-coder-0.5b-tirl-sft",
        ["toolmath", "math500"],
        {"toolmath": 20, "math500": 10},
    )
    assert config.samples == 5  # the flag wins
    loop = config.loop_config(context_window=None)
    # from the file (the flags' defaults, 30 turns and 30,720 tokens, do not override it), then the flag
    assert (loop.max_turns, loop.max_response_tokens, loop.tool_memory_mb, loop.tool_timeout_s) == (3, 512, 1024, 2.5)
    assert loop.protocol.prompt_style == "compact"
    assert config.out_dir == Path("runs/eval/qwen2.5-coder-0.5b-tirl-sft-tools")

    seen.clear()
    assert _eval("--config", str(path), "-b", "aime24").exit_code == 0
    assert (seen[0].benchmarks, seen[0].subsets) == (["aime24"], {})  # --benchmark replaces the file's NAME:N too


def test_eval_config_file_takes_an_rl_recipes_rollout_and_protocol_sections(tmp_path):
    import yaml

    from tirl.eval.config import load_eval_config

    recipe_path = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-toolmath-roc.yaml"
    recipe = yaml.safe_load(recipe_path.read_text())
    shared = {f.name for f in dataclasses.fields(AgentLoopSettings)}
    path = tmp_path / "eval.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "model": "m",
                "benchmarks": ["toolmath"],
                "protocol": recipe["protocol"],
                "rollout": {k: v for k, v in recipe["rollout"].items() if k in shared},
            }
        )
    )
    rl = load_config(recipe_path)
    evaluated = load_eval_config(path).loop_config(context_window=None)
    trained = rl.rollout.agent_loop_config(rl.protocol)
    assert dataclasses.replace(evaluated, max_concurrency=None) == trained


def test_eval_config_file_errors_are_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("rollout:\n  group_size: 4\n")
    res = _eval("--config", str(bad), "-m", "m", "-b", "aime24")
    assert res.exit_code == 2 and "unknown key(s) rollout.group_size" in res.output
    res = _eval("-b", "aime24")
    assert res.exit_code == 2 and "no model: give --model" in res.output
    res = _eval("--config", str(tmp_path / "missing.yaml"))
    assert res.exit_code == 2 and "no config file" in res.output


def test_eval_print_config_reads_back_as_the_same_run(tmp_path):
    from tirl.eval.config import load_eval_config

    res = _eval(
        "-m",
        "m",
        "-b",
        "toolmath:3,math500",
        "--prompt-style",
        "compact",
        "--max-turns",
        "4",
        "--no-use-tools",
        "--servers",
        "http://a,http://b",
        "--engine",
        "openai",
        "--kv-capacities",
        "1000",
        "--print-config",
    )
    assert res.exit_code == 0, res.output
    printed = tmp_path / "printed.yaml"
    printed.write_text(res.output)
    config = load_eval_config(printed)
    assert config.kv_capacities == [1000, 1000] and config.servers == ["http://a", "http://b"]
    assert config.subsets == {"toolmath": 3} and not config.use_tools and config.rollout.max_turns == 4
    assert config.out_dir == Path("runs/eval/m-no-tools")
    assert _eval("--config", str(printed), "--print-config").output == res.output
