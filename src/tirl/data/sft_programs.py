"""``programs``: generated SFT conversations in which one short Python program (loops, ``math``) answers the question.

Why: the packaged GSM8K set teaches the call format with one arithmetic ``print(expr)`` per step, and a model
SFT'd on it alone stopped writing programs: on the held-out ``toolmath`` problems it printed single
expressions where a loop or ``math.gcd`` was needed (experiments/cpu-learning-curve/README.md). The report's SFT
data has 165K real function calls; this set gives the small CPU recipe the same kind of example: a problem, one
call with a complete program, its output fed back, and the answer boxed from that output.

The families (:data:`FAMILIES`) practise the skills the toolmath kinds need (``math`` functions, digit loops over
``str``, prime tests, counting with ``sum(1 for ...)``, iteration) on different questions: none is a toolmath
kind, so the held-out split stays unseen. Each example's answer is what its program prints: the program is run
(``exec`` of the generated template, bounded loops) when the example is built. Rows are deterministic for a
seed; the source ``programs:N`` is the first N rows of seed :data:`SEED`.
"""

from __future__ import annotations

import contextlib
import io
import math
import random
from collections.abc import Callable

from tirl.protocol import ConversationTurn, ProtocolConfig
from tirl.protocol.config import resolve_config
from tirl.protocol.parse import render_tool_call
from tirl.protocol.response import render_tool_response
from tirl.sandbox.types import ExecutionResult

SEED = 20_261_130
"""Generator seed of the packaged source ``programs:N``."""


def _lcm(r: random.Random) -> tuple[str, str]:
    a, b = r.randint(120, 9_999), r.randint(120, 9_999)
    return (f"What is the least common multiple of ${a}$ and ${b}$?", f"import math\nprint(math.lcm({a}, {b}))")


def _factorial_digit_sum(r: random.Random) -> tuple[str, str]:
    n = r.randint(25, 160)
    return (
        f"What is the sum of the digits of ${n}!$?",
        f"import math\nprint(sum(int(d) for d in str(math.factorial({n}))))",
    )


def _trailing_zeros(r: random.Random) -> tuple[str, str]:
    n = r.randint(30, 900)
    return (
        f"How many zeros does ${n}!$ end with?",
        f"import math\ns = str(math.factorial({n}))\nprint(len(s) - len(s.rstrip('0')))",
    )


def _sum_of_primes(r: random.Random) -> tuple[str, str]:
    n = r.randint(100, 3_000)
    return (
        f"What is the sum of all prime numbers less than ${n}$?",
        f"total = 0\nfor n in range(2, {n}):\n    if all(n % d for d in range(2, int(n ** 0.5) + 1)):\n"
        f"        total += n\nprint(total)",
    )


def _sum_of_multiples(r: random.Random) -> tuple[str, str]:
    a, b = r.sample([3, 4, 5, 6, 7, 9, 11, 13], 2)
    n = r.randint(200, 20_000)
    return (
        f"What is the sum of all positive integers below ${n}$ that are multiples of ${a}$ or ${b}$?",
        f"print(sum(n for n in range(1, {n}) if n % {a} == 0 or n % {b} == 0))",
    )


def _fibonacci(r: random.Random) -> tuple[str, str]:
    k = r.randint(30, 120)
    return (
        f"The Fibonacci numbers are $F_1 = F_2 = 1$ and $F_n = F_{{n-1}} + F_{{n-2}}$. What is $F_{{{k}}}$?",
        f"a, b = 1, 1\nfor _ in range({k} - 2):\n    a, b = b, a + b\nprint(b)",
    )


