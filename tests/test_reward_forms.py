"""Reading answer forms (tirl.reward.forms): punctuation, constants, base numerals, mixed and separated numbers.

Each policy is checked with several inputs, in both the accepting and the rejecting direction; the end-to-end
rewards of the same forms are rows of tests/test_reward_table.py.
"""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.reward.forms import Reading, approximation, question_base, read_answer, strip_trailing_punctuation
from tirl.reward.normalize import canonical_integer


def frac_value(text: str) -> Fraction:
    """The value of a ``[-]\\frac{p}{q}`` text."""
    sign = -1 if text.startswith("-") else 1
    p, q = text.lstrip("-")[len("\\frac{") : -1].split("}{")
    return sign * Fraction(int(p), int(q))


@pytest.mark.parametrize(
    "answer, value",
    [
        ("1 1/4", Fraction(5, 4)),
        ("1\\frac{4}{5}", Fraction(9, 5)),
        ("1 \\frac{4}{5}", Fraction(9, 5)),
        ("2\\,\\dfrac{1}{3}", Fraction(7, 3)),
        ("-1\\frac{1}{4}", Fraction(-5, 4)),
        ("-2 3/7", Fraction(-17, 7)),
        ("10\\tfrac12", Fraction(21, 2)),
        ("$3~1/2$", Fraction(7, 2)),
        ("12 5/12.", Fraction(149, 12)),
    ],
)
def test_mixed_numbers_are_whole_plus_fraction(answer: str, value: Fraction) -> None:
    reading = read_answer(answer)
    assert reading.problem is None
    assert frac_value(reading.text) == value


def test_mixed_numbers_after_an_assignment() -> None:
    assert read_answer("x = 1 1/4").text == "x = \\frac{5}{4}"
    assert read_answer("n_1 = 1\\frac{1}{2}").text == "n_1 = \\frac{3}{2}"
    assert "separated" in (read_answer("x=2 3").problem or "")


@pytest.mark.parametrize("answer", ["2 3", "1 2 3", "2\\;3", "2\\quad 3", "1.5 2", "2 3/2", "-1 -2", "7 0/0"])
def test_numbers_separated_by_whitespace_are_not_one_number(answer: str) -> None:
    reading = read_answer(answer)
    assert reading.problem is not None and "separated" in reading.problem


@pytest.mark.parametrize("answer", ["1 000", "1\\,000", "12 345 678", "2x + 3", "(2, 3)", "2, 3", "x = 2"])
def test_grouped_digits_and_other_spaced_forms_are_not_separated_numbers(answer: str) -> None:
    assert read_answer(answer).problem is None


@pytest.mark.parametrize(
    "answer, read",
    [
        ("1 - \\frac{1}{\\mathrm{e}}", "1 - \\frac{1}{e}"),
        ("\\operatorname{e}^{2}", "e^{2}"),
        ("\\mathrm{e}", "e"),
        ("2 \\textrm{ e }", "2 e"),
        ("3\\mathrm{i}", "3i"),
        ("1+\\operatorname{i}", "1+i"),
        ("\\rm e^x", "e^x"),
        ("\\frac{\\uppi}{2}", "\\frac{\\pi }{2}"),
        ("2π", "2\\pi"),
        ("2\\text{ pi}", "2\\pi"),
        ("2\\text{e}", "2e"),
        ("\\text{e}", "\\text{e}"),  # alone it may be a letter answer
        ("\\mathrm{\\pi}", "\\pi"),
    ],
)
def test_constants_in_any_spelling_are_read_as_constants(answer: str, read: str) -> None:
    assert read_answer(answer).text == read


@pytest.mark.parametrize(
    "answer, value, base",
    [
        ("123_8", "83", 8),
        ("123_{8}", "83", 8),
        ("1011_2", "11", 2),
        ("(1011)_2", "11", 2),
        ("4210_{5}", "555", 5),
        ("A3_{16}", "163", 16),
        ("\\text{a3}_{16}", "163", 16),
        ("999_{10}", "999", 10),
    ],
)
def test_base_numerals_are_their_value(answer: str, value: str, base: int) -> None:
    reading = read_answer(answer)
    assert (reading.text, reading.problem, reading.base) == (value, None, base)


@pytest.mark.parametrize("answer", ["129_8", "12_1", "2_2", "19_{9}"])
def test_digits_invalid_in_the_base_are_not_a_number(answer: str) -> None:
    assert "numeral" in (read_answer(answer).problem or "")


@pytest.mark.parametrize("answer", ["x_1", "a_{2}", "a_n", "F_{10}", "2a_3", "3x_{2}"])
def test_subscripted_variables_are_not_base_numerals(answer: str) -> None:
    reading = read_answer(answer)
    assert reading.problem is None and reading.base is None and reading.text == answer


