"""Evaluation metrics over sampled trajectories: average pass@1, unbiased pass@k, maj@k, lengths, tool use.

Covers the numbers of an evaluation table, computed from light per-sample outcomes (:class:`SampleOutcome`),
so they can be recomputed from the JSONL records of a resumed run without the trajectories' token ids. It does
not verify answers (``tirl.reward``) nor print anything (``tirl.eval.report``).

Definitions (report §5 "average pass@1 over 16 samples"; Chen et al. 2021, "Evaluating Large Language Models
Trained on Code", eq. 1 for pass@k):

- **average pass@1**: mean over problems of the per-problem mean of the binary reward.
- **pass@k**: mean over problems of ``1 - C(n - c, k) / C(n, k)`` (n samples, c correct), the unbiased
  estimator of the chance that at least one of k samples is correct. Reported for k = 1, 2, 4, ... up to the
  smallest per-problem sample count.
- **maj@k**: majority vote over the extracted answers of the first k samples of a problem, votes grouped *by
  value* (see :func:`majority_correct`; samples without an answer do not vote). The problem scores the
  correctness of the winning group; when several groups tie, it scores their mean correctness (the expected
  value of a random tie-break). No answer at all scores 0.
- **response length**: model-generated tokens only (loss mask 1), mean and 90th percentile (linear
  interpolation, ``numpy.percentile``).
- **95 % intervals** of avg pass@1, pass@K and maj@K (K = the samples per problem): percentile bootstrap over
  *problems* (:func:`bootstrap_interval`: 1,000 resamples of the problems with replacement, seeded, the same
  resampled problems for the three metrics; the samples of a problem stay together), so they say how much the
  numbers would move with another draw of problems of the same kind, not of samples.
- **truncation rate**: share of trajectories whose finish reason is ``length`` or ``context`` (the token budget
  or the context window ran out; the configs of the field's baselines pick budgets that keep it under 5 %).
- **no-answer rate**: share of trajectories without an extracted final answer.
- **unparsable references**: problems whose reference answer cannot be parsed are counted per benchmark
  (every sample of one scores 0, whatever it answered: fix the data).
- **fallback answers**: with the opt-in evaluation fallback, how many answers it supplied.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tirl.algo.infra import INFRA_CAUSES, VERIFIER_CHARGED_STATUSES
from tirl.protocol.types import TOOL_CALL_CLASSES

TRUNCATED_FINISH_REASONS = ("length", "context")


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k estimate for one problem (Chen et al. 2021, eq. 1): ``1 - C(n-c, k) / C(n, k)``.

    Computed as ``1 - prod_{i=n-c+1}^{n} (1 - k / i)``, which avoids huge binomials.

    Args:
        n: samples drawn (>= 1).
        c: correct samples (0 <= c <= n).
        k: the k of pass@k (1 <= k <= n).

    Raises:
        ValueError: when the arguments are out of range or not integers (``k=2.5``).
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"pass_at_k needs integer n, c and k; got {name}={value!r}: pass a whole number")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs n >= 1, 0 <= c <= n, 1 <= k <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def majority_correct(answers: Sequence[str | None], correct: Sequence[bool]) -> float:
    """maj@len(answers) for one problem: the correctness of the answer most samples agree on, by value.

    Grouping rule (votes count for a *value*, not a string):

    1. answers with the same key of the verifier's normal form (:func:`tirl.reward.forms.value_key`) are one
       group: equal numbers in any notation (``\\frac{1}{2}``, ``\\dfrac{1}{2}``, ``0.5``, ``1/2``), thousands
       separators (``1,000`` and ``1000``), an assignment and its value (``x = 5`` and ``5``), mixed numbers,
       base numerals, trailing punctuation, whitespace;
    2. every answer the verifier judged correct is in one group with every other correct answer (each equals
       the reference, so they equal one another), which also joins forms only the symbolic verifier matches
       (``\\frac{\\sqrt{2}}{2}`` and ``\\frac{1}{\\sqrt{2}}``). Wrong answers are grouped by rule 1 only.

    A group is correct when any of its answers was judged correct (so a group of rule 1 holding one correct
    answer joins the correct group whole).

    Args:
        answers: extracted answers, one per sample (None when a sample has none).
        correct: the binary verdict of each sample, same length.

    Returns:
        A value in [0, 1]: 1 or 0 with a unique winner, the mean correctness of the tied winners otherwise.

    Raises:
        ValueError: when the lengths differ.
    """
    from tirl.reward.forms import value_key

    if len(answers) != len(correct):
        raise ValueError(f"{len(answers)} answers but {len(correct)} verdicts")
    keys = [value_key(answer) for answer in answers]
    judged_right = {key for key, ok in zip(keys, correct) if key is not None and ok}
    votes: Counter[str] = Counter()
    right: dict[str, bool] = {}
    for key in keys:
        if key is None:
            continue
        group = "correct" if key in judged_right else "value:" + key
        votes[group] += 1
        right[group] = key in judged_right
    if not votes:
        return 0.0
    top = max(votes.values())
    winners = [key for key, count in votes.items() if count == top]
    return sum(right[w] for w in winners) / len(winners)


@dataclass
class SampleOutcome:
    """What the metrics need from one evaluated trajectory.

    Attributes:
        problem_id: the problem this sample answers.
        sample_index: index of the sample within the problem (0-based); orders samples for maj@k.
        correct: the binary verdict.
        answer: the extracted final answer, or None.
        model_tokens: tokens the model generated (sum of the loss mask).
        tool_classes: the class of each tool call, in order (``ok``, ``error``, ``timeout``, ``parse_error``).
        finish_reason: the trajectory's finish reason.
        tool_internal_errors: tool calls whose execution failed inside tirl (status ``internal``).
        verdict_status: the verifier's status (``ok``, ``no_answer``, ``timeout``, ...).
        answer_source: ``"box"`` (the extraction policy), ``"fallback"`` (the opt-in evaluation fallback of
            :func:`tirl.protocol.answer.extract_answer_fallback` supplied it) or ``"none"``.
        controls: what the controls of its failures found (``Trajectory.metadata["controls"]``:
            ``tool_charged``, ``engine_recovered``, ...; :mod:`tirl.algo.infra`); empty when none ran.
    """

    problem_id: str
    sample_index: int
    correct: bool
    answer: str | None = None
    model_tokens: int = 0
    tool_classes: list[str] = field(default_factory=list)
    finish_reason: str = "answer"
    tool_internal_errors: int = 0
    verdict_status: str = "ok"
    answer_source: str = "box"
    controls: dict[str, int] = field(default_factory=dict)


@dataclass
class BenchmarkSummary:
    """The table row of one benchmark (see the module docstring for each definition).

    Attributes:
        benchmark: benchmark name.
        num_problems: problems with at least one sample.
        num_samples: trajectories in total.
        samples_per_problem: the smallest per-problem sample count (the largest k reported).
        avg_pass1: average pass@1 in [0, 1].
        pass_at_k: ``{k: value}`` for k = 1, 2, 4, ... <= ``samples_per_problem``, and k = ``samples_per_problem``.
        maj_at_k: maj@k at k = ``samples_per_problem``.
        mean_response_tokens / p90_response_tokens: model-generated tokens per trajectory.
        tool_calls_per_trajectory: mean number of tool calls.
        tool_call_classes: ``{class: count}`` over all tool calls (every class present, 0 when unseen).
        tool_internal_errors: tool calls that failed inside tirl (sandbox ``internal``), also counted as ``error``.
        truncation_rate / no_answer_rate: shares of trajectories in [0, 1].
        finish_reasons / verdict_statuses: counts by value.
        unparsable_gold_problems: problems whose reference answer cannot be parsed (found by a check of every
            reference before the run, or by a sample's ``unparsable_gold`` verdict): every sample of such a
            problem scores 0, so they are counted here rather than hidden in the rates.
        unparsable_gold_ids: their ids, sorted.
        fallback_answers: samples whose answer the opt-in evaluation fallback supplied; None when the
            fallback was off.
        audit: the reward-hacking audit of the benchmark's samples (:mod:`tirl.protocol.audit`: counts of tool
            outputs with template strings, hedged answers, memory or socket probes and the failed ones,
            answers first seen in tool output, flagged samples); None when not computed.
        infra_failures: samples touched by a failure that is not the model's (:func:`infra_cause_of`), by
            cause (``engine``, ``tool_internal``, ``verifier``; every cause present), so that they are seen
            apart from the model's failures (they still count as not correct in pass@k).
        charged_failures: failures that looked like the infrastructure's until a control charged them to the
            model (``tool``: calls, ``engine``: ``rejected`` trajectories, ``verifier``: ``answer_timeout`` and
            ``answer_error`` verdicts); scored as the model's.
        intervals: the bootstrap intervals over problems (:func:`problem_intervals`): ``level``, ``resamples``,
            ``seed`` and ``[low, high]`` for ``avg_pass1``, ``pass_at_k`` and ``maj_at_k`` (at K =
            ``samples_per_problem``), in [0, 1]; None where not computed.
    """

    benchmark: str
    num_problems: int
    num_samples: int
    samples_per_problem: int
    avg_pass1: float
    pass_at_k: dict[int, float]
    maj_at_k: float
    mean_response_tokens: float
    p90_response_tokens: float
    tool_calls_per_trajectory: float
    tool_call_classes: dict[str, int]
    tool_internal_errors: int
    truncation_rate: float
    no_answer_rate: float
    finish_reasons: dict[str, int]
    verdict_statuses: dict[str, int]
    unparsable_gold_problems: int = 0
    unparsable_gold_ids: list[str] = field(default_factory=list)
    fallback_answers: int | None = None
    audit: dict[str, int] | None = None
    infra_failures: dict[str, int] = field(default_factory=dict)
    charged_failures: dict[str, int] = field(default_factory=dict)
    intervals: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (pass@k keys as strings ``"1"``, ``"2"``, ...)."""
        data = asdict(self)
        data["pass_at_k"] = {str(k): v for k, v in self.pass_at_k.items()}
        return data


