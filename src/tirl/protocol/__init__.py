"""The tool-integrated reasoning conversation protocol (pure functions over text and token ids).

Public API: :class:`ProtocolConfig`; answer extraction and format score (:func:`extract_answer`,
:func:`count_answer_blocks`, :func:`format_penalty`); tool calls (:func:`parse_tool_calls`,
:func:`render_tool_call`); prompt text and tool schema (:func:`system_prompt`, :func:`tool_schema`);
tool-response text (:func:`render_tool_response`, :func:`render_parse_error`); token-level rendering
(:func:`render_prompt_ids`, :func:`tool_response_segment_ids`, :func:`stop_token_ids`,
:func:`render_conversation_ids`); the shared data types of ``tirl.protocol.types``.
"""

from tirl.protocol.answer import (
    Box,
    count_answer_blocks,
    extract_answer,
    extract_answer_fallback,
    final_assistant_turn,
    find_boxes,
    format_penalty,
    last_boxed,
    strip_tool_responses,
    trajectory_format_penalty,
)
from tirl.protocol.config import DEFAULT_FUNCTION_NAME, RELEASE_FUNCTION_NAME, ProtocolConfig
from tirl.protocol.parse import ERROR_KINDS, parse_tool_calls, render_tool_call
from tirl.protocol.prompt import default_system_prompt, prompt_messages, system_prompt, tool_schema, tools_block
from tirl.protocol.render import (
    ConversationTurn,
    RenderedConversation,
    conversation_messages,
    end_of_turn_text,
    render_conversation_ids,
    render_conversation_text,
    render_prompt_ids,
    render_prompt_text,
    stop_token_ids,
    tool_messages,
    tool_response_segment_ids,
    tool_response_segment_text,
    uses_tokenizer_template,
)
from tirl.protocol.response import (
    render_call_response,
    render_parse_error,
    render_tool_response,
    truncate_middle,
)
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
    "ConversationTurn",
    "DEFAULT_FUNCTION_NAME",
    "ERROR_KINDS",
    "FINISH_REASONS",
    "ProtocolConfig",
    "RELEASE_FUNCTION_NAME",
    "RenderedConversation",
    "TOOL_CALL_CLASSES",
    "ToolCall",
    "ToolCallClass",
    "ToolCallError",
    "ToolCallRecord",
    "Trajectory",
    "TurnRecord",
    "classify_tool_call",
    "conversation_messages",
    "count_answer_blocks",
    "default_system_prompt",
    "end_of_turn_text",
    "extract_answer",
    "extract_answer_fallback",
    "final_assistant_turn",
    "find_boxes",
    "format_penalty",
    "last_boxed",
    "parse_tool_calls",
    "prompt_messages",
    "render_call_response",
    "render_conversation_ids",
    "render_conversation_text",
    "render_parse_error",
    "render_prompt_ids",
    "render_prompt_text",
    "render_tool_call",
    "render_tool_response",
    "stop_token_ids",
    "strip_tool_responses",
    "system_prompt",
    "tool_messages",
    "tool_response_segment_ids",
    "tool_response_segment_text",
    "tool_schema",
    "tools_block",
    "trajectory_format_penalty",
    "truncate_middle",
    "uses_tokenizer_template",
]
