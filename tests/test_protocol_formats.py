"""Tool-call formats (``tirl.protocol.formats``): the registry and its config field, the ``qwen3_xml`` format
(parsing cases, every error kind, ``</parameter>``/``</tool_call>`` inside values, drafts, linear work, render and
parse round trips with hypothesis), the chat template's own rendering as the reference (the Qwen3.5 template TRL
ships), and the format end to end: agent loop, eval, an RL recipe's ``protocol:`` section and SFT data.

The Hermes format's own cases stay in test_protocol_parse.py (unchanged by the registry).
"""

from __future__ import annotations

import dataclasses
import importlib.resources
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.protocol import ProtocolConfig, ToolCall, ToolCallError
from tirl.protocol.formats import ToolCallFormat, format_names, get_format, register_format, unregister_format
from tirl.protocol.formats.hermes import HermesFormat
from tirl.protocol.formats.qwen3_xml import ERROR_KINDS, unwritable_reason
from tirl.protocol.parse import draft_spans, parse_tool_calls, render_tool_call
from tirl.protocol.prompt import tool_schema, tools_block
from tirl.protocol.render import (
    ConversationTurn,
    conversation_messages,
    native_tools,
    render_conversation_text,
    render_prompt_text,
)
from tirl.protocol.response import render_parse_error

XML = ProtocolConfig(tool_call_format="qwen3_xml")
FN = XML.function_name


def xml(code: str | None = "print(1)", stdin: str | None = "", name: str = FN, params: str = "") -> str:
    """A call written by hand as the Qwen3-Coder template writes it (independent of ``render_tool_call``)."""
    body = ""
    if code is not None:
        body += f"<parameter=code>\n{code}\n</parameter>\n"
    if stdin is not None:
        body += f"<parameter=input>\n{stdin}\n</parameter>\n"
    return f"<tool_call>\n<function={name}>\n{body}{params}</function>\n</tool_call>"


def summary(items):
    out = []
    for it in items:
        if isinstance(it, ToolCall):
            out.append(("call", it.code, it.stdin, tuple(it.warnings), tuple(it.repairs)))
        else:
            out.append(("error", it.kind))
    return out


def ok(code, stdin="", warnings=(), repairs=()):
    return ("call", code, stdin, tuple(warnings), tuple(repairs))


def err(kind):
    return ("error", kind)


# ------------------------------------------------------------------------------------------------------ registry


def test_the_built_in_formats_are_registered_by_name():
    assert format_names()[:2] == ("hermes", "qwen3_xml")
    assert get_format("hermes").name == "hermes" and get_format("qwen3_xml").name == "qwen3_xml"
    assert ProtocolConfig().tool_call_format == "hermes"
    with pytest.raises(ValueError, match="tool_call_format must be one of hermes, qwen3_xml"):
        get_format("harmony")


def test_the_config_accepts_only_a_registered_format():
    with pytest.raises(ValueError, match="tool_call_format"):
        ProtocolConfig(tool_call_format="qwen3-xml")


class PrettyHermes(HermesFormat):
    """A test format: Hermes JSON written indented (the Hermes parser reads it)."""

    name = "test_pretty_hermes"

    def render_call(self, name, arguments, config):
        import json

        body = json.dumps({"name": name, "arguments": dict(arguments)}, indent=2)
        return f"{config.tool_call_open}\n{body}\n{config.tool_call_close}"


def test_a_new_format_is_one_class_and_one_registration():
    assert "test_pretty_hermes" not in format_names()
    with pytest.raises(ValueError, match="tool_call_format"):
        ProtocolConfig(tool_call_format="test_pretty_hermes")
    register_format(PrettyHermes())
    try:
        cfg = ProtocolConfig(tool_call_format="test_pretty_hermes")
        text = render_tool_call("print(3)", "", cfg)
        assert text.startswith('<tool_call>\n{\n  "name"')
        assert summary(parse_tool_calls(text, cfg)) == [ok("print(3)")]
        assert '{\n  "name"' in tools_block(cfg)
        with pytest.raises(ValueError, match="already registered"):
            register_format(PrettyHermes())
    finally:
        unregister_format("test_pretty_hermes")
    assert "test_pretty_hermes" not in format_names()


