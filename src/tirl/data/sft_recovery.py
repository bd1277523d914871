"""``programs_recovery``: generated SFT conversations in which the first program fails, the model reads the error and
a second program fixes it.

Why: the SFT'd model ``qwen2.5-coder-0.5b-tirl-sft`` got 0 of 14 samples right on the ``toolfix`` task, and after
a failing call it answered in the next turn (5 of 7 times) instead of reading the error
(experiments/roc-ablation/README.md, "Calibration"): its generated SFT data (:mod:`tirl.data.sft_programs`) is one
call with a complete program, then the answer, and never shows a second call after an error. These rows show one:

1. the problem; an opening sentence and a first call whose program fails;
2. the tool's error, rendered as the agent loop renders it at train time
   (:func:`tirl.protocol.response.render_tool_response` of the sandbox's result);
3. a short sentence that reads the error and names the fix, then a second call with the fixed program;
4. its output, then ``The program printed N.</reason> <answer>The answer is \\boxed{N}.</answer>``.

The errors are real: each program is run when the row is built (:func:`run_like_sandbox`: ``exec`` in this
process as the sandbox's call process runs it, same file name ``<code>``, same compact traceback from
:func:`tirl.sandbox.runner.format_user_traceback`, Python's default 4,300-digit limit on integer-to-string
conversion), so the traceback in the tool response is the one the sandbox returns for the same code
(``tests/test_sft_recovery.py`` compares them with a real :class:`tirl.sandbox.LocalSandbox`). The one exception
is the brute force that runs past the tool's time limit: it is not run (it would take hours); its response is the
sandbox's timeout rendered for a call stopped at the limit, ``TimeoutError: the code did not finish within the
time limit (5.0 s) and was stopped.`` (``tool_timeout_s``, 5 s in the CPU recipes).

The families (:data:`RECOVERY_FAMILIES`) and their errors:

* 4,300-digit limit (``ValueError: Exceeds the limit (4300 digits) for integer string conversion; use
  sys.set_int_max_str_digits() to increase the limit``), fixed by ``sys.set_int_max_str_digits(0)`` or a digit
  loop over ``divmod(x, 10)``: digit sums of Fibonacci numbers ``F_n`` (``n`` 21,000-45,000), digit sums of
  binomials ``C(n, k)`` (15,000-30,000 choose about half), odd digits of ``a**e + b**f`` and digit counts of
  ``a**e * b**f`` (bases 5, 6, 17, 19: none is a toolfix base), digit sums of products ``m * (m+1) * ... * n``
  (``m >= 1000``, so never a factorial);
* ``NameError: name 'math' is not defined`` (a missing ``import math``): the lcm of ``1..n``, counts of integers
  coprime to ``N``;
* ``SyntaxError`` from ``n!`` written in Python: ``n! mod p`` (``p`` a prime over ``n``);
* ``ZeroDivisionError`` from a range that starts at 0: sums of remainders ``N mod k``;
* a timeout of a loop over 10^10-10^13 numbers, replaced by a formula: sums of squares, counts of multiples.

None is a :mod:`tirl.data.toolfix` kind (digit sums and digit counts of ``b**e``, digit sums and non-zero digits
of ``n!``, leading digits of ``b**e``, trailing zeros of ``n!``), so the toolfix held-out split stays unseen. Rows
are deterministic for a seed; the source ``programs_recovery:N`` is the first N rows of seed :data:`SEED`.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import linecache
import math
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass

from tirl.protocol import ConversationTurn, ProtocolConfig
from tirl.protocol.config import resolve_config
from tirl.protocol.parse import render_tool_call
from tirl.protocol.response import render_tool_response
from tirl.sandbox.runner import FILENAME, format_user_traceback
from tirl.sandbox.types import ExecutionResult

SEED = 20_261_201
"""Generator seed of the packaged source ``programs_recovery:N``."""

DEFAULT_TOOL_TIMEOUT_S = 5.0
"""The tool's time limit the simulated timeouts are rendered with (``rollout.tool_timeout_s`` of the CPU recipes)."""

