"""The symbolic comparison of sandbox workers (math-verify plus guards), run directly in the test process.

These tests call :func:`tirl.reward.worker.check` in-process to pin down the comparison rules; the deadline
and process isolation are tested through a real executor in ``test_reward_table.py``.
"""

from __future__ import annotations

import io
import json
import math
import sys
import threading

import pytest
import sympy

from tirl.reward import guards
from tirl.reward.payload import MARKER, encode_payload, format_worker_output, parse_worker_output
from tirl.reward.worker import check, iter_verdicts, main, run_item

# ------------------------------------------------------------------------------------------ guards


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        (sympy.Integer(10) ** 7, 7.0),
        (sympy.Rational(1, 1000), -3.0),
        (sympy.Pow(10, sympy.Pow(10, 7, evaluate=False), evaluate=False), 1e7),
        (sympy.factorial(sympy.Integer(10) ** 7, evaluate=False), math.lgamma(1e7 + 1) / math.log(10)),
        (sympy.Integer(0), -math.inf),
    ],
)
def test_log10_magnitude_estimates_without_evaluating(expr: sympy.Basic, expected: float) -> None:
    assert guards.log10_magnitude(expr) == pytest.approx(expected, rel=1e-9)


def test_log10_magnitude_of_a_power_tower_is_infinite() -> None:
    five = sympy.Integer(5)
    tower = sympy.Pow(five, 5, evaluate=False)
    for _ in range(3):
        tower = sympy.Pow(five, tower, evaluate=False)
    assert guards.log10_magnitude(tower) == math.inf


def test_log10_magnitude_unknown_for_symbols_and_cancelling_sums() -> None:
    x = sympy.Symbol("x")
    assert guards.log10_magnitude(x + 1) is None
    big = sympy.Pow(10, 400, evaluate=False)
    assert guards.log10_magnitude(sympy.Add(big, -big, evaluate=False)) is None


def test_magnitude_mismatch_needs_one_huge_and_one_small_side() -> None:
    huge = sympy.Pow(10, sympy.Pow(10, 7, evaluate=False), evaluate=False)
    assert guards.magnitude_mismatch(sympy.Integer(5), huge, 100_000)
    assert not guards.magnitude_mismatch(huge, huge, 100_000)
    assert not guards.magnitude_mismatch(sympy.Integer(5), sympy.Integer(6), 100_000)


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        (1 / sympy.factorial(2004), 1 / sympy.factorial(2006)),  # F59
        (sympy.Rational(1, 2**99), sympy.Rational(1, 2**98)),  # F59
        (sympy.Tuple(1, sympy.Rational(1, 2**99)), sympy.Tuple(1, sympy.Rational(1, 2**98))),
        (sympy.FiniteSet(1, sympy.Rational(1, 2**99)), sympy.FiniteSet(sympy.Rational(1, 2**98), 1)),
        (sympy.Interval(0, sympy.Rational(1, 2**99)), sympy.Interval(0, sympy.Rational(1, 2**98))),
        (sympy.Matrix([1, sympy.Rational(1, 2**99)]), sympy.Matrix([1, sympy.Rational(1, 2**98)])),
        (sympy.Eq(sympy.Symbol("x"), sympy.Rational(1, 2**99)), sympy.Rational(1, 2**98)),
    ],
)
def test_exact_number_guard_catches_tiny_differences(gold: sympy.Basic, pred: sympy.Basic) -> None:
    assert guards.exact_numbers_differ(gold, pred)


@pytest.mark.parametrize(
    ("gold", "pred"),
    [
        (sympy.Rational(1, 2**99), sympy.Pow(2, -99, evaluate=False)),
        (sympy.Integer(0), sympy.sin(sympy.pi, evaluate=False)),  # exactly zero, evalf gives 0.e-119
        (sympy.sqrt(8), 2 * sympy.sqrt(2)),
        (sympy.Float(0.5), sympy.Rational(1, 2)),  # floats are left to math-verify's rounding
        (sympy.Symbol("x") + 1, 1 + sympy.Symbol("x")),
    ],
)
def test_exact_number_guard_accepts_equal_or_inexact_values(gold: sympy.Basic, pred: sympy.Basic) -> None:
    assert not guards.exact_numbers_differ(gold, pred)


