"""Prompt, tool-response segment and conversation rendering with real tokenizers (tirl.protocol.render).

Uses the session fixtures ``qwen_tokenizer`` (Qwen2.5 chat template with native tools) and
``smollm2_tokenizer`` (ChatML without tools, so tirl's built-in ChatML is used) from tests/conftest.py.
"""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tirl.protocol import ProtocolConfig
from tirl.protocol.parse import parse_tool_calls, render_tool_call
from tirl.protocol.prompt import system_prompt, tool_schema
from tirl.protocol.render import (
    ConversationTurn,
    conversation_messages,
    end_of_turn_text,
    render_conversation_ids,
    render_conversation_text,
    render_prompt_ids,
    render_prompt_text,
    stop_token_ids,
    template_supports_tools,
    tool_response_segment_ids,
    tool_response_segment_text,
    uses_tokenizer_template,
)

FN = "execute_python_code_with_standard_io"
PROBLEM = "Find the sum of all positive divisors of 36."

# Turn texts begin with a space so that no BPE merge crosses the prefill join (see render's docstring).
TURNS = [
    ConversationTurn(
        " I will list divisors with code.\n"
        + render_tool_call("n = 36\nprint(sum(d for d in range(1, n + 1) if n % d == 0))"),
        ["91"],
    ),
    ConversationTurn(
        " Check two ways at once.\n"
        + render_tool_call("print(1)")
        + "\n"
        + render_tool_call("x = int(input())\nprint(x * 2)", "7\n"),
        ["1", "14"],
    ),
    ConversationTurn(" The sum is 91.\n</reason>\n<answer>The answer is \\boxed{91}.</answer>"),
]

CONFIGS = {
    "default": ProtocolConfig(),
    "no-prefill": ProtocolConfig(prefill=""),
    "prefill-newline": ProtocolConfig(prefill="<reason>\n"),
}


@pytest.fixture(params=["qwen", "smollm2"])
def tokenizer(request, qwen_tokenizer, smollm2_tokenizer):
    return qwen_tokenizer if request.param == "qwen" else smollm2_tokenizer


def template_text(tokenizer, turns, cfg) -> str:
    """The tokenizer's own chat-template rendering of the whole conversation (reference)."""
    native = template_supports_tools(tokenizer)
    messages = conversation_messages(PROBLEM, turns, cfg, native_tools=native)
    return tokenizer.apply_chat_template(
        messages, tools=[tool_schema(cfg)] if native else None, tokenize=False, add_generation_prompt=False
    )


def test_template_choice(qwen_tokenizer, smollm2_tokenizer):
    assert template_supports_tools(qwen_tokenizer) and uses_tokenizer_template(qwen_tokenizer)
    assert not template_supports_tools(smollm2_tokenizer) and not uses_tokenizer_template(smollm2_tokenizer)
    assert not uses_tokenizer_template(qwen_tokenizer, ProtocolConfig(chat_template="chatml"))
    assert uses_tokenizer_template(smollm2_tokenizer, ProtocolConfig(chat_template="tokenizer"))


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_conversation_text_equals_chat_template(tokenizer, cfg_name):
    cfg = CONFIGS[cfg_name]
    expected = template_text(tokenizer, TURNS, cfg)
    # The template also writes the newline after the final <|im_end|>, which the model never generates.
    assert expected.endswith("<|im_end|>\n")
    assert render_conversation_text(tokenizer, PROBLEM, TURNS, cfg) == expected[:-1]


@pytest.mark.parametrize("cfg_name", list(CONFIGS))
def test_split_ids_equal_template_ids(tokenizer, cfg_name):
    cfg = CONFIGS[cfg_name]
    rendered = render_conversation_ids(tokenizer, PROBLEM, TURNS, cfg)
    whole = tokenizer.encode(template_text(tokenizer, TURNS, cfg)[:-1], add_special_tokens=False)
    assert rendered.input_ids == whole


def test_prefill_join_is_where_split_and_whole_tokenization_may_differ(qwen_tokenizer):
    # Documented difference: Qwen2's pre-tokenizer merges ">\n" when "<reason>\nText" is tokenized whole.
    turns = [ConversationTurn("\nDirect answer.\n</reason><answer>\\boxed{1}</answer>")]
    rendered = render_conversation_ids(qwen_tokenizer, PROBLEM, turns)
    text = render_conversation_text(qwen_tokenizer, PROBLEM, turns)
    assert qwen_tokenizer.decode(rendered.input_ids) == text
    assert rendered.input_ids != qwen_tokenizer.encode(text, add_special_tokens=False)


