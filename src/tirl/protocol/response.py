"""The text the model reads back inside ``<tool_response>``: execution results and parse errors.

Covers :func:`render_tool_response` (an :class:`~tirl.sandbox.types.ExecutionResult` to text),
:func:`render_parse_error` (a :class:`~tirl.protocol.types.ToolCallError` to text), :func:`render_call_response`
(either, for one call) and :func:`truncate_middle` (the head-and-tail cut). It does not add the
``<tool_response>`` tags or chat headers (``tirl.protocol.render``) and does not run code.

What the model sees, by status (rStar2-Agent section 2.2: "standard output, or the error message"):

* ``ok``: the program's stdout (a program that printed only a newline gets an empty response); when it
  printed nothing, the IPython-style ``display`` value of the last expression; when neither,
  ``config.no_output_text``. Anything on stderr follows under a ``[stderr]`` line.
* ``error``: stdout printed before the failure, then stderr under ``[stderr]``, then the compact traceback
  (which ends with ``ErrorType: message``); without a traceback, ``ErrorType`` or
  ``Process exited with code N.``.
* ``timeout``: stdout so far, then ``TimeoutError: the code did not finish within the time limit ...``.
* ``killed``: stdout so far, then ``The process was killed ...`` with the sandbox's reason from stderr.
* ``internal``: a fixed message saying the tool failed, not the code (the sandbox's details stay in the
  result, they are not the model's business).

One trailing newline of stdout is dropped (the template puts ``\\n</tool_response>`` after the text). The whole
text is then cut to ``config.tool_response_max_chars`` characters keeping head and tail around a marker
``...[N characters cut]...``; sandbox-side truncation adds ``[output truncated by the sandbox]``.
The release's ``Tool call success / stdout: / execution time:`` wrapper is not reproduced: tirl shows the
output itself, which is what the paper's Fig. 2 examples show.
"""

from __future__ import annotations

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.formats import get_format
from tirl.protocol.types import ToolCall, ToolCallError
from tirl.sandbox.types import ExecutionResult

SANDBOX_TRUNCATION_MARKER = "[output truncated by the sandbox]"
INTERNAL_ERROR_TEXT = (
    "Tool error: the execution service failed to run this code (an infrastructure problem, not an error in "
    "the code). You may call the tool again."
)


def cut_marker(cut: int) -> str:
    """The marker placed where :func:`truncate_middle` removed ``cut`` characters."""
    return f"\n...[{cut} characters cut]...\n"


def truncate_middle(text: str, max_chars: int) -> str:
    """``text`` cut to at most ``max_chars`` characters, keeping its head and tail around :func:`cut_marker`.

    Args:
        text: any text.
        max_chars: the limit in characters; ``<= 0`` means no limit.

    Returns:
        ``text`` unchanged when it fits; otherwise head + marker + tail with ``len <= max_chars`` (the head gets
        the extra character when the remainder is odd). When ``max_chars`` is smaller than the marker itself,
        the marker alone is returned, so that the cut is never silent.
    """
    n = len(text)
    if max_chars <= 0 or n <= max_chars:
        return text
    marker_len = len(cut_marker(n))
    while True:
        keep = max(0, max_chars - marker_len)
        marker = cut_marker(n - keep)
        if len(marker) <= marker_len:
            break
        marker_len = len(marker)
    head = (keep + 1) // 2
    tail = keep - head
    return text[:head] + marker + (text[n - tail :] if tail else "")


def _strip_one_newline(text: str) -> str:
    return text[:-1] if text.endswith("\n") else text


def _with_sandbox_marker(text: str, truncated: bool) -> str:
    if not truncated:
        return text
    return f"{text}\n{SANDBOX_TRUNCATION_MARKER}" if text else SANDBOX_TRUNCATION_MARKER


def render_tool_response(result: ExecutionResult, config: ProtocolConfig | None = None) -> str:
    """The tool-response text for one execution result (see the module docstring for each status).

    Args:
        result: what the sandbox returned.
        config: ``tool_response_max_chars`` and ``no_output_text``.

    Returns:
        The text to put inside ``<tool_response>``, at most ``config.tool_response_max_chars`` characters
        (when positive). Never raises for any field values of a well-typed result.
    """
    cfg = resolve_config(config)
    stdout = _with_sandbox_marker(_strip_one_newline(result.stdout or ""), result.stdout_truncated)
    stderr = _with_sandbox_marker(_strip_one_newline(result.stderr or ""), result.stderr_truncated)
    parts: list[str] = []
    status = result.status
    if status == "internal":
        parts.append(INTERNAL_ERROR_TEXT)
    elif status == "ok":
        if result.stdout or result.stdout_truncated:
            parts.append(stdout)
        elif result.display:
            parts.append(result.display)
        else:
            parts.append(cfg.no_output_text)
        if stderr:
            parts.append(f"[stderr]\n{stderr}")
    else:
        if stdout:
            parts.append(stdout)
        if status == "error":
            if stderr:
                parts.append(f"[stderr]\n{stderr}")
            if result.traceback:
                parts.append(_strip_one_newline(result.traceback))
            elif result.error_type:
                parts.append(result.error_type)
            else:
                code = result.exit_code
                parts.append(f"Process exited with code {code}." if code is not None else "The process failed.")
        elif status == "timeout":
            limit = f" ({result.duration_s:.1f} s)" if result.duration_s > 0 else ""
            parts.append(f"TimeoutError: the code did not finish within the time limit{limit} and was stopped.")
        else:  # killed
            reason = stderr.strip() or "it used too much memory or produced too much output"
            code = f" (exit code {result.exit_code})" if result.exit_code is not None else ""
            parts.append(f"The process was killed{code}: {reason}")
    return truncate_middle("\n".join(parts), cfg.tool_response_max_chars)


def render_parse_error(error: ToolCallError, config: ProtocolConfig | None = None) -> str:
    """The tool-response text for a call that could not be decoded: the error and the expected format.

    Returns:
        ``Tool call error (<kind>): <message>`` followed by an example of a valid call in
        ``config.tool_call_format`` (one line for ``hermes``), cut like :func:`render_tool_response`.
    """
    cfg = resolve_config(config)
    hint = get_format(cfg.tool_call_format).parse_error_hint(cfg)  # the example call, in the configured format
    text = f"Tool call error ({error.kind}): {error.message}\nNothing was run. {hint}"
    return truncate_middle(text, cfg.tool_response_max_chars)


def render_call_response(
    call: ToolCall | ToolCallError, result: ExecutionResult | None, config: ProtocolConfig | None = None
) -> str:
    """The tool-response text for one call: :func:`render_parse_error` for an error, else
    :func:`render_tool_response` (a missing result is reported like an ``internal`` failure)."""
    if isinstance(call, ToolCallError):
        return render_parse_error(call, config)
    if result is None:
        return render_tool_response(ExecutionResult(status="internal"), config)
    return render_tool_response(result, config)
