"""The ``qwen3_xml`` tool-call format: ``<function=NAME>`` and one ``<parameter=KEY>`` block per argument.

The format of the Qwen3-Coder family (also Qwen3.5/3.6 and NVIDIA Nemotron 3), as their chat templates render a
structured call with arguments ``{"code": c, "input": s}``::

    <tool_call>
    <function=execute_python_code_with_standard_io>
    <parameter=code>
    print(6 * 7)
    </parameter>
    <parameter=input>

    </parameter>
    </function>
    </tool_call>

Each value is written raw (no escaping), with one newline after ``<parameter=KEY>`` and one before
``</parameter>``. Tags and drafts are the configuration's (``tool_call_open``/``tool_call_close``, ``<think>``
drafts and ``multi_call`` in :func:`tirl.protocol.parse.parse_tool_calls`); this module reads and writes what
is between the tags.

Policies
--------
* **Where a block ends.** A block is read structurally, from ``<tool_call>`` up to the next ``<tool_call>`` (or
  the end of the turn): ``<function=NAME>``, parameters, ``</function>``, ``</tool_call>``, with any whitespace
  between the tags. A block whose region has no ``</tool_call>`` at all is ``unclosed_tag`` and never runs
  (typically a turn cut by the token budget), and so is a block in which a new ``<tool_call>`` begins: the scan
  resumes at the new one, so an abandoned call can never swallow the next (parsing is linear in the turn
  length).
* **Where a value ends: ``</parameter>`` and ``</tool_call>`` inside a value.** The format has no escaping, so
  the rule is structural: a value ends at the first ``</parameter>`` that is followed, after optional
  whitespace, by ``<parameter=``, ``</function>`` or ``</tool_call>``. Code holding ``'</parameter>'`` or
  ``'</tool_call>'`` in a string (``print("</tool_call>")``) is therefore read whole, where the
  first-match regular expressions of other parsers cut it. What cannot be written, and is refused by
  :meth:`Qwen3XmlFormat.render_call` (``ValueError``): a value that holds the opening tag ``<tool_call>``, or a
  ``</parameter>`` followed by optional whitespace and one of those three tags.
* **Values.** One leading and one trailing newline are removed (the template's own), nothing else: indentation
  and other whitespace are kept, so every value :meth:`~Qwen3XmlFormat.render_call` writes reads back exactly.
  Values are text (the Python tool's arguments are strings; no JSON decoding).
* **Names.** ``NAME`` and ``KEY`` run to the ``>`` on the same line, surrounding spaces removed. ``NAME`` must be
  ``config.function_name`` or one of ``config.function_aliases``.
* **Arguments.** For the Python tools (``Tool.code_arguments``), the returned arguments are exactly
  ``{"code": str, "input": str}``; ``input`` defaults to ``""``; other parameters are dropped with a warning
  ``ignored_argument:<key>``; the same parameter twice is an error (which value was meant is unknown). A tool with
  arguments of its own is checked against its schema instead (:func:`tirl.protocol.tools.check_arguments`; a value
  whose schema type is not ``string`` is read as JSON).
* **Strict by default.** ``lenient=True`` repairs one slip, recorded in ``ToolCall.repairs``:
  ``missing_function_close`` (``</tool_call>`` right after the last parameter, without ``</function>``).
  Nothing else is repaired; in particular an unclosed parameter is never guessed at.

Error kinds (``ToolCallError.kind``): :data:`ERROR_KINDS`. Nothing here raises on model text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tirl.protocol.formats import ToolCallFormat, register_format
from tirl.protocol.tools import ArgumentError, argument_type, check_arguments, get_tool
from tirl.protocol.types import ToolCall, ToolCallError

if TYPE_CHECKING:
    from tirl.protocol.config import ProtocolConfig

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAMETER_OPEN = "<parameter="
PARAMETER_CLOSE = "</parameter>"

ERROR_KINDS: dict[str, str] = {
    "unclosed_tag": "no </tool_call> before the next <tool_call> or the end of the turn (nothing runs)",
    "empty_call": "nothing but whitespace between the tags",
    "missing_function": "the body does not start with <function=NAME> (e.g. a JSON call)",
    "invalid_name": "<function=...> without a name, or without its '>' on the same line",
    "unknown_function": "the function name is not the tool's name or an alias",
    "invalid_parameter": "<parameter=...> without a name, or without its '>' on the same line",
    "unclosed_parameter": "a value not closed by </parameter> followed by <parameter=, </function> or </tool_call>",
    "unclosed_function": "</tool_call> without </function> before it (repaired in lenient mode)",
    "unexpected_text": "text other than whitespace between the parameters, or between </function> and </tool_call>",
    "duplicate_argument": "the same parameter given twice",
    "missing_code": "no 'code' parameter",
    "empty_code": "'code' is empty or only whitespace",
}

_WS = re.compile(r"\s*")


class _Failure(Exception):
    """A structural error found at offset ``at`` (internal; turned into a ToolCallError, never escapes)."""

    def __init__(self, kind: str, message: str, at: int) -> None:
        super().__init__(message)
        self.kind, self.message, self.at = kind, message, at


def _skip_ws(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()


def _tag_name(text: str, pos: int, bound: int) -> tuple[str, int] | None:
    """The name after ``<function=`` / ``<parameter=`` at ``pos``: up to the ``>`` on the same line. Returns
    (stripped name, offset after ``>``), or None when there is no ``>`` before the line end or the name is empty."""
    gt = text.find(">", pos, bound)
    if gt < 0 or "\n" in text[pos:gt]:  # finding '>' first keeps a long line of many tags linear
        return None
    name = text[pos:gt].strip()
    return (name, gt + 1) if name and "<" not in name else None


def _value_end(text: str, pos: int, bound: int, close_tag: str) -> int:
    """Offset of the ``</parameter>`` that ends the value starting at ``pos`` (see the module docstring), or -1."""
    while True:
        close = text.find(PARAMETER_CLOSE, pos, bound)
        if close < 0:
            return -1
        after = _skip_ws(text, close + len(PARAMETER_CLOSE))
        if any(text.startswith(tag, after, bound) for tag in (PARAMETER_OPEN, FUNCTION_CLOSE, close_tag)):
            return close
        pos = close + len(PARAMETER_CLOSE)


def _strip_template_newlines(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _read(
    text: str, body_start: int, bound: int, close_tag: str, lenient: bool
) -> tuple[str, list[tuple[str, str]], int, list[str]]:
    """Read ``<function=NAME>`` parameters ``</function></tool_call>`` from ``body_start``, within ``bound``.

    Returns (name, [(key, value)...] in order, offset of the closing tag, repairs). Raises :class:`_Failure`.
    """
    pos = _skip_ws(text, body_start)
    if not text.startswith(FUNCTION_OPEN, pos, bound):
        raise _Failure("missing_function", "The tool call must start with <function=NAME> after the opening tag.", pos)
    named = _tag_name(text, pos + len(FUNCTION_OPEN), bound)
    if named is None:
        raise _Failure("invalid_name", "Write the function name as <function=NAME> on one line.", pos)
    name, pos = named
    params: list[tuple[str, str]] = []
    while True:
        pos = _skip_ws(text, pos)
        if text.startswith(PARAMETER_OPEN, pos, bound):
            keyed = _tag_name(text, pos + len(PARAMETER_OPEN), bound)
            if keyed is None:
                raise _Failure("invalid_parameter", "Write each argument as <parameter=NAME> on one line.", pos)
            key, value_start = keyed
            end = _value_end(text, value_start, bound, close_tag)
            if end < 0:
                raise _Failure(
                    "unclosed_parameter",
                    f"The value of <parameter={key}> is not closed with {PARAMETER_CLOSE}.",
                    value_start,
                )
            params.append((key, _strip_template_newlines(text[value_start:end])))
            pos = end + len(PARAMETER_CLOSE)
        elif text.startswith(FUNCTION_CLOSE, pos, bound):
            after = _skip_ws(text, pos + len(FUNCTION_CLOSE))
            if not text.startswith(close_tag, after, bound):
                raise _Failure("unexpected_text", f"Nothing may follow {FUNCTION_CLOSE} but {close_tag}.", after)
            return name, params, after, []
        elif text.startswith(close_tag, pos, bound):
            if lenient:
                return name, params, pos, ["missing_function_close"]
            raise _Failure("unclosed_function", f"The call is missing {FUNCTION_CLOSE} before {close_tag}.", pos)
        else:
            raise _Failure(
                "unexpected_text",
                f"Expected {PARAMETER_OPEN}NAME> or {FUNCTION_CLOSE}; only whitespace may separate them.",
                pos,
            )


def _validate(
    name: str, params: list[tuple[str, str]], repairs: list[str], raw: str, span: tuple[int, int], cfg: ProtocolConfig
) -> ToolCall | ToolCallError:
    fn = cfg.function_name

    def error(kind: str, message: str) -> ToolCallError:
        return ToolCallError(kind=kind, message=message, raw=raw, span=span)

    if name not in cfg.accepted_function_names:
        shown = name if len(name) <= 60 else name[:57] + "..."
        return error("unknown_function", f'Unknown function "{shown}"; the only tool is "{fn}".')
    args: dict[str, str] = {}
    for key, value in params:
        if key in args:
            shown = key if len(key) <= 60 else key[:57] + "..."
            return error("duplicate_argument", f"<parameter={shown}> is given twice; give each argument once.")
        args[key] = value
    tool = get_tool(cfg.tool)
    if not tool.code_arguments:  # a tool with arguments of its own: values of non-string type are JSON
        schema = tool.parameters(cfg)
        decoded: dict[str, Any] = {}
        for key, value in args.items():
            kind = argument_type(schema, key)
            if kind not in (None, "string"):
                try:
                    decoded[key] = json.loads(value)
                except (ValueError, RecursionError):  # RecursionError: thousands of nested brackets
                    return error("bad_argument_type", f"<parameter={key}> must hold a JSON {kind}.")
            else:
                decoded[key] = value
        try:
            kept, warnings = check_arguments(schema, decoded)
        except ArgumentError as exc:
            return error(exc.kind, exc.message)
        return ToolCall(
            name=name,
            arguments=kept,
            raw=raw,
            span=span,
            repaired=bool(repairs),
            repairs=list(repairs),
            warnings=warnings,
        )
    if "code" not in args:
        return error("missing_code", "The call has no <parameter=code> with the Python program.")
    if not args["code"].strip():
        return error("empty_code", "<parameter=code> is empty; put the Python program in it.")
    warnings = [f"ignored_argument:{key}" for key in args if key not in ("code", "input")]
    return ToolCall(
        name=name,
        arguments={"code": args["code"], "input": args.get("input", "")},
        raw=raw,
        span=span,
        repaired=bool(repairs),
        repairs=list(repairs),
        warnings=warnings,
    )


def unwritable_reason(value: str, config: ProtocolConfig) -> str | None:
    """Why ``value`` cannot be written as a parameter value so that it reads back unchanged, or None when it can.

    The two cases (module docstring): it holds ``config.tool_call_open``, or a ``</parameter>`` followed by
    optional whitespace and ``<parameter=``, ``</function>`` or ``config.tool_call_close``.
    """
    if config.tool_call_open in value:
        return f"it holds the opening tag {config.tool_call_open}"
    pos = 0
    while (close := value.find(PARAMETER_CLOSE, pos)) >= 0:
        after = _skip_ws(value, close + len(PARAMETER_CLOSE))
        if any(value.startswith(tag, after) for tag in (PARAMETER_OPEN, FUNCTION_CLOSE, config.tool_call_close)):
            return f"it holds {PARAMETER_CLOSE} followed by {value[after : after + 12]!r}, which would end the value"
        pos = close + len(PARAMETER_CLOSE)
    return None


class Qwen3XmlFormat(ToolCallFormat):
    """``<function=NAME>`` with ``<parameter=KEY>`` blocks inside the tags (module docstring: the policies)."""

    name = "qwen3_xml"
    error_kinds = ERROR_KINDS

    def parse_block(
        self, text: str, start: int, config: ProtocolConfig, lenient: bool
    ) -> tuple[ToolCall | ToolCallError, int]:
        """See :meth:`ToolCallFormat.parse_block` and the module docstring. Work is linear in the length of the
        block's region (up to the next opening tag)."""
        open_tag, close_tag = config.tool_call_open, config.tool_call_close
        body_start = start + len(open_tag)
        next_open = text.find(open_tag, body_start)
        bound = len(text) if next_open < 0 else next_open
        first_close = text.find(close_tag, body_start, bound)
        if first_close < 0:
            where = f" before the next {open_tag}" if next_open >= 0 else ""
            return ToolCallError(
                kind="unclosed_tag",
                message=f"The tool call was not closed with {close_tag}{where}, so nothing was run.",
                raw=text[body_start:bound],
                span=(start, bound),
            ), bound
        if not text[body_start:first_close].strip():
            end = first_close + len(close_tag)
            return ToolCallError(
                kind="empty_call",
                message="The tool call is empty.",
                raw=text[body_start:first_close],
                span=(start, end),
            ), end
        try:
            name, params, close, repairs = _read(text, body_start, bound, close_tag, lenient)
        except _Failure as failure:
            # The block ends at the first closing tag from where reading failed (else the first one of the block).
            close = text.find(close_tag, failure.at, bound)
            close = first_close if close < 0 else close
            end = close + len(close_tag)
            return ToolCallError(
                kind=failure.kind, message=failure.message, raw=text[body_start:close], span=(start, end)
            ), end
        end = close + len(close_tag)
        return _validate(name, params, repairs, text[body_start:close], (start, end), config), end

    def render_call(self, name: str, arguments: Mapping[str, str], config: ProtocolConfig) -> str:
        """``<tool_call>\\n<function=NAME>\\n`` + ``<parameter=KEY>\\nVALUE\\n</parameter>\\n`` per argument +
        ``</function>\\n</tool_call>``: the Qwen3-Coder/Qwen3.5 templates' rendering of a structured call with
        string arguments.

        Raises:
            ValueError: a name or key that is empty, has surrounding whitespace or holds ``<``, ``>`` or a
                newline; a value that is not a string or that :func:`unwritable_reason` refuses.
        """
        parts = [config.tool_call_open, "\n", FUNCTION_OPEN, _checked_name(name, "function name"), ">\n"]
        for key, value in arguments.items():
            if not isinstance(value, str):
                raise ValueError(f"qwen3_xml writes string arguments only; {key!r} is {type(value).__name__}")
            reason = unwritable_reason(value, config)
            if reason is not None:
                raise ValueError(f"qwen3_xml cannot write the argument {key!r}: {reason}")
            parts += [PARAMETER_OPEN, _checked_name(key, "argument name"), ">\n", value, "\n", PARAMETER_CLOSE, "\n"]
        parts += [FUNCTION_CLOSE, "\n", config.tool_call_close]
        return "".join(parts)

    def call_instructions(self, config: ProtocolConfig) -> str:
        """How to write a call in this format, for the tools section."""
        return (
            f"name the function in {FUNCTION_OPEN}NAME>, give each argument as {PARAMETER_OPEN}ARGUMENT> "
            f"with its value on the lines after it and {PARAMETER_CLOSE}, close {FUNCTION_CLOSE}, and put it "
            f"all inside {config.tool_call_open}{config.tool_call_close} tags"
        )

    def parse_error_hint(self, config: ProtocolConfig) -> str:
        """ "A valid call names the function and each argument in tags, e.g.:" and a rendered example call."""
        example = self.render_call(config.function_name, {"code": "print(1 + 1)", "input": ""}, config)
        return f"A valid call names the function and each argument in tags, e.g.:\n{example}"

    def template_writes_calls(self, template: str) -> bool:
        """Templates that write ``<function=`` and ``<parameter=`` (Qwen3-Coder, Qwen3.5/3.6, Nemotron 3)."""
        return FUNCTION_OPEN in template and PARAMETER_OPEN in template


def _checked_name(name: str, what: str) -> str:
    if not isinstance(name, str) or not name or name != name.strip() or any(c in name for c in "<>\n"):
        raise ValueError(
            f"qwen3_xml cannot write the {what} {name!r}: it must be non-empty, without '<', '>', "
            "newlines or surrounding whitespace"
        )
    return name


QWEN3_XML = register_format(Qwen3XmlFormat())
