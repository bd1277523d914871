"""High-entropy token loss mask: keep only each sequence's top fraction of generated tokens by entropy.

The public rStar2-Agent release adds the actor option ``retain_high_entropy_token_ratio`` (default 1.0 = off):
below 1 it keeps in the policy loss only the highest-entropy response tokens **of each sequence** (the
"forking tokens" of Wang et al., "Beyond the 80/20 Rule", arXiv 2506.01939). TRL 1.16's
``GRPOConfig.top_entropy_quantile`` does the same with a different ranking: one entropy threshold, the
quantile over **all** completion tokens of the batch gathered over processes (``GRPOTrainer.
get_high_entropy_mask``), so a long or uncertain sequence can keep most of its tokens and a confident one none.
tirl offers both (``optim.entropy_mask_scope``: ``sequence``, the release's, default; ``batch``, TRL's).

Per-sequence rule (this module): with ``n`` loss-bearing tokens (mask 1: model-generated, not padding, not
injected tool output) and ratio ``r``, the ``k = ceil(r * n)`` tokens of largest entropy are kept (at least
one when ``n > 0``; exactly ``r * n`` when that is an integer); ties are broken by position (earlier first).
Tokens outside ``mask`` are never kept.
"""

from __future__ import annotations

import math
from typing import Any


def keep_count(n: int, ratio: float) -> int:
    """``ceil(ratio * n)`` tokens kept of ``n`` (0 when ``n == 0``), with float noise removed first.

    Raises:
        ValueError: ``ratio`` outside ``(0, 1]``.
    """
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"the retained ratio must be in (0, 1], got {ratio}")
    return min(n, math.ceil(round(ratio * n, 9))) if n > 0 else 0


def top_entropy_mask(entropies: Any, mask: Any, ratio: float) -> Any:
    """Per-sequence high-entropy mask.

    Args:
        entropies: float tensor ``(B, T)``, entropy (nats) at each completion position.
        mask: ``(B, T)`` 0/1 or bool, 1 where the token bears loss (model-generated, not padding).
        ratio: fraction of each sequence's loss-bearing tokens to keep, in ``(0, 1]``.

    Returns:
        Bool tensor ``(B, T)``: True for the ``keep_count(n_b, ratio)`` highest-entropy tokens of row ``b``
        among its mask-1 positions.

    Raises:
        ValueError: shapes differ or ``ratio`` is outside ``(0, 1]``.
    """
    import torch

    if entropies.shape != mask.shape:
        raise ValueError(f"entropies {tuple(entropies.shape)} and mask {tuple(mask.shape)} differ")
    valid = mask.bool()
    keep_count(1, ratio)  # validates ratio
    out = torch.zeros_like(valid)
    if valid.numel() == 0:
        return out
    # rank by entropy, then by earlier position: invalid positions sort last
    key = torch.where(valid, entropies.detach().float(), torch.full_like(entropies, -math.inf, dtype=torch.float))
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    counts = valid.sum(-1).tolist()
    for b, n in enumerate(counts):
        k = keep_count(int(n), ratio)
        if k:
            out[b, order[b, :k]] = True
    return out & valid


__all__ = ["keep_count", "top_entropy_mask"]
