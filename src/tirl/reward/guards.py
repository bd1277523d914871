"""Checks around math-verify that fix its known false positives and a few false negatives (sympy-based).

Covers, for parsed sympy objects:

* :func:`log10_magnitude` and :func:`magnitude_mismatch`: estimate how large a number is from its unevaluated
  expression tree, so ``(10^7)!`` or ``10^{10^7}`` against ``5`` is decided in microseconds instead of hanging
  (field case F76);
* :func:`exact_numbers_differ`: math-verify compares exact numbers with an absolute tolerance
  (``(a - b).evalf(chop=True) == 0``), so ``1/2004!`` equals ``1/2006!`` and ``1/2^99`` equals ``1/2^98`` for it
  (field case F59). After it says "equal", exact numbers (also inside tuples, sets, intervals, matrices and
  assignments) must agree to 25 significant digits;
* :func:`matches_rounded_decimal`: a reference written as a finite decimal (``33.3``) is taken as rounded, and an
  exact prediction (``\\frac{100}{3}``) that rounds to it matches (field case F71);
* :func:`equal_assuming_positive`: ``\\sqrt{1/n}`` equals ``\\frac{1}{\\sqrt{n}}`` for positive ``n``, the
  usual context of such answers (field case F67).
* :func:`exact_value`, :func:`has_huge_number`, :func:`same_power` (issue 23): rational numbers compared
  exactly (decimals as written, so ``6.02 \\times 10^{23}`` is an integer), numbers too large to evaluate
  compared as powers of an integer (``3^{3^{12}}`` and ``3^{531441}``); :data:`FLOAT_RELATIVE_TOLERANCE` for
  numbers written with a decimal (``0.0000002`` is not ``0.0000001``).

It runs inside sandbox workers (imported by :mod:`tirl.reward.worker`), never in the trainer's process: every
function here may evaluate sympy expressions, and only the process deadline bounds that. It does not parse
LaTeX or call math-verify.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from fractions import Fraction
from typing import Any

import mpmath
import sympy
from sympy import (
    Abs,
    Basic,
    Float,
    Integer,
    Interval,
    MatrixBase,
    Max,
    Min,
    Mul,
    NumberSymbol,
    Piecewise,
    Pow,
    Rational,
    Set,
    Symbol,
    Tuple,
    UnevaluatedExpr,
    ceiling,
    exp,
    factorial,
    floor,
    sign,
)
from sympy.core.relational import Relational

from tirl.reward.normalize import strip_math_delimiters

LOG10_2 = math.log10(2.0)
# Exponents whose log10 passes this are "astronomical": the power is +/-inf for the estimate.
_HUGE_LOG = 300.0
_MAX_DEPTH = 60
# Exact numbers must agree to this many significant digits (evaluated at 50).
_EXACT_DIGITS = 25
_NON_POSITIVE_SAFE = (Abs, sign, Piecewise, Min, Max, floor, ceiling, sympy.re, sympy.im, sympy.arg)


def _mpf_log10(mpf: tuple[int, int, int, int]) -> float:
    """log10 of |x| for an mpmath mpf tuple (sign, mantissa, exponent, bitcount), without overflow."""
    _sign, man, exp2, _bits = mpf
    if man == 0:
        return -math.inf
    # x = man * 2**exp2; math.log10 accepts arbitrarily large ints.
    return exp2 * LOG10_2 + math.log10(man)


def _sign_of(expr: Basic, depth: int = 0) -> int | None:
    """+1 / -1 for an expression whose sign follows from its structure, None when unknown (or zero)."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, (Integer, Rational)):
        p = int(expr.p)
        return 1 if p > 0 else (-1 if p < 0 else None)
    if isinstance(expr, Float):
        return 1 if expr.is_positive else (-1 if expr.is_negative else None)
    if isinstance(expr, NumberSymbol):
        return 1
    if isinstance(expr, UnevaluatedExpr):
        return _sign_of(expr.args[0], depth + 1)
    if isinstance(expr, (factorial, exp)):
        return 1
    if isinstance(expr, Pow):
        base_sign = _sign_of(expr.base, depth + 1)
        if base_sign == 1:
            return 1
        if base_sign == -1 and isinstance(expr.exp, Integer):
            return 1 if int(expr.exp) % 2 == 0 else -1
        return None
    if isinstance(expr, Mul):
        result = 1
        for arg in expr.args:
            s = _sign_of(arg, depth + 1)
            if s is None:
                return None
            result *= s
        return result
    if isinstance(expr, sympy.Add):
        terms = [(log10_magnitude(arg, depth + 1), arg) for arg in expr.args]
        if any(t[0] is None for t in terms):
            return None
        terms.sort(key=lambda t: t[0], reverse=True)
        if len(terms) == 1 or terms[0][0] - terms[1][0] > 2:
            return _sign_of(terms[0][1], depth + 1)
        signs = {_sign_of(arg, depth + 1) for _, arg in terms}
        return signs.pop() if len(signs) == 1 and None not in signs else None
    return None