def test_a_bare_numeral_is_read_in_the_base_the_question_asks_for() -> None:
    assert read_answer("123", 8).text == "83"
    assert read_answer("1011", 2).text == "11"
    assert "not a base-8 numeral" in (read_answer("83", 8).problem or "")  # the decimal value is not what was asked
    assert read_answer("123").text == "123"  # no question: decimal


@pytest.mark.parametrize(
    "question, base",
    [
        ("Express your answer in base 8.", 8),
        ("Find $218_9 \\cdot 5_9$. Express your answer in base $9$.", 9),
        ("What is the base six equivalent of $999_{10}$?", 6),
        ("Convert $2516$ from base 10 to base eight.", 8),
        ("Write 17 in binary.", 2),
        ("What is $1+1$?", None),
        ("Compare base 5 and base 7 numerals.", None),
        (None, None),
    ],
)
def test_question_base(question: str | None, base: int | None) -> None:
    assert question_base(question) == base


@pytest.mark.parametrize(
    "answer, stripped",
    [
        ("\\frac{1}{\\sqrt{2}}.", "\\frac{1}{\\sqrt{2}}"),
        ("\\frac{3}{4};", "\\frac{3}{4}"),
        ("5,", "5"),
        ("$\\frac{1}{2}$.", "\\frac{1}{2}"),
        ("$\\frac{1}{2}.$", "\\frac{1}{2}"),
        ("7.\\,", "7"),
        ("x = 5 .", "x = 5"),
        ("1, 2, 3, ...", "1, 2, 3, ..."),
        ("5\\;", "5"),
        ("0.5", "0.5"),
    ],
)
def test_trailing_punctuation_is_dropped(answer: str, stripped: str) -> None:
    assert strip_trailing_punctuation(answer) == stripped


@pytest.mark.parametrize(
    "answer, integer",
    [
        ("2\\mathrm{e}", None),
        ("2\\text{ e}", None),
        ("2\\mathrm{i}", None),
        ("2\\mathrm{\\pi}", None),
        ("2 pi", None),
        ("35\\text{ cm}", "35"),
        ("3\\mathrm{kg}", "3"),
        ("5 cm", "5"),
        ("30^\\circ", "30"),
        ("10\\%", "10"),
        ("2\\mathrm{m}", "2"),
    ],
)
def test_units_are_dropped_but_constants_are_values(answer: str, integer: str | None) -> None:
    assert canonical_integer(answer) == integer


def test_logical_connectives_become_words_math_verify_reads() -> None:
    assert read_answer("x<2 \\lor x>3").text == "x<2 \\text{ or } x>3"
    assert read_answer("x>1\\wedge x<3").text == "x>1 \\text{ and } x<3"


ANSWER_PIECES = [
    "1",
    "2",
    "0",
    "12",
    " ",
    "\\,",
    "/",
    "\\frac{",
    "}{",
    "}",
    "_",
    "8",
    "{",
    "\\mathrm{e}",
    ".",
    ";",
    ",",
    "-",
    "$",
    "x",
    "<",
    "\\lor",
    "π",
    "A",
]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(ANSWER_PIECES), max_size=10))
def test_reading_is_idempotent_and_never_raises(pieces: list[str]) -> None:
    text = "".join(pieces)
    first = read_answer(text)
    if first.problem is None:
        again = read_answer(first.text)
        assert again.text == first.text and again.problem is None


def test_reading_a_long_answer_is_linear() -> None:
    import time

    text = " " * 200_000 + "x" + "1 " * 100_000
    start = time.process_time()
    read_answer(text)
    # A quadratic scan of 300K characters would take minutes; this bounds CPU time very loosely.
    assert time.process_time() - start < 30


@pytest.mark.parametrize(
    "a, b",
    [
        ("\\frac{1}{2}", "0.5"),
        ("\\dfrac{1}{2}", "1/2"),
        ("x = \\frac12", "\\tfrac{3}{6}"),
        ("1,000", "1000"),
        ("\\$1{,}000", "1 000"),
        ("x = 5", "5."),
        ("-\\frac{3}{4}", "\\frac{-3}{4}"),
        ("-0.75", "-\\frac{3}{4}"),
        ("123_8", "83"),
        ("1 1/4", "\\frac{5}{4}"),
        ("x + 1", "x+1"),
        ("5.0", "5"),
    ],
)
def test_value_key_joins_equal_values(a: str, b: str) -> None:
    from tirl.reward.forms import value_key

    assert value_key(a) == value_key(b)