def test_an_incomplete_format_cannot_be_built():
    class Half(ToolCallFormat):
        name = "half"

    with pytest.raises(TypeError):
        Half()


# ------------------------------------------------------------------------------------------- qwen3_xml: parsing

BRIEF = (
    "<tool_call>\n<function=execute_python_code_with_standard_io>\n<parameter=code>\nprint(6*7)\n"
    "</parameter>\n<parameter=input>\n</parameter>\n</function>\n</tool_call>"
)

CASES = [
    ("the_issue_example", BRIEF, [ok("print(6*7)")], None),
    ("template_layout", xml("x = 1\nprint(x)"), [ok("x = 1\nprint(x)")], None),
    ("text_around", "Let me compute.\n" + xml("print(2)") + "\nand wait.", [ok("print(2)")], None),
    ("input_defaults_to_empty", xml("print(input())", None), [ok("print(input())")], None),
    ("input_kept", xml("print(input())", "7\n8"), [ok("print(input())", "7\n8")], None),
    (
        "inline_layout",
        f"<tool_call><function={FN}><parameter=code>print(5)</parameter></function></tool_call>",
        [ok("print(5)")],
        None,
    ),
    (
        "spaces_around_names",
        f"<tool_call>\n<function= {FN} >\n<parameter= code >\nprint(1)\n</parameter>\n</function>\n</tool_call>",
        [ok("print(1)")],
        None,
    ),
    ("indentation_and_blank_lines_kept", xml("\n    pass\n\n"), [ok("\n    pass\n\n")], None),
    (
        "closing_tags_inside_strings",
        xml('print("</tool_call>")\nprint("</parameter>")\nprint("</function>")'),
        [ok('print("</tool_call>")\nprint("</parameter>")\nprint("</function>")')],
        None,
    ),
    (
        "parameter_close_then_text_is_value",
        xml("s = '</parameter> x'\nprint(s)"),
        [ok("s = '</parameter> x'\nprint(s)")],
        None,
    ),
    ("two_calls", xml("print(1)") + "\n" + xml("print(2)"), [ok("print(1)"), ok("print(2)")], None),
    (
        "extra_parameter_warns",
        xml("print(1)", "", params="<parameter=timeout>\n5\n</parameter>\n"),
        [ok("print(1)", warnings=["ignored_argument:timeout"])],
        None,
    ),
    (
        "parameters_in_any_order",
        f"<tool_call>\n<function={FN}>\n<parameter=input>\n3\n</parameter>\n"
        "<parameter=code>\nprint(input())\n</parameter>\n</function>\n</tool_call>",
        [ok("print(input())", "3")],
        None,
    ),
    # errors: nothing of these runs
    ("unclosed_cut_by_budget", BRIEF[:-12], [err("unclosed_tag")], None),
    (
        "unclosed_inside_value",
        "<tool_call>\n<function=" + FN + ">\n<parameter=code>\nfor i in range(3):",
        [err("unclosed_tag")],
        None,
    ),
    ("restarted_call", xml("print(1)")[:60] + "\n" + xml("print(2)"), [err("unclosed_tag"), ok("print(2)")], None),
    ("empty", "<tool_call>\n  \n</tool_call>", [err("empty_call")], None),
    ("json_written_in_xml_mode", render_tool_call("print(1)"), [err("missing_function")], None),
    ("function_without_name", "<tool_call>\n<function=>\n</function>\n</tool_call>", [err("invalid_name")], None),
    (
        "function_tag_not_closed_on_its_line",
        "<tool_call>\n<function=f\n>\n</function>\n</tool_call>",
        [err("invalid_name")],
        None,
    ),
    ("unknown_function", xml(name="python"), [err("unknown_function")], None),
    (
        "parameter_without_name",
        f"<tool_call>\n<function={FN}>\n<parameter=>\nx\n</parameter>\n</function>\n</tool_call>",
        [err("invalid_parameter")],
        None,
    ),
    (
        "parameter_never_closed",
        f"<tool_call>\n<function={FN}>\n<parameter=code>\nprint(1)\n</function>\n</tool_call>",
        [err("unclosed_parameter")],
        None,
    ),
    (
        "function_never_closed",
        f"<tool_call>\n<function={FN}>\n<parameter=code>\nprint(1)\n</parameter>\n</tool_call>",
        [err("unclosed_function")],
        [ok("print(1)", repairs=["missing_function_close"])],
    ),
    (
        "text_between_parameters",
        f"<tool_call>\n<function={FN}>\nnow the code:\n<parameter=code>\nprint(1)\n"
        "</parameter>\n</function>\n</tool_call>",
        [err("unexpected_text")],
        None,
    ),
    (
        "text_after_function",
        xml("print(1)").replace("</function>\n", "</function>\nok\n"),
        [err("unexpected_text")],
        None,
    ),
    (
        "duplicate_parameter",
        xml("print(1)", "", params="<parameter=code>\nprint(2)\n</parameter>\n"),
        [err("duplicate_argument")],
        None,
    ),
    ("no_code", xml(None, "3"), [err("missing_code")], None),
    ("blank_code", xml("  \n "), [err("empty_code")], None),
    (
        "error_then_valid_call",
        xml(name="nope") + "\n" + xml("print(9)"),
        [err("unknown_function"), ok("print(9)")],
        None,
    ),
    ("stray_close_is_text", "</tool_call> " + xml("print(1)"), [ok("print(1)")], None),
    ("draft_ignored", "<think>" + xml("print(0)") + "</think>\n" + xml("print(1)"), [ok("print(1)")], None),
    (
        "think_close_inside_value_does_not_end_the_draft",
        "<think>" + xml("print('</think>')") + " still drafting</think>" + xml("print(1)"),
        [ok("print(1)")],
        None,
    ),
    ("unclosed_think_is_text", "<think>" + xml("print(1)"), [ok("print(1)")], None),
]


