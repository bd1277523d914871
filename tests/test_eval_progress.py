"""Plain progress lines for evaluations whose output is not a terminal."""

from __future__ import annotations

from tirl.eval.progress import LineProgress


class FakeClock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_lines_at_start_each_tenth_and_end_with_eta():
    out: list[str] = []
    clock = FakeClock()
    p = LineProgress("eval", 20, write=out.append, every_s=1e9, clock=clock)
    for _ in range(20):
        clock.t += 3.0
        p.advance("acc 0.5")
    assert out[0].startswith("eval: 0/20 trajectories (0%), elapsed 0:00, ETA -")
    assert len(out) == 1 + 10  # one per 2 trajectories (a tenth of 20)
    assert out[1] == "eval: 2/20 trajectories (10%), elapsed 0:06, ETA 0:54, acc 0.5"
    assert out[-1].startswith("eval: 20/20 trajectories (100%), elapsed 1:00, ETA 0:00")


def test_a_long_silence_prints_a_line_even_without_a_tenth_done():
    out: list[str] = []
    clock = FakeClock()
    p = LineProgress("eval", 1000, write=out.append, every_s=30.0, clock=clock)
    clock.t += 31.0
    p.advance()
    assert len(out) == 2 and "1/1000" in out[1]


def test_resumed_trajectories_count_as_done_but_not_in_the_rate():
    out: list[str] = []
    clock = FakeClock()
    p = LineProgress("eval", 10, done=8, write=out.append, clock=clock)
    clock.t += 10.0
    p.advance()
    assert "9/10" in out[-1] and "ETA 0:10" in out[-1]
