"""One GRPO micro-batch cut down to the rows and columns that carry gradient, before TRL's loss runs.

TRL pads every completion of a step to the step's longest one and splits the step into micro-batches after a
shuffle, so a micro-batch costs rows x the step's longest completion whatever it holds. In a tirl step many rows
carry no gradient: placeholder slots (a group RoC dropped, an empty response; one token, loss mask 0) and, with
the report's loss (``dapo``: token sum over the whole step's token count, ``beta = 0``), every trajectory of a
group whose rewards are all equal (advantage 0, so its token losses and their gradients are 0). Dropping such rows
and the columns no kept row reaches leaves the loss value and the gradient unchanged, because ``dapo`` divides
by the token count of the whole step (``num_items_in_batch``), not of the micro-batch. With other loss types only
what is exact for them is done (see :func:`row_policy`). Measured effect: experiments/cpu-learning-curve/README.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

RowPolicy = Literal["none", "masked", "zero_advantage"]

PROMPT_KEYS = ("prompt_ids", "prompt_mask")
# vision-model inputs are not aligned with rows in a way this module understands: such batches are left as they are
_UNTOUCHED_IF_PRESENT = ("pixel_values", "image_grid_thw", "pixel_attention_mask", "image_sizes", "num_images")


@dataclass(frozen=True)
class Compaction:
    """What :func:`compact_micro_batch` did: rows and (prompt + completion) positions before and after."""

    rows_before: int
    rows_after: int
    positions_before: int
    positions_after: int

    @property
    def computed_fraction(self) -> float:
        """Share of the micro-batch's token positions still computed (1.0 = nothing removed)."""
        return self.positions_after / max(1, self.positions_before)


def row_policy(loss_type: str, beta: float, entropy_mask_batch_wide: bool) -> RowPolicy:
    """Which rows can leave a micro-batch without changing the loss or its gradient.

    - ``zero_advantage`` (``dapo``, ``beta == 0``, no batch-wide entropy quantile): rows whose loss mask is empty
      and rows whose advantage is 0 (their per-token loss is ``-A * ratio = 0``, and ``dapo``'s normaliser is the
      step's token count);
    - ``masked`` (``dapo`` otherwise, ``bnpo``): rows whose loss mask is empty (they add 0 to the numerator and
      to ``bnpo``'s micro-batch token count);
    - ``none`` (``grpo``, ``dr_grpo``: their normaliser counts rows): columns are still trimmed.
    """
    if loss_type == "dapo" and beta == 0.0 and not entropy_mask_batch_wide:
        return "zero_advantage"
    if loss_type in ("dapo", "bnpo"):
        return "masked"
    return "none"


def _first_one(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the index of the first 1 (the row's length when there is none). ``mask``: (B, T)."""
    t = mask.shape[1]
    idx = torch.arange(t, device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), idx, torch.full_like(idx, t)).min(dim=1).values


def _last_one(mask: torch.Tensor) -> torch.Tensor:
    """Per row, the index of the last 1 (-1 when there is none). ``mask``: (B, T)."""
    idx = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    return torch.where(mask.bool(), idx, torch.full_like(idx, -1)).max(dim=1).values


def compact_micro_batch(inputs: dict[str, Any], policy: RowPolicy) -> tuple[dict[str, Any], Compaction]:
    """Drop the rows ``policy`` allows and the padding columns no remaining row uses.

    Args:
        inputs: one micro-batch as TRL's ``GRPOTrainer`` hands it to ``compute_loss``: ``prompt_ids`` and
            ``prompt_mask`` (B, P), left-padded; ``completion_ids`` and ``completion_mask`` (B, C), right-padded;
            optional ``tool_mask`` (B, C) (0 on injected tool tokens); ``advantages`` (B,) or (B, C); any other
            tensor with B rows (sampling or reference log-probs (B, C)) follows the same rows and, when it has C
            columns, the same columns; ``num_items_in_batch`` (a scalar for the whole step) is kept as is.
        policy: from :func:`row_policy`.

    Returns:
        The new micro-batch (a new dict; tensors are views or copies, the input is not modified) and a
        :class:`Compaction`. When no row carries gradient, one row remains, cut to its last prompt token and its
        first completion token with an empty loss mask, so that the loss still has a graph (zero gradient).
    """
    if any(k in inputs for k in _UNTOUCHED_IF_PRESENT):
        n = int(inputs["completion_ids"].shape[0])
        pos = n * (inputs["prompt_ids"].shape[1] + inputs["completion_ids"].shape[1])
        return dict(inputs), Compaction(n, n, pos, pos)
    prompt_mask = inputs["prompt_mask"]
    completion_mask = inputs["completion_mask"]
    b, p = prompt_mask.shape
    c = completion_mask.shape[1]
    loss_mask = completion_mask * inputs["tool_mask"] if "tool_mask" in inputs else completion_mask
    keep = torch.ones(b, dtype=torch.bool, device=completion_mask.device)
    if policy in ("masked", "zero_advantage"):
        keep &= loss_mask.sum(dim=1) > 0
    if policy == "zero_advantage":
        adv = inputs["advantages"]
        keep &= (adv != 0) if adv.dim() == 1 else (adv != 0).any(dim=1)
    empty = not bool(keep.any())
    if empty:
        keep = torch.zeros_like(keep)
        keep[0] = True
    rows = keep.nonzero().squeeze(1)
    if empty:
        p0, c1 = p - 1, 1
    else:
        p0 = int(_first_one(prompt_mask[rows]).min().item())
        p0 = min(p0, p - 1)
        c1 = max(1, int(_last_one(completion_mask[rows]).max().item()) + 1)
    out: dict[str, Any] = {}
    for key, value in inputs.items():
        if (
            not isinstance(value, torch.Tensor)
            or value.dim() == 0
            or value.shape[0] != b
            or key == "num_items_in_batch"
        ):
            out[key] = value
            continue
        v = value[rows]
        if v.dim() >= 2 and key in PROMPT_KEYS:
            v = v[:, p0:]
        elif v.dim() >= 2 and v.shape[1] == c:
            v = v[:, :c1]
        out[key] = v
    if empty:  # keep the graph, train nothing
        if "tool_mask" in out:
            out["tool_mask"] = torch.zeros_like(out["tool_mask"])
        else:
            out["completion_mask"] = torch.zeros_like(out["completion_mask"])
    after = len(rows) * ((p - p0) + c1)
    return out, Compaction(b, len(rows), b * (p + c), after)
