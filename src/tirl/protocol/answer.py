"""Final-answer extraction and the answer-format score of a trajectory.

Covers finding the boxed final answer in model text (:func:`extract_answer`), counting ``<answer>`` blocks
(:func:`count_answer_blocks`) and the format penalty that GRPO-RoC uses to rank correct trajectories
(:func:`format_penalty`, :func:`trajectory_format_penalty`). It does not judge whether an answer is correct
(that is ``tirl.reward``) and never raises on model text.

Extraction policy (rStar2-Agent, arXiv 2508.20722, section 2.2: "the final answer is extracted from
``\\boxed{}`` within the ``<answer>`` tag"):

1. Tool responses never count. Trajectories are read from their per-turn records
   (:func:`extract_answer_from_turns`: only the text the model generated, which is what the agent loop, the RL
   reward and evaluation use). A text that mixes model turns and tool output is read with every tool-response
   block removed first, a block running to the *last* ``</tool_response>`` before the next
   ``<tool_response>`` (an unclosed one to the end of the text; :func:`strip_tool_responses`), so a program
   that prints ``\\boxed{5}``, or a close tag followed by an ``<answer>`` block, cannot supply the answer
   (tirl's rendering escapes such tags in tool output besides, :mod:`tirl.protocol.escape`).
   Drafts never count either: text inside a *closed* ``<think>...</think>`` (boxes and ``<answer>`` blocks
   alike) is removed with :func:`tirl.protocol.parse.strip_drafts`, the rule the tool-call parser applies to
   drafted calls (``config.ignore_think_drafts``; an unclosed ``<think>`` is plain text; a prefill that
   opens ``<think>`` starts the text inside a draft).
2. If the text has an ``<answer>`` tag, the answer is the last box inside the *last* ``<answer>`` block. The
   block runs to its ``</answer>`` or, when unclosed (the model stopped without closing it), to the end of the
   text. A last block without a complete box gives None: boxes outside that block are not consulted.
3. Without any ``<answer>`` tag, ``config.answer_fallback`` decides: ``"last_box_final_turn"`` (default) takes
   the last box of the final assistant turn, i.e. the text after the last ``</tool_response>``;
   ``"none"`` returns None.
4. A box is ``\\boxed{...}`` or ``\\fbox{...}`` (``config.box_commands``) with balanced braces (escaped
   ``\\{``/``\\}`` do not count), or the brace-less form ``\\boxed 5`` whose value is the run of characters up
   to whitespace, ``$`` or ``<``, without trailing ``.,;:``. A box nested alone in a box is unwrapped.
5. "Last" is the last box in reading order; several boxes are not merged (``\\boxed{3}, \\boxed{5}`` gives
   ``5``: the last-box rule, which also makes revisions such as "first guess \\boxed{3} ... \\boxed{7}" work).
   Empty boxes (``\\boxed{}``) are not answers and are skipped.
6. Truncation: if the last box is unclosed (``\\boxed{\\frac{1}{`` at the end of a cut generation), the answer
   is None, even when an earlier box was complete: the final answer was being written and was lost.
7. The baseline styles (``prompt_style`` ``cot`` and ``native``: the model's own format, no tags) look for no
   ``<answer>`` tag and ignore ``answer_fallback``: the answer is the last box of the model's text (in a
   trajectory, of the last model turn that has a box; tool responses and closed drafts removed as above), as
   the field grades a chain-of-thought baseline.

Format penalty (paper section 3.1, GRPO-RoC): p_format = 1 when the trajectory has no ``<answer>`` block, else
min(1, (answer blocks - 1) / turns), where turns is the number of assistant turns. Blocks are *closed*
``<answer>...</answer>`` pairs in model text; an unclosed block still yields an answer (rule 2) but does not
count as a block. The public release differs (it counts only assistant turns 2..N and gives 1 to every
single-turn trajectory); tirl follows the paper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.parse import strip_drafts

if TYPE_CHECKING:
    from tirl.protocol.types import Trajectory

_TRAILING_PUNCT = ".,;:"
_box_patterns: dict[tuple[str, ...], re.Pattern[str]] = {}


@dataclass(frozen=True)
class Box:
    """One box found in text.

    Attributes:
        start: character offset of the backslash of the command.
        end: offset just after the box (after the closing brace); ``len(text)`` when unclosed.
        content: the text inside the braces, stripped (partial when unclosed).
        closed: False when the braces never balance before the end of the text (truncated).
    """

    start: int
    end: int
    content: str
    closed: bool


def _box_pattern(commands: tuple[str, ...]) -> re.Pattern[str]:
    pattern = _box_patterns.get(commands)
    if pattern is None:
        names = "|".join(re.escape(c) for c in sorted(commands, key=len, reverse=True))
        pattern = re.compile(r"\\(?:" + names + r")(?![A-Za-z])")
        _box_patterns[commands] = pattern
    return pattern


def _scan_braces(text: str, open_pos: int) -> int:
    """Offset just after the brace closing the one at ``open_pos``, or -1 when it never closes."""
    depth = 0
    i = open_pos
    n = len(text)
    while i < n:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


def find_boxes(text: str, config: ProtocolConfig | None = None) -> list[Box]:
    """All boxes of ``text`` in reading order, non-overlapping (a box inside a box is part of its content).

    Args:
        text: any text.
        config: ``box_commands`` says which commands count (default ``boxed`` and ``fbox``).

    Returns:
        The boxes, including empty and unclosed ones (see :class:`Box`). Never raises on string input.
    """
    cfg = resolve_config(config)
    pattern = _box_pattern(tuple(cfg.box_commands))
    boxes: list[Box] = []
    pos = 0
    n = len(text)
    while True:
        match = pattern.search(text, pos)
        if match is None:
            return boxes
        start, i = match.start(), match.end()
        j = i
        while j < n and text[j] in " \t":
            j += 1
        if j < n and text[j] == "{":
            close = _scan_braces(text, j)
            if close < 0:
                boxes.append(Box(start, n, text[j + 1 :].strip(), closed=False))
                return boxes
            boxes.append(Box(start, close, text[j + 1 : close - 1].strip(), closed=True))
            pos = close
            continue
        # Brace-less form: \boxed 5 (also \boxed5). The value runs to whitespace, '$' or '<'.
        k = j
        while k < n and not text[k].isspace() and text[k] not in "$<{}":
            k += 1
        value = text[j:k].rstrip(_TRAILING_PUNCT)
        if j == k:
            # Nothing after the command: at the end of the text it is a cut-off box, otherwise not a box.
            if j >= n:
                boxes.append(Box(start, n, "", closed=False))
                return boxes
            pos = max(i, k)
            continue
        boxes.append(Box(start, k, value, closed=True))
        pos = k


def _unwrap(content: str, config: ProtocolConfig) -> str:
    """``\\boxed{\\boxed{5}}`` -> ``5``: unwrap a box that is the whole content of a box."""
    for _ in range(8):
        inner = find_boxes(content, config)
        if len(inner) == 1 and inner[0].closed and inner[0].start == 0 and inner[0].end == len(content):
            content = inner[0].content
        else:
            break
    return content


def last_boxed(text: str, config: ProtocolConfig | None = None) -> str | None:
    """The content of the last non-empty box of ``text``, or None.

    Returns None when there is no box, or when the last box is unclosed (truncated generation). Empty boxes
    are skipped. See the module docstring, rules 4 to 6.
    """
    cfg = resolve_config(config)
    boxes = find_boxes(text, cfg)
    for box in reversed(boxes):
        if not box.closed:
            return None
        content = _unwrap(box.content, cfg)
        if content:
            return content
    return None


def strip_tool_responses(text: str, config: ProtocolConfig | None = None) -> str:
    """``text`` with every tool-response block removed, each replaced by one newline so that words on either
    side stay apart.

    A block runs from a ``<tool_response>`` to the *last* ``</tool_response>`` before the next
    ``<tool_response>`` (or the end of the text), so a close tag printed inside a tool's output cannot end the
    block early and turn the rest of the output into model text; an open tag without any close before the next
    open runs on to it, and an unclosed last one to the end of the text. tirl's own rendering escapes both
    tags inside tool output (:mod:`tirl.protocol.escape`); this rule is the second line for texts rendered
    elsewhere. Readers that have the per-turn records use them instead (:func:`extract_answer_from_turns`).
    """
    cfg = resolve_config(config)
    open_tag, close_tag = cfg.tool_response_open, cfg.tool_response_close
    if not open_tag or open_tag not in text:
        return text
    parts: list[str] = []
    pos = 0
    n = len(text)
    while True:
        start = text.find(open_tag, pos)
        if start < 0:
            parts.append(text[pos:])
            break
        parts.append(text[pos:start])
        parts.append("\n")
        cursor = start + len(open_tag)
        while True:
            nxt = text.find(open_tag, cursor)
            limit = n if nxt < 0 else nxt
            close = text.rfind(close_tag, cursor, limit) if close_tag else -1
            if close >= 0:
                pos = close + len(close_tag)
                break
            if nxt < 0:
                pos = n
                break
            cursor = nxt + len(open_tag)
        if pos >= n:
            break
    return "".join(parts)


def final_assistant_turn(text: str, config: ProtocolConfig | None = None) -> str:
    """The part of a response text after the last ``</tool_response>`` (the whole text when there is none).

    For a single turn's text this is the turn itself; for a whole trajectory's response text (model turns and
    injected tool segments) it is the final assistant turn, headers of the template included.
    """
    cfg = resolve_config(config)
    close = text.rfind(cfg.tool_response_close)
    if close < 0:
        return strip_tool_responses(text, cfg)
    return strip_tool_responses(text[close + len(cfg.tool_response_close) :], cfg)


def extract_answer(text: str, config: ProtocolConfig | None = None) -> str | None:
    """The final answer of a response: the last box inside the last ``<answer>`` block.

    Args:
        text: the model text of the final turn, or the whole response text of a trajectory (tool-response
            segments included; they are ignored).
        config: tags, box commands and ``answer_fallback`` (see the module docstring for the full policy).

    Returns:
        The box content, stripped (``"\\frac{1}{2}"``), or None when there is no answer, the answer block has
        no complete box, or the generation was cut before the box closed. Never raises; non-string input
        gives None.
    """
    if not isinstance(text, str):
        return None
    cfg = resolve_config(config)
    model_text = strip_drafts(strip_tool_responses(text, cfg), cfg)
    if cfg.baseline:  # rule 7: no tags in the model's own format; the last box of its text
        return last_boxed(model_text, cfg)
    start = model_text.rfind(cfg.answer_open)
    if start >= 0:
        body_start = start + len(cfg.answer_open)
        end = model_text.find(cfg.answer_close, body_start)
        block = model_text[body_start:] if end < 0 else model_text[body_start:end]
        return last_boxed(block, cfg)
    if cfg.answer_fallback == "none":
        return None
    # After a tool response the final turn starts with the injected prefill text itself, not inside it.
    inside = None if cfg.tool_response_close not in text else False
    return last_boxed(strip_drafts(final_assistant_turn(text, cfg), cfg, starts_inside=inside), cfg)


def extract_answer_from_turns(turn_texts: Sequence[str], config: ProtocolConfig | None = None) -> str | None:
    """The final answer of a trajectory from its model turns alone (``TurnRecord.text``), never from tool output.

    The rules of :func:`extract_answer`, applied to model-generated text only: the answer is the last box of
    the last ``<answer>`` block of the last turn that has an ``<answer>`` tag (blocks do not span turns);
    without any, ``config.answer_fallback`` decides (``"last_box_final_turn"``: the last box of the final
    turn; ``"none"``: None). This is what the agent loop stores as ``Trajectory.final_answer`` and what the
    RL reward and evaluation grade. In the baseline styles (``cot``, ``native``: rule 7 of the module docstring)
    the answer is the last box of the last turn that has a box, ``<answer>`` tags or not.

    Args:
        turn_texts: the text each assistant turn generated, in order (without prefills and tool segments).
        config: tags, box commands, ``answer_fallback``.

    Returns:
        The answer, or None. Never raises; non-string entries are skipped.
    """
    cfg = resolve_config(config)
    texts = [t for t in turn_texts if isinstance(t, str)]
    if cfg.baseline:  # rule 7: the last box of the last turn that has one (boxes do not span turns)
        for text in reversed(texts):
            model_text = strip_drafts(strip_tool_responses(text, cfg), cfg)
            if find_boxes(model_text, cfg):
                return last_boxed(model_text, cfg)
        return None
    for text in reversed(texts):
        if cfg.answer_open in strip_drafts(strip_tool_responses(text, cfg), cfg):
            return extract_answer(text, cfg)
    if not texts or cfg.answer_fallback == "none":
        return None
    return extract_answer(texts[-1], cfg)


def trajectory_answer(trajectory: Trajectory, config: ProtocolConfig | None = None) -> str | None:
    """:func:`extract_answer_from_turns` of a trajectory's turn records."""
    return extract_answer_from_turns([turn.text for turn in trajectory.turns], config)