@pytest.mark.parametrize(
    ("gold", "pred", "expected"),
    [
        ("33.3", sympy.Rational(100, 3), True),  # F71: the reference is rounded
        ("1.41", sympy.sqrt(2), True),
        ("0.5", sympy.Rational(27, 50), False),  # 0.54 is an exact decimal, not 0.5
        ("33.3", sympy.Integer(33), False),
        ("33.3", sympy.Rational(200, 3), False),
        ("42", sympy.Rational(100, 3), False),  # not a decimal reference
        ("0.333", sympy.Rational(1, 3), True),  # 3 significant digits: leading zeros do not count
        # fewer than 3 significant digits: the window is a guess's width, and a tiny irrational term made a
        # wrong value non-terminating (red-team review)
        ("0.5", sympy.Rational(27, 50) + sympy.pi / sympy.Integer(10) ** 30, False),
        ("1.0", 3 / sympy.pi, False),
        ("0.0", sympy.pi / 100, False),
        ("-2.5", -sympy.sqrt(sympy.Rational(62, 10)), False),  # -2.49...
        # a written trailing zero is a significant digit: sqrt(9.611) = 3.10016... against 3.10, not 3.1
        ("3.10", sympy.sqrt(sympy.Rational(9611, 1000)), True),
        ("3.1", sympy.sqrt(sympy.Rational(9611, 1000)), False),
    ],
)
def test_rounded_decimal_policy(gold: str, pred: sympy.Basic, expected: bool) -> None:
    assert guards.matches_rounded_decimal(gold, pred) is expected


def test_positive_assumption_only_for_plain_expressions() -> None:
    n = sympy.Symbol("n")
    assert guards.equal_assuming_positive(sympy.sqrt(1 / n), 1 / sympy.sqrt(n))  # F67
    assert not guards.equal_assuming_positive(sympy.Abs(n), n)
    assert not guards.equal_assuming_positive(n + 1, n + 2)
    assert not guards.equal_assuming_positive(sympy.Eq(n, 1), sympy.Eq(n, 1))


# ------------------------------------------------------------------------------------------ check


@pytest.mark.parametrize(
    ("gold", "pred", "correct"),
    [
        ("$\\frac{1}{2004!}$", "\\frac{1}{2006!}", False),
        ("1 - \\frac{1}{e}", "1 + \\frac{1}{e}", False),
        ("$\\sqrt{1/n}$", "\\frac{1}{\\sqrt{n}}", True),
        ("33.3", "\\frac{100}{3}", True),
        ("5", "(10^{7})!", False),
        ("e^{16} - 1", "e^{16}-1", True),
    ],
)
def test_check_applies_guards_and_policies(gold: str, pred: str, correct: bool) -> None:
    result = check(gold, pred)
    assert result["status"] == "ok"
    assert result["correct"] is correct


def test_check_reports_unparsable_gold() -> None:
    assert check("$12:00$", "1:00")["status"] == "unparsable_gold"


def test_check_answer_without_expression_is_wrong_not_an_error() -> None:
    result = check("5", "}{")
    assert result == {"status": "ok", "correct": False, "detail": result["detail"]}


def test_check_options_switch_guards_off() -> None:
    off = check("$\\frac{1}{2^{99}}$", "\\frac{1}{2^{98}}", {"exact_number_guard": False})
    on = check("$\\frac{1}{2^{99}}$", "\\frac{1}{2^{98}}", {"exact_number_guard": True})
    assert off["correct"] and not on["correct"]  # math-verify alone has this false positive


def test_check_works_off_the_main_thread() -> None:  # F77: no signal-based timeouts
    out: list[dict] = []
    thread = threading.Thread(target=lambda: out.append(check("$2$", "2")))
    thread.start()
    thread.join(60)
    assert out and out[0]["correct"] is True


def test_run_item_never_raises_on_bad_items() -> None:
    assert run_item(5, "5")["status"] == "verifier_error"
    assert run_item("5", None)["status"] == "verifier_error"


def test_iter_verdicts_answers_every_item_in_order_and_flags_bad_ones() -> None:
    payload = {"items": [["\\frac{1}{2}", "0.5"], "not a pair", ["2", "3"]], "options": {}}
    out = list(iter_verdicts(payload))
    assert [i for i, _ in out] == [0, 1, 2]
    assert [r["status"] for _, r in out] == ["ok", "verifier_error", "ok"]
    assert [r["correct"] for _, r in out] == [True, False, False]
    assert all(r["seconds"] >= 0 for _, r in out)


