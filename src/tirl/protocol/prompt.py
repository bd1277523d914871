"""The system prompt, the tool JSON schema and the chat messages of a problem.

Covers the *text* the model is given before it starts: :func:`system_prompt` (tirl's own wording of the
report's instructions: reason in ``<reason>``, answer in ``<answer>`` with ``\\boxed{}``, use the Python tool),
:func:`tool_schema` (the configured tool's one function, by default ``execute_python_code_with_standard_io(code,
input)``, in the OpenAI / Hugging Face ``tools`` format; :mod:`tirl.protocol.tools`), :func:`tools_block` (the
tools section written into the system prompt when a chat template cannot render tools itself) and
:func:`prompt_messages`. Turning messages into a template's text and token ids is ``tirl.protocol.render``.

The baseline styles (``prompt_style`` ``cot`` and ``native``, :data:`tirl.protocol.config.BASELINE_STYLES`) use
none of tirl's wording: no system message unless ``config.system_prompt`` is set (the chat template then writes
the model's default one, Qwen2.5's "You are Qwen, created by Alibaba Cloud. ..."), and the user turn followed by
``config.baseline_instruction`` (Qwen's "Please reason step by step, and put your final answer within
\\boxed{}.").

The wording is tirl's (written for this project); function name, descriptions, tags and the whole system prompt
are configurable through :class:`~tirl.protocol.config.ProtocolConfig`.
"""

from __future__ import annotations

import json
from typing import Any

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.formats import get_format
from tirl.protocol.tools import get_tool


def default_system_prompt(config: ProtocolConfig | None = None) -> str:
    """tirl's system prompt for the configured tags and function name (used when ``config.system_prompt`` is None).

    It asks for reasoning inside the reasoning tags, optional Python tool calls while reasoning, and the final
    answer inside the answer tags with the value in ``\\boxed{}``.
    """
    cfg = resolve_config(config)
    ro, rc, ao, ac = cfg.reason_open, cfg.reason_close, cfg.answer_open, cfg.answer_close
    if cfg.prompt_style == "compact":
        return (
            f"Solve the problem. Think step by step inside {ro} {rc}. Use Python for any calculation: the "
            f"output comes back in {cfg.tool_response_open}. Then close {rc} and write the final answer as "
            f"{ao}The answer is \\boxed{{N}}.{ac}"
        )
    return (
        "You are a careful problem solver. Work out the problem step by step inside "
        f"{ro} {rc} tags. While reasoning you can run Python code with the tool "
        f"`{cfg.function_name}` to calculate, check a claim or explore cases; the program's output comes back "
        f"inside {cfg.tool_response_open} {cfg.tool_response_close} tags, and you continue reasoning from it. "
        f"When you are done, close {rc} and give the final answer inside {ao} {ac} tags, "
        f"with the final value in \\boxed{{}}, for example: {ro} reasoning here {rc} "
        f"{ao} The answer is \\boxed{{42}}. {ac}"
    )


def system_prompt(config: ProtocolConfig | None = None) -> str:
    """The system prompt text: ``config.system_prompt`` when set, else :func:`default_system_prompt`."""
    cfg = resolve_config(config)
    return cfg.system_prompt if cfg.system_prompt is not None else default_system_prompt(cfg)


def cot_system_prompt(config: ProtocolConfig | None = None) -> str:
    """The system prompt of the tool-free baseline (``tirl eval --no-use-tools``): reason inside the reasoning
    tags, answer inside the answer tags with the value in ``\\boxed{}``; it never mentions a tool.
    ``config.system_prompt``, when set, is used as is."""
    cfg = resolve_config(config)
    if cfg.system_prompt is not None:
        return cfg.system_prompt
    ro, rc, ao, ac = cfg.reason_open, cfg.reason_close, cfg.answer_open, cfg.answer_close
    return (
        f"You are a careful problem solver. Work out the problem step by step inside {ro} {rc} tags. "
        f"When you are done, close {rc} and give the final answer inside {ao} {ac} tags, with the final value "
        f"in \\boxed{{}}, for example: {ro} reasoning here {rc} {ao} The answer is \\boxed{{42}}. {ac}"
    )


def tool_schema(config: ProtocolConfig | None = None) -> dict[str, Any]:
    """The configured tool (``config.tool``, :mod:`tirl.protocol.tools`) as an OpenAI-style function schema (what
    ``tokenizer.apply_chat_template(tools=[...])`` and OpenAI-compatible servers take).

    Returns:
        ``{"type": "function", "function": {"name", "description", "parameters"}}``: ``config.function_name``,
        ``config.function_description`` or else the tool's own description, and the tool's arguments (for the
        Python tools string parameters ``code`` and ``input``, both required, as in the report's Fig. 3; the
        parser defaults a missing ``input`` to ``""``).
    """
    cfg = resolve_config(config)
    return get_tool(cfg.tool).schema(cfg)


def tools_block(config: ProtocolConfig | None = None) -> str:
    """The tools section appended to the system prompt when the chat template cannot render tools itself
    (the built-in ChatML template, or a template whose own tools section asks for another tool-call format) or
    ``prompt_style="compact"``: the schema as JSON inside ``<tools>`` and how to write a call, worded by the
    tool-call format (``config.tool_call_format``); for the compact style only the example call."""
    cfg = resolve_config(config)
    fmt = get_format(cfg.tool_call_format)
    example = fmt.render_call(cfg.function_name, get_tool(cfg.tool).example_arguments(), cfg)
    if cfg.prompt_style == "compact":
        note = get_tool(cfg.tool).compact_note
        return f"To run Python, write:\n{example}" + (f"\n{note}" if note else "")
    schema = json.dumps(tool_schema(cfg), ensure_ascii=False)
    return (
        "# Tools\n\nYou can call the function described inside <tools></tools>:\n"
        f"<tools>\n{schema}\n</tools>\n\n"
        f"To call it, {fmt.call_instructions(cfg)}, for example:\n{example}"
    )


def user_message(problem: str, config: ProtocolConfig | None = None) -> str:
    """The user turn: ``config.user_template`` with ``{problem}`` replaced by ``problem``; in the baseline styles
    (``cot``, ``native``) followed by a newline and ``config.baseline_instruction`` (when not empty)."""
    cfg = resolve_config(config)
    text = cfg.user_template.replace("{problem}", problem)
    if cfg.baseline and cfg.baseline_instruction:
        text = f"{text}\n{cfg.baseline_instruction}"
    return text


def prompt_messages(
    problem: str, config: ProtocolConfig | None = None, *, include_tools_block: bool = False
) -> list[dict[str, str]]:
    """System and user messages for ``problem`` (``[{"role": "system", ...}, {"role": "user", ...}]``).

    In the baseline styles (``cot``, ``native``) only the user message, unless ``config.system_prompt`` is set
    (the chat template writes the model's default system prompt), and never tirl's tools block (``native``
    passes the tool to the template's ``tools=`` argument).

    Args:
        problem: the problem statement.
        config: wording and tags.
        include_tools_block: append :func:`tools_block` to the system prompt (for templates without tool
            support; a template that renders ``tools`` adds its own block instead). Ignored in the baseline
            styles.
    """
    cfg = resolve_config(config)
    if cfg.baseline:
        user = {"role": "user", "content": user_message(problem, cfg)}
        return [user] if cfg.system_prompt is None else [{"role": "system", "content": cfg.system_prompt}, user]
    system = system_prompt(cfg)
    if include_tools_block:
        system = f"{system}\n\n{tools_block(cfg)}"
    return [{"role": "system", "content": system}, {"role": "user", "content": user_message(problem, cfg)}]
