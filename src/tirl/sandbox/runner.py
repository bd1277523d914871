"""Run one piece of untrusted code inside an already-isolated call process, IPython-style.

Covers what happens after the isolation layers are applied: fresh ``__main__`` module, standard streams on
the call's pipes (stdout line-buffered, so output printed before a kill is kept; ``os._exit`` flushes
first), parsing, running all statements, evaluating a final expression statement and recording its
``repr`` as ``display`` (IPython semantics: not when the cell ends with ``;``, not when the value is None,
and here also not when anything was printed), a compact traceback with only the user's frames, the exit
code of ``sys.exit``, and a JSON record written to the result descriptor for the worker.

It does not isolate, limit or time anything (see :mod:`tirl.sandbox.isolation` and the worker).
"""

from __future__ import annotations

import ast
import atexit
import builtins
import io
import json
import linecache
import os
import sys
import tokenize
import traceback
import types
from typing import NoReturn

#: Filename of the user's code in tracebacks.
FILENAME = "<code>"
#: Longest traceback kept (characters); longer ones keep their head and tail.
MAX_TRACEBACK_CHARS = 16_000
_SILENT_TOKENS = {tokenize.ENDMARKER, tokenize.NEWLINE, tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT}


class _CountingFileIO(io.FileIO):
    """FileIO that counts the bytes written through it (to know whether anything was printed)."""

    written = 0

    def write(self, data):
        n = super().write(data)
        if n:
            self.written += n
        return n


def ends_with_semicolon(code: str) -> bool:
    """True when the last token of ``code`` that is not a comment or newline is ``;`` (IPython's rule)."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return False
    for tok in reversed(tokens):
        if tok.type in _SILENT_TOKENS:
            continue
        return tok.type == tokenize.OP and tok.string == ";"
    return False


def _cut_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = limit // 5
    tail = limit - head
    return f"{text[:head]}\n... ({len(text) - limit} characters cut) ...\n{text[-tail:]}"


def format_user_traceback(exc: BaseException, extra_first: traceback.FrameSummary | None = None) -> str:
    """Compact traceback of ``exc``: only frames whose file is :data:`FILENAME`, then ``Type: message``.

    Args:
        exc: the exception (with ``__traceback__``).
        extra_first: a frame to put first (the last-expression line when ``repr`` of its value raised).

    Returns:
        The text, at most about :data:`MAX_TRACEBACK_CHARS` characters. A SyntaxError of the code itself
        gives Python's usual ``File "<code>", line N`` block with the caret.
    """
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == FILENAME]
    if extra_first is not None:
        frames.insert(0, extra_first)
    parts: list[str] = []
    if frames:
        parts.append("Traceback (most recent call last):\n")
        parts.extend(traceback.StackSummary.from_list(frames).format())
    parts.extend(traceback.format_exception_only(type(exc), exc))
    return _cut_middle("".join(parts), MAX_TRACEBACK_CHARS)


def _exit_code_of(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except Exception:
        pass
    return 1


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:
            pass


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
        except OSError:
            return
        view = view[n:]


def _install_streams() -> _CountingFileIO:
    raw_out = _CountingFileIO(1, "wb", closefd=False)
    out = io.TextIOWrapper(io.BufferedWriter(raw_out), encoding="utf-8", errors="backslashreplace", line_buffering=True)
    err = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "wb", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )
    inp = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)), encoding="utf-8", errors="replace")
    sys.stdin, sys.stdout, sys.stderr = inp, out, err
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = inp, out, err  # type: ignore[misc]  # Final in typeshed; replaced on purpose
    return raw_out


def _finalize_like_interpreter() -> None:
    """Join non-daemon threads and run atexit handlers, as a normal interpreter exit would."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except Exception:
            pass
    atexit._run_exitfuncs()


