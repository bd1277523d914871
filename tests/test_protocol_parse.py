"""Tool-call parsing (tirl.protocol.parse): strict and lenient decoding, error kinds, drafts, round trips."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.protocol import ProtocolConfig, ToolCall, ToolCallError
from tirl.protocol.parse import ERROR_KINDS, parse_tool_calls, render_tool_call

FN = "execute_python_code_with_standard_io"
FIELD_CASES = Path(__file__).resolve().parent / "data" / "field_cases.jsonl"


def call_text(code: str, stdin: str = "", name: str = FN) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": {"code": code, "input": stdin}}) + "</tool_call>"


def summary(items):
    """(kind, code, input) per item: kind is 'call' for a ToolCall, else the error kind."""
    out = []
    for item in items:
        if isinstance(item, ToolCall):
            out.append(("call", item.code, item.stdin))
        else:
            out.append((item.kind, None, None))
    return out


# (id, text, strict result, lenient result)
PARSE_CASES = [
    ("plain", call_text("print(1)"), [("call", "print(1)", "")], [("call", "print(1)", "")]),
    ("with-stdin", call_text("print(input())", "7\n"), [("call", "print(input())", "7\n")], None),
    ("no-call", "I will just answer. <answer>\\boxed{1}</answer>", [], []),
    ("stray-close-tag", "done </tool_call> really", [], []),
    (
        "whitespace-around-json",
        "<tool_call>\n  " + json.dumps({"name": FN, "arguments": {"code": "x=1"}}) + "\n\n</tool_call>",
        [("call", "x=1", "")],
        None,
    ),
    (
        "text-after-call-ignored",
        call_text("print(2)") + "\nNow I wait. <answer>\\boxed{3}</answer>",
        [("call", "print(2)", "")],
        None,
    ),
    (
        "unclosed",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": "print(1)"}}),
        [("unclosed_tag", None, None)],
        [("unclosed_tag", None, None)],
    ),
    (
        "unclosed-then-restart",
        '<tool_call>{"name": "' + FN + '", "argu' + call_text("print(3)"),
        [("unclosed_tag", None, None), ("call", "print(3)", "")],
        None,
    ),
    ("empty", "<tool_call>  \n </tool_call>", [("empty_call", None, None)], [("empty_call", None, None)]),
    ("garbage", "<tool_call>print(1)</tool_call>", [("invalid_json", None, None)], [("invalid_json", None, None)]),
    (
        "trailing-comma",
        '<tool_call>{"name": "' + FN + '", "arguments": {"code": "1",}}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "1", "")],
    ),  # lenient: a Python literal allows the comma
    (
        "extra-data",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": "1"}}) + " }</tool_call>",
        [("invalid_json", None, None)],
        None,
    ),
    ("not-object", "<tool_call>[1, 2]</tool_call>", [("not_an_object", None, None)], None),
    ("string-json", '<tool_call>"hello"</tool_call>', [("not_an_object", None, None)], None),
    (
        "missing-name",
        "<tool_call>" + json.dumps({"arguments": {"code": "1"}}) + "</tool_call>",
        [("missing_name", None, None)],
        None,
    ),
    (
        "invalid-name",
        "<tool_call>" + json.dumps({"name": 3, "arguments": {"code": "1"}}) + "</tool_call>",
        [("invalid_name", None, None)],
        None,
    ),
    ("unknown-function", call_text("1", name="WolframAlpha"), [("unknown_function", None, None)], None),
    (
        "release-name-not-default",
        call_text("1", name="python_code_with_standard_io"),
        [("unknown_function", None, None)],
        None,
    ),
    (
        "missing-arguments",
        "<tool_call>" + json.dumps({"name": FN}) + "</tool_call>",
        [("missing_arguments", None, None)],
        None,
    ),
    (
        "arguments-list",
        "<tool_call>" + json.dumps({"name": FN, "arguments": ["print(1)"]}) + "</tool_call>",
        [("arguments_not_object", None, None)],
        [("arguments_not_object", None, None)],
    ),
    (
        "arguments-as-string",
        "<tool_call>" + json.dumps({"name": FN, "arguments": json.dumps({"code": "print(4)"})}) + "</tool_call>",
        [("arguments_not_object", None, None)],
        [("call", "print(4)", "")],
    ),
    (
        "arguments-bad-string",
        "<tool_call>" + json.dumps({"name": FN, "arguments": "print(4)"}) + "</tool_call>",
        [("arguments_not_object", None, None)],
        [("arguments_not_object", None, None)],
    ),
    (
        "parameters-key",
        "<tool_call>" + json.dumps({"name": FN, "parameters": {"code": "print(5)"}}) + "</tool_call>",
        [("missing_arguments", None, None)],
        [("call", "print(5)", "")],
    ),
    (
        "missing-code",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"input": "1"}}) + "</tool_call>",
        [("missing_code", None, None)],
        None,
    ),
    (
        "code-not-string",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": ["a"]}}) + "</tool_call>",
        [("bad_argument_type", None, None)],
        [("bad_argument_type", None, None)],
    ),
    ("empty-code", call_text("   \n"), [("empty_code", None, None)], [("empty_code", None, None)]),
    (
        "input-number",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": "x", "input": 5}}) + "</tool_call>",
        [("bad_argument_type", None, None)],
        [("call", "x", "5")],
    ),
    (
        "input-null",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": "x", "input": None}}) + "</tool_call>",
        [("bad_argument_type", None, None)],
        [("call", "x", "")],
    ),
    (
        "input-bool-never-coerced",
        "<tool_call>" + json.dumps({"name": FN, "arguments": {"code": "x", "input": True}}) + "</tool_call>",
        [("bad_argument_type", None, None)],
        [("bad_argument_type", None, None)],
    ),
    (
        "raw-newline-in-string",
        '<tool_call>{"name": "' + FN + '", "arguments": {"code": "a = 1\n\tprint(a)"}}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "a = 1\n\tprint(a)", "")],
    ),
    (
        "python-dict-literals",
        "<tool_call>{'name': '" + FN + "', 'arguments': {'code': 'print(True)', 'input': None}}</tool_call>",
        [("invalid_json", None, None)],
        [("call", "print(True)", "")],
    ),
    (
        "invalid-latex-escape",
        '<tool_call>{"name": "' + FN + '", "arguments": {"code": "s = r\'\\sqrt{2}\'"}}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "s = r'\\sqrt{2}'", "")],
    ),
    (
        "invalid-unicode-escape",
        '<tool_call>{"name": "' + FN + '", "arguments": {"code": "t = r\'\\underbrace\'"}}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "t = r'\\underbrace'", "")],
    ),
    (
        "code-fence",
        "<tool_call>\n```json\n" + json.dumps({"name": FN, "arguments": {"code": "print(6)"}}) + "\n```\n</tool_call>",
        [("invalid_json", None, None)],
        [("call", "print(6)", "")],
    ),
    (
        "close-tag-in-code",
        call_text("s = '</tool_call>'\nprint(len(s))"),
        [("call", "s = '</tool_call>'\nprint(len(s))", "")],
        None,
    ),
    ("open-tag-in-code", call_text("s = '<tool_call>'\nprint(s)"), [("call", "s = '<tool_call>'\nprint(s)", "")], None),
    ("think-tags-in-code", call_text("print('</think>')"), [("call", "print('</think>')", "")], None),
    (
        "two-calls",
        "a " + call_text("print(1)") + " b " + call_text("print(2)") + " c",
        [("call", "print(1)", ""), ("call", "print(2)", "")],
        None,
    ),
    (
        "error-then-call",
        "<tool_call>nope</tool_call>" + call_text("print(2)"),
        [("invalid_json", None, None), ("call", "print(2)", "")],
        None,
    ),
    (
        "unbalanced-quote-does-not-swallow-next",
        '<tool_call>{"code": "x</tool_call> then ' + call_text("print(9)"),
        [("invalid_json", None, None), ("call", "print(9)", "")],
        None,
    ),
    ("reason-calls-are-real", "<reason>Let me compute. " + call_text("print(7)"), [("call", "print(7)", "")], None),
    (
        "closed-think-is-draft",
        "<think>draft " + call_text("print(1)") + "</think>" + call_text("print(2)"),
        [("call", "print(2)", "")],
        None,
    ),
    ("unclosed-think-is-real", "<think>working " + call_text("print(3)"), [("call", "print(3)", "")], None),
    (
        "draft-with-close-tag-in-code",
        "<think>" + call_text("print('</think>')") + " still drafting</think>" + call_text("print(4)"),
        [("call", "print(4)", "")],
        None,
    ),
    ("two-drafts", "<think>" + call_text("a") + "</think> x <think>" + call_text("b") + "</think>", [], None),
]


@pytest.mark.parametrize("case_id,text,strict,lenient", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_strict(case_id, text, strict, lenient):
    assert summary(parse_tool_calls(text)) == strict


@pytest.mark.parametrize("case_id,text,strict,lenient", PARSE_CASES, ids=[c[0] for c in PARSE_CASES])
def test_parse_lenient(case_id, text, strict, lenient):
    items = parse_tool_calls(text, lenient=True)
    assert summary(items) == (strict if lenient is None else lenient)
    for item, expected in zip(items, strict):
        if isinstance(item, ToolCall):
            # A call that strict mode accepts is never marked repaired by lenient mode, and vice versa.
            assert item.repaired == (expected[0] != "call")
            assert item.repaired == bool(item.repairs)


def test_every_error_kind_is_documented_and_exercised():
    seen = {kind for c in PARSE_CASES for r in (c[2], c[3] or []) for (kind, _, _) in r if kind != "call"}
    assert seen == set(ERROR_KINDS)


def test_errors_carry_message_raw_and_span():
    text = "pre <tool_call>{bad json}</tool_call> post"
    [err] = parse_tool_calls(text)
    assert isinstance(err, ToolCallError)
    assert err.kind == "invalid_json"
    assert err.raw == "{bad json}"
    assert text[err.span[0] : err.span[1]] == "<tool_call>{bad json}</tool_call>"
    assert "JSON" in err.message and "\n" not in err.message


def test_call_span_and_raw():
    block = call_text("print(1)")
    text = "abc " + block + " def"
    [call] = parse_tool_calls(text)
    assert text[call.span[0] : call.span[1]] == block
    assert call.raw == block[len("<tool_call>") : -len("</tool_call>")]


def test_repairs_are_listed():
    text = "<tool_call>{'name': '" + FN + "', 'arguments': " + json.dumps(json.dumps({"code": "1"})) + "}</tool_call>"
    [call] = parse_tool_calls(text, lenient=True)
    assert call.repairs == ["python_literal", "arguments_as_string"]


def test_config_lenient_and_override():
    text = "<tool_call>{'name': '" + FN + "', 'arguments': {'code': '1'}}</tool_call>"
    cfg = ProtocolConfig(lenient=True)
    assert isinstance(parse_tool_calls(text, cfg)[0], ToolCall)
    assert isinstance(parse_tool_calls(text, cfg, lenient=False)[0], ToolCallError)


def test_multi_call_first_keeps_only_first_block():
    cfg = ProtocolConfig(multi_call="first")
    text = "<tool_call>oops</tool_call>" + call_text("print(2)")
    assert summary(parse_tool_calls(text, cfg)) == [("invalid_json", None, None)]
    assert summary(parse_tool_calls(call_text("a") + call_text("b"), cfg)) == [("call", "a", "")]


def test_function_aliases_accept_release_name():
    cfg = ProtocolConfig(function_aliases=("python_code_with_standard_io",))
    [call] = parse_tool_calls(call_text("1", name="python_code_with_standard_io"), cfg)
    assert isinstance(call, ToolCall) and call.name == "python_code_with_standard_io"


def test_custom_function_name_and_tags():
    cfg = ProtocolConfig(function_name="run", tool_call_open="[CALL]", tool_call_close="[/CALL]")
    text = "[CALL]" + json.dumps({"name": "run", "arguments": {"code": "print(1)"}}) + "[/CALL]"
    assert summary(parse_tool_calls(text, cfg)) == [("call", "print(1)", "")]
    assert parse_tool_calls(call_text("print(1)"), cfg) == []


def test_drafts_can_be_kept():
    cfg = ProtocolConfig(ignore_think_drafts=False)
    text = "<think>" + call_text("a") + "</think>" + call_text("b")
    assert [s[1] for s in summary(parse_tool_calls(text, cfg))] == ["a", "b"]


def test_think_as_reasoning_tag_disables_drafts():
    cfg = ProtocolConfig(reason_open="<think>", reason_close="</think>", prefill="<think>")
    text = "plan " + call_text("a") + "</think>"
    assert [s[1] for s in summary(parse_tool_calls(text, cfg))] == ["a"]


def test_prefilled_think_starts_a_draft():
    cfg = ProtocolConfig(prefill="<think>\n")
    text = "drafting " + call_text("a") + "</think>" + call_text("b")
    assert [s[1] for s in summary(parse_tool_calls(text, cfg))] == ["b"]


def test_extra_keys_warn_and_are_dropped():
    text = "<tool_call>" + json.dumps({"name": FN, "id": 1, "arguments": {"code": "1", "timeout": 3}}) + "</tool_call>"
    [call] = parse_tool_calls(text)
    assert call.arguments == {"code": "1", "input": ""}
    assert call.warnings == ["ignored_key:id", "ignored_argument:timeout"]
    assert not call.repaired


SUSPICIOUS = [
    ("form-feed-frac", "print(r'\\frac{1}{2}')", ["suspicious_escape:\\frac"]),
    ("backspace-binom", "x = '\\binom{4}{2}'", ["suspicious_escape:\\binom"]),
    ("tab-theta", "s = '\\theta'", ["suspicious_escape:\\theta"]),
    ("newline-neq", "s = 'a \\neq b'", ["suspicious_escape:\\neq"]),
    ("carriage-rho", "s = '\\rho'", ["suspicious_escape:\\rho"]),
    ("newline-ordinary", "a = 1\\nprint(a)", []),
    ("newline-before-word", "a = 1\\nnum = 2", []),
    ("escaped-backslash", "print(r'\\\\frac{1}{2}')", []),
]


@pytest.mark.parametrize("case_id,json_code,warnings", SUSPICIOUS, ids=[c[0] for c in SUSPICIOUS])
def test_suspicious_escapes_flagged_not_repaired(case_id, json_code, warnings):
    text = '<tool_call>{"name": "' + FN + '", "arguments": {"code": "' + json_code + '"}}</tool_call>'
    [call] = parse_tool_calls(text, lenient=True)
    assert call.warnings == warnings
    assert not call.repaired
    assert call.code == json.loads('"' + json_code + '"')


# Field cases, component "parser" (tests/data/field_cases.jsonl). Inputs copied verbatim.
F = FN
FIELD_PARSER = [
    (
        "F26",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "x = 1\nprint(x)", "input": ""}}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "x = 1\nprint(x)", "")],
    ),
    (
        "F28",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "s = \'</tool_call>\'\\nprint(len(s))", '
        '"input": ""}}</tool_call>',
        [("call", "s = '</tool_call>'\nprint(len(s))", "")],
        None,
    ),
    (
        "F29",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "print(r\'\\\\frac{1}{2}\')", '
        '"input": ""}}</tool_call>',
        [("call", "print(r'\\frac{1}{2}')", "")],
        None,
    ),
    (
        "F29-single-backslash",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "print(r\'\\frac{1}{2}\')", "input": ""}}</tool_call>',
        [("call", "print(r'\x0crac{1}{2}')", "")],
        None,
    ),
    (
        "F31",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "print(\\"don\'t\\")", "input": ""}}</tool_call>',
        [("call", 'print("don\'t")', "")],
        None,
    ),
    (
        "F32",
        "<tool_call>{'name': '" + F + "', 'arguments': {'code': 'print(1+1)', 'input': ''}}</tool_call>",
        [("invalid_json", None, None)],
        [("call", "print(1+1)", "")],
    ),
    (
        "F34",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "for i in range(3):\\n    print(i',
        [("unclosed_tag", None, None)],
        None,
    ),
    (
        "F35",
        'Let me check both.\n<tool_call>{"name": "' + F + '", "arguments": {"code": "print(\'a\')", '
        '"input": ""}}</tool_call>\n<tool_call>{"name": "' + F + '", "arguments": {"code": "print(\'b\')", '
        '"input": ""}}</tool_call>',
        [("call", "print('a')", ""), ("call", "print('b')", "")],
        None,
    ),
    (
        "F37",
        '<think>Plan: I will call <tool_call>{"name": "' + F + '", "arguments": {"code": "print(1)", '
        '"input": ""}}</tool_call> and then check.</think><tool_call>{"name": "' + F + '", "arguments": '
        '{"code": "print(1)", "input": ""}}</tool_call>',
        [("call", "print(1)", "")],
        None,
    ),
    (
        "F38",
        '<tool_call>{"name": "' + F + '", "arguments": \\n{"code": "print(5)", "input": ""}\\n}</tool_call>',
        [("invalid_json", None, None)],
        [("call", "print(5)", "")],
    ),
    (
        "F40",
        '<tool_call>{"name": "' + F + '", "arguments": ["print(1)"]}</tool_call>',
        [("arguments_not_object", None, None)],
        None,
    ),
    (
        "F40-missing-input",
        '<tool_call>{"name": "' + F + '", "arguments": {"code": "print(input())"}}</tool_call>',
        [("call", "print(input())", "")],
        None,
    ),
]


@pytest.mark.parametrize("case_id,text,strict,lenient", FIELD_PARSER, ids=[c[0] for c in FIELD_PARSER])
def test_field_parser_cases(case_id, text, strict, lenient):
    assert summary(parse_tool_calls(text)) == strict
    assert summary(parse_tool_calls(text, lenient=True)) == (strict if lenient is None else lenient)


def test_field_parser_cases_match_shared_file():
    shared = {}
    for line in FIELD_CASES.read_text().splitlines():
        if line.strip():
            case = json.loads(line)
            if case["component"] == "parser":
                shared[case["id"]] = case["input"]
    assert set(shared) == {c[0].split("-")[0] for c in FIELD_PARSER}
    ours = {c[0]: c[1] for c in FIELD_PARSER}
    for case_id, inputs in shared.items():
        assert ours[case_id] == inputs["text"], case_id
    assert ours["F29-single-backslash"] == shared["F29"]["variant_single_backslash"]
    assert ours["F40-missing-input"] == shared["F40"]["variant_missing_input"]


def test_f29_single_backslash_is_flagged():
    [call] = parse_tool_calls(FIELD_PARSER[3][1])
    assert call.warnings == ["suspicious_escape:\\frac"]


@pytest.mark.parametrize("bad", [None, 3, b"<tool_call>", ["x"]])
def test_non_string_input_gives_no_calls(bad):
    assert parse_tool_calls(bad) == []


def test_deeply_nested_json_does_not_raise():
    text = "<tool_call>" + "[" * 100_000 + "]" * 100_000 + "</tool_call>"
    [err] = parse_tool_calls(text, lenient=True)
    assert err.kind in ("invalid_json", "not_an_object")


def test_huge_integer_does_not_raise():
    text = '<tool_call>{"name": "' + FN + '", "arguments": {"code": ' + "9" * 5000 + "}}</tool_call>"
    [err] = parse_tool_calls(text, lenient=True)
    assert isinstance(err, ToolCallError)


@pytest.mark.timeout(60)  # a hang guard: quadratic scanning took minutes here; linear takes well under a second
def test_many_abandoned_calls_each_end_at_the_next_open():
    text = "<tool_call>x " * 3000 + "</tool_call>"
    for lenient in (False, True):
        items = parse_tool_calls(text, lenient=lenient)
        assert [i.kind for i in items] == ["unclosed_tag"] * 2999 + ["invalid_json"]
        assert all(a.span[1] == b.span[0] for a, b in zip(items, items[1:]))


@pytest.mark.timeout(60)
def test_many_valid_calls_all_parsed_in_order():
    text = "".join(call_text(f"print({i})") for i in range(2000))
    assert [c.code for c in parse_tool_calls(text, lenient=True)] == [f"print({i})" for i in range(2000)]


@settings(max_examples=300, deadline=None)
@given(code=st.text(min_size=1).filter(lambda s: s.strip()), stdin=st.text())
def test_render_then_parse_round_trips(code, stdin):
    text = "<reason>Let me check.\n" + render_tool_call(code, stdin) + "\n"
    items = parse_tool_calls(text)
    assert len(items) == 1 and isinstance(items[0], ToolCall)
    assert items[0].arguments == {"code": code, "input": stdin}
    assert items[0].name == FN and not items[0].repaired


@settings(max_examples=100, deadline=None)
@given(
    codes=st.lists(st.text(min_size=1).filter(lambda s: s.strip()), min_size=1, max_size=4),
    glue=st.text(alphabet=st.characters(blacklist_characters="<"), max_size=20),
)
def test_several_rendered_calls_round_trip_in_order(codes, glue):
    text = glue.join(render_tool_call(code) for code in codes)
    assert [item.code for item in parse_tool_calls(text)] == codes


@settings(max_examples=400, deadline=None)
@given(
    st.one_of(
        st.lists(
            st.sampled_from(
                [
                    "<tool_call>",
                    "</tool_call>",
                    "<think>",
                    "</think>",
                    "{",
                    "}",
                    '"',
                    "'",
                    "\\",
                    ":",
                    ",",
                    '"name"',
                    f'"{FN}"',
                    '"arguments"',
                    '"code"',
                    '"input"',
                    "[",
                    "]",
                    "\n",
                    " ",
                    "x",
                    "True",
                    "```",
                ]
            ),
            max_size=40,
        ).map("".join),
        st.text(max_size=300),
    )
)
def test_parse_never_raises(text):
    for cfg in (ProtocolConfig(), ProtocolConfig(lenient=True, multi_call="first")):
        items = parse_tool_calls(text, cfg)
        for item in items:
            assert isinstance(item, (ToolCall, ToolCallError))
            if isinstance(item, ToolCall):
                assert isinstance(item.code, str) and item.code.strip()
                assert set(item.arguments) == {"code", "input"}
            else:
                assert item.kind in ERROR_KINDS
            assert 0 <= item.span[0] < item.span[1] <= len(text)


@pytest.mark.parametrize(
    "field,value",
    [
        ("multi_call", "some"),
        ("answer_fallback", "guess"),
        ("chat_template", "llama"),
        ("function_name", ""),
        ("tool_call_open", ""),
    ],
)
def test_config_rejects_unknown_policies(field, value):
    with pytest.raises(ValueError, match=field):
        ProtocolConfig(**{field: value})


class _CountingDecoder:
    """Wraps the parser's JSON decoder and adds up the length of every document it is given."""

    def __init__(self, inner):
        self.inner = inner
        self.chars = 0

    def raw_decode(self, s, idx=0):
        self.chars += len(s)
        return self.inner.raw_decode(s, idx)