def _value(expr: Basic, depth: int) -> float | None:
    """A float estimate of a (real) number's value: +/-inf when astronomically large, None when unknown."""
    if isinstance(expr, (Integer, Rational)) and abs(expr.p) < 10**300 and expr.q < 10**300:
        return float(expr)
    log = log10_magnitude(expr, depth + 1)
    if log is None:
        return None
    s = _sign_of(expr, depth + 1)
    if log == -math.inf:
        return 0.0
    if s is None:
        return None
    if log > _HUGE_LOG:
        return s * math.inf
    return s * 10.0**log


def log10_magnitude(expr: Any, depth: int = 0) -> float | None:
    """An estimate of log10 |expr| from the unevaluated expression tree, without evaluating it.

    Args:
        expr: a sympy object (numbers, ``+``, ``*``, powers, factorials, ``exp`` of numbers).
        depth: recursion depth (internal).

    Returns:
        The estimate (within a few units for sums of comparable terms, exact up to float error otherwise),
        ``math.inf`` for numbers too large to estimate finitely (``10^{10^{400}}``), ``-math.inf`` for zero,
        None when unknown (symbols, other functions, sums that may cancel). Never raises for sympy input.
    """
    try:
        return _log10_magnitude(expr, depth)
    except (ArithmeticError, ValueError, TypeError, RecursionError):
        return None


def _log10_magnitude(expr: Any, depth: int) -> float | None:
    if depth > _MAX_DEPTH or not isinstance(expr, Basic):
        return None
    if isinstance(expr, Integer):
        n = abs(int(expr))
        if n == 0:
            return -math.inf
        bits = n.bit_length()
        return math.log10(n) if bits < 1000 else bits * LOG10_2
    if isinstance(expr, Rational):
        return _log10_magnitude(Integer(expr.p), depth + 1) - _log10_magnitude(Integer(expr.q), depth + 1)
    if isinstance(expr, Float):
        return _mpf_log10(expr._mpf_)
    if isinstance(expr, NumberSymbol):
        return math.log10(float(expr))
    if isinstance(expr, UnevaluatedExpr):
        return _log10_magnitude(expr.args[0], depth + 1)
    if isinstance(expr, Pow):
        base_log = _log10_magnitude(expr.base, depth + 1)
        if base_log is None:
            return None
        exponent = _value(expr.exp, depth + 1)
        if exponent is None:
            return None
        if base_log == -math.inf:
            return -math.inf if exponent > 0 else None
        if base_log == 0.0:
            return 0.0
        result = base_log * exponent
        return None if math.isnan(result) else result
    if isinstance(expr, Mul):
        total = 0.0
        for arg in expr.args:
            log = _log10_magnitude(arg, depth + 1)
            if log is None:
                return None
            total += log
        return None if math.isnan(total) else total
    if isinstance(expr, sympy.Add):
        logs = []
        for arg in expr.args:
            log = _log10_magnitude(arg, depth + 1)
            if log is None:
                return None
            logs.append(log)
        logs.sort(reverse=True)
        if len(logs) == 1 or logs[0] - logs[1] > 2 or logs[0] == math.inf > logs[1]:
            return logs[0]
        signs = {_sign_of(arg, depth + 1) for arg in expr.args}
        if len(signs) == 1 and None not in signs:
            return logs[0] + math.log10(len(logs))
        return None
    if isinstance(expr, factorial):
        n = _value(expr.args[0], depth + 1)
        if n is None or n < 0:
            return None
        if n == math.inf:
            return math.inf
        return math.lgamma(n + 1.0) / math.log(10.0)
    if isinstance(expr, exp):
        x = _value(expr.args[0], depth + 1)
        if x is None:
            return None
        return x * math.log10(math.e)
    return None


