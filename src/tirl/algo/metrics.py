"""Per-step training metrics of GRPO-RoC (framework-free: computed from trajectories, rewards and selections).

Covers the numbers one RL step reports (computed on one process from its groups; TRL averages them over
processes): reward and accuracy, the share of failing tool calls inside correct trajectories before and after
RoC selection (the report's Figure 4), p_err and p_format, response length in model tokens (mean, p90),
truncation rate, tool calls per trajectory, group outcomes (dropped, undersized, all correct, all wrong), and
the time split. The log they are written to, ``metrics.jsonl``, is :mod:`tirl.runs.metrics`'s; it does not plot
(:mod:`tirl.analysis.plot`).

Metric names (all floats):

``reward/mean``, ``accuracy``
    mean reward and share of correct trajectories among all sampled (before selection); ``reward/kept_mean``
    after selection.
``tool_error_in_correct/before``, ``tool_error_in_correct/after``
    failing tool calls (class not ``ok``) / all tool calls, pooled over correct trajectories, before and after
    selection (0 when the correct trajectories made no call).
``p_err/mean``, ``p_format/mean``
    mean penalties over sampled trajectories; ``p_format/correct_mean`` over correct ones.
``length/mean``, ``length/p90``, ``length/kept_mean``, ``length/kept_p90``
    response length in model tokens (loss-mask ones; tool tokens excluded), of the sampled and of the trained
    trajectories.
``turns/mean``, ``turns/kept_mean``, ``tool_calls/kept_per_traj``
    model turns per sampled and per trained trajectory; tool calls per trained trajectory (per sampled one:
    ``tool_calls/per_traj``). With ``tool_calls/per_traj`` and the ``length/`` pairs: the trained-vs-sampled
    distribution of the step (issue 42), which says whether the selection, or bounded-staleness rollouts,
    train on shorter or easier trajectories than were sampled. *Sampled* is the step's whole batch (all ``n``
    per problem, also those generated up to ``rollout.max_staleness`` versions earlier); *trained* (the
    ``kept`` names) is the ones kept by the selection rule that carry a model token (a kept trajectory without
    one fills its slot with a masked placeholder, so it is not trained on).
``truncation_rate``
    share of sampled trajectories that ended on the token budget or the context window.
``tool_calls/per_traj``, ``tool_calls/error_rate``, ``tool_calls/count``
    tool calls per sampled trajectory; failing share of all calls; calls.
``tool_calls/internal``
    tool calls of the sampled trajectories answered ``internal`` (the sandbox failed, not the model's code: a
    service restarted or unreachable past the client's retries), counted on this process.
``sandbox/failovers``, ``sandbox/resent``, ``sandbox/internal_retries``
    with a sandbox service: batches of calls moved to another server, re-sent to the same server after it came
    back, and calls re-sent after an ``internal`` answer, during this step's rollout (calls that met a restart
    and were then answered by a server; absent with the local pool).
``infra/masked``, ``infra/masked_share``, ``infra/masked_{tool_internal,verifier,engine}``
    trajectories masked for infrastructure failures (:mod:`tirl.algo.infra`; added by the rollout function).
``groups/dropped``, ``groups/undersized``, ``groups/all_correct``, ``groups/all_wrong``
    counts of groups this step on this process.
``reward/unscored``
    trajectories whose reward was None (verifier infrastructure failure), excluded from selection.
``audit/tool_output_tags``, ``audit/hedged_answers``, ``audit/probe_calls``, ``audit/failed_probe_calls``,
``audit/answer_in_tool_output``, ``audit/flagged``
    the reward-hacking audit of the step's sampled trajectories (:mod:`tirl.protocol.audit`; counts, added by
    the rollout function, never part of the reward).
``verify/<status>``, ``finish/<reason>``
    trajectories per verifier status that is not a plain verdict (:data:`COUNTED_STATUSES`), and the share of
    trajectories per finish reason (:func:`outcome_metrics`).
``time/rollout_s``, ``time/tool_exec_s``, ``time/verify_s``
    wall time of the multi-turn rollout (generation and tool calls interleaved), summed execution time of all
    tool calls (overlapping, so it can exceed the rollout wall time), wall time of verification.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from tirl.algo.roc import Candidate, Selection, is_scored
from tirl.protocol.types import FINISH_REASONS, Trajectory


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (``q`` in [0, 100]) of ``values``; 0.0 for an empty sequence."""
    if not values:
        return 0.0
    data = sorted(values)
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return float(data[lo] + (data[hi] - data[lo]) * (pos - lo))


def _mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def tool_error_share(trajectories: Iterable[Trajectory]) -> float:
    """Failing tool calls / all tool calls, pooled over ``trajectories`` (0.0 when there is no call)."""
    calls = failed = 0
    for traj in trajectories:
        for rec in traj.tool_call_records:
            calls += 1
            failed += rec.cls != "ok"
    return failed / calls if calls else 0.0


