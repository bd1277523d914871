"""Conversations as chat-template text and token ids: the prompt, the tool-response segment, SFT rendering.

Covers turning a problem and a conversation into exactly the text and token ids the model sees:
:func:`render_prompt_ids` (system + user + generation prompt + prefill; with or without the tool),
:func:`tool_response_segment_ids` (what is appended after the model's end-of-turn token when it called the
tool), :func:`stop_token_ids`, and :func:`render_conversation_ids` (a whole conversation as ids plus a loss
mask, for SFT). It does not generate,
parse tool calls or run code. It works with any Hugging Face-style tokenizer object (``encode``,
``apply_chat_template``, ``chat_template``, ``eos_token``, ``eos_token_id``) and never
imports ``tirl.models``.

Templates (``config.chat_template``):

* ``"auto"`` (default): the tokenizer's own chat template when it renders ``tools`` (Qwen2.5 does: its
  Hermes-style tools block, ``<tool_response>`` inside a user turn), else the built-in ChatML template
  (``<|im_start|>role\\n...<|im_end|>\\n``) with tirl's tools block in the system prompt (SmolLM2).
* ``"tokenizer"`` / ``"chatml"``: force one. A forced tokenizer template that ignores ``tools`` gets tirl's
  tools block in its system prompt.

The baseline styles (``prompt_style`` ``cot`` and ``native``) render with the model's own template and none of
tirl's format: ``cot`` uses the tokenizer's template whenever it has one (any template, with or without tool
support; the built-in ChatML only when the tokenizer has none or ``chat_template="chatml"``) and passes no tools;
``native`` needs a template that renders tools in the configured call format (:func:`native_tools`; else a
``ValueError``), passes the tool through its ``tools=`` argument and answers calls with ``tool`` messages. Neither
pre-fills anything (:attr:`~tirl.protocol.config.ProtocolConfig.prompt_prefill`).

Token-in/token-out. The rollout never re-tokenizes a history: the prompt is tokenized once, the model's tokens
are kept as generated, and each tool-response segment is tokenized on its own and appended. Consequences,
by design:

* The segment is the template's text from the end of the model's end-of-turn token to the next assistant
  header plus ``config.prefill``: ``\\n<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>\\n
  <|im_start|>assistant\\n<reason>`` for ChatML. It is derived from the tokenizer's template itself by
  rendering a small conversation with and without the tool messages (so any template that renders ``tool``
  messages works), or written directly for the built-in ChatML.
* ``config.keep_newline_after_eot=True`` (default) keeps the template's ``\\n`` after ``<|im_end|>``, so that
  prompt ids + model turn ids + segment ids + ... equal the tokenization of the chat template's rendering of
  the whole conversation whenever token boundaries fall at the joins (they always do at special tokens such
  as ``<|im_end|>``). ``False`` reproduces the public release, which has no newline there.
* Where a join is inside ordinary text, i.e. between the prefill ``<reason>`` and the model's first characters,
  a BPE tokenizer may merge across it when the whole text is tokenized at once (Qwen2's pre-tokenizer turns
  ``>\\n`` into one piece). The ids used in RL are the split ones; :func:`render_conversation_ids` renders SFT
  data the same split way, so SFT and RL see the same token streams. The full-text rendering
  (:func:`render_conversation_text`) is for reading and for chat APIs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.escape import WITHHELD_TEXT, safe_tool_text, structural_ids, tokenizer_cache
from tirl.protocol.formats import get_format
from tirl.protocol.prompt import cot_system_prompt, prompt_messages, tool_schema, user_message

CHATML_START = "<|im_start|>"
CHATML_END = "<|im_end|>"
END_OF_TURN_CANDIDATES = ("<|im_end|>", "<|eot_id|>", "<end_of_turn>", "<|end|>")


@dataclass
class ConversationTurn:
    """One assistant turn of a conversation to render.

    Attributes:
        text: what the model generated in the turn, without the pre-filled prefix and without the end-of-turn
            token (e.g. ``"Let me compute.\\n<tool_call>...</tool_call>"``).
        tool_responses: texts placed inside ``<tool_response>`` after this turn, one per call, in order
            (already rendered, e.g. by ``tirl.protocol.response``); empty for the final turn.
    """

    text: str
    tool_responses: list[str] = field(default_factory=list)


@dataclass
class RenderedConversation:
    """A conversation as token ids.

    Attributes:
        prompt_ids: system + user + generation prompt + prefill.
        response_ids: model turns, each followed by its end-of-turn token, and the injected segments.
        loss_mask: ``len(response_ids)`` entries: 1 on model tokens (the end-of-turn tokens included), 0 on
            injected tool-response segments (their headers and prefills included).
    """

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]

    @property
    def input_ids(self) -> list[int]:
        """``prompt_ids + response_ids``."""
        return self.prompt_ids + self.response_ids

    @property
    def labels_mask(self) -> list[int]:
        """Loss mask over :attr:`input_ids` (0 over the prompt)."""
        return [0] * len(self.prompt_ids) + self.loss_mask


def _template_string(tokenizer: Any) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the default one, else any
        template = template.get("default") or next(iter(template.values()), None)
    return template if isinstance(template, str) else ""


def template_supports_tools(tokenizer: Any) -> bool:
    """True when the tokenizer's chat template renders a ``tools`` argument and ``tool`` messages."""
    return "tools" in _template_string(tokenizer)


