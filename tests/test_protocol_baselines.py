"""The field's baselines as prompt styles (``protocol.prompt_style`` ``cot`` and ``native``): rendering with the
model's own chat template, no tags and no prefill, the tool through the template's ``tools=`` argument, the last
box as the answer, and the agent loop (token ids, loss mask, ``tool`` role) in both.

Uses the real tokenizers of tests/conftest.py: ``qwen_tokenizer`` (Qwen2.5's template, which renders tools and
writes Hermes calls) and ``smollm2_tokenizer`` (a ChatML template without tools).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from test_agent_loop import ScriptedEngine, ScriptedExecutor, call_text, stop_of
from tirl.eval.config import EvalConfig, default_out_dir
from tirl.protocol import ProtocolConfig
from tirl.protocol.answer import extract_answer, extract_answer_from_turns
from tirl.protocol.config import COT_INSTRUCTION
from tirl.protocol.prompt import tool_schema
from tirl.protocol.render import (
    render_prompt_ids,
    render_prompt_text,
    stop_token_ids,
    tool_response_segment_ids,
    tool_response_segment_text,
)
from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
from tirl.rollout.engine import SingleEngineRouter

PROBLEM = "Natalia sold 48 clips in April and half as many in May. How many clips did she sell altogether?"
COT = ProtocolConfig(prompt_style="cot")
NATIVE = ProtocolConfig(prompt_style="native")
QWEN_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
TIRL_MARKERS = ("<reason>", "</reason>", "<answer>", "</answer>", "careful problem solver")


class SpyTokenizer:
    """Wraps a tokenizer and records every ``apply_chat_template`` call's messages and ``tools``."""

    def __init__(self, tokenizer: Any) -> None:
        self._tok = tokenizer
        self.calls: list[tuple[list[dict[str, str]], Any]] = []

    def apply_chat_template(self, messages, tools=None, **kwargs):
        self.calls.append(([dict(m) for m in messages], tools))
        return self._tok.apply_chat_template(messages, tools=tools, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tok, name)


# ------------------------------------------------------------------------------------------------------ rendering


def test_the_qwen_sentence_is_the_one_of_qwens_harness():
    assert COT_INSTRUCTION == "Please reason step by step, and put your final answer within \\boxed{}."


@pytest.mark.parametrize("which", ["qwen", "smollm2"])
def test_cot_is_the_models_own_template_with_the_qwen_sentence_and_nothing_of_tirls(
    which, qwen_tokenizer, smollm2_tokenizer
):
    tok = qwen_tokenizer if which == "qwen" else smollm2_tokenizer
    text = render_prompt_text(tok, PROBLEM, COT)
    # exactly the template's rendering of the one user message: its default system prompt, no tools, no prefill
    user = f"{PROBLEM}\n{COT_INSTRUCTION}"
    expected = tok.apply_chat_template([{"role": "user", "content": user}], tokenize=False, add_generation_prompt=True)
    assert text == expected
    assert text.endswith("<|im_start|>assistant\n")
    assert not any(marker in text for marker in TIRL_MARKERS)
    assert "<tools>" not in text and "execute_python_code_with_standard_io" not in text
    if which == "qwen":
        assert QWEN_SYSTEM in text
    else:
        assert "SmolLM" in text  # SmolLM2's own default system prompt: its template, not tirl's ChatML
    # use_tools makes no difference: cot has no tool
    assert render_prompt_text(tok, PROBLEM, COT, use_tools=False) == text
    assert render_prompt_ids(tok, PROBLEM, COT) == tok.encode(text, add_special_tokens=False)


def test_cot_takes_a_set_system_prompt_and_an_empty_instruction_adds_nothing(qwen_tokenizer):
    cfg = ProtocolConfig(prompt_style="cot", system_prompt="Be brief.", baseline_instruction="")
    text = render_prompt_text(qwen_tokenizer, PROBLEM, cfg)
    assert "Be brief." in text and QWEN_SYSTEM not in text
    assert f"{PROBLEM}<|im_end|>" in text and "Please reason" not in text


