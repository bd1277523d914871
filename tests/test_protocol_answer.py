"""Answer extraction, answer-block counting and the RoC format penalty (tirl.protocol.answer)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.protocol import ProtocolConfig, Trajectory, TurnRecord, extract_answer
from tirl.protocol.answer import count_answer_blocks, find_boxes, format_penalty, trajectory_format_penalty

FIELD_CASES = Path(__file__).resolve().parent / "data" / "field_cases.jsonl"

# (id, text, expected answer)
EXTRACT_CASES = [
    ("answer-block", "<reason>x</reason><answer>The answer is \\boxed{42}.</answer>", "42"),
    ("last-box-in-block", "<answer>\\boxed{3} no wait \\boxed{4}</answer>", "4"),
    ("last-block-wins", "<answer>\\boxed{1}</answer> hmm <answer>\\boxed{2}</answer>", "2"),
    ("box-outside-block-ignored", "\\boxed{9} <answer>\\boxed{2}</answer> \\boxed{7}", "2"),
    ("block-without-box-is-none", "\\boxed{9}<answer>42</answer>", None),
    ("unclosed-block-accepted", "<answer>\\boxed{5}<|im_end|>", "5"),
    ("nested-braces", "<answer>\\boxed{\\frac{1}{\\sqrt{2}}}</answer>", "\\frac{1}{\\sqrt{2}}"),
    ("escaped-braces", "<answer>\\boxed{\\{1, 2\\}}</answer>", "\\{1, 2\\}"),
    ("escaped-close-brace-alone", "<answer>\\boxed{a\\}b}</answer>", "a\\}b"),
    ("braceless", "<answer>\\boxed 5</answer>", "5"),
    ("braceless-trailing-dot", "so \\boxed 17.", "17"),
    ("braceless-decimal", "<answer>$\\boxed 3.25$</answer>", "3.25"),
    ("braceless-no-space", "<answer>\\boxed7</answer>", "7"),
    ("space-before-brace", "<answer>\\boxed {12}</answer>", "12"),
    ("fbox", "<answer>\\fbox{7}</answer>", "7"),
    ("nested-box-unwrapped", "<answer>\\boxed{\\boxed{5}}</answer>", "5"),
    ("empty-box-skipped", "<answer>\\boxed{3} \\boxed{}</answer>", "3"),
    ("only-empty-box", "<answer>\\boxed{ }</answer>", None),
    ("truncated-box", "<answer>\\boxed{\\frac{1}{", None),
    ("truncated-after-complete-box", "<answer>\\boxed{3} or rather \\boxed{\\frac{1", None),
    ("truncated-bare-command", "the answer is \\boxed", None),
    ("not-a-box-command", "<answer>\\boxedx{3} \\boxed{4}</answer>", "4"),
    ("no-answer", "I do not know.", None),
    ("empty", "", None),
    ("fallback-last-box", "reasoning \\boxed{10} more \\boxed{11}", "11"),
    (
        "tool-response-box-ignored",
        "<tool_call>{}</tool_call><|im_end|>\n<|im_start|>user\n<tool_response>\n\\boxed{99}\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n<reason>done",
        None,
    ),
    (
        "fallback-only-final-turn",
        "first \\boxed{1}<tool_call>{}</tool_call><tool_response>\nx\n</tool_response> final \\boxed{2}",
        "2",
    ),
    (
        "fallback-not-from-earlier-turn",
        "first \\boxed{1}<tool_call>{}</tool_call><tool_response>\nx\n</tool_response> final, no box",
        None,
    ),
    (
        "answer-block-in-earlier-turn",
        "<answer>\\boxed{8}</answer><tool_call>{}</tool_call><tool_response>\nok\n</tool_response> bye",
        "8",
    ),
    (
        "answer-tag-inside-tool-response-ignored",
        "x \\boxed{3}<tool_response>\n<answer>\\boxed{4}</answer>\n</tool_response>",
        None,
    ),
    ("unclosed-tool-response-ignored", "\\boxed{2}<tool_response>\n\\boxed{5}", "2"),
]

# Field cases, component "extraction" (tests/data/field_cases.jsonl), with the behaviour tirl chose.
FIELD_EXTRACTION = [
    ("F41", "So the probability is \\boxed{\\frac{1}{2}}.", "\\frac{1}{2}"),
    ("F43", "The answer is \\fbox{7}.", "7"),
    ("F44", "The domain is \\boxed{[2,5)}", "[2,5)"),
    ("F46", "First guess \\boxed{3}. After checking, the answer is \\boxed{7}.", "7"),
    # Policy: last box only, boxes are never merged (documented in tirl.protocol.answer).
    ("F47", "The roots are \\boxed{3}, \\boxed{5}, \\boxed{7}.", "7"),
    # Policy: a GSM8K '#### 42' marker is not an answer in this protocol (only boxes are); the boxed variant is.
    ("F49", "2+40=42\n#### 42\n and the reasoning above confirms this result is consistent." * 3, None),
    ("F49-variant", "Thus \\boxed{42}. " + "Let me double check the arithmetic once more. " * 12, "42"),
    ("F50", "Let me compute step by step. So x = 12 and then we need to add the remaining terms which gives", None),
    ("F52", "\\boxed{(3, \\frac{\\pi}{2})}", "(3, \\frac{\\pi}{2})"),
    ("F53", "The winner is \\boxed{\\text{Evelyn}}", "\\text{Evelyn}"),
    ("F55-a", "\\boxed{1,000}", "1,000"),
    ("F55-c", "\\boxed{1,300,400}", "1,300,400"),
    ("F56-a", "\\boxed{30^\\circ}", "30^\\circ"),
    ("F56-c", "\\boxed{35\\text{ cm}}", "35\\text{ cm}"),
    ("F56-d", "\\boxed{\\$18}", "\\$18"),
    ("F58", "\\boxed{B}", "B"),
]


@pytest.mark.parametrize("case_id,text,expected", EXTRACT_CASES, ids=[c[0] for c in EXTRACT_CASES])
def test_extract_answer(case_id, text, expected):
    assert extract_answer(text) == expected


@pytest.mark.parametrize("case_id,text,expected", FIELD_EXTRACTION, ids=[c[0] for c in FIELD_EXTRACTION])
def test_field_extraction_cases(case_id, text, expected):
    assert extract_answer(text) == expected


def test_field_extraction_cases_cover_shared_file():
    ids = {
        json.loads(line)["id"]
        for line in FIELD_CASES.read_text().splitlines()
        if line.strip() and json.loads(line)["component"] == "extraction"
    }
    covered = {c[0].split("-")[0] for c in FIELD_EXTRACTION}
    assert ids <= covered, sorted(ids - covered)


def test_fallback_none_requires_answer_block():
    cfg = ProtocolConfig(answer_fallback="none")
    assert extract_answer("the answer is \\boxed{3}", cfg) is None
    assert extract_answer("<answer>\\boxed{3}</answer>", cfg) == "3"


def test_custom_box_commands():
    cfg = ProtocolConfig(box_commands=("boxed",))
    assert extract_answer("<answer>\\fbox{7}</answer>", cfg) is None
    assert extract_answer("<answer>\\fbox{7}</answer>") == "7"


def test_custom_answer_tags():
    cfg = ProtocolConfig(answer_open="<final>", answer_close="</final>")
    assert extract_answer("\\boxed{1} <final>\\boxed{2}</final>", cfg) == "2"


def test_find_boxes_reports_unclosed_box():
    boxes = find_boxes("a \\boxed{1} b \\boxed{2")
    assert [(b.content, b.closed) for b in boxes] == [("1", True), ("2", False)]


@pytest.mark.parametrize("bad", [None, 42, b"\\boxed{1}", ["<answer>"]])
def test_extract_answer_non_string_is_none(bad):
    assert extract_answer(bad) is None
    assert count_answer_blocks(bad) == 0


COUNT_CASES = [
    ("none", "no tags", 0),
    ("one", "<answer>\\boxed{1}</answer>", 1),
    ("two", "<answer>a</answer> and <answer>b</answer>", 2),
    ("unclosed-not-counted", "<answer>a</answer><answer>b", 1),
    ("stray-close", "</answer><answer>a</answer></answer>", 1),
    ("nested-open", "<answer><answer>a</answer>", 1),
    ("in-tool-response", "<tool_response><answer>x</answer></tool_response>", 0),
]


@pytest.mark.parametrize("case_id,text,expected", COUNT_CASES, ids=[c[0] for c in COUNT_CASES])
def test_count_answer_blocks(case_id, text, expected):
    assert count_answer_blocks(text) == expected


PENALTY_CASES = [
    (0, 1, 1.0),
    (0, 5, 1.0),
    (1, 1, 0.0),
    (1, 7, 0.0),
    (2, 4, 0.25),
    (3, 2, 1.0),
    (5, 2, 1.0),
    (2, 1, 1.0),
]


@pytest.mark.parametrize("blocks,turns,expected", PENALTY_CASES)
def test_format_penalty(blocks, turns, expected):
    assert format_penalty(blocks, turns) == pytest.approx(expected)


@pytest.mark.parametrize("blocks,turns", [(-1, 1), (1, -1), (2, 0)])
def test_format_penalty_rejects_impossible_counts(blocks, turns):
    with pytest.raises(ValueError):
        format_penalty(blocks, turns)


def test_trajectory_format_penalty_sums_turns():
    turns = [
        TurnRecord(text="a", answer_blocks=1),
        TurnRecord(text="b", answer_blocks=1),
        TurnRecord(text="c", answer_blocks=1),
        TurnRecord(text="d", answer_blocks=0),
    ]
    traj = Trajectory(prompt_ids=[1], turns=turns)
    assert trajectory_format_penalty(traj) == pytest.approx(0.5)
    assert trajectory_format_penalty(Trajectory(prompt_ids=[1])) == 1.0


def test_config_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        ProtocolConfig().lenient = True  # type: ignore[misc]


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("\\boxedfbx{}<>/answer_tolsp $.5 \n")), max_size=80))
def test_extract_never_raises_on_tag_soup(text):
    result = extract_answer(text)
    assert result is None or isinstance(result, str)
    assert count_answer_blocks(text) >= 0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_extract_never_raises_on_arbitrary_text(text):
    result = extract_answer(text)
    assert result is None or (isinstance(result, str) and result)


@settings(max_examples=200, deadline=None)
@given(
    st.text(alphabet=st.characters(blacklist_characters="{}\\<>"), min_size=1, max_size=40).filter(lambda s: s.strip())
)
def test_boxed_value_round_trips(value):
    text = f"<reason>work</reason><answer>The answer is \\boxed{{{value}}}.</answer>"
    assert extract_answer(text) == value.strip()


# Drafts: text inside a closed <think>...</think> never supplies the final answer (the tool-call parser's rule).
DRAFT_CASES = [
    ("draft-box-then-plain-text", "<think>Try 12: \\boxed{12}? No, it fails.</think> The final answer is 15.", None),
    ("draft-box-then-box", "<think>Try \\boxed{12}.</think> So \\boxed{15}.", "15"),
    ("draft-answer-block", "<think><answer>\\boxed{12}</answer></think> <answer>\\boxed{15}</answer>", "15"),
    ("draft-answer-block-only", "<think><answer>\\boxed{12}</answer></think> I am not sure.", None),
    ("draft-answer-in-block-later", "<answer>\\boxed{15} <think>or \\boxed{12}</think></answer>", "15"),
    ("two-drafts", "<think>\\boxed{1}</think> \\boxed{2} <think>\\boxed{3}</think>", "2"),
    ("unclosed-draft-is-text", "<think>so it is \\boxed{12}", "12"),
    (
        "think-in-tool-call-is-not-a-tag",
        '<tool_call>{"name": "f", "arguments": {"code": "print(\'<think>\')"}}</tool_call> \\boxed{7} </think>',
        "7",
    ),
    (
        "draft-across-tool-response",
        "<think>\\boxed{1}<tool_response>\\boxed{9}</tool_response> x</think> \\boxed{4}",
        "4",
    ),
]


@pytest.mark.parametrize("case_id,text,expected", DRAFT_CASES, ids=[c[0] for c in DRAFT_CASES])
def test_drafts_never_supply_the_answer(case_id, text, expected):
    assert extract_answer(text) == expected


def test_drafts_count_when_draft_handling_is_off():
    cfg = ProtocolConfig(ignore_think_drafts=False)
    assert extract_answer("<think>\\boxed{12}</think> no box here", cfg) == "12"


def test_prefill_that_opens_a_draft_starts_the_text_inside_it():
    cfg = ProtocolConfig(prefill="<think>")
    assert extract_answer("try \\boxed{12}</think> so \\boxed{15}", cfg) == "15"
    assert extract_answer("try \\boxed{12}</think> no box", cfg) is None


def test_answer_blocks_inside_drafts_are_not_counted():
    assert count_answer_blocks("<think><answer>\\boxed{1}</answer></think><answer>\\boxed{2}</answer>") == 1
