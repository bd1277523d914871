"""The main job's logic (tirl.eval.demo): each row in its own evaluation mode (the base model's chain of thought
beside the trained models with the tool), the rows side by side, progress visible off a terminal."""

from __future__ import annotations

import asyncio
import io
import json

import pytest
from rich.console import Console

from tirl.cli.eval_display import ConsoleListener
from tirl.eval.demo import (
    BASE_MODEL,
    DEFAULT_ROWS,
    SFT_MODEL,
    TRAINED_MODEL,
    DemoRow,
    DemoSettings,
    comparison_table,
    demo_configs,
    demo_title,
    run_demo,
)
from tirl.eval.metrics import SampleOutcome, summarize
from tirl.eval.modes import get_mode
from tirl.eval.runner import EvalResult
from tirl.models.trained import trained_models
from tirl.protocol.config import COT_INSTRUCTION
from tirl.protocol.render import render_prompt_text

PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell altogether?"
MATH_MODEL = "qwen2.5-coder-0.5b-tirl-math"  # issue 43's real-math model: not packaged yet


def test_default_demo_puts_the_base_models_chain_of_thought_beside_the_trained_models_with_the_tool(tmp_path):
    configs = demo_configs(tmp_path)
    assert [c.model for c in configs] == [BASE_MODEL, SFT_MODEL, TRAINED_MODEL]
    assert [c.out_dir.name for c in configs] == ["base-cot", "tirl-sft-tool", "tirl-rl-tool"]
    assert {SFT_MODEL, TRAINED_MODEL} <= set(trained_models())  # both ship inside the package
    base, *trained = configs
    # base-cot: the field's baseline, no tool, Qwen's sentence, nothing pre-filled, one turn
    assert base.protocol.prompt_style == "cot" and base.use_tools is False
    assert base.loop_config(None).tools_active is False
    assert base.protocol.baseline_instruction == COT_INSTRUCTION and base.protocol.prompt_prefill == ""
    assert base.rollout.max_turns == 1
    # the trained rows: the tool, in the compact format they were trained in, with tirl's prefill
    for config in trained:
        assert config.use_tools and config.loop_config(None).tools_active
        assert config.protocol.prompt_style == "compact" and config.protocol.prompt_prefill == "<reason>"
        assert config.rollout.max_turns == 3
    # every row: the same problems, samples and budget (only the mode differs)
    for config in configs:
        assert config.benchmarks == ["toolmath", "gsm8k", "math500"]
        assert config.subsets == {"toolmath": 20, "gsm8k": 30, "math500": 10}
        assert (config.samples, config.rollout.max_response_tokens, config.rollout.temperature) == (1, 768, 0.6)
    # one wave per row: the in-process engine batches statically
    assert all(c.concurrency >= sum(c.subsets.values()) * c.samples for c in configs)


def test_the_demo_rows_prompts_are_what_their_modes_promise(qwen_tokenizer, tmp_path):
    base, sft, _ = demo_configs(tmp_path)
    cot = render_prompt_text(qwen_tokenizer, PROBLEM, base.protocol, use_tools=base.use_tools)
    assert cot.endswith("<|im_start|>assistant\n")  # no prefill
    assert f"{PROBLEM}\n{COT_INSTRUCTION}<|im_end|>" in cot
    assert "<tools>" not in cot and "<tool_call>" not in cot and "<reason>" not in cot
    assert "You are Qwen, created by Alibaba Cloud." in cot  # the model's own template and system prompt
    tool = render_prompt_text(qwen_tokenizer, PROBLEM, sft.protocol, use_tools=sft.use_tools)
    assert tool.endswith("<|im_start|>assistant\n<reason>") and "<tool_call>" in tool
    assert COT_INSTRUCTION not in tool


def test_each_packaged_model_in_the_demo_is_evaluated_in_the_format_it_was_trained_in():
    packaged = trained_models()
    rows = [row for row in DEFAULT_ROWS if row.model in packaged]
    assert [row.model for row in rows] == [SFT_MODEL, TRAINED_MODEL]
    for row in rows:
        mode = get_mode(row.mode)
        assert mode.use_tools and mode.prompt_style == packaged[row.model].prompt_style, row
        assert row.label.endswith("-tool") and packaged[row.model].base == BASE_MODEL
    assert [row for row in DEFAULT_ROWS if row.model == BASE_MODEL] == [DemoRow("base-cot", BASE_MODEL, "cot")]
    # the real-math model is absent today; once it ships, the demo must show it (one row in DEFAULT_ROWS)
    assert (MATH_MODEL in packaged) is (MATH_MODEL in [row.model for row in DEFAULT_ROWS])


