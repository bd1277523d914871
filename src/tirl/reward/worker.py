"""The symbolic comparison that runs inside a sandbox worker: math-verify plus tirl's guards.

Covers the program that :mod:`tirl.reward.verifier` sends through a ``CodeExecutor`` (``LocalSandbox`` or the
HTTP service) for every answer that the in-process fast paths cannot decide:

* :func:`main`: the entry point of the request program (wire format in :mod:`tirl.reward.payload`): read a
  chunk of ``[gold, pred]`` items from stdin and print one verdict line per item as soon as it is decided;
* :func:`check`: read both sides (:func:`tirl.reward.forms.read_answer`), refuse a box that commits to no
  single answer (status ``hedged``) and texts over ``MAX_SYMBOLIC_CHARS``, parse both sides with math-verify
  (the reference boxed so it parses as LaTeX), read ``i`` as the imaginary unit where it is the only free
  symbol, apply the magnitude guard, compare numbers too large to evaluate as powers of an integer and
  rational numbers exactly (decimals as written), compare with ``math_verify.verify``, then the exact-number
  and relative float guards and the rounded-decimal and positive-variable policies of
  :mod:`tirl.reward.guards`; a percent sign on one side is also tried ignored;
* :func:`enable_two_stage_parsing` (applied at import): ANTLR SLL-then-LL parsing in latex2sympy, 3 to 10
  times faster on tuples, intervals and sets, with the same results;
* :func:`warm_up`: exercise the parser and comparator once; :mod:`tirl.reward.warm` runs it at import, so a
  sandbox worker that preloads it (see :data:`tirl.reward.payload.PRELOAD_MODULES`) has math-verify's regexes,
  the LaTeX parser and sympy's caches ready in every forked child. A cold child spends about 0.1 s on its
  first comparison; a warm one a few milliseconds.

math-verify's own timeouts use ``signal.alarm`` (which fails off the main thread and raises a non-``Exception``),
so they are always disabled here (``parsing_timeout=None``, ``timeout_seconds=None``, field case F77): the
deadline is the executor killing the process. It does not extract answers from model text and does not run
in the trainer's process (except in tests).
"""

from __future__ import annotations

import json
import logging
import re
import sys
import time
from collections.abc import Iterator
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import And, Basic, Eq, I, Interval, MatrixBase, Rational, S, Symbol, Tuple, nan, zoo

from tirl.reward import guards
from tirl.reward.forms import approximation, commitment_problem, read_answer
from tirl.reward.normalize import MAX_SYMBOLIC_CHARS, latex_for_math_verify
from tirl.reward.payload import format_worker_output
from tirl.reward.types import BUG_STATUS, bug_detail

GOLD_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0),)
PRED_EXTRACTION = (LatexExtractionConfig(boxed_match_priority=0), ExprExtractionConfig())

DEFAULT_OPTIONS: dict[str, Any] = {
    "float_rounding": 6,
    "numeric_precision": 15,
    "exact_number_guard": True,
    "magnitude_guard_digits": 100_000,
    "decimal_gold_rounding": True,
    "assume_positive": True,
}

# math-verify warns once per process that its timeouts are off; that is on purpose here.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def enable_two_stage_parsing() -> bool:
    """Make latex2sympy parse in ANTLR's SLL prediction mode first, and in full LL mode only on failure.

    latex2sympy's grammar sends tuples, intervals and sets into ANTLR's full-context (LL) prediction, which is
    not cached and costs tens to hundreds of milliseconds per answer; SLL is 3 to 10 times faster. The ANTLR
    runtime guarantees that an SLL parse that succeeds gives the same tree as LL, and a failure is retried in
    LL, so results do not change (the standard two-stage strategy of the ANTLR documentation). Patches the
    sandbox worker's copy of ``latex2sympy2_extended`` only (this module never runs in the trainer).

    Returns:
        True when the patch is in place (also when it already was); False when this latex2sympy version
        does not have the expected parser hooks (parsing then stays LL-only, still correct).
    """
    try:
        from antlr4.atn.PredictionMode import PredictionMode
        from latex2sympy2_extended.latex2sympy2 import _Latex2Sympy
    except ImportError:
        return False
    if getattr(_Latex2Sympy, "_tirl_two_stage", False):
        return True
    original_create = getattr(_Latex2Sympy, "create_parser", None)
    original_parse = getattr(_Latex2Sympy, "parse", None)
    if original_create is None or original_parse is None:
        return False

    def create_parser(self: Any, latex_str: str) -> Any:
        parser = original_create(self, latex_str)
        if getattr(self, "_tirl_sll", False):
            parser._interp.predictionMode = PredictionMode.SLL
        return parser

    def parse_two_stage(self: Any, latex_str: str) -> Any:
        self._tirl_sll = True
        try:
            return original_parse(self, latex_str)
        except Exception:  # noqa: BLE001 - a syntax error in SLL may need LL: retry once, LL's error stands
            self._tirl_sll = False
            return original_parse(self, latex_str)

    _Latex2Sympy.create_parser = create_parser
    _Latex2Sympy.parse = parse_two_stage
    _Latex2Sympy._tirl_two_stage = True
    return True


