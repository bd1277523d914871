"""The tool-integrated reasoning conversation protocol (pure functions over text and token ids).

Public API: :class:`ProtocolConfig`; answer extraction and format score (:func:`extract_answer`,
:func:`count_answer_blocks`, :func:`format_penalty`); tool calls (:func:`parse_tool_calls`,
:func:`render_tool_call`); the shared data types of ``tirl.protocol.types``.
"""

from tirl.protocol.answer import (
    Box,
    count_answer_blocks,
    extract_answer,
    final_assistant_turn,
    find_boxes,
    format_penalty,
    last_boxed,
    strip_tool_responses,
    trajectory_format_penalty,
)
from tirl.protocol.config import DEFAULT_FUNCTION_NAME, RELEASE_FUNCTION_NAME, ProtocolConfig
from tirl.protocol.parse import ERROR_KINDS, parse_tool_calls, render_tool_call
from tirl.protocol.types import (
    FINISH_REASONS,
    TOOL_CALL_CLASSES,
    ToolCall,
    ToolCallClass,
    ToolCallError,
    ToolCallRecord,
    Trajectory,
    TurnRecord,
    classify_tool_call,
)

__all__ = [
    "Box",
    "DEFAULT_FUNCTION_NAME",
    "ERROR_KINDS",
    "FINISH_REASONS",
    "ProtocolConfig",
    "RELEASE_FUNCTION_NAME",
    "TOOL_CALL_CLASSES",
    "ToolCall",
    "ToolCallClass",
    "ToolCallError",
    "ToolCallRecord",
    "Trajectory",
    "TurnRecord",
    "classify_tool_call",
    "count_answer_blocks",
    "extract_answer",
    "final_assistant_turn",
    "find_boxes",
    "format_penalty",
    "last_boxed",
    "parse_tool_calls",
    "render_tool_call",
    "strip_tool_responses",
    "trajectory_format_penalty",
]