INT_STR_LIMIT = sys.int_info.default_max_str_digits
"""Python's default limit on integer-to-string conversion (4,300 digits), the sandbox's call processes' limit."""

_BASES = (5, 6, 17, 19)  # toolfix uses 2, 3, 7, 11, 13


@dataclass(frozen=True)
class Recovery:
    """One recovery conversation before it is run.

    Attributes:
        problem: the user message.
        first: the program of the first call, which fails.
        error: the exception class the first program raises (``ValueError``...), or ``timeout`` for a brute force
            that runs past the tool's time limit (not run).
        reading: the sentence that reads the error and names the fix (before the second call).
        fix: the program of the second call, which prints the answer.
    """

    problem: str
    first: str
    error: str
    reading: str
    fix: str


_LIMIT_READ_SET = (
    "The number has more than 4300 digits, over Python's limit for converting an integer to a string. The error "
    "names the fix: `sys.set_int_max_str_digits(0)` removes the limit.",
    "The error says the integer is too long for `str()` (the 4300-digit limit) and how to raise the limit, so I "
    "will call `sys.set_int_max_str_digits(0)` first.",
)
_LIMIT_READ_LOOP = (
    "The number has more than 4300 digits, so `str()` refuses to convert it. I will take its digits with "
    "`divmod(x, 10)` instead, which needs no string.",
    "Converting an integer of over 4300 digits to a string raises this error. A loop that takes the last digit "
    "with `divmod(x, 10)` avoids the conversion.",
)


def _digit_sum_loop(expr: str, prelude: str = "") -> str:
    return f"{prelude}x = {expr}\ntotal = 0\nwhile x:\n    x, d = divmod(x, 10)\n    total += d\nprint(total)"


def _lift(code: str) -> str:
    return f"import sys\nsys.set_int_max_str_digits(0)\n{code}"


def _fibonacci_digit_sum(r: random.Random) -> Recovery:
    n = r.randint(21_000, 45_000)  # F_21000 has 4,389 digits
    loop = f"a, b = 1, 1\nfor _ in range({n} - 2):\n    a, b = b, a + b\n"
    return Recovery(
        f"The Fibonacci numbers are $F_1 = F_2 = 1$ and $F_n = F_{{n-1}} + F_{{n-2}}$. What is the sum of the "
        f"digits of $F_{{{n}}}$?",
        f"{loop}print(sum(int(d) for d in str(b)))",
        "ValueError",
        r.choice(_LIMIT_READ_SET),
        _lift(f"{loop}print(sum(int(d) for d in str(b)))"),
    )


def _binomial_digit_sum(r: random.Random) -> Recovery:
    while True:
        n = r.randint(15_000, 30_000)
        k = n // 2 - r.randint(0, n // 20)
        if math.comb(n, k).bit_length() * math.log10(2) > INT_STR_LIMIT + 100:
            break
    return Recovery(
        f"What is the sum of the digits of $\\binom{{{n}}}{{{k}}}$?",
        f"import math\nprint(sum(int(d) for d in str(math.comb({n}, {k}))))",
        "ValueError",
        r.choice(_LIMIT_READ_LOOP),
        _digit_sum_loop(f"math.comb({n}, {k})", "import math\n"),
    )


def _exponent(r: random.Random, base: int, lo: int, hi: int) -> int:
    return r.randint(math.ceil(lo / math.log10(base)), math.floor(hi / math.log10(base)))


def _power_sum_odd_digits(r: random.Random) -> Recovery:
    a, b = r.sample(_BASES, 2)
    e, f = _exponent(r, a, 4_500, 8_000), _exponent(r, b, 2_000, 8_000)
    body = f"s = str({a}**{e} + {b}**{f})\nprint(sum(1 for d in s if d in '13579'))"
    return Recovery(
        f"How many of the decimal digits of ${a}^{{{e}}} + {b}^{{{f}}}$ are odd?",
        body,
        "ValueError",
        r.choice(_LIMIT_READ_SET),
        _lift(body),
    )