def test_release_layout_has_no_newline_after_eot(tokenizer):
    cfg = ProtocolConfig(keep_newline_after_eot=False)
    segment = tool_response_segment_text(tokenizer, ["91"], cfg)
    assert segment == (
        "<|im_start|>user\n<tool_response>\n91\n</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
    )
    text = render_conversation_text(tokenizer, PROBLEM, TURNS, cfg)
    assert "<|im_end|><|im_start|>user" in text and "<|im_end|>\n<|im_start|>user\n<tool_response>" not in text


def test_segment_layout(tokenizer):
    segment = tool_response_segment_text(tokenizer, ["a", "b\nc"])
    assert segment == (
        "\n<|im_start|>user\n<tool_response>\na\n</tool_response>\n<tool_response>\nb\nc\n"
        "</tool_response><|im_end|>\n<|im_start|>assistant\n<reason>"
    )


def test_segment_ids_are_tokenized_alone(tokenizer):
    texts = ["Traceback (most recent call last):\nZeroDivisionError: division by zero"]
    ids = tool_response_segment_ids(tokenizer, texts)
    assert ids == tokenizer.encode(tool_response_segment_text(tokenizer, texts), add_special_tokens=False)
    assert tokenizer.decode(ids) == tool_response_segment_text(tokenizer, texts)


def test_segment_needs_a_response(tokenizer):
    with pytest.raises(ValueError):
        tool_response_segment_text(tokenizer, [])


def test_loss_mask_covers_exactly_model_tokens(tokenizer):
    rendered = render_conversation_ids(tokenizer, PROBLEM, TURNS)
    assert len(rendered.loss_mask) == len(rendered.response_ids)
    assert len(rendered.labels_mask) == len(rendered.input_ids)
    model = [t for t, m in zip(rendered.response_ids, rendered.loss_mask) if m == 1]
    injected = [t for t, m in zip(rendered.response_ids, rendered.loss_mask) if m == 0]
    eot = end_of_turn_text(tokenizer)
    assert tokenizer.decode(model) == "".join(turn.text + eot for turn in TURNS)
    assert tokenizer.decode(injected) == "".join(
        tool_response_segment_text(tokenizer, turn.tool_responses) for turn in TURNS if turn.tool_responses
    )
    # Every model turn ends on the end-of-turn token, which is a stop token.
    assert rendered.response_ids[-1] == stop_token_ids(tokenizer)[0]


def test_prompt_ends_with_generation_header_and_prefill(tokenizer):
    text = render_prompt_text(tokenizer, PROBLEM)
    assert text.endswith("<|im_start|>assistant\n<reason>")
    assert text.count("<|im_start|>") == 3
    assert PROBLEM in text and system_prompt() in text
    assert FN in text and "<tools>" in text and '"input"' in text
    ids = render_prompt_ids(tokenizer, PROBLEM)
    assert tokenizer.decode(ids) == text


def test_prompt_never_has_model_default_system_prompt(tokenizer):
    text = render_prompt_text(tokenizer, PROBLEM)
    assert "You are Qwen" not in text and "SmolLM" not in text


def test_custom_function_name_reaches_schema_and_prompt(tokenizer):
    cfg = ProtocolConfig(function_name="run_python", system_prompt="Solve it.")
    text = render_prompt_text(tokenizer, PROBLEM, cfg)
    assert '"name": "run_python"' in text and FN not in text
    assert text.startswith("<|im_start|>system\nSolve it.")


def test_forced_chatml_on_qwen_uses_builtin_tools_block(qwen_tokenizer):
    cfg = ProtocolConfig(chat_template="chatml")
    text = render_prompt_text(qwen_tokenizer, PROBLEM, cfg)
    assert "You can call the function described inside <tools></tools>" in text
    assert "You may call one or more functions" not in text
    # Same segment layout either way.
    assert tool_response_segment_text(qwen_tokenizer, ["x"], cfg) == tool_response_segment_text(qwen_tokenizer, ["x"])


def test_forced_tokenizer_template_without_tools_wraps_responses(smollm2_tokenizer):
    cfg = ProtocolConfig(chat_template="tokenizer")
    assert render_prompt_text(smollm2_tokenizer, PROBLEM, cfg) == render_prompt_text(smollm2_tokenizer, PROBLEM)
    segment = tool_response_segment_text(smollm2_tokenizer, ["r"], cfg)
    assert segment == tool_response_segment_text(smollm2_tokenizer, ["r"])


def test_stop_token_ids(tokenizer):
    ids = stop_token_ids(tokenizer)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert len(set(ids)) == len(ids)
    assert end_of_turn_text(tokenizer) == "<|im_end|>"


