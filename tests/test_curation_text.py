"""Normal forms of curation (tirl.data.curation.text): problem text, answers, comparison tokens, n-grams."""

from __future__ import annotations

import pytest

from tirl.data.curation.text import ngram_hashes, ngrams, normalize_answer, normalize_problem, word_tokens, words_only


def test_problem_whitespace_is_normalised_but_latex_and_words_are_kept() -> None:
    raw = "  Let $x\u00a0=\t3$.  \r\n\r\n\r\n\r\nFind   $x^2$.   "
    assert normalize_problem(raw) == "Let $x = 3$.\n\nFind $x^2$."


@pytest.mark.parametrize(
    "raw,expected",
    [
        ("$\\boxed{1{,}000}$", "1000"),
        ("\\$18", "18"),
        ("12,345,678", "12345678"),
        ("  007 ", "7"),
        ("\\text{42}", "42"),
        ("x = -5", "-5"),
        ("\\dfrac{3}{4}", "\\frac{3}{4}"),
        ("$(1, 2)$", "(1,2)"),
    ],
)
def test_answers_get_the_verifiers_normal_form(raw: str, expected: str) -> None:
    assert normalize_answer(raw) == expected


def test_a_copy_with_other_spacing_latex_spacing_and_punctuation_has_the_same_tokens() -> None:
    original = "If $f(x) = \\frac{3x-2}{x-2}$, what is the value of $f(-2) + f(-1) + f(0)$? Express your answer."
    copy = (
        "if  $f( x )=\\dfrac{3x - 2}{x\\,-\\,2}$; what is the value of "
        "$f(-2)\\;+\\;f(-1)\\quad+ f(0)$!! express your ANSWER"
    )
    assert word_tokens(copy) == word_tokens(original)


def test_operators_are_tokens_so_different_expressions_differ() -> None:
    assert word_tokens("Compute 2+3.") != word_tokens("Compute 2-3.")
    assert words_only(word_tokens("Compute 2+3.")) == ["compute", "2", "3"]


def test_thousands_separators_vanish_only_inside_numbers() -> None:
    assert word_tokens("1{,}000 and 1,000 and 1\\,000") == ["1000", "and", "1000", "and", "1000"]
    assert words_only(word_tokens("the points (1,2) and (3,4)")) == ["the", "points", "1", "2", "and", "3", "4"]


def test_brackets_are_tokens_so_grouping_matters() -> None:
    # MATH train has both (math-train-6405 and math-train-6477, answers 44 and 11)
    assert word_tokens("What is $88 \\div (4 \\div 2)$?") != word_tokens("What is $88 \\div 4 \\div 2$?")


def test_ngrams_of_short_texts_are_the_whole_text_and_empty_texts_have_none() -> None:
    assert ngrams(["a", "b"], 3) == [("a", "b")]
    assert ngram_hashes([], 3) == set()
    assert len(ngram_hashes(list("abcdef"), 3)) == 4
    with pytest.raises(ValueError):
        ngram_hashes(["a"], 0)
