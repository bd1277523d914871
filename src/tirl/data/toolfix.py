"""``toolfix``: generated problems whose first natural program often fails, with an error message that points to
the fix, and a fixed held-out split.

The task for measuring Resample-on-Correct (issue 26): RoC (rStar2-Agent, Sec. 3.2) filters positives by their
failing tool calls, so it can only show an effect where correct trajectories often *recover* from a failing call.
On ``toolmath`` (:mod:`tirl.data.toolmath`) one short program solves each problem and 1-6 % of the calls of
correct trajectories failed. Here the numbers are large on purpose: the obvious program converts an integer of
more than 4,300 digits to a string (``str(7**6000)`` for a digit sum), which Python 3.11+ refuses with
``ValueError: Exceeds the limit (4300 digits) for integer string conversion; use sys.set_int_max_str_digits()
to increase the limit``: the message names the fix (``sys.set_int_max_str_digits(0)``), and a digit loop over
``n % 10`` avoids it. Sizes are drawn on both sides of the limit, so some first programs work and the pass rate
of a small model lands in the middle. The kinds (:data:`TOOLFIX_KINDS`):

* ``digit_sum_power``: sum of the digits of ``b**e`` (1,500-9,000 digits, :data:`POWER_DIGITS`);
* ``digit_count_power``: how many times a digit occurs in ``b**e``;
* ``digit_sum_factorial``: sum of the digits of ``n!`` (``n`` 700-3,000: 1,700-9,100 digits, :data:`FACTORIAL_N`);
* ``leading_digits_power``: the first six digits of ``b**e``;
* ``trailing_zeros_factorial``: trailing zeros of ``n!`` (``n`` 1,000-6,000; Legendre's formula needs no
  string, ``str(math.factorial(n))`` fails above about 1,600);
* ``nonzero_digits_factorial``: digits of ``n!`` that are not zero.

* **Training** draws from the data source ``toolfix:N`` (N generated problems, seeded with the run's
  ``data.seed``; :func:`tirl.data.training.load_training_problems`), which drops every held-out text.
* **Held-out evaluation** (:func:`heldout_problems`, the benchmark ``toolfix``): :data:`HELDOUT_PER_KIND`
  problems of each kind generated with :data:`HELDOUT_SEED`, a seed no recipe trains with; built on the fly
  (deterministic: integer arithmetic and :class:`random.Random` only), never trained on.

Answers are computed exactly with Python integers (the generator lifts the conversion limit for itself). Not
covered: evaluation (``tirl eval --benchmarks toolfix``), the SFT data.
"""

from __future__ import annotations

import functools
import math
import random
import sys
from collections.abc import Callable, Sequence

from tirl.data.problem import Problem

HELDOUT_SEED = 9_100_001
"""Generator seed of the held-out split (training recipes use small seeds)."""

HELDOUT_PER_KIND = 10
"""Held-out problems per kind (60 in all)."""

_BASES = (2, 3, 7, 11, 13)

POWER_DIGITS = (1500, 9000)
"""Digit counts of the powers ``b**e``, drawn uniformly: about 37 % below the 4,300-digit limit (the first
program works), 63 % above it. The calibration (experiments/roc-ablation/README.md) moved the lower end from 3,000
(22 % below, the recovery SFT model at 18.2 % avg pass@1) to raise the pass rate into the issue's 20-60 % band."""

FACTORIAL_N = (700, 3000)
"""``n`` of the digit sums and non-zero digits of ``n!`` (1,700-9,100 digits; about 38 % below the limit at
``n`` ~ 1,580; was 1,100-3,000)."""

TRAILING_ZEROS_N = (1000, 6000)
"""``n`` of the trailing zeros of ``n!`` (Legendre's formula needs no string; ``str(math.factorial(n))`` works
below ``n`` ~ 1,580, 12 %; was 1,500-6,000)."""