TWO_STAGE_PARSING = enable_two_stage_parsing()


def _result(status: str, correct: bool = False, detail: str | None = None) -> dict[str, Any]:
    return {"status": status, "correct": bool(correct), "detail": detail}


def _is_garbage(expr: Any) -> bool:
    """Parsed to ``zoo`` or ``nan`` (for example ``12:00`` read as a division by zero)."""
    try:
        return isinstance(expr, Basic) and not isinstance(expr, MatrixBase) and (expr.has(zoo) or expr.has(nan))
    except (TypeError, AttributeError):
        return False


def _describe(exc: BaseException) -> str:
    # Never format the expressions themselves: str() of a huge sympy object can take forever.
    return f"{type(exc).__name__}: {str(exc)[:200]}"


def check(gold: str, pred: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """Compare a predicted answer with the reference answer, symbolically.

    Args:
        gold: the reference answer (LaTeX with or without ``$`` delimiters or a box).
        pred: the extracted predicted answer (a box content).
        options: overrides of :data:`DEFAULT_OPTIONS` (``VerifierConfig.worker_options()``).

    Returns:
        ``{"status": "ok" | "hedged" | "unparsable_gold" | "verifier_bug", "correct": bool, "detail": str | None}``.
        ``verifier_bug`` when math-verify raised on every pair it tried and none matched.

    Raises:
        whatever the reading or math-verify raise; :func:`run_item` turns it into ``verifier_bug``.

    Not bounded in time: the caller's process deadline is the bound.
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    gold_reading, pred_reading = read_answer(gold), read_answer(pred)
    if gold_reading.problem is not None:
        return _result("unparsable_gold", detail=gold_reading.problem)
    if pred_reading.problem is not None:
        return _result("ok", detail=pred_reading.problem)
    hedge = commitment_problem(pred_reading.text, gold_reading.text)
    if hedge is not None:
        return _result("hedged", detail=hedge)
    gold, pred = gold_reading.text, pred_reading.text
    approx = approximation(pred)
    if approx is not None:
        # "\\pi \\approx 3.14" (issue 43): the box is worth its exact part, when the approximation is that value
        # to the approximation's digits; against a decimal reference the exact part meets the decimal rules.
        inconsistent = _inconsistent_approximation(*approx, opts)
        if inconsistent is not None:
            return _result("ok", detail=inconsistent)
        pred = approx[0]
    if len(gold) > MAX_SYMBOLIC_CHARS:
        return _result(
            "unparsable_gold", detail=f"a reference over {MAX_SYMBOLIC_CHARS} characters is not compared symbolically"
        )
    if len(pred) > MAX_SYMBOLIC_CHARS:
        return _result("ok", detail=f"an answer over {MAX_SYMBOLIC_CHARS} characters is not compared symbolically")
    result = _compare(gold, pred, opts)
    if result["status"] == "ok" and not result["correct"]:
        # Percentages (issue 23): a percent sign on one side is also ignored, for every number (12.5\% = 12.5),
        # as the integer policy ignores it for integers; math-verify already tries the fraction (12.5\% = 0.125).
        gold_plain, pred_plain = _PERCENT_END.sub("", gold), _PERCENT_END.sub("", pred)
        if (gold_plain != gold) != (pred_plain != pred) and gold_plain and pred_plain:
            again = _compare(gold_plain, pred_plain, opts)
            if again["status"] == "ok" and again["correct"]:
                return _result("ok", correct=True, detail="equal with the percent sign ignored")
    return result


_PERCENT_END = re.compile(r"\s*\\?%\s*$")


def _imaginary(expr: Any) -> Any:
    """``expr`` with the symbol ``i`` as the imaginary unit when ``i`` is its only free symbol (the value of an
    assignment ``z = ...`` counts alone; also in sets, tuples and matrices, and a pair ``(1+i, 2)`` that
    math-verify reads as an open interval is a pair): ``i^2`` is -1, ``\\frac{2}{1-i}`` is ``1+i``. An expression with
    other variables keeps ``i`` a variable (an index, ``x_i``, is a different symbol anyway)."""
    if not isinstance(expr, (Basic, MatrixBase)):
        return expr
    try:
        if (
            isinstance(expr, Interval)
            and expr.left_open
            and expr.right_open
            and {s.name for s in expr.free_symbols} == {"i"}
        ):
            # "(1+i, 2)" is read as an open interval, which cannot have complex ends: it is a pair
            return Tuple(
                expr.start.xreplace({s: I for s in expr.free_symbols}),
                expr.end.xreplace({s: I for s in expr.free_symbols}),
            )
        target = expr.rhs if isinstance(expr, Eq) and isinstance(expr.lhs, Symbol) and expr.lhs.name != "i" else expr
        names = {s.name for s in target.free_symbols}
        if names != {"i"}:
            return expr
        mapping = {s: I for s in target.free_symbols}
        if target is expr:
            return expr.xreplace(mapping)
        return Eq(expr.lhs, expr.rhs.xreplace(mapping), evaluate=False)
    except (TypeError, ValueError, AttributeError, ArithmeticError, RecursionError):
        return expr


def _compare(gold: str, pred: str, opts: dict[str, Any]) -> dict[str, Any]:
    """:func:`check` on read texts: parse, the guards, math-verify (see the module docstring)."""
    gold_parsed = parse(latex_for_math_verify(gold), list(GOLD_EXTRACTION), parsing_timeout=None)
    gold_exprs = [g for g in gold_parsed if isinstance(g, (Basic, MatrixBase))]
    if not gold_exprs or all(_is_garbage(g) for g in gold_exprs):
        return _result("unparsable_gold", detail="math-verify found no finite expression in the reference")
    if all(guards.is_undefined(g) for g in gold_exprs):
        return _result("unparsable_gold", detail="the reference is undefined (NaN or a division by zero)")
    if _dropped_set(gold, gold_exprs):
        return _result("unparsable_gold", detail=_DROPPED_SET)
    pred_parsed = parse(latex_for_math_verify(pred), list(PRED_EXTRACTION), parsing_timeout=None)
    pred_exprs = [p for p in pred_parsed if isinstance(p, (Basic, MatrixBase))]
    if not pred_exprs:
        return _result("ok", detail="math-verify found no expression in the answer")
    if _dropped_set(pred, pred_exprs):
        return _result("ok", detail=_DROPPED_SET)
    if any(guards.is_undefined(p) for p in pred_exprs):
        # Decided before math-verify: its comparison of NaN forms depends on the hash seed.
        return _result("ok", detail="the answer is undefined (NaN or a division by zero): equals nothing")
    gold_parsed = [_imaginary(g) for g in gold_parsed]
    pred_parsed = [_imaginary(p) for p in pred_parsed]
    gold_exprs = [g for g in gold_parsed if isinstance(g, (Basic, MatrixBase))]
    pred_exprs = [p for p in pred_parsed if isinstance(p, (Basic, MatrixBase))]

    limit = int(opts["magnitude_guard_digits"])
    if limit > 0 and guards.magnitude_mismatch(gold_exprs[0], pred_exprs[0], limit):
        return _result("ok", detail="magnitude guard: the sides differ by orders of magnitude")
    exact_limit = limit if limit > 0 else DEFAULT_OPTIONS["magnitude_guard_digits"]
    if any(guards.has_huge_number(e, exact_limit) for e in gold_exprs + pred_exprs):
        # Never evaluated (it would pass any deadline): equal only as the same power of an integer.
        same = guards.same_power(gold_exprs[0], pred_exprs[0], exact_limit)
        if same is None:
            return _result(
                "ok",
                detail=f"too large to compare (a number over {exact_limit} digits that is not one power of an integer)",
            )
        return _result("ok", correct=same, detail="compared as powers of an integer, without evaluating")
    if _false_equation(pred_exprs[0]):
        # "2 = 3": math-verify compares the right side, so it scored as 3 (issue 41).
        return _result("ok", detail="an equation between unequal numbers is false, not an answer")
    exact_g, exact_p = guards.exact_value(gold_exprs[0], exact_limit), guards.exact_value(pred_exprs[0], exact_limit)
    if opts["exact_number_guard"] and exact_g is not None and exact_p is not None:
        # Rational numbers compare exactly (decimals as written: 6.02 \times 10^{23} is 602...0). Without a
        # decimal the verdict is final; with one, an unequal pair still gets math-verify's rounding below.
        if exact_g[0] == exact_p[0]:
            return _result("ok", correct=True)
        if not (exact_g[1] or exact_p[1]):
            return _result("ok")

    errors: list[str] = []
    guard_fired = False
    for g in gold_parsed:
        for p in pred_parsed:
            try:
                equal = verify(
                    g,
                    p,
                    float_rounding=int(opts["float_rounding"]),
                    numeric_precision=int(opts["numeric_precision"]),
                    timeout_seconds=None,
                    raise_on_error=True,
                )
            except Exception as exc:  # noqa: BLE001 - a comparison that raised is counted, not fatal
                errors.append(bug_detail("math-verify's comparison", exc))
                continue
            if not equal:
                continue
            if opts["exact_number_guard"] and guards.exact_numbers_differ(g, p):
                guard_fired = True
                continue
            return _result("ok", correct=True)

    g0, p0 = gold_exprs[0], pred_exprs[0]
    if not guard_fired and (_RELATION_HINT.search(gold) or _RELATION_HINT.search(pred)):
        gold_set, pred_set = _condition_set(gold, g0), _condition_set(pred, p0)
        if gold_set is not None and pred_set is not None and guards.same_set(gold_set, pred_set):
            return _result("ok", correct=True, detail="the same solution set")
    if opts["decimal_gold_rounding"] and guards.matches_rounded_decimal(gold, p0):
        return _result("ok", correct=True, detail="reference taken as rounded to its decimal places")
    if opts["assume_positive"] and not guard_fired and guards.equal_assuming_positive(g0, p0):
        return _result("ok", correct=True, detail="equal for positive values of the variables")
    if guard_fired:
        return _result("ok", detail="number guard: math-verify matched numbers that differ")
    if errors:
        # The answer made math-verify raise on every pair it tried: the model's (reward 0, not masked; issue 41).
        return _result(BUG_STATUS, detail=errors[0])
    return _result("ok")


def _inconsistent_approximation(exact: str, decimal: str, opts: dict[str, Any]) -> str | None:
    """Why ``decimal`` is not ``exact`` to its digits, or None when it is: ``decimal`` must be ``exact`` rounded to
    the decimal's places (within half a unit of its last place) or cut toward zero there (``\\pi \\approx 3.14``
    and ``\\pi \\approx 3.1415`` hold, ``\\pi \\approx 3.15``, ``\\pi \\approx 30`` and ``2 \\approx 3`` do not). The
    exact part must be one finite real number without variables, evaluated to the decimal's places plus 30."""
    parsed = parse(latex_for_math_verify(exact), list(PRED_EXTRACTION), parsing_timeout=None)
    exprs = [p for p in parsed if isinstance(p, Basic)]
    if not exprs or exprs[0].free_symbols or not exprs[0].is_number:
        return "the value before \\approx is not one number: its approximation cannot be checked"
    limit = int(opts["magnitude_guard_digits"]) or int(DEFAULT_OPTIONS["magnitude_guard_digits"])
    if guards.has_huge_number(exprs[0], limit):
        return "the value before \\approx is too large to check its approximation"
    places = len(decimal.partition(".")[2])
    value = exprs[0].evalf(places + 30)
    if not value.is_real or not value.is_finite:
        return "the value before \\approx is not a finite real number"
    unit = Rational(1, 10**places)
    diff = value - Rational(decimal.replace("\u2212", "-"))
    rounded = abs(diff) <= unit / 2
    truncated = (0 <= diff < unit) if value >= 0 else (-unit < diff <= 0)  # cut toward zero
    if not (rounded or truncated):
        return f"the approximation {decimal} is not the value before \\approx to its digits"
    return None


