"""The ``python_session`` tool: Python whose state persists across the calls of one trajectory (Jupyter-style).

Variables, functions and imports that a call defines are there in the trajectory's later calls, as in the cells of
a notebook; they die with the trajectory, and no other trajectory ever sees them.

How, without giving up the sandbox's isolation: every call is still one fresh, isolated sandbox call (on
``LocalSandbox`` and on the sandbox service alike; no process outlives its call). The trajectory's session
(:attr:`~tirl.protocol.tools.ToolContext.session`, owned by the agent loop, one per trajectory) remembers the
code and input of its earlier *successful* calls (status ``ok``); a new call sends one program that first re-runs
those cells in order, in the program's ``__main__`` namespace, with their output discarded and each given its own
``input`` on standard input, and then runs the new cell as the Python tool would. So:

* the model reads only the new cell's output: its stdout, else the value of its last expression, its stderr, its
  traceback, with line numbers of the new cell (the program's one-line replay header is subtracted);
* a call that failed (``error``, ``timeout``, killed) leaves the session as it was (its partial effects are not
  kept, unlike a notebook's);
* the calls of one turn run one after the other, each seeing the state the previous ones left;
* re-running is not remembering: a cell is run again on every later call, so randomness and time give new values,
  files a cell wrote are written again, and the time limit (``rollout.tool_timeout_s``) covers the re-run cells and
  the new one together. Should a cell that succeeded fail when it is re-run, the new cell still runs and the
  model is told under ``[stderr]`` which cell failed (its variables may be missing);
* re-runs are silent, so the feedback is the new cell's own (issue 41): during the re-run, descriptors 1 and 2
  are ``/dev/null`` (``os.write`` and subprocesses write nowhere) and descriptor 0 holds the re-run cell's own
  input (never the new cell's); ``sys.exit``, ``os._exit``, ``posix._exit`` and ``os.abort`` end only the re-run
  cell (a non-zero code is reported like a failure), and the exit handlers the re-run cells register
  (``atexit``, ``weakref.finalize``) do not run after the new cell;
* not carried over: threads a re-run cell starts that print after the replay write into the new cell's output;
  an exit through ``ctypes`` or a signal handler is not contained; frames inside functions defined by earlier
  cells do not appear in tracebacks (the line of the
  current cell that called them does); a cell that starts with ``from __future__`` imports is a ``SyntaxError``
  once the session has history (the imports must open the program, the replay header comes first).

The first call of a trajectory is sent exactly as the ``python`` tool sends it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping, Sequence
from typing import Any

from tirl.protocol.tools import Tool, ToolContext, ToolResult, register_tool
from tirl.protocol.tools.python import argument_text, execute_requests
from tirl.sandbox.types import ExecutionRequest, ExecutionResult

SESSION_DESCRIPTION = (
    "Run Python 3 code in a session that keeps its state, like the cells of a notebook: variables, functions and "
    "imports defined by earlier successful calls in this conversation can be used. The text in `input` is given "
    "to the code on standard input. What the code prints to standard output is returned (when it prints nothing, "
    "the value of its last expression); if it raises an exception, the error message and a short traceback are "
    "returned instead, and the session stays as it was before the call. numpy, scipy and sympy can be imported."
)

#: Session key under which the trajectory's successful cells are kept: a list of ``(code, input)`` pairs.
CELLS_KEY = "python_session.cells"

#: Filename of the new cell in the sandbox's tracebacks (:data:`tirl.sandbox.runner.FILENAME`).
_CODE_FILENAME = "<code>"

_REPLAY_SOURCE = """\
import atexit, io, os, posix, sys, weakref

class _DiscardBytes(io.RawIOBase):
    def writable(self):
        return True
    def write(self, data):
        return len(data)

class _Discard(io.TextIOBase):
    def __init__(self):
        self.buffer = _DiscardBytes()
    def writable(self):
        return True
    def write(self, text):
        return len(text)

class _ReplayExit(BaseException):
    pass

_replaying = [False]

def _contained(real, default):
    # while a cell is re-run, ending the process raises instead (the new cell must still run); a cell that kept
    # a reference (from os import _exit) gets the real function once the replay is over
    def exit_during_replay(*args, **kwargs):
        if _replaying[0]:
            raise _ReplayExit(args[0] if args else default)
        return real(*args, **kwargs)
    return exit_during_replay

def _input_fd(text):
    try:
        fd = os.memfd_create("cell-input")
        data = text.encode("utf-8", "replace")
        while data:
            data = data[os.write(fd, data):]
        os.lseek(fd, 0, 0)
        return fd
    except Exception:
        return os.open(os.devnull, os.O_RDONLY)