def test_structured_call_in_qwen_template_matches_render_tool_call(qwen_tokenizer):
    args = {"code": "s = '</tool_call>'\nprint(len(s), 'é')", "input": "1 2\n"}
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": FN, "arguments": args}}],
        },
    ]
    text = qwen_tokenizer.apply_chat_template(messages, tokenize=False)
    turn = text[text.rindex("<|im_start|>assistant\n") + len("<|im_start|>assistant\n") : -len("<|im_end|>\n")]
    assert turn == render_tool_call(args["code"], args["input"])
    [call] = parse_tool_calls(turn)
    assert call.arguments == args


class NoTemplateTokenizer:
    """A test double: a character-level tokenizer without a chat template."""

    chat_template = None
    eos_token = "<|im_end|>"
    eos_token_id = 0

    def encode(self, text, add_special_tokens=False):
        return [0] if text == "<|im_end|>" else [ord(c) for c in text]


def test_tokenizer_without_template_gets_builtin_chatml():
    tok = NoTemplateTokenizer()
    assert not uses_tokenizer_template(tok)
    text = render_prompt_text(tok, "2+2?")
    assert text.startswith("<|im_start|>system\n")
    assert text.endswith("<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n<reason>")
    assert render_prompt_ids(tok, "2+2?") == [ord(c) for c in text]
    assert stop_token_ids(tok) == [0]
    assert stop_token_ids(tok, ProtocolConfig(chat_template="chatml")) == [0]
    with pytest.raises(ValueError, match="no chat template"):
        render_prompt_text(tok, "2+2?", ProtocolConfig(chat_template="tokenizer"))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(responses=st.lists(st.text(max_size=60), min_size=1, max_size=3), problem=st.text(max_size=60))
def test_rendering_never_raises_on_arbitrary_text(qwen_tokenizer, smollm2_tokenizer, responses, problem):
    for tok in (qwen_tokenizer, smollm2_tokenizer):
        segment = tool_response_segment_text(tok, responses)
        assert all(r in segment for r in responses)
        assert problem in render_prompt_text(tok, problem)


def test_config_replace_keeps_other_fields():
    cfg = dataclasses.replace(ProtocolConfig(), prefill="")
    assert cfg.prefill == "" and cfg.function_name == FN


# ---------------------------------------------------------------------------------------------------------------
# prompt styles


def test_compact_prompt_is_far_shorter_and_declares_the_call_format(qwen_tokenizer):
    from tirl.protocol import ProtocolConfig, render_prompt_ids
    from tirl.protocol.render import render_prompt_text

    full = render_prompt_ids(qwen_tokenizer, "What is 2+2?", ProtocolConfig())
    compact_cfg = ProtocolConfig(prompt_style="compact")
    compact = render_prompt_ids(qwen_tokenizer, "What is 2+2?", compact_cfg)
    assert len(compact) * 3 < len(full)
    text = render_prompt_text(qwen_tokenizer, "What is 2+2?", compact_cfg)
    assert '"name": "execute_python_code_with_standard_io"' in text and "<tool_call>" in text
    assert "<tools>" not in text and '"parameters"' not in text  # no JSON schema
    assert text.endswith("<|im_start|>assistant\n<reason>")


def test_compact_prompt_keeps_the_tool_response_segment_of_the_full_style(qwen_tokenizer):
    from tirl.protocol import ProtocolConfig
    from tirl.protocol.render import tool_response_segment_ids

    full = tool_response_segment_ids(qwen_tokenizer, ["42", "7"], ProtocolConfig())
    compact = tool_response_segment_ids(qwen_tokenizer, ["42", "7"], ProtocolConfig(prompt_style="compact"))
    assert full == compact


def test_compact_conversation_ids_equal_the_pieces_the_rollout_appends(qwen_tokenizer):
    from tirl.protocol import ConversationTurn, ProtocolConfig, render_conversation_ids, render_prompt_ids
    from tirl.protocol.render import tool_response_segment_ids

    cfg = ProtocolConfig(prompt_style="compact")
    turns = [
        ConversationTurn(text="x <tool_call>{}</tool_call>", tool_responses=["1"]),
        ConversationTurn(text="done</reason><answer>\\boxed{1}</answer>"),
    ]
    conv = render_conversation_ids(qwen_tokenizer, "p", turns, cfg)
    assert conv.prompt_ids == render_prompt_ids(qwen_tokenizer, "p", cfg)
    seg = tool_response_segment_ids(qwen_tokenizer, ["1"], cfg)
    first = qwen_tokenizer.encode(turns[0].text + "<|im_end|>", add_special_tokens=False)
    assert conv.response_ids[: len(first) + len(seg)] == first + seg


def test_unknown_prompt_style_is_rejected():
    import pytest

    from tirl.protocol import ProtocolConfig

    with pytest.raises(ValueError, match="prompt_style"):
        ProtocolConfig(prompt_style="tiny")  # type: ignore[arg-type]
