"""The ``python`` tool (the default): one self-contained Python program per call, in a fresh interpreter.

The paper's tool (rStar2-Agent section 2.2): ``code`` runs as ``__main__`` in an isolated sandbox process with
``input`` on standard input; the model reads back its standard output, or the error message
(:func:`tirl.protocol.response.render_tool_response`). Nothing is kept between calls. The calls of one turn go to the
code executor as one batch (``CodeExecutor.run_batch``) and run concurrently. An executor that raises, or answers a
different number of results than it was sent, makes every call of the batch an ``internal`` result (shown to the
model as a tool failure, counted as ``tool_internal_errors``), so a trajectory is never lost to the executor.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from tirl.protocol.tools import Tool, ToolContext, ToolResult, register_tool
from tirl.sandbox.types import ExecutionRequest, ExecutionResult

PYTHON_DESCRIPTION = (
    "Run a self-contained Python 3 program and return what it prints to standard output. The text in "
    "`input` is given to the program on standard input. If the program raises an exception, the error "
    "message and a short traceback are returned instead. Each call starts a fresh interpreter: nothing "
    "is kept between calls. numpy, scipy and sympy can be imported."
)


def argument_text(arguments: Mapping[str, Any], key: str) -> str:
    """The string argument ``key`` ("" when absent or not a string)."""
    value = arguments.get(key, "")
    return value if isinstance(value, str) else ""


async def execute_requests(requests: Sequence[ExecutionRequest], context: ToolContext) -> list[ExecutionResult]:
    """Results of ``requests`` on ``context.executor`` as one batch, in order; a raising executor, or one that
    answers a different number of results, gives ``internal`` results for the whole batch (cancellation
    propagates)."""
    if not requests:
        return []
    if context.executor is None:
        return [ExecutionResult.internal_error("no code executor", request_id=r.request_id) for r in requests]
    results: list[ExecutionResult] = []
    message = ""
    try:
        results = list(await context.executor.run_batch(list(requests)))
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - executors should not raise; never lose the trajectory
        message = f"executor raised {type(exc).__name__}: {exc}"
    if len(results) != len(requests):
        message = message or f"executor answered {len(results)} of {len(requests)} calls"
        results = [ExecutionResult.internal_error(message, request_id=r.request_id) for r in requests]
    return results


class PythonTool(Tool):
    """A fresh interpreter per call, ``code`` and ``input`` arguments (module docstring)."""

    name = "python"
    description = PYTHON_DESCRIPTION

    def request(self, arguments: Mapping[str, Any], context: ToolContext) -> ExecutionRequest:
        """The sandbox request of one call: ``code``, ``input`` on stdin, the context's time and memory limits."""
        return ExecutionRequest(
            code=argument_text(arguments, "code"),
            stdin=argument_text(arguments, "input"),
            timeout_s=context.timeout_s,
            memory_mb=context.memory_mb,
        )

    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """One call (a batch of one)."""
        return (await self.run_batch([arguments], context))[0]

    async def run_batch(self, calls: Sequence[Mapping[str, Any]], context: ToolContext) -> list[ToolResult]:
        """The turn's calls as one executor batch (:func:`execute_requests`), run concurrently, in order."""
        results = await execute_requests([self.request(a, context) for a in calls], context)
        return [ToolResult(result=r, text=self.render(r, context.config)) for r in results]


PYTHON = register_tool(PythonTool())
