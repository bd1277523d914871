"""Prompt token ids for the agent loop: with the tool (the protocol's prompt) or the plain chain-of-thought one.

Covers :func:`prompt_ids_for`, which picks ``tirl.protocol.render.render_prompt_ids`` when tools are on and
renders the tool-free baseline prompt otherwise (``tirl eval --no-tools``): the same tags, user turn, template
choice and pre-filled ``<reason>``, but a system prompt that never mentions a tool and no tools block or
``tools`` argument. It does not render tool responses or conversations (``tirl.protocol.render``).
"""

from __future__ import annotations

from typing import Any

from tirl.protocol.config import ProtocolConfig, resolve_config
from tirl.protocol.prompt import user_message
from tirl.protocol.render import CHATML_END, CHATML_START, render_prompt_ids, uses_tokenizer_template


def cot_system_prompt(config: ProtocolConfig | None = None) -> str:
    """The system prompt of the tool-free baseline: reason inside the reasoning tags, answer inside the answer
    tags with the value in ``\\boxed{}``. ``config.system_prompt``, when set, is used as is."""
    cfg = resolve_config(config)
    if cfg.system_prompt is not None:
        return cfg.system_prompt
    ro, rc, ao, ac = cfg.reason_open, cfg.reason_close, cfg.answer_open, cfg.answer_close
    return (
        f"You are a careful problem solver. Work out the problem step by step inside {ro} {rc} tags. "
        f"When you are done, close {rc} and give the final answer inside {ao} {ac} tags, with the final value "
        f"in \\boxed{{}}, for example: {ro} reasoning here {rc} {ao} The answer is \\boxed{{42}}. {ac}"
    )


def render_cot_prompt_text(tokenizer: Any, problem: str, config: ProtocolConfig | None = None) -> str:
    """The tool-free prompt as text: system, user, assistant header and ``config.prefill``."""
    cfg = resolve_config(config)
    messages = [{"role": "system", "content": cot_system_prompt(cfg)},
                {"role": "user", "content": user_message(problem, cfg)}]
    if uses_tokenizer_template(tokenizer, cfg):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + cfg.prefill
    return "".join(f"{CHATML_START}{m['role']}\n{m['content']}{CHATML_END}\n" for m in messages) + (
        f"{CHATML_START}assistant\n{cfg.prefill}"
    )


def prompt_ids_for(tokenizer: Any, problem: str, config: ProtocolConfig | None = None, *,
                   use_tools: bool = True) -> list[int]:
    """Prompt token ids for ``problem``: the protocol's tool prompt, or the tool-free one when ``use_tools``
    is False. Tokenized once, without an extra BOS (the template text is encoded as is)."""
    if use_tools:
        return list(render_prompt_ids(tokenizer, problem, config))
    text = render_cot_prompt_text(tokenizer, problem, config)
    return list(tokenizer.encode(text, add_special_tokens=False))