def _power_product_digit_count(r: random.Random) -> Recovery:
    a, b = r.sample(_BASES, 2)
    e, f = _exponent(r, a, 2_500, 5_000), _exponent(r, b, 2_500, 5_000)
    body = f"print(len(str({a}**{e} * {b}**{f})))"
    return Recovery(
        f"How many digits does ${a}^{{{e}}} \\cdot {b}^{{{f}}}$ have?",
        body,
        "ValueError",
        r.choice(_LIMIT_READ_SET),
        _lift(body),
    )


def _range_product_digit_sum(r: random.Random) -> Recovery:
    m = r.randint(1_000, 3_000)
    n = m + r.randint(1_400, 2_400)  # 1,400 factors of at least 4 digits: over 4,300 digits
    return Recovery(
        f"What is the sum of the digits of the product ${m} \\cdot {m + 1} \\cdots {n}$ of all integers from ${m}$ "
        f"to ${n}$?",
        f"import math\nprint(sum(int(d) for d in str(math.prod(range({m}, {n} + 1)))))",
        "ValueError",
        r.choice(_LIMIT_READ_LOOP),
        _digit_sum_loop(f"math.prod(range({m}, {n} + 1))", "import math\n"),
    )


_IMPORT_READ = (
    "The error says `math` is not defined: I forgot `import math`.",
    "`math` is not defined because the program never imported it. I will add `import math` at the top.",
)


def _lcm_range(r: random.Random) -> Recovery:
    n = r.randint(20, 80)
    body = f"print(math.lcm(*range(1, {n} + 1)))"
    return Recovery(
        f"What is the least common multiple of all integers from $1$ to ${n}$?",
        body,
        "NameError",
        r.choice(_IMPORT_READ),
        f"import math\n{body}",
    )


def _coprime_count(r: random.Random) -> Recovery:
    n = r.randint(1_000, 200_000)
    body = f"print(sum(1 for k in range(1, {n} + 1) if math.gcd(k, {n}) == 1))"
    return Recovery(
        f"How many integers from $1$ to ${n}$ have no common factor with ${n}$ other than $1$?",
        body,
        "NameError",
        r.choice(_IMPORT_READ),
        f"import math\n{body}",
    )


def _factorial_remainder(r: random.Random) -> Recovery:
    n = r.randint(30, 400)
    m = r.randint(100_000, 9_999_999)
    while any(m % p == 0 for p in range(2, math.isqrt(m) + 1)):  # a prime modulus: the remainder is never 0
        m += 1
    return Recovery(
        f"What is the remainder when ${n}!$ is divided by ${m}$?",
        f"print({n}! % {m})",
        "SyntaxError",
        r.choice(
            (
                f"`{n}!` is not Python syntax. The factorial is `math.factorial({n})`.",
                f"Python has no `!` operator, hence the syntax error; `math.factorial({n})` computes {n}!.",
            )
        ),
        f"import math\nprint(math.factorial({n}) % {m})",
    )


def _remainder_sum(r: random.Random) -> Recovery:
    n = r.randint(10_000, 10_000_000)
    m = r.randint(100, 5_000)
    return Recovery(
        f"What is the sum of the remainders when ${n}$ is divided by each of the integers $1, 2, \\ldots, {m}$?",
        f"print(sum({n} % k for k in range({m} + 1)))",
        "ZeroDivisionError",
        r.choice(
            (
                f"The range starts at 0, so the program divided by zero. The divisors are 1 to {m}: the range "
                f"must start at 1.",
                "`range(...)` starts at 0 and `% 0` is a division by zero; the divisors start at 1.",
            )
        ),
        f"print(sum({n} % k for k in range(1, {m} + 1)))",
    )


def _big_n(r: random.Random) -> int:
    return r.randint(1, 9) * 10 ** r.randint(10, 13) + r.randint(0, 10**9)


