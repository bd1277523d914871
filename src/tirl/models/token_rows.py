"""Give never-trained special tokens usable embedding rows before fine-tuning.

Some base models ship the protocol's tag tokens as vocabulary entries whose rows were never trained. In
Qwen2.5-Coder-0.5B-Instruct the input and output rows of ``<tool_call>`` and ``</tool_call>`` are identical to
each other and to other unused special tokens (cosine 1.0), and close (0.93) to ``<|im_start|>``, which has the
larger norm. No adapter on the hidden layers can then make the model open a call with one tag and close it with
the other: measured, after 28 LoRA SFT steps the model wrote ``<|im_start|>`` for both tags. Training those rows
directly does not fit TRL 1.16's SFT trainer (its fused LM head multiplies by ``lm_head.weight`` itself, so a peft
wrapper on the head is bypassed), so tirl re-initialises them instead: each row becomes the mean of the rows of
the ordinary tokens that spell the tag (``<``, ``tool``, ``_call``, ``>``), on the input embedding and, when it is
not tied to it, on the LM head. This is the usual initialisation of new tokens from their sub-word pieces; the
rows are then distinct, their logits are on the scale of ordinary tokens, and fine-tuning starts from a model
that reads ``<tool_call>`` roughly as the text it stands for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def spelling_ids(tokenizer: Any, token: str) -> list[int]:
    """Ids of the ordinary tokens that spell ``token`` when it is not matched as one vocabulary entry.

    Uses the fast tokenizer's pre-tokenizer and model directly, bypassing the added-token table.

    Raises:
        ValueError: the tokenizer is not a fast (``tokenizers``-backed) one, or ``token`` spells to nothing.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("re-initialising token rows needs a fast tokenizer (tokenizers backend)")
    pieces = [piece for piece, _ in backend.pre_tokenizer.pre_tokenize_str(token)] if backend.pre_tokenizer else [token]
    ids = [t.id for piece in pieces for t in backend.model.tokenize(piece)]
    if not ids:
        raise ValueError(f"{token!r} spells to no ordinary tokens")
    return ids


def vocab_ids(tokenizer: Any, tokens: Sequence[str], what: str) -> list[int]:
    """Vocabulary ids of ``tokens`` (each must be one entry).

    Raises:
        ValueError: naming ``what`` (the config key) and the strings that are not single tokens.
    """
    vocab = tokenizer.get_vocab()
    missing = [t for t in tokens if t not in vocab]
    if missing:
        raise ValueError(f"{what}: {missing} are not single tokens of this tokenizer")
    return [int(vocab[t]) for t in tokens]


def init_token_rows(model: Any, tokenizer: Any, tokens: Sequence[str]) -> dict[str, list[int]]:
    """Set the input-embedding row (and the LM-head row, if untied) of each token in ``tokens`` to the mean of
    the rows of its spelling (:func:`spelling_ids`), in place and without gradient.

    Args:
        model: a transformers causal LM (before any peft wrapping).
        tokenizer: its fast tokenizer.
        tokens: strings that are each one vocabulary entry (e.g. ``"<tool_call>"``).

    Returns:
        ``{token: spelling ids}`` for the tokens changed (for logs).

    Raises:
        ValueError: a string is not one vocabulary entry, or its spelling is the token itself.
    """
    import torch

    ids = vocab_ids(tokenizer, tokens, "model.init_token_rows")
    embed = model.get_input_embeddings().weight
    head_module = model.get_output_embeddings()
    head = head_module.weight if head_module is not None and head_module.weight is not embed else None
    done: dict[str, list[int]] = {}
    with torch.no_grad():
        for token, token_id in zip(tokens, ids):
            pieces = spelling_ids(tokenizer, token)
            if pieces == [token_id]:
                raise ValueError(f"{token!r} spells to itself; nothing to initialise from")
            for weight in (embed, head) if head is not None else (embed,):
                weight[token_id] = weight[pieces].float().mean(dim=0).to(weight.dtype)
            done[token] = pieces
    return done