@pytest.mark.parametrize("case_id,text,strict,lenient", CASES, ids=[c[0] for c in CASES])
def test_qwen3_xml_cases(case_id, text, strict, lenient):
    assert summary(parse_tool_calls(text, XML)) == strict
    assert summary(parse_tool_calls(text, XML, lenient=True)) == (strict if lenient is None else lenient)


def test_every_qwen3_xml_error_kind_is_documented_and_exercised():
    seen = {e[1] for _, _, strict, lenient in CASES for e in strict + (lenient or []) if e[0] == "error"}
    assert seen == set(ERROR_KINDS) == set(get_format("qwen3_xml").error_kinds)


def test_an_xml_call_under_the_hermes_format_is_a_parse_error_and_the_reverse():
    assert summary(parse_tool_calls(BRIEF)) == [err("invalid_json")]
    assert summary(parse_tool_calls(render_tool_call("print(1)"), XML)) == [err("missing_function")]


def test_errors_and_calls_carry_raw_and_span():
    text = "ab " + xml("print(1)") + " cd " + xml(name="nope")
    call, error = parse_tool_calls(text, XML)
    assert isinstance(call, ToolCall) and isinstance(error, ToolCallError)
    assert text[call.span[0] : call.span[1]] == xml("print(1)")
    assert call.raw == xml("print(1)")[len("<tool_call>") : -len("</tool_call>")]
    assert text[error.span[0] : error.span[1]] == xml(name="nope") and error.message


