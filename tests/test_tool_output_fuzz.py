"""Tools never raise on what a program prints (issue 41, item 3): property tests over any output.

Everything between the sandbox's bytes and the text the model reads is the program's to choose, so each step
is a total function of it: the sandbox's decoding (:func:`tirl.sandbox.outcome.decode_output`), python_session's
traceback renumbering (:func:`tirl.protocol.tools.python_session.cell_result`), the rendering and cut
(:func:`tirl.protocol.response.render_tool_response`) and the escaping (:func:`tirl.protocol.escape.safe_tool_text`).
A step that raised made the tool raise, and the agent loop then answered the call ``internal``: tirl's failure,
masked out of the loss, for a wrong trajectory of the model's own making. A hostile review did it with a
5,000-digit line number (``raise Exception('File "<code>", line ' + '1' * 5000)``; Python's ``int`` refuses
more than 4,300 digits).

Each rendered, escaped response also stays within ``ProtocolConfig.tool_response_max_chars`` (escaping a
``<`` as ``&lt;`` lengthens the text: 1,024 characters of ``</answer>`` became 1,365).
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tirl.protocol.config import ProtocolConfig
from tirl.protocol.escape import TEMPLATE_TOKENS, pattern_free, protected_strings, safe_tool_text
from tirl.protocol.response import SANDBOX_TRUNCATION_MARKER, cut_marker, render_tool_response
from tirl.protocol.tools import python_session
from tirl.protocol.tools.python_session import cell_result
from tirl.sandbox.outcome import decode_output
from tirl.sandbox.types import EXECUTION_STATUSES, ExecutionResult

CFG = ProtocolConfig()
SMALL = ProtocolConfig(tool_response_max_chars=64)

#: Pieces a hostile program likes to print: the protocol's tags, template tokens, half tags, character
#: references, the cut and truncation markers, traceback lines with small and enormous line numbers.
PIECES = [
    *protected_strings(None, CFG),
    *TEMPLATE_TOKENS,
    "<",
    ">",
    "&lt;",
    "&",
    "<tool_",
    "response>",
    "</",
    "<|im_",
    "end|>",
    "\n",
    cut_marker(12345),
    SANDBOX_TRUNCATION_MARKER,
    'File "<code>", line ',
    "on line ",
    "\\boxed{7}",
    "\udcff",  # a lone surrogate (the sandbox sanitises, a tool double might not)
]
DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=6000)
TRACEBACK_LINE = st.builds(lambda d, tail: f'  File "<code>", line {d}{tail}', DIGITS, st.sampled_from(["", ", in f"]))
HOSTILE = st.lists(
    st.one_of(
        st.sampled_from(PIECES),
        st.text(max_size=40),
        TRACEBACK_LINE,
        st.builds(lambda d: f"on line {d}", DIGITS),
        st.builds(lambda c, n: c * n, st.sampled_from(["x", "<", "</answer>", "9"]), st.integers(0, 3000)),
    ),
    max_size=12,
).map("".join)
TEXT = st.one_of(HOSTILE, st.binary(max_size=2000).map(lambda b: decode_output(b, truncated=False)))


@st.composite
def results(draw) -> ExecutionResult:
    """Any well-typed result, its text fields the program's."""
    return ExecutionResult(
        status=draw(st.sampled_from(EXECUTION_STATUSES)),
        stdout=draw(TEXT),
        stderr=draw(TEXT),
        display=draw(st.none() | TEXT),
        error_type=draw(st.none() | st.sampled_from(["Exception", "SyntaxError", "IndentationError", "X" * 500])),
        traceback=draw(st.none() | TEXT),
        exit_code=draw(st.none() | st.integers(-(2**31), 2**31)),
        duration_s=draw(st.floats(0, 1e9)),
        stdout_truncated=draw(st.booleans()),
        stderr_truncated=draw(st.booleans()),
    )


@given(st.integers(0, 10**40), st.integers(0, 3))
def test_minus_one_is_decimal_subtraction_at_least_one(n, zeros):
    assert python_session._minus_one("0" * zeros + str(n)) == str(max(n - 1, 1))


def test_minus_one_takes_any_number_of_digits():
    minus_one = python_session._minus_one
    assert minus_one("1" * 5000) == "1" * 4999 + "0"
    assert minus_one("1" + "0" * 5000) == "9" * 5000
    assert minus_one("0" * 5000) == "1"


def test_the_reviews_five_thousand_digit_line_number_is_renumbered():
    number = "1" * 5000
    tb = (
        'Traceback (most recent call last):\n  File "<code>", line 2, in <module>\n'
        f'Exception: File "<code>", line {number}'
    )
    shifted = cell_result(ExecutionResult(status="error", error_type="Exception", traceback=tb), replayed=1)
    assert shifted.traceback.endswith(f"line {'1' * 4999}0")  # before: ValueError, the tool raised
    assert 'File "<code>", line 1, in <module>' in shifted.traceback


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(results(), st.integers(0, 3))
def test_cell_result_never_raises_and_keeps_everything_but_the_numbers(result, replayed):
    shifted = cell_result(result, replayed)
    assert dataclasses.replace(shifted, traceback=result.traceback) == result
    if result.traceback is not None:
        # only the digits of the renumbered lines change
        assert re.sub("[0-9]", "", shifted.traceback) == re.sub("[0-9]", "", result.traceback)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(results(), st.sampled_from([CFG, SMALL, ProtocolConfig(tool_response_max_chars=1)]), st.integers(0, 2))
def test_a_rendered_escaped_response_is_total_safe_and_within_the_cap(result, cfg, replayed):
    text = render_tool_response(cell_result(result, replayed), cfg)
    shown = safe_tool_text(text, None, cfg)
    assert len(shown) <= max(cfg.tool_response_max_chars, len(cut_marker(10**9)))
    if cfg.tool_response_max_chars >= 64:
        assert len(shown) <= cfg.tool_response_max_chars
    assert pattern_free(shown, protected_strings(None, cfg))


def test_escaping_a_response_full_of_tags_keeps_it_within_the_cap():
    text = render_tool_response(ExecutionResult(status="ok", stdout="</answer>" * 500), CFG)
    assert len(text) <= CFG.tool_response_max_chars
    shown = safe_tool_text(text, None, CFG)
    assert len(shown) <= CFG.tool_response_max_chars  # before: 1,365 characters
    assert pattern_free(shown, protected_strings(None, CFG)) and "&lt;/answer>" in shown


@pytest.fixture(scope="module")
def tokenizer(smollm2_tokenizer):
    return smollm2_tokenizer


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(results())
def test_with_a_real_tokenizer_the_response_has_no_structural_token_and_fits(tokenizer, result):
    from tirl.protocol.escape import structural_ids

    shown = safe_tool_text(render_tool_response(result, CFG), tokenizer, CFG)
    assert len(shown) <= CFG.tool_response_max_chars
    ids = tokenizer.encode(shown.encode("utf-8", "replace").decode("utf-8"), add_special_tokens=False)
    assert not set(ids) & structural_ids(tokenizer)
