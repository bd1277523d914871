"""Selection rules by name: which of a problem's sampled trajectories the update trains on.

A selection rule maps one group of scored candidates (reward and ``p_total`` penalty, in rollout order) to the
kept indices (:class:`tirl.algo.roc.Selection`). The rules, each one small function behind :data:`RULES`:

``roc_paper``
    Resample-on-Correct as the paper states it (Sec. 3.2): :func:`tirl.algo.roc.select_group` in ``paper``
    mode (stochastic: negatives uniformly, positives with probability proportional to ``1 / p_total``).
``roc_release``
    RoC as the public release does it (github.com/microsoft/rStar at ecbfb94): ``topk`` mode (deterministic).
``random``
    Uniform down-sampling: ``target_size`` of the scored candidates uniformly at random without replacement,
    blind to reward and penalty (the control for RoC: what the kept set looks like without a rule).
``all``
    Plain GRPO: every scored candidate is kept (the trainer samples only ``target_size`` per problem).

Shared by all rules (as in :func:`tirl.algo.roc.select_group`): unscorable candidates (reward None/NaN) are never
kept; ``drop_all_equal`` drops a group whose scored rewards are all equal; a group with ``target_size`` or fewer
scored candidates is kept whole (status ``undersized``).

A recipe names its rule with ``roc.rule``; without it the older keys decide (``roc.enabled: false`` -> ``all``,
``roc.mode: paper`` -> ``roc_paper``, ``roc.mode: topk`` -> ``roc_release``), see :func:`rule_name`. A new rule
is one function registered with :func:`register_rule`; the rollout function (:mod:`tirl.train.rollout_func`)
and the offline replay (``tirl analyze roc``, :mod:`tirl.analysis.roc_replay`) call whichever is named.
Pure Python, no torch.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tirl.algo.roc import RocConfig, Scored, Selection, is_scored, select_group

RuleFunction = Callable[[Sequence[Scored], int, random.Random, RocConfig], Selection]
"""``(group, target_size, rng, config) -> Selection``."""


@dataclass(frozen=True)
class SelectionRule:
    """A registered rule.

    Attributes:
        name: the recipe's ``roc.rule`` value.
        select: the function.
        oversamples: True when the rule down-samples, so the trainer samples ``rollout.oversample * G`` per
            problem; False (``all``): it samples G and keeps them.
        description: one line for help texts and reports.
    """

    name: str
    select: RuleFunction
    oversamples: bool
    description: str


RULES: dict[str, SelectionRule] = {}
"""Registered rules by name."""


def register_rule(name: str, *, oversamples: bool, description: str) -> Callable[[RuleFunction], RuleFunction]:
    """Decorator registering a rule function under ``name`` (a later registration of the same name replaces it)."""

    def wrap(fn: RuleFunction) -> RuleFunction:
        RULES[name] = SelectionRule(name, fn, oversamples, description)
        return fn

    return wrap


def get_rule(name: str) -> SelectionRule:
    """The registered rule ``name``.

    Raises:
        ValueError: unknown name (the message lists the registered ones).
    """
    try:
        return RULES[name]
    except KeyError:
        raise ValueError(f"unknown selection rule {name!r}; set roc.rule to one of {', '.join(RULES)}") from None


def rule_name(config: RocConfig) -> str:
    """The rule a :class:`RocConfig` names: ``config.rule`` when set, else from the older keys
    (``enabled: false`` -> ``all``; ``mode: paper`` -> ``roc_paper``; ``mode: topk`` -> ``roc_release``).

    Raises:
        ValueError: ``rule`` and ``enabled: false`` disagree (``enabled: false`` means ``all``), or no rule and
            an unknown ``mode``.
    """
    if config.rule:
        if not config.enabled and config.rule != "all":
            raise ValueError(
                f"roc.enabled: false means plain GRPO (rule all) but roc.rule is {config.rule!r}; "
                "drop one of the two keys"
            )
        return config.rule
    if not config.enabled:
        return "all"
    by_mode = {"paper": "roc_paper", "topk": "roc_release"}
    if config.mode not in by_mode:
        raise ValueError(f"roc.mode must be one of {', '.join(by_mode)}, got {config.mode!r} (or set roc.rule)")
    return by_mode[config.mode]


def _trivial(group: Sequence[Scored], target_size: int, drop_all_equal: bool) -> tuple[Selection, list[int]]:
    """The class counts, and the outcome of the cases every rule shares (``status`` set to ``''`` when the
    group still has to be down-sampled)."""
    pos = [i for i, c in enumerate(group) if is_scored(c.reward) and float(c.reward) > 0]
    neg = [i for i, c in enumerate(group) if is_scored(c.reward) and float(c.reward) <= 0]
    sel = Selection(n_pos=len(pos), n_neg=len(neg), n_unscored=len(group) - len(pos) - len(neg), status="")
    scored = sorted(pos + neg)
    if not scored:
        sel.status = "empty"
    elif drop_all_equal and all(
        math.isclose(float(group[i].reward), float(group[scored[0]].reward), rel_tol=1e-9, abs_tol=1e-12)
        for i in scored
    ):
        sel.status = "dropped_equal"
    elif len(scored) <= target_size:
        sel.indices, sel.status = scored, "undersized"
        sel.kept_pos, sel.kept_neg = len(pos), len(neg)
    return sel, scored


def _finish(sel: Selection, group: Sequence[Scored], kept: list[int]) -> Selection:
    sel.indices = sorted(kept)
    sel.kept_pos = sum(1 for i in kept if float(group[i].reward) > 0)
    sel.kept_neg = len(kept) - sel.kept_pos
    sel.status = "selected"
    return sel


@register_rule(
    "roc_paper",
    oversamples=True,
    description="RoC as the paper states it (negatives uniformly, positives by 1/p_total)",
)
def roc_paper(group: Sequence[Scored], target_size: int, rng: random.Random, config: RocConfig) -> Selection:
    """:func:`tirl.algo.roc.select_group` in ``paper`` mode with the config's minimum per class and filter."""
    return select_group(
        group, target_size, rng, "paper", min_per_class=config.min_per_class, drop_all_equal=config.drop_all_equal
    )


