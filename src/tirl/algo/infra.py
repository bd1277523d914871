"""Failures that are not the model's: which trajectories are kept out of the loss and out of the scores.

A trajectory touched by an infrastructure failure carries no information about the policy: its tool feedback,
its end or its grade came from tirl, not from the model. Training it as a wrong answer (reward 0) teaches the
model that calling the tool is bad when the sandbox is down; RoC's error penalty would count the outage against
it. So such a trajectory is *masked*: its reward is treated as unscorable (None), which keeps it out of RoC's
selection (never kept, not counted in its group, :mod:`tirl.algo.roc`) and out of its group's mean and spread
(:mod:`tirl.algo.advantages`); a slot it would have filled gets a placeholder with loss mask 0 and advantage 0.
Evaluation counts it apart from the model's failures.

Causes (:data:`INFRA_CAUSES`), checked in this order:

``engine``
    the inference engine failed for the trajectory (``finish_reason == "error"``: a server that did not answer
    or refused the request).
``tool_internal``
    a tool call was answered ``internal`` by the executor (a worker died, the sandbox service was unreachable
    or restarting after the client's retries, a malformed request; see :mod:`tirl.sandbox.types`). A call
    answered ``error``, ``timeout`` or ``killed``, or a call that could not be parsed, is the model's.
``verifier``
    the verifier crashed (``verifier_error``) or missed its deadline (``timeout``; with
    ``mask_verifier_timeouts=False`` a deadline counts as the model's, reward 0). A deadline that a control
    comparison of the reference with itself shows to be the answer's doing is ``answer_timeout``: the model's,
    reward 0, never masked.

The adversary's view: the policy cannot produce ``internal`` by what it writes (the sandbox answers a
program's own failures ``error``/``timeout``/``killed``, and a program cannot pass its failure off as tirl's;
see :mod:`tirl.sandbox.worker`), and an answer written to time the symbolic comparison out (200 nested
braces, ``\\Gamma(10^{7})``: a masked trajectory gets no gradient, so it would escape the negative reward of a
wrong answer) is caught by the verifier's control comparison (``VerifierConfig.timeout_control``:
``answer_timeout``). What stays masked is a deadline the reference itself or the machine's load caused; the
share masked is logged each step (``infra/masked_share``) and the watch-dog stops a run where it stays above
``watchdog.max_masked_share``; a recipe that wants every deadline graded as wrong sets
``rollout.mask_verifier_timeouts: false``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

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


__all__ = ["INFRA_CAUSES", "infra_cause", "is_internal", "masked_metrics"]
