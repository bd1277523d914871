"""The tool-integrated reasoning conversation protocol (pure functions over text and token ids)."""

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
    "FINISH_REASONS",
    "TOOL_CALL_CLASSES",
    "ToolCall",
    "ToolCallClass",
    "ToolCallError",
    "ToolCallRecord",
    "Trajectory",
    "TurnRecord",
    "classify_tool_call",
]
