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

Learning rate: Adam's step is about the learning rate whatever the gradient's scale, so at a LoRA rate (1e-4) the
rows hardly move (measured on Qwen2.5-Coder-0.5B after 30 steps: the two tags' cosine 0.802 -> 0.804, norms
0.263/0.257 -> 0.262/0.258; the model then opened 27 of 400 calls with ``</tool_call>``).
``model.token_rows_learning_rate`` gives them their own rate: :func:`build_rows_optimizer` builds the trainer's
optimizer before training with the row weights in a parameter group of their own. :class:`TokenRowsMetrics` logs
whether the rows separate (``token_rows/max_cosine``, ``token_rows/mean_norm``).
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


def split_rows_group(optimizer: Any, weights: Sequence[Any], lr: float) -> dict[str, Any]:
    """Move ``weights`` out of the parameter groups of ``optimizer`` into a group of their own with learning
    rate ``lr`` and weight decay 0, appended last; the other groups keep their parameters (a group left empty
    stays, so the groups line up with a checkpoint's) and their settings.

    Call before the first step (no optimizer state yet) and before the learning-rate scheduler is built: the
    scheduler then records each group's rate as its base rate and scales all of them by the same factor.

    Returns:
        The new group (the dict in ``optimizer.param_groups``).

    Raises:
        ValueError: a weight is in none of the groups (not trainable when the optimizer was built), or the
            optimizer already has state.
    """
    if optimizer.state:
        raise ValueError("split_rows_group needs an optimizer that has not stepped yet")
    wanted = {id(w) for w in weights}
    found: set[int] = set()
    for group in optimizer.param_groups:
        found |= {id(p) for p in group["params"] if id(p) in wanted}
        group["params"] = [p for p in group["params"] if id(p) not in wanted]
    if found != wanted:
        raise ValueError("the token-row weights are not in the optimizer (make_rows_trainable before building it)")
    optimizer.add_param_group({"params": list(weights), "lr": lr, "weight_decay": 0.0})
    return optimizer.param_groups[-1]


def build_rows_optimizer(trainer: Any, lr: float) -> Any:
    """Build the optimizer of a transformers ``trainer`` now, as ``Trainer.create_optimizer`` builds it (its
    class, settings and groups), with the embedding and untied LM-head weights (:func:`row_weights`) moved to a
    group of their own at learning rate ``lr`` (:func:`split_rows_group`).

    Call after :func:`make_rows_trainable` and before ``trainer.train()``: ``train`` keeps an optimizer that is
    already set, builds the scheduler over all its groups, and on resume loads the checkpoint's optimizer and
    scheduler state into it (the same groups, so a resumed run keeps the rates it was written with).

    Returns:
        The optimizer (``trainer.optimizer``).

    Raises:
        ValueError: as :func:`split_rows_group`.
    """
    optimizer = trainer.create_optimizer()
    split_rows_group(optimizer, row_weights(trainer.model), lr)
    return optimizer


def rows_metrics(model: Any, ids: Sequence[int]) -> dict[str, float]:
    """Whether trained rows separate: ``token_rows/max_cosine``, the largest cosine between two of the rows
    ``ids`` of one weight (the input embedding and, when untied, the LM head; the larger of the two; left out for
    a single id), and ``token_rows/mean_norm``, the mean L2 norm of those rows over the weights.

    Reads ``len(ids)`` rows per weight (cheap at every logging step).
    """
    import torch

    rows = list(ids)
    norms, cosines = [], []
    with torch.no_grad():
        for weight in row_weights(model):
            r = weight.detach()[rows].float()
            norms.append(r.norm(dim=1))
            if len(rows) > 1:
                unit = torch.nn.functional.normalize(r, dim=1)
                cos = unit @ unit.T
                off_diagonal = ~torch.eye(len(rows), dtype=torch.bool, device=cos.device)
                cosines.append(cos[off_diagonal].max())
        out = {"token_rows/mean_norm": float(torch.cat(norms).mean())}
        if cosines:
            out["token_rows/max_cosine"] = float(torch.stack(cosines).max())
    return out


def metrics_callback(ids: Sequence[int]) -> Any:
    """A transformers ``TrainerCallback`` that adds :func:`rows_metrics` to each training log record (one with a
    ``loss``); put it before the callbacks that print or write the record."""
    from transformers import TrainerCallback

    class TokenRowsMetrics(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            model = kw.get("model")
            if logs is not None and "loss" in logs and model is not None:
                logs.update(rows_metrics(model, ids))

    return TokenRowsMetrics()


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
    "build_rows_optimizer",
    "checkpoint_callback",
    "load_token_rows",
    "make_rows_trainable",
    "metrics_callback",
    "row_weights",
    "rows_metrics",
    "save_token_rows",
    "split_rows_group",
    "token_row_ids",
]