def infra_cause_of(o: SampleOutcome) -> str | None:
    """The failure not of the model's that touched a sample, with the rules of :mod:`tirl.algo.infra`: an
    engine error, a tool call answered ``internal``, a verifier crash or deadline; None for none."""
    if o.finish_reason == "error":
        return "engine"
    if o.tool_internal_errors:
        return "tool_internal"
    if o.verdict_status in ("verifier_error", "timeout"):
        return "verifier"
    return None


def _k_values(n: int) -> list[int]:
    ks, k = [], 1
    while k <= n:
        ks.append(k)
        k *= 2
    if n not in ks:
        ks.append(n)
    return ks


def summarize(
    benchmark: str,
    outcomes: Iterable[SampleOutcome],
    *,
    unparsable_gold: Iterable[str] = (),
    answer_fallback: bool = False,
    audit: dict[str, int] | None = None,
) -> BenchmarkSummary:
    """Aggregate the outcomes of one benchmark into its table row.

    Args:
        benchmark: the benchmark's name (copied into the result).
        outcomes: every evaluated sample of the benchmark, any order.
        unparsable_gold: ids of problems whose reference answer is known to be unparsable (only those with
            samples here are counted; problems with an ``unparsable_gold`` verdict are added).
        answer_fallback: the run used the evaluation answer fallback (``fallback_answers`` is then a count).
        audit: the audit counts of these samples (copied into the result).

    Raises:
        ValueError: when ``outcomes`` is empty, or a problem holds the same sample index twice.
    """
    by_problem: dict[str, dict[int, SampleOutcome]] = {}
    all_outcomes: list[SampleOutcome] = []
    for o in outcomes:
        samples = by_problem.setdefault(o.problem_id, {})
        if o.sample_index in samples:
            raise ValueError(f"problem {o.problem_id!r} has sample {o.sample_index} twice")
        samples[o.sample_index] = o
        all_outcomes.append(o)
    if not all_outcomes:
        raise ValueError(f"benchmark {benchmark!r} has no samples to summarize")

    groups = [[s[i] for i in sorted(s)] for s in by_problem.values()]
    n_min = min(len(g) for g in groups)
    ks = _k_values(n_min)
    pass_k = {k: float(np.mean([pass_at_k(len(g), sum(o.correct for o in g), k) for g in groups])) for k in ks}
    avg_pass1 = float(np.mean([np.mean([o.correct for o in g]) for g in groups]))
    maj = float(
        np.mean([majority_correct([o.answer for o in g[:n_min]], [o.correct for o in g[:n_min]]) for g in groups])
    )
    known_bad = set(unparsable_gold)
    bad_gold = {
        pid
        for pid, samples in by_problem.items()
        if pid in known_bad or any(o.verdict_status == "unparsable_gold" for o in samples.values())
    }
    lengths = np.array([o.model_tokens for o in all_outcomes], dtype=float)
    classes = Counter({c: 0 for c in TOOL_CALL_CLASSES})
    for o in all_outcomes:
        classes.update(o.tool_classes)
    n = len(all_outcomes)
    return BenchmarkSummary(
        benchmark=benchmark,
        num_problems=len(groups),
        num_samples=n,
        samples_per_problem=n_min,
        avg_pass1=avg_pass1,
        pass_at_k=pass_k,
        maj_at_k=maj,
        mean_response_tokens=float(lengths.mean()),
        p90_response_tokens=float(np.percentile(lengths, 90)),
        tool_calls_per_trajectory=sum(len(o.tool_classes) for o in all_outcomes) / n,
        tool_call_classes=dict(classes),
        tool_internal_errors=sum(o.tool_internal_errors for o in all_outcomes),
        truncation_rate=sum(o.finish_reason in TRUNCATED_FINISH_REASONS for o in all_outcomes) / n,
        no_answer_rate=sum(o.answer is None for o in all_outcomes) / n,
        finish_reasons=dict(Counter(o.finish_reason for o in all_outcomes)),
        verdict_statuses=dict(Counter(o.verdict_status for o in all_outcomes)),
        unparsable_gold_problems=len(bad_gold),
        unparsable_gold_ids=sorted(bad_gold),
        fallback_answers=sum(o.answer_source == "fallback" for o in all_outcomes) if answer_fallback else None,
        audit=dict(audit) if audit is not None else None,
        infra_failures={c: sum(infra_cause_of(o) == c for o in all_outcomes) for c in INFRA_CAUSES},
        charged_failures={
            "tool": sum(int(o.controls.get("tool_charged", 0)) for o in all_outcomes),
            "engine": sum(int(o.controls.get("engine_charged", 0)) for o in all_outcomes),
            "verifier": sum(o.verdict_status in VERIFIER_CHARGED_STATUSES for o in all_outcomes),
        },
        intervals=problem_intervals(groups),
    )