def native_tools(tokenizer: Any, config: ProtocolConfig | None = None) -> bool:
    """Whether the tool is declared through the tokenizer's chat template (its own tools block and ``tool``
    messages): the template renders tools, writes calls in ``config.tool_call_format``
    (:meth:`~tirl.protocol.formats.ToolCallFormat.template_writes_calls`) and ``config.prompt_style`` is
    ``"full"`` or ``"native"``. Otherwise tirl's tools block goes into the system prompt and tool responses are
    user messages (the same text for Qwen2.5)."""
    cfg = resolve_config(config)
    return (
        template_supports_tools(tokenizer)
        and cfg.prompt_style in ("full", "native")
        and get_format(cfg.tool_call_format).template_writes_calls(_template_string(tokenizer))
    )


def uses_tokenizer_template(tokenizer: Any, config: ProtocolConfig | None = None) -> bool:
    """Whether rendering uses the tokenizer's own chat template (else the built-in ChatML), per
    ``config.chat_template``.

    ``prompt_style="cot"`` takes the tokenizer's template whenever it has one; ``"native"`` always the
    tokenizer's (see :func:`check_native`).

    Raises:
        ValueError: ``chat_template="tokenizer"`` but the tokenizer has no chat template; ``prompt_style="native"``
            without a template that renders the tool (:func:`check_native`).
    """
    cfg = resolve_config(config)
    if cfg.prompt_style == "native":
        check_native(tokenizer, cfg)
        return True
    if cfg.chat_template == "chatml":
        return False
    if cfg.chat_template == "tokenizer":
        if not _template_string(tokenizer):
            raise ValueError("config.chat_template='tokenizer' but the tokenizer has no chat template")
        return True
    if cfg.prompt_style == "cot":
        return bool(_template_string(tokenizer))
    return template_supports_tools(tokenizer)


def check_native(tokenizer: Any, config: ProtocolConfig | None = None) -> None:
    """Check that ``prompt_style="native"`` can be rendered for ``tokenizer``: its own chat template renders a
    ``tools`` argument and writes calls in ``config.tool_call_format``, and ``chat_template`` is not ``"chatml"``.

    Raises:
        ValueError: it cannot (the message says why and what to use instead).
    """
    cfg = resolve_config(config)
    if cfg.chat_template == "chatml":
        raise ValueError("prompt_style='native' renders with the model's own chat template, not chat_template='chatml'")
    if not native_tools(tokenizer, cfg):
        raise ValueError(
            "prompt_style='native' needs a chat template that renders tools and writes "
            f"{cfg.tool_call_format!r} calls; this tokenizer's does not (use prompt_style 'full' or 'compact' for "
            "tirl's tools block, or 'cot' for no tool)"
        )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer.encode(text, add_special_tokens=False))


def _single_token_id(tokenizer: Any, token: str) -> int | None:
    """The id of ``token`` when it encodes to exactly one token, else None (cheaper than ``get_vocab``)."""
    ids = _encode(tokenizer, token)
    return int(ids[0]) if len(ids) == 1 else None