@pytest.mark.parametrize(
    "block",
    [
        "<tool_call>",
        "<tool_call>{</tool_call>",
        "<think><tool_call>x</tool_call></think>",
        '<tool_call>{"a": "',
        '<tool_call>"',
    ],
)
def test_decoding_work_is_linear_in_the_turn_length(monkeypatch, block):
    # The fast path used to decode from the block to the end of the turn; a JSONDecodeError then counts every
    # newline before its offset, so 20000 broken blocks took seconds (quadratic). Each block now decodes a
    # slice that ends at the next <tool_call>.
    from tirl.protocol import parse as parse_module

    counter = _CountingDecoder(parse_module._DECODER)
    monkeypatch.setattr(parse_module, "_DECODER", counter)
    text = block * 2000
    for lenient in (False, True):
        parse_tool_calls(text, lenient=lenient)
    assert counter.chars <= 2 * 40 * len(text)


def test_code_holding_several_open_tags_still_parses():
    code = "s = '<tool_call>'\n" * 5 + "print(s)"
    text = call_text(code) + "\n" + call_text("print(2)")
    items = parse_tool_calls(text)
    assert [c.code for c in items] == [code, "print(2)"]


# ------------------------------------------------------------------------------------- untagged calls (lenient)

LENIENT = ProtocolConfig(lenient=True)
NATIVE_LENIENT = ProtocolConfig(prompt_style="native", lenient=True)
CALL_JSON = json.dumps({"name": FN, "arguments": {"code": "print(3 * 60)", "input": ""}})
# The two whole turns Qwen2.5-Coder-0.5B-Instruct wrote in native style when asked to call the tool (issue 43).
FENCED_TURN = "```json\n" + CALL_JSON + "\n```<|im_end|>"
BARE_TURN = CALL_JSON + "<|im_end|>"


