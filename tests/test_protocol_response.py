"""Tool-response text for execution results and parse errors (tirl.protocol.response), and the prompt texts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.protocol import ProtocolConfig, ToolCall, ToolCallError
from tirl.protocol.parse import parse_tool_calls
from tirl.protocol.prompt import default_system_prompt, prompt_messages, system_prompt, tool_schema, tools_block
from tirl.protocol.response import (
    INTERNAL_ERROR_TEXT,
    SANDBOX_TRUNCATION_MARKER,
    cut_marker,
    render_call_response,
    render_parse_error,
    render_tool_response,
    truncate_middle,
)
from tirl.sandbox.types import EXECUTION_STATUSES, ExecutionResult

TB = 'Traceback (most recent call last):\n  File "<code>", line 1, in <module>\nZeroDivisionError: division by zero'
NO_OUTPUT = ProtocolConfig().no_output_text

# (id, result, expected text)
RESPONSE_CASES = [
    ("stdout", ExecutionResult(status="ok", stdout="91\n"), "91"),
    ("stdout-keeps-inner-newlines", ExecutionResult(status="ok", stdout="a\n\nb\n\n"), "a\n\nb\n"),
    ("stdout-leading-space", ExecutionResult(status="ok", stdout="  x\n"), "  x"),
    ("display-when-no-stdout", ExecutionResult(status="ok", display="[1, 2, 3]"), "[1, 2, 3]"),
    ("stdout-wins-over-display", ExecutionResult(status="ok", stdout="p\n", display="3"), "p"),
    ("display-empty-string-repr", ExecutionResult(status="ok", display="''"), "''"),
    ("no-output", ExecutionResult(status="ok"), NO_OUTPUT),
    ("printed-empty-line", ExecutionResult(status="ok", stdout="\n", display="3"), ""),
    (
        "ok-with-stderr",
        ExecutionResult(status="ok", stdout="1\n", stderr="DeprecationWarning: x\n"),
        "1\n[stderr]\nDeprecationWarning: x",
    ),
    (
        "sandbox-truncated",
        ExecutionResult(status="ok", stdout="1\n2\n", stdout_truncated=True),
        "1\n2\n" + SANDBOX_TRUNCATION_MARKER,
    ),
    ("exception", ExecutionResult(status="error", error_type="ZeroDivisionError", traceback=TB, exit_code=1), TB),
    (
        "exception-after-output",
        ExecutionResult(
            status="error", stdout="start\n", error_type="ZeroDivisionError", traceback=TB + "\n", exit_code=1
        ),
        "start\n" + TB,
    ),
    ("error-type-only", ExecutionResult(status="error", error_type="MemoryError"), "MemoryError"),
    ("nonzero-exit", ExecutionResult(status="error", exit_code=3), "Process exited with code 3."),
    (
        "nonzero-exit-stderr",
        ExecutionResult(status="error", exit_code=2, stderr="usage: bad\n"),
        "[stderr]\nusage: bad\nProcess exited with code 2.",
    ),
    ("error-no-info", ExecutionResult(status="error"), "The process failed."),
    (
        "timeout",
        ExecutionResult(status="timeout", duration_s=4.02),
        "TimeoutError: the code did not finish within the time limit (4.0 s) and was stopped.",
    ),
    (
        "timeout-partial-output",
        ExecutionResult(status="timeout", stdout="1\n2\n"),
        "1\n2\nTimeoutError: the code did not finish within the time limit and was stopped.",
    ),
    (
        "killed",
        ExecutionResult(status="killed", exit_code=-9, stderr="memory limit exceeded (2048 MiB)"),
        "The process was killed (exit code -9): memory limit exceeded (2048 MiB)",
    ),
    (
        "killed-no-reason",
        ExecutionResult(status="killed"),
        "The process was killed: it used too much memory or produced too much output",
    ),
    ("internal", ExecutionResult(status="internal", stderr="worker 3 died: BrokenPipeError"), INTERNAL_ERROR_TEXT),
]


@pytest.mark.parametrize("case_id,result,expected", RESPONSE_CASES, ids=[c[0] for c in RESPONSE_CASES])
def test_render_tool_response(case_id, result, expected):
    assert render_tool_response(result) == expected


def test_internal_details_are_not_shown_to_the_model():
    text = render_tool_response(ExecutionResult(status="internal", stderr="redis at 10.0.0.3 refused"))
    assert "redis" not in text


def test_long_output_is_cut_with_marker():
    stdout = "".join(f"line {i}\n" for i in range(1000))
    text = render_tool_response(
        ExecutionResult(status="ok", stdout=stdout), ProtocolConfig(tool_response_max_chars=200)
    )
    assert len(text) <= 200
    assert text.startswith("line 0\nline 1\n") and text.endswith("line 998\nline 999")
    shown = len(stdout) - 1  # the trailing newline is dropped before the cut
    kept = len(text) - len(cut_marker(shown - 1))
    assert cut_marker(shown - kept) in text


def test_traceback_tail_survives_the_cut():
    stdout = "x" * 5000 + "\n"
    result = ExecutionResult(status="error", stdout=stdout, error_type="ZeroDivisionError", traceback=TB)
    text = render_tool_response(result, ProtocolConfig(tool_response_max_chars=300))
    assert text.endswith("ZeroDivisionError: division by zero")


def test_cap_disabled():
    stdout = "y" * 10_000
    assert (
        render_tool_response(ExecutionResult(status="ok", stdout=stdout), ProtocolConfig(tool_response_max_chars=0))
        == stdout
    )


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=400), limit=st.integers(min_value=30, max_value=500))
def test_truncate_middle_properties(text, limit):
    out = truncate_middle(text, limit)
    if len(text) <= limit:
        assert out == text
        return
    assert len(out) <= limit
    start = out.index("\n...[")
    end = out.index("]...\n", start) + len("]...\n")
    head, tail = out[:start], out[end:]
    cut = int(out[start + len("\n...[") : out.index(" characters cut", start)])
    assert text.startswith(head) and text.endswith(tail)
    assert len(head) + cut + len(tail) == len(text)
    assert abs(len(head) - len(tail)) <= 1


def test_truncate_tiny_limit_still_says_it_cut():
    assert truncate_middle("z" * 100, 5) == cut_marker(100)


@settings(max_examples=200, deadline=None)
@given(
    status=st.sampled_from(EXECUTION_STATUSES),
    stdout=st.text(max_size=50),
    stderr=st.text(max_size=50),
    display=st.one_of(st.none(), st.text(max_size=20)),
    tb=st.one_of(st.none(), st.text(max_size=50)),
    exit_code=st.one_of(st.none(), st.integers(-20, 300)),
    flags=st.tuples(st.booleans(), st.booleans()),
)
def test_render_tool_response_never_raises(status, stdout, stderr, display, tb, exit_code, flags):
    result = ExecutionResult(
        status=status,
        stdout=stdout,
        stderr=stderr,
        display=display,
        traceback=tb,
        exit_code=exit_code,
        stdout_truncated=flags[0],
        stderr_truncated=flags[1],
    )
    text = render_tool_response(result, ProtocolConfig(tool_response_max_chars=120))
    assert isinstance(text, str) and len(text) <= 120
    if status != "ok" or not stdout:
        assert text  # only a program that printed whitespace can get an empty response


PARSE_ERRORS = [
    ToolCallError(kind="invalid_json", message="The tool call is not valid JSON: Expecting value (line 1, column 2)."),
    ToolCallError(kind="unknown_function", message='Unknown function "WolframAlpha".'),
    ToolCallError(kind="unclosed_tag", message="The tool call was not closed."),
]


@pytest.mark.parametrize("err", PARSE_ERRORS, ids=[e.kind for e in PARSE_ERRORS])
def test_render_parse_error(err):
    text = render_parse_error(err)
    assert text.startswith(f"Tool call error ({err.kind}): {err.message}")
    assert "Nothing was run." in text
    example = text[text.index("{") :]
    assert json.loads(example)["name"] == "execute_python_code_with_standard_io"


def test_render_parse_error_uses_configured_name():
    text = render_parse_error(PARSE_ERRORS[0], ProtocolConfig(function_name="run"))
    assert json.loads(text[text.index("{") :])["name"] == "run"


def test_render_call_response_dispatch():
    call = ToolCall(name="execute_python_code_with_standard_io", arguments={"code": "print(1)", "input": ""})
    assert render_call_response(call, ExecutionResult(status="ok", stdout="1\n")) == "1"
    assert render_call_response(call, None) == INTERNAL_ERROR_TEXT
    assert render_call_response(PARSE_ERRORS[0], None).startswith("Tool call error (invalid_json)")


# --- prompt texts -----------------------------------------------------------------------------------------


def test_system_prompt_names_tags_and_tool():
    text = default_system_prompt()
    for needle in (
        "<reason>",
        "</reason>",
        "<answer>",
        "</answer>",
        "\\boxed{}",
        "<tool_response>",
        "execute_python_code_with_standard_io",
    ):
        assert needle in text


def test_system_prompt_follows_config():
    cfg = ProtocolConfig(reason_open="<think>", reason_close="</think>", function_name="py")
    text = system_prompt(cfg)
    assert "<think>" in text and "<reason>" not in text and "`py`" in text
    assert system_prompt(ProtocolConfig(system_prompt="Be brief.")) == "Be brief."


def test_tool_schema_shape():
    schema = tool_schema()
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "execute_python_code_with_standard_io"
    assert fn["parameters"]["required"] == ["code", "input"]
    assert {k: v["type"] for k, v in fn["parameters"]["properties"].items()} == {"code": "string", "input": "string"}
    json.dumps(schema)


def test_tools_block_contains_schema_json_and_example_call():
    block = tools_block()
    schema_line = block.split("<tools>\n")[1].split("\n</tools>")[0]
    assert json.loads(schema_line) == tool_schema()
    [call] = parse_tool_calls(block[block.rindex("<tool_call>") :])
    assert call.code == "print(2 + 2)"


def test_user_template_inserts_problem_literally():
    cfg = ProtocolConfig(user_template="Problem: {problem}\nAnswer in \\boxed{}.")
    messages = prompt_messages("What is {x} if x={problem}?", cfg)
    assert messages[1]["content"] == "Problem: What is {x} if x={problem}?\nAnswer in \\boxed{}."
    assert [m["role"] for m in messages] == ["system", "user"]