def test_a_tokenizer_without_a_chat_template_gets_chatml_in_cot(qwen_tokenizer):
    tok = SpyTokenizer(qwen_tokenizer)
    tok.chat_template = None  # the tiny models of tirl.models.tiny may have none
    text = render_prompt_text(tok, PROBLEM, COT)
    assert text == f"<|im_start|>user\n{PROBLEM}\n{COT_INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    assert tok.calls == []


def test_native_passes_the_tool_to_the_template_and_writes_no_tools_block_of_its_own(qwen_tokenizer):
    tok = SpyTokenizer(qwen_tokenizer)
    text = render_prompt_text(tok, PROBLEM, NATIVE)
    (messages, tools), *_ = tok.calls
    assert tools == [tool_schema(NATIVE)]
    assert messages == [{"role": "user", "content": f"{PROBLEM}\n{COT_INSTRUCTION}"}]  # the template's system
    assert text == qwen_tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert QWEN_SYSTEM in text and "<tools>" in text and "<tool_call>" in text  # Qwen's own Hermes block
    assert not any(marker in text for marker in TIRL_MARKERS)
    assert text.endswith("<|im_start|>assistant\n")  # no prefill


def test_native_tool_responses_use_the_templates_tool_role_and_no_prefill(qwen_tokenizer):
    tok = SpyTokenizer(qwen_tokenizer)
    segment = tool_response_segment_text(tok, ["72"], NATIVE)
    assert segment == "\n<|im_start|>user\n<tool_response>\n72\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    roles = [m["role"] for messages, _ in tok.calls for m in messages]
    assert "tool" in roles
    assert all(tools == [tool_schema(NATIVE)] for _, tools in tok.calls)
    full = tool_response_segment_text(qwen_tokenizer, ["72"], ProtocolConfig())
    assert full == segment + "<reason>"  # tirl's format differs only by its prefill here


def test_native_without_a_template_that_renders_tools_is_a_clear_error(smollm2_tokenizer, qwen_tokenizer):
    with pytest.raises(ValueError, match="needs a chat template that renders tools"):
        render_prompt_text(smollm2_tokenizer, PROBLEM, NATIVE)
    with pytest.raises(ValueError, match="not chat_template='chatml'"):
        render_prompt_text(qwen_tokenizer, PROBLEM, dataclasses.replace(NATIVE, chat_template="chatml"))
    # without the tool, native is cot's prompt (and needs no tools in the template)
    assert render_prompt_text(smollm2_tokenizer, PROBLEM, NATIVE, use_tools=False) == render_prompt_text(
        smollm2_tokenizer, PROBLEM, COT
    )


def test_stop_tokens_are_the_templates_end_of_turn(qwen_tokenizer):
    assert stop_token_ids(qwen_tokenizer, COT) == stop_token_ids(qwen_tokenizer, NATIVE) == [stop_of(qwen_tokenizer)]


def test_tirls_styles_are_unchanged_by_the_new_ones(qwen_tokenizer):
    text = render_prompt_text(qwen_tokenizer, PROBLEM, ProtocolConfig())
    assert text.endswith("<|im_start|>assistant\n<reason>") and "Please reason" not in text


def test_an_unknown_prompt_style_names_the_known_ones():
    with pytest.raises(ValueError, match="full, compact, cot, native"):
        ProtocolConfig(prompt_style="plain")


# ------------------------------------------------------------------------------------------------------- grading