BOOTSTRAP_RESAMPLES = 1000
"""Resamples of the problems behind each interval."""

BOOTSTRAP_SEED = 0
"""Seed of the resampling: the same outcomes always give the same intervals."""

INTERVAL_LEVEL = 0.95
"""Coverage of the intervals (the 2.5th and 97.5th percentiles of the resampled means)."""


def bootstrap_interval(
    values: Sequence[float] | np.ndarray,
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = INTERVAL_LEVEL,
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``values`` (one score per problem).

    Draws ``resamples`` sets of ``len(values)`` indices with replacement (``numpy.random.default_rng(seed)``),
    takes the mean of each, and returns the ``(1 - level) / 2`` and ``(1 + level) / 2`` quantiles of those means
    (linear interpolation, ``numpy.quantile``). The indices depend only on ``seed``, ``resamples`` and the
    number of values, so metrics of the same problems are resampled together.

    Args:
        values: per-problem scores (any real numbers; the metrics' are in [0, 1]), at least one.
        resamples: number of resamples (>= 1).
        seed: the generator's seed.
        level: coverage in (0, 1).

    Returns:
        ``(low, high)`` with ``low <= high``; ``(v, v)`` when every value is ``v``.

    Raises:
        ValueError: no values, values that are not one-dimensional or not finite, ``resamples < 1`` or
            ``level`` outside (0, 1).
    """
    x = np.asarray(values, dtype=float)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"bootstrap_interval needs a non-empty 1-D sequence of scores, got shape {x.shape}")
    if not np.all(np.isfinite(x)):
        raise ValueError("bootstrap_interval needs finite scores")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)
    low, high = np.quantile(means, [(1.0 - level) / 2.0, (1.0 + level) / 2.0])
    return float(low), float(high)


def problem_scores(groups: Sequence[Sequence[SampleOutcome]]) -> dict[str, np.ndarray]:
    """Per-problem scores whose means are the summary's avg pass@1, pass@K and maj@K.

    Args:
        groups: one list of outcomes per problem, each in sample order (at least one sample each).

    Returns:
        ``{"avg_pass1", "pass_at_k", "maj_at_k"}``, each an array with one value per problem in [0, 1]: the
        share of correct samples, :func:`pass_at_k` at K, :func:`majority_correct` of the first K samples, where
        K is the smallest per-problem sample count.

    Raises:
        ValueError: no problem, or a problem without samples.
    """
    if not groups or min(len(g) for g in groups) < 1:
        raise ValueError("problem_scores needs at least one problem, each with at least one sample")
    k = min(len(g) for g in groups)
    return {
        "avg_pass1": np.array([np.mean([o.correct for o in g]) for g in groups], dtype=float),
        "pass_at_k": np.array([pass_at_k(len(g), sum(o.correct for o in g), k) for g in groups], dtype=float),
        "maj_at_k": np.array(
            [majority_correct([o.answer for o in g[:k]], [o.correct for o in g[:k]]) for g in groups], dtype=float
        ),
    }


def problem_intervals(
    groups: Sequence[Sequence[SampleOutcome]],
    *,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
    level: float = INTERVAL_LEVEL,
) -> dict[str, Any]:
    """The bootstrap intervals over problems of avg pass@1, pass@K and maj@K (:func:`problem_scores`,
    :func:`bootstrap_interval`; the three resample the same problems). The problems are put in the order of
    their ids first, so the intervals do not depend on the order the outcomes came in.

    Returns:
        ``{"level", "resamples", "seed", "avg_pass1": [low, high], "pass_at_k": [low, high], "maj_at_k":
        [low, high]}`` (JSON-ready).

    Raises:
        ValueError: as :func:`problem_scores` and :func:`bootstrap_interval`.
    """
    # resampled indices are positions: fix the positions by problem id (the records' order varies with resumes)
    scores = problem_scores(sorted(groups, key=lambda g: g[0].problem_id if g else ""))
    out: dict[str, Any] = {"level": level, "resamples": resamples, "seed": seed}
    for name, values in scores.items():
        out[name] = list(bootstrap_interval(values, resamples=resamples, seed=seed, level=level))
    return out