def test_multi_call_first_aliases_and_custom_tags():
    two = xml("print(1)") + xml("print(2)")
    assert summary(parse_tool_calls(two, dataclasses.replace(XML, multi_call="first"))) == [ok("print(1)")]
    aliased = dataclasses.replace(XML, function_aliases=("python_code_with_standard_io",))
    assert summary(parse_tool_calls(xml(name="python_code_with_standard_io"), aliased)) == [ok("print(1)")]
    tags = dataclasses.replace(XML, tool_call_open="<call>", tool_call_close="</call>")
    text = render_tool_call("print(4)", "", tags)
    assert text.startswith("<call>\n<function=") and text.endswith("</function>\n</call>")
    assert summary(parse_tool_calls(text, tags)) == [ok("print(4)")]


def test_prefill_that_opens_a_draft_starts_the_turn_inside_it():
    cfg = dataclasses.replace(XML, prefill="<think>")
    text = xml("print(0)") + "</think>" + xml("print(1)")
    assert summary(parse_tool_calls(text, cfg)) == [ok("print(1)")]
    assert draft_spans(text, cfg) == [(0, len(xml("print(0)")) + len("</think>"))]


class CountingStr(str):
    """A str whose ``find`` adds up the characters each search actually looked at."""

    scanned = 0

    def find(self, sub, start=0, end=None):  # noqa: D102
        stop = len(self) if end is None else min(end, len(self))
        hit = super().find(sub, start, stop)
        CountingStr.scanned += max(0, (hit + len(sub) if hit >= 0 else stop) - start)
        return hit


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>",
        "<tool_call>\n<function=f>\n<parameter=code>\nprint(1)\n",
        "<tool_call><function=x><parameter=code>x</parameter> y </parameter>",
        "<tool_call>\n<function=" + FN + ">\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>",
        "<tool_call></tool_call></parameter></parameter>",
        "<think><tool_call><function=f><parameter=c>v</parameter></function></tool_call></think>",
    ],
)
def test_parsing_work_is_linear_in_the_turn_length(block):
    text = CountingStr(block * 2000)
    CountingStr.scanned = 0
    for lenient in (False, True):
        parse_tool_calls(text, XML, lenient=lenient)
    assert CountingStr.scanned <= 2 * 12 * len(text)


def test_many_parameters_on_one_line_parse_in_linear_work():
    params = "<parameter=p>v</parameter>" * 3000
    text = CountingStr(f"<tool_call><function={FN}><parameter=code>print(1)</parameter>{params}</function></tool_call>")
    CountingStr.scanned = 0
    [call] = parse_tool_calls(text, XML)
    assert isinstance(call, ToolCallError) and call.kind == "duplicate_argument"
    assert CountingStr.scanned <= 12 * len(text)


# ---------------------------------------------------------------------------------------- qwen3_xml: rendering


def test_render_is_the_template_layout():
    assert render_tool_call("print(6*7)", "", XML) == (
        "<tool_call>\n<function=execute_python_code_with_standard_io>\n<parameter=code>\nprint(6*7)\n</parameter>\n"
        "<parameter=input>\n\n</parameter>\n</function>\n</tool_call>"
    )


@pytest.mark.parametrize(
    "code,why",
    [
        ("print('<tool_call>')", "opening tag"),
        ("s = '</parameter>\n<parameter=x>'", "would end the value"),
        ("s = '</parameter></function>'", "would end the value"),
        ("s = '</parameter>   </tool_call>'", "would end the value"),
    ],
)
def test_render_refuses_what_would_not_read_back(code, why):
    with pytest.raises(ValueError, match=why):
        render_tool_call(code, "", XML)
    assert why in unwritable_reason(code, XML)
    render_tool_call(code, "", ProtocolConfig())  # JSON escapes every string