def count_answer_blocks(text: str, config: ProtocolConfig | None = None) -> int:
    """Number of closed ``<answer>...</answer>`` blocks in the model text of ``text`` (tool responses and closed
    ``<think>`` drafts removed, as for :func:`extract_answer`).

    Each ``<answer>`` pairs with the first ``</answer>`` after it; an ``<answer>`` before that close does not
    open another block; unclosed blocks and stray ``</answer>`` tags do not count. Never raises.
    """
    if not isinstance(text, str):
        return 0
    cfg = resolve_config(config)
    model_text = strip_drafts(strip_tool_responses(text, cfg), cfg)
    count = 0
    pos = 0
    while True:
        start = model_text.find(cfg.answer_open, pos)
        if start < 0:
            return count
        end = model_text.find(cfg.answer_close, start + len(cfg.answer_open))
        if end < 0:
            return count
        count += 1
        pos = end + len(cfg.answer_close)


def format_penalty(answer_blocks: int, turns: int) -> float:
    """The answer-format penalty p_format of GRPO-RoC (rStar2-Agent, section 3.1).

    Args:
        answer_blocks: closed ``<answer>`` blocks in the trajectory's model text (>= 0).
        turns: assistant turns of the trajectory (>= 1 whenever ``answer_blocks > 0``).

    Returns:
        1.0 when ``answer_blocks == 0``, else ``min(1, (answer_blocks - 1) / turns)``: 0.0 for exactly one
        block, growing with every extra block.

    Raises:
        ValueError: a negative count, or ``turns < 1`` with ``answer_blocks > 0``.
    """
    if answer_blocks < 0 or turns < 0:
        raise ValueError(f"counts must be >= 0, got answer_blocks={answer_blocks}, turns={turns}")
    if answer_blocks == 0:
        return 1.0
    if turns < 1:
        raise ValueError(f"{answer_blocks} answer block(s) in a trajectory with no assistant turn")
    return min(1.0, (answer_blocks - 1) / turns)