_SET_SYMBOLS = (S.Reals, S.Integers, S.Naturals, S.Naturals0, S.Rationals, S.Complexes)
_DROPPED_SET = "math-verify dropped the set the text names (\\mathbb): it would compare what is left"


def _dropped_set(text: str, exprs: list[Any]) -> bool:
    """True when ``text`` names a number set (``\\mathbb{R}``) that no parsed expression holds: math-verify
    dropped it and read the rest (``\\mathbb{R} - 5`` was read as 5, issue 41)."""
    if "\\mathbb" not in text:
        return False
    try:
        return not any(isinstance(e, Basic) and any(e.has(s) for s in _SET_SYMBOLS) for e in exprs)
    except (TypeError, AttributeError, RecursionError):
        return True


def _false_equation(expr: Any) -> bool:
    """True when ``expr`` is (or joins with "and") an equation between two numbers that are not equal (``2 = 3``;
    ``a = 2 = 3``). An equation with a variable on a side (``x = 3``) or between equal numbers (``\\frac{6}{3} =
    2``) is not false here."""
    parts = expr.args if isinstance(expr, And) else (expr,)
    for part in parts:
        if isinstance(part, Eq) and not part.lhs.free_symbols and not part.rhs.free_symbols:
            try:
                if Eq(part.lhs, part.rhs) is S.false:  # evaluated: sympy decides numbers it can compare
                    return True
            except (TypeError, ValueError, ArithmeticError, RecursionError):
                return False
    return False