def test_a_new_row_is_one_line_and_bad_rows_are_refused(tmp_path):
    settings = DemoSettings(models=(*DEFAULT_ROWS, ("tirl-math-tool", "some/model", "tool-native")))
    assert settings.models[-1] == DemoRow("tirl-math-tool", "some/model", "tool-native")  # a plain tuple is a row
    new = demo_configs(tmp_path, settings)[-1]
    assert (new.protocol.prompt_style, new.use_tools, new.out_dir.name) == ("native", True, "tirl-math-tool")
    assert "tirl-math-tool = some/model, the Python tool in the model's own tool format" in demo_title(settings)
    with pytest.raises(ValueError, match="unknown evaluation mode 'tools'.*cot, tool-native"):
        DemoSettings(models=(("x", BASE_MODEL, "tools"),))
    with pytest.raises(ValueError, match="labels must differ"):
        DemoSettings(models=(("x", BASE_MODEL, "cot"), ("x", SFT_MODEL, "tool-compact")))
    with pytest.raises(ValueError, match="empty label"):
        DemoSettings(models=(("", BASE_MODEL, "cot"),))


def _result(benchmarks: list[str], correct: bool) -> EvalResult:
    summaries = [summarize(name, [SampleOutcome(f"{name}-1", 0, correct)]) for name in benchmarks]
    return EvalResult(summaries, {}, new_samples=0, resumed_samples=0, engine_errors=0, elapsed_s=0.0)


def test_the_comparison_table_shows_each_rows_label_and_the_title_its_mode():
    settings = DemoSettings()
    labels = [row.label for row in settings.models]
    names = [name for name, _ in settings.benchmarks]
    results = [_result(names, correct=i == 0) for i in range(len(labels))]
    out = io.StringIO()
    Console(file=out, width=400).print(comparison_table(results, labels, title=demo_title(settings)))
    text = out.getvalue()
    header = next(line for line in text.splitlines() if "toolmath base-cot" in line)
    columns = [f"{name} {label}" for name in names for label in labels]
    assert [header.index(col) for col in columns] == sorted(header.index(col) for col in columns)
    title = " ".join(text.split())
    assert f"base-cot = {BASE_MODEL}, chain of thought (the model's template, no tool)" in title
    assert f"tirl-rl-tool = {TRAINED_MODEL}, with the Python tool (tirl's format, compact prompt)" in title
    assert "768 tokens" in title


@pytest.mark.slow(seconds=30)
def test_demo_run_prints_progress_lines_and_a_side_by_side_table_off_a_terminal(tmp_path, tiny_model_dir):
    settings = DemoSettings(
        models=(("base-cot", str(tiny_model_dir), "cot"), ("tirl-tool", str(tiny_model_dir), "tool-compact")),
        benchmarks=(("toolmath", 2), ("math500", 1)),
        max_tokens=12,
        max_turns=1,
        concurrency=4,
    )
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=60)  # a narrow log must not wrap progress lines
    results, elapsed = asyncio.run(run_demo(tmp_path, settings, listener=lambda: ConsoleListener(console)))
    text = buffer.getvalue()
    progress = [line for line in text.splitlines() if "trajectories (" in line]
    assert any("0/3 trajectories (0%)" in line for line in progress)
    assert any("3/3 trajectories (100%)" in line and "ETA" in line for line in progress)
    assert elapsed > 0 and [r.summary["new_samples"] for r in results] == [3, 3]
    out = io.StringIO()
    Console(file=out, width=200).print(comparison_table(results, ["base-cot", "tirl-tool"]))
    header = next(line for line in out.getvalue().splitlines() if "toolmath" in line)
    columns = ("toolmath base-cot", "toolmath tirl-tool", "math500 base-cot", "math500 tirl-tool")
    order = [header.index(col) for col in columns]
    assert order == sorted(order)
    # each row ran in its own mode (run.json records it)
    runs = [json.loads((tmp_path / label / "run.json").read_text()) for label in ("base-cot", "tirl-tool")]
    assert [(r["use_tools"], r["protocol"]["prompt_style"]) for r in runs] == [(False, "cot"), (True, "compact")]
    # resumed: nothing new is generated the second time
    again, _ = asyncio.run(run_demo(tmp_path, settings))
    assert [r.new_samples for r in again] == [0, 0]
