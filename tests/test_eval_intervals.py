"""The 95 % intervals of an evaluation (bootstrap over problems): tirl.eval.metrics.bootstrap_interval,
problem_scores, problem_intervals, their place in summary.json and in the printed table."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from rich.console import Console

from tirl.eval.metrics import (
    SampleOutcome,
    bootstrap_interval,
    problem_intervals,
    problem_scores,
    summarize,
)
from tirl.eval.report import summary_table


def _outcomes(correct_per_problem: list[list[bool]], answers: list[list[str | None]] | None = None):
    out = []
    for p, row in enumerate(correct_per_problem):
        for j, ok in enumerate(row):
            answer = answers[p][j] if answers is not None else ("7" if ok else f"w{j}")
            out.append(SampleOutcome(problem_id=f"p{p}", sample_index=j, correct=ok, answer=answer))
    return out


def _random_problems(n: int, k: int = 4, seed: int = 0, p: float = 0.4) -> list[list[bool]]:
    rng = random.Random(seed)
    return [[rng.random() < p for _ in range(k)] for _ in range(n)]


def test_hand_computed_two_and_three_problems():
    # two problems scoring 0 and 1: a resample's mean is 0, 1/2 or 1 with chances 1/4, 1/2, 1/4, so the 2.5th
    # and 97.5th percentiles of the resampled means are 0 and 1
    assert bootstrap_interval([0.0, 1.0]) == (0.0, 1.0)
    # three problems 0, 0, 1: means 0, 1/3, 2/3, 1 with chances 8/27, 12/27, 6/27, 1/27; P(mean < 1) = 26/27 <
    # 0.975, so the upper end is 1, and P(mean = 0) = 8/27 > 0.025, so the lower end is 0
    assert bootstrap_interval([0.0, 0.0, 1.0], resamples=4000) == (0.0, 1.0)
    # ... at 50 % coverage the ends are the quartiles: 0 (8/27 > 1/4) and 2/3 (20/27 < 3/4 <= 26/27)
    low, high = bootstrap_interval([0.0, 0.0, 1.0], resamples=4000, level=0.5)
    assert (low, high) == (0.0, pytest.approx(2 / 3))
    # equal scores leave nothing to resample
    assert bootstrap_interval([0.25] * 7) == (0.25, 0.25)


def test_the_interval_contains_the_point_estimate_for_each_metric():
    for seed in range(5):
        summary = summarize("b", _outcomes(_random_problems(40, seed=seed)))
        intervals = summary.intervals
        assert intervals is not None and intervals["level"] == 0.95 and intervals["resamples"] == 1000
        for key, point in (
            ("avg_pass1", summary.avg_pass1),
            ("pass_at_k", summary.pass_at_k[summary.samples_per_problem]),
            ("maj_at_k", summary.maj_at_k),
        ):
            low, high = intervals[key]
            assert 0.0 <= low <= point <= high <= 1.0, (seed, key, low, point, high)
            assert high > low  # 40 problems that differ: a real interval


def test_the_interval_shrinks_with_more_problems():
    widths = []
    for n in (20, 200, 2000):
        low, high = bootstrap_interval([1.0, 0.0] * (n // 2))
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2] > 0
    # the standard error of a mean of n coin flips is 0.5 / sqrt(n): the 95 % width is near 4 of them
    assert widths[2] == pytest.approx(4 * 0.5 / np.sqrt(2000), rel=0.15)


def test_the_interval_is_deterministic_for_a_seed():
    values = [float(x) for x in np.random.default_rng(3).random(50)]
    assert bootstrap_interval(values, seed=11) == bootstrap_interval(values, seed=11)
    assert bootstrap_interval(values, seed=11) != bootstrap_interval(values, seed=12)
    outcomes = _outcomes(_random_problems(30))
    assert summarize("b", outcomes).intervals == summarize("b", list(reversed(outcomes))).intervals


def test_the_per_problem_scores_average_to_the_summary():
    correct = [[True, False, False, False], [True, True, True, False], [False, False, False, False]]
    answers = [["7", "8", "8", None], ["7", "7", "7", "9"], [None, None, "3", "4"]]
    outcomes = _outcomes(correct, answers)
    groups = [[o for o in outcomes if o.problem_id == f"p{p}"] for p in range(3)]
    scores = problem_scores(groups)
    assert scores["avg_pass1"].tolist() == [0.25, 0.75, 0.0]
    assert scores["pass_at_k"].tolist() == [1.0, 1.0, 0.0]  # pass@4 with 4 samples: any correct
    assert scores["maj_at_k"].tolist() == [0.0, 1.0, 0.0]  # "8" outvotes "7"; "7" wins; a tie of wrong ones
    summary = summarize("b", outcomes)
    assert summary.avg_pass1 == pytest.approx(scores["avg_pass1"].mean())
    assert summary.pass_at_k[4] == pytest.approx(scores["pass_at_k"].mean())
    assert summary.maj_at_k == pytest.approx(scores["maj_at_k"].mean())
    assert problem_intervals(groups)["avg_pass1"] == list(bootstrap_interval(scores["avg_pass1"]))


@pytest.mark.parametrize(
    "kwargs, values",
    [({}, []), ({}, [[0.0, 1.0]]), ({}, [float("nan")]), ({"resamples": 0}, [1.0]), ({"level": 1.0}, [1.0])],
)
def test_bad_input_is_refused(kwargs, values):
    with pytest.raises(ValueError):
        bootstrap_interval(values, **kwargs)


def test_intervals_are_in_summary_json_and_in_the_table():
    summary = summarize("gsm8k", _outcomes(_random_problems(25)))
    data = json.loads(json.dumps(summary.to_dict()))
    low, high = data["intervals"]["avg_pass1"]
    assert low <= data["avg_pass1"] <= high
    assert data["truncation_rate"] == 0.0  # the share of samples that ran out of budget, beside them
    console = Console(record=True, width=120)
    console.print(summary_table([summary]))
    text = console.export_text()
    assert f"{100 * summary.avg_pass1:.1f} [{100 * low:.1f}, {100 * high:.1f}]" in text
    assert "avg pass@1 (%) [95% CI]" in text and "truncated (%)" in text