def test_render_refuses_bad_names():
    fmt = get_format("qwen3_xml")
    for name in ("", " f", "a>b", "a\nb"):
        with pytest.raises(ValueError, match="cannot write"):
            fmt.render_call(name, {"code": "print(1)"}, XML)
    with pytest.raises(ValueError, match="string arguments"):
        fmt.render_call(FN, {"code": 1}, XML)


_code_text = st.text(st.characters(codec="utf-8"), max_size=200) | st.lists(
    st.sampled_from(
        [
            "\n",
            " ",
            "\t",
            "x",
            "</parameter>",
            "</tool_call>",
            "</function>",
            "<parameter=",
            "<think>",
            "</think>",
            "<function=",
            ">",
            "<",
            "\r",
        ]
    ),
    max_size=30,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(code=_code_text, stdin=_code_text)
def test_render_then_parse_round_trips_or_render_refuses(code, stdin):
    refused = unwritable_reason(code, XML) or unwritable_reason(stdin, XML)
    if refused:
        with pytest.raises(ValueError):
            render_tool_call(code, stdin, XML)
        return
    text = render_tool_call(code, stdin, XML)
    items = parse_tool_calls("Let me run it.\n" + text + "\nDone.", XML)
    if code.strip():
        assert summary(items) == [ok(code, stdin)]
    else:
        assert summary(items) == [err("empty_code")]


@settings(max_examples=100, deadline=None)
@given(
    codes=st.lists(
        st.text(st.characters(codec="utf-8"), min_size=1, max_size=60).filter(
            lambda c: c.strip() and unwritable_reason(c, XML) is None
        ),
        min_size=1,
        max_size=4,
    ),
    glue=st.text(st.sampled_from("ab .\n"), max_size=5),
)
def test_several_rendered_calls_round_trip_in_order(codes, glue):
    text = glue.join(render_tool_call(c, "", XML) for c in codes)
    assert [c.code for c in parse_tool_calls(text, XML)] == codes


_fragments = st.sampled_from(
    [
        "<tool_call>",
        "</tool_call>",
        "<function=",
        FN,
        ">",
        "</function>",
        "<parameter=",
        "code",
        "input",
        "</parameter>",
        "\n",
        " ",
        "print(1)",
        "<think>",
        "</think>",
        "x",
    ]
)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_fragments | st.text(max_size=8), max_size=40), lenient=st.booleans())
def test_parse_never_raises_and_spans_are_ordered(parts, lenient):
    text = "".join(parts)
    items = parse_tool_calls(text, XML, lenient=lenient)
    last = 0
    for item in items:
        assert isinstance(item, (ToolCall, ToolCallError))
        assert last <= item.span[0] < item.span[1] <= len(text)
        assert text.startswith("<tool_call>", item.span[0])
        last = item.span[1]
        if isinstance(item, ToolCall):
            assert set(item.arguments) == {"code", "input"} and item.code.strip()


# ----------------------------------------------------------------------------------- prompt and tool responses


def test_tools_block_and_compact_example_are_worded_for_the_format():
    full, compact = tools_block(XML), tools_block(dataclasses.replace(XML, prompt_style="compact"))
    assert "<function=NAME>" in full and "JSON object" not in full
    for block in (full, compact):
        example = block[block.rindex("<tool_call>\n<function=") :]
        assert summary(parse_tool_calls(example, XML)) == [ok("print(2 + 2)")]
    assert "JSON object" in tools_block()  # the Hermes wording is unchanged


def test_parse_error_hint_shows_a_call_that_parses():
    [error] = parse_tool_calls(BRIEF[:-12], XML)
    text = render_parse_error(error, XML)
    assert text.startswith("Tool call error (unclosed_tag): ")
    assert summary(parse_tool_calls(text[text.index("<tool_call>") :], XML)) == [ok("print(1 + 1)")]
    assert "A valid call is a JSON object inside the tags" in render_parse_error(error)


# ------------------------------------------------------------------- the chat template's own rendering (reference)


