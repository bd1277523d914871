"""Configuration of the conversation protocol: tags, function name, wording, parsing and rendering policies.

Covers the one dataclass, :class:`ProtocolConfig`, that every protocol function takes (``config=None`` means
the defaults below). It does not hold engine, sandbox or training settings.

Defaults and why (rStar2-Agent, arXiv 2508.20722, section 2.2 and Fig. 2-3; the public release where noted):

* ``function_name = "execute_python_code_with_standard_io"``: the paper's and the published checkpoint's name
  (the release's config says ``python_code_with_standard_io``; add it to ``function_aliases`` to accept both).
* ``prefill = "<reason>"``: the generation prompt ends with the opening reasoning tag, as in the release; the
  prefill is injected (loss mask 0), never generated.
* ``multi_call = "all"``: every ``<tool_call>`` block of a turn is returned, in order (the paper's reading; the
  release executes only the first: ``multi_call="first"``).
* ``lenient = False``: strict JSON; lenient repairs are opt-in and marked on the call.
* ``ignore_think_drafts = True``: tool calls inside a closed ``<think>...</think>`` block are drafts.
* ``tool_response_max_chars = 1024``: long tool output is cut to its head and tail (the release's verl default
  is 256 characters, which often cuts a traceback in half; 1024 keeps most tracebacks whole while 10 calls
  still fit an 8K-token budget).
* ``answer_fallback = "last_box_final_turn"``: with no ``<answer>`` block, the last box of the final assistant
  turn is the answer (``"none"`` makes a missing ``<answer>`` block mean no answer).
* ``tool = "python"``: the paper's tool, a fresh Python interpreter per call; ``"python_session"`` keeps a
  trajectory's variables across its calls (Jupyter-style), from the registry :mod:`tirl.protocol.tools`.
* ``tool_call_format = "hermes"``: JSON inside ``<tool_call>``, what Qwen2.5 and the release write; ``"qwen3_xml"``
  is the ``<function=NAME><parameter=KEY>`` format of Qwen3-Coder and Qwen3.5 (:mod:`tirl.protocol.formats`).
* ``prompt_style = "full"``: tirl's own format (``<reason>``/``<answer>`` tags, the ``<reason>`` prefill, the tool
  declared with its schema); ``"compact"`` is the same with a short prompt. The field's baselines are two more
  styles (:data:`BASELINE_STYLES`): ``"cot"`` (the model's own chat template and default system prompt, the user
  turn followed by Qwen's sentence :data:`COT_INSTRUCTION`, no tags, no prefill, no tool; the answer is the last
  box) and ``"native"`` (the same with the tool passed to the template's ``tools=`` argument, so the model's own
  tool-calling format, Hermes ``<tool_call>`` for Qwen2.5, and tool responses in the template's ``tool`` role).
* ``keep_newline_after_eot = True``: the tool-response segment starts with the chat template's newline after
  the model's end-of-turn token, so token streams equal the chat template's rendering (the release has no
  newline there: ``False`` reproduces it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tirl.protocol.formats import format_names
from tirl.protocol.tools import tool_names

DEFAULT_FUNCTION_NAME = "execute_python_code_with_standard_io"
RELEASE_FUNCTION_NAME = "python_code_with_standard_io"

MultiCallPolicy = Literal["first", "all"]
AnswerFallback = Literal["last_box_final_turn", "none"]
ChatTemplateChoice = Literal["auto", "tokenizer", "chatml"]
PromptStyle = Literal["full", "compact", "cot", "native"]
PROMPT_STYLES: tuple[str, ...] = ("full", "compact", "cot", "native")
BASELINE_STYLES: tuple[str, ...] = ("cot", "native")
"""The prompt styles of the field's baselines: the model's own chat template, no tags, no prefill, the last box."""

COT_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
"""Qwen2.5-Math's chain-of-thought instruction (its evaluation harness's ``qwen25-math-cot`` prompt), the sentence
the baseline styles append to the user turn."""


@dataclass(frozen=True)
class ProtocolConfig:
    """Every knob of the protocol. All fields have defaults; see the module docstring for the choices.

    Frozen: derive variants with ``dataclasses.replace(config, lenient=True)``.

    Attributes:
        tool: what a call does: a name in the registry :mod:`tirl.protocol.tools` (``"python"``: a fresh
            interpreter per call; ``"python_session"``: variables persist across the calls of one trajectory). It
            decides the schema's description and arguments, the example call, execution and the tool response.
        function_name: the one tool's name, as declared in the schema and expected in calls.
        function_aliases: further names accepted as the same tool (e.g. the release's name).
        function_description: the tool's description in the schema; None uses the tool's own
            (:attr:`tirl.protocol.tools.Tool.description`).
        code_description: description of the ``code`` argument.
        input_description: description of the ``input`` argument (stdin).
        system_prompt: the system prompt text; None uses :func:`tirl.protocol.prompt.default_system_prompt`.
        user_template: the user turn; ``{problem}`` is replaced by the problem text (str.replace, so braces
            elsewhere are literal).
        reason_open, reason_close: reasoning tags.
        answer_open, answer_close: final-answer tags.
        tool_call_open, tool_call_close: tool-call tags.
        tool_call_format: how a call is written between the tool-call tags: a name in the registry
            :mod:`tirl.protocol.formats` (``"hermes"``: JSON; ``"qwen3_xml"``: ``<function=NAME>`` with
            ``<parameter=KEY>`` blocks). It decides parsing, :func:`~tirl.protocol.parse.render_tool_call`, the
            tools section's wording and the parse-error hint; tags, drafts and ``multi_call`` stay as set here.
        tool_response_open, tool_response_close: tool-response tags.
        think_open, think_close: draft-block tags whose tool calls are ignored when ``ignore_think_drafts``.
        prefill: text appended after the assistant header of every generation prompt (loss mask 0).
        multi_call: ``"all"`` returns every call of a turn; ``"first"`` only the first block (call or error).
        lenient: repair common slips (see ``tirl.protocol.parse``), marking the call ``repaired``.
        ignore_think_drafts: ignore calls inside closed think blocks.
        tool_response_max_chars: cap on one rendered tool response (characters); longer text keeps head and
            tail around a marker. 0 or negative disables the cap.
        no_output_text: the tool response when the code ran fine and printed nothing.
        answer_fallback: what :func:`extract_answer` does for text without an ``<answer>`` block.
        box_commands: LaTeX commands whose argument is a boxed answer (without the backslash).
        chat_template: ``"auto"`` uses the tokenizer's chat template when it declares tool support, else the
            built-in ChatML; ``"tokenizer"`` forces the tokenizer's; ``"chatml"`` forces the built-in one.
        keep_newline_after_eot: keep the template's text between the model's end-of-turn token and the next
            header in the tool-response segment.
        prompt_style: ``"full"`` declares the tool with its JSON schema (through the chat template's own tools
            block when it has one: 448 prompt tokens for Qwen2.5); ``"compact"`` writes a short system prompt
            with one example call and no schema (about 110 tokens), for CPU recipes where prefill dominates a
            step. The call format, tags and tool-response turns are the same in both. ``"cot"`` and ``"native"`` are
            the field's baselines (:data:`BASELINE_STYLES`): the model's own chat template (its default system
            prompt unless ``system_prompt`` is set), the user turn followed by ``baseline_instruction``, no
            reasoning or answer tags and no prefill (``prefill`` is ignored), the answer the last box of the
            model's text (``<answer>`` tags are not looked for); ``"cot"`` declares no tool (a run never
            executes one), ``"native"`` passes the tool to the template's ``tools=`` argument and needs a
            template that renders tools in ``tool_call_format`` (Qwen2.5's Hermes block).
        baseline_instruction: the sentence appended, after a newline, to the user turn in the baseline styles
            (default: Qwen's :data:`COT_INSTRUCTION`); empty appends nothing.
    """

    tool: str = "python"
    function_name: str = DEFAULT_FUNCTION_NAME
    function_aliases: tuple[str, ...] = ()
    function_description: str | None = None
    code_description: str = (
        "The Python code to run. Use print() to show results; the program can read standard input with input()."
    )
    input_description: str = "Text passed to the program on standard input (may be empty)."
    system_prompt: str | None = None
    user_template: str = "{problem}"
    reason_open: str = "<reason>"
    reason_close: str = "</reason>"
    answer_open: str = "<answer>"
    answer_close: str = "</answer>"
    tool_call_open: str = "<tool_call>"
    tool_call_close: str = "</tool_call>"
    tool_call_format: str = "hermes"
    tool_response_open: str = "<tool_response>"
    tool_response_close: str = "</tool_response>"
    think_open: str = "<think>"
    think_close: str = "</think>"
    prefill: str = "<reason>"
    multi_call: MultiCallPolicy = "all"
    lenient: bool = False
    ignore_think_drafts: bool = True
    tool_response_max_chars: int = 1024
    no_output_text: str = "(the code ran without error and printed nothing)"
    answer_fallback: AnswerFallback = "last_box_final_turn"
    box_commands: tuple[str, ...] = ("boxed", "fbox")
    chat_template: ChatTemplateChoice = "auto"
    keep_newline_after_eot: bool = True
    prompt_style: PromptStyle = "full"
    baseline_instruction: str = COT_INSTRUCTION

    def __post_init__(self) -> None:
        if self.multi_call not in ("first", "all"):
            raise ValueError(f"multi_call must be 'first' or 'all', got {self.multi_call!r}")
        if self.answer_fallback not in ("last_box_final_turn", "none"):
            raise ValueError(f"answer_fallback must be 'last_box_final_turn' or 'none', got {self.answer_fallback!r}")
        if self.chat_template not in ("auto", "tokenizer", "chatml"):
            raise ValueError(f"chat_template must be 'auto', 'tokenizer' or 'chatml', got {self.chat_template!r}")
        if self.prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style must be one of {', '.join(PROMPT_STYLES)}, got {self.prompt_style!r}")
        if not self.function_name:
            raise ValueError("function_name must not be empty")
        if self.tool_call_format not in format_names():
            raise ValueError(
                f"tool_call_format must be one of {', '.join(format_names())}, got {self.tool_call_format!r}"
            )
        if self.tool not in tool_names():
            raise ValueError(f"tool must be one of {', '.join(tool_names())}, got {self.tool!r}")
        for name in ("tool_call_open", "tool_call_close", "answer_open", "answer_close"):
            if not getattr(self, name):
                raise ValueError(f"{name} must not be empty")

    @property
    def accepted_function_names(self) -> tuple[str, ...]:
        """``function_name`` followed by ``function_aliases``."""
        return (self.function_name, *self.function_aliases)

    @property
    def baseline(self) -> bool:
        """True for the field's baseline styles (``cot``, ``native``): no tags, no prefill, the last box."""
        return self.prompt_style in BASELINE_STYLES

    @property
    def declares_tool(self) -> bool:
        """False for ``prompt_style="cot"``, whose prompt has no tool (a run with it never executes one)."""
        return self.prompt_style != "cot"

    @property
    def prompt_prefill(self) -> str:
        """The text pre-filled after every assistant header: ``prefill``, or nothing in the baseline styles."""
        return "" if self.baseline else self.prefill

    @property
    def think_drafts_active(self) -> bool:
        """True when calls in think blocks are ignored (off when the think tag is the reasoning tag)."""
        return bool(
            self.ignore_think_drafts and self.think_open and self.think_close and self.think_open != self.reason_open
        )


DEFAULT_CONFIG = ProtocolConfig()


def resolve_config(config: ProtocolConfig | None) -> ProtocolConfig:
    """``config``, or the shared default configuration when it is None."""
    return DEFAULT_CONFIG if config is None else config
