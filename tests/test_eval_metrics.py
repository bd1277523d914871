"""Evaluation metrics on hand-computed examples (pass@k estimator of Chen et al. 2021 included)."""

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.eval.metrics import SampleOutcome, majority_correct, pass_at_k, summarize


def test_pass_at_k_hand_values():
    # n=4, c=2: pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6
    assert pass_at_k(4, 2, 2) == pytest.approx(5 / 6)
    # n=4, c=1: pass@2 = 1 - C(3,2)/C(4,2) = 1/2
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 0, 4) == 0.0
    assert pass_at_k(4, 1, 4) == 1.0


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_equals_subset_enumeration(nck):
    n, c, k = nck
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    exact = sum(any(samples[i] for i in s) for s in subsets) / len(subsets)
    assert pass_at_k(n, c, k) == pytest.approx(exact)
    assert exact == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k))


@pytest.mark.parametrize("n,c,k", [(0, 0, 1), (4, 5, 1), (4, 2, 5), (4, 2, 0), (4, -1, 1)])
def test_pass_at_k_rejects_bad_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


def test_majority_unique_winner_and_whitespace_insensitive_votes():
    # "x + 1" and "x+1" are one answer (3 votes) and it is wrong, though the single "x" is right
    assert majority_correct(["x", "x+1", "x+1", "x + 1"], [True, False, False, False]) == 0.0
    assert majority_correct(["1", "2", "1", None], [True, False, True, False]) == 1.0


def test_majority_votes_by_value_not_by_string():
    # the example: 1/2 has three of five votes in three notations
    assert majority_correct(["\\frac{1}{2}", "0.5", "\\dfrac{1}{2}", "3", "3"], [True, True, True, False, False]) == 1.0
    # the same grouping among wrong answers: 0.25 (three notations) beats the right 1/2 (two votes)
    assert (
        majority_correct(["\\frac{1}{4}", "0.25", "1/4", "\\frac{1}{2}", "0.5"], [False, False, False, True, True])
        == 0.0
    )
    # thousands separators, assignments, \\$ and trailing punctuation are one value
    assert majority_correct(["1,000", "1000", "x = 1000", "999", "999", "999"], [False] * 3 + [True] * 3) == 0.5
    assert majority_correct(["x = 5", "5.", "6", "6"], [False, False, True, True]) == 0.5
    assert majority_correct(["x = 5", "5.", "\\$5", "6", "6"], [False, False, False, True, True]) == 0.0


def test_majority_separated_numbers_are_not_their_concatenation():
    assert majority_correct(["9", "10", "10", "1 0"], [True, False, False, False]) == 0.0  # 10 has 2 votes
    assert majority_correct(["9", "9", "10", "1 0"], [True, True, False, False]) == 1.0


def test_majority_correct_answers_form_one_group():
    # forms only the symbolic verifier matches: both were judged correct, so they vote together
    answers = ["\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", "1", None]
    assert majority_correct(answers, [True, True, False, False]) == 1.0
    # a group of equal values with one judged correct joins the correct group whole
    assert majority_correct(["7", "7", "8", "8", "8"], [True, False, False, False, False]) == 0.0
    assert majority_correct(["7", "7", "7.0", "8", "8"], [True, False, False, False, False]) == 1.0


def test_majority_tie_scores_expected_value_and_no_answers_score_zero():
    assert majority_correct(["a", "b"], [True, False]) == 0.5
    assert majority_correct([None, None, ""], [False, False, False]) == 0.0


def test_majority_rejects_length_mismatch():
    with pytest.raises(ValueError):
        majority_correct(["a"], [True, False])


def _outcomes():
    """3 problems x 4 samples; hand-computed values are in the test below."""
    rows = {
        "A": [("1", True), ("2", False), ("1", True), (None, False)],
        "B": [("3", False), ("3", False), ("4", False), ("5", False)],
        "C": [("9", True), ("10", False), ("10", False), ("1 0", False)],
    }
    outs = []
    length = 10
    for pid, samples in rows.items():
        for j, (ans, ok) in enumerate(samples):
            outs.append(
                SampleOutcome(
                    problem_id=pid,
                    sample_index=j,
                    correct=ok,
                    answer=ans,
                    model_tokens=length,
                    tool_classes=["ok", "error"] if pid == "A" else [],
                    finish_reason="length" if ans is None else "answer",
                    tool_internal_errors=1 if (pid, j) == ("A", 1) else 0,
                )
            )
            length += 10
    return list(reversed(outs))  # order must not matter


