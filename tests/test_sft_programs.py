"""The generated one-program SFT conversations (``programs:N``): they run, they say what they print, and they stay
away from the held-out toolmath task."""

from __future__ import annotations

import asyncio

import pytest

from tirl.data.sft import load_sft_examples, render_sft_example
from tirl.data.sft_programs import FAMILIES, program_examples
from tirl.data.toolmath import TOOLMATH_KINDS, heldout_texts
from tirl.protocol import ProtocolConfig, extract_answer, parse_tool_calls
from tirl.protocol.types import ToolCall

CFG = ProtocolConfig(prompt_style="compact")


def test_rows_are_deterministic_and_prefix_stable():
    a = program_examples(30, config=CFG)
    b = program_examples(12, config=CFG)
    assert [(e.problem, e.answer) for e in a[:12]] == [(e.problem, e.answer) for e in b]
    assert len({e.id for e in a}) == 30
    assert {e.source.split(" (")[1].split(",")[0] for e in a} == set(FAMILIES)  # every family appears


def test_no_family_is_a_toolmath_kind_and_no_problem_is_held_out():
    assert not set(FAMILIES) & set(TOOLMATH_KINDS)
    held = heldout_texts()
    assert not any(e.problem in held for e in program_examples(220, config=CFG))


def test_each_call_parses_back_and_the_answer_is_the_printed_output():
    for e in program_examples(44, config=CFG):
        first, last = e.turns
        calls = [c for c in parse_tool_calls(first.text, CFG) if isinstance(c, ToolCall)]
        assert len(calls) == 1 and "print(" in calls[0].arguments["code"]
        assert first.tool_responses and e.answer in first.tool_responses[0]
        assert extract_answer(last.text, CFG) == e.answer and e.answer.lstrip("-").isdigit()


@pytest.mark.slow
def test_the_programs_print_their_answers_in_the_sandbox():
    from tirl.sandbox import ExecutionRequest, LocalSandbox

    examples = program_examples(22, config=CFG)  # two of each family
    codes = [
        next(c for c in parse_tool_calls(e.turns[0].text, CFG) if isinstance(c, ToolCall)).arguments["code"]
        for e in examples
    ]

    async def run() -> list:
        async with LocalSandbox(workers=2) as sandbox:
            return await sandbox.run_batch([ExecutionRequest(code, timeout_s=10.0) for code in codes])

    results = asyncio.run(run())
    for e, r in zip(examples, results):
        assert r.status == "ok" and r.stdout.strip() == e.answer, (e.problem, r.status, r.stderr[-300:])


def test_sources_and_rendering(qwen_tokenizer):
    examples = load_sft_examples(["programs:4-10", "oasst:2"], shuffle=False, config=CFG)
    assert [e.id for e in examples[:6]] == [f"programs-20261130-{i}" for i in range(4, 10)]
    rendered = render_sft_example(qwen_tokenizer, examples[0], CFG)
    assert 0 < sum(rendered.loss_mask) < len(rendered.loss_mask)  # the tool response is not trained on
    with pytest.raises(ValueError, match="needs a size"):
        load_sft_examples(["programs"], config=CFG)