_RELATION_HINT = re.compile(r"<|>|≤|≥|≠|\\(?:[lg]eq?|[lg]eqslant|[lg]t|neq?|in)(?![A-Za-z])")
_CONNECTOR = re.compile(
    r"\\(?:text|textrm|mathrm|mbox)\s*\{\s*(or|and)\s*\}|\\(lor|vee|land|wedge)(?![A-Za-z])|(?<![A-Za-z\\])(or|and)(?![A-Za-z])"
)
_CONNECTOR_KIND = {"or": "or", "lor": "or", "vee": "or", "and": "and", "land": "and", "wedge": "and"}


def _condition_set(text: str, parsed: Any) -> Any:
    """The set of reals an answer describes (solution-set policy of docs/reward.md), or None.

    An interval, union or finite set of real numbers is itself; a condition in one variable (``x<3``,
    ``2\\le x<5``, ``x \\in [2,5)``) is its solution set. Conditions joined by one kind of connector
    (``\\text{ or }``, ``\\lor``, ``\\vee``, or ``and``, ``\\land``, ``\\wedge``) are parsed one by one and
    joined by union or intersection (math-verify reads both kinds as a list); mixed connectors give None.
    """
    pieces = _CONNECTOR.split(text)
    if len(pieces) == 1:
        return guards.as_real_set(parsed)
    parts, kinds = pieces[0::4], {_CONNECTOR_KIND[k] for i in range(1, len(pieces), 4) for k in pieces[i : i + 3] if k}
    if len(kinds) != 1:
        return None
    sets = []
    for part in parts:
        exprs = [
            e
            for e in parse(latex_for_math_verify(part), list(GOLD_EXTRACTION), parsing_timeout=None)
            if isinstance(e, Basic)
        ]
        found = guards.solution_set(exprs[0]) if exprs else None
        if found is None:
            return None
        sets.append(found)
    joined = sets[0]
    for other in sets[1:]:
        joined = joined.union(other) if kinds == {"or"} else joined.intersect(other)
    return joined