def _binomial(r: random.Random) -> tuple[str, str]:
    n = r.randint(20, 60)
    k = r.randint(3, n // 2)
    return (
        f"In how many ways can ${k}$ people be chosen from a group of ${n}$?",
        f"import math\nprint(math.comb({n}, {k}))",
    )


def _count_squares(r: random.Random) -> tuple[str, str]:
    a = r.randint(100, 50_000)
    b = a + r.randint(10_000, 5_000_000)
    return (
        f"How many perfect squares are there between ${a}$ and ${b}$, inclusive?",
        f"import math\nprint(math.isqrt({b}) - math.isqrt({a} - 1))",
    )


def _digit_sum_count(r: random.Random) -> tuple[str, str]:
    n = r.randint(500, 5_000)
    s = r.randint(5, 20)
    return (
        f"How many integers from $1$ to ${n}$ have digits that add up to ${s}$?",
        f"print(sum(1 for n in range(1, {n} + 1) if sum(int(d) for d in str(n)) == {s}))",
    )


def _collatz(r: random.Random) -> tuple[str, str]:
    n = r.randint(20, 10_000)
    return (
        f"Starting from ${n}$, repeatedly halve the number if it is even, otherwise replace it by three times "
        f"it plus one. How many steps does it take to reach $1$?",
        f"n, steps = {n}, 0\nwhile n != 1:\n    n = n // 2 if n % 2 == 0 else 3 * n + 1\n    steps += 1\nprint(steps)",
    )


def _palindromes(r: random.Random) -> tuple[str, str]:
    a = r.randint(10, 5_000)
    b = a + r.randint(500, 20_000)
    return (
        f"How many palindromic numbers are there from ${a}$ to ${b}$, inclusive?",
        f"print(sum(1 for n in range({a}, {b} + 1) if str(n) == str(n)[::-1]))",
    )


FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "lcm": _lcm,
    "factorial_digit_sum": _factorial_digit_sum,
    "trailing_zeros": _trailing_zeros,
    "sum_of_primes": _sum_of_primes,
    "sum_of_multiples": _sum_of_multiples,
    "fibonacci": _fibonacci,
    "binomial": _binomial,
    "count_squares": _count_squares,
    "digit_sum_count": _digit_sum_count,
    "collatz": _collatz,
    "palindromes": _palindromes,
}
"""Family name -> ``rng -> (problem text, program)``."""

_OPENERS = (
    "A short program computes this exactly.",
    "I will let Python do the computation.",
    "This is easiest to compute with code.",
    "Let me compute it with a small program.",
)


def run_program(code: str) -> str:
    """What ``code`` prints (stdout), run in this process.

    Only for the templates of :data:`FAMILIES` (trusted, bounded loops), never for model output (that goes to
    the sandbox)."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        exec(compile(code, "<program>", "exec"), {"__name__": "__main__", "math": math})  # noqa: S102
    return buffer.getvalue()


def program_examples(n: int, seed: int = SEED, config: ProtocolConfig | None = None) -> list:
    """``n`` SFT examples (:class:`tirl.data.sft.SFTExample`, kind ``tool``), families in turn, seeded.

    Each has two assistant turns: an opening sentence and one tool call with the program (the program's output
    as the tool response), then ``The program printed N.</reason> <answer>The answer is \\boxed{N}.</answer>``.
    Ids are ``programs-<seed>-<i>``; the same ``(n, seed)`` gives the same rows, and the first rows do not
    depend on ``n``.
    """
    from tirl.data.sft import SFTExample

    cfg = resolve_config(config)
    rng = random.Random(seed)
    names = list(FAMILIES)
    out = []
    for i in range(n):
        family = names[i % len(names)]
        problem, code = FAMILIES[family](rng)
        stdout = run_program(code)
        answer = stdout.strip()
        call = render_tool_call(code, "", cfg)
        first = ConversationTurn(
            f"{rng.choice(_OPENERS)}\n{call}", [render_tool_response(ExecutionResult(status="ok", stdout=stdout), cfg)]
        )
        last = ConversationTurn(
            f"The program printed {answer}.{cfg.reason_close} {cfg.answer_open}"
            f"The answer is \\boxed{{{answer}}}.{cfg.answer_close}"
        )
        out.append(
            SFTExample(
                id=f"programs-{seed}-{i}",
                problem=problem,
                turns=[first, last],
                kind="tool",
                source=f"tirl generated ({family}, seed {seed})",
                answer=answer,
            )
        )
    return out


__all__ = ["FAMILIES", "SEED", "program_examples", "run_program"]
