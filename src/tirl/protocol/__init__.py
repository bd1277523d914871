"""The tool-integrated reasoning conversation protocol (pure functions over text and token ids).

Entry points: :class:`ProtocolConfig` (:mod:`tirl.protocol.config`); the token-level rendering
:func:`render_prompt_ids`, :func:`render_conversation_ids` (its turns :class:`ConversationTurn`, its result
:class:`RenderedConversation`) and :func:`stop_token_ids` (:mod:`tirl.protocol.render`); tool-call parsing
:func:`parse_tool_calls` (:mod:`tirl.protocol.parse`; what a call looks like is the format named by
``ProtocolConfig.tool_call_format``, from the registry :mod:`tirl.protocol.formats`); what a call does is the tool
named by ``ProtocolConfig.tool``, from the registry :mod:`tirl.protocol.tools` (``python``, ``python_session``);
answer extraction :func:`extract_answer` (:mod:`tirl.protocol.answer`); the shared records :class:`ToolCall`,
:class:`ToolCallError`, :class:`ToolCallRecord`, :class:`TurnRecord`, :class:`Trajectory` (:mod:`tirl.protocol.types`).

Helpers stay in their modules: prompt text and tool schema (:mod:`tirl.protocol.prompt`), tool-response text
(:mod:`tirl.protocol.response`), writing a call (``parse.render_tool_call``), the format score and the
plain-text answer fallback (:mod:`tirl.protocol.answer`), the text-level rendering and the tool-response
segment (:mod:`tirl.protocol.render`), escaping tool output so that it stays data (:mod:`tirl.protocol.escape`),
the reward-hacking audit (:mod:`tirl.protocol.audit`). docs/protocol.md lists each module's functions.

Sandbox workers import this package (the answer checker), so it imports no third-party package.
"""

from tirl.protocol.answer import extract_answer
from tirl.protocol.config import ProtocolConfig
from tirl.protocol.parse import parse_tool_calls
from tirl.protocol.render import (
    ConversationTurn,
    RenderedConversation,
    render_conversation_ids,
    render_prompt_ids,
    stop_token_ids,
)
from tirl.protocol.types import ToolCall, ToolCallError, ToolCallRecord, Trajectory, TurnRecord

__all__ = [
    "ConversationTurn",
    "ProtocolConfig",
    "RenderedConversation",
    "ToolCall",
    "ToolCallError",
    "ToolCallRecord",
    "Trajectory",
    "TurnRecord",
    "extract_answer",
    "parse_tool_calls",
    "render_conversation_ids",
    "render_prompt_ids",
    "stop_token_ids",
]