def run_item(gold: Any, pred: Any, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """:func:`check` for one item, turning every failure into a result dict (never raises for any input): a
    ``MemoryError`` is ``timeout`` (a resource limit, attributed by the caller's control comparison), any other
    exception ``verifier_bug`` with :func:`tirl.reward.types.bug_detail`."""
    if not isinstance(gold, str) or not isinstance(pred, str):  # a malformed request: the caller's, not the answer's
        return _result("verifier_error", detail="bad item: gold and pred must be strings")
    try:
        return check(gold, pred, options)
    except MemoryError:
        return _result("timeout", detail="memory limit reached while comparing")
    except Exception as exc:  # noqa: BLE001 - the worker must always answer
        # Grading code raised on this pair (the reading, a guard, math-verify's parser; RecursionError on deep
        # nesting): the answer's verdict, reward 0, never masked (issue 41).
        return _result(BUG_STATUS, detail=bug_detail("the comparison", exc))


def iter_verdicts(payload: Any) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(index, result)`` for each item of a decoded chunk payload, in order, each as soon as it is decided.

    A malformed payload yields one ``verifier_error`` for index 0; a malformed item yields a
    ``verifier_error`` for that item. ``result`` has ``status``, ``correct``, ``detail`` and ``seconds``.
    """
    if not isinstance(payload, dict) or not isinstance(payload.get("items"), list):
        detail = "bad payload: expected {'items': [...], 'options': {...}}"
        yield 0, {**_result("verifier_error", detail=detail), "seconds": 0.0}
        return
    options = payload.get("options") if isinstance(payload.get("options"), dict) else None
    for index, item in enumerate(payload["items"]):
        start = time.perf_counter()
        if isinstance(item, (list, tuple)) and len(item) == 2:
            result = run_item(item[0], item[1], options)
        else:
            result = _result("verifier_error", detail="bad item: expected [gold, pred]")
        yield index, {**result, "seconds": time.perf_counter() - start}


def main() -> None:
    """Entry point of the request program (``payload.PROGRAM``): read the chunk from stdin, print a verdict line
    per item as soon as it is decided (flushed, so a later item that hangs cannot take it down)."""
    try:
        payload = json.loads(sys.stdin.read())
    except ValueError as exc:
        payload = None
        result = {**_result("verifier_error", detail="bad payload: " + _describe(exc)), "seconds": 0.0}
        sys.stdout.write(format_worker_output(0, result))
    if payload is not None:
        for index, result in iter_verdicts(payload):
            sys.stdout.write(format_worker_output(index, result))
            sys.stdout.flush()
    sys.stdout.flush()


_WARM_UP_PAIRS = (
    ("\\frac{1}{2}", "0.5"),
    ("\\sqrt{2}+1", "1+\\sqrt{2}"),
    ("(1, 2)", "(1,2)"),
    ("[2, 5)", "[2,5)"),
    ("\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}"),
    ("x^2 + 2x + 1", "(x+1)^2"),
    ("2x + 4y - 3 = 0", "y = -\\frac{1}{2}x + \\frac{3}{4}"),
    ("\\text{Evelyn}", "Evelyn"),
    ("10\\%", "0.1"),
    ("\\pi", "3.14159265"),
    ("30^\\circ", "30"),
    ("\\{1, 2\\}", "\\{2, 1\\}"),
    ("-\\dfrac{3}{4}", "\\frac{-3}{4}"),
    ("3\\sqrt{13}", "\\sqrt{117}"),
    ("(-\\infty, -2) \\cup (2, \\infty)", "(-\\infty,-2)\\cup(2,\\infty)"),
    ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3, \\frac{\\pi}{2})"),
    ("y = 2x + 3", "y - 3 = 2x"),
    ("x^2 + 20x + 100", "(x+10)^2"),
    ("\\frac{7\\pi}{3}", "\\frac{7}{3}\\pi"),
    ("\\frac{21}{8}", "2.625"),
    ("1+2i", "2i+1"),
    ("2^{10}", "1024"),
    ("\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}", "\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}"),
    # issue 14 forms: solution sets (as_set), undefined answers (evaluation), constants
    ("(-\\infty, 3)", "x<3"),
    ("(-\\infty,2)\\cup(3,\\infty)", "x<2 \\text{ or } x>3"),
    ("0", "4 \\cdot 0/0"),
    ("1 - \\frac{1}{\\mathrm{e}}", "1 - e^{-1}"),
)


def warm_up() -> None:
    """Exercise the parser and comparator once so forked children start warm. Never raises."""
    for gold, pred in _WARM_UP_PAIRS:
        try:
            check(gold, pred)
        except Exception:  # noqa: BLE001 - warming is best effort
            pass
