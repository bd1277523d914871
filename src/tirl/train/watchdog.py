"""A watch-dog for long unattended RL runs: warn, then stop cleanly, when a run has gone wrong.

Covers :class:`WatchdogConfig` (the ``watchdog:`` section of an RL recipe) and :class:`RunWatchdog`, a pure
object fed each step's rollout metrics (the names of :mod:`tirl.algo.metrics`). Five conditions are watched,
each named in its messages by its recipe key (:data:`RECIPE_KEYS`):

* ``tool_errors`` (``watchdog.max_tool_error_rate``): the share of failing tool calls
  (``tool_calls/error_rate``) is above the limit in a step with at least :data:`MIN_CALLS_FOR_RATE` calls;
  the message blames the sandbox only when most failures were answered ``internal``;
* ``no_tool_calls`` (``watchdog.min_tool_calls_per_traj``): tool calls per trajectory at or below the limit:
  "collapsing" when an earlier step had more, else a policy that does not call the tool at all;
* ``context`` (``watchdog.max_context_rate``): the share of trajectories ended by the context window
  (``finish/context``) is above the limit: prompts plus responses do not fit the model;
* ``engine_errors`` (``watchdog.max_engine_error_rate``): the share of trajectories the engine failed
  (``finish/error``: an inference server that does not answer or refuses the requests) is above the limit;
* ``infra_masked`` (``watchdog.max_masked_share``): the share of trajectories masked for infrastructure
  failures (``infra/masked_share``: failures whose control failed too, :mod:`tirl.algo.infra`) is above the
  limit: the step trains on what is left. Failures a control charged to the model (``infra/charged*``) are the
  model's errors and count in the tool-error rate, never here.

Each step a condition holds logs a warning; after ``patience`` consecutive such steps the watch-dog asks for a
stop and :attr:`RunWatchdog.stop_reason` says why (``tirl train rl`` saves a checkpoint, prints the reason
and exits with status 3). A step where the condition does not hold resets its count. Not covered: crashes
(the trainer raises), throughput alarms.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

logger = logging.getLogger(__name__)


@dataclass
class WatchdogConfig:
    """When a run warns and stops (``watchdog:`` in an RL recipe).

    Attributes:
        enabled: watch at all.
        patience: consecutive steps a condition must hold before the run stops (it warns from the first).
        max_tool_error_rate: failing tool calls / all calls above this is an alarm (only steps with at least
            :data:`MIN_CALLS_FOR_RATE` calls).
        min_tool_calls_per_traj: tool calls per trajectory at or below this is an alarm (0 means "none at all").
        max_context_rate: share of trajectories ended by the context window above this is an alarm.
        max_engine_error_rate: share of trajectories ended by an engine error above this is an alarm.
        max_masked_share: share of trajectories masked for infrastructure failures (``infra/masked_share``,
            :mod:`tirl.algo.infra`) above this is an alarm.
    """

    enabled: bool = True
    patience: int = 3
    max_tool_error_rate: float = 0.9
    min_tool_calls_per_traj: float = 0.0
    max_context_rate: float = 0.5
    max_engine_error_rate: float = 0.5
    max_masked_share: float = 0.2

    def validate(self) -> None:
        """Raises ValueError for a patience below 1 or rates outside [0, 1]."""
        if self.patience < 1:
            raise ValueError(f"watchdog.patience must be >= 1, got {self.patience}")
        for name in ("max_tool_error_rate", "max_context_rate", "max_engine_error_rate", "max_masked_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"watchdog.{name} must be in [0, 1], got {getattr(self, name)}")
        if self.min_tool_calls_per_traj < 0:
            raise ValueError("watchdog.min_tool_calls_per_traj must be >= 0")


MIN_CALLS_FOR_RATE = 8
"""Fewer tool calls than this in a step say nothing about the sandbox: the error-rate alarm waits for more."""

RECIPE_KEYS = {
    "tool_errors": "max_tool_error_rate",
    "no_tool_calls": "min_tool_calls_per_traj",
    "context": "max_context_rate",
    "engine_errors": "max_engine_error_rate",
    "infra_masked": "max_masked_share",
}
"""The ``watchdog:`` recipe key of each condition's threshold (what the messages name)."""


@dataclass
class Alarm:
    """One condition that held at one step."""

    kind: str
    message: str