@register_rule(
    "roc_release",
    oversamples=True,
    description="RoC as the public release does it (lowest p_total first, deterministic)",
)
def roc_release(group: Sequence[Scored], target_size: int, rng: random.Random, config: RocConfig) -> Selection:
    """:func:`tirl.algo.roc.select_group` in ``topk`` mode (``rng`` unused)."""
    return select_group(
        group, target_size, rng, "topk", min_per_class=config.min_per_class, drop_all_equal=config.drop_all_equal
    )


@register_rule("random", oversamples=True, description="uniform down-sampling, blind to reward and penalty")
def random_rule(group: Sequence[Scored], target_size: int, rng: random.Random, config: RocConfig) -> Selection:
    """``target_size`` of the scored candidates, uniformly without replacement (``rng.sample``)."""
    sel, scored = _trivial(group, target_size, config.drop_all_equal)
    if sel.status:
        return sel
    return _finish(sel, group, rng.sample(scored, target_size))


@register_rule("all", oversamples=False, description="plain GRPO: every scored trajectory is kept")
def keep_all(group: Sequence[Scored], target_size: int, rng: random.Random, config: RocConfig) -> Selection:
    """Every scored candidate (status ``selected`` when there are at least ``target_size``, else
    ``undersized``); ``rng`` unused."""
    sel, scored = _trivial(group, target_size, config.drop_all_equal)
    if sel.status in ("empty", "dropped_equal"):
        return sel
    sel = _finish(sel, group, scored)
    if len(scored) < target_size:
        sel.status = "undersized"
    return sel


def apply_rule(
    name: str,
    group: Sequence[Scored],
    target_size: int,
    rng: random.Random | int | None,
    config: RocConfig | None = None,
) -> Selection:
    """Run the rule ``name`` on one group.

    Args:
        name: a registered rule (:data:`RULES`).
        group: candidates in rollout order (``reward``: None/NaN = unscorable, > 0 positive; ``penalty``).
        target_size: K, the number to keep (>= 1).
        rng: a ``random.Random``, a seed, or None (fresh entropy).
        config: the minimum per class and the all-equal filter (default :class:`RocConfig`).

    Raises:
        ValueError: an unknown rule, ``target_size < 1``, or what the rule raises.
    """
    if target_size < 1:
        raise ValueError(f"target_size must be >= 1, got {target_size}")
    r = rng if isinstance(rng, random.Random) else random.Random(rng)
    return get_rule(name).select(group, target_size, r, config or RocConfig())


__all__ = [
    "RULES",
    "RuleFunction",
    "SelectionRule",
    "apply_rule",
    "get_rule",
    "keep_all",
    "random_rule",
    "register_rule",
    "roc_paper",
    "roc_release",
    "rule_name",
]
