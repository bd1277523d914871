"""Failures that are not the model's: which trajectories are kept out of the loss and out of the scores.

A trajectory touched by an infrastructure failure carries no information about the policy: its tool feedback,
its end or its grade came from tirl, not from the model. Training it as a wrong answer (reward 0) teaches the
model that calling the tool is bad when the sandbox is down; RoC's error penalty would count the outage against
it. So such a trajectory is *masked*: its reward is treated as unscorable (None), which keeps it out of RoC's
selection (never kept, not counted in its group, :mod:`tirl.algo.roc`) and out of its group's mean and spread
(:mod:`tirl.algo.advantages`); a slot it would have filled gets a placeholder with loss mask 0 and advantage 0.
Evaluation counts it apart from the model's failures.

The rule: **a failure is masked only when an independent control shows the infrastructure at fault.** Where
an exception was raised says nothing, since the policy chooses what raises: anything the model's text or its
programs can reproduce while the control succeeds is the model's (a tool ``error``, a ``rejected`` trajectory,
an ``answer_timeout`` or ``answer_error`` verdict: reward 0, never masked). The controls:

tool call answered ``internal``
    the same call again (:func:`tirl.rollout.agent_loop._control_tool_call`): an answer is the call's real
    outcome (``recovered``; the model never read the failure); a second ``internal`` is followed by the tool's
    own example call on an empty session: if that succeeds the call is charged (``error``), else the first
    answer stands and the trajectory is masked (``tool_internal``).
generation that failed
    the same request again (``recovered``), then the prompt alone for one token
    (:func:`tirl.rollout.agent_loop._generate_controlled`): if that is answered the engine refused what the model
    wrote (``rejected``, charged), else ``error``, masked (``engine``).
verification that missed its deadline or failed in the checking worker
    the reference compared with itself under the same deadline (``VerifierConfig.timeout_control``): if that
    finishes, the answer was the cause (``answer_timeout``, ``answer_error``: charged), else ``timeout`` /
    ``verifier_error`` stand, masked (``verifier``). An exception inside grading code (a verifier bug, whatever
    the answer) is never masked: reward 0 with its status.

Causes of a masked trajectory (:data:`INFRA_CAUSES`), checked in this order, after the controls:

``engine``
    the inference engine failed for the trajectory (``finish_reason == "error"``: a server that did not answer
    even the prompt alone).
``tool_internal``
    a tool call is still answered ``internal`` after its control (a worker pool, sandbox service or executor
    that failed the example call too; see :mod:`tirl.sandbox.types`). A call answered ``error``, ``timeout`` or
    ``killed``, or a call that could not be parsed, is the model's.
``verifier``
    the checking worker failed (``verifier_error``) or missed its deadline (``timeout``; with
    ``mask_verifier_timeouts=False`` a deadline counts as the model's, reward 0) and the control comparison of
    the reference with itself failed too.

Per step (:func:`masked_metrics`, :func:`control_metrics`): ``infra/masked*`` counts what stayed masked,
``infra/charged*`` what a control charged to the model, ``infra/recovered*`` what a retry answered; the
watch-dog stops a run where the masked share stays above ``watchdog.max_masked_share``, and names the charged
failures apart from the sandbox's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tirl.protocol.types import CONTROL_KINDS, CONTROL_OUTCOMES

INFRA_CAUSES: tuple[str, ...] = ("engine", "tool_internal", "verifier")
VERIFIER_CRASH_STATUSES = frozenset({"verifier_error"})
VERIFIER_DEADLINE_STATUSES = frozenset({"timeout"})


def is_internal(record: Any) -> bool:
    """Whether a :class:`tirl.protocol.ToolCallRecord` was answered ``internal`` (tirl failed, not the code)."""
    result = getattr(record, "result", None)
    return result is not None and getattr(result, "status", None) == "internal"


def infra_cause(
    trajectory: Any, verify_status: str | None = None, *, mask_verifier_timeouts: bool = True
) -> str | None:
    """The infrastructure failure that touched ``trajectory`` (one of :data:`INFRA_CAUSES`), or None when
    everything that happened to it was the model's doing.

    Args:
        trajectory: a finished :class:`tirl.protocol.Trajectory` (its ``finish_reason`` and tool-call records).
        verify_status: the verifier's status for its answer (``ok``, ``no_answer``, ``timeout``,
            ``verifier_error``, ...), None when it was not graded.
        mask_verifier_timeouts: count a verifier deadline as infrastructure (see the module docstring).
    """
    if getattr(trajectory, "finish_reason", None) == "error":
        return "engine"
    if any(is_internal(rec) for rec in getattr(trajectory, "tool_call_records", ())):
        return "tool_internal"
    if verify_status in VERIFIER_CRASH_STATUSES:
        return "verifier"
    if mask_verifier_timeouts and verify_status in VERIFIER_DEADLINE_STATUSES:
        return "verifier"
    return None


def masked_metrics(causes: Sequence[str | None]) -> dict[str, float]:
    """Per-step counts of masked trajectories: ``infra/masked`` (all causes), ``infra/masked_share`` (of all
    sampled), and ``infra/masked_<cause>`` for each cause (zeros included, so the keys are always there)."""
    n = len(causes)
    out = {f"infra/masked_{c}": float(sum(x == c for x in causes)) for c in INFRA_CAUSES}
    masked = float(sum(x is not None for x in causes))
    out["infra/masked"] = masked
    out["infra/masked_share"] = masked / n if n else 0.0
    return out


#: Statuses of a verdict that a control charged to the answer (reward 0, never masked).
VERIFIER_CHARGED_STATUSES = frozenset({"answer_timeout", "answer_error"})


def control_metrics(trajectories: Sequence[Any], verify_statuses: Sequence[str | None]) -> dict[str, float]:
    """Per-step counts of the controls' findings (every key present, zeros included).

    Args:
        trajectories: the step's trajectories (their ``metadata["controls"]``, written by the agent loop).
        verify_statuses: the verifier's status of each, same order (None when not graded).

    Returns:
        ``infra/{recovered,charged}_{tool,engine}``, ``infra/charged_verifier`` (``answer_timeout`` and
        ``answer_error`` verdicts), ``infra/charged`` and ``infra/recovered`` (the sums), and
        ``infra/controlled`` (every failure that went through a control: recovered + charged + still masked).
    """
    out: dict[str, float] = {}
    masked = 0.0
    for kind in CONTROL_KINDS:
        for outcome in CONTROL_OUTCOMES:
            total = float(
                sum(int((t.metadata or {}).get("controls", {}).get(f"{kind}_{outcome}", 0) or 0) for t in trajectories)
            )
            if outcome == "masked":
                masked += total
            else:
                out[f"infra/{outcome}_{kind}"] = total
    out["infra/charged_verifier"] = float(sum(s in VERIFIER_CHARGED_STATUSES for s in verify_statuses))
    masked += float(sum(s in VERIFIER_CRASH_STATUSES | VERIFIER_DEADLINE_STATUSES for s in verify_statuses))
    out["infra/charged"] = out["infra/charged_tool"] + out["infra/charged_engine"] + out["infra/charged_verifier"]
    out["infra/recovered"] = out["infra/recovered_tool"] + out["infra/recovered_engine"]
    out["infra/controlled"] = out["infra/charged"] + out["infra/recovered"] + masked
    return out


__all__ = [
    "CONTROL_KINDS",
    "CONTROL_OUTCOMES",
    "INFRA_CAUSES",
    "VERIFIER_CHARGED_STATUSES",
    "control_metrics",
    "infra_cause",
    "is_internal",
    "masked_metrics",
]