def test_summarize_hand_computed_example():
    s = summarize("toy", _outcomes())
    assert (s.num_problems, s.num_samples, s.samples_per_problem) == (3, 12, 4)
    assert s.avg_pass1 == pytest.approx((0.5 + 0 + 0.25) / 3)
    assert sorted(s.pass_at_k) == [1, 2, 4]
    assert s.pass_at_k[1] == pytest.approx(s.avg_pass1)
    assert s.pass_at_k[2] == pytest.approx((5 / 6 + 0 + 0.5) / 3)
    assert s.pass_at_k[4] == pytest.approx(2 / 3)
    assert s.maj_at_k == pytest.approx(1 / 3)
    # lengths 10, 20, ..., 120: mean 65, p90 by linear interpolation = 10 + 0.9 * 110
    assert s.mean_response_tokens == pytest.approx(65)
    assert s.p90_response_tokens == pytest.approx(109)
    assert s.tool_calls_per_trajectory == pytest.approx(8 / 12)
    assert s.tool_call_classes == {"ok": 4, "error": 4, "timeout": 0, "parse_error": 0}
    assert s.tool_internal_errors == 1
    assert s.truncation_rate == pytest.approx(1 / 12)
    assert s.no_answer_rate == pytest.approx(1 / 12)
    assert s.finish_reasons == {"answer": 11, "length": 1}


def test_summarize_uses_smallest_sample_count_for_largest_k():
    outs = [SampleOutcome("p", j, correct=j == 0) for j in range(3)] + [SampleOutcome("q", 0, correct=True)]
    s = summarize("x", outs)
    assert s.samples_per_problem == 1
    assert list(s.pass_at_k) == [1]
    # per-problem means: 1/3 and 1
    assert s.avg_pass1 == pytest.approx((1 / 3 + 1) / 2)


def test_summarize_k_list_includes_non_power_of_two_sample_count():
    outs = [SampleOutcome("p", j, correct=False) for j in range(6)]
    assert list(summarize("x", outs).pass_at_k) == [1, 2, 4, 6]


def test_summarize_rejects_empty_and_duplicate_samples():
    with pytest.raises(ValueError):
        summarize("x", [])
    with pytest.raises(ValueError, match="twice"):
        summarize("x", [SampleOutcome("p", 0, True), SampleOutcome("p", 0, False)])


def test_summary_to_dict_is_json_ready():
    import json

    d = summarize("toy", _outcomes()).to_dict()
    assert set(d["pass_at_k"]) == {"1", "2", "4"}
    json.dumps(d)


@pytest.mark.parametrize("n,c,k", [(4, 2, 2.5), (4, 2, 2.0), (4.0, 2, 2), (4, 1.5, 2), (4, 2, True), (4, 2, "2")])
def test_pass_at_k_rejects_non_integer_arguments_with_a_clear_error(n, c, k):  # issue 23
    with pytest.raises(ValueError, match="integer n, c and k"):
        pass_at_k(n, c, k)


def test_pass_at_k_accepts_numpy_integers():
    import numpy as np

    assert pass_at_k(np.int64(4), np.int64(1), np.int64(1)) == pytest.approx(0.25)


def test_majority_reads_digits_percentages_and_repeating_decimals_as_the_grader_does():  # issue 23
    # full-width digits are the ASCII number, in the vote key as in grading
    assert majority_correct(["１２", "12", "13"], [True, True, False]) == 1.0
    assert majority_correct(["１３", "１３", "12"], [False, False, True]) == 0.0
    # a percent sign is ignored for non-integers too (12.5\% votes with 12.5, as 50\% does with 50)
    assert majority_correct(["12.5\\%", "12.5", "13", "13", "13"], [True, True, False, False, False]) == 0.0
    assert majority_correct(["12.5\\%", "12.5", "13"], [False, False, True]) == 0.0
    # a repeating decimal is its fraction
    assert majority_correct(["0.\\overline{3}", "\\frac{1}{3}", "0.3"], [False, False, True]) == 0.0


def test_majority_hedged_answers_vote_for_no_value():  # issue 23
    # "2 or 3" is not a vote for 2: the two hedged answers are a group of their own that ties with 2
    assert (
        majority_correct(["2\\text{ or 3}", "2\\text{ or 3}", "2", "2", "5"], [False, False, True, True, False]) == 0.5
    )
    # and a hedged answer never joins the correct group through its key
    assert (
        majority_correct(
            ["2\\text{ or 3}", "2\\text{ or 3}", "2\\text{ or 3}", "2", "2"], [False, False, False, True, True]
        )
        == 0.0
    )