def end_of_turn_text(tokenizer: Any, config: ProtocolConfig | None = None) -> str:
    """The string that ends an assistant turn in the template used: ``<|im_end|>`` for the built-in ChatML;
    for a tokenizer template, the first of :data:`END_OF_TURN_CANDIDATES` that appears in the template and
    encodes to a single token, else the tokenizer's ``eos_token``.

    Raises:
        ValueError: a tokenizer template with no known end-of-turn token and no ``eos_token``.
    """
    if not uses_tokenizer_template(tokenizer, config):
        return CHATML_END
    template = _template_string(tokenizer)
    for token in END_OF_TURN_CANDIDATES:
        if token in template and _single_token_id(tokenizer, token) is not None:
            return token
    eos = getattr(tokenizer, "eos_token", None)
    if not eos:
        raise ValueError("the chat template has no known end-of-turn token and the tokenizer has no eos_token")
    return eos


def stop_token_ids(tokenizer: Any, config: ProtocolConfig | None = None) -> list[int]:
    """Token ids that end generation of an assistant turn: the end-of-turn token first (``<|im_end|>``), then
    the tokenizer's ``eos_token_id`` when different. An end-of-turn string that does not encode to a single
    token is left out (the engine then stops on eos only)."""
    ids: list[int] = []
    eot_id = _single_token_id(tokenizer, end_of_turn_text(tokenizer, config))
    if eot_id is not None:
        ids.append(eot_id)
    eos_id = getattr(tokenizer, "eos_token_id", None)
    if isinstance(eos_id, int) and eos_id not in ids:
        ids.append(eos_id)
    return ids


def _chatml(role: str, content: str) -> str:
    return f"{CHATML_START}{role}\n{content}{CHATML_END}\n"


def render_prompt_text(
    tokenizer: Any, problem: str, config: ProtocolConfig | None = None, *, use_tools: bool = True
) -> str:
    """The prompt as text: system (with the tools), user problem, assistant header, ``config.prefill``.

    With ``use_tools=False`` in tirl's styles (``full``, ``compact``), the tagged tool-free prompt (``tirl eval
    --no-use-tools``: a model trained in tirl's format, without its tool): the same tags, user turn, template
    choice and pre-filled ``<reason>``, but :func:`tirl.protocol.prompt.cot_system_prompt`, no tools block and no
    ``tools`` argument.

    In the baseline styles (see the module docstring): the model's own template, the messages of
    :func:`tirl.protocol.prompt.prompt_messages`, no prefill; the tool (``native`` with ``use_tools``) only
    through the template's ``tools=`` argument. ``native`` with ``use_tools=False`` is ``cot``'s prompt.

    Raises:
        ValueError: ``native`` with ``use_tools`` for a tokenizer whose template cannot declare the tool.
    """
    cfg = resolve_config(config)
    if cfg.baseline:
        tools = [tool_schema(cfg)] if use_tools and cfg.declares_tool else None
        if tools is None and cfg.prompt_style == "native":
            cfg = dataclasses.replace(cfg, prompt_style="cot")  # no tool: the model's template as for cot
        messages = prompt_messages(problem, cfg)
        if uses_tokenizer_template(tokenizer, cfg):
            return tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
        return "".join(_chatml(m["role"], m["content"]) for m in messages) + f"{CHATML_START}assistant\n"
    if not use_tools:
        messages = [
            {"role": "system", "content": cot_system_prompt(cfg)},
            {"role": "user", "content": user_message(problem, cfg)},
        ]
        if uses_tokenizer_template(tokenizer, cfg):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + cfg.prefill
        return "".join(_chatml(m["role"], m["content"]) for m in messages) + f"{CHATML_START}assistant\n{cfg.prefill}"
    if uses_tokenizer_template(tokenizer, cfg):
        native = native_tools(tokenizer, cfg)
        messages = prompt_messages(problem, cfg, include_tools_block=not native)
        text = tokenizer.apply_chat_template(
            messages, tools=[tool_schema(cfg)] if native else None, tokenize=False, add_generation_prompt=True
        )
        return text + cfg.prefill
    system, user = prompt_messages(problem, cfg, include_tools_block=True)
    return (
        _chatml("system", system["content"])
        + _chatml("user", user["content"])
        + f"{CHATML_START}assistant\n{cfg.prefill}"
    )