class WithTemplate:
    """A tokenizer with another chat template: ``apply_chat_template`` uses ``chat_template``; everything else is
    the wrapped tokenizer's (a copy of the 151,936-entry tokenizer would take tens of seconds)."""

    def __init__(self, tokenizer, chat_template):
        self._tokenizer, self.chat_template = tokenizer, chat_template

    def apply_chat_template(self, *args, **kwargs):
        return self._tokenizer.apply_chat_template(*args, chat_template=self.chat_template, **kwargs)

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)


@pytest.fixture(scope="module")
def qwen35_tokenizer(qwen_tokenizer):
    """The Qwen2.5 tokenizer with the Qwen3.5 chat template (Qwen's original, as TRL ships it): the tool-call
    layout of the Qwen3-Coder family, the reference for ``qwen3_xml``. No Qwen3-Coder tokenizer is available
    offline; Qwen3.5's template writes calls the same way."""
    path = importlib.resources.files("trl") / "chat_templates" / "qwen3_5_nothink.jinja"
    if not path.is_file():
        pytest.skip("this TRL has no chat_templates/qwen3_5_nothink.jinja")
    return WithTemplate(qwen_tokenizer, path.read_text(encoding="utf-8"))


REFERENCE_CODES = [
    "print(6*7)",
    "x = 1\nprint(x)\n",
    "\n    pass",
    'print("</tool_call>")',
    "print('é→∑')",
    "s = '</parameter> x'\nprint(s)",
]


@pytest.mark.parametrize("code", REFERENCE_CODES)
def test_structured_call_in_the_qwen35_template_is_render_tool_call(qwen35_tokenizer, code):
    call = {"type": "function", "function": {"name": FN, "arguments": {"code": code, "input": ""}}}
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    text = qwen35_tokenizer.apply_chat_template(messages, tokenize=False)
    block = text[text.index("<tool_call>") : text.rindex("</tool_call>") + len("</tool_call>")]
    assert block == render_tool_call(code, "", XML)
    assert summary(parse_tool_calls(text, XML)) == [ok(code)]


def test_two_structured_calls_in_the_template_parse_in_order(qwen35_tokenizer):
    calls = [
        {"type": "function", "function": {"name": FN, "arguments": {"code": c, "input": ""}}}
        for c in ("print(1)", "print(2)")
    ]
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Two.", "tool_calls": calls}]
    text = qwen35_tokenizer.apply_chat_template(messages, tokenize=False)
    assert summary(parse_tool_calls(text, XML)) == [ok("print(1)"), ok("print(2)")]


def test_the_template_declares_the_tool_only_in_its_own_format(qwen35_tokenizer, qwen_tokenizer):
    assert native_tools(qwen35_tokenizer, XML) and not native_tools(qwen35_tokenizer, ProtocolConfig())
    assert native_tools(qwen_tokenizer, ProtocolConfig()) and not native_tools(qwen_tokenizer, XML)
    # Qwen3.5 + qwen3_xml: the template's own tools section; Qwen2.5 + qwen3_xml: tirl's, never Qwen2.5's JSON
    assert "<function=example_function_name>" in render_prompt_text(qwen35_tokenizer, "2+2?", XML)
    on_qwen25 = render_prompt_text(qwen_tokenizer, "2+2?", XML)
    assert tools_block(XML) in on_qwen25 and "return a json object" not in on_qwen25
    on_qwen35_hermes = render_prompt_text(qwen35_tokenizer, "2+2?")
    assert tools_block() in on_qwen35_hermes and "<function=example_function_name>" not in on_qwen35_hermes


