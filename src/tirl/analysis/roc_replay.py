"""Offline RoC replay (``tirl analyze roc RUN_DIR``): what RoC's selection keeps, against random down-sampling.

Resample-on-Correct (rStar2-Agent, Sec. 3.2) can only matter on a task where the sampled groups give it something
to choose: positives that differ in failing tool calls or answer format. This module answers, from logged
trajectories and without training, how the kept sets of the selection rules of :mod:`tirl.algo.selection`
differ, many times over (the stochastic rules are re-drawn in every replay):

* **inputs**: an RL run folder whose recipe had ``logging.log_trajectories: true``
  (``trajectories/step_NNNNN_rankR.jsonl``: every sampled trajectory of a step with its reward, tool-call classes,
  turns and RoC's logged decision ``kept``; one group = one ``(step, rank, group)``), or an evaluation run folder
  (``trajectories.jsonl`` of ``tirl eval --samples K``; one group = the K samples of one problem, reward 1 when
  correct, None for a verdict that could not judge). An evaluation run lets a task be judged from its starting
  model's samples before any training.
* **columns**: ``sampled`` (every trajectory, no selection), ``logged`` (RL runs: what the run kept), then one
  per rule of the selection-rule registry that down-samples (:func:`replay_rules`: ``random``, uniform
  down-sampling, ``roc_paper``, ``roc_release`` and any rule registered with ``register_rule``), each keeping
  ``keep`` of a group.
* **metrics** of a kept set (:data:`METRICS`): the share of kept positives with at least one failing call (the
  report's premise: 10-15 % of correct trajectories), failing calls among the calls of kept positives (the
  report's Figure 4 quantity, ``tool_error_in_correct`` in the training metrics), tool calls per trajectory,
  positives without any tool call, positives with a format violation (``p_format > 0``), response length in
  model tokens, and the share of down-sampled groups whose kept set differs from a random pick's (compared by
  what a rule sees: the multiset of rewards and positives' penalties; for ``random`` itself: a second random
  pick).
  Each is reported as mean, standard deviation, minimum and maximum over the replays.

Penalties are recomputed from the records with :mod:`tirl.algo.roc`'s rules (``p_err`` from the tool-call
classes, ``p_format`` from the turns' answer-block counts), so RL and evaluation runs are read the same way.
Not covered: training, or any effect of the selection on learning (that takes the ablation runs).
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.algo.roc import NO_CALL_ERROR_PENALTY, RocConfig, class_quotas, is_scored
from tirl.algo.selection import RULES, apply_rule, get_rule
from tirl.protocol.answer import format_penalty
from tirl.runs.evals import read_samples
from tirl.runs.layout import EVAL_TRAJECTORIES, TRAJECTORY_DIR, is_eval_run
from tirl.runs.trajectories import step_groups

UNSCORED_VERDICTS = frozenset({"unparsable_gold", "verifier_error"})
"""Evaluation verdict statuses that mean "could not judge" (as :data:`tirl.reward.scorer.UNSCORED_STATUSES`)."""


def replay_rules() -> tuple[str, ...]:
    """The rules replayed by default, in column order after ``sampled`` and ``logged``: every rule registered in
    :data:`tirl.algo.selection.RULES` that down-samples (``oversamples``; one that keeps every trajectory would
    repeat ``sampled``), ``random`` first (the others are compared with it), then in registration order
    (built-ins: ``random``, ``roc_paper``, ``roc_release``). A rule registered with ``register_rule`` is replayed
    without further code."""
    names = [name for name, rule in RULES.items() if rule.oversamples]
    return tuple(sorted(names, key=lambda name: name != "random"))  # stable: registration order after random


METRICS: tuple[tuple[str, str], ...] = (
    ("pos_with_failing_call", "kept positives with >= 1 failing call"),
    ("failing_calls_in_pos", "failing calls / calls of kept positives (Fig. 4)"),
    ("calls_per_traj", "tool calls per kept trajectory"),
    ("pos_without_call", "kept positives without a tool call"),
    ("pos_format_violation", "kept positives with a format violation"),
    ("length", "response length, model tokens (kept)"),
    ("positive_share", "positives among kept"),
    ("differs_from_random", "down-sampled groups whose pick differs from a random pick"),
)
"""(key, description) of the metrics of a kept set."""


@dataclass(frozen=True)
class Member:
    """One sampled trajectory as the replay sees it.

    Attributes:
        reward: 1.0 / 0.0, None when it could not be scored.
        penalty: ``p_total`` under the replay's switches.
        p_err: share of failing calls (0.5 without a call).
        p_format: the answer-format penalty.
        calls: tool calls.
        failing: tool calls whose class is not ``ok``.
        tokens: model tokens of the response.
        logged_kept: RL runs: whether the run kept it; None for evaluation runs.
    """

    reward: float | None
    penalty: float
    p_err: float
    p_format: float
    calls: int
    failing: int
    tokens: int
    logged_kept: bool | None = None

    @property
    def positive(self) -> bool:
        return is_scored(self.reward) and float(self.reward) > 0


@dataclass
class ReplayInput:
    """The groups of a run folder.

    Attributes:
        run: the folder.
        kind: ``rl`` or ``eval``.
        groups: the groups, each in rollout (sample) order.
        keys: one label per group (``step/rank/group`` or ``benchmark/problem_id``).
        logged_keep: RL runs: the most trajectories the run kept in a group (its G); None for evaluation runs.
        incomplete_groups: evaluation runs: problems left out because they have fewer samples than the others
            (an unfinished run).
    """

    run: Path
    kind: str
    groups: list[list[Member]]
    keys: list[str]
    logged_keep: int | None = None
    incomplete_groups: int = 0


def _member(
    classes: Sequence[str],
    turns: Sequence[dict[str, Any]],
    reward: float | None,
    tokens: int,
    config: RocConfig,
    kept: bool | None,
) -> Member:
    calls = len(classes)
    failing = sum(1 for c in classes if c != "ok")
    p_err = failing / calls if calls else NO_CALL_ERROR_PENALTY
    blocks = sum(int(t.get("answer_blocks", 0) or 0) for t in turns)
    p_fmt = format_penalty(blocks, len(turns)) if turns or blocks == 0 else 1.0
    penalty = (p_err if config.use_error_penalty else 0.0) + (p_fmt if config.use_format_penalty else 0.0)
    return Member(reward, penalty, p_err, p_fmt, calls, failing, int(tokens or 0), kept)


def load_run(run_dir: str | Path, config: RocConfig | None = None) -> ReplayInput:
    """Read the groups of an RL run (``trajectories/step_*.jsonl``) or an evaluation run (``trajectories.jsonl``).

    Raises:
        FileNotFoundError: neither file layout is in ``run_dir``.
        ValueError: the files hold no trajectory.
    """
    run = Path(run_dir)
    cfg = config or RocConfig()
    grouped: dict[tuple[Any, ...], list[tuple[int, Member]]] = {}
    rl_groups = step_groups(run)
    if rl_groups:
        kind = "rl"
        for key, rows in rl_groups.items():
            for row in rows:
                reward = row.get("reward")
                m = _member(
                    row.get("tool_calls") or [],
                    row.get("turns") or [],
                    None if reward is None else float(reward),
                    row.get("model_tokens", 0),
                    cfg,
                    bool(row.get("kept", False)),
                )
                grouped.setdefault(key, []).append((int(row.get("sample", 0)), m))
    elif is_eval_run(run):
        kind = "eval"
        for row in read_samples(run)[0]:
            key = (str(row.get("benchmark", "")), str(row["problem_id"]))
            status = str((row.get("verdict") or {}).get("status", "ok"))
            reward = None if status in UNSCORED_VERDICTS else (1.0 if row.get("correct") else 0.0)
            m = _member(
                row.get("tool_classes") or [], row.get("turns") or [], reward, row.get("model_tokens", 0), cfg, None
            )
            grouped.setdefault(key, []).append((int(row.get("sample_index", 0)), m))
    else:
        raise FileNotFoundError(
            f"{run} holds neither {TRAJECTORY_DIR}/step_*_rank*.jsonl (an RL run with logging.log_trajectories: "
            f"true) nor {EVAL_TRAJECTORIES} (a tirl eval run)"
        )
    if not grouped:
        raise ValueError(f"{run}: no trajectories in the run's files")
    keys = sorted(grouped)
    incomplete = 0
    if kind == "eval":  # an unfinished (or resumed) eval: problems with fewer samples than the others are left out
        full = max(len(v) for v in grouped.values())
        incomplete = sum(1 for k in keys if len(grouped[k]) < full)
        keys = [k for k in keys if len(grouped[k]) == full]
    groups = [[m for _, m in sorted(grouped[k], key=lambda x: x[0])] for k in keys]
    logged = max(sum(bool(m.logged_kept) for m in g) for g in groups) if kind == "rl" else None
    return ReplayInput(run, kind, groups, ["/".join(map(str, k)) for k in keys], logged, incomplete)


def kept_metrics(kept: Sequence[Member]) -> dict[str, float]:
    """The metrics of one pooled kept set (every key of :data:`METRICS` but ``differs_from_random``; NaN when
    the set or its positives are empty)."""
    pos = [m for m in kept if m.positive]
    pos_calls = sum(m.calls for m in pos)

    def share(items: Sequence[Member], pred: Any) -> float:
        return sum(1 for m in items if pred(m)) / len(items) if items else math.nan

    return {
        "pos_with_failing_call": share(pos, lambda m: m.failing > 0),
        "failing_calls_in_pos": sum(m.failing for m in pos) / pos_calls if pos_calls else (0.0 if pos else math.nan),
        "calls_per_traj": sum(m.calls for m in kept) / len(kept) if kept else math.nan,
        "pos_without_call": share(pos, lambda m: m.calls == 0),
        "pos_format_violation": share(pos, lambda m: m.p_format > 0),
        "length": sum(m.tokens for m in kept) / len(kept) if kept else math.nan,
        "positive_share": share([m for m in kept if is_scored(m.reward)], lambda m: m.positive),
    }


def _signature(group: Sequence[Member], indices: Sequence[int]) -> list[tuple[float, float]]:
    """What RoC sees of a kept set: the rewards, and the penalties of the positives (it never ranks negatives)."""
    return sorted(
        (float(group[i].reward), round(group[i].penalty, 9) if group[i].positive else 0.0)  # type: ignore[arg-type]
        for i in indices
    )


def group_summary(groups: Sequence[Sequence[Member]], keep: int, config: RocConfig) -> dict[str, float]:
    """Counts that say whether RoC can act at all: groups, groups down-sampled (more than ``keep`` scored),
    groups with both classes, and groups where it can choose among positives (more positives than the paper
    quota and positives whose penalties differ); sampled positives and their failing-call share."""
    down = mixed = can_act = 0
    for g in groups:
        scored = [m for m in g if is_scored(m.reward)]
        pos = [m for m in scored if m.positive]
        n_neg = len(scored) - len(pos)
        if pos and n_neg:
            mixed += 1
        if len(scored) <= keep:
            continue
        down += 1
        if 2 * config.min_per_class > keep:
            continue
        pos_k, _ = class_quotas(len(pos), n_neg, keep, "paper", config.min_per_class)
        if len(pos) > pos_k and len({round(m.penalty, 9) for m in pos}) > 1:
            can_act += 1
    sampled_pos = [m for g in groups for m in g if m.positive]
    return {
        "groups": float(len(groups)),
        "trajectories": float(sum(len(g) for g in groups)),
        "groups_downsampled": float(down),
        "groups_mixed": float(mixed),
        "groups_roc_can_choose": float(can_act),
        "sampled_positives": float(len(sampled_pos)),
        "sampled_pos_with_failing_call": float(sum(1 for m in sampled_pos if m.failing > 0)),
    }


def _stats(values: Sequence[float]) -> dict[str, float | None]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": statistics.fmean(vals),
        "std": statistics.pstdev(vals) if len(vals) > 1 else 0.0,
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
    }


def replay(
    data: ReplayInput,
    keep: int | None = None,
    replays: int = 200,
    seed: int = 0,
    config: RocConfig | None = None,
    rules: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Replay the selection rules ``replays`` times on the run's groups.

    Args:
        data: from :func:`load_run`.
        keep: trajectories kept per group (K); default: the run's logged G for RL runs, else half the largest
            group (K of 2K samples).
        replays: repetitions of the stochastic rules (``random``, ``roc_paper``); each replay draws all groups.
        seed: base seed (replay ``r`` uses ``random.Random(f"roc-replay/{seed}/{r}")``).
        config: ``min_per_class`` and the penalty switches (default :class:`RocConfig`).
        rules: the rules replayed, one column each, in this order (names of :data:`tirl.algo.selection.RULES`);
            default :func:`replay_rules`. The draws of a replay are shared in this order, so another order gives
            other (equally distributed) numbers.

    Returns:
        The JSON-serialisable report: ``run``, ``kind``, ``keep``, ``replays``, ``seed``, ``min_per_class``,
        ``summary`` (:func:`group_summary`) and ``columns``: column -> metric -> ``{mean, std, min, max, n}``.

    Raises:
        ValueError: ``replays < 1``, ``keep < 1``, no group larger than ``keep`` (nothing to down-sample), or an
            unknown rule name.
    """
    cfg = config or RocConfig()
    chosen = tuple(rules) if rules is not None else replay_rules()
    for name in chosen:
        get_rule(name)  # an unknown name fails before any replay
    if replays < 1:
        raise ValueError(f"replays must be >= 1, got {replays}")
    largest = max(len(g) for g in data.groups)
    if keep is None:
        keep = data.logged_keep if data.kind == "rl" and data.logged_keep else max(1, largest // 2)
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep}")
    if largest <= keep:
        raise ValueError(
            f"nothing to down-sample: groups hold at most {largest} trajectories and keep is {keep} (a plain GRPO "
            "run samples only G; pass --keep smaller than the group, or replay an eval run with --samples 2K)"
        )
    cfg.validate(keep)
    groups = data.groups
    down = [i for i, g in enumerate(groups) if sum(1 for m in g if is_scored(m.reward)) > keep]
    columns: dict[str, dict[str, list[float]]] = {}
    columns["sampled"] = {k: [v] for k, v in kept_metrics([m for g in groups for m in g]).items()}
    if data.kind == "rl":
        columns["logged"] = {k: [v] for k, v in kept_metrics([m for g in groups for m in g if m.logged_kept]).items()}
    for rule in chosen:
        columns[rule] = {k: [] for k, _ in METRICS}
    for r in range(replays):
        rng = random.Random(f"roc-replay/{seed}/{r}")
        reference = [apply_rule("random", g, keep, rng, cfg).indices for g in groups]
        for rule in chosen:
            picks = [apply_rule(rule, g, keep, rng, cfg).indices for g in groups]
            for k, v in kept_metrics([g[i] for g, p in zip(groups, picks) for i in p]).items():
                columns[rule][k].append(v)
            differs = sum(_signature(groups[i], picks[i]) != _signature(groups[i], reference[i]) for i in down)
            columns[rule]["differs_from_random"].append(differs / len(down) if down else math.nan)
    return {
        "run": str(data.run),
        "kind": data.kind,
        "keep": keep,
        "replays": replays,
        "seed": seed,
        "min_per_class": cfg.min_per_class,
        "summary": {**group_summary(groups, keep, cfg), "incomplete_groups_left_out": float(data.incomplete_groups)},
        "columns": {col: {k: _stats(v) for k, v in metrics.items()} for col, metrics in columns.items()},
    }


def format_cell(stat: dict[str, float | None], key: str) -> str:
    """``mean ± std [min, max]`` of one metric (percentages for shares, plain for counts and lengths)."""
    if stat.get("mean") is None:
        return "n/a"
    pct = key not in ("calls_per_traj", "length")
    fmt = (lambda x: f"{100 * x:.1f}") if pct else (lambda x: f"{x:.2f}" if key == "calls_per_traj" else f"{x:.0f}")
    text = fmt(stat["mean"]) + ("%" if pct else "")
    if stat.get("n", 0) > 1 and (stat["max"] or 0) - (stat["min"] or 0) > 1e-12:
        text += f" ± {fmt(stat['std'])} [{fmt(stat['min'])}, {fmt(stat['max'])}]"
    return text


__all__ = [
    "METRICS",
    "Member",
    "ReplayInput",
    "UNSCORED_VERDICTS",
    "format_cell",
    "group_summary",
    "kept_metrics",
    "load_run",
    "replay",
    "replay_rules",
]