@pytest.mark.parametrize("cfg", [LENIENT, NATIVE_LENIENT], ids=["full", "native"])
@pytest.mark.parametrize("turn,fenced", [(BARE_TURN, False), (FENCED_TURN, True)], ids=["bare", "fenced"])
def test_an_untagged_call_is_read_in_lenient_mode_and_marked(cfg, turn, fenced):
    [call] = parse_tool_calls(turn, cfg)
    assert isinstance(call, ToolCall)
    assert call.arguments == {"code": "print(3 * 60)", "input": ""} and call.name == FN
    assert call.repaired and call.repairs == (["untagged", "code_fence"] if fenced else ["untagged"])
    assert call.raw == CALL_JSON
    # the span is the object, or the whole fence when the object was its only content
    assert turn[slice(*call.span)] == ("```json\n" + CALL_JSON + "\n```" if fenced else CALL_JSON)
    # strict mode is unchanged: no tag, no call (the turn is a final answer)
    assert parse_tool_calls(turn, dataclasses.replace(cfg, lenient=False)) == []
    assert parse_tool_calls(turn, cfg, lenient=False) == []


def test_a_fenced_multi_call_turn_gives_every_call_in_order_and_multi_call_first_one():
    second = json.dumps({"name": FN, "arguments": {"code": "print(2 * 80)"}})
    turn = f"First:\n```json\n{CALL_JSON}\n```\nThen:\n```\n{second}\n```\nThat is all."
    items = parse_tool_calls(turn, LENIENT)
    assert summary(items) == [("call", "print(3 * 60)", ""), ("call", "print(2 * 80)", "")]
    assert [turn[slice(*c.span)] for c in items] == [f"```json\n{CALL_JSON}\n```", f"```\n{second}\n```"]
    # two bare objects in one fence: each is a call of its own (its span the object)
    both = f"```json\n{CALL_JSON}\n{second}\n```"
    items = parse_tool_calls(both, LENIENT)
    assert [c.code for c in items] == ["print(3 * 60)", "print(2 * 80)"]
    assert [both[slice(*c.span)] for c in items] == [CALL_JSON, second]
    assert all(c.repairs == ["untagged"] for c in items)
    first = parse_tool_calls(turn, dataclasses.replace(LENIENT, multi_call="first"))
    assert summary(first) == [("call", "print(3 * 60)", "")]