def _digits(n: int) -> str:
    """The decimal digits of ``n``, however long (the generator is trusted code: the limit is lifted here only)."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        return str(n)
    finally:
        sys.set_int_max_str_digits(old)


def _exponent_for_digits(r: random.Random, base: int, lo: int, hi: int) -> int:
    """An exponent ``e`` so that ``base**e`` has between ``lo`` and ``hi`` digits."""
    return r.randint(math.ceil(lo / math.log10(base)), math.floor(hi / math.log10(base)))


def _gen_digit_sum_power(r: random.Random) -> tuple[str, int]:
    b = r.choice(_BASES)
    e = _exponent_for_digits(r, b, *POWER_DIGITS)
    return f"What is the sum of the digits of ${b}^{{{e}}}$?", sum(map(int, _digits(b**e)))


def _gen_digit_count_power(r: random.Random) -> tuple[str, int]:
    b, d = r.choice(_BASES), r.randint(0, 9)
    e = _exponent_for_digits(r, b, *POWER_DIGITS)
    return (
        f"How many times does the digit ${d}$ appear in the decimal representation of ${b}^{{{e}}}$?",
        _digits(b**e).count(str(d)),
    )


def _gen_digit_sum_factorial(r: random.Random) -> tuple[str, int]:
    n = r.randint(*FACTORIAL_N)
    return f"What is the sum of the digits of ${n}!$?", sum(map(int, _digits(math.factorial(n))))


def _gen_leading_digits_power(r: random.Random) -> tuple[str, int]:
    b = r.choice((2, 3, 7))
    e = _exponent_for_digits(r, b, *POWER_DIGITS)
    return f"What are the first six digits of ${b}^{{{e}}}$ (as a six-digit number)?", int(_digits(b**e)[:6])


def _gen_trailing_zeros_factorial(r: random.Random) -> tuple[str, int]:
    n = r.randint(*TRAILING_ZEROS_N)
    z, p = 0, 5
    while p <= n:
        z += n // p
        p *= 5
    return f"How many zeros does ${n}!$ end with?", z


def _gen_nonzero_digits_factorial(r: random.Random) -> tuple[str, int]:
    n = r.randint(*FACTORIAL_N)
    s = _digits(math.factorial(n))
    return f"How many of the decimal digits of ${n}!$ are not zero?", len(s) - s.count("0")


TOOLFIX_GENERATORS: dict[str, Callable[[random.Random], tuple[str, int]]] = {
    "digit_sum_power": _gen_digit_sum_power,
    "digit_count_power": _gen_digit_count_power,
    "digit_sum_factorial": _gen_digit_sum_factorial,
    "leading_digits_power": _gen_leading_digits_power,
    "trailing_zeros_factorial": _gen_trailing_zeros_factorial,
    "nonzero_digits_factorial": _gen_nonzero_digits_factorial,
}
"""Kind -> generator returning (problem text, exact integer answer)."""

TOOLFIX_KINDS: tuple[str, ...] = tuple(TOOLFIX_GENERATORS)
"""The kinds of the task, in the cycling order of :func:`toolfix_problems`."""


def toolfix_problems(n: int, seed: int = 0, kinds: Sequence[str] | None = None) -> list[Problem]:
    """``n`` generated problems cycling over ``kinds`` (default all of :data:`TOOLFIX_KINDS`); the same
    ``(n, seed, kinds)`` always gives the same problems (ids ``toolfix-<kind>-<seed>-<i>``, ``meta.kind``).

    Raises:
        ValueError: ``n < 0`` or an unknown kind.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    chosen = list(kinds) if kinds else list(TOOLFIX_KINDS)
    unknown = [k for k in chosen if k not in TOOLFIX_GENERATORS]
    if unknown:
        raise ValueError(f"unknown toolfix kinds {unknown}; known: {', '.join(TOOLFIX_KINDS)}")
    rng = random.Random(f"toolfix/{seed}")
    out = []
    for i in range(n):
        kind = chosen[i % len(chosen)]
        text, answer = TOOLFIX_GENERATORS[kind](rng)
        out.append(
            Problem(
                id=f"toolfix-{kind}-{seed}-{i}",
                problem=text,
                answer=str(answer),
                source=f"tirl toolfix (seed {seed})",
                meta={"kind": kind},
            )
        )
    return out


def heldout_problems() -> list[Problem]:
    """The held-out split: :data:`HELDOUT_PER_KIND` problems of each kind, generated with :data:`HELDOUT_SEED`,
    in kind-cycling order (the same list on every machine)."""
    return toolfix_problems(HELDOUT_PER_KIND * len(TOOLFIX_KINDS), seed=HELDOUT_SEED)


@functools.cache
def heldout_texts() -> frozenset[str]:
    """The problem texts of the held-out split, which training never uses."""
    return frozenset(p.problem for p in heldout_problems())


def training_problems(n: int, seed: int = 0, kinds: Sequence[str] | None = None) -> list[Problem]:
    """What the data source ``toolfix:N`` yields: :func:`toolfix_problems` without held-out texts (so possibly
    a few fewer than ``n``)."""
    reserved = heldout_texts()
    return [p for p in toolfix_problems(n, seed=seed, kinds=kinds) if p.problem not in reserved]


__all__ = [
    "HELDOUT_PER_KIND",
    "HELDOUT_SEED",
    "TOOLFIX_GENERATORS",
    "TOOLFIX_KINDS",
    "heldout_problems",
    "heldout_texts",
    "toolfix_problems",
    "training_problems",
]
