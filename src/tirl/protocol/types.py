"""Data types of the tool-integrated reasoning protocol: tool calls, parse errors, turns, trajectories.

Covers the records that the parser produces and the agent loop, the reward, RoC and evaluation consume. It
does not parse or render text (see ``tirl.protocol.parse`` and ``tirl.protocol.render``).

Tool-call classes (the inputs of GRPO-RoC's error penalty, rStar2-Agent report): every tool call of a turn ends in
exactly one of ``ok`` (ran, exit 0), ``error`` (exception, non-zero exit, killed, or an ``internal`` sandbox failure),
``timeout``, ``parse_error`` (the call could not be decoded, so nothing ran).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tirl.sandbox.types import ExecutionResult

ToolCallClass = Literal["ok", "error", "timeout", "parse_error"]
TOOL_CALL_CLASSES: tuple[str, ...] = ("ok", "error", "timeout", "parse_error")

FinishReason = Literal[
    "answer",  # a turn without a tool call ended the trajectory (the normal end)
    "max_turns",  # the assistant-turn limit was reached while the model still called tools
    "length",  # the response token budget ran out (truncated; kept and scored, usually 0)
    "context",  # the next prompt would not fit the model's context window
    "eos",  # the engine returned end-of-sequence without the end-of-turn token
    "error",  # the engine failed for this trajectory (its control showed the engine at fault); kept and reported
    "rejected",  # the engine refused the trajectory's own text while the prompt alone was answered: the model's
]
FINISH_REASONS: tuple[str, ...] = ("answer", "max_turns", "length", "context", "eos", "error", "rejected")

#: What the control of a failure found (``ToolCallRecord.details["control"]``, and ``Trajectory.metadata["controls"]``
#: as ``{tool,engine}_<outcome>`` counts; :mod:`tirl.algo.infra`): ``recovered`` (a retry answered; its answer is
#: the outcome), ``charged`` (the control succeeded, so the failure is the model's), ``masked`` (the control
#: failed too: the infrastructure's).
CONTROL_OUTCOMES: tuple[str, ...] = ("recovered", "charged", "masked")
CONTROL_KINDS: tuple[str, ...] = ("tool", "engine")


@dataclass
class ToolCall:
    """A decoded tool call.

    Attributes:
        name: function name as the model wrote it.
        arguments: decoded argument object (for the Python tool: ``code`` and ``input``, both strings).
        raw: the text between ``<tool_call>`` and ``</tool_call>`` (in any tool-call format).
        span: (start, end) character offsets of the whole block, tags included, in the turn text.
        repaired: True when lenient parsing had to repair the text; ``repairs`` lists what was done.
        warnings: machine-readable notes on a valid call that is probably not what the model meant, e.g.
            ``suspicious_escape:\\frac`` for the JSON escape ``\\f`` (form feed) where LaTeX ``\\frac`` was
            likely intended, or ``ignored_argument:timeout``. The call is kept as decoded (never "repaired").
    """

    name: str
    arguments: dict[str, Any]
    raw: str = ""
    span: tuple[int, int] = (0, 0)
    repaired: bool = False
    repairs: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def code(self) -> str:
        """The ``code`` argument ("" when absent or not a string)."""
        value = self.arguments.get("code", "")
        return value if isinstance(value, str) else ""

    @property
    def stdin(self) -> str:
        """The ``input`` argument ("" when absent or not a string)."""
        value = self.arguments.get("input", "")
        return value if isinstance(value, str) else ""


@dataclass
class ToolCallError:
    """A tool call that could not be decoded. Never raised: returned in place of a :class:`ToolCall`.

    Attributes:
        kind: machine-readable cause (``unclosed_tag``, ``invalid_json``, ``not_an_object``, ``missing_name``,
            ``unknown_function``, ``arguments_not_object``, ``missing_code``, ``bad_argument_type``, ...; each
            tool-call format lists its own in ``error_kinds``: ``tirl.protocol.parse.ERROR_KINDS`` for ``hermes``,
            ``tirl.protocol.formats.qwen3_xml.ERROR_KINDS``; for a tool with arguments of its own, also
            ``tirl.protocol.tools.ARGUMENT_ERROR_KINDS`` in either format).
        message: a short human-readable explanation that can be fed back to the model.
        raw: the text of the block (or of the unclosed remainder).
        span: (start, end) character offsets in the turn text.
    """

    kind: str
    message: str
    raw: str = ""
    span: tuple[int, int] = (0, 0)


@dataclass
class ToolCallRecord:
    """One tool call of a turn and what became of it.

    Attributes:
        call: the decoded call, or the parse error.
        result: the execution result (None for a parse error, since nothing ran).
        cls: the tool-call class (``ok``, ``error``, ``timeout``, ``parse_error``).
        response_text: the text placed inside ``<tool_response>`` for this call.
        tool: the registry name of the tool that ran it (``ProtocolConfig.tool``: ``python``,
            ``python_session``); "" for a parse error and in records written before tools were a registry.
        details: the tool's facts about the call (``python_session``: ``replayed_cells``, ``session_cells``).
    """

    call: ToolCall | ToolCallError
    result: ExecutionResult | None
    cls: ToolCallClass
    response_text: str = ""
    tool: str = ""
    details: dict[str, Any] = field(default_factory=dict)


def classify_tool_call(call: ToolCall | ToolCallError, result: ExecutionResult | None) -> ToolCallClass:
    """The class of one tool call from structured signals, never from substring matching.

    Args:
        call: the decoded call or its parse error.
        result: the execution result; must be given for a :class:`ToolCall`.

    Returns:
        ``parse_error`` for a :class:`ToolCallError`; ``timeout`` for a timed-out execution; ``ok`` for status
        ``ok``; ``error`` for everything else (``error``, ``killed``, ``internal``, or a missing result).
    """
    if isinstance(call, ToolCallError):
        return "parse_error"
    if result is None:
        return "error"
    if result.status == "timeout":
        return "timeout"
    if result.status == "ok":
        return "ok"
    return "error"


@dataclass
class TurnRecord:
    """One assistant turn.

    Attributes:
        text: the decoded text the model generated in this turn (special tokens kept).
        num_tokens: model tokens generated in this turn.
        tool_calls: the calls parsed from the turn and their outcomes, in order.
        answer_blocks: number of ``<answer>...</answer>`` blocks in ``text``.
        finish_reason: the engine's reason for ending the turn (``stop``, ``length``, ``eos``).
    """

    text: str
    num_tokens: int = 0
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    answer_blocks: int = 0
    finish_reason: str = "stop"


@dataclass
class Trajectory:
    """One multi-turn rollout at the token level.

    Attributes:
        prompt_ids: token ids of the rendered prompt (system, user, generation prompt).
        response_ids: every token after the prompt: model tokens and injected tool segments, in order.
        loss_mask: same length as ``response_ids``; 1 = generated by the model, 0 = injected.
        logprobs: per-token log-probabilities of ``response_ids`` under the sampling policy (0.0 for injected
            tokens); empty when the engine did not return them.
        turns: per-assistant-turn records.
        final_answer: the extracted final answer (``tirl.protocol.extract_answer``), or None.
        finish_reason: why the trajectory ended (see ``FINISH_REASONS``).
        metadata: free-form (problem id, sample index, engine endpoint, timings).

    Raises:
        ValueError: on construction or :meth:`check` when ``len(loss_mask) != len(response_ids)`` or the
            log-probs do not line up.
    """

    prompt_ids: list[int]
    response_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    final_answer: str | None = None
    finish_reason: str = "answer"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Check the token-level invariants.

        Raises:
            ValueError: ``len(loss_mask) != len(response_ids)``, a mask value outside {0, 1}, or non-empty
                ``logprobs`` of a different length than ``response_ids``.
        """
        if len(self.loss_mask) != len(self.response_ids):
            raise ValueError(
                f"loss_mask has {len(self.loss_mask)} entries but response_ids has {len(self.response_ids)}"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask values must be 0 or 1")
        if self.logprobs and len(self.logprobs) != len(self.response_ids):
            raise ValueError(f"logprobs has {len(self.logprobs)} entries but response_ids has {len(self.response_ids)}")

    @property
    def num_model_tokens(self) -> int:
        """Tokens the model generated (sum of the loss mask)."""
        return sum(self.loss_mask)

    @property
    def tool_call_records(self) -> list[ToolCallRecord]:
        """All tool-call records of all turns, in order."""
        return [rec for turn in self.turns for rec in turn.tool_calls]

    @property
    def truncated(self) -> bool:
        """True when the trajectory ended on the token budget or the context window."""
        return self.finish_reason in ("length", "context")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (tool calls and results as nested dicts)."""
        return asdict(self)


def token_fields(traj: Trajectory) -> dict[str, list[int]]:
    """The exact token ids and loss mask of a trajectory as plain JSON lists.

    Written by ``tirl eval`` (``trajectories.jsonl``) and by training's ``logging.log_trajectories``, read by
    ``tirl view`` and ``tirl analyze entropy`` (which re-scores these ids; it never re-tokenises text).

    Returns:
        ``{"prompt_ids": [...], "response_ids": [...], "loss_mask": [...]}``; ``loss_mask`` has the length of
        ``response_ids`` (1 = model token, 0 = injected).
    """
    return {
        "prompt_ids": [int(x) for x in traj.prompt_ids],
        "response_ids": [int(x) for x in traj.response_ids],
        "loss_mask": [int(x) for x in traj.loss_mask],
    }