@pytest.mark.parametrize(
    "a, b",
    [
        ("2 3", "23"),
        ("2 3", "5"),
        ("\\frac{1}{2}", "\\frac{1}{3}"),
        ("0.5", "0.55"),
        ("x+1", "x-1"),
        ("1,2", "12"),
        ("123", "123_8"),
        ("1 1/4", "\\frac{1}{2}"),
    ],
)
def test_value_key_keeps_different_values_apart(a: str, b: str) -> None:
    from tirl.reward.forms import value_key

    assert value_key(a) != value_key(b)


# ---------------------------------------------------------------------------------------------- issue 23
from tirl.reward.forms import commitment_problem, hedge_words, is_list, value_key  # noqa: E402


@pytest.mark.parametrize(
    "answer, gold, word",
    [
        ("2\\text{ or 3}", "2", "'or'"),
        ("2 \\text{ (or possibly 3)}", "2", "possibly"),
        ("2 or three", "2", "'or'"),
        ("2 \\lor 3", "2", "'or'"),
        ("2 \\vee 3", "2", "'or'"),
        ("x = 2 \\text{ or } 3", "2", "'or'"),
        ("\\frac{1}{2} \\text{ or } \\frac{1}{3}", "\\frac{1}{2}", "'or'"),
        ("2 \\text{ or } 3", "(2, 3)", "'or'"),  # a tuple is not a list of alternatives
        ("\\text{maybe } 2", "2", "maybe"),
        ("\\text{Perhaps} 7", "7", "perhaps"),
        ("7 \\text{ (probably)}", "7", "probably"),
        ("\\text{either } 2", "2", "either"),
        ("\\approx 3.14", "3.14", "approximately"),
        ("\\text{about } 40", "40", "about"),
        ("5\\text{ is wrong}", "5", "wrong"),
        ("5\\text{ is not the answer}", "5", "not"),
        ("\\text{not } 5", "5", "not"),
        ("\\textbf{NOT} 5", "5", "not"),
        ("5 \\text{ (incorrect)}", "5", "incorrect"),
        ("\\text{No}", "\\text{Yes}", "no"),
    ],
)
def test_hedges_negations_and_alternatives_are_not_committed_answers(answer: str, gold: str, word: str) -> None:
    problem = commitment_problem(answer, gold)
    assert problem is not None and word in problem, problem


@pytest.mark.parametrize(
    "answer, gold",
    [
        ("x<2 \\text{ or } x>3", "(-\\infty,2)\\cup(3,\\infty)"),  # conditions: a solution set
        ("x<2 \\lor x>3", "(-\\infty,2)\\cup(3,\\infty)"),
        ("x=2 \\text{ or } x=3", "2, 3"),
        ("2 \\text{ or } 3", "2, 3"),  # the reference is a list
        ("2 \\text{ or } 3", "\\{2, 3\\}"),
        ("\\text{no}", "\\text{No}"),  # the reference holds the word
        ("\\text{not possible}", "\\text{not possible}"),
        ("5\\text{ cm}", "5"),
        ("\\text{Evelyn}", "\\text{Evelyn}"),
        ("\\text{(C)}", "C"),
        ("\\text{east}", "\\text{east}"),
        ("x \\notin [0, 1]", "x"),  # command names are not words
        ("x \\neq 2", "x"),
        ("x \\not= 2", "x"),
        ("\\text{north}", "\\text{north}"),  # "no" only as a whole word
        ("\\text{ordinary}", "x"),
        ("42", "42"),
        ("", "2"),
    ],
)
def test_committed_answers_are_not_hedged(answer: str, gold: str) -> None:
    assert commitment_problem(answer, gold) is None


def test_hedge_words_and_lists() -> None:
    assert hedge_words("2 \\text{ (or possibly 3)}") == {"or", "possibly"}
    assert hedge_words("x \\notin S") == frozenset() and hedge_words("123") == frozenset()
    assert hedge_words("2 \\vee 3") == {"or"} and hedge_words("\\approx 2") == {"approximately"}
    assert is_list("2, 3") and is_list("\\{1, 2\\}") and is_list("$x = 1, 2$")
    assert not is_list("(2, 3)") and not is_list("[2,5)") and not is_list("\\frac{1}{2}")


@pytest.mark.parametrize(
    "answer, value",
    [
        ("0.\\overline{3}", Fraction(1, 3)),
        ("0.1\\overline{6}", Fraction(1, 6)),
        ("1.\\overline{142857}", Fraction(8, 7)),
        ("0.\\bar{3}", Fraction(1, 3)),
        ("0.\\overline 3", Fraction(1, 3)),
        (".\\overline{3}", Fraction(1, 3)),
        ("0.\\dot{3}", Fraction(1, 3)),
        ("0.1\\dot{6}", Fraction(1, 6)),
        ("0.\\dot{1}4\\dot{2}", Fraction(142, 999)),
        ("2.\\overline{45}", Fraction(27, 11)),
    ],
)
def test_repeating_decimals_are_their_fraction(answer: str, value: Fraction) -> None:
    text = read_answer(answer).text
    assert frac_value(text) == value, text
    assert read_answer(text).text == text  # reading is idempotent
    assert read_answer("-" + answer).text == "-" + text


