"""The answer filter (tirl.data.curation.answers): kinds, policies, the digit cap and the verifier deadline."""

from __future__ import annotations

import random

import pytest

from tirl.data.curation.answers import AnswerPolicy, check_answers, classify_answer
from tirl.data.curation.text import normalize_answer
from tirl.reward.verifier import close_default_executor


def kind(raw: str) -> str:
    return classify_answer(normalize_answer(raw))


@pytest.mark.parametrize(
    "raw",
    [
        "\\left( 3, \\frac{\\pi}{2} \\right)",  # MATH-500 (polar coordinates): a tuple
        "(1, 2)",
        "[2, 5)",
        "(-\\infty, -2) \\cup (2, \\infty)",
        "\\{1, 2\\}",
        "\\pm 3",
        "3 and 4",
        "2, 3, 5",
        "x > 2",
        "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
    ],
)
def test_compound_answers_are_compound(raw: str) -> None:
    assert kind(raw) == "compound"


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("42", "integer"),
        ("$1{,}000$", "integer"),
        ("-7", "integer"),
        ("\\boxed{12}", "integer"),
        ("\\frac{3}{4}", "rational"),
        ("-0.25", "rational"),
        ("3/4", "rational"),
        ("2\\sqrt{3}", "expression"),
        ("\\frac{\\pi}{2}", "expression"),
        ("2^{10}", "expression"),
        ("\\text{Monday}", "text"),
        ("yes", "text"),
        ("", "empty"),
    ],
)
def test_kinds(raw: str, expected: str) -> None:
    assert kind(raw) == expected


def test_the_integer_policy_keeps_integers_and_names_every_other_drop() -> None:
    answers = [normalize_answer(a) for a in ["17", "(1, 2)", "\\frac{1}{2}", "\\sqrt{2}", "\\text{red}", ""]]
    checks = check_answers(answers, AnswerPolicy(probe=False))
    assert [c.reason for c in checks] == [
        None,
        "compound_answer",
        "non_integer_answer",
        "expression_answer",
        "text_answer",
        "empty_answer",
    ]


def test_a_2000_digit_answer_is_dropped_by_the_digit_rule_not_by_luck() -> None:
    big = str(random.Random(7).randint(10**1999, 10**2000 - 1))
    assert len(big) == 2000 and classify_answer(normalize_answer(big)) == "integer"
    (dropped,) = check_answers([big])
    assert dropped.reason == "huge_answer" and "2000 digits" in (dropped.detail or "")
    # the same answer passes when the cap allows it: the drop is the rule's, nothing else's
    (kept,) = check_answers([big], AnswerPolicy(max_digits=2000))
    assert kept.reason is None
    (negative,) = check_answers(["-" + big[:20]])  # the sign is not a digit
    assert negative.reason is None


@pytest.fixture(scope="module")
def real_sandbox():
    yield None  # None: the verifier's shared default LocalSandbox (the production path)
    close_default_executor()


@pytest.mark.slow
def test_an_answer_the_verifier_cannot_decide_before_the_deadline_is_dropped_as_a_timeout(real_sandbox) -> None:
    # sympy evaluates this binomial exactly (about 30 million digits): the worker is killed at the deadline (or
    # by its memory limit, which the verifier also reports as a timeout); 3 s leave the fraction room on a
    # loaded machine, and no machine evaluates the binomial in 3 s
    slow = "\\binom{100000000}{50000000}"
    checks = check_answers([slow, "\\frac{1}{2}"], AnswerPolicy(accept="any", deadline_s=3.0), real_sandbox)
    assert checks[0].reason == "verifier_timeout"
    assert checks[1].reason is None  # the probe itself works: a fraction passes it


def test_rational_policy_keeps_fractions_but_not_expressions() -> None:
    checks = check_answers(["\\frac{1}{2}", "\\sqrt{2}", "5"], AnswerPolicy(accept="rational", probe=False))
    assert [c.reason for c in checks] == [None, "expression_answer", None]


def test_bad_policies_are_rejected() -> None:
    with pytest.raises(ValueError):
        AnswerPolicy(accept="everything")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        AnswerPolicy(max_digits=0)
    with pytest.raises(ValueError):
        AnswerPolicy(deadline_s=0)