def _replay(cells, namespace):
    names = ("stdin", "stdout", "stderr", "__stdin__", "__stdout__", "__stderr__")
    saved = [getattr(sys, name) for name in names]
    saved_fds = [os.dup(fd) for fd in (0, 1, 2)]
    exits = [(os, "_exit", 0), (posix, "_exit", 0), (os, "abort", "abort")]
    real_exits = [getattr(owner, name) for owner, name, _ in exits]
    for (owner, name, default), real in zip(exits, real_exits):
        setattr(owner, name, _contained(real, default))
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # os.write(1, ...) and subprocesses of the re-run cells: discarded too
    os.dup2(null, 2)
    os.close(null)
    failed = []
    try:
        for number, (code, stdin) in enumerate(cells, 1):
            discard = _Discard()
            sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BytesIO(stdin.encode("utf-8", "replace")), "utf-8")
            sys.stdout = sys.stderr = sys.__stdout__ = sys.__stderr__ = discard
            cell_input = _input_fd(stdin)  # descriptor 0 too: its own input, never the new cell's
            os.dup2(cell_input, 0)
            os.close(cell_input)
            _replaying[0] = True
            try:
                exec(compile(code, "<cell %d>" % number, "exec", dont_inherit=True), namespace)
            except (SystemExit, _ReplayExit) as exc:
                status = exc.args[0] if exc.args else None
                if status not in (None, 0):
                    failed.append("call %d (exit %r)" % (number, status))
            except BaseException as exc:
                failed.append("call %d (%s)" % (number, type(exc).__name__))
            finally:
                _replaying[0] = False
                for stream in saved:
                    try:
                        stream.flush()  # what a cell wrote through the real streams goes to /dev/null now
                    except BaseException:
                        pass
                for name, value in zip(names, saved):
                    setattr(sys, name, value)
    finally:
        _replaying[0] = False
        for (owner, name, _), real in zip(exits, real_exits):
            setattr(owner, name, real)
        for fd, copy in enumerate(saved_fds):
            os.dup2(copy, fd)
            os.close(copy)
        # the exit handlers of the re-run cells ran when those cells ran for real: not again, after the new one
        atexit._clear()
        for finalizer in list(getattr(weakref.finalize, "_registry", {})):
            finalizer.atexit = False
    if failed:
        print("[session] re-running the earlier calls to restore the session failed this time in "
              + ", ".join(failed) + "; what they define may be missing.", file=sys.stderr, flush=True)

_replay(CELLS, NS)
"""

# ASCII digits only: Python writes its line numbers so, and ``\d`` would take other scripts' digits too.
_LINE = re.compile(r'(File "<code>", line )([0-9]+)')
_ON_LINE = re.compile(r"(\bon line )([0-9]+)")
_SYNTAX_ERRORS = ("SyntaxError", "IndentationError", "TabError")


def session_program(cells: Sequence[tuple[str, str]], code: str) -> str:
    """The program sent for ``code`` after the successful ``cells`` (``(code, input)`` pairs, in order): ``code``
    itself when there are none, else one header line that re-runs them silently, then ``code`` from line 2."""
    if not cells:
        return code
    header = (
        f"exec(compile({_REPLAY_SOURCE!r}, '<session>', 'exec', dont_inherit=True), "
        f"{{'__builtins__': __builtins__, 'CELLS': {[tuple(c) for c in cells]!r}, 'NS': globals()}})"
    )
    return header + "\n" + code


def _minus_one(digits: str) -> str:
    """The decimal ``digits`` (ASCII, any length) minus one, at least ``"1"``, without leading zeros.

    On the digit string, never through ``int``: a traceback is the program's own text (a cell can raise an
    exception whose message holds ``File "<code>", line `` and 5,000 digits), and ``int`` refuses more than
    4,300 digits with a ValueError, which made the tool raise and the call count as tirl's failure (``internal``,
    masked from the loss) instead of the model's error (issue 41).
    """
    value = digits.lstrip("0")
    if len(value) <= 18:  # fits a machine word: the plain way
        return str(max(int(value or "0") - 1, 1))
    last = len(value) - 1
    while value[last] == "0":  # borrow: ...d000 -> ...(d-1)999 (value > 10**18, so a non-zero digit exists)
        last -= 1
    lowered = value[:last] + str(int(value[last]) - 1) + "9" * (len(value) - last - 1)
    return lowered.lstrip("0")


def _shift_lines(text: str | None, pattern: re.Pattern[str]) -> str | None:
    """``text`` with each line number that ``pattern`` matches (group 2) made one smaller (at least 1). Total:
    any text, any number of digits."""
    if not text:
        return text
    return pattern.sub(lambda m: m.group(1) + _minus_one(m.group(2)), text)


def cell_result(result: ExecutionResult, replayed: int) -> ExecutionResult:
    """``result`` as the new cell's own: traceback line numbers of the program minus the header line (also in a
    ``SyntaxError``'s "on line N"); unchanged when nothing was replayed. Never raises for any traceback text
    (it is what the program wrote, see :func:`_minus_one`)."""
    if not replayed or not result.traceback:
        return result
    traceback = _shift_lines(result.traceback, _LINE)
    if result.error_type in _SYNTAX_ERRORS:
        traceback = _shift_lines(traceback, _ON_LINE)
    return dataclasses.replace(result, traceback=traceback)


class PythonSessionTool(Tool):
    """Python cells whose state persists within one trajectory (module docstring)."""

    name = "python_session"
    description = SESSION_DESCRIPTION
    compact_note = "Variables and functions from earlier successful calls can be used in later ones."

    def example_arguments(self) -> dict[str, str]:
        """An example call that leaves state behind (``x = 2 + 2`` and shows it)."""
        return {"code": "x = 2 + 2\nprint(x)", "input": ""}

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """One cell: the session's earlier successful cells re-run silently, then this one; a successful cell
        joins the session."""
        cells: list[tuple[str, str]] = context.session.setdefault(CELLS_KEY, [])
        code, stdin = argument_text(arguments, "code"), argument_text(arguments, "input")
        replayed = len(cells)
        request = ExecutionRequest(
            code=session_program(cells, code), stdin=stdin, timeout_s=context.timeout_s, memory_mb=context.memory_mb
        )
        [raw] = await execute_requests([request], context)
        result = cell_result(raw, replayed)
        if result.status == "ok":
            cells.append((code, stdin))
        return ToolResult(
            result=result,
            text=self.render(result, context.config),
            details={"replayed_cells": replayed, "session_cells": len(cells)},
        )

    async def run_batch(self, calls: Sequence[Mapping[str, Any]], context: ToolContext) -> list[ToolResult]:
        """The turn's calls one after the other (each sees the state the previous ones left)."""
        return [await self.run(arguments, context) for arguments in calls]


PYTHON_SESSION = register_tool(PythonSessionTool())