def test_repeating_decimal_forms_inside_larger_answers_and_integers() -> None:
    assert read_answer("0.\\overline{9}").text == "1"
    assert read_answer("2\\cdot 0.\\overline{3}").text == "2\\cdot \\frac{1}{3}"
    assert read_answer("(0.\\overline{3}, 1)").text == "(\\frac{1}{3}, 1)"
    assert read_answer("\\overline{AB}").text == "\\overline{AB}"  # a segment, not a decimal
    assert read_answer("\\bar{z}").text == "\\bar{z}"


def test_empty_set_spellings_and_unicode_digits() -> None:
    for text in ("\\varnothing", "\\O", "∅", "\\varnothing."):
        assert read_answer(text).text == "\\emptyset"
    assert read_answer("１２").text == "12"
    assert read_answer("\\frac{１}{２}").text == "\\frac{1}{2}"
    assert read_answer("٣").text == "3"  # Arabic-Indic digit three
    assert read_answer("5²").text == "5²"  # superscripts are not digits: no 52


def test_value_key_of_issue_23_forms() -> None:
    assert value_key("１２") == value_key("12") == "=12"
    assert value_key("0.\\overline{3}") == value_key("\\frac{1}{3}") == "=1/3"
    assert value_key("12.5\\%") == value_key("12.5") == "=25/2"
    assert value_key("\\varnothing") == value_key("\\emptyset")
    hedged = value_key("2\\text{ or 3}")
    assert hedged is not None and hedged.startswith("?") and hedged != value_key("2")
    assert value_key("5\\text{ is wrong}") != value_key("5")


# ---- issue 41 item 5: number words and nonsense are not units; issue 43 item 5: approximations --------------
@pytest.mark.parametrize(
    ("answer", "value"),
    [
        ("2 \\text{ million}", "2000000"),
        ("2 million", "2000000"),
        ("3 \\text{ dozen}", "36"),
        ("3 \\text{ dozen eggs}", "36"),
        ("1.5 \\text{ thousand}", "1500"),
        ("-2 \\text{ thousand}", "-2000"),
        ("2 \\text{ hundred thousand}", "200000"),
        ("0.5 \\text{ dozen}", "6"),
    ],
)
def test_a_multiplier_after_a_number_is_its_value(answer: str, value: str) -> None:
    assert read_answer(answer) == Reading(value)
    assert read_answer(value) == Reading(value)  # reading the reading changes nothing
    assert value_key(answer) == value_key(value)
    assert canonical_integer(answer) is None  # the integer path never drops it as a unit


@pytest.mark.parametrize(
    "answer",
    [
        "5 \\text{ squared}",
        "2 \\text{ and a half}",
        "2 \\text{ reciprocal}",
        "2 \\text{ hundred and five}",
        "\\frac{1}{2} \\text{ dozen}",
        "x^2 \\text{ cubed}",
        "2 \\mid 3",
        "2 \\to 3",
        "2 \\implies 3",
    ],
)
def test_number_words_operations_and_last_part_relations_are_no_single_value(answer: str) -> None:
    assert read_answer(answer).problem is not None
    assert canonical_integer(answer) is None


@pytest.mark.parametrize("answer", ["35 \\text{ cm}", "12 \\text{ square feet}", "15\\mbox{ cm}^2", "5 meters"])
def test_units_still_read_as_units(answer: str) -> None:
    assert read_answer(answer).problem is None and canonical_integer(answer) is not None


def test_remarks_with_another_number_are_hedges() -> None:
    assert commitment_problem("2 \\text{ (could be 3)}", "2") is not None
    assert "remark" in (commitment_problem("2 \\text{ (3 also works)}", "2") or "")
    assert commitment_problem("5 \\text{ m^2}", "5") is None  # a unit's exponent is not a number


def test_an_exact_value_and_its_approximation_is_one_committed_answer() -> None:
    assert approximation("\\pi \\approx 3.14") == ("\\pi", "3.14")
    assert approximation("288\\pi ≈ 904.78.") == ("288\\pi", "904.78")
    assert commitment_problem("\\pi \\approx 3.14", "\\pi") is None
    chains = ("\\pi \\approx 3.14 \\approx 3.1", "3.14 \\approx \\pi", "\\approx 3.14", "\\pi \\text{ approx } 3.14")
    for hedged in chains:
        assert commitment_problem(hedged, "\\pi") is not None, hedged
    assert value_key("2 \\approx 3") != value_key("2")  # votes for no plain value