@pytest.mark.parametrize("cfg", [COT, NATIVE], ids=["cot", "native"])
def test_the_answer_is_the_last_box_and_answer_tags_are_not_looked_for(cfg):
    text = "First \\boxed{70}. Wait, 48 + 24 = 72, so \\boxed{72}."
    assert extract_answer(text, cfg) == "72"
    assert extract_answer_from_turns([text], cfg) == "72"
    tagged = "<answer>\\boxed{5}</answer> on second thought \\boxed{6}"
    assert extract_answer(tagged, cfg) == "6"  # tirl's format would read the <answer> block: 5
    assert extract_answer(tagged, ProtocolConfig()) == "5"
    assert extract_answer("<answer>5</answer>", cfg) is None  # no box: no answer
    assert extract_answer("so \\boxed{\\frac{1}{", cfg) is None  # cut while writing the box
    # answer_fallback does not apply: without a box there is no answer
    no_fallback = dataclasses.replace(cfg, answer_fallback="none")
    assert extract_answer(text, no_fallback) == "72"


def test_native_reads_the_last_turn_with_a_box_and_never_a_tool_response():
    turns = ["I think \\boxed{70}; let me check.\n" + call_text("print(48 + 24)"), "Confirmed."]
    assert extract_answer_from_turns(turns, NATIVE) == "70"
    turns = ["Check.\n" + call_text("print(48 + 24)"), "So the answer is \\boxed{72}."]
    assert extract_answer_from_turns(turns, NATIVE) == "72"
    text = "Check.\n<tool_response>\n\\boxed{99}\n</tool_response>\nDone."
    assert extract_answer(text, NATIVE) is None  # a box printed by a program never counts


# ---------------------------------------------------------------------------------------------------- agent loop


def _loop(tok, turns, protocol, use_tools=True, executor=None):
    engine = ScriptedEngine(tok, turns, stop_of(tok))
    config = AgentLoopConfig(max_response_tokens=4000, protocol=protocol, use_tools=use_tools)
    return AgentLoop(SingleEngineRouter(engine), executor, tok, config), engine


async def test_cot_runs_one_turn_never_parses_calls_and_needs_no_executor(qwen_tokenizer):
    tok = qwen_tokenizer
    turn = "48 / 2 = 24.\n" + call_text("print(48 + 24)") + "\nSo \\boxed{72}."
    loop, engine = _loop(tok, [turn, "never asked"], COT, use_tools=True, executor=None)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "answer" and len(engine.calls) == 1
    assert traj.turns[0].tool_calls == [] and traj.final_answer == "72"
    assert traj.prompt_ids == render_prompt_ids(tok, PROBLEM, COT)
    assert traj.loss_mask == [1] * len(traj.response_ids)


async def test_native_multi_turn_ids_and_loss_mask_use_the_templates_tool_role(qwen_tokenizer):
    tok = qwen_tokenizer
    t1 = "Half of 48 is 24; add them.\n" + call_text("print(48 + 24)")
    t2 = "She sold \\boxed{72} clips."
    executor = ScriptedExecutor()
    loop, engine = _loop(tok, [t1, t2], NATIVE, executor=executor)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "answer" and traj.final_answer == "72"
    assert [r.code for r in executor.requests] == ["print(48 + 24)"]
    stop = stop_of(tok)
    ids1 = tok.encode(t1, add_special_tokens=False) + [stop]
    ids2 = tok.encode(t2, add_special_tokens=False) + [stop]
    segment = tool_response_segment_ids(tok, [traj.turns[0].tool_calls[0].response_text], NATIVE)
    assert traj.response_ids == ids1 + segment + ids2
    assert traj.loss_mask == [1] * len(ids1) + [0] * len(segment) + [1] * len(ids2)
    assert (
        tok.decode(segment)
        == "\n<|im_start|>user\n<tool_response>\n72\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )
    # the whole conversation is the template's own rendering of it, tool message included
    messages = [
        {"role": "user", "content": f"{PROBLEM}\n{COT_INSTRUCTION}"},
        {"role": "assistant", "content": t1},
        {"role": "tool", "content": "72"},
        {"role": "assistant", "content": t2},
    ]
    whole = tok.apply_chat_template(messages, tools=[tool_schema(NATIVE)], tokenize=False)
    assert tok.decode(traj.prompt_ids + traj.response_ids) == whole.rstrip("\n")


# ---------------------------------------------------------------------------------------------------- eval config


def test_cot_in_an_eval_config_means_no_tool_and_native_needs_the_tool(tmp_path):
    config = EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path, protocol=COT)
    assert config.use_tools is False and "chain of thought" in config.mode_label()
    assert config.loop_config(None).tools_active is False
    with pytest.raises(ValueError, match="use prompt_style 'cot'"):
        EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path, protocol=NATIVE, use_tools=False)
    tagged = EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path, use_tools=False)
    assert tagged.mode_label() == "no tools (tirl's tags)"
    assert default_out_dir("m", False, "cot").name == "m-cot"
    assert default_out_dir("m", True, "native").name == "m-native"
    assert default_out_dir("m", False).name == "m-no-tools"


