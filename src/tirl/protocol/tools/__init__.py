"""Tools: what a tool call does, as a registry chosen by name (``ProtocolConfig.tool``).

Covers the :class:`Tool` interface, what a call runs with (:class:`ToolContext`) and what it returns
(:class:`ToolResult`), the registry (:func:`register_tool`, :func:`get_tool`, :func:`tool_names`) and the
built-in tools:

* ``python`` (default, :mod:`tirl.protocol.tools.python`): a self-contained Python program per call on the code
  executor (``LocalSandbox`` or the sandbox service), fresh interpreter every time (the paper's tool).
* ``python_session`` (:mod:`tirl.protocol.tools.python_session`): Python whose variables persist across the calls
  of one trajectory and die with it (Jupyter-style), still one isolated sandbox call per tool call.

What a tool decides: its function's JSON schema (name from ``ProtocolConfig.function_name``, its own description
unless ``ProtocolConfig.function_description`` replaces it, its arguments), the example call of the tools section,
what a call does (:meth:`Tool.run`, and :meth:`Tool.run_batch` for the calls of one turn) and the text the model
reads back (:meth:`Tool.render`). Its outcome is an :class:`~tirl.sandbox.types.ExecutionResult`, whose status gives
the tool-call class that GRPO-RoC, the metrics, the watchdog and ``tirl eval`` count
(:func:`tirl.protocol.types.classify_tool_call`: ``ok``, ``error``, ``timeout``; ``internal`` is tirl's fault and
is counted apart). What it does not decide: how a call is written and parsed (the tool-call format,
:mod:`tirl.protocol.formats`; they check the built-in tools' ``code``/``input`` arguments as they always have, and
a tool with arguments of its own, ``code_arguments = False``, against its schema with :func:`check_arguments`), the
escaping of its output (:mod:`tirl.protocol.escape`, applied by the agent loop to whatever :meth:`Tool.render`
returns), the tool-response tags and the chat segment (:mod:`tirl.protocol.render`), and where the code executor
comes from (:func:`tirl.runtime.build_executor`).

State: a stateful tool keeps what it needs in :attr:`ToolContext.session`, a dict the agent loop creates empty for
each trajectory and drops when the trajectory ends. Nothing is kept anywhere else, so one trajectory's state can
never reach another's (the model is an adversary: each trajectory is a sandbox of its own).

Adding a tool: one module in this package with a :class:`Tool` subclass, registered with :func:`register_tool` at
import, and its module name added to the built-ins of :data:`_TOOLS` below (a tool defined outside tirl calls
:func:`register_tool` itself before any ``ProtocolConfig`` names it). ``protocol.tool`` then selects it in every
RL, SFT and eval config; the prompt, the agent loop (RL and eval) and the viewer use whichever is configured.

Sandbox workers import :mod:`tirl.protocol`, so no module here imports a third-party package; this module imports
neither ``tirl.protocol.config`` nor ``tirl.protocol.response`` at module level (the config validates its tool name
through this registry while it is being imported).
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tirl.protocol.registry import Registry
from tirl.sandbox.types import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, ExecutionResult

if TYPE_CHECKING:
    from tirl.protocol.config import ProtocolConfig
    from tirl.protocol.types import ToolCallClass
    from tirl.sandbox.types import CodeExecutor

DEFAULT_TOOL = "python"


@dataclass
class ToolContext:
    """What the calls of one trajectory run with.

    Attributes:
        executor: the run's code executor (``LocalSandbox`` or ``SandboxClient``); None for a tool that needs none.
        config: the run's protocol (response cap, wording).
        timeout_s: wall-clock deadline of each call, seconds.
        memory_mb: memory limit of each call, MiB.
        session: the trajectory's own state, empty at its first call, dropped with the trajectory; a stateful
            tool keeps its state here and nowhere else.
        trajectory_id: the trajectory's id (for logs; never a key into shared state).
    """

    executor: CodeExecutor | None
    config: ProtocolConfig
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    session: dict[str, Any] = field(default_factory=dict)
    trajectory_id: str = ""


@dataclass
class ToolResult:
    """The outcome of one call.

    Attributes:
        result: what happened, as an execution result (its ``status`` gives the tool-call class; a tool that runs
            no code reports ``ok``, ``error`` or ``timeout`` the same way, ``internal`` for its own failures).
        text: the tool response as the model should read it (:meth:`Tool.render`), before escaping.
        details: facts for the records and the viewer (``python_session``: ``replayed_cells``).
    """

    result: ExecutionResult
    text: str
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def cls(self) -> ToolCallClass:
        """The tool-call class of a decoded call with this result (``ok``, ``error`` or ``timeout``)."""
        if self.result.status == "timeout":
            return "timeout"
        return "ok" if self.result.status == "ok" else "error"


class Tool(ABC):
    """One tool the model can call.

    Attributes:
        name: the registry name (the value of ``ProtocolConfig.tool``).
        description: the function's description in the schema (``ProtocolConfig.function_description`` replaces it
            when set).
        compact_note: a sentence after the example call of the compact tools section (which has no schema, so
            no description), e.g. that state persists; empty for none.
        needs_executor: whether calls run on the code executor (the agent loop then requires one and checks it
            before a run starts).
        code_arguments: the arguments are the Python tools' ``code`` and ``input`` strings, which the tool-call
            formats check as they always have (their ``missing_code``, ``empty_code``, ``bad_argument_type``
            errors and repairs); False: the formats check the decoded arguments against :meth:`parameters` with
            :func:`check_arguments` instead.
    """

    name: str = ""
    description: str = ""
    compact_note: str = ""
    needs_executor: bool = True
    code_arguments: bool = True

    def parameters(self, config: ProtocolConfig) -> dict[str, Any]:
        """The JSON schema of the arguments (``parameters`` of the function schema). Default: the Python tools'
        ``code`` and ``input`` strings, both required, described by ``config.code_description`` and
        ``config.input_description``."""
        return {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": config.code_description},
                "input": {"type": "string", "description": config.input_description},
            },
            "required": ["code", "input"],
        }

    def schema(self, config: ProtocolConfig) -> dict[str, Any]:
        """The tool as an OpenAI-style function schema (what ``apply_chat_template(tools=[...])`` takes):
        ``{"type": "function", "function": {"name", "description", "parameters"}}``."""
        description = config.function_description if config.function_description is not None else self.description
        return {
            "type": "function",
            "function": {
                "name": config.function_name,
                "description": description,
                "parameters": self.parameters(config),
            },
        }

    def example_arguments(self) -> dict[str, str]:
        """The arguments of the example call in the tools section (in the order the format writes them)."""
        return {"code": "print(2 + 2)", "input": ""}

    @abstractmethod
    async def run(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Run one decoded call (``arguments`` as the tool-call format returned them).

        Returns:
            The outcome; never raises for the arguments' content (failures are results, ``internal`` when the
            fault is tirl's).
        """

    async def run_batch(self, calls: Sequence[Mapping[str, Any]], context: ToolContext) -> list[ToolResult]:
        """Run the decoded calls of one turn, results in call order. Default: concurrently (:meth:`run` each); a
        stateful tool runs them one after the other, so each call sees the state the previous ones left."""
        return list(await asyncio.gather(*(self.run(arguments, context) for arguments in calls)))

    def render(self, result: ExecutionResult, config: ProtocolConfig) -> str:
        """The tool-response text of ``result``: :func:`tirl.protocol.response.render_tool_response` (stdout, the
        last expression's value, stderr, the traceback; cut to ``config.tool_response_max_chars``)."""
        from tirl.protocol.response import render_tool_response

        return render_tool_response(result, config)