@dataclass
class RunWatchdog:
    """Counts consecutive alarming steps per condition (see the module docstring).

    Args:
        config: thresholds and patience.

    Attributes:
        streaks: consecutive alarming steps per condition kind.
        stop_reason: None while the run may go on; else the message of the condition that ran out of patience.
        tool_use_seen: some earlier step had more tool calls per trajectory than the limit (so a later step
            without is tool use collapsing, not a model that never used the tool).
    """

    config: WatchdogConfig = field(default_factory=WatchdogConfig)
    streaks: dict[str, int] = field(default_factory=dict)
    stop_reason: str | None = None
    tool_use_seen: bool = False

    def check(self, metrics: Mapping[str, float]) -> list[Alarm]:
        """The alarms of one step's metrics (no state change)."""
        c = self.config
        alarms: list[Alarm] = []
        per_traj = metrics.get("tool_calls/per_traj")
        err = metrics.get("tool_calls/error_rate")
        calls = metrics.get("tool_calls/count")
        internal = metrics.get("tool_calls/internal", 0.0) or 0.0
        enough = calls >= MIN_CALLS_FOR_RATE if calls is not None else bool(per_traj)
        if err is not None and per_traj and enough and err > c.max_tool_error_rate:
            what = (
                f"{err:.0%} of {calls:.0f} tool calls failed"
                if calls is not None
                else f"{err:.0%} of tool calls failed"
            )
            if calls and internal / calls > c.max_tool_error_rate / 2:
                cause = (
                    f"{internal:.0f} were answered internal by the sandbox: check it with "
                    "tirl sandbox doctor (or the service named by sandbox.backend)"
                )
            else:
                cause = "the programs the model writes fail (its errors, not the sandbox's)"
            charged = metrics.get("infra/charged_tool", 0.0) or 0.0
            if charged:
                # failures the sandbox answered ``internal`` whose control succeeded: the model's, not the sandbox's
                cause += f"; {charged:.0f} of them failed inside the tool while a control call succeeded (charged)"
            alarms.append(Alarm("tool_errors", f"{what} (limit {c.max_tool_error_rate:.0%}): {cause}"))
        if per_traj is not None and per_traj <= c.min_tool_calls_per_traj:
            if self.tool_use_seen:
                alarms.append(
                    Alarm(
                        "no_tool_calls",
                        f"{per_traj:.2f} tool calls per trajectory (limit "
                        f"{c.min_tool_calls_per_traj:.2f}): tool use is collapsing",
                    )
                )
            else:
                alarms.append(
                    Alarm(
                        "no_tool_calls",
                        f"{per_traj:.2f} tool calls per trajectory (limit "
                        f"{c.min_tool_calls_per_traj:.2f}) since the start: the "
                        "policy does not call the tool (start from a model trained "
                        "to, e.g. with tirl train sft, or check protocol.*)",
                    )
                )
        ctx = metrics.get("finish/context")
        if ctx is not None and ctx > c.max_context_rate:
            alarms.append(
                Alarm(
                    "context",
                    f"{ctx:.0%} of trajectories hit the context window (limit "
                    f"{c.max_context_rate:.0%}): raise rollout.context_window or lower "
                    "rollout.max_response_tokens",
                )
            )
        errors = metrics.get("finish/error")
        if errors is not None and errors > c.max_engine_error_rate:
            alarms.append(
                Alarm(
                    "engine_errors",
                    f"{errors:.0%} of trajectories failed in the engine (limit "
                    f"{c.max_engine_error_rate:.0%}): is the inference server up?",
                )
            )
        masked = metrics.get("infra/masked_share")
        if masked is not None and masked > c.max_masked_share:
            parts = ", ".join(
                f"{cause.replace('_', ' ')} {metrics.get('infra/masked_' + cause, 0.0):.0f}"
                for cause in ("tool_internal", "verifier", "engine")
            )
            alarms.append(
                Alarm(
                    "infra_masked",
                    f"{masked:.0%} of trajectories were masked for infrastructure "
                    f"failures that their controls confirmed ({parts}; limit {c.max_masked_share:.0%}): check "
                    "the sandbox, the verifier and the inference server",
                )
            )
        return alarms

    def observe(self, step: int, metrics: Mapping[str, float]) -> list[Alarm]:
        """Record one step: warn for each alarm, update the streaks, set :attr:`stop_reason` when a streak
        reaches ``patience``. Returns the step's alarms. Does nothing when disabled."""
        if not self.config.enabled:
            return []
        alarms = self.check(metrics)
        per_traj = metrics.get("tool_calls/per_traj")
        if per_traj is not None and per_traj > self.config.min_tool_calls_per_traj:
            self.tool_use_seen = True
        kinds = {a.kind for a in alarms}
        for kind in list(self.streaks):
            if kind not in kinds:
                self.streaks[kind] = 0
        for alarm in alarms:
            self.streaks[alarm.kind] = self.streaks.get(alarm.kind, 0) + 1
            n = self.streaks[alarm.kind]
            key = f"watchdog.{RECIPE_KEYS[alarm.kind]}"
            logger.warning(
                "watchdog, step %d: %s (%d of %d consecutive steps before the run stops; threshold %s)",
                step,
                alarm.message,
                n,
                self.config.patience,
                key,
            )
            if n >= self.config.patience and self.stop_reason is None:
                self.stop_reason = (
                    f"stopped at step {step}: {alarm.message}, for {n} consecutive steps (threshold {key})"
                )
        return alarms


class RunStopped(RuntimeError):
    """The watch-dog stopped the run; the message says why (a checkpoint of the last step was saved).

    Attributes:
        checkpoint: the ``checkpoint-N`` saved at the stop (None when not known).
        final: ``output_dir/final`` when the stop came on the run's last step and the final weights were
            written, else None.
    """

    checkpoint: Path | None = None
    final: Path | None = None


__all__ = ["Alarm", "MIN_CALLS_FOR_RATE", "RECIPE_KEYS", "RunStopped", "RunWatchdog", "WatchdogConfig"]