def render_prompt_ids(
    tokenizer: Any, problem: str, config: ProtocolConfig | None = None, *, use_tools: bool = True
) -> list[int]:
    """Token ids of :func:`render_prompt_text` (no extra BOS: the template text is tokenized as is)."""
    return _encode(tokenizer, render_prompt_text(tokenizer, problem, config, use_tools=use_tools))


_DUMMY = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"}]


def tool_response_segment_text(
    tokenizer: Any, response_texts: Sequence[str], config: ProtocolConfig | None = None
) -> str:
    """The text appended after the model's end-of-turn token when it called the tool.

    Args:
        tokenizer: the policy's tokenizer.
        response_texts: one rendered tool response per call, in call order (at least one).
        config: tags, ``prefill``, ``keep_newline_after_eot``, ``chat_template``.

    Returns:
        ``[\\n]<|im_start|>user\\n<tool_response>\\n{r1}\\n</tool_response>...<|im_end|>\\n<|im_start|>assistant\\n``
        + prefill for ChatML; the equivalent text of the tokenizer's template otherwise.

    Raises:
        ValueError: no response texts, or a tokenizer template whose rendering with tool messages does not
            extend its rendering without them (the segment cannot be derived).
    """
    cfg = resolve_config(config)
    if not response_texts:
        raise ValueError("a tool-response segment needs at least one response text")
    if uses_tokenizer_template(tokenizer, cfg):
        native = native_tools(tokenizer, cfg)
        tools = [tool_schema(cfg)] if native else None
        before = tokenizer.apply_chat_template(_DUMMY, tools=tools, tokenize=False, add_generation_prompt=False)
        after = tokenizer.apply_chat_template(
            _DUMMY + tool_messages(response_texts, cfg, native=native, tokenizer=tokenizer),
            tools=tools,
            tokenize=False,
            add_generation_prompt=True,
        )
        if not after.startswith(before):
            raise ValueError("the chat template does not render tool messages as an extension of the history")
        eot = end_of_turn_text(tokenizer, cfg)
        cut = before.rfind(eot)
        joint = before[cut + len(eot) :] if cut >= 0 else ""
        body = after[len(before) :]
    else:
        joint = "\n"
        [message] = tool_messages(response_texts, cfg, native=False, tokenizer=tokenizer)
        body = _chatml("user", message["content"]) + f"{CHATML_START}assistant\n"
    return (joint if cfg.keep_newline_after_eot else "") + body + cfg.prompt_prefill


def tool_response_segment_ids(
    tokenizer: Any, response_texts: Sequence[str], config: ProtocolConfig | None = None
) -> list[int]:
    """Token ids of :func:`tool_response_segment_text`, tokenized on their own (loss mask 0 in RL).

    Raises:
        ValueError: as :func:`tool_response_segment_text`.
    """
    ids = _encode(tokenizer, tool_response_segment_text(tokenizer, response_texts, config))
    structural = structural_ids(tokenizer)
    if structural:
        # Tool output is data (tirl.protocol.escape): the segment holds exactly the structural ids of the
        # template's own text. Should a join with the template ever make one (never seen with the supported
        # templates), the outputs are withheld rather than let a program write the policy's context.
        skeleton = _skeleton_structure(tokenizer, len(response_texts), config)
        if [i for i in ids if i in structural] != skeleton:
            ids = _encode(
                tokenizer, tool_response_segment_text(tokenizer, [WITHHELD_TEXT] * len(response_texts), config)
            )
    return ids


def _skeleton_structure(tokenizer: Any, count: int, config: ProtocolConfig | None) -> list[int]:
    """The structural ids (in order) of a segment of ``count`` plain responses: the template's own."""
    cache = tokenizer_cache(tokenizer)
    key = ("segment_structure", resolve_config(config), count)
    if key not in cache:
        structural = structural_ids(tokenizer)
        ids = _encode(tokenizer, tool_response_segment_text(tokenizer, ["0"] * count, config))
        cache[key] = [i for i in ids if i in structural]
    return cache[key]