@pytest.mark.parametrize(
    "turn",
    [
        json.dumps({"name": "calculator", "arguments": {"code": "print(1)"}}),  # another name
        json.dumps({"name": FN, "args": {"code": "print(1)"}}),  # no "arguments"
        # arguments of another name's object are not a call of their own
        json.dumps({"name": "other", "arguments": {"name": FN, "arguments": {"code": "print(1)"}}}),
        'The answer as JSON is {"answer": 180}, so \\boxed{180}.',  # a final answer that mentions JSON
        'I would call {"name": "' + FN + '", "arguments": {"code": print(1)}} but did not.',  # not JSON
        "```json\n{not json at all}\n```\nSo \\boxed{3}.",
        "<think>" + CALL_JSON + "</think> So \\boxed{180}.",  # a draft
    ],
    ids=["wrong-name", "no-arguments", "nested", "answer-json", "not-json", "fence-not-json", "draft"],
)
def test_objects_that_are_not_calls_leave_the_turn_a_final_answer(turn):
    assert parse_tool_calls(turn, LENIENT) == []


def test_untagged_calls_are_checked_as_tagged_ones_and_repaired_the_same_way():
    # raw newlines in the code string (control_characters), a Python literal, an empty code: the tagged path's
    # repairs and errors
    raw_newline = '{"name": "' + FN + '", "arguments": {"code": "x = 2\nprint(x)", "input": ""}}'
    [call] = parse_tool_calls(raw_newline, LENIENT)
    assert call.code == "x = 2\nprint(x)" and call.repairs == ["untagged", "control_characters"]
    empty = json.dumps({"name": FN, "arguments": {"code": " ", "input": ""}})
    [err] = parse_tool_calls("Let me run it.\n" + empty, LENIENT)
    assert isinstance(err, ToolCallError) and err.kind == "empty_code"
    assert err.span == (len("Let me run it.\n"), len("Let me run it.\n") + len(empty)) and err.raw == empty
    # an object after an unclosed brace is still found
    text = "Note: {unbalanced\n" + CALL_JSON
    assert summary(parse_tool_calls(text, LENIENT)) == [("call", "print(3 * 60)", "")]