def magnitude_mismatch(gold: Any, pred: Any, limit_digits: int) -> bool:
    """True when one side has more than ``limit_digits`` digits and the other is known to be far smaller.

    Both estimates must be known (see :func:`log10_magnitude`) and differ by more than 3 orders of magnitude;
    two huge sides never count as a mismatch (they are left to math-verify and the deadline).
    """
    g = log10_magnitude(gold)
    p = log10_magnitude(pred)
    if g is None or p is None:
        return False
    if max(g, p) <= limit_digits:
        return False
    if g == p == math.inf:
        return False
    return abs(g - p) > 3


def _is_exact_number(expr: Any) -> bool:
    return (
        isinstance(expr, Basic)
        and not isinstance(expr, (Relational, Set, MatrixBase, Tuple))
        and expr.is_number
        and not expr.atoms(Float)
        and not expr.has(UnevaluatedExpr)
    )


def _to_mpc(value: Basic) -> Any:
    """An mpmath complex for an evaluated number, or None when evalf found no reliable digit.

    evalf returns ``0.e-119`` (precision 1 bit) for expressions that are exactly zero but not structurally
    (``sin(pi)``, ``sqrt(2)+sqrt(3)-sqrt(5+2 sqrt(6))``); those are zero, not tiny numbers.
    """
    parts = []
    for part in value.as_real_imag():
        if not isinstance(part, Float):
            part = sympy.N(part, 50)
        if isinstance(part, Float) and part._prec < 30:
            part = sympy.Integer(0)
        parts.append(mpmath.mpf(str(part)))
    return mpmath.mpc(parts[0], parts[1])


def _exact_pair_differs(a: Basic, b: Basic) -> bool:
    with mpmath.workdps(60):
        try:
            za = _to_mpc(sympy.N(a, 50))
            zb = _to_mpc(sympy.N(b, 50))
        except (TypeError, ValueError, ArithmeticError):
            return False
        if not (mpmath.isfinite(za) and mpmath.isfinite(zb)):
            return False
        scale = max(abs(za), abs(zb))
        if scale == 0:
            return False
        return abs(za - zb) > scale * mpmath.mpf(10) ** (-_EXACT_DIGITS)


def _unwrap_assignment(expr: Any) -> Any:
    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, Symbol):
        return expr.rhs
    return expr


def exact_numbers_differ(gold: Any, pred: Any, depth: int = 0) -> bool:
    """True when ``gold`` and ``pred`` contain exact numbers, at matching places, that differ.

    Compares, recursively: exact numbers (no floats, no percent forms) to ``_EXACT_DIGITS`` significant
    digits; numbers one of which holds a decimal to :data:`FLOAT_RELATIVE_TOLERANCE` (relative, so
    ``0.0000002`` is not ``0.0000001``, which math-verify's rounding to 6 places equates); tuples and
    matrices element by element; finite sets of real exact numbers after sorting; intervals by their ends;
    an assignment ``x = v`` by its value. Anything else (symbols, equations) is left to math-verify's
    verdict: returns False. Never raises for sympy input.
    """
    try:
        return _differ(gold, pred, depth)
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return False


