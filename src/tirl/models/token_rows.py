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

Rows that are trained in full instead (``model.train_token_rows``, :mod:`tirl.train.token_rows`) are saved
beside a LoRA checkpoint in :data:`ROWS_FILE`; :func:`row_weights`, :func:`save_token_rows` and
:func:`load_token_rows` define that file here, so that merging a checkpoint (:mod:`tirl.models.trained`) reads
it without importing ``tirl.train``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROWS_FILE = "tirl_token_rows.pt"
"""The file beside a LoRA checkpoint's adapter that holds the fully trained rows (``model.train_token_rows``)."""


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


def row_weights(model: Any) -> list[Any]:
    """The input-embedding weight and, when not tied to it, the LM-head weight."""
    embed = model.get_input_embeddings().weight
    head_module = model.get_output_embeddings()
    head = head_module.weight if head_module is not None else None
    return [embed] if head is None or head is embed else [embed, head]


def save_token_rows(model: Any, ids: Sequence[int], folder: str | Path) -> Path:
    """Write rows ``ids`` of each trainable weight to ``folder/tirl_token_rows.pt``; returns the file."""
    import torch

    path = Path(folder) / ROWS_FILE
    torch.save({"ids": list(ids), "rows": [w.detach()[list(ids)].cpu().clone() for w in row_weights(model)]}, path)
    return path


def load_token_rows(model: Any, folder: str | Path) -> bool:
    """Copy the rows saved by :func:`save_token_rows` in ``folder`` back into ``model``; False when none.

    Raises:
        ValueError: the file was written for a model with tied/untied weights other than this one's.
    """
    import torch

    path = Path(folder) / ROWS_FILE
    if not path.is_file():
        return False
    saved = torch.load(path, map_location="cpu")
    weights = row_weights(model)
    if len(saved["rows"]) != len(weights):
        raise ValueError(f"{path}: {len(saved['rows'])} saved weights, the model has {len(weights)}")
    with torch.no_grad():
        for weight, rows in zip(weights, saved["rows"]):
            weight[saved["ids"]] = rows.to(weight.dtype)
    return True