def test_untagged_calls_never_fire_when_the_turn_has_a_tag():
    # a tagged (even broken) call: the turn scan's result only, the bare object is text
    turn = CALL_JSON + "\n<tool_call>{broken</tool_call>"
    assert summary(parse_tool_calls(turn, LENIENT)) == [("invalid_json", None, None)]
    unclosed = CALL_JSON + "\n<tool_call>"
    assert summary(parse_tool_calls(unclosed, LENIENT)) == [("unclosed_tag", None, None)]


def test_untagged_calls_are_for_json_formats_only():
    xml = ProtocolConfig(lenient=True, tool_call_format="qwen3_xml")
    assert parse_tool_calls(BARE_TURN, xml) == []
    assert parse_tool_calls(FENCED_TURN, xml) == []


def test_untagged_scan_tries_a_bounded_number_of_objects(monkeypatch):
    from tirl.protocol import parse as parse_module

    tried = []
    real = parse_module._object_end
    monkeypatch.setattr(parse_module, "_object_end", lambda text, start: tried.append(start) or real(text, start))
    parse_tool_calls('{"name": ' * 5000, LENIENT)  # never closed: every candidate reads to the end
    parse_tool_calls('{"name": 1} ' * 5000, LENIENT)  # closed, no call
    assert len(tried) <= 2 * parse_module.MAX_UNTAGGED_CANDIDATES


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "{",
                "}",
                '"',
                "\\",
                ":",
                ",",
                '"name"',
                f'"{FN}"',
                '"arguments"',
                '"code"',
                '"input"',
                '"print(1)"',
                "```",
                "```json\n",
                "\n",
                " ",
                "x",
                "[",
                "]",
                "'",
                "True",
                "<think>",
                "</think>",
                CALL_JSON,
            ]
        ),
        max_size=40,
    ).map("".join)
)
def test_untagged_parsing_never_raises_and_spans_are_in_the_turn(text):
    for cfg in (LENIENT, dataclasses.replace(LENIENT, multi_call="first"), NATIVE_LENIENT):
        items = parse_tool_calls(text, cfg)
        if cfg.multi_call == "first":
            assert len(items) <= 1
        last = 0
        for item in items:
            assert isinstance(item, (ToolCall, ToolCallError))
            start, end = item.span
            assert last <= start < end <= len(text)
            last = end
            if isinstance(item, ToolCall):
                assert "untagged" in item.repairs and item.repaired
                assert set(item.arguments) == {"code", "input"} and item.code.strip()
