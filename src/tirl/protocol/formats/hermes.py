"""The ``hermes`` tool-call format: one JSON object between the tool-call tags (the default).

``<tool_call>\\n{"name": "execute_python_code_with_standard_io", "arguments": {"code": "...", "input": ""}}\\n
</tool_call>``, as Qwen2.5's chat template renders a structured call and as the rStar2-Agent release writes it.

The parser predates the registry and stays where it was, in :mod:`tirl.protocol.parse` (block finding, strict
and lenient JSON decoding, validation; its module docstring lists the policies and :data:`ERROR_KINDS` the
error kinds); this module only wraps it, so the format behaves exactly as before. It imports ``parse`` when
first called, because ``parse`` imports the registry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

from tirl.protocol.formats import ToolCallFormat, register_format

if TYPE_CHECKING:
    from tirl.protocol.config import ProtocolConfig
    from tirl.protocol.types import ToolCall, ToolCallError


class HermesFormat(ToolCallFormat):
    """JSON ``{"name": ..., "arguments": {...}}`` inside the tags; see :mod:`tirl.protocol.parse`."""

    name = "hermes"
    untagged_json = True  # a call is one JSON object: lenient parsing reads it without the tags too

    @property
    def error_kinds(self) -> Mapping[str, str]:  # type: ignore[override]
        from tirl.protocol import parse

        return parse.ERROR_KINDS

    def parse_block(
        self, text: str, start: int, config: ProtocolConfig, lenient: bool
    ) -> tuple[ToolCall | ToolCallError, int]:
        """:func:`tirl.protocol.parse._parse_block` (see :meth:`ToolCallFormat.parse_block`)."""
        from tirl.protocol import parse

        return parse._parse_block(text, start, config, lenient)

    def block_end(self, text: str, start: int, config: ProtocolConfig) -> int:
        """After the closing tag; at the next opening tag when the block is never closed before one; else
        ``len(text)`` (:func:`tirl.protocol.parse._block_end`)."""
        from tirl.protocol import parse

        return parse._block_end(text, start, config)

    def render_call(self, name: str, arguments: Mapping[str, str], config: ProtocolConfig) -> str:
        """``<tool_call>\\n`` + ``json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)`` +
        ``\\n</tool_call>``: Qwen2.5's template's rendering (its ``tojson`` keeps non-ASCII text). Every string
        can be written (JSON escapes it)."""
        payload = json.dumps({"name": name, "arguments": dict(arguments)}, ensure_ascii=False)
        return f"{config.tool_call_open}\n{payload}\n{config.tool_call_close}"

    def call_instructions(self, config: ProtocolConfig) -> str:
        """ "write one JSON object with the function name and its arguments inside <tool_call></tool_call> tags"."""
        return (
            f"write one JSON object with the function name and its arguments inside "
            f"{config.tool_call_open}{config.tool_call_close} tags"
        )

    def parse_error_hint(self, config: ProtocolConfig) -> str:
        """ "A valid call is a JSON object inside the tags, e.g. {...}" (the example on one line)."""
        example = f'{{"name": "{config.function_name}", "arguments": {{"code": "print(1 + 1)", "input": ""}}}}'
        return f"A valid call is a JSON object inside the tags, e.g. {example}"

    def template_writes_calls(self, template: str) -> bool:
        """Every template with tools except those that write the XML format (``<function=``): the rule before
        formats were a registry, minus the templates whose own tools section would ask for XML calls."""
        return "<function=" not in template


HERMES = register_format(HermesFormat())
