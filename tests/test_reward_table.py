"""The reward table: (reference, response) pairs with their expected reward, through a real sandbox pool.

Every row is verified in one ``Verifier.verify_batch`` call through a ``LocalSandbox`` that preloads the reward worker
(symbolic rows run math-verify in forked sandbox children under the 5 s hard deadline), then each row is
asserted on its own. Rows cite the field cases of ``tests/data/field_cases.jsonl`` (F41-F77) where they come
from; the rest are MATH-500-style answers and integers written in several ways. The expected rewards follow
the policies of docs/reward.md and the extraction policy of ``tirl.protocol.extract_answer`` (last box of the
last ``<answer>`` block, else of the final turn; boxes are never merged).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import NamedTuple

import pytest

from tirl.reward import Verdict, Verifier, VerifierConfig, VerifierStats, VerifyItem, verify
from tirl.reward.verifier import close_default_executor


class Row(NamedTuple):
    id: str
    gold: str
    response: str | None
    reward: float
    status: str | None = None  # expected status when it is not "ok"
    question: str | None = None  # the problem text, when the row's policy reads it (subscript bases)


def b(answer: str) -> str:
    """A response whose final answer is ``answer`` (the report's format)."""
    return f"<reason>Let me work it out.</reason>\n<answer>The final answer is \\boxed{{{answer}}}.</answer>"


POWER_TOWER = "\\boxed{\\dfrac{5^{\\left(5^{\\left(5^{\\left(5^5\\right)}\\right)} - 4\\right)} - 5}{16}}"
BIG = str(2**200)
HUGE = "7" * 6000
LONG = "1" * 120_001  # past the 100,000 characters the integer path once stopped at

ROWS: list[Row] = [
    # ---- integers written several ways (the in-process fast path) ----------------------------------
    Row("int-plain", "42", b("42"), 1),
    Row("int-wrong", "42", b("43"), 0),
    Row("int-negative", "-7", b("-7"), 1),
    Row("int-sign-flip", "-7", b("7"), 0),
    Row("F55-thousands", "1000", b("1,000"), 1),
    Row("F55-pair-is-not-12", "(1,2)", b("12"), 0),
    Row("F55-millions", "1300400", b("1,300,400"), 1),
    Row("int-latex-comma", "1000", b("1{,}000"), 1),
    Row("int-thin-space", "1000", b("1\\,000"), 1),
    Row("int-spaces", "1000000", b("1 000 000"), 1),
    Row("int-not-grouped", "12", b("1,2"), 0),
    Row("F76-leading-zeros", "9", b("009"), 1),
    Row("F56-degrees-pred", "30", b("30^\\circ"), 1),
    Row("F56-degrees-gold", "30^\\circ", b("30"), 1),
    Row("F56-unit", "35", b("35\\text{ cm}"), 1),
    Row("F56-dollar", "18", b("\\$18"), 1),
    Row("int-assignment", "12", b("x = 12"), 1),
    Row("int-decimal-zero", "5", b("5.0"), 1),
    Row("int-decimal-nonzero", "5", b("5.1"), 0),
    Row("F53-text-gold", "$\\text{13}$", b("13"), 1),
    Row("int-percent", "10", b("10\\%"), 1),
    Row("int-power", "1024", b("2^{10}"), 1),
    Row("int-factorial", "120", b("5!"), 1),
    Row("int-fraction", "5", b("\\frac{10}{2}"), 1),
    Row("int-binomial", "10", b("\\binom{5}{2}"), 1),
    Row("int-big", BIG, b(BIG), 1),
    Row("int-big-off-by-one", BIG, b(str(2**200 + 1)), 0),
    Row("int-past-digit-limit", HUGE, b(HUGE), 1),
    Row("int-past-digit-limit-wrong", HUGE, b(HUGE[:-1] + "8"), 0),
    # ---- extraction field cases ----------------------------------------------------------------------
    Row("F41", "\\frac{1}{2}", "So the probability is \\boxed{\\frac{1}{2}}.", 1),
    Row("F43-fbox", "7", "The answer is \\fbox{7}.", 1),
    Row("F44-interval", "[2,5)", "The domain is \\boxed{[2,5)}", 1),
    Row("F46-revision", "7", "First guess \\boxed{3}. After checking, the answer is \\boxed{7}.", 1),
    Row("F47-last-box-only", "3, 5, 7", "The roots are \\boxed{3}, \\boxed{5}, \\boxed{7}.", 0),
    Row("F47-one-box", "3, 5, 7", b("3, 5, 7"), 1),
    # F49: "#### 42" is not a final-answer marker of this protocol (boxed answers only): no answer.
    Row(
        "F49-gsm8k-marker",
        "42",
        "2+40=42\n#### 42\n and the reasoning above confirms this result is consistent.",
        0,
        "no_answer",
    ),
    Row("F49-variant", "42", "Thus \\boxed{42}. " + "Let me double check the arithmetic once more. " * 12, 1),
    Row(
        "F50-truncated",
        "12",
        "Let me compute step by step. So x = 12 and then we need to add the remaining terms which gives",
        0,
        "no_answer",
    ),
    Row("truncated-box", "12", "so the answer is \\boxed{1", 0, "no_answer"),
    Row("empty-box", "12", b(""), 0, "no_answer"),
    Row("no-response", "12", None, 0, "no_answer"),
    Row(
        "tool-response-box-ignored",
        "5",
        "<tool_response>\\boxed{5}</tool_response> hence <answer>\\boxed{6}</answer>",
        0,
    ),
    Row("F52-tuple", "\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\frac{\\pi}{2})}", 1),
    Row("F53-text", "\\text{Evelyn}", "The winner is \\boxed{\\text{Evelyn}}", 1),
    Row("F58-letter", "B", "\\boxed{B}", 1),
    # ---- verifier field cases ------------------------------------------------------------------------
    Row("F59-factorials", "$\\frac{1}{2004!}$", b("\\frac{1}{2006!}"), 0),
    Row("F59-powers", "$\\frac{1}{2^{99}}$", b("\\frac{1}{2^{98}}"), 0),
    Row("F59-powers-equal", "$\\frac{1}{2^{99}}$", b("2^{-99}"), 1),
    Row("F61-lists", "$n=2, 3, 4$", b("n=1, 2, 3"), 0),
    Row("F61-intervals", "$D = (0, 1)$", b("D = (0, 1.5)"), 0),
    Row("F62-plus-minus", "$\\pm 2021$", b("2021"), 0),
    Row("F62-clock-wrong", "$12:00$", b("1:00"), 0, "unparsable_gold"),
    Row("F62-clock-same", "$12:00$", b("12:00"), 1),
    Row("F64-lines", "3*x-1*y+13=0", b("3x + 4y + 14=0"), 0),
    Row("F65-radical", "1 - \\sqrt{2}", b("1"), 0),
    Row("F65-tuple-vs-number", "\\left( 3, \\frac{\\pi}{2} \\right)", b("3"), 0),
    Row("F67-positive-n", "$\\sqrt{1/n}$", b("\\frac{1}{\\sqrt{n}}"), 1),
    Row("F68-line-forms", "$2x+4y-3=0$", b("y = -\\frac{1}{2}x + \\frac{3}{4}"), 1),
    Row("F70-unboxed-expr", "e^{16} - 1", "-1 + exp(16)", 0, "no_answer"),
    Row("F70-unboxed-pi", "\\dfrac{\\pi}{2}", "pi/2", 0, "no_answer"),
    Row("F70-boxed", "e^{16} - 1", "\\boxed{e^{16}-1}", 1),
    Row("F70-wrong", "-1", "-1 + exp(16)", 0, "no_answer"),
    Row("F70-wrong-boxed", "-1", b("-1 + e^{16}"), 0),
    Row("F71-decimal", "\\frac{1}{12}", b("0.0833333333333333"), 1),
    Row("F71-tuple", "(1,\\frac{9}{2})", b("(1,4.5)"), 1),
    Row("F71-rounded-gold", "33.3", b("\\frac{100}{3}"), 1),
    Row("F71-plane", "34x+45y-20z+100=0", b("-34x-45y+20z-100=0"), 1),
    Row("F73-ellipses", "$\\frac{x^2}{4}+\\frac{y^2}{3}=1$", b("\\frac{x^2}{16}+\\frac{y^2}{12}=1"), 0),
    # F74: decided by the magnitude guard, before anything is evaluated (no need to wait for the deadline).
    Row("F74-power-tower", "5", POWER_TOWER, 0),
    # A sum of astronomically large terms is never evaluated: not one power of an integer, so unequal at once
    # (issue 23; it used to run into the deadline).
    Row("huge-difference-decided", "5", b("10^{10^{8}} - 10^{10^{8}-1}"), 0),
    # sympy evaluates a binomial coefficient exactly, and one of three million digits passes the deadline.
    Row("timeout-huge-binomial", "5", b("\\binom{10000000}{5000000}"), 0, "answer_timeout"),
    Row(
        "F76-answer-marker",
        "9",
        "Final Answer:\nThe last three digits of \\(2003^{2002^{2001}}\\) are:\n\\[Answer: 009\\]",
        0,
        "no_answer",
    ),
    Row("F76-huge-factorial", "5", "\\boxed{(10^{7})!}", 0),
    Row("F76-huge-power", "5", "\\boxed{10^{10^{7}}}", 0),
    Row("guard-e-sign", "1 - \\frac{1}{e}", b("1 + \\frac{1}{e}"), 0),
    Row("guard-e-same", "1 - \\frac{1}{e}", b("1-e^{-1}"), 1),
    Row("guard-abs-not-positive", "|x|", b("x"), 0),
    Row("guard-decimal-terminating", "0.5", b("\\frac{27}{50}"), 0),
    # ---- MATH-500-style answers ----------------------------------------------------------------------
    Row("frac-dfrac", "\\frac{14}{3}", b("\\dfrac{14}{3}"), 1),
    Row("frac-decimal", "\\frac{1}{2}", b("0.5"), 1),
    Row("frac-wrong", "\\frac{1}{2}", b("\\frac{1}{3}"), 0),
    Row("frac-rounded-pred", "\\frac{1}{3}", b("0.333"), 0),
    Row("frac-negative", "-\\frac{3}{4}", b("\\frac{-3}{4}"), 1),
    Row("radical-power", "\\sqrt{2}", b("2^{1/2}"), 1),
    Row("radical-simplified", "3\\sqrt{13}", b("\\sqrt{117}"), 1),
    Row("radical-product", "\\frac{\\sqrt{3}}{2}", b("\\frac{1}{2}\\sqrt{3}"), 1),
    Row("radical-wrong", "2\\sqrt{2}", b("\\sqrt{6}"), 0),
    Row("interval-same", "(-\\infty, 3]", b("(-\\infty,3]"), 1),
    Row("interval-flipped", "[2,5)", b("(2,5]"), 0),
    Row("interval-union", "(-\\infty,-2)\\cup(2,\\infty)", b("(-\\infty, -2) \\cup (2, \\infty)"), 1),
    Row("tuple-order", "(1,2)", b("(2,1)"), 0),
    Row("tuple-spacing", "(3, -1)", b("(3,-1)"), 1),
    Row("matrix-same", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", b("\\begin{pmatrix}1\\\\2\\end{pmatrix}"), 1),
    Row("matrix-wrong", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}", b("\\begin{pmatrix} 2 \\\\ 1 \\end{pmatrix}"), 0),
    Row(
        "matrix-2x2",
        "\\begin{pmatrix} 1 & 0 \\\\ 0 & 1 \\end{pmatrix}",
        b("\\begin{bmatrix} 1 & 0 \\\\ 0 & 1 \\end{bmatrix}"),
        1,
    ),
    Row("pi-quarter", "\\frac{\\pi}{4}", b("\\frac{1}{4}\\pi"), 1),
    Row("pi-decimal", "\\pi", b("3.14159265"), 1),
    Row("pi-rough-decimal", "2\\pi", b("6.28"), 0),
    Row("degrees-not-radians", "45^\\circ", b("\\frac{\\pi}{4}"), 0),
    Row("text-unwrapped", "\\text{Evelyn}", b("Evelyn"), 1),
    Row("text-wrong", "\\text{east}", b("\\text{west}"), 0),
    Row("choice-parenthesised", "\\text{(C)}", b("C"), 1),
    Row("choice-wrong", "A", b("B"), 0),
    Row("equation-spacing", "y = 2x + 3", b("y=2x+3"), 1),
    Row("equation-wrong", "y = 2x + 3", b("y = 3x + 2"), 0),
    Row("equation-reordered", "x^2+y^2=1", b("y^2+x^2=1"), 1),
    Row("set-order", "\\{1, 2, 3\\}", b("\\{3,2,1\\}"), 1),
    Row("list-order", "2, 3", b("3, 2"), 1),
    Row("percent-decimal", "10\\%", b("0.1"), 1),
    Row("polynomial-factored", "x^2-1", b("(x-1)(x+1)"), 1),
    Row("polynomial-wrong", "x^2+1", b("x^2-1"), 0),
    Row("complex-reordered", "1+2i", b("2i+1"), 1),
    Row("complex-conjugate", "1+2i", b("1-2i"), 0),
    Row("unparsable-gold", "}{", b("5"), 0, "unparsable_gold"),
    # ---- issue 14: forms a mathematician grades differently ------------------------------------------
    # numbers separated by whitespace: mixed numbers are whole + fraction, two bare numbers are not one
    Row("mixed-not-half", "\\frac{1}{2}", b("1 1/4"), 0),
    Row("mixed-five-quarters", "\\frac{5}{4}", b("1 1/4"), 1),
    Row("mixed-frac", "\\frac{9}{5}", b("1\\frac{4}{5}"), 1),
    Row("mixed-frac-not-product", "\\frac{4}{5}", b("1\\frac{4}{5}"), 0),
    Row("mixed-negative", "-\\frac{5}{4}", b("-1\\frac{1}{4}"), 1),
    Row("mixed-negative-not-minus-three-quarters", "-\\frac{3}{4}", b("-1\\frac{1}{4}"), 0),
    Row("mixed-decimal", "2.5", b("2\\,\\tfrac{1}{2}"), 1),
    Row("mixed-gold", "1\\frac{1}{4}", b("\\frac{5}{4}"), 1),
    Row("mixed-assignment", "\\frac{5}{4}", b("x = 1 1/4"), 1),
    Row("separated-assignment", "5", b("x = 2 3"), 0),
    Row("mixed-gold-wrong", "1\\frac{1}{4}", b("\\frac{1}{4}"), 0),
    Row("separated-not-sum", "5", b("2 3"), 0),
    Row("separated-not-product", "6", b("2 3"), 0),
    Row("separated-not-concatenation", "23", b("2 3"), 0),
    Row("separated-three", "6", b("1 2 3"), 0),
    Row("separated-spacing-command", "5", b("2\\;3"), 0),
    Row("separated-improper", "\\frac{7}{2}", b("2 3/2"), 0),
    Row("separated-thousands-still-integer", "1000", b("1 000"), 1),
    # solution sets: a relation equals the interval or union of the same set, in both directions
    Row("set-relation-pred", "(-\\infty, 3)", b("x<3"), 1),
    Row("set-relation-gold", "x<3", b("(-\\infty, 3)"), 1),
    Row("set-chained", "[2,5)", b("2\\le x<5"), 1),
    Row("set-geq", "[1,\\infty)", b("x \\geq 1"), 1),
    Row("set-or", "(-\\infty,2)\\cup(3,\\infty)", b("x<2 \\text{ or } x>3"), 1),
    Row("set-lor", "(-\\infty,2)\\cup(3,\\infty)", b("x<2 \\lor x>3"), 1),
    Row("set-and", "(1,3)", b("x > 1 \\text{ and } x < 3"), 1),
    Row("set-other-variable", "(1,3)", b("1<t<3"), 1),
    Row("set-neq", "(-\\infty, 2) \\cup (2, \\infty)", b("x \\neq 2"), 1),
    Row("set-closed-end-differs", "(-\\infty, 3)", b("x \\le 3"), 0),
    Row("set-closed-end-differs-gold", "x<3", b("(-\\infty,3]"), 0),
    Row("set-and-is-not-or", "(-\\infty,2)\\cup(3,\\infty)", b("x<2 \\text{ and } x>3"), 0),
    Row("set-other-end", "[2,5)", b("2\\le x<6"), 0),
    # drafts: a closed <think> never supplies the final answer
    Row(
        "draft-box-not-answer",
        "12",
        "<think>Try 12: \\boxed{12}? No, it fails.</think> The final answer is 15.",
        0,
        "no_answer",
    ),
    Row("draft-box-then-real-box", "15", "<think>Try 12: \\boxed{12}? No.</think> So the answer is \\boxed{15}.", 1),
    Row(
        "draft-answer-block",
        "12",
        "<think><answer>\\boxed{12}</answer> wait, no.</think> <answer>\\boxed{15}</answer>",
        0,
    ),
    Row("draft-unclosed-counts", "12", "<think>so it is \\boxed{12}", 1),
    # constants in references parse in every spelling
    Row("const-mathrm-e", "1 - \\frac{1}{\\mathrm{e}}", b("1 - e^{-1}"), 1),
    Row("const-mathrm-e-wrong", "1 - \\frac{1}{\\mathrm{e}}", b("1 + e^{-1}"), 0),
    Row("const-operatorname-e", "\\operatorname{e}^{2}", b("e^2"), 1),
    Row("const-mathrm-i", "3 + 2\\mathrm{i}", b("2i+3"), 1),
    Row("const-uppi", "\\frac{\\uppi}{3}", b("\\frac{\\pi}{3}"), 1),
    Row("const-unicode-pi", "2\\pi", b("2π"), 1),
    # subscript bases: the value in that base, never the digits read as decimal
    Row("base-digits-not-decimal", "123_8", b("123"), 0),
    Row("base-value", "123_8", b("83"), 1),
    Row("base-written", "123_8", b("123_{8}"), 1),
    Row("base-binary", "1011_2", b("11"), 1),
    Row("base-binary-digits", "1011_2", b("1011"), 0),
    Row("base-question-fixes-it", "123_8", b("123"), 1, None, "Express your answer in base 8."),
    Row("base-question-decimal-value", "123_8", b("83"), 0, None, "Express your answer in base 8."),
    Row("base-question-word", "4343_6", b("4343"), 1, None, "What is the base six equivalent of $999_{10}$?"),
    Row("base-question-other-base", "123_8", b("123"), 0, None, "Express your answer in base 9."),
    Row("base-invalid-digits", "129_8", b("129"), 0, "unparsable_gold"),
    # units are dropped, constants are values
    Row("const-not-unit", "2\\mathrm{e}", b("2"), 0),
    Row("const-not-unit-same", "2\\mathrm{e}", b("2e"), 1),
    Row("const-i-not-unit", "2\\mathrm{i}", b("2"), 0),
    Row("const-pi-not-unit", "2\\pi", b("2 pi"), 0),
    Row("const-pi-text-not-unit", "2", b("2\\text{ pi}"), 0),
    Row("unit-still-dropped", "2", b("2\\text{ m}"), 1),
    # undefined expressions equal nothing
    Row("undefined-4", "0", b("4 \\cdot 0/0"), 0),
    Row("undefined-5", "0", b("5 \\cdot 0/0"), 0),
    Row("undefined-inf-minus-inf", "0", b("\\infty - \\infty"), 0),
    Row("undefined-zero-times-inf", "0", b("0 \\cdot \\infty"), 0),
    Row("undefined-zero-denominator", "5", b("\\frac{1}{1-1}"), 0),
    Row("undefined-in-tuple", "(0, 1)", b("(0/0, 1)"), 0),
    Row("undefined-gold", "\\frac{0}{0}", b("0"), 0, "unparsable_gold"),
    Row("infinity-still-infinity", "\\infty", b("+\\infty"), 1),
    # trailing punctuation never changes the reward, on any path
    Row("punct-symbolic", "\\frac{\\sqrt{2}}{2}", b("\\frac{1}{\\sqrt{2}}."), 1),
    Row("punct-symbolic-semicolon", "\\frac{\\sqrt{2}}{2}", b("\\frac{1}{\\sqrt{2}};"), 1),
    Row("punct-symbolic-comma", "\\frac{\\sqrt{2}}{2}", b("\\frac{1}{\\sqrt{2}},"), 1),
    Row("punct-string", "\\frac{3}{4}", b("\\frac{3}{4}."), 1),
    Row("punct-wrong-stays-wrong", "\\frac{3}{4}", b("\\frac{1}{\\sqrt{2}}."), 0),
    Row("punct-integer-semicolon", "42", b("42;"), 1),
    Row("punct-integer-comma", "42", b("42,"), 1),
    Row("punct-inside-math", "\\frac{1}{2}", b("$0.5$."), 1),
    Row("punct-after-box", "\\frac{\\sqrt{2}}{2}", "so \\boxed{\\frac{1}{\\sqrt{2}}}.", 1),
    Row("punct-braceless-box", "7", "so \\boxed 7.", 1),
    Row("punct-ellipsis-kept", "1, 2, 3", b("1, 2, 3, ..."), 0),
    # ---- issue 23: a box holds one committed answer ---------------------------------------------------
    Row("hedge-or-text", "2", b("2\\text{ or 3}"), 0, "hedged"),
    Row("hedge-or-possibly", "2", b("2 \\text{ (or possibly 3)}"), 0, "hedged"),
    Row("hedge-or-plain", "2", b("2 or three"), 0, "hedged"),
    Row("hedge-lor-values", "2", b("2 \\lor 3"), 0, "hedged"),
    Row("hedge-maybe", "2", b("\\text{maybe } 2"), 0, "hedged"),
    Row("hedge-approx", "\\frac{1}{3}", b("\\approx 0.333333"), 0, "hedged"),
    Row("hedge-symbolic", "\\frac{1}{2}", b("\\frac{1}{2} \\text{ or } \\frac{1}{3}"), 0, "hedged"),
    Row("negation-is-wrong", "5", b("5\\text{ is wrong}"), 0, "hedged"),
    Row("negation-not", "5", b("\\text{not } 5"), 0, "hedged"),
    Row("or-joins-conditions", "(-\\infty,2)\\cup(3,\\infty)", b("x<2 \\text{ or } x>3"), 1),
    Row("or-lists-a-list-reference", "2, 3", b("2 \\text{ or } 3"), 1),
    Row("or-assignments", "2, 3", b("x=2 \\text{ or } x=3"), 1),
    Row("text-answer-with-the-word", "\\text{No}", b("\\text{no}"), 1),
    Row("unit-text-still-dropped", "5", b("5\\text{ cm}"), 1),
    Row("unit-dollar-still-dropped", "5", b("\\$5"), 1),
    Row("unit-plain-still-dropped", "5", b("5 meters"), 1),
    Row("unit-dollars-still-dropped", "5", b("5\\text{ dollars}"), 1),
    Row("unit-area-still-dropped", "15", b("15\\mbox{ cm}^2"), 1),
    # ---- issue 23: grading kinds ------------------------------------------------------------------------
    Row("repeating-overline", "\\frac{1}{3}", b("0.\\overline{3}"), 1),
    Row("repeating-gold", "0.\\overline{3}", b("\\frac{1}{3}"), 1),
    Row("repeating-mixed", "\\frac{1}{6}", b("0.1\\overline{6}"), 1),
    Row("repeating-long", "\\frac{8}{7}", b("1.\\overline{142857}"), 1),
    Row("repeating-dot", "\\frac{1}{3}", b("0.\\dot{3}"), 1),
    Row("repeating-wrong", "\\frac{1}{3}", b("0.\\overline{6}"), 0),
    Row("repeating-not-rounded", "\\frac{1}{3}", b("0.333"), 0),
    Row("imaginary-square", "-1", b("i^2"), 1),
    Row("imaginary-quotient", "1+i", b("\\frac{2}{1-i}"), 1),
    Row("imaginary-square-of-sum", "2i", b("(1+i)^2"), 1),
    Row("imaginary-wrong", "1+i", b("\\frac{2}{1+i}"), 0),
    Row("imaginary-math500", "6 - 5i", b("(2-i)(3-i) + 1"), 1),
    Row("imaginary-with-variables-stays-a-variable", "i^2 + x", b("x - 1"), 0),
    Row("percent-decimal-number", "12.5", b("12.5\\%"), 1),
    Row("percent-decimal-gold", "12.5\\%", b("12.5"), 1),
    Row("percent-fraction-still", "0.125", b("12.5\\%"), 1),
    Row("percent-wrong", "12.5", b("13.5\\%"), 0),
    Row("extreme-scientific", "6.02 \\times 10^{23}", b("602000000000000000000000"), 1),
    Row("extreme-scientific-wrong", "6.02 \\times 10^{23}", b("602000000000000000000001"), 0),
    Row("extreme-small-relative", "0.0000001", b("0.0000002"), 0),
    Row("extreme-small-equal", "0.0000001", b("10^{-7}"), 1),
    Row("extreme-small-vs-zero", "0", b("0.0000001"), 0),
    Row("extreme-power-tower-equal", "3^{531441}", b("3^{3^{12}}"), 1),
    Row("extreme-power-tower-unequal", "3^{531442}", b("3^{3^{12}}"), 0),
    Row("extreme-power-bases", "9^{1000000}", b("3^{2000000}"), 1),
    Row("extreme-power-small", "3^{729}", b("3^{3^{6}}"), 1),
    Row("long-integer-equal", LONG, b(LONG), 1),
    Row("long-integer-unequal", LONG, b(LONG[:-1] + "2"), 0),
    Row("long-non-integer", "\\frac{1}{2}", b(LONG + ".5"), 0),
    Row("full-width-digits", "12", b("１２"), 1),
    Row("full-width-wrong", "12", b("１３"), 0),
    Row("full-width-symbolic", "\\frac{1}{2}", b("\\frac{１}{２}"), 1),
    Row("empty-set-varnothing", "\\emptyset", b("\\varnothing"), 1),
    Row("empty-set-unicode", "\\varnothing", b("∅"), 1),
    Row("empty-set-not-zero", "\\emptyset", b("0"), 0),
    # ---- issue 41: number words and nonsense are not units ------------------------------------------------
    Row("multiplier-not-unit", "2", b("2 \\text{ million}"), 0),
    Row("multiplier-value", "2000000", b("2 \\text{ million}"), 1),
    Row("multiplier-dozen", "36", b("3 \\text{ dozen}"), 1),
    Row("multiplier-dozen-not-unit", "3", b("3 \\text{ dozen}"), 0),
    Row("multiplier-plain", "2", b("2 hundred"), 0),
    Row("multiplier-plain-value", "200", b("2 hundred"), 1),
    Row("operation-squared", "5", b("5 \\text{ squared}"), 0),
    Row("operation-squared-value", "25", b("5 \\text{ squared}"), 0),
    Row("number-words-and-a-half", "2", b("2 \\text{ and a half}"), 0),
    Row("operation-reciprocal", "2", b("2 \\text{ reciprocal}"), 0),
    Row("remark-could-be", "2", b("2 \\text{ (could be 3)}"), 0, "hedged"),
    Row("remark-another-number", "2", b("2 \\text{ (3 also works)}"), 0, "hedged"),
    Row("false-equation-last-part", "3", b("2 = 3"), 0),
    Row("false-equation-first-part", "2", b("2 = 3"), 0),
    Row("true-equation", "2", b("\\frac{6}{3} = 2"), 1),
    Row("divides-last-part", "3", b("2 \\mid 3"), 0),
    Row("set-minus-number", "5", b("\\mathbb{R} - 5"), 0),
    Row("unit-square-feet-still-dropped", "12", b("12 \\text{ square feet}"), 1),
    # ---- issue 43: an exact value followed by its own approximation ---------------------------------------
    Row("approx-exact-gold", "\\pi", b("\\pi \\approx 3.14"), 1),
    Row("approx-exact-gold-multiple", "288 \\pi", b("288\\pi \\approx 904.78"), 1),
    Row("approx-decimal-gold", "904.78", b("288\\pi \\approx 904.78"), 1),
    Row("approx-decimal-gold-rounded", "3.14", b("\\pi \\approx 3.14"), 1),
    Row("approx-truncated", "\\pi", b("\\pi \\approx 3.1415"), 1),
    Row("approx-wrong-digit", "\\pi", b("\\pi \\approx 3.15"), 0),
    Row("approx-far-off", "\\pi", b("\\pi \\approx 30"), 0),
    Row("approx-contradiction-first", "2", b("2 \\approx 3"), 0),
    Row("approx-contradiction-last", "3", b("2 \\approx 3"), 0),
    Row("approx-chain", "\\pi", b("\\pi \\approx 3.14 \\approx 3.1"), 0, "hedged"),
    Row("approx-reversed", "\\pi", b("3.14 \\approx \\pi"), 0, "hedged"),
    Row("approx-exact-part-wrong", "\\frac{22}{7}", b("\\pi \\approx 3.14"), 0),
    Row("approx-low-precision-gold", "0.5", b("\\frac{27}{50} \\approx 0.5"), 0),
]

# The per-item deadline of the issue (field case F74: budget 5 s).
DEADLINE_S = 5.0


@pytest.fixture(scope="module")
def table() -> Iterator[dict[str, Verdict]]:
    """Every row verified in one batch through the shared default ``LocalSandbox`` (the production path)."""
    items = [VerifyItem(row.response, row.gold, question=row.question) for row in ROWS]
    verdicts = Verifier(config=VerifierConfig(timeout_s=DEADLINE_S), stats=VerifierStats()).verify_batch(items)
    yield {row.id: verdict for row, verdict in zip(ROWS, verdicts)}
    close_default_executor()


def test_table_is_large_and_ids_are_unique() -> None:
    assert len(ROWS) >= 80
    assert len({row.id for row in ROWS}) == len(ROWS)


def test_huge_answers_are_rejected_by_the_guard_not_evaluated(table: dict[str, Verdict]) -> None:
    for row_id in ("F74-power-tower", "F76-huge-factorial", "F76-huge-power"):
        assert "magnitude guard" in (table[row_id].detail or ""), table[row_id]


def test_the_timeout_row_was_killed_at_the_deadline_and_charged_to_the_answer(table: dict[str, Verdict]) -> None:
    verdict = table["timeout-huge-binomial"]
    assert verdict.status == "answer_timeout" and verdict.path == "symbolic"
    assert "deadline" in (verdict.detail or "") and "the reference compared with itself" in (verdict.detail or "")


def test_symbolic_rows_ran_in_sandbox_workers(table: dict[str, Verdict]) -> None:
    paths = {verdict.path for verdict in table.values()}
    assert {"string", "integer", "symbolic", "none"} <= paths
    assert sum(v.path == "symbolic" for v in table.values()) >= 40


def test_verify_from_a_thread_through_the_sandbox(table: dict[str, Verdict]) -> None:  # F77
    out: list[Verdict] = []
    thread = threading.Thread(target=lambda: out.append(verify("\\boxed{\\frac{4}{2}}", "$2$", stats=VerifierStats())))
    thread.start()
    thread.join(60)
    assert out and out[0].correct and out[0].path == "symbolic"


@pytest.mark.parametrize("row", ROWS, ids=[row.id for row in ROWS])
def test_reward_table(row: Row, table: dict[str, Verdict]) -> None:
    verdict = table[row.id]
    assert verdict.reward == row.reward, verdict
    assert verdict.status == (row.status or "ok"), verdict


TOKENS = [
    "\\frac{",
    "}",
    "{",
    "^",
    "!",
    "10",
    "7",
    "0",
    "\\sqrt",
    "(",
    ")",
    "[",
    "]",
    ",",
    "x",
    "=",
    "-",
    "+",
    "\\infty",
    "\\pi",
    "\\text{",
    "\\\\",
    "&",
    "\\begin{pmatrix}",
    "\\end{pmatrix}",
    "\\%",
    "$",
    "\\cup",
    "\\le",
    "e",
    "i",
    ".",
    "\\cdot",
    "\\left(",
    "\\right)",
    " ",
    "\\dfrac",
    "\\{",
    "\\}",
    ":",
    "\\pm",
    "\\circ",
    "|",
]


def test_random_latex_never_raises_and_always_gets_a_status(table: dict[str, Verdict]) -> None:
    import random

    from tirl.reward import VERIFY_STATUSES

    rng = random.Random(5)
    items = []
    for _ in range(60):
        gold = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 8)))
        pred = "".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 12)))
        items.append(("\\boxed{" + pred + "}", gold))
    verdicts = Verifier(config=VerifierConfig(timeout_s=2.0), stats=VerifierStats()).verify_batch(items)
    assert len(verdicts) == len(items)
    assert all(v.status in VERIFY_STATUSES for v in verdicts)
    assert all(v.correct is False or v.status == "ok" for v in verdicts)
