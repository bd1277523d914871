"""Train a few embedding rows in full next to a LoRA adapter (``model.train_token_rows``).

Why: the packaged Qwen2.5-Coder-0.5B never trained the rows of ``<tool_call>``/``</tool_call>``
(:mod:`tirl.models.token_rows`). Re-initialising them from their spelling is not enough for a LoRA-only SFT to
make the model emit the single tag token (measured: it wrote the spelling's pieces instead), so the rows must
learn. peft's ``trainable_token_indices`` is bypassed by TRL 1.16's fused LM head (it multiplies by
``lm_head.weight`` itself), so tirl makes the input-embedding and LM-head weights trainable and zeroes, with a
gradient hook, every row's gradient but the named ones. With weight decay 0 (the SFT default) AdamW then leaves
the other rows exactly as they were (zero gradient, zero moments, zero update).

With LoRA, Trainer checkpoints hold only the adapter, so :class:`TokenRowsCheckpoint` writes the trained rows
next to it (``tirl_token_rows.pt``) and :func:`load_token_rows` puts them back on resume. The merged final
folder carries them as ordinary weights. The rows file's format (:data:`ROWS_FILE`, :func:`row_weights`,
:func:`save_token_rows`, :func:`load_token_rows`) is defined in :mod:`tirl.models.token_rows`, which reads it
back when a checkpoint is merged (:mod:`tirl.models.trained`), and re-exported here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tirl.models.token_rows import ROWS_FILE, load_token_rows, row_weights, save_token_rows


def token_row_ids(tokenizer: Any, tokens: Sequence[str]) -> list[int]:
    """Vocabulary ids of ``tokens``.

    Raises:
        ValueError: a string is not one vocabulary entry.
    """
    from tirl.models.token_rows import vocab_ids

    return vocab_ids(tokenizer, tokens, "model.train_token_rows")


def make_rows_trainable(model: Any, ids: Sequence[int]) -> list[Any]:
    """Mark the embedding (and untied LM-head) weights trainable with only rows ``ids`` receiving gradient.

    Call after peft wrapping and before the optimizer is built. Returns the hook handles.

    Raises:
        ValueError: ``ids`` is empty or out of the vocabulary range.
    """
    import torch

    if not ids:
        raise ValueError("make_rows_trainable needs at least one token id")
    handles = []
    for weight in row_weights(model):
        if min(ids) < 0 or max(ids) >= weight.shape[0]:
            raise ValueError(f"token ids {list(ids)} outside the {weight.shape[0]} rows")
        mask = torch.zeros(weight.shape[0], 1, dtype=weight.dtype, device=weight.device)
        mask[list(ids)] = 1
        weight.requires_grad_(True)
        handles.append(weight.register_hook(lambda grad, mask=mask: grad * mask))
    return handles


def checkpoint_callback(ids: Sequence[int]) -> Any:
    """A transformers ``TrainerCallback`` that saves the trained rows into every ``checkpoint-N`` folder."""
    from transformers import TrainerCallback

    class TokenRowsCheckpoint(TrainerCallback):
        def on_save(self, args: Any, state: Any, control: Any, model: Any = None, **kw: Any) -> None:
            if model is not None and state.is_world_process_zero:
                from tirl.runs.layout import checkpoint_dir

                folder = checkpoint_dir(args.output_dir, state.global_step)
                if folder.is_dir():
                    save_token_rows(model, ids, folder)

    return TokenRowsCheckpoint()


__all__ = [
    "ROWS_FILE",
    "checkpoint_callback",
    "load_token_rows",
    "make_rows_trainable",
    "row_weights",
    "save_token_rows",
    "token_row_ids",
]