def _differ(gold: Any, pred: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH:
        return False
    if isinstance(gold, sympy.Eq) and isinstance(pred, sympy.Eq):
        if gold.lhs == pred.lhs:
            return _differ(gold.rhs, pred.rhs, depth + 1)
        return False
    gold, pred = _unwrap_assignment(gold), _unwrap_assignment(pred)
    if isinstance(gold, Tuple) and isinstance(pred, Tuple):
        return len(gold) == len(pred) and any(_differ(a, b, depth + 1) for a, b in zip(gold, pred))
    if isinstance(gold, MatrixBase) and isinstance(pred, MatrixBase):
        return gold.shape == pred.shape and any(_differ(a, b, depth + 1) for a, b in zip(gold, pred))
    if isinstance(gold, Interval) and isinstance(pred, Interval):
        return _differ(gold.start, pred.start, depth + 1) or _differ(gold.end, pred.end, depth + 1)
    if isinstance(gold, sympy.FiniteSet) and isinstance(pred, sympy.FiniteSet):
        items_g, items_p = list(gold), list(pred)
        if len(items_g) != len(items_p) or not all(_is_exact_number(x) and x.is_real for x in items_g + items_p):
            return False
        key = lambda x: float(sympy.N(x, 30))  # noqa: E731
        return any(_differ(a, b, depth + 1) for a, b in zip(sorted(items_g, key=key), sorted(items_p, key=key)))
    if _is_exact_number(gold) and _is_exact_number(pred):
        return _exact_pair_differs(gold, pred)
    if (_is_float_number(gold) or _is_float_number(pred)) and all(
        isinstance(x, sympy.Expr) and x.is_number for x in (gold, pred)
    ):
        return _float_pair_differs(gold, pred)
    return False


_DECIMAL = re.compile(r"^-?\d*\.(\d+)$")

ROUNDED_GOLD_MIN_SIGNIFICANT = 3
r"""Significant digits a decimal reference needs before :func:`matches_rounded_decimal` takes it as rounded.
Matching a reference of 3 or more to its last digit means the value was computed (1 part in 1,000 at worst); with
fewer the rounding window is a guess's width (``0.5`` takes anything in [0.45, 0.55), ``1.0`` takes ``3/\pi``),
and a policy could aim at it: ``\frac{27}{50}+\frac{\pi}{10^{30}}`` scored 1 against ``0.5`` (red-team review,
2026-12-06)."""


def matches_rounded_decimal(gold_text: str, pred: Any) -> bool:
    """True when ``gold_text`` is a finite decimal and the exact real number ``pred`` rounds to it.

    Rounding is half-up at the number of decimal places written in the reference (``33.3``: one place, so
    ``100/3`` matches). Only predictions whose decimal expansion does not terminate qualify: irrational
    numbers (``\\sqrt{2}`` against ``1.41``) and rationals like ``100/3``. A terminating one (``27/50`` = 0.54
    against ``0.5``, or ``33`` against ``33.3``) and any prediction containing a float must equal the reference
    exactly, which math-verify already checked. Only references of at least
    :data:`ROUNDED_GOLD_MIN_SIGNIFICANT` significant digits qualify (``33.3``, ``1.41``, ``0.333``; not
    ``0.5``, ``1.0`` or ``0.0``, whose rounding window a policy could hit without computing the value).
    """
    text = strip_math_delimiters(gold_text).replace(" ", "")
    match = _DECIMAL.match(text)
    if not match or not _is_exact_number(pred):
        return False
    if len(text.lstrip("-").replace(".", "").lstrip("0")) < ROUNDED_GOLD_MIN_SIGNIFICANT:
        return False
    try:
        if not pred.is_real:
            return False
        if pred.is_rational is not False and not _non_terminating_rational(pred):
            # A terminating decimal (27/50 = 0.54) or an unknown kind of number: it must equal the reference.
            return False
        places = len(match.group(1))
        value = Decimal(str(sympy.N(pred, 40)))
        quantum = Decimal(1).scaleb(-places)
        return value.quantize(quantum, rounding=ROUND_HALF_UP) == Decimal(text).quantize(quantum)
    except (InvalidOperation, TypeError, ValueError, ArithmeticError):
        return False


def _non_terminating_rational(value: Any) -> bool:
    """True for a Rational whose decimal expansion does not terminate (denominator not of the form 2^a 5^b)."""
    if not isinstance(value, Rational):
        return False
    q = int(value.q)
    for prime in (2, 5):
        while q % prime == 0:
            q //= prime
    return q != 1


def equal_assuming_positive(gold: Any, pred: Any) -> bool:
    """True when ``gold - pred`` simplifies to 0 once every free variable is taken as a positive real.

    Only for two plain expressions (not equations, sets, tuples or matrices) over the same variable names, and
    never when either contains ``|x|``, sign, min/max, floor/ceiling, piecewise, re/im/arg parts (where the
    assumption would hide a real difference).
    """
    try:
        for expr in (gold, pred):
            if not isinstance(expr, sympy.Expr) or isinstance(expr, (Relational, Tuple, MatrixBase)):
                return False
            if not expr.free_symbols or any(expr.has(f) for f in _NON_POSITIVE_SAFE):
                return False
        names_g = {s.name for s in gold.free_symbols}
        names_p = {s.name for s in pred.free_symbols}
        if names_g != names_p:
            return False
        positive = {name: Symbol(name, positive=True) for name in names_g}
        mapping = {s: positive[s.name] for s in gold.free_symbols | pred.free_symbols}
        difference = sympy.simplify(gold.xreplace(mapping) - pred.xreplace(mapping))
        return difference == 0
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return False


# ------------------------------------------------------------------------------------- undefined values
# Evaluating a number is skipped when a power or factorial in it is this large (it could not finish in time;
# such numbers are never undefined by these forms anyway).
_EVALUATE_MAX_EXPONENT = 10_000.0


def _safe_to_evaluate(expr: Basic) -> bool:
    """True when no power, exponential or factorial in ``expr`` has an exponent/argument beyond the limit."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, Pow):
            value = _value(node.exp, 0)
        elif isinstance(node, (factorial, exp)):
            value = _value(node.args[0], 0)
        else:
            continue
        if value is None or abs(value) > _EVALUATE_MAX_EXPONENT:
            return False
    return True


def _undefined_value(value: Any) -> bool:
    return isinstance(value, Basic) and (value.has(sympy.nan, sympy.zoo) or bool(value.atoms(sympy.AccumBounds)))


def is_undefined(expr: Any, depth: int = 0) -> bool:
    """True when ``expr`` (or a number inside a tuple, set, interval, matrix or equation) is undefined.

    Undefined: NaN, complex infinity (division by zero, ``\\log 0``, ``\\tan\\frac{\\pi}{2}``) or an
    accumulation bound (``\\sin\\infty``), also when it only appears once the unevaluated form math-verify
    parses is evaluated (``4 \\cdot 0/0``, ``\\infty - \\infty``, ``0 \\cdot \\infty``). Evaluated only for
    numbers whose powers and factorials stay small (:data:`_EVALUATE_MAX_EXPONENT`). Never raises for sympy
    input; the same expression always gives the same answer (no hash-order dependence).
    """
    try:
        return _is_undefined(expr, depth)
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError, NotImplementedError):
        return False


def _is_undefined(expr: Any, depth: int) -> bool:
    if depth > _MAX_DEPTH or not isinstance(expr, Basic):
        return False
    if _undefined_value(expr):
        return True
    if isinstance(expr, (Tuple, Set, Relational, MatrixBase)) or not isinstance(expr, sympy.Expr):
        return any(_is_undefined(arg, depth + 1) for arg in expr.args)
    if expr.free_symbols or not _safe_to_evaluate(expr):
        return False
    return _undefined_value(expr.doit())


# ----------------------------------------------------------------------------------------- solution sets
def solution_set(expr: Any) -> Any:
    """The set of real values a condition in one variable describes, or None when ``expr`` is not one.

    ``x < 3`` is ``(-oo, 3)``, ``(2 <= x) & (x < 5)`` is ``[2, 5)``, ``Or`` gives unions, ``x \\ne 2`` the
    reals without 2, ``x \\in S`` (math-verify's ``Eq(x, S)``) is ``S``; ``x = 3`` is left to math-verify
    (None). Needs exactly one free symbol. Never raises for sympy input.
    """
    try:
        if isinstance(expr, sympy.Eq):
            if isinstance(expr.lhs, Symbol) and isinstance(expr.rhs, Set):
                return expr.rhs
            return None
        if isinstance(expr, Relational) or isinstance(expr, (sympy.And, sympy.Or)):
            if len(expr.free_symbols) != 1:
                return None
            return expr.as_set()
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError, NotImplementedError):
        return None
    return None


def as_real_set(expr: Any) -> Any:
    """``expr`` as a set of reals when it is one (interval, union, finite set of real numbers, the reals),
    else its :func:`solution_set`, else None."""
    if isinstance(expr, Set):
        if isinstance(expr, sympy.FiniteSet) and not all(
            isinstance(x, sympy.Expr) and x.is_number and x.is_real for x in expr
        ):
            return None
        return expr
    return solution_set(expr)


def same_set(a: Any, b: Any) -> bool:
    """True when the sets ``a`` and ``b`` are equal (structurally or with an empty symmetric difference)."""
    try:
        if a == b:
            return True
        return a.symmetric_difference(b) is sympy.S.EmptySet
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError, NotImplementedError):
        return False


# ------------------------------------------------------------------------------- numbers at the extremes
class _NotExact(Exception):
    """The expression is not a number built from integers, decimals, +, *, integer powers and factorials."""


class _TooLarge(Exception):
    """Evaluating the expression exactly would pass the digit limit."""


def _fraction(expr: Any, limit_digits: int, floats: list[bool], depth: int = 0) -> Fraction:
    """The exact value of ``expr`` (see :func:`exact_value`); raises _NotExact or _TooLarge."""
    if depth > _MAX_DEPTH:
        raise _NotExact
    if isinstance(expr, (Integer, Rational)):
        return Fraction(int(expr.p), int(expr.q))
    if isinstance(expr, Float):
        if not expr.is_finite:
            raise _NotExact
        floats.append(True)
        # The decimal as written: a 53-bit float's shortest repr round-trips to the digits that were parsed.
        text = repr(float(expr)) if expr._prec <= 53 else str(expr)
        if "inf" in text or "nan" in text:
            raise _NotExact
        return Fraction(text)
    if isinstance(expr, UnevaluatedExpr):
        return _fraction(expr.args[0], limit_digits, floats, depth + 1)
    if isinstance(expr, sympy.Add):
        return sum((_fraction(a, limit_digits, floats, depth + 1) for a in expr.args), Fraction(0))
    if isinstance(expr, Mul):
        value = Fraction(1)
        for arg in expr.args:
            value *= _fraction(arg, limit_digits, floats, depth + 1)
        return value
    if isinstance(expr, Pow):
        base = _fraction(expr.base, limit_digits, floats, depth + 1)
        exponent = _fraction(expr.exp, limit_digits, floats, depth + 1)
        if exponent.denominator != 1 or (base == 0 and exponent < 0):
            raise _NotExact
        if abs(base.numerator) > 1 or base.denominator > 1:
            size = max(abs(base.numerator), base.denominator)
            if abs(exponent) * math.log10(size) > limit_digits:
                raise _TooLarge
        return base ** int(exponent)
    if isinstance(expr, factorial):
        n = _fraction(expr.args[0], limit_digits, floats, depth + 1)
        if n.denominator != 1 or n < 0:
            raise _NotExact
        if math.lgamma(float(n) + 1.0) / math.log(10.0) > limit_digits:
            raise _TooLarge
        return Fraction(math.factorial(int(n)))
    raise _NotExact


def exact_value(expr: Any, limit_digits: int) -> tuple[Fraction, bool] | None:
    """The exact rational value of a number written with integers, decimals, ``+``, ``*``, integer powers and
    factorials, and whether a decimal was involved; None for anything else or when a power or factorial in it
    would have more than ``limit_digits`` digits (it is never evaluated then).

    Decimals are read as written (``6.02`` is 301/50, not the nearest binary float), so ``6.02 \\times 10^{23}``
    is exactly 602000000000000000000000. Never raises for sympy input.
    """
    floats: list[bool] = []
    try:
        return _fraction(expr, limit_digits, floats), bool(floats)
    except (_NotExact, _TooLarge, TypeError, ValueError, ArithmeticError, RecursionError, OverflowError):
        return None


def has_huge_number(expr: Any, limit_digits: int) -> bool:
    """True when a power, factorial or ``exp`` in ``expr`` is estimated (:func:`log10_magnitude`) to have more
    than ``limit_digits`` digits: such a number must not be evaluated (``3^{3^{12}}``: 253,563 digits)."""
    try:
        for node in sympy.preorder_traversal(expr):
            if isinstance(node, (Pow, factorial, exp)):
                log = log10_magnitude(node)
                if log is not None and log > limit_digits:
                    return True
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return False
    return False


def _power_form(expr: Any, limit_digits: int, depth: int = 0) -> tuple[int | str, int] | None:
    """``(r, E)`` with ``expr = r^E``, ``r >= 2`` an integer that is not a perfect power (or the name of a
    constant, ``E`` for ``e``) and ``E >= 1`` exact, or None."""
    if depth > _MAX_DEPTH:
        return None
    if isinstance(expr, UnevaluatedExpr):
        return _power_form(expr.args[0], limit_digits, depth + 1)
    if isinstance(expr, NumberSymbol):
        return str(expr), 1
    if isinstance(expr, exp):
        exponent = exact_value(expr.args[0], limit_digits)
        if exponent is None or exponent[1] or exponent[0].denominator != 1 or exponent[0] < 1:
            return None
        return "E", int(exponent[0])
    if isinstance(expr, Integer):
        n = int(expr)
        if n < 2 or n.bit_length() > 4000:
            return None
        found = sympy.perfect_power(n)
        return (int(found[0]), int(found[1])) if found else (n, 1)
    if isinstance(expr, Pow):
        inner = _power_form(expr.base, limit_digits, depth + 1)
        exponent = exact_value(expr.exp, limit_digits)
        if inner is None or exponent is None or exponent[1]:
            return None
        e = exponent[0]
        if e.denominator != 1 or e < 1:
            return None
        return inner[0], inner[1] * int(e)
    return None


def same_power(gold: Any, pred: Any, limit_digits: int) -> bool | None:
    """For numbers too large to evaluate: True/False when both are one power of an integer or of a constant
    (``3^{3^{12}}`` and ``3^{531441}``, ``9^{10^6}`` and ``3^{2 \\cdot 10^6}``, ``e^{10^6}`` and
    ``e^{1000000}``) and so compare exactly without evaluating; None when either is not of that form. Never
    raises for sympy input."""
    try:
        a, b = _power_form(gold, limit_digits), _power_form(pred, limit_digits)
    except (TypeError, ValueError, ArithmeticError, RecursionError, AttributeError):
        return None
    if a is None or b is None:
        return None
    return a == b


# Two numbers one of which is written with a decimal must agree to this relative tolerance (6 significant
# digits), on top of math-verify's rounding to 6 decimal places (which equates any two numbers below 5e-7).
FLOAT_RELATIVE_TOLERANCE = 5e-6


def _float_pair_differs(a: Basic, b: Basic) -> bool:
    with mpmath.workdps(40):
        try:
            za = _to_mpc(sympy.N(a.doit(), 30))
            zb = _to_mpc(sympy.N(b.doit(), 30))
        except (TypeError, ValueError, ArithmeticError, AttributeError):
            return False
        if not (mpmath.isfinite(za) and mpmath.isfinite(zb)):
            return False
        scale = max(abs(za), abs(zb))
        if scale == 0:
            return False
        return abs(za - zb) > scale * mpmath.mpf(FLOAT_RELATIVE_TOLERANCE)


def _is_float_number(expr: Any) -> bool:
    return (
        isinstance(expr, sympy.Expr)
        and not isinstance(expr, (Relational, Set, MatrixBase, Tuple))
        and expr.is_number
        and bool(expr.atoms(Float))
    )
