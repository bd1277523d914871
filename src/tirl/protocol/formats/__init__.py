"""Tool-call formats: how a call is written inside the tool-call tags, as a registry chosen by name.

Covers the :class:`ToolCallFormat` interface, the registry (:func:`register_format`, :func:`get_format`,
:func:`format_names`) and the built-in formats, which ``ProtocolConfig.tool_call_format`` names:

* ``hermes`` (default, :mod:`tirl.protocol.formats.hermes`): one JSON object
  ``{"name": ..., "arguments": {...}}`` between ``<tool_call>`` and ``</tool_call>`` (Qwen2.5, Hermes, the
  rStar2-Agent release). Its parser is the one in :mod:`tirl.protocol.parse`, wrapped here unchanged.
* ``qwen3_xml`` (:mod:`tirl.protocol.formats.qwen3_xml`): ``<function=NAME>`` with one
  ``<parameter=KEY>`` block per argument between the same tags (Qwen3-Coder, Qwen3.5/3.6, Nemotron 3).

What a format decides: where a block that starts at the opening tag ends and what it holds (a typed
:class:`~tirl.protocol.types.ToolCall` or a :class:`~tirl.protocol.types.ToolCallError` with a machine-readable
kind; never an exception on model text), how a call is written (SFT data, examples, tests), how the system
prompt's tools section tells the model to write a call, the hint fed back after a parse error, and whether a
chat template's own tools section already describes this format. What it does not decide: finding the opening
tags in a turn, ``<think>`` drafts and ``multi_call`` (the turn scan in :mod:`tirl.protocol.parse`, the same for
every format), the tags themselves (``ProtocolConfig.tool_call_open``/``tool_call_close``), the tool's schema
(:func:`tirl.protocol.prompt.tool_schema`) and the tool responses (:mod:`tirl.protocol.response`).

Adding a format: one module in this package with a :class:`ToolCallFormat` subclass, registered with
:func:`register_format` at import, and its module name added to the built-ins of :data:`_FORMATS` below (a format
defined outside tirl calls :func:`register_format` itself before any ``ProtocolConfig`` names it).

Sandbox workers import :mod:`tirl.protocol`, so no module here imports a third-party package; none imports
``tirl.protocol.config`` or ``tirl.protocol.parse`` at module level either (the config validates its format name
through this registry while it is being imported).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tirl.protocol.registry import Registry

if TYPE_CHECKING:
    from tirl.protocol.config import ProtocolConfig
    from tirl.protocol.types import ToolCall, ToolCallError

DEFAULT_FORMAT = "hermes"


class ToolCallFormat(ABC):
    """One way of writing a tool call between ``config.tool_call_open`` and ``config.tool_call_close``.

    Attributes:
        name: the registry name (the value of ``ProtocolConfig.tool_call_format``).
        error_kinds: every ``ToolCallError.kind`` the format returns, with a one-line meaning each.
        untagged_json: lenient parsing reads the format's call object written without the tags (JSON formats).
    """

    name: str = ""
    error_kinds: Mapping[str, str] = {}
    #: Whether a call of this format is a JSON object ``{"name": ..., "arguments": {...}}``, so that lenient
    #: parsing may read such an object written without the tags (``untagged``; :mod:`tirl.protocol.parse`).
    untagged_json: bool = False

    @abstractmethod
    def parse_block(
        self, text: str, start: int, config: ProtocolConfig, lenient: bool
    ) -> tuple[ToolCall | ToolCallError, int]:
        """Parse the block whose opening tag starts at ``text[start]``.

        Args:
            text: one assistant turn.
            start: offset of ``config.tool_call_open`` in ``text``.
            config: tags, function names and policies.
            lenient: whether the format's documented repairs are allowed.

        Returns:
            ``(call or error, offset where the turn scan resumes)``; the offset is greater than ``start`` and the
            item's ``span`` starts at ``start``. A block without its closing tag is an error of kind
            ``unclosed_tag`` (never executed). Never raises on any string.
        """

    def block_end(self, text: str, start: int, config: ProtocolConfig) -> int:
        """Where the block starting at ``start`` ends, for skipping it while looking for a draft's ``</think>``
        (a tag inside a call is not a tag). Defaults to the resume offset of :meth:`parse_block`."""
        return self.parse_block(text, start, config, config.lenient)[1]

    @abstractmethod
    def render_call(self, name: str, arguments: Mapping[str, str], config: ProtocolConfig) -> str:
        """The text of one call, tags included, as the model should write it (and as the chat template of the
        format's model family renders a structured call with these arguments in this order).

        Raises:
            ValueError: an argument the format cannot write so that :meth:`parse_block` reads it back unchanged.
        """

    @abstractmethod
    def call_instructions(self, config: ProtocolConfig) -> str:
        """The clause of the system prompt's tools section that says how to write a call
        ("To call it, <clause>, for example: ...")."""

    @abstractmethod
    def parse_error_hint(self, config: ProtocolConfig) -> str:
        """The sentence after "Nothing was run." in the tool response to a call that could not be parsed,
        with an example of a valid call."""

    @abstractmethod
    def template_writes_calls(self, template: str) -> bool:
        """Whether a chat template (its Jinja source) renders tool calls in this format, so that its own tools
        section can declare the tool (``ProtocolConfig.prompt_style="full"``); otherwise tirl's tools section,
        worded by this format, goes into the system prompt."""


#: The formats by name: the built-ins (registry name -> module that registers it on import, imported on first use)
#: and any registered since.
_FORMATS: Registry[ToolCallFormat] = Registry(
    "tool-call format",
    "tool_call_format",
    {
        "hermes": "tirl.protocol.formats.hermes",
        "qwen3_xml": "tirl.protocol.formats.qwen3_xml",
    },
)


def register_format(fmt: ToolCallFormat, *, replace: bool = False) -> ToolCallFormat:
    """Add ``fmt`` to the registry under ``fmt.name`` and return it.

    Raises:
        ValueError: an empty name, or a name already registered (unless ``replace``).
    """
    return _FORMATS.register(fmt, replace=replace)


def unregister_format(name: str) -> ToolCallFormat | None:
    """Remove the format called ``name`` from the registry and return it (None when there was none)."""
    return _FORMATS.unregister(name)


def format_names() -> tuple[str, ...]:
    """The names a ``ProtocolConfig.tool_call_format`` may take: the built-ins and any registered since."""
    return _FORMATS.names()


def get_format(name: str) -> ToolCallFormat:
    """The registered format called ``name`` (a built-in is imported on first use).

    Raises:
        ValueError: no such format (the message lists the known names).
    """
    return _FORMATS.get(name)


__all__ = [
    "DEFAULT_FORMAT",
    "ToolCallFormat",
    "format_names",
    "get_format",
    "register_format",
    "unregister_format",
]