def test_older_output_folders_still_resume_the_protocol_they_recorded(tmp_path):
    config = EvalConfig(
        model="m", benchmarks=["gsm8k"], out_dir=tmp_path, protocol=ProtocolConfig(prompt_style="compact")
    )
    recorded = config.resume_settings()["protocol"]
    assert "baseline_instruction" not in recorded and recorded["prompt_style"] == "compact"
    changed = dataclasses.replace(config.protocol, baseline_instruction="Think.")
    assert (
        dataclasses.replace(config, protocol=changed).resume_settings()["protocol"]["baseline_instruction"] == "Think."
    )


def test_a_prefill_set_in_a_baseline_style_is_not_taken_as_pre_filled():
    # tirl's styles pre-fill `prefill`: one that opens <think> puts the text's start inside a draft, whose box
    # never counts; the baseline styles pre-fill nothing, so the same text is read whole
    text = "So \\boxed{2}</think>"
    assert extract_answer(text, ProtocolConfig(prefill="<think>")) is None
    assert extract_answer(text, ProtocolConfig(prompt_style="cot", prefill="<think>")) == "2"


async def test_native_lenient_runs_an_untagged_call_and_feeds_its_response_back(qwen_tokenizer):
    """Qwen2.5-Coder-0.5B-Instruct's own native-style call, without the tags (issue 43): in lenient mode the loop
    runs it and appends the tool response as for a tagged call; in strict mode the turn is the final answer."""
    tok = qwen_tokenizer
    call = '{"name": "execute_python_code_with_standard_io", "arguments": {"code": "print(48 + 24)", "input": ""}}'
    t1 = "```json\n" + call + "\n```"
    t2 = "She sold \\boxed{72} clips."
    lenient = dataclasses.replace(NATIVE, lenient=True)
    executor = ScriptedExecutor()
    loop, engine = _loop(tok, [t1, t2], lenient, executor=executor)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "answer" and traj.final_answer == "72" and len(engine.calls) == 2
    assert [r.code for r in executor.requests] == ["print(48 + 24)"]
    [record] = traj.turns[0].tool_calls
    assert record.cls == "ok" and record.call.repairs == ["untagged", "code_fence"]
    stop = stop_of(tok)
    ids1 = tok.encode(t1, add_special_tokens=False) + [stop]
    ids2 = tok.encode(t2, add_special_tokens=False) + [stop]
    segment = tool_response_segment_ids(tok, [record.response_text], lenient)
    assert traj.response_ids == ids1 + segment + ids2
    assert traj.loss_mask == [1] * len(ids1) + [0] * len(segment) + [1] * len(ids2)
    assert "<tool_response>\n72\n</tool_response>" in tok.decode(segment)
    strict_executor = ScriptedExecutor()
    loop, engine = _loop(tok, [t1, t2], NATIVE, executor=strict_executor)
    traj = await loop.run_one(RolloutRequest(PROBLEM))
    assert traj.finish_reason == "answer" and len(engine.calls) == 1 and strict_executor.requests == []
    assert traj.turns[0].tool_calls == [] and traj.final_answer is None