def test_conversation_text_equals_the_qwen35_template_rendering(qwen35_tokenizer):
    turns = [
        ConversationTurn("Compute.\n" + render_tool_call("print(6*7)", "", XML), tool_responses=["42"]),
        ConversationTurn("Check.\n" + render_tool_call("print(6*7 - 1)", "", XML), tool_responses=["41"]),
        ConversationTurn("</reason>\n<answer>\\boxed{42}</answer>"),
    ]
    ours = render_conversation_text(qwen35_tokenizer, "What is 6*7?", turns, XML)
    messages = conversation_messages("What is 6*7?", turns, XML, native_tools=True)
    reference = qwen35_tokenizer.apply_chat_template(messages, tools=[tool_schema(XML)], tokenize=False)
    assert ours == reference[:-1]  # the template also writes the newline after the final <|im_end|>


@pytest.mark.parametrize("code", ["print(6*7)", "x = 1\nprint(x)", "print(sum(range(10)))"])
def test_transformers_response_parser_reads_our_calls_alike(qwen35_tokenizer, code):
    # An independent parser of the same format: transformers' parse_response with TRL's Qwen3.5 response template.
    # It agrees on plain values; it strips whitespace around values and cuts a value at the first </parameter> or
    # </tool_call>, which is why tirl has its own (see the module docstring of formats/qwen3_xml.py).
    trl_utils = pytest.importorskip("trl.chat_template_utils")
    template = getattr(trl_utils, "qwen3_5_template", None)
    if template is None or not hasattr(qwen35_tokenizer, "parse_response"):
        pytest.skip("no response-template parser in this transformers/TRL")
    text = "<|im_start|>assistant\nLet me run it.\n" + render_tool_call(code, "", XML) + "<|im_end|>"
    parsed = qwen35_tokenizer.parse_response(text, template, prefix="", tools=[tool_schema(XML)])
    assert [c["function"] for c in parsed["tool_calls"]] == [{"name": FN, "arguments": {"code": code, "input": ""}}]
    assert summary(parse_tool_calls(text, XML)) == [ok(code)]


# ------------------------------------------------------------------------------------------------- end to end


async def test_an_xml_call_is_executed_and_its_response_appended_in_the_agent_loop(qwen_tokenizer):
    from test_agent_loop import PROBLEM, ScriptedEngine, ScriptedExecutor, stop_of  # tests dir is on sys.path
    from tirl.protocol.render import tool_response_segment_ids
    from tirl.rollout.agent_loop import AgentLoop, AgentLoopConfig, RolloutRequest
    from tirl.rollout.engine import SingleEngineRouter

    tok = qwen_tokenizer
    t1 = "Let me compute.\n" + render_tool_call("print(2+3)", "", XML)
    t2 = "Cut off:\n" + render_tool_call("print(2+4)", "", XML)[:-25]  # an unclosed call: never executed
    t3 = "So it is 5.</reason>\n<answer>\\boxed{5}</answer>"
    results = {}
    for name, cfg in (("xml", XML), ("hermes", ProtocolConfig())):
        engine, executor = ScriptedEngine(tok, [t1, t2, t3], stop_of(tok)), ScriptedExecutor()
        loop = AgentLoop(
            SingleEngineRouter(engine), executor, tok, AgentLoopConfig(max_response_tokens=4000, protocol=cfg)
        )
        results[name] = (await loop.run_one(RolloutRequest(PROBLEM)), executor)
    traj, executor = results["xml"]
    assert [[r.cls for r in t.tool_calls] for t in traj.turns] == [["ok"], ["parse_error"], []]
    assert [r.code for r in executor.requests] == ["print(2+3)"]
    assert traj.turns[1].tool_calls[0].call.kind == "unclosed_tag"
    stop = stop_of(tok)
    ids = [tok.encode(t, add_special_tokens=False) + [stop] for t in (t1, t2, t3)]
    seg1 = tool_response_segment_ids(tok, [traj.turns[0].tool_calls[0].response_text], XML)
    seg2 = tool_response_segment_ids(tok, [traj.turns[1].tool_calls[0].response_text], XML)
    assert traj.response_ids == ids[0] + seg1 + ids[1] + seg2 + ids[2]
    assert "<tool_response>\n5\n</tool_response>" in tok.decode(seg1)
    assert "<function=execute_python_code_with_standard_io>" in tok.decode(seg2)  # the hint is in the format
    assert traj.final_answer == "5" and traj.finish_reason == "answer"
    # The same turns under the default (Hermes) format: nothing runs.
    traj, executor = results["hermes"]
    assert executor.requests == [] and traj.turns[0].tool_calls[0].call.kind == "invalid_json"