def step_metrics(
    trajectories: Sequence[Trajectory],
    rewards: Sequence[float | None],
    candidates: Sequence[Candidate],
    group_size: int,
    selections: Sequence[Selection],
) -> dict[str, float]:
    """Metrics of one step on one process (names in the module docstring).

    Args:
        trajectories: all sampled trajectories, problem-major: group g is ``[g*n, (g+1)*n)`` with
            ``n = len(trajectories) // len(selections)``.
        rewards: one per trajectory (None = unscorable).
        candidates: one per trajectory (penalties).
        group_size: G (the kept size), for reference only.
        selections: one per group; indices are within the group.

    Returns:
        A dict of finite floats.

    Raises:
        ValueError: lengths that do not line up.
    """
    n_traj = len(trajectories)
    if not (len(rewards) == len(candidates) == n_traj):
        raise ValueError("trajectories, rewards and candidates must have the same length")
    if selections and n_traj % len(selections):
        raise ValueError(f"{n_traj} trajectories do not split into {len(selections)} groups")
    per_group = n_traj // len(selections) if selections else 0
    correct = [is_scored(r) and float(r) > 0 for r in rewards]
    kept: list[int] = [g * per_group + i for g, sel in enumerate(selections) for i in sel.indices]
    scored_rewards = [float(r) for r in rewards if is_scored(r)]
    lengths = [float(t.num_model_tokens) for t in trajectories]
    calls = [float(len(t.tool_call_records)) for t in trajectories]
    turns = [float(len(t.turns)) for t in trajectories]
    # what the update sees: a kept trajectory with no model token becomes a masked placeholder slot
    # (tirl.train.rollout_func), so it is left out of the trained distribution
    trained = [i for i in kept if lengths[i] > 0]
    trained_lengths = [lengths[i] for i in trained]
    out = {
        "reward/mean": _mean(scored_rewards),
        "reward/kept_mean": _mean([float(r) for r in (rewards[i] for i in kept) if is_scored(r)]),
        "reward/unscored": float(n_traj - len(scored_rewards)),
        "accuracy": _mean([float(c) for c in correct]),
        "tool_error_in_correct/before": tool_error_share(t for t, c in zip(trajectories, correct) if c),
        "tool_error_in_correct/after": tool_error_share(trajectories[i] for i in kept if correct[i]),
        "p_err/mean": _mean([c.p_err for c in candidates]),
        "p_format/mean": _mean([c.p_format for c in candidates]),
        "p_format/correct_mean": _mean([c.p_format for c, ok in zip(candidates, correct) if ok]),
        "length/mean": _mean(lengths),
        "length/p90": percentile(lengths, 90),
        "length/kept_mean": _mean(trained_lengths),
        "length/kept_p90": percentile(trained_lengths, 90),
        "turns/mean": _mean(turns),
        "turns/kept_mean": _mean([turns[i] for i in trained]),
        "truncation_rate": _mean([float(t.truncated) for t in trajectories]),
        "tool_calls/per_traj": _mean(calls),
        "tool_calls/kept_per_traj": _mean([calls[i] for i in trained]),
        "tool_calls/error_rate": tool_error_share(trajectories),
        "tool_calls/count": float(sum(calls)),
        # the agent loop counts the calls answered internal (metadata["tool_internal_errors"])
        "tool_calls/internal": float(sum(int(t.metadata.get("tool_internal_errors", 0)) for t in trajectories)),
        "groups/count": float(len(selections)),
        "groups/dropped": float(sum(s.status in ("dropped_equal", "empty") for s in selections)),
        "groups/undersized": float(sum(s.status == "undersized" for s in selections)),
        "groups/all_correct": float(sum(s.n_pos > 0 and s.n_neg == 0 for s in selections)),
        "groups/all_wrong": float(sum(s.n_neg > 0 and s.n_pos == 0 for s in selections)),
        "kept/per_group": _mean([float(len(s.indices)) for s in selections]),
        "kept/target": float(group_size),
    }
    return out


COUNTED_STATUSES = (
    "timeout",
    "answer_timeout",
    "verifier_error",
    "answer_error",
    "verifier_bug",
    "unparsable_gold",
    "no_answer",
)
"""Verifier statuses counted each step as ``verify/<status>`` (:mod:`tirl.reward.types`)."""


def outcome_metrics(trajectories: Sequence[Trajectory], statuses: Sequence[str]) -> dict[str, float]:
    """How the step's trajectories ended: ``time/tool_exec_s`` (summed tool-call seconds), ``verify/<status>``
    (count per status of :data:`COUNTED_STATUSES`, 0 when absent) and ``finish/<reason>`` (share per finish
    reason of :data:`tirl.protocol.types.FINISH_REASONS`; 0 for no trajectory)."""
    tool_time = sum(
        rec.result.duration_s for t in trajectories for rec in t.tool_call_records if rec.result is not None
    )
    out = {"time/tool_exec_s": float(tool_time)}
    out.update({f"verify/{status}": float(sum(s == status for s in statuses)) for status in COUNTED_STATUSES})
    for reason in FINISH_REASONS:
        out[f"finish/{reason}"] = sum(t.finish_reason == reason for t in trajectories) / max(1, len(trajectories))
    return out


__all__ = ["COUNTED_STATUSES", "outcome_metrics", "percentile", "step_metrics", "tool_error_share"]