def tool_messages(
    response_texts: Sequence[str], config: ProtocolConfig | None = None, *, native: bool = True, tokenizer: Any = None
) -> list[dict[str, str]]:
    """Chat messages carrying tool responses: one ``tool`` message per response for templates that render
    them (``native``; the template adds the ``<tool_response>`` tags), else a single ``user`` message holding
    every response inside the tags, laid out as Qwen2.5's template lays them out.

    Each response is escaped first (:func:`tirl.protocol.escape.safe_tool_text`: no tag of the protocol, no
    chat-template token and no special or tag-like added token of ``tokenizer`` survives in it), so that what a
    program prints is data, never structure."""
    cfg = resolve_config(config)
    response_texts = [safe_tool_text(r, tokenizer, cfg) for r in response_texts]
    if native:
        return [{"role": "tool", "content": r} for r in response_texts]
    content = "\n".join(f"{cfg.tool_response_open}\n{r}\n{cfg.tool_response_close}" for r in response_texts)
    return [{"role": "user", "content": content}]


def conversation_messages(
    problem: str, turns: Sequence[ConversationTurn], config: ProtocolConfig | None = None, *, native_tools: bool = True
) -> list[dict[str, str]]:
    """The conversation as chat messages (``system``, ``user``, then ``assistant`` and tool-response messages)
    for chat APIs and ``apply_chat_template``. Assistant contents start with ``config.prompt_prefill``. With
    ``native_tools=False`` the tools block goes into the system prompt and tool responses become user
    messages (see :func:`tool_messages`)."""
    cfg = resolve_config(config)
    messages = prompt_messages(problem, cfg, include_tools_block=not native_tools)
    for turn in turns:
        messages.append({"role": "assistant", "content": cfg.prompt_prefill + turn.text})
        if turn.tool_responses:
            messages.extend(tool_messages(turn.tool_responses, cfg, native=native_tools))
    return messages


def render_conversation_text(
    tokenizer: Any, problem: str, turns: Sequence[ConversationTurn], config: ProtocolConfig | None = None
) -> str:
    """The whole conversation as text, assembled from the same pieces as the rollout: prompt text, then per
    turn its text, the end-of-turn token and (when it has tool responses) the segment text. Ends with the
    last turn's end-of-turn token."""
    cfg = resolve_config(config)
    eot = end_of_turn_text(tokenizer, cfg)
    parts = [render_prompt_text(tokenizer, problem, cfg)]
    for turn in turns:
        parts.append(turn.text + eot)
        if turn.tool_responses:
            parts.append(tool_response_segment_text(tokenizer, turn.tool_responses, cfg))
    return "".join(parts)


def render_conversation_ids(
    tokenizer: Any, problem: str, turns: Sequence[ConversationTurn], config: ProtocolConfig | None = None
) -> RenderedConversation:
    """A whole conversation as token ids with its loss mask, built exactly as the rollout builds it (SFT data).

    Each turn's text is tokenized on its own and followed by the end-of-turn token (loss mask 1); each
    tool-response segment is tokenized on its own (loss mask 0). See the module docstring for why the pieces
    are not tokenized as one text.

    Args:
        tokenizer: the policy's tokenizer.
        problem: the problem statement.
        turns: the assistant turns in order; every turn but the last normally has tool responses.
        config: protocol configuration.

    Returns:
        :class:`RenderedConversation` with ``len(loss_mask) == len(response_ids)``.
    """
    cfg = resolve_config(config)
    eot_ids = _encode(tokenizer, end_of_turn_text(tokenizer, cfg))
    prompt_ids = render_prompt_ids(tokenizer, problem, cfg)
    response_ids: list[int] = []
    loss_mask: list[int] = []
    for turn in turns:
        model_ids = _encode(tokenizer, turn.text) + eot_ids
        response_ids += model_ids
        loss_mask += [1] * len(model_ids)
        if turn.tool_responses:
            segment = tool_response_segment_ids(tokenizer, turn.tool_responses, cfg)
            response_ids += segment
            loss_mask += [0] * len(segment)
    return RenderedConversation(prompt_ids=prompt_ids, response_ids=response_ids, loss_mask=loss_mask)
