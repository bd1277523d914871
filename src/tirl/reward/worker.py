"""The symbolic comparison that runs inside a sandbox worker: math-verify plus tirl's guards.

Covers the program that :mod:`tirl.reward.verifier` sends through a ``CodeExecutor`` (``LocalSandbox`` or the
HTTP service) for every answer that the in-process fast paths cannot decide:

* :func:`main`: the entry point of the request program (wire format in :mod:`tirl.reward.payload`): read the
  payload from stdin, print one verdict line;
* :func:`check`: parse both sides with math-verify (the reference boxed so it parses as LaTeX), apply the
  magnitude guard, compare with ``math_verify.verify``, then the exact-number guard and the rounded-decimal and
  positive-variable policies of :mod:`tirl.reward.guards`;
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
import sys
from typing import Any

from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify
from sympy import Basic, MatrixBase, nan, zoo

from tirl.reward import guards
from tirl.reward.normalize import latex_for_math_verify
from tirl.reward.payload import format_worker_output

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
        ``{"status": "ok" | "unparsable_gold" | "verifier_error", "correct": bool, "detail": str | None}``.
        ``verifier_error`` when math-verify raised on every pair it tried and none matched.

    Not bounded in time: the caller's process deadline is the bound.
    """
    opts = dict(DEFAULT_OPTIONS)
    opts.update(options or {})
    gold_parsed = parse(latex_for_math_verify(gold), list(GOLD_EXTRACTION), parsing_timeout=None)
    gold_exprs = [g for g in gold_parsed if isinstance(g, (Basic, MatrixBase))]
    if not gold_exprs or all(_is_garbage(g) for g in gold_exprs):
        return _result("unparsable_gold", detail="math-verify found no finite expression in the reference")
    pred_parsed = parse(latex_for_math_verify(pred), list(PRED_EXTRACTION), parsing_timeout=None)
    pred_exprs = [p for p in pred_parsed if isinstance(p, (Basic, MatrixBase))]
    if not pred_exprs:
        return _result("ok", detail="math-verify found no expression in the answer")

    limit = int(opts["magnitude_guard_digits"])
    if limit > 0 and guards.magnitude_mismatch(gold_exprs[0], pred_exprs[0], limit):
        return _result("ok", detail="magnitude guard: the sides differ by orders of magnitude")

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
                errors.append(_describe(exc))
                continue
            if not equal:
                continue
            if opts["exact_number_guard"] and guards.exact_numbers_differ(g, p):
                guard_fired = True
                continue
            return _result("ok", correct=True)

    g0, p0 = gold_exprs[0], pred_exprs[0]
    if opts["decimal_gold_rounding"] and guards.matches_rounded_decimal(gold, p0):
        return _result("ok", correct=True, detail="reference taken as rounded to its decimal places")
    if opts["assume_positive"] and not guard_fired and guards.equal_assuming_positive(g0, p0):
        return _result("ok", correct=True, detail="equal for positive values of the variables")
    if guard_fired:
        return _result("ok", detail="exact-number guard: math-verify matched numbers that differ")
    if errors:
        return _result("verifier_error", detail="math-verify raised: " + errors[0])
    return _result("ok")


def run_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """:func:`check` on a decoded payload, turning every failure into a result dict (never raises)."""
    try:
        gold = payload["gold"]
        pred = payload["pred"]
        if not isinstance(gold, str) or not isinstance(pred, str):
            raise TypeError("gold and pred must be strings")
        return check(gold, pred, payload.get("options"))
    except MemoryError:
        return _result("timeout", detail="memory limit reached while comparing")
    except RecursionError:
        return _result("verifier_error", detail="recursion limit reached while comparing")
    except Exception as exc:  # noqa: BLE001 - the worker must always answer
        return _result("verifier_error", detail=_describe(exc))


def main() -> None:
    """Entry point of the request program (``payload.PROGRAM``): read the JSON payload from stdin, print one verdict line."""
    try:
        payload = json.loads(sys.stdin.read())
        if not isinstance(payload, dict):
            raise TypeError("payload must be a JSON object")
    except (ValueError, TypeError) as exc:
        result = _result("verifier_error", detail="bad payload: " + _describe(exc))
    else:
        result = run_payload(payload)
    sys.stdout.write(format_worker_output(result))
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
)


def warm_up() -> None:
    """Exercise the parser and comparator once so forked children start warm. Never raises."""
    for gold, pred in _WARM_UP_PAIRS:
        try:
            check(gold, pred)
        except Exception:  # noqa: BLE001 - warming is best effort
            pass