def warm_up() -> None:
    """Exercise, once in the worker, the paths every call takes (regex compiles, lazy imports), so that
    forked calls do not each pay for them. Imports ``numpy.random`` when numpy is loaded (it is lazy in
    numpy 2 and the runner reseeds it in every call)."""
    ends_with_semicolon("x = 1\nx;")
    try:
        raise ValueError("warm-up")
    except ValueError as exc:
        format_user_traceback(exc, traceback.FrameSummary(FILENAME, 1, "<module>", line="x"))
    json.dumps({"display": "x", "traceback": None})
    if "numpy" in sys.modules:
        try:
            import numpy.random  # noqa: F401
        except Exception:
            pass


def execute(code: str, result_fd: int, max_display_chars: int) -> NoReturn:
    """Run ``code`` as ``__main__`` and exit the process; never returns.

    Writes one JSON object to ``result_fd``: ``display`` (str or None), ``display_truncated``,
    ``error_type``, ``traceback``, ``memory_error`` (the uncaught exception was a MemoryError) and
    ``exit_code``. Exits with 0, the ``sys.exit`` code, or 1 after an uncaught exception.

    Args:
        code: the user's Python source.
        result_fd: a pipe to the worker.
        max_display_chars: cap on ``display`` (cut, with ``display_truncated``).
    """
    real_exit = os._exit
    raw_out = _install_streams()

    def flushing_exit(status: int) -> NoReturn:
        _flush_std()
        real_exit(status)

    os._exit = flushing_exit  # output printed before os._exit(0) is kept
    atexit._clear()  # handlers of the worker's modules are not the user's
    module = types.ModuleType("__main__")
    module.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = module
    namespace = module.__dict__
    sys.argv = ["-c"]
    sys.path.insert(0, "")
    sys.dont_write_bytecode = True
    np_random = sys.modules.get("numpy.random")
    if np_random is not None:
        try:
            np_random.seed()  # the legacy global generator is otherwise the same in every fork
        except Exception:
            pass
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)

    record: dict = {
        "display": None,
        "display_truncated": False,
        "error_type": None,
        "traceback": None,
        "memory_error": False,
        "exit_code": 0,
    }
    exit_code = 0
    last_line: traceback.FrameSummary | None = None
    try:
        try:
            tree = ast.parse(code, FILENAME)
            last = None
            if tree.body and isinstance(tree.body[-1], ast.Expr) and not ends_with_semicolon(code):
                last = tree.body.pop()
            exec(compile(tree, FILENAME, "exec", dont_inherit=True), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), FILENAME, "eval", dont_inherit=True), namespace)
                if value is not None:
                    sys.stdout.flush()
                    if raw_out.written == 0:
                        lines = code.splitlines()
                        last_line = traceback.FrameSummary(
                            FILENAME,
                            last.lineno,
                            "<module>",
                            line=lines[last.lineno - 1] if last.lineno <= len(lines) else None,
                        )
                        text = repr(value)
                        last_line = None
                        if len(text) > max_display_chars:
                            text = text[:max_display_chars]
                            record["display_truncated"] = True
                        record["display"] = text
            _finalize_like_interpreter()
        except SystemExit as exc:
            exit_code = _exit_code_of(exc)
            _finalize_like_interpreter()
    except BaseException as exc:  # noqa: BLE001 - everything the user's code raises is reported
        exit_code = 1
        is_memory = isinstance(exc, MemoryError)
        if is_memory:
            namespace.clear()  # free what the code held before formatting
            traceback.clear_frames(exc.__traceback__)
        try:
            record["traceback"] = format_user_traceback(exc, last_line)
        except BaseException:  # noqa: BLE001 - even formatting can run out of memory
            record["traceback"] = f"{type(exc).__name__}"
        record["error_type"] = type(exc).__name__
        record["memory_error"] = is_memory
    _flush_std()
    record["exit_code"] = exit_code
    try:
        payload = json.dumps(record).encode()
    except BaseException:  # noqa: BLE001
        payload = json.dumps(
            {"error_type": record["error_type"], "exit_code": exit_code, "traceback": record["error_type"]}
        ).encode()
    _write_all(result_fd, payload)
    real_exit(exit_code)
