"""Resample-on-Correct (RoC): trajectory penalties and per-group down-sampling (rStar2-Agent's GRPO-RoC).

For each problem the policy samples an oversized group (2G trajectories); RoC keeps G of them for the update.
Negatives (reward <= 0) are kept uniformly at random, so diverse failures remain as negative signal; positives
are kept preferring those with fewer tool errors and format problems. Rewards stay binary: the selection, not
the reward, carries the quality signal.

This module covers:

* penalties of one trajectory from structured records (never from substring matching on text):
  :func:`p_err`, :func:`p_format`, :func:`p_total`;
* class quotas (:func:`class_quotas`) and the selection of one group (:func:`select`, :func:`select_group`) in
  two modes, ``paper`` (stochastic, the paper's rule) and ``topk`` (the deterministic rule of the public
  release, github.com/microsoft/rStar at ecbfb94).

It does not compute rewards (``tirl.reward``), advantages (:mod:`tirl.algo.advantages`) or touch tensors: every
function is pure Python over small records, so it is testable without torch.

Class quotas, for a group of ``N`` scored candidates (``n_pos`` positives, ``n_neg`` negatives) down-sampled to
``K`` (``target_size``):

``paper``
    ``neg_k = floor(n_neg * K / N)`` and ``pos_k = K - neg_k``. For ``N = 2K`` this is exactly the paper's
    "⌊|O_neg|/2⌋ negatives, the rest positives", and it keeps the group's success ratio (the remainder of the
    rounding goes to the positives). Negatives are drawn uniformly without replacement; positives are drawn
    without replacement with probability proportional to ``1 / p_total`` (successive sampling: each draw picks
    among the remaining positives with probability ``w_i / sum(w)``). Zero-penalty rule: ``1/0`` is the limit
    of an infinite weight, so positives with ``p_total == 0`` are taken first (uniformly at random among them
    when there are more than the quota) and only the rest of the quota is drawn by ``1/p_total`` weights.
``topk``
    The release's rule: ``neg_k = round(n_neg * K / N)`` and ``pos_k = round(n_pos * K / N)`` with Python's
    banker's rounding; the lowest-``p_total`` positives by a stable sort (ties keep rollout order); the first
    ``neg_k`` negatives in rollout order; no randomness. When the rounded quotas do not sum to ``K`` (possible
    only when ``N != 2K``), the positive quota becomes ``K - neg_k`` (the release would fail an assert there).

Minimum per class (both modes, ``min_per_class`` = m, default 2 as in the release): each class keeps at least
``min(m, its size)``. In ``paper`` mode a quota below that minimum is raised to it and the other class gets the
rest (``neg_k < min(m, n_neg)`` is fixed first, then ``pos_k``); ``topk`` mode reproduces the release's
comparisons exactly (``neg_k <= min(m, n_neg)``, then ``pos_k <= min(m, n_pos)``). Quotas are finally clipped
to what exists, the other class filling up, so exactly ``K`` are kept and nothing is ever duplicated.
``2 * m <= K`` is required.

Groups that cannot be down-sampled:

* ``N <= K`` scored candidates: kept whole (status ``undersized``; the caller counts and logs them). The release
  drops such groups instead.
* all scored rewards equal (all correct or all wrong) with ``drop_all_equal=True``: nothing kept (status
  ``dropped_equal``). This is the release's dynamic filter; the paper's GRPO advantage of such a group is 0
  anyway, so dropping only changes the batch composition and the loss normalisation.
* candidates whose reward is None or NaN (unscorable, e.g. an infrastructure failure of the verifier) are never
  kept and do not count in ``N``.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, TypeGuard

from tirl.protocol.answer import trajectory_format_penalty
from tirl.protocol.types import Trajectory

logger = logging.getLogger(__name__)

RocMode = Literal["paper", "topk"]
ROC_MODES: tuple[str, ...] = ("paper", "topk")
SelectionStatus = Literal["selected", "undersized", "dropped_equal", "empty"]

NO_CALL_ERROR_PENALTY = 0.5
"""``p_err`` of a trajectory that made no tool call (the paper's rule)."""


# --------------------------------------------------------------------------------------------------------------
# penalties


def p_err(trajectory: Trajectory) -> float:
    """Tool-error penalty: the share of the trajectory's tool calls whose class is not ``ok``.

    Counts the structured classes of :class:`tirl.protocol.ToolCallRecord` (``error``, ``timeout`` and
    ``parse_error`` are failures), so a program that prints the word "error" is not one. Only the model's own
    errors count: a call answered ``internal`` (tirl failed, :func:`tirl.algo.infra.is_internal`) is left out
    of both the failures and the calls.

    Args:
        trajectory: a finished trajectory with per-turn tool-call records.

    Returns:
        A value in [0, 1]; :data:`NO_CALL_ERROR_PENALTY` (0.5) when the trajectory made no tool call, 0 when
        every call it made was answered ``internal``.
    """
    from tirl.algo.infra import is_internal

    records = trajectory.tool_call_records
    if not records:
        return NO_CALL_ERROR_PENALTY
    judged = [rec for rec in records if not is_internal(rec)]
    if not judged:
        return 0.0
    failed = sum(1 for rec in judged if rec.cls != "ok")
    return failed / len(judged)


def p_format(trajectory: Trajectory) -> float:
    """Answer-format penalty (rStar2-Agent report, GRPO-RoC: the format penalty).

    ``1.0`` when the trajectory has no ``<answer>`` block; otherwise ``min(1, (answer_blocks - 1) / turns)``
    where ``answer_blocks`` is the number of ``<answer>...</answer>`` blocks over all assistant turns and
    ``turns`` the number of assistant turns. One answer gives 0; repeated answers are penalised in proportion
    to the number of turns. The rule lives in the protocol (``tirl.protocol.answer.trajectory_format_penalty``).

    Args:
        trajectory: a finished trajectory whose turns carry ``answer_blocks`` counts.

    Returns:
        A value in [0, 1].
    """
    return trajectory_format_penalty(trajectory)


def p_total(trajectory: Trajectory, *, use_error_penalty: bool = True, use_format_penalty: bool = True) -> float:
    """Total RoC penalty ``p_err * [use_error_penalty] + p_format * [use_format_penalty]`` (paper Eq. 5).

    Returns:
        A value in [0, 2]; 0 when both switches are off.
    """
    total = 0.0
    if use_error_penalty:
        total += p_err(trajectory)
    if use_format_penalty:
        total += p_format(trajectory)
    return total


# --------------------------------------------------------------------------------------------------------------
# candidates and configuration


class Scored(Protocol):
    """Anything :func:`select` can rank: a reward (None = unscorable) and a penalty (``p_total``)."""

    reward: float | None
    penalty: float


@dataclass(frozen=True)
class Candidate:
    """One trajectory as RoC sees it.

    Attributes:
        reward: outcome reward (binary in rStar2-Agent); None or NaN = unscorable, never kept.
        penalty: ``p_total`` of the trajectory (>= 0); only used for positives.
        p_err: the error penalty, kept for metrics.
        p_format: the format penalty, kept for metrics.
    """

    reward: float | None
    penalty: float = 0.0
    p_err: float = 0.0
    p_format: float = 0.0


@dataclass
class RocConfig:
    """Switches of RoC (see the module docstring for the rules).

    Attributes:
        enabled: False = plain GRPO (an ablation): the trainer samples only ``target_size`` trajectories per
            problem and keeps them all (the rule ``all``).
        mode: ``paper`` (stochastic) or ``topk`` (the release); the rule ``roc_paper`` or ``roc_release`` when
            ``rule`` is not set.
        rule: the selection rule by name (:mod:`tirl.algo.selection`: ``roc_paper``, ``roc_release``,
            ``random``, ``all``); None: from ``enabled`` and ``mode`` (:func:`tirl.algo.selection.rule_name`).
        use_error_penalty: include ``p_err`` in ``p_total``.
        use_format_penalty: include ``p_format`` in ``p_total``.
        min_per_class: minimum kept per class, clipped to what exists; ``2 * min_per_class <= target_size``.
        drop_all_equal: drop groups whose scored rewards are all equal (the release's dynamic filter).
    """

    enabled: bool = True
    mode: str = "paper"
    use_error_penalty: bool = True
    use_format_penalty: bool = True
    min_per_class: int = 2
    drop_all_equal: bool = False
    rule: str | None = None

    def validate(self, target_size: int) -> None:
        """Check the configuration against a target group size.

        Raises:
            ValueError: unknown mode or rule, negative minimum, or ``2 * min_per_class > target_size``.
        """
        from tirl.algo.selection import get_rule, rule_name

        if self.mode not in ROC_MODES:
            raise ValueError(f"roc.mode must be one of {ROC_MODES}, got {self.mode!r}")
        get_rule(rule_name(self))
        if self.min_per_class < 0:
            raise ValueError(f"roc.min_per_class must be >= 0, got {self.min_per_class}")
        if 2 * self.min_per_class > target_size:
            raise ValueError(
                f"roc.min_per_class={self.min_per_class} leaves no room: 2 * min_per_class must be <= the kept "
                f"group size {target_size}"
            )


def candidate(trajectory: Trajectory, reward: float | None, config: RocConfig | None = None) -> Candidate:
    """Build the :class:`Candidate` of one trajectory: its reward and penalties under ``config``'s switches."""
    cfg = config or RocConfig()
    err = p_err(trajectory)
    fmt = p_format(trajectory)
    penalty = (err if cfg.use_error_penalty else 0.0) + (fmt if cfg.use_format_penalty else 0.0)
    return Candidate(reward=reward, penalty=penalty, p_err=err, p_format=fmt)


def is_scored(reward: float | None) -> TypeGuard[float]:
    """True when ``reward`` is a finite number (None and NaN are unscorable)."""
    return reward is not None and not (isinstance(reward, float) and math.isnan(reward))


# --------------------------------------------------------------------------------------------------------------
# quotas and selection


def class_quotas(
    n_pos: int, n_neg: int, target_size: int, mode: str = "paper", min_per_class: int = 2
) -> tuple[int, int]:
    """How many positives and negatives to keep when down-sampling ``n_pos + n_neg`` to ``target_size``.

    Args:
        n_pos: positives in the group (>= 0).
        n_neg: negatives in the group (>= 0).
        target_size: kept group size K; must be < ``n_pos + n_neg`` (larger groups are not down-sampled).
        mode: ``paper`` or ``topk`` (module docstring).
        min_per_class: minimum per class, clipped to the class size.

    Returns:
        ``(pos_k, neg_k)`` with ``pos_k + neg_k == target_size``, ``0 <= pos_k <= n_pos``,
        ``0 <= neg_k <= n_neg``.

    Raises:
        ValueError: negative counts, ``target_size >= n_pos + n_neg``, an unknown mode, or
            ``2 * min_per_class > target_size``.
    """
    n = n_pos + n_neg
    if n_pos < 0 or n_neg < 0:
        raise ValueError("class sizes must be >= 0")
    if not 0 < target_size < n:
        raise ValueError(f"target_size must be in (0, {n}) to down-sample, got {target_size}")
    if mode not in ROC_MODES:
        raise ValueError(f"mode must be one of {ROC_MODES}, got {mode!r}")
    if 2 * min_per_class > target_size:
        raise ValueError("2 * min_per_class must be <= target_size")
    min_pos, min_neg = min(min_per_class, n_pos), min(min_per_class, n_neg)
    if mode == "paper":
        neg_k = (n_neg * target_size) // n
        pos_k = target_size - neg_k
        if neg_k < min_neg:
            neg_k, pos_k = min_neg, target_size - min_neg
        if pos_k < min_pos:
            pos_k, neg_k = min_pos, target_size - min_pos
    else:  # topk: the release's arithmetic, comparisons included
        neg_k = round(n_neg * target_size / n)
        pos_k = round(n_pos * target_size / n)
        if neg_k <= min_neg:
            neg_k, pos_k = min_neg, target_size - min_neg
        if pos_k <= min_pos:
            pos_k, neg_k = min_pos, target_size - min_pos
        if pos_k + neg_k != target_size:
            pos_k = target_size - neg_k
    # clip to what exists; the other class fills the rest (possible because n > target_size)
    if pos_k > n_pos:
        pos_k, neg_k = n_pos, target_size - n_pos
    if neg_k > n_neg:
        neg_k, pos_k = n_neg, target_size - n_neg
    return pos_k, neg_k


@dataclass
class Selection:
    """The outcome of down-sampling one group.

    Attributes:
        indices: kept indices into the group, ascending (rollout order).
        status: ``selected`` (down-sampled to the target), ``undersized`` (scored candidates <= target: all
            kept), ``dropped_equal`` (all-equal rewards with ``drop_all_equal``), ``empty`` (nothing scored).
        n_pos: positives in the group.
        n_neg: negatives in the group.
        n_unscored: candidates with a None/NaN reward (never kept).
        kept_pos: positives kept.
        kept_neg: negatives kept.
    """

    indices: list[int] = field(default_factory=list)
    status: str = "selected"
    n_pos: int = 0
    n_neg: int = 0
    n_unscored: int = 0
    kept_pos: int = 0
    kept_neg: int = 0


def _weighted_without_replacement(items: list[int], weights: list[float], k: int, rng: random.Random) -> list[int]:
    """Draw ``k`` of ``items`` without replacement, each draw with probability ``w_i / sum(remaining w)``."""
    pool = list(zip(items, weights))
    chosen: list[int] = []
    for _ in range(min(k, len(pool))):
        total = sum(w for _, w in pool)
        x = rng.random() * total
        acc = 0.0
        pick = len(pool) - 1
        for j, (_, w) in enumerate(pool):
            acc += w
            if x < acc:
                pick = j
                break
        chosen.append(pool.pop(pick)[0])
    return chosen


def _as_rng(rng: random.Random | int | None) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    return random.Random(rng)


def select_group(
    group: Sequence[Scored],
    target_size: int,
    rng: random.Random | int | None = None,
    mode: str = "paper",
    *,
    min_per_class: int = 2,
    drop_all_equal: bool = False,
) -> Selection:
    """Down-sample one group to ``target_size`` with RoC (rules in the module docstring).

    Args:
        group: the oversampled trajectories of one problem, in rollout order, as objects with ``reward``
            (None/NaN = unscorable; > 0 = positive) and ``penalty`` (``p_total`` >= 0).
        target_size: K, the number to keep (>= 1).
        rng: a ``random.Random``, a seed, or None (fresh entropy); ``paper`` mode only.
        mode: ``paper`` or ``topk``.
        min_per_class: minimum kept per class, clipped to what exists.
        drop_all_equal: drop groups whose scored rewards are all equal.

    Returns:
        A :class:`Selection`.

    Raises:
        ValueError: ``target_size < 1``, an unknown mode, ``2 * min_per_class > target_size``, or a negative
            or NaN penalty on a positive.
    """
    if target_size < 1:
        raise ValueError(f"target_size must be >= 1, got {target_size}")
    if mode not in ROC_MODES:
        raise ValueError(f"mode must be one of {ROC_MODES}, got {mode!r}")
    pos = [i for i, c in enumerate(group) if is_scored(c.reward) and float(c.reward) > 0]
    neg = [i for i, c in enumerate(group) if is_scored(c.reward) and float(c.reward) <= 0]
    sel = Selection(n_pos=len(pos), n_neg=len(neg), n_unscored=len(group) - len(pos) - len(neg))
    scored = sorted(pos + neg)
    if not scored:
        sel.status = "empty"
        return sel
    if drop_all_equal:
        values = [float(c.reward) for c in group if is_scored(c.reward)]
        if all(math.isclose(v, values[0], rel_tol=1e-9, abs_tol=1e-12) for v in values):
            sel.status = "dropped_equal"
            return sel
    if len(scored) <= target_size:
        sel.indices, sel.status = scored, "undersized"
        sel.kept_pos, sel.kept_neg = len(pos), len(neg)
        logger.debug("RoC: group of %d scored trajectories kept whole (target %d)", len(scored), target_size)
        return sel
    for i in pos:
        p = group[i].penalty
        if p is None or math.isnan(p) or p < 0:
            raise ValueError(f"penalty of positive {i} must be a number >= 0, got {p!r}")
    pos_k, neg_k = class_quotas(len(pos), len(neg), target_size, mode, min_per_class)
    if mode == "topk":
        kept_pos = sorted(pos, key=lambda i: group[i].penalty)[:pos_k]  # stable: ties keep rollout order
        kept_neg = neg[:neg_k]
    else:
        r = _as_rng(rng)
        kept_neg = r.sample(neg, neg_k)
        zero = [i for i in pos if group[i].penalty == 0]
        rest = [i for i in pos if group[i].penalty > 0]
        if len(zero) >= pos_k:
            kept_pos = r.sample(zero, pos_k)
        else:
            kept_pos = zero + _weighted_without_replacement(
                rest, [1.0 / group[i].penalty for i in rest], pos_k - len(zero), r
            )
    sel.indices = sorted(kept_pos + kept_neg)
    sel.kept_pos, sel.kept_neg = len(kept_pos), len(kept_neg)
    return sel


def select(
    group: Sequence[Scored],
    target_size: int,
    rng: random.Random | int | None = None,
    mode: str = "paper",
    *,
    min_per_class: int = 2,
    drop_all_equal: bool = False,
) -> list[int]:
    """The kept indices of :func:`select_group` (same arguments, same errors), ascending."""
    return select_group(
        group, target_size, rng, mode, min_per_class=min_per_class, drop_all_equal=drop_all_equal
    ).indices


__all__ = [
    "Candidate",
    "NO_CALL_ERROR_PENALTY",
    "ROC_MODES",
    "RocConfig",
    "Selection",
    "candidate",
    "class_quotas",
    "is_scored",
    "p_err",
    "p_format",
    "p_total",
    "select",
    "select_group",
]