async def test_eval_runs_xml_calls_from_an_eval_configs_protocol_section(tmp_path, smollm2_tokenizer):
    from test_eval_runner import PROBLEMS, Executor, verifier
    from tirl.eval.config import load_eval_config
    from tirl.eval.runner import EvalComponents, run_eval
    from tirl.rollout.engine import GenerationOutput, SingleEngineRouter

    class XmlEngine:
        """Calls the tool once in the XML format with ``print(N)``, then answers N."""

        def __init__(self, tok):
            self.tok, self.stop = tok, tok.convert_tokens_to_ids("<|im_end|>")

        async def generate(self, prompt_ids, params):
            text = self.tok.decode(prompt_ids)
            n = int(text.split("ANSWER ")[-1].split("<")[0])
            if "<tool_response>" not in text.split("ANSWER")[-1]:
                out = "Check.\n" + render_tool_call(f"print({n})", "", XML)
            else:
                out = f"done</reason><answer>\\boxed{{{n}}}</answer>"
            ids = self.tok.encode(out, add_special_tokens=False) + [self.stop]
            return GenerationOutput(ids, [-0.1] * len(ids))

    path = tmp_path / "eval.yaml"
    path.write_text(
        f"model: scripted\nbenchmarks: [toy]\nsamples: 2\nout_dir: {tmp_path / 'out'}\n"
        "rollout: {max_turns: 3, max_response_tokens: 2000}\nprotocol: {tool_call_format: qwen3_xml}\n"
    )
    config = load_eval_config(path)
    assert config.protocol == XML
    tok = smollm2_tokenizer
    executor = Executor()
    components = EvalComponents(
        router=SingleEngineRouter(XmlEngine(tok)),
        tokenizer=tok,
        executor=executor,
        grader=verifier,
        load_problems=lambda name: PROBLEMS[name],
    )
    result = await run_eval(config, components)
    [toy] = result.summaries
    assert toy.avg_pass1 == 1.0 and toy.tool_call_classes["ok"] == 6 and toy.tool_call_classes["parse_error"] == 0
    assert executor.n == 6 + 1  # the six calls and the start-up probe of the executor


def test_an_rl_recipes_protocol_section_sets_the_format_of_the_agent_loop(tmp_path):
    from tirl.train.config import dump_config, load_config
    from tirl.train.rollout_func import AgentLoopSource

    recipe = tmp_path / "r.yaml"
    recipe.write_text("protocol:\n  tool_call_format: qwen3_xml\n")
    config = load_config(recipe)
    assert AgentLoopSource(config, tokenizer=None)._agent_config().protocol == XML
    dump_config(config, tmp_path / "again.yaml")
    assert load_config(tmp_path / "again.yaml").protocol.tool_call_format == "qwen3_xml"
    with pytest.raises(ValueError, match="tool_call_format"):
        load_config(None, ["protocol.tool_call_format=harmony"])


def test_sft_data_is_written_in_the_configured_format():
    from tirl.data.sft import load_sft_set

    examples = load_sft_set("gsm8k_tir", slice(0, 3), XML)
    for ex in examples:
        for turn in ex.turns[:-1]:
            assert "<function=execute_python_code_with_standard_io>" in turn.text
            assert not re.search(r'"arguments"', turn.text)
            assert all(isinstance(c, ToolCall) for c in parse_tool_calls(turn.text, XML))
            assert len(parse_tool_calls(turn.text, XML)) == len(turn.tool_responses)