_TIMEOUT_READ = (
    "A loop over {n} numbers cannot finish within the time limit. Without a loop: {f}.",
    "The brute force timed out: {n} iterations are far too many. I will use {f} instead.",
)


def _sum_of_squares(r: random.Random) -> Recovery:
    n = _big_n(r)
    return Recovery(
        f"What is $1^2 + 2^2 + 3^2 + \\cdots + {n}^2$?",
        f"total = 0\nfor k in range(1, {n} + 1):\n    total += k * k\nprint(total)",
        "timeout",
        r.choice(_TIMEOUT_READ).format(n=n, f="the formula $1^2 + \\cdots + n^2 = n(n+1)(2n+1)/6$"),
        f"n = {n}\nprint(n * (n + 1) * (2 * n + 1) // 6)",
    )


def _multiples_count(r: random.Random) -> Recovery:
    n = _big_n(r)
    a, b = r.sample([3, 4, 6, 7, 9, 11, 13, 15], 2)
    return Recovery(
        f"How many integers from $1$ to ${n}$ are divisible by ${a}$ or by ${b}$?",
        f"print(sum(1 for k in range(1, {n} + 1) if k % {a} == 0 or k % {b} == 0))",
        "timeout",
        r.choice(_TIMEOUT_READ).format(
            n=n,
            f="inclusion-exclusion, $\\lfloor n/a \\rfloor + \\lfloor n/b \\rfloor "
            "- \\lfloor n/\\mathrm{lcm}(a, b) \\rfloor$",
        ),
        f"import math\nn = {n}\nprint(n // {a} + n // {b} - n // math.lcm({a}, {b}))",
    )


RECOVERY_FAMILIES: dict[str, Callable[[random.Random], Recovery]] = {
    "fibonacci_digit_sum": _fibonacci_digit_sum,
    "lcm_range": _lcm_range,
    "binomial_digit_sum": _binomial_digit_sum,
    "factorial_remainder": _factorial_remainder,
    "power_sum_odd_digits": _power_sum_odd_digits,
    "remainder_sum": _remainder_sum,
    "power_product_digit_count": _power_product_digit_count,
    "sum_of_squares": _sum_of_squares,
    "range_product_digit_sum": _range_product_digit_sum,
    "coprime_count": _coprime_count,
    "multiples_count": _multiples_count,
}
"""Family name -> ``rng -> Recovery`` (a failing first program, the sentence reading its error, the fix)."""

_OPENERS = (
    "A short program computes this exactly.",
    "I will let Python do the computation.",
    "This is easiest to compute with code.",
    "Let me compute it with a small program.",
)


def run_like_sandbox(code: str) -> ExecutionResult:
    """Run trusted ``code`` in this process as the sandbox's call process would, and return its result.

    Like :func:`tirl.sandbox.runner.execute`: the code is parsed and compiled as ``<code>`` and run as
    ``__main__`` in a fresh namespace under Python's default 4,300-digit limit; an uncaught exception gives status
    ``error``, ``exit_code`` 1 and the compact traceback of :func:`~tirl.sandbox.runner.format_user_traceback`
    (the user's frames with their source lines, then ``Type: message``). The process's digit limit and
    ``linecache`` are restored afterwards. Only for the templates of :data:`RECOVERY_FAMILIES` (bounded, fast, no
    final-expression display), never for model output (that goes to the sandbox).
    """
    buffer = io.StringIO()
    old_limit = sys.get_int_max_str_digits()
    old_cache = linecache.cache.get(FILENAME)
    linecache.cache[FILENAME] = (len(code), None, code.splitlines(True), FILENAME)
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        sys.set_int_max_str_digits(INT_STR_LIMIT)
        with contextlib.redirect_stdout(buffer):
            try:
                exec(compile(ast.parse(code, FILENAME), FILENAME, "exec", dont_inherit=True), namespace)  # noqa: S102
            except Exception as exc:  # noqa: BLE001 - what the code raises is the result
                return ExecutionResult(
                    status="error",
                    stdout=buffer.getvalue(),
                    error_type=type(exc).__name__,
                    traceback=format_user_traceback(exc),
                    exit_code=1,
                )
        return ExecutionResult(status="ok", stdout=buffer.getvalue(), exit_code=0)
    finally:
        sys.set_int_max_str_digits(old_limit)
        if old_cache is None:
            linecache.cache.pop(FILENAME, None)
        else:
            linecache.cache[FILENAME] = old_cache


