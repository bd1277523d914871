"""The in-process fast paths of the reward: integer policy, text normal form, LaTeX wrapping (no sympy)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.reward.normalize import (
    MAX_DECORATED_CHARS,
    canonical_integer,
    latex_for_math_verify,
    normalize_text,
    strip_math_delimiters,
)

INTEGER_CASES = [
    ("42", "42"),
    ("1,000", "1000"),  # F55
    ("1,300,400", "1300400"),  # F55
    ("1{,}000", "1000"),
    ("1\\,000", "1000"),
    ("1 000 000", "1000000"),
    ("1,000.00", "1000"),
    ("009", "9"),  # F76: leading zeros
    ("-0", "0"),
    ("+5", "5"),
    ("\u22127", "-7"),  # Unicode minus
    ("- 7", "-7"),
    ("5.", "5"),
    ("5.0", "5"),
    ("$18$", "18"),
    ("\\$18", "18"),  # F56
    ("\\textdollar 18", "18"),
    ("30^\\circ", "30"),  # F56
    ("30^{\\circ}", "30"),
    ("30°", "30"),
    ("35\\text{ cm}", "35"),  # F56
    ("35 cm", "35"),
    ("12 square feet", "12"),
    ("5 cm^2", "5"),
    ("7 \\mbox{dollars}", "7"),
    ("\\text{13}", "13"),  # F53 variant
    ("10\\%", "10"),
    ("10%", "10"),
    ("x = 5", "5"),
    ("n_1=5", "5"),
    ("\\boxed{42}", "42"),
    ("$\\boxed{42}$", "42"),
    ("\\(42\\)", "42"),
    ("\\[ 42 \\]", "42"),
]

NOT_INTEGER = [
    "(1,2)",  # F55: a pair is not 12
    "1,2",
    "1,2,3",
    "12,34",
    "1.5",
    "0.05",
    "5x",  # a single letter is a variable, not a unit
    "2^{10}",
    "5!",
    "\\frac{10}{2}",
    "1e3",
    "",
    "   ",
    "x",
    "\\pm 5",
    "3, 5, 7",
    "1 2",
    "a+b=5",
]


@pytest.mark.parametrize(("text", "expected"), INTEGER_CASES)
def test_canonical_integer_reads_documented_forms(text: str, expected: str) -> None:
    assert canonical_integer(text) == expected


@pytest.mark.parametrize("text", NOT_INTEGER)
def test_canonical_integer_rejects_non_integers(text: str) -> None:
    assert canonical_integer(text) is None


def test_canonical_integer_handles_numbers_past_pythons_digit_limit() -> None:
    digits = "7" * 6000  # int(str) would raise ValueError past 4300 digits
    assert canonical_integer("000" + digits) == digits
    assert canonical_integer(digits[:-1] + "8") != canonical_integer(digits)


def test_long_answers_are_integers_only_as_plain_digits() -> None:
    padded = "1" * (MAX_DECORATED_CHARS + 10)
    assert canonical_integer(padded) == padded
    assert canonical_integer(padded + " cm") is None


def test_canonical_integer_none_for_non_strings() -> None:
    assert canonical_integer(None) is None
    assert canonical_integer(42) is None  # type: ignore[arg-type]


@given(
    st.integers(min_value=-(10**30), max_value=10**30),
    st.sampled_from(["plain", "commas", "zeros", "dollar", "unit", "boxed"]),
)
def test_any_integer_written_any_documented_way_canonicalises_to_its_digits(value: int, style: str) -> None:
    digits = str(abs(value))
    if style == "commas":
        body = f"{abs(value):,}"
    elif style == "zeros":
        body = "00" + digits
    elif style == "dollar":
        body = "\\$" + digits
    elif style == "unit":
        body = digits + "\\text{ cm}"
    else:
        body = digits
    text = ("-" if value < 0 else "") + body
    if style == "boxed":
        text = "\\boxed{" + text + "}"
    assert canonical_integer(text) == str(value)


@settings(max_examples=300)
@given(st.text(max_size=300))
def test_fast_path_functions_never_raise(text: str) -> None:
    canonical_integer(text)
    normalize_text(text)
    latex_for_math_verify(text)


@pytest.mark.timeout(60)
def test_adversarial_long_inputs_finish() -> None:
    # Patterns that make naive unit/assignment regexes backtrack quadratically.
    for text in ("1a " * 30000, "1" + " aa" * 30000 + "!", "\\text{" * 20000, "{" * 50000, "$" * 50001):
        canonical_integer(text)
        normalize_text(text)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("x + 1", "x+1"),
        ("\\dfrac{1}{2}", "\\frac{1}{2}"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "(3,\\frac{\\pi}{2})"),
        ("\\text{Evelyn}", "Evelyn"),
        ("$12:00$", "12:00"),
        ("\\boxed{[2,5)}", "[2,5)"),
    ],
)
def test_normalize_text_equates_formatting_variants(a: str, b: str) -> None:
    assert normalize_text(a) == normalize_text(b)


@pytest.mark.parametrize(("a", "b"), [("1\\,2", "12"), ("(1,2)", "12"), ("x+1", "X+1"), ("[2,5)", "(2,5]")])
def test_normalize_text_keeps_meaningful_differences(a: str, b: str) -> None:
    assert normalize_text(a) != normalize_text(b)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("$\\frac{1}{2}$", "\\frac{1}{2}"),
        ("$$x$$", "x"),
        ("\\boxed{\\boxed{5}}", "5"),
        ("$a$ and $b$", "$a$ and $b$"),  # two math spans stay as they are
        ("\\boxed{1} + \\boxed{2}", "\\boxed{1} + \\boxed{2}"),  # not one enclosing box
    ],
)
def test_strip_math_delimiters(text: str, expected: str) -> None:
    assert strip_math_delimiters(text) == expected


def test_gold_is_wrapped_in_a_box_for_math_verify() -> None:
    assert latex_for_math_verify("$e^{16} - 1$") == "\\boxed{e^{16} - 1}"
    assert latex_for_math_verify("\\boxed{(1,2)}") == "\\boxed{(1,2)}"


@pytest.mark.timeout(20)  # a hang guard: slicing at every layer was quadratic (about a minute here); linear: seconds
def test_deeply_nested_delimiters_are_stripped_in_linear_time():
    n = 800_000
    assert strip_math_delimiters("\\(" * n + " 42 " + "\\)" * n) == "42"
    assert normalize_text("$$" * n + "x" + "$$" * n) == "x"
    assert latex_for_math_verify("\\[ " * n + "7" + " \\]" * n) == "\\boxed{7}"


# ---------------------------------------------------------------------------------------------- issue 23
from tirl.reward.normalize import ascii_digits, names_hedge  # noqa: E402


@pytest.mark.parametrize(
    "text",
    [
        "2\\text{ or 3}",
        "2 or three",
        "5\\text{ is wrong}",
        "5\\text{ is not}",
        "5 not",
        "7\\mbox{ maybe}",
        "3 possibly",
        "4\\text{ (probably)}",
        "2\\text{ or }3",
    ],
)
def test_hedge_words_are_never_units(text: str) -> None:
    assert canonical_integer(text) is None


@pytest.mark.parametrize(
    "text, value",
    [
        ("5\\text{ cm}", "5"),
        ("\\$5", "5"),
        ("5 meters", "5"),
        ("30^\\circ", "30"),
        ("5\\text{ dollars}", "5"),
        ("10\\%", "10"),
        ("15\\mbox{ cm}^2", "15"),
        ("5\\text{ m^2}", "5"),
        ("12 square feet", "12"),
        ("35 cm^{2}", "35"),
    ],
)
def test_real_units_still_drop(text: str, value: str) -> None:
    assert canonical_integer(text) == value


def test_a_text_holding_a_number_is_not_a_unit() -> None:
    assert canonical_integer("5\\text{ 6}") is None and names_hedge(" or 3") and not names_hedge(" cm^2")


def test_unicode_digits_read_as_ascii_everywhere() -> None:
    assert canonical_integer("１２") == "12" and canonical_integer("－１２") == "-12"
    assert canonical_integer("１，０００") == "1000"
    assert normalize_text("\\frac{１}{２}") == "\\frac{1}{2}"
    assert ascii_digits("5²") == "5²" and ascii_digits("½") == "½" and ascii_digits("abc") == "abc"


def test_plain_integers_of_any_length_are_integers() -> None:
    digits = "3" * 250_000
    assert canonical_integer(digits) == digits
    assert canonical_integer("-" + digits) == "-" + digits
    assert canonical_integer(digits + ".5") is None


_PIECES = [
    "2",
    "5",
    "0",
    ",",
    " ",
    "\\text{",
    "}",
    " or ",
    "or",
    "not",
    "no",
    " cm",
    "\\$",
    "\\%",
    "^\\circ",
    "x = ",
    "maybe",
    "\\lor ",
    "wrong",
    "is ",
    "\\mbox{",
    "three",
    "meters",
    ".",
    "{,}",
    "\\approx",
    "dollars",
]


@settings(max_examples=400)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=8))
def test_an_answer_the_integer_policy_reads_holds_no_hedge(pieces: list[str]) -> None:
    # The verifier decides such answers on the integer path before its hedge check (issue 23).
    from tirl.reward.forms import commitment_problem

    text = "".join(pieces)
    if canonical_integer(text) is not None:
        assert commitment_problem(text, "5") is None, text