def trajectory_format_penalty(trajectory: Trajectory) -> float:
    """:func:`format_penalty` of a trajectory from its turn records (``TurnRecord.answer_blocks``, number of
    turns). A trajectory without turns has no answer block and gets 1.0."""
    blocks = sum(turn.answer_blocks for turn in trajectory.turns)
    return format_penalty(blocks, len(trajectory.turns))


# The opt-in evaluation fallback (never used in training): phrases that introduce a final answer in plain text.
_FALLBACK_MARKER = re.compile(
    r"(?:final\s+answer|the\s+answer|answer)\s*(?:is|:|=)?\s*:?|####",
    re.IGNORECASE,
)
_MATH_SPANS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"))
_FALLBACK_MAX_CHARS = 200


def extract_answer_fallback(text: str, config: ProtocolConfig | None = None) -> str | None:
    """An answer stated without a box, for evaluating models that do not box (opt-in; ``tirl eval
    --answer-fallback``). Never used in training, where an unboxed answer is no answer.

    Looks at the final assistant turn (tool responses and closed drafts removed) for the *last* phrase
    ``final answer``/``the answer``/``answer`` (optionally followed by ``is``, ``:`` or ``=``) or ``####``, and
    takes what follows it: the content of a math span that starts right there (``$10$``, ``\\(10\\)``,
    ``\\[10\\]``, ``$$10$$``), else the rest of the line up to a sentence end (``. `` or a final ``.``) or the
    end of an enclosing math span, without Markdown bold and trailing punctuation. A box there (``The answer is
    \\boxed{5}``) is its content.

    Args:
        text: a response text (as for :func:`extract_answer`).
        config: tags and box commands.

    Returns:
        The answer text, or None when no marker is followed by an answer (or it is longer than 200
        characters). Never raises; non-string input gives None.
    """
    if not isinstance(text, str):
        return None
    cfg = resolve_config(config)
    inside = None if cfg.tool_response_close not in text else False
    turn = strip_drafts(final_assistant_turn(text, cfg), cfg, starts_inside=inside)
    for marker in reversed(list(_FALLBACK_MARKER.finditer(turn))):
        answer = _answer_after(turn, marker.end(), cfg)
        if answer:
            return answer
    return None


def _answer_after(text: str, pos: int, cfg: ProtocolConfig) -> str | None:
    rest = text[pos:].lstrip(" \t*")
    for open_, close in _MATH_SPANS:
        if rest.startswith(open_):
            end = rest.find(close, len(open_))
            if end < 0:
                return None
            rest = rest[len(open_) : end]
            break
    else:
        line = rest.split("\n", 1)[0]
        sentence = re.split(r"\.\s", line, maxsplit=1)[0]
        rest = re.split(r"\\\]|\\\)|\$", sentence, maxsplit=1)[0]  # the end of an enclosing math span
    boxed = last_boxed(rest, cfg)
    answer = (boxed if boxed is not None else rest).strip().strip("*").strip().rstrip(".,;:").strip()
    if not answer or len(answer) > _FALLBACK_MAX_CHARS:
        return None
    return answer
