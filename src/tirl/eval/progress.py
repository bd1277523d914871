"""Progress of a long evaluation as plain lines, for output that is not a terminal (logs, CI, ``| tee``).

A rich progress bar draws nothing when its console is not a terminal, so a 15-minute run would print nothing
until its table. :class:`LineProgress` prints one line at the start, then whenever a tenth of the work is done
or ``every_s`` seconds have passed since the last line, and one at the end::

    eval: 12/40 trajectories (30%), elapsed 2:31, ETA 5:52, acc 0.250

The ETA extrapolates the rate of the trajectories finished in this run (resumed ones are excluded).
"""

from __future__ import annotations

import time
from collections.abc import Callable


def _clock(seconds: float) -> str:
    seconds = int(max(0.0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class LineProgress:
    """Plain-text progress lines.

    Args:
        label: what is counted (``eval``, ``eval (no tools)``).
        total: trajectories in the run, resumed ones included.
        done: already done (resumed) at the start.
        write: where lines go (``print`` to the console by default).
        every_s: longest silence between two lines, seconds.
        clock: time source (tests pass a fake one).
    """

    def __init__(
        self,
        label: str,
        total: int,
        done: int = 0,
        write: Callable[[str], None] = print,
        every_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.label, self.total, self.done, self.start_done = label, total, done, done
        self.write, self.every_s, self.clock = write, every_s, clock
        self.started = self.last_time = clock()
        self.last_done = done
        self.write(self.line(""))

    def line(self, extra: str) -> str:
        """The progress line for the current counts (``extra`` is appended, e.g. the running accuracy)."""
        elapsed = self.clock() - self.started
        new = self.done - self.start_done
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = "-" if new <= 0 else _clock(elapsed / new * (self.total - self.done))
        tail = f", {extra}" if extra else ""
        return (
            f"{self.label}: {self.done}/{self.total} trajectories ({pct:.0f}%), elapsed {_clock(elapsed)}, "
            f"ETA {eta}{tail}"
        )

    def advance(self, extra: str = "") -> None:
        """Count one finished trajectory; print a line when a tenth more is done, the time is up, or at the end."""
        self.done += 1
        now = self.clock()
        step = max(1, self.total // 10)
        if self.done >= self.total or self.done - self.last_done >= step or now - self.last_time >= self.every_s:
            self.write(self.line(extra))
            self.last_time, self.last_done = now, self.done


__all__ = ["LineProgress"]
