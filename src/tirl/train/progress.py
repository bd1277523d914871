"""Progress of one RL step's rollout, as plain lines: a CPU step takes minutes, and nothing else is printed until
the step's line.

Covers :class:`RolloutProgress`, fed each finished trajectory by the agent loop (its ``on_trajectory``
callback, :class:`tirl.train.rollout_func.AgentLoopSource`)::

    cpu-toolmath-roc step 3/60 rollout: 12/32 trajectories (38%), 17 tool calls, elapsed 0:41, ETA 1:07

Quiet while the rollout is quick: the first line comes only once :data:`FIRST_LINE_S` seconds have passed (a GPU
step's rollout of a few seconds prints nothing), then one whenever a tenth more is done or :data:`EVERY_S`
seconds have passed (a heartbeat thread prints it even when no trajectory finished: the in-process engine
finishes them in batches), and one at the end once any was printed. The ETA extrapolates the rate so far. Not
covered: the update that follows the rollout (the step's own line gives its time).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import Any

FIRST_LINE_S = 15.0
"""Seconds of a rollout before its first progress line: shorter rollouts print none."""

EVERY_S = 30.0
"""Longest silence between two progress lines once they have started, seconds."""


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _calls(trajectory: Any) -> int:
    """Tool calls of a finished trajectory (``Trajectory.tool_call_records``); 0 for anything else: a progress
    line must never fail a rollout."""
    records = getattr(trajectory, "tool_call_records", None)
    return len(records) if isinstance(records, list) else 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


class RolloutProgress:
    """Counts one rollout's finished trajectories and their tool calls; prints lines as the module says.

    Args:
        label: what the lines begin with (``cpu-toolmath-roc step 3/60 rollout``).
        total: trajectories the rollout samples.
        write: where lines go (stderr by default).
        first_line_s: seconds before the first line (default :data:`FIRST_LINE_S`, read at construction).
        every_s: longest silence between lines once started (default :data:`EVERY_S`).
        clock: time source in seconds (tests pass a fake one).

    Attributes:
        done: trajectories finished so far.
        tool_calls: their tool calls (parse errors included: each is a call the model wrote).
        lines: lines printed so far.
    """

    def __init__(
        self,
        label: str,
        total: int,
        write: Callable[[str], None] = _stderr,
        first_line_s: float | None = None,
        every_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.write, self.clock = label, total, write, clock
        self.first_line_s = FIRST_LINE_S if first_line_s is None else first_line_s
        self.every_s = EVERY_S if every_s is None else every_s
        self.started = self.last_time = clock()
        self.done = self.tool_calls = self.last_done = self.lines = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def line(self) -> str:
        """The progress line for the counts now."""
        elapsed = self.clock() - self.started
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = "-" if self.done <= 0 else _clock(elapsed / self.done * (self.total - self.done))
        return (
            f"{self.label}: {self.done}/{self.total} trajectories ({pct:.0f}%), {self.tool_calls} tool calls, "
            f"elapsed {_clock(elapsed)}, ETA {eta}"
        )

    def advance(self, trajectory: Any = None) -> None:
        """Count one finished trajectory (its tool calls from ``trajectory.tool_call_records`` when given) and
        print a line when it is due."""
        with self._lock:
            self.done += 1
            self.tool_calls += _calls(trajectory)
            now = self.clock()
            if now - self.started < self.first_line_s:
                return  # quick so far: nothing to say
            tenth = max(1, self.total // 10)
            end = self.done >= self.total
            if self.lines == 0 or end or self.done - self.last_done >= tenth or now - self.last_time >= self.every_s:
                self._print(now)

    def _print(self, now: float) -> None:
        self.write(self.line())
        self.lines += 1
        self.last_time, self.last_done = now, self.done

    def tick(self) -> None:
        """Print a line if the rollout has run ``first_line_s`` and nothing was printed for ``every_s`` (what the
        heartbeat calls)."""
        with self._lock:
            now = self.clock()
            if self.done < self.total and now - self.started >= self.first_line_s:
                if self.lines == 0 or now - self.last_time >= self.every_s:
                    self._print(now)

    def __enter__(self) -> RolloutProgress:
        """Start the heartbeat (a daemon thread calling :meth:`tick` every second)."""

        def beat() -> None:
            while not self._stop.wait(1.0):
                self.tick()

        self._heartbeat = threading.Thread(target=beat, name="tirl-rollout-progress", daemon=True)
        self._heartbeat.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        """Stop the heartbeat."""
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=2.0)


__all__ = ["EVERY_S", "FIRST_LINE_S", "RolloutProgress"]
