"""Tool calls in one assistant turn: finding, decoding and validating them, and writing them.

Covers :func:`parse_tool_calls` (model text -> calls and structured errors) and its inverse
:func:`render_tool_call`. It does not execute anything and does not render tool responses
(``tirl.protocol.response``). Nothing here raises on model text.

Two layers. The turn scan (:func:`parse_tool_calls`, :func:`draft_spans`: opening tags, drafts, ``multi_call``)
is the same for every tool-call format; what a block holds is the format's (``config.tool_call_format``, the
registry in :mod:`tirl.protocol.formats`). The rest of this module is the default ``hermes`` format's parser,
which :mod:`tirl.protocol.formats.hermes` wraps; the XML format of the Qwen3-Coder family is
:mod:`tirl.protocol.formats.qwen3_xml`. The policies below are the Hermes format's, except drafts and
``multi_call``, which hold for every format.

A call is JSON between ``<tool_call>`` and ``</tool_call>``:
``{"name": "execute_python_code_with_standard_io", "arguments": {"code": "...", "input": "..."}}``.

Policies
--------
* **Finding the block.** After ``<tool_call>`` the body is first read with a JSON decoder
  (``json.JSONDecoder.raw_decode``); when one valid value is followed by ``</tool_call>``, that is the block,
  so tags inside JSON strings (``s = '</tool_call>'`` in the code) never cut a call. Otherwise the block ends
  at the first plain ``</tool_call>`` (in lenient mode, a closing tag outside double-quoted strings is tried
  first, so a repairable body may also hold one), which keeps an unbalanced quote from swallowing later calls.
  No closing tag at all: a ``ToolCallError`` of kind ``unclosed_tag`` (never executed; typically a turn cut by
  the token budget). A ``<tool_call>`` that starts before the previous one is closed also makes the previous
  one ``unclosed_tag``, and parsing resumes at the new one. Every search stops at the next ``<tool_call>``
  (the JSON decoder may read past at most :data:`MAX_TAGS_INSIDE_STRINGS` of them inside strings), so parsing
  is linear in the turn length even for degenerate, repetitive output.
* **Several calls in one turn.** ``config.multi_call="all"`` (default) returns every block in order;
  ``"first"`` returns only the first block's result (call or error) and ignores the rest, as the release does.
* **Drafts.** With ``config.ignore_think_drafts`` (default), blocks inside a *closed* ``<think>...</think>``
  are drafts and ignored; an unclosed ``<think>`` is plain text (its calls count). When the generation prompt
  prefill opens a think block, the turn starts inside it. Calls inside ``<reason>`` are real: in this protocol
  the whole turn reasons inside ``<reason>`` (pre-filled) and calls the tool from there. If the think tag is
  configured as the reasoning tag, draft detection is off.
* **Text around calls.** Text before, between and after calls is the turn's content; the parser ignores it. A
  turn that has at least one call (even an error) continues the conversation, whatever follows the last call
  (an ``<answer>`` there still counts as an answer block for the format score). A stray ``</tool_call>``
  without an opening tag is text.
* **Strict by default.** The body must be one JSON object (``json.loads`` with ``strict=True``).
  ``lenient=True`` (``config.lenient``) tries, in order, and records each step used in ``ToolCall.repairs``
  (``repaired=True``): ``code_fence`` (a Markdown fence around the JSON), ``control_characters`` (raw newlines
  or tabs inside strings), ``invalid_escapes`` (a backslash before a character JSON cannot escape, e.g.
  ``\\sqrt`` or ``\\underbrace``, is kept as a literal backslash), ``escaped_whitespace`` (literal ``\\n`` between
  JSON tokens), ``python_literal`` (a Python dict: single quotes, ``True``/``False``/``None``, through
  ``ast.literal_eval``), ``arguments_as_string`` (arguments given as a JSON string), ``parameters_key``
  (``parameters`` instead of ``arguments``), ``input_coerced`` (a number or null ``input``).
* **Untagged calls (lenient only).** A turn with no opening tag at all may still hold the call JSON the model was
  asked for, written without the tags: bare, or as the whole body of a ```` ```json ```` / ```` ``` ```` fence
  (Qwen2.5-Coder-0.5B-Instruct in ``native`` style writes nothing else). For the formats that write a call as
  a JSON object (``ToolCallFormat.untagged_json``: ``hermes``), each JSON object of the turn whose ``"name"`` is
  an accepted function name and that has ``"arguments"`` is decoded by the format as the tagged block
  ``<tool_call>\\n{object}\\n</tool_call>`` would be (the same repairs and argument checks), marked
  ``untagged`` in ``ToolCall.repairs`` (also ``code_fence`` when a fence held it), with ``raw`` the object's text
  and ``span`` the object's offsets (the whole fence, markers included, when it was a fence's only content). An
  object with another name, without ``"arguments"``, or text that is not JSON is not a call (the turn stays a
  final answer); objects inside closed drafts are ignored; ``multi_call`` holds. At most
  :data:`MAX_UNTAGGED_CANDIDATES` objects are tried per turn, so a degenerate turn parses in linear time.
  Valid JSON is never changed: ``"\\frac"`` is the form feed plus ``rac`` as JSON says; such escapes are flagged
  in ``ToolCall.warnings`` as ``suspicious_escape:\\frac`` so format problems stay visible.
* **Arguments.** For the Python tools (``Tool.code_arguments``), the returned arguments are exactly
  ``{"code": str, "input": str}``; ``input`` defaults to ``""``; other keys are dropped with a warning
  ``ignored_argument:<key>`` (``ignored_key:<key>`` at the top level). A tool with arguments of its own is checked
  against its schema instead (:func:`tirl.protocol.tools.check_arguments`). ``name`` must be
  ``config.function_name`` or one of ``config.function_aliases``.

Error kinds (``ToolCallError.kind``): see :data:`ERROR_KINDS`; any format's block on which its parser raised
(a tirl bug, logged) is :data:`PARSER_FAILURE_KIND` (the model's parse error, never an engine failure).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from typing import Any

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.formats import ToolCallFormat, get_format
from tirl.protocol.tools import ArgumentError, check_arguments, get_tool
from tirl.protocol.types import ToolCall, ToolCallError

ERROR_KINDS: dict[str, str] = {
    "unclosed_tag": "a <tool_call> without its closing tag (nothing runs)",
    "empty_call": "nothing between the tags",
    "invalid_json": "the body is not valid JSON (in lenient mode: not repairable)",
    "not_an_object": "the JSON is not an object",
    "missing_name": "no 'name' key",
    "invalid_name": "'name' is not a string",
    "unknown_function": "'name' is not the tool's name",
    "missing_arguments": "no 'arguments' key",
    "arguments_not_object": "'arguments' is not an object",
    "missing_code": "no 'code' argument",
    "empty_code": "'code' is empty or only whitespace",
    "bad_argument_type": "'code' or 'input' is not a string",
}

WARNING_SUSPICIOUS_ESCAPE = "suspicious_escape"

# LaTeX commands whose first letter is a valid JSON escape (\b \f \n \r \t): "\frac" in a JSON string is a
# form feed followed by "rac". \b and \f are flagged whatever follows; \n \r \t only before these words.
_LATEX_AFTER_NRT = frozenset(
    "nabla neq ne nu not neg ni nmid nleq ngeq notin newline noindent "
    "rho right rangle rfloor rceil rm rvert rVert "
    "theta tau times text textbf textit tan tanh tfrac tbinom to top triangle tilde tt".split()
)
_ESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_WORD_RE = re.compile(r"[A-Za-z]*")


def _close_outside_strings(text: str, start: int, close_tag: str, limit: int) -> int:
    """Offset of the first ``close_tag`` in ``text[start:limit]`` that is not inside a double-quoted JSON
    string, or -1. Backslash escapes inside strings are honoured."""
    outside = re.compile('"|' + re.escape(close_tag))
    inside = re.compile(r'["\\]')
    pos = start
    n = limit
    while pos < n:
        m = outside.search(text, pos, n)
        if m is None:
            return -1
        if m.group() != '"':
            return m.start()
        pos = m.end()
        while True:
            m = inside.search(text, pos, n)
            if m is None:
                return -1
            if m.group() == "\\":
                pos = m.end() + 1
                continue
            pos = m.end()
            break
    return -1


def _map_outside_strings(text: str, fn) -> str:
    """Apply ``fn`` to every piece of ``text`` outside double-quoted strings; strings are kept verbatim."""
    out: list[str] = []
    pos = 0
    n = len(text)
    while pos < n:
        q = text.find('"', pos)
        if q < 0:
            out.append(fn(text[pos:]))
            break
        out.append(fn(text[pos:q]))
        i = q + 1
        while i < n and text[i] != '"':
            i += 2 if text[i] == "\\" else 1
        out.append(text[q : i + 1])
        pos = i + 1
    return "".join(out)


def _fix_invalid_escapes(text: str) -> str:
    """Double each backslash that starts an escape JSON does not know (``\\s``, ``\\u`` without 4 hex digits)."""

    def fix(m: re.Match[str]) -> str:
        esc = m.group(1)
        if esc in ('"', "\\", "/", "b", "f", "n", "r", "t") or (len(esc) == 5 and esc[0] == "u"):
            return m.group(0)
        return "\\\\" + esc

    return _ESCAPE_RE.sub(fix, text)


def _loads(text: str, strict: bool = True) -> tuple[bool, Any]:
    try:
        return True, json.loads(text, strict=strict)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        return False, exc


def _describe(exc: Any) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"{exc.msg} (line {exc.lineno}, column {exc.colno})"
    return str(exc) or type(exc).__name__


def _decode(body: str, lenient: bool) -> tuple[bool, Any, list[str]]:
    """Decode a call body. Returns (ok, object or error description, repairs used)."""
    text = body.strip()
    ok, value = _loads(text)
    if ok or not lenient:
        return ok, (value if ok else _describe(value)), []
    first_error = _describe(value)
    repairs: list[str] = []
    fence = re.fullmatch(r"```[A-Za-z0-9_-]*\s*\n?(.*?)\n?\s*```", text, re.DOTALL)
    if fence:
        text = fence.group(1).strip()
        repairs.append("code_fence")
        ok, value = _loads(text)
        if ok:
            return True, value, repairs
    ok, value = _loads(text, strict=False)
    if ok:
        return True, value, repairs + ["control_characters"]
    candidate = text
    steps: list[str] = []
    for name, transform in (
        ("invalid_escapes", _fix_invalid_escapes),
        ("escaped_whitespace", lambda s: _map_outside_strings(s, lambda p: re.sub(r"\\[nrt]", " ", p))),
    ):
        changed = transform(candidate)
        if changed == candidate:
            continue
        candidate = changed
        steps.append(name)
        ok, value = _loads(candidate)
        if ok:
            return True, value, repairs + steps
        ok, value = _loads(candidate, strict=False)
        if ok:
            return True, value, repairs + steps + ["control_characters"]
    try:
        value = ast.literal_eval(text)
    except Exception:  # SyntaxError, ValueError, RecursionError, MemoryError...: not a Python literal either
        return False, first_error, []
    return True, value, repairs + ["python_literal"]


def _number_text(value: Any) -> str | None:
    """A lenient ``input`` as text: ``""`` for None, a number's decimal text, else None (not coercible).

    An integer too long for Python's integer-text conversion (``0x`` and 5,000 hex digits in a Python literal:
    ``str()`` raises ``ValueError``) is not coercible, so the call is the model's ``bad_argument_type``; before
    (issue 41) the exception left the parser and the turn became an engine failure, masked.
    """
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return str(value)
    except ValueError:
        return None


def _suspicious_escapes(body: str) -> list[str]:
    found: list[str] = []
    for m in _ESCAPE_RE.finditer(body):
        esc = m.group(1)
        if esc not in ("b", "f", "n", "r", "t"):
            continue
        word = esc + _WORD_RE.match(body, m.end()).group()
        if esc in "bf" or word in _LATEX_AFTER_NRT:
            note = f"{WARNING_SUSPICIOUS_ESCAPE}:\\{word}"
            if note not in found:
                found.append(note)
    return found


def _validate(
    obj: Any, repairs: list[str], body: str, span: tuple[int, int], cfg: ProtocolConfig, lenient: bool
) -> ToolCall | ToolCallError:
    fn = cfg.function_name

    def error(kind: str, message: str) -> ToolCallError:
        return ToolCallError(kind=kind, message=message, raw=body, span=span)

    if not isinstance(obj, dict):
        return error("not_an_object", f"The tool call must be a JSON object, not {type(obj).__name__}.")
    warnings: list[str] = []
    if "name" not in obj:
        return error("missing_name", f'The tool call has no "name"; use "name": "{fn}".')
    name = obj["name"]
    if not isinstance(name, str):
        return error("invalid_name", f'"name" must be a string: "{fn}".')
    if name not in cfg.accepted_function_names:
        shown = name if len(name) <= 60 else name[:57] + "..."
        return error("unknown_function", f'Unknown function "{shown}"; the only tool is "{fn}".')
    if "arguments" in obj:
        args = obj["arguments"]
    elif lenient and "parameters" in obj:
        args = obj["parameters"]
        repairs = repairs + ["parameters_key"]
    else:
        return error("missing_arguments", 'The tool call has no "arguments" object with "code" and "input".')
    for key in obj:
        if key not in ("name", "arguments") and not (key == "parameters" and "parameters_key" in repairs):
            warnings.append(f"ignored_key:{key}")
    if isinstance(args, str) and lenient:
        ok, decoded, inner_repairs = _decode(args, lenient=True)
        if ok and isinstance(decoded, dict):
            args = decoded
            repairs = repairs + ["arguments_as_string"] + inner_repairs
    if not isinstance(args, dict):
        return error(
            "arguments_not_object",
            f'"arguments" must be an object like {{"code": "...", "input": ""}}, not {type(args).__name__}.',
        )
    tool = get_tool(cfg.tool)
    if not tool.code_arguments:  # a tool with arguments of its own: checked against its schema
        try:
            kept, checked = check_arguments(tool.parameters(cfg), args)
        except ArgumentError as exc:
            return error(exc.kind, exc.message)
        notes = ([] if "python_literal" in repairs else _suspicious_escapes(body)) + warnings + checked
        return ToolCall(
            name=name,
            arguments=kept,
            raw=body,
            span=span,
            repaired=bool(repairs),
            repairs=list(repairs),
            warnings=notes,
        )
    if "code" not in args:
        return error("missing_code", 'The arguments have no "code" string.')
    code = args["code"]
    if not isinstance(code, str):
        return error("bad_argument_type", f'"code" must be a string, not {type(code).__name__}.')
    if not code.strip():
        return error("empty_code", '"code" is empty; put the Python program in "code".')
    stdin = args.get("input", "")
    if not isinstance(stdin, str):
        coerced = _number_text(stdin) if lenient else None
        if coerced is not None:
            stdin = coerced
            repairs = repairs + ["input_coerced"]
        else:
            return error("bad_argument_type", f'"input" must be a string, not {type(stdin).__name__}.')
    for key in args:
        if key not in ("code", "input"):
            warnings.append(f"ignored_argument:{key}")
    if "python_literal" not in repairs:
        warnings = _suspicious_escapes(body) + warnings
    return ToolCall(
        name=name,
        arguments={"code": code, "input": stdin},
        raw=body,
        span=span,
        repaired=bool(repairs),
        repairs=list(repairs),
        warnings=warnings,
    )


_DECODER = json.JSONDecoder()
_WS = re.compile(r"\s*")


#: How many further ``<tool_call>`` tags a JSON value may hold inside its strings (code that prints the tag).
MAX_TAGS_INSIDE_STRINGS = 16


def _json_then_close(text: str, body_start: int, close_tag: str, open_tag: str) -> tuple[int, Any] | None:
    """Fast path: the body is one strict JSON value followed only by whitespace and ``close_tag``.

    Returns (offset of the closing tag, decoded value), or None. The decoder reads strings as JSON does, so
    tags inside strings are never taken for the end of the block; it stops at the first error, so garbage
    costs little.

    The value is decoded from a slice that ends at the next ``open_tag``; only when the value was cut there
    (inside a string, or at the end of the slice) is the slice extended to the following one, at most
    :data:`MAX_TAGS_INSIDE_STRINGS` times. Decoding the whole rest of the turn would cost time in proportion
    to the offset of the block (``JSONDecodeError`` counts every newline before the error), so a turn of many
    broken blocks parsed in quadratic time.
    """
    j = _WS.match(text, body_start).end()
    bound = text.find(open_tag, j)
    for _ in range(MAX_TAGS_INSIDE_STRINGS + 1):
        stop = len(text) if bound < 0 else bound
        piece = text[j:stop]
        try:
            value, end = _DECODER.raw_decode(piece)
        except (ValueError, RecursionError) as exc:  # ValueError: also Python's limit on integer digits
            if not isinstance(exc, json.JSONDecodeError):
                return None
            cut = exc.pos >= len(piece.rstrip()) or exc.msg.startswith("Unterminated string")
            if bound < 0 or not cut:
                return None
            bound = text.find(open_tag, bound + len(open_tag))
            continue
        k = _WS.match(text, j + end).end()
        return (k, value) if text.startswith(close_tag, k) else None
    return None


def _parse_block(text: str, start: int, cfg: ProtocolConfig, lenient: bool) -> tuple[ToolCall | ToolCallError, int]:
    """Parse the block whose ``<tool_call>`` starts at ``start``. Returns the item and where scanning resumes.

    Every search is bounded by the next ``<tool_call>``, so a turn with many blocks parses in linear time.
    """
    open_tag, close_tag = cfg.tool_call_open, cfg.tool_call_close
    body_start = start + len(open_tag)
    n = len(text)
    fast = _json_then_close(text, body_start, close_tag, open_tag)
    if fast is not None:
        close, value = fast
        end = close + len(close_tag)
        return _validate(value, [], text[body_start:close], (start, end), cfg, lenient), end
    next_open = text.find(open_tag, body_start)
    bound = n if next_open < 0 else next_open
    plain = text.find(close_tag, body_start, bound)
    if plain < 0:
        if next_open >= 0:
            return ToolCallError(
                kind="unclosed_tag",
                message=f"The tool call was not closed with {close_tag} before the next {open_tag}, so it was not run.",
                raw=text[body_start:next_open],
                span=(start, next_open),
            ), next_open
        return ToolCallError(
            kind="unclosed_tag",
            message=f"The tool call was not closed with {close_tag}, so nothing was run.",
            raw=text[body_start:],
            span=(start, n),
        ), n
    body = text[body_start:plain]
    end = plain + len(close_tag)
    if not body.strip():
        return ToolCallError(kind="empty_call", message="The tool call is empty.", raw=body, span=(start, end)), end
    closes = [plain]
    if lenient:
        # A repairable body may hold the closing tag inside a string: look for it outside strings, up to the
        # next opening tag after the plain one.
        after = text.find(open_tag, end)
        aware = _close_outside_strings(text, body_start, close_tag, n if after < 0 else after)
        if aware > plain:
            closes.insert(0, aware)
    first_error = ""
    for close in closes:
        candidate = text[body_start:close]
        ok, value, repairs = _decode(candidate, lenient)
        if ok:
            stop = close + len(close_tag)
            return _validate(value, repairs, candidate, (start, stop), cfg, lenient), stop
        if close == plain:
            first_error = value
    return ToolCallError(
        kind="invalid_json",
        message=f"The tool call is not valid JSON: {first_error}.",
        raw=body,
        span=(start, end),
    ), end


def _block_end(text: str, start: int, cfg: ProtocolConfig) -> int:
    """Where a tool-call block starting at ``start`` ends (used to skip drafted calls): after its closing tag,
    at the next ``<tool_call>`` when it is never closed before one, else ``len(text)``."""
    body_start = start + len(cfg.tool_call_open)
    fast = _json_then_close(text, body_start, cfg.tool_call_close, cfg.tool_call_open)
    if fast is not None:
        return fast[0] + len(cfg.tool_call_close)
    next_open = text.find(cfg.tool_call_open, body_start)
    bound = len(text) if next_open < 0 else next_open
    close = text.find(cfg.tool_call_close, body_start, bound)
    if close >= 0:
        return close + len(cfg.tool_call_close)
    return bound


def _draft_close(text: str, pos: int, cfg: ProtocolConfig) -> int:
    """Offset of the ``</think>`` closing a draft opened before ``pos``, skipping tool-call blocks; -1 if none."""
    close = -1
    while True:
        if close < pos:  # else the first </think> at or after pos is still the one found before (linear scan)
            close = text.find(cfg.think_close, pos)
            if close < 0:
                return -1
        call = text.find(cfg.tool_call_open, pos, close + len(cfg.tool_call_open) - 1)
        if 0 <= call < close:
            pos = max(_format(cfg).block_end(text, call, cfg), call + 1)
            continue
        return close


def _format(cfg: ProtocolConfig) -> ToolCallFormat:
    """The tool-call format ``cfg.tool_call_format`` names (validated when the config was built)."""
    return get_format(cfg.tool_call_format)


def _prefill_opens_draft(cfg: ProtocolConfig) -> bool:
    prefill = cfg.prompt_prefill  # what was pre-filled (nothing in the baseline styles)
    return prefill.rfind(cfg.think_open) > prefill.rfind(cfg.think_close) if cfg.think_open in prefill else False


def draft_spans(
    text: str, config: ProtocolConfig | None = None, *, starts_inside: bool | None = None
) -> list[tuple[int, int]]:
    """The ``(start, end)`` offsets of the closed ``<think>...</think>`` drafts of ``text``, in order.

    The same rule :func:`parse_tool_calls` applies to tool calls: a draft is closed by the first
    ``</think>`` after it that is not inside a tool-call block; an unclosed ``<think>`` is plain text (and no
    later draft can close either); a ``<think>`` inside a tool-call block is not a tag. Empty when
    ``config.think_drafts_active`` is off.

    Args:
        text: model text (one turn, or a trajectory's model text).
        config: tags and ``ignore_think_drafts``.
        starts_inside: the text starts inside a draft (the generation prompt's prefill opened it); None
            decides from ``config.prompt_prefill``.

    Returns:
        Non-overlapping spans; ``end`` is just after ``</think>``. Never raises on a string.
    """
    cfg = resolve_config(config)
    if not isinstance(text, str) or not cfg.think_drafts_active or cfg.think_close not in text:
        return []  # no closing tag: no closed draft (the common case, one scan)
    spans: list[tuple[int, int]] = []
    pos = 0
    if _prefill_opens_draft(cfg) if starts_inside is None else starts_inside:
        close = _draft_close(text, 0, cfg)
        if close < 0:
            return spans
        pos = close + len(cfg.think_close)
        spans.append((0, pos))
    think = -1
    while True:
        if think < pos:  # else the first <think> at or after pos is still the one found before (linear scan)
            think = text.find(cfg.think_open, pos)
            if think < 0:
                return spans
        call = text.find(cfg.tool_call_open, pos, think)
        if call >= 0:  # a tool-call block first: a <think> inside its JSON is not a tag
            pos = max(_format(cfg).block_end(text, call, cfg), call + 1)
            continue
        close = _draft_close(text, think + len(cfg.think_open), cfg)
        if close < 0:
            return spans
        pos = close + len(cfg.think_close)
        spans.append((think, pos))


def strip_drafts(text: str, config: ProtocolConfig | None = None, *, starts_inside: bool | None = None) -> str:
    """``text`` with every closed draft (:func:`draft_spans`) replaced by one newline."""
    cfg = resolve_config(config)
    if not isinstance(text, str) or cfg.think_close not in text:
        return text  # no closing tag, no closed draft: the common case, one scan
    spans = draft_spans(text, cfg, starts_inside=starts_inside)
    if not spans:
        return text
    parts, pos = [], 0
    for start, end in spans:
        parts.append(text[pos:start])
        parts.append("\n")
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


def parse_tool_calls(
    text: str, config: ProtocolConfig | None = None, *, lenient: bool | None = None
) -> list[ToolCall | ToolCallError]:
    """Every tool call of one assistant turn, in order, as decoded calls or structured errors.

    Args:
        text: the text the model generated in this turn (without the pre-filled prefix).
        config: tags, function name, tool-call format (``tool_call_format``) and policies (see the module
            docstring and :mod:`tirl.protocol.formats`).
        lenient: overrides ``config.lenient`` when given.

    Returns:
        A list of :class:`ToolCall` (valid; ``arguments == {"code": str, "input": str}``) and
        :class:`ToolCallError` (kind in the format's ``error_kinds``: :data:`ERROR_KINDS` for ``hermes``) in
        text order; empty when the turn has no ``<tool_call>`` outside drafts, except that in lenient mode a turn
        without any opening tag gives its untagged calls (JSON formats; module docstring). With
        ``multi_call="first"`` at most one item. Never raises; non-string input gives an empty list.
    """
    if not isinstance(text, str):
        return []
    cfg = resolve_config(config)
    use_lenient = cfg.lenient if lenient is None else lenient
    fmt = _format(cfg)
    drafts = cfg.think_drafts_active
    results: list[ToolCall | ToolCallError] = []
    pos = 0
    if drafts and _prefill_opens_draft(cfg):
        close = _draft_close(text, 0, cfg)
        if close >= 0:
            pos = close + len(cfg.think_close)
    n = len(text)
    while pos < n:
        call = text.find(cfg.tool_call_open, pos)
        if call < 0:
            break
        think = text.find(cfg.think_open, pos, call) if drafts else -1
        if think >= 0:
            close = _draft_close(text, think + len(cfg.think_open), cfg)
            if close < 0:
                drafts = False  # no closing tag anywhere after this point: no later draft can close either
                pos = think + len(cfg.think_open)
            else:
                pos = close + len(cfg.think_close)
            continue
        try:
            item, pos = fmt.parse_block(text, call, cfg, use_lenient)
        except Exception as exc:  # noqa: BLE001 - a format promises not to raise; if one does, the call is the model's
            item, pos = _parser_failure(text, call, cfg, exc)
        results.append(item)
        if cfg.multi_call == "first":
            break
    if not results and use_lenient and fmt.untagged_json and cfg.tool_call_open not in text:
        results = _untagged_calls(text, cfg, fmt)
    return results


#: How many JSON objects that might be calls (``{"name": ...`` or ``{"arguments": ...``) an untagged turn's scan
#: tries at most: each try may read to the end of the turn, so the cap keeps a degenerate turn linear.
MAX_UNTAGGED_CANDIDATES = 32

# An object whose first key is "name" or "arguments": where an untagged call can start. Nested objects (the
# arguments) start with other keys, and the scan resumes after each object it could delimit.
_UNTAGGED_START = re.compile(r'\{\s*"(?:name|arguments)"\s*:')
# A Markdown fence (```json or a bare ```) whose body may be one call object; group 1 is the body.
_FENCE = re.compile(r"```(?:json|JSON|Json)?[ \t]*\n?(.*?)```", re.DOTALL)
_BRACES_OUTSIDE = re.compile(r'[{}"]')
_QUOTE_OR_ESCAPE = re.compile(r'["\\]')


def _object_end(text: str, start: int) -> int:
    """The offset just after the ``}`` that closes the ``{`` at ``text[start]``, counting braces outside
    double-quoted strings (backslash escapes honoured), or -1 when it is never closed. Linear in the text read."""
    depth = 0
    pos = start
    n = len(text)
    while pos < n:
        m = _BRACES_OUTSIDE.search(text, pos)
        if m is None:
            return -1
        ch = m.group()
        pos = m.end()
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                return pos
        else:  # a string: skip to its closing quote
            while True:
                q = _QUOTE_OR_ESCAPE.search(text, pos)
                if q is None:
                    return -1
                pos = q.end() + (1 if q.group() == "\\" else 0)
                if q.group() == '"':
                    break
    return -1


def _untagged_calls(text: str, cfg: ProtocolConfig, fmt: ToolCallFormat) -> list[ToolCall | ToolCallError]:
    """The untagged calls of a turn without any opening tag (lenient mode, JSON formats; module docstring).

    Never raises: a format that raises on the equivalent tagged block makes that object no call (logged).
    """
    if _UNTAGGED_START.search(text) is None:
        return []  # the common final answer: one scan
    fences: dict[tuple[int, int], tuple[int, int]] = {}  # the stripped body's offsets -> the whole fence's
    for m in _FENCE.finditer(text):
        body = m.group(1)
        lead = len(body) - len(body.lstrip())
        fences[(m.start(1) + lead, m.start(1) + len(body.rstrip()))] = (m.start(), m.end())
    drafts = draft_spans(text, cfg)
    results: list[ToolCall | ToolCallError] = []
    pos = 0
    for _ in range(MAX_UNTAGGED_CANDIDATES):
        m = _UNTAGGED_START.search(text, pos)
        if m is None:
            break
        start = m.start()
        end = _object_end(text, start)
        if end < 0:  # never closed (a turn cut short, a stray brace): an object inside may still be whole
            pos = start + 1
            continue
        if any(a <= start < b for a, b in drafts):
            pos = end
            continue
        fence = fences.get((start, end))
        decoded, item = _untagged_item(text[start:end], fence or (start, end), fence is not None, cfg, fmt)
        # A JSON object is read once, its nested objects never on their own (the arguments of an object with
        # another name are no call); text that is no JSON may hold an object further in.
        pos = end if decoded else start + 1
        if item is None:
            continue
        results.append(item)
        if cfg.multi_call == "first":
            break
    return results


def _untagged_item(
    body: str, span: tuple[int, int], fenced: bool, cfg: ProtocolConfig, fmt: ToolCallFormat
) -> tuple[bool, ToolCall | ToolCallError | None]:
    """One object of an untagged turn as the format reads it between the tags.

    Returns:
        ``(decoded, item)``: ``decoded`` is False when ``body`` is not JSON even with the lenient repairs;
        ``item`` is None when it is no call (not JSON, not an object, another name, no ``"arguments"``).
    """
    ok, obj, _ = _decode(body, lenient=True)
    if not ok:
        return False, None
    if not isinstance(obj, dict) or "arguments" not in obj:
        return True, None
    name = obj.get("name")
    if not isinstance(name, str) or name not in cfg.accepted_function_names:
        return True, None
    block = f"{cfg.tool_call_open}\n{body}\n{cfg.tool_call_close}"
    try:
        item, _ = fmt.parse_block(block, 0, cfg, True)
    except Exception as exc:  # noqa: BLE001 - a format promises not to raise; if one does, this is no call
        import logging

        logging.getLogger("tirl.protocol").error(
            "tool-call parser %r raised %s on an untagged call: %s", cfg.tool_call_format, type(exc).__name__, exc
        )
        return True, None
    added = ["untagged"] + (["code_fence"] if fenced else [])
    if isinstance(item, ToolCall):
        return True, dataclasses.replace(item, raw=body, span=span, repaired=True, repairs=added + list(item.repairs))
    return True, dataclasses.replace(item, raw=body, span=span)


#: The kind of :class:`ToolCallError` the turn scan gives a block on which the format's parser raised (a tirl
#: bug, logged): the call is answered as a parse error (the model's), never an engine failure (issue 41).
PARSER_FAILURE_KIND = "unparsable_call"


def _parser_failure(text: str, start: int, cfg: ProtocolConfig, exc: Exception) -> tuple[ToolCallError, int]:
    """The error for a block whose parser raised, and where the scan resumes: after the first closing tag
    before the next opening tag, else at that opening tag (or the end of the turn)."""
    import logging

    logging.getLogger("tirl.protocol").error(
        "tool-call parser %r raised %s: %s (the call is answered as a parse error)",
        cfg.tool_call_format,
        type(exc).__name__,
        str(exc)[:200],
    )
    body_start = start + len(cfg.tool_call_open)
    next_open = text.find(cfg.tool_call_open, body_start)
    bound = len(text) if next_open < 0 else next_open
    close = text.find(cfg.tool_call_close, body_start, bound)
    end = close + len(cfg.tool_call_close) if close >= 0 else bound
    message = "The tool call could not be read; nothing was run."
    return ToolCallError(kind=PARSER_FAILURE_KIND, message=message, raw=text[body_start:end], span=(start, end)), end


def render_tool_call(code: str, stdin: str = "", config: ProtocolConfig | None = None) -> str:
    """The text of one tool call, as the model should write it in ``config.tool_call_format`` (and as that
    format's chat template renders a structured call). For ``hermes``, Qwen2.5's layout:
    ``<tool_call>\\n{"name": ..., "arguments": {"code": ..., "input": ...}}\\n</tool_call>``; for ``qwen3_xml``
    see :mod:`tirl.protocol.formats.qwen3_xml`.

    Args:
        code: Python source.
        stdin: text for standard input.
        config: function name, tags and format.

    Returns:
        The block; :func:`parse_tool_calls` reads it back to the same ``code`` and ``input``.

    Raises:
        ValueError: the format cannot write this code or input (``qwen3_xml``: a value holding the opening tag
            or a closing ``</parameter>`` sequence; ``hermes`` writes every string).
    """
    cfg = resolve_config(config)
    return _format(cfg).render_call(cfg.function_name, {"code": code, "input": stdin}, cfg)