#: Kinds of :class:`~tirl.protocol.types.ToolCallError` that :func:`check_arguments` returns, in every tool-call
#: format, for a tool with arguments of its own (``Tool.code_arguments`` False).
ARGUMENT_ERROR_KINDS: dict[str, str] = {
    "missing_argument": "a required argument of the tool's schema is absent",
    "bad_argument_type": "an argument's value is not of its schema type",
}

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
}


class ArgumentError(ValueError):
    """An argument object that does not fit a tool's schema (``kind`` in :data:`ARGUMENT_ERROR_KINDS`)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind, self.message = kind, message


def argument_type(schema: Mapping[str, Any], key: str) -> str | None:
    """The JSON type the schema gives argument ``key`` (``"string"``, ``"integer"``, ...), or None."""
    prop = schema.get("properties", {}).get(key)
    kind = prop.get("type") if isinstance(prop, Mapping) else None
    return kind if isinstance(kind, str) else None


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The decoded ``arguments`` of a call checked against a tool's parameter ``schema`` (the formats' check for a
    tool with ``code_arguments`` False): every ``required`` key present, each known key of its JSON type
    (``string``, ``integer``, ``number``, ``boolean``, ``array``, ``object``; other or absent types are not
    checked), unknown keys dropped.

    Returns:
        ``(arguments kept, warnings)``; a dropped key gives the warning ``ignored_argument:<key>``.

    Raises:
        ArgumentError: ``missing_argument`` or ``bad_argument_type``.
    """
    properties = schema.get("properties", {})
    for key in schema.get("required", ()):
        if key not in arguments:
            raise ArgumentError("missing_argument", f'The call has no "{key}" argument.')
    kept: dict[str, Any] = {}
    warnings: list[str] = []
    for key, value in arguments.items():
        if key not in properties:
            warnings.append(f"ignored_argument:{key}")
            continue
        kind = argument_type(schema, key)
        types = _JSON_TYPES.get(kind or "")
        if types is not None and (not isinstance(value, types) or (isinstance(value, bool) and kind != "boolean")):
            raise ArgumentError("bad_argument_type", f'"{key}" must be of type {kind}, not {type(value).__name__}.')
        kept[key] = value
    return kept, warnings


#: The tools by name: the built-ins (registry name -> module that registers it on import, imported on first use)
#: and any registered since.
_TOOLS: Registry[Tool] = Registry(
    "tool",
    "tool",
    {
        "python": "tirl.protocol.tools.python",
        "python_session": "tirl.protocol.tools.python_session",
    },
)


def register_tool(tool: Tool, *, replace: bool = False) -> Tool:
    """Add ``tool`` to the registry under ``tool.name`` and return it.

    Raises:
        ValueError: an empty name, or a name already registered (unless ``replace``).
    """
    return _TOOLS.register(tool, replace=replace)


def unregister_tool(name: str) -> Tool | None:
    """Remove the tool called ``name`` from the registry and return it (None when there was none)."""
    return _TOOLS.unregister(name)


def tool_names() -> tuple[str, ...]:
    """The names a ``ProtocolConfig.tool`` may take: the built-ins and any registered since."""
    return _TOOLS.names()


def get_tool(name: str) -> Tool:
    """The registered tool called ``name`` (a built-in is imported on first use).

    Raises:
        ValueError: no such tool (the message lists the known names).
    """
    return _TOOLS.get(name)


__all__ = [
    "ARGUMENT_ERROR_KINDS",
    "DEFAULT_TOOL",
    "ArgumentError",
    "Tool",
    "ToolContext",
    "ToolResult",
    "argument_type",
    "check_arguments",
    "get_tool",
    "register_tool",
    "tool_names",
    "unregister_tool",
]