def first_result(rec: Recovery, tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S) -> ExecutionResult:
    """The result of ``rec``'s first program: run (:func:`run_like_sandbox`), or for ``timeout`` the sandbox's
    result of a call stopped at the limit (no output, ``duration_s = tool_timeout_s``).

    Raises:
        RuntimeError: the program does not fail with ``rec.error`` (the template is wrong).
    """
    if rec.error == "timeout":
        return ExecutionResult(
            status="timeout",
            duration_s=tool_timeout_s,
            exit_code=-9,
            stderr=f"tirl-sandbox: timeout: the code ran past its {tool_timeout_s:g} s limit and was killed\n",
        )  # what the sandbox returns (not shown to the model)
    result = run_like_sandbox(rec.first)
    if result.status != "error" or result.error_type != rec.error:
        raise RuntimeError(
            f"the first program of {rec.problem!r} gave {result.status}/{result.error_type}, expected {rec.error}"
        )
    return result


def recovery_examples(
    n: int, seed: int = SEED, config: ProtocolConfig | None = None, tool_timeout_s: float = DEFAULT_TOOL_TIMEOUT_S
) -> list:
    """``n`` SFT examples (:class:`tirl.data.sft.SFTExample`, kind ``tool``), families in turn, seeded.

    Each has three assistant turns: an opening sentence and the failing call (its rendered error as the tool
    response), the sentence reading the error and the call with the fix (its output as the tool response), then
    ``The program printed N.</reason> <answer>The answer is \\boxed{N}.</answer>``. Ids are
    ``recovery-<seed>-<i>``; the same ``(n, seed)`` gives the same rows, and the first rows do not depend on ``n``.

    Raises:
        RuntimeError: a first program that does not fail as its family says, or a fix that does not print one
            integer.
    """
    from tirl.data.sft import SFTExample

    cfg = resolve_config(config)
    rng = random.Random(seed)
    names = list(RECOVERY_FAMILIES)
    out = []
    for i in range(n):
        family = names[i % len(names)]
        rec = RECOVERY_FAMILIES[family](rng)
        failed = first_result(rec, tool_timeout_s)
        fixed = run_like_sandbox(rec.fix)
        answer = fixed.stdout.strip()
        if fixed.status != "ok" or not answer.isdigit():
            raise RuntimeError(f"the fix of {rec.problem!r} gave {fixed.status}: {fixed.traceback or fixed.stdout!r}")
        first = ConversationTurn(
            f"{rng.choice(_OPENERS)}\n{render_tool_call(rec.first, '', cfg)}", [render_tool_response(failed, cfg)]
        )
        second = ConversationTurn(
            f"{rec.reading}\n{render_tool_call(rec.fix, '', cfg)}", [render_tool_response(fixed, cfg)]
        )
        last = ConversationTurn(
            f"The program printed {answer}.{cfg.reason_close} {cfg.answer_open}"
            f"The answer is \\boxed{{{answer}}}.{cfg.answer_close}"
        )
        out.append(
            SFTExample(
                id=f"recovery-{seed}-{i}",
                problem=rec.problem,
                turns=[first, second, last],
                kind="tool",
                source=f"tirl generated ({family}, {rec.error}, seed {seed})",
                answer=answer,
            )
        )
    return out


__all__ = [
    "DEFAULT_TOOL_TIMEOUT_S",
    "INT_STR_LIMIT",
    "RECOVERY_FAMILIES",
    "SEED",
    "Recovery",
    "first_result",
    "recovery_examples",
    "run_like_sandbox",
]