@pytest.mark.parametrize("payload", [None, [], {"items": "x"}, {"gold": "1", "pred": "1"}])
def test_iter_verdicts_reports_a_malformed_payload(payload: object) -> None:
    ((index, result),) = list(iter_verdicts(payload))
    assert index == 0 and result["status"] == "verifier_error"


# ------------------------------------------------------------------------------------- wire format


def run_main(monkeypatch: pytest.MonkeyPatch, stdin: str) -> str:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    out = io.StringIO()
    monkeypatch.setattr(sys, "stdout", out)
    main()
    return out.getvalue()


def test_main_round_trips_a_chunk_through_stdin_and_stdout(monkeypatch: pytest.MonkeyPatch) -> None:
    stdout = run_main(monkeypatch, encode_payload([("\\frac{1}{2}", "0.5"), ("\\sqrt{2}", "2")], {}))
    verdicts = parse_worker_output("noise printed first\n" + stdout)
    assert sorted(verdicts) == [0, 1]
    assert verdicts[0]["correct"] is True and verdicts[1]["correct"] is False


def test_main_answers_garbage_stdin_with_a_verifier_error(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_worker_output(run_main(monkeypatch, "not json"))[0]["status"] == "verifier_error"


@pytest.mark.parametrize(
    "stdout",
    [
        "",
        "no marker here\n",
        MARKER + "{not json\n",
        MARKER + json.dumps({"i": 0, "status": "great", "correct": True}) + "\n",
        MARKER + json.dumps({"i": 0, "status": "ok", "correct": "yes"}) + "\n",
        MARKER + json.dumps({"status": "ok", "correct": True}) + "\n",  # no index
        MARKER + json.dumps({"i": -1, "status": "ok", "correct": True}) + "\n",
        MARKER + json.dumps({"i": True, "status": "ok", "correct": True}) + "\n",
        MARKER + "[1, 2]\n",
    ],
)
def test_parse_worker_output_ignores_malformed_lines(stdout: str) -> None:
    assert parse_worker_output(stdout) == {}


def test_parse_worker_output_keeps_the_last_line_per_index() -> None:
    text = format_worker_output(
        0, {"status": "ok", "correct": True, "detail": None, "seconds": 0.1}
    ) + format_worker_output(0, {"status": "ok", "correct": False, "detail": "x", "seconds": 0.2})
    assert parse_worker_output(text) == {0: {"status": "ok", "correct": False, "detail": "x", "seconds": 0.2}}


# ------------------------------------------------------------------------------ two-stage parsing


def test_two_stage_parsing_is_enabled_and_keeps_results() -> None:
    from latex2sympy2_extended.latex2sympy2 import latex2sympy

    from tirl.reward.worker import TWO_STAGE_PARSING, enable_two_stage_parsing

    assert TWO_STAGE_PARSING and enable_two_stage_parsing()  # idempotent
    assert str(latex2sympy("\\left( 3, \\frac{\\pi}{2} \\right)")) == "(3, pi/2)"
    assert latex2sympy("[2, 5)") == sympy.Interval.Ropen(2, 5)
    with pytest.raises(Exception, match="expected something else"):  # the parser raises a bare Exception
        latex2sympy("\\frac{1}{")  # a real syntax error still fails after the LL retry


DETERMINISM_PAIRS = [
    ("0", "4 \\cdot 0/0"),
    ("0", "5 \\cdot 0/0"),
    ("0", "\\infty - \\infty"),
    ("5", "\\frac{0}{0}"),
    ("1", "0/0 + 1"),
    ("(0, 1)", "(0/0, 1)"),
    ("\\{0\\}", "\\{0/0\\}"),
    ("(-\\infty, 3)", "x<3"),
    ("\\frac{1}{2}", "1 1/4"),
    ("1 - \\frac{1}{\\mathrm{e}}", "1 - e^{-1}"),
    ("(-\\infty,2)\\cup(3,\\infty)", "x<2 \\text{ or } x>3"),
]
DETERMINISM_SCRIPT = """
import json, sys
from tirl.reward.worker import check
pairs = json.loads(sys.stdin.read())
print(json.dumps([check(g, p) for g, p in pairs]))
"""


def test_verdicts_do_not_depend_on_the_hash_seed() -> None:
    import os
    import subprocess

    outputs = set()
    for seed in ("0", "1", "2", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", DETERMINISM_SCRIPT],
            input=json.dumps(DETERMINISM_PAIRS),
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        outputs.add(done.stdout.strip().splitlines()[-1])
    assert len(outputs) == 1, outputs
    verdicts = json.loads(outputs.pop())
    assert [v["correct"] for v in verdicts[:7]] == [False] * 7  # undefined answers equal nothing
    assert [v["correct"] for v in verdicts[7:]] == [True, False, True, True]


@pytest.mark.parametrize(
    "expr, undefined",
    [
        (sympy.nan, True),
        (sympy.zoo, True),
        (sympy.Mul(sympy.Integer(0), sympy.oo, evaluate=False), True),
        (sympy.Add(sympy.oo, -sympy.oo, evaluate=False), True),
        (sympy.sin(sympy.oo), True),
        (sympy.Pow(sympy.Integer(0), -1, evaluate=False), True),
        (sympy.Tuple(1, sympy.nan), True),
        (sympy.oo, False),
        (sympy.Integer(0), False),
        (sympy.Rational(1, 2), False),
        (sympy.Symbol("x") / 0, True),
        (sympy.Pow(10, sympy.Pow(10, 8, evaluate=False), evaluate=False), False),  # too large to evaluate: left alone
        (sympy.Interval(0, sympy.oo), False),
    ],
)
def test_is_undefined(expr: sympy.Basic, undefined: bool) -> None:
    assert guards.is_undefined(expr) is undefined


def test_solution_sets_of_conditions() -> None:
    x = sympy.Symbol("x", real=True)
    assert guards.solution_set(x < 3) == sympy.Interval.open(-sympy.oo, 3)
    assert guards.solution_set(sympy.And(2 <= x, x < 5)) == sympy.Interval.Ropen(2, 5)
    assert guards.solution_set(sympy.Eq(x, sympy.Interval(0, 1), evaluate=False)) == sympy.Interval(0, 1)
    assert guards.solution_set(sympy.Eq(x, 3)) is None  # an assignment is left to math-verify
    assert guards.solution_set(x < sympy.Symbol("y", real=True)) is None  # two variables: not a set of reals
    assert guards.same_set(
        guards.solution_set(sympy.Or(x < 2, x > 3)),
        sympy.Union(sympy.Interval.open(-sympy.oo, 2), sympy.Interval.open(3, sympy.oo)),
    )
    assert not guards.same_set(guards.solution_set(x <= 3), sympy.Interval.open(-sympy.oo, 3))


# ---------------------------------------------------------------------------------------------- issue 23
@pytest.mark.parametrize(
    "gold, pred, correct",
    [
        ("-1", "i^2", True),
        ("1+i", "\\frac{2}{1-i}", True),
        ("2i", "(1+i)^2", True),
        ("-4", "(1+i)^4", True),
        ("i", "\\sqrt{-1}", True),
        ("(1+i, 2)", "(\\frac{2}{1-i}, 2)", True),  # math-verify reads the pair as an open interval
        ("(1+i, 2+i)", "(\\frac{2}{1-i}, 2+i)", True),
        ("(1+i, 2)", "(2, 1+i)", False),
        ("\\{1+i, 2\\}", "\\{2, \\frac{2}{1-i}\\}", True),
        ("\\begin{pmatrix} 1+i \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} \\frac{2}{1-i} \\\\ 2 \\end{pmatrix}", True),
        ("z = 1+i", "z = \\frac{2}{1-i}", True),
        ("1+i", "\\frac{2}{1+i}", False),
        ("-1", "i^3", False),
        ("i^2 + x", "x - 1", False),  # with another variable, i stays a variable
    ],
)
def test_i_is_the_imaginary_unit_in_complex_numbers(gold: str, pred: str, correct: bool) -> None:
    assert check(gold, pred)["correct"] is correct


@pytest.mark.parametrize(
    "gold, pred, correct",
    [
        ("12.5", "12.5\\%", True),
        ("12.5\\%", "12.5", True),
        ("0.125", "12.5\\%", True),
        ("\\frac{25}{2}", "\\frac{25}{2}\\%", True),
        ("33.3", "33.3\\%", True),
        ("12.5", "13.5\\%", False),
        ("12.5\\%", "13.5", False),
    ],
)
def test_percent_signs_are_ignored_for_every_number(gold: str, pred: str, correct: bool) -> None:
    assert check(gold, pred)["correct"] is correct


@pytest.mark.parametrize(
    "gold, pred, correct",
    [
        ("6.02 \\times 10^{23}", "602000000000000000000000", True),
        ("602000000000000000000000", "6.02 \\times 10^{23}", True),
        ("1.5 \\times 10^{30}", "15 \\times 10^{29}", True),
        ("6.02 \\times 10^{23}", "602000000000000000000001", False),
        ("0.0000001", "0.0000002", False),
        ("0.0000002", "2 \\times 10^{-7}", True),
        ("0", "0.0000001", False),
        ("1.23 \\times 10^{-12}", "1.24 \\times 10^{-12}", False),
        ("\\frac{1}{3}", "0.333333", True),  # math-verify's 6-place rounding still holds for ordinary numbers
        ("\\pi", "3.14159265", True),
        ("2\\pi", "6.28", False),
    ],
)
def test_numbers_at_the_extremes_compare_relatively_or_exactly(gold: str, pred: str, correct: bool) -> None:
    assert check(gold, pred)["correct"] is correct


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "gold, pred, correct",
    [
        ("3^{531441}", "3^{3^{12}}", True),
        ("3^{531442}", "3^{3^{12}}", False),
        ("9^{1000000}", "3^{2000000}", True),
        ("(2^{10})^{100000}", "2^{1000000}", True),
        ("2^{1000000}", "2^{1000001}", False),
        ("3^{729}", "3^{3^{6}}", True),  # small enough to evaluate exactly: milliseconds, not sympy's simplify
        ("3^{730}", "3^{3^{6}}", False),
        ("e^{1000000}", "e^{10^{6}}", True),
        ("e^{1000000}", "e^{10^{6}+1}", False),
    ],
)
def test_huge_powers_are_compared_without_evaluating(gold: str, pred: str, correct: bool) -> None:
    assert check(gold, pred)["correct"] is correct


def test_huge_numbers_that_are_not_one_power_are_decided_at_once() -> None:
    result = check("5", "10^{10^{8}} - 10^{10^{8}-1}")
    assert not result["correct"] and "too large to compare" in result["detail"]
    result = check("2 \\cdot 3^{1000000}", "3^{1000000} + 3^{1000000}")
    assert not result["correct"] and "too large to compare" in result["detail"]


def test_exact_value_reads_decimals_as_written_and_refuses_huge_powers() -> None:
    from fractions import Fraction

    from math_verify import LatexExtractionConfig, parse

    def expr(text: str):
        return parse("\\boxed{" + text + "}", [LatexExtractionConfig(boxed_match_priority=0)], parsing_timeout=None)[0]

    assert guards.exact_value(expr("6.02 \\times 10^{23}"), 100_000) == (Fraction(602 * 10**21), True)
    assert guards.exact_value(expr("\\frac{1}{2^{99}}"), 100_000) == (Fraction(1, 2**99), False)
    assert guards.exact_value(expr("5!"), 100_000) == (Fraction(120), False)
    assert guards.exact_value(expr("3^{3^{12}}"), 100_000) is None
    assert guards.exact_value(expr("\\sqrt{2}"), 100_000) is None
    assert guards.has_huge_number(expr("3^{3^{12}}"), 100_000)
    assert not guards.has_huge_number(expr("3^{3^{6}}"), 100_000)


def test_the_worker_reports_hedged_answers_and_long_texts() -> None:
    assert check("2", "2 \\text{ (or possibly 3)}")["status"] == "hedged"
    assert check("2, 3", "2 \\text{ or } 3")["correct"] is True
    assert check("(-\\infty,2)\\cup(3,\\infty)", "x<2 \\lor x>3")["correct"] is True
    long = "1" * 20_000 + ".5"
    assert check("\\frac{1}{2}", long)["status"] == "ok" and "not compared symbolically" in check("1", long)["detail"]
    assert check(long, "1")["status"] == "unparsable_gold"


def test_repeating_decimals_and_the_empty_set_in_the_worker() -> None:
    assert check("\\frac{1}{3}", "0.\\overline{3}")["correct"] is True
    assert check("0.\\overline{3}", "\\frac{1}{3}")["correct"] is True
    assert check("0.333", "0.\\overline{3}")["correct"] is True  # F71: the reference is taken as rounded
    assert check("\\frac{1}{3}", "0.333")["correct"] is False
    assert check("\\emptyset", "\\varnothing")["correct"] is True
    assert check("\\emptyset", "0")["correct"] is False
