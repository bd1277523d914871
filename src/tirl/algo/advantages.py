"""GRPO group-relative advantages over the kept (RoC-selected) group (rStar2-Agent Eq. 7).

``A_i = (r_i - mean(r)) / (max(std(r), std_floor) + eps)``, computed per group (one problem's kept
trajectories), never over the whole batch. The scalar advantage applies to every model token of the trajectory
(the trainer broadcasts it); rewards are never placed on individual tokens here, so the token-placement bugs of
the release (field cases F79/F80) cannot arise.

Covers: one group (:func:`group_advantages`) and many groups given as consecutive blocks
(:func:`grouped_advantages`). Does not select trajectories (:mod:`tirl.algo.roc`) or compute a loss.

Policies:

* std is the unbiased (Bessel) estimator by default, as ``torch.std`` in the release; ``eps = 1e-6`` as in the
  release (verl ``grpo``); ``unbiased=False`` gives the population std.
* ``std_floor`` (default 1e-2): a group whose rewards differ only by numerical noise (e.g. 0.35 vs 0.35 + 1e-9)
  would otherwise have its noise scaled up to unit advantages (field case F82, "~1000x amplification"). For
  binary rewards the floor never binds: the smallest non-zero std of a group of 2..64 is above 0.12.
* All-equal groups (all correct or all wrong) get advantage 0 exactly, never NaN.
* None/NaN rewards (unscorable) are masked: excluded from the mean and std and given advantage 0.
* A group with a single scored reward gets advantage 0 (no baseline to compare with; the release's verl gives
  it ``r / 1``, i.e. its raw reward).
* Bound: with the Bessel std every advantage satisfies ``|A| <= (n - 1) / sqrt(n)`` for ``n`` scored rewards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TypeGuard

DEFAULT_EPS = 1e-6
DEFAULT_STD_FLOOR = 1e-2


def _scored(r: float | None) -> TypeGuard[float]:
    return r is not None and not math.isnan(float(r))


def group_advantages(
    rewards: Sequence[float | None],
    *,
    eps: float = DEFAULT_EPS,
    std_floor: float = DEFAULT_STD_FLOOR,
    unbiased: bool = True,
    scale: bool = True,
) -> list[float]:
    """Advantages of one group.

    Args:
        rewards: the group's rewards, length n; None or NaN = unscorable (masked).
        eps: added to the std in the denominator.
        std_floor: lower bound on the std used in the denominator (>= 0).
        unbiased: Bessel-corrected std (n - 1 in the denominator) when True.
        scale: divide by the std (GRPO); False gives mean-centred rewards only (Dr. GRPO style).

    Returns:
        A list of n finite floats, 0.0 at unscorable positions.

    Raises:
        ValueError: ``eps < 0`` or ``std_floor < 0``, or an infinite reward.
    """
    if eps < 0 or std_floor < 0:
        raise ValueError("eps and std_floor must be >= 0")
    values = [float(r) for r in rewards if _scored(r)]
    if any(math.isinf(v) for v in values):
        raise ValueError("rewards must be finite (None/NaN are allowed and masked)")
    out = [0.0] * len(rewards)
    n = len(values)
    if n < 2:
        return out
    mean = math.fsum(values) / n
    if all(v == values[0] for v in values):
        return out
    var = math.fsum((v - mean) ** 2 for v in values) / (n - 1 if unbiased else n)
    denom = (max(math.sqrt(var), std_floor) + eps) if scale else 1.0
    for i, r in enumerate(rewards):
        if _scored(r):
            out[i] = (float(r) - mean) / denom
    return out


def grouped_advantages(
    rewards: Sequence[float | None],
    group_size: int,
    **kwargs: float | bool,
) -> list[float]:
    """Advantages of consecutive groups of ``group_size`` rewards, each normalised on its own.

    Args:
        rewards: flat rewards, length a multiple of ``group_size``; group g is ``rewards[g*G:(g+1)*G]``.
        group_size: G (>= 1).
        **kwargs: passed to :func:`group_advantages`.

    Returns:
        A flat list of the same length.

    Raises:
        ValueError: ``group_size < 1`` or a length that is not a multiple of it.
    """
    if group_size < 1 or len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        out.extend(group_advantages(rewards[start : start + group_size], **kwargs))  # type: ignore[arg-type]  # one type for all keywords
    return out


__all__ = ["DEFAULT_EPS", "DEFAULT_STD_FLOOR", "group_advantages", "grouped_advantages"]
