"""The answer filter of curation: which reference answers an RL problem may have.

The report (rStar2-Agent, arXiv 2508.20722, section 4.1 "RL data curation") keeps integer answers only, drops
answers that are hard to verify and huge answers that make the verifier time out. Here:

1. :func:`classify_answer` puts the normalised answer (:func:`tirl.data.curation.text.normalize_answer`) in one
   kind: ``integer`` (``-?\\d+``), ``rational`` (``3/4``, ``\\frac{3}{4}``, ``-0.25``), ``expression`` (one
   value written as an expression: ``2\\sqrt{3}``, ``\\pi/2``, ``2^{10}``), ``compound`` (several values or a
   range: tuples, lists, sets, intervals, ``\\pm``, ``and``/``or``, inequalities, matrices), ``text`` (words:
   ``\\text{Monday}``, ``yes``) or ``empty``;
2. :func:`check_answers` applies an :class:`AnswerPolicy`: the accepted kinds (``integer``; with
   ``accept="rational"`` also rationals; with ``accept="any"`` also expressions), ``compound``/``text``/``empty``
   always dropped; integers longer than ``max_digits`` digits dropped (``huge_answer``);
3. non-integer answers that pass are *probed* with the real verifier (:class:`tirl.reward.Verifier`, both fast
   paths off, so math-verify parses the answer in a sandbox worker) under the hard deadline ``deadline_s``: an
   answer the verifier cannot parse (``unparsable_answer``), cannot decide before the deadline
   (``verifier_timeout``), fails on (``verifier_error``) or does not find equal to itself (``not_self_equal``)
   is dropped.

Why a digit cap and not a clock for integers: tirl's verifier compares integer answers in its in-process
integer fast path, and math-verify parses a 2,000-digit integer in about 0.1 s (measured; see docs/data.md), so
no deadline would ever fire on one and a timing rule would drop huge answers only by luck. ``max_digits`` is
the deterministic form of the report's rule. The clock is for answers that really can hang the verifier
(``\\binom{10000000}{5000000}`` is evaluated exactly by sympy and passes any deadline).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from tirl.reward import Verdict, Verifier, VerifierConfig, VerifierStats, VerifyItem
from tirl.sandbox.types import CodeExecutor

AnswerKind = Literal["integer", "rational", "expression", "compound", "text", "empty"]
ANSWER_KINDS: tuple[str, ...] = ("integer", "rational", "expression", "compound", "text", "empty")

ACCEPTED_KINDS: dict[str, frozenset[str]] = {
    "integer": frozenset({"integer"}),
    "rational": frozenset({"integer", "rational"}),
    "any": frozenset({"integer", "rational", "expression"}),
}
"""``AnswerPolicy.accept`` -> the answer kinds kept."""

_INTEGER = re.compile(r"^-?\d+$")
_RATIONAL = re.compile(r"^-?(?:\d+/\d+|\d*\.\d+|\d+\.\d*|\\frac\{-?\d+\}\{\d+\}|\\frac\d\d|\(?-?\d+\)?/\(?\d+\)?)$")
_COMPOUND = re.compile(
    r"[,;]|\\\\|\\[{}]|\\(?:pm|mp|cup|cap|infty|le|ge|leq|geq|lt|gt|neq|ne|in|begin|to|rightarrow|setminus)(?![A-Za-z])"
    r"|[<>≤≥≠±∪∩∞]|(?:^|\s)(?:and|or)(?:\s|$)"
)
_COMMAND = re.compile(r"\\[A-Za-z]+")
_WORD = re.compile(r"[A-Za-z]{2,}")


def classify_answer(normalized: str) -> AnswerKind:
    """The kind of a normalised answer (see the module docstring). Never raises on a string.

    ``"42"`` -> integer; ``"\\frac{3}{4}"``, ``"-0.25"`` -> rational; ``"2\\sqrt{3}"`` -> expression;
    ``"(1,2)"``, ``"[2,5)"``, ``"\\pm 3"``, ``"3 and 4"``, ``"x>2"`` -> compound; ``"Monday"`` -> text.
    """
    text = normalized.strip()
    if not text:
        return "empty"
    if _INTEGER.match(text):
        return "integer"
    if _RATIONAL.match(text):
        return "rational"
    if _COMPOUND.search(text) or text.count("=") > 1:
        return "compound"
    if _WORD.search(_COMMAND.sub(" ", text)):
        return "text"
    return "expression"


@dataclass(frozen=True)
class AnswerPolicy:
    """Settings of :func:`check_answers`.

    Attributes:
        accept: ``integer`` (the report's rule), ``rational`` (also fractions and decimals) or ``any`` (also
            single-value expressions the verifier parses).
        max_digits: integers with more digits than this are ``huge_answer`` (sign not counted).
        deadline_s: the verifier's hard deadline per probed answer, in seconds.
        probe: run the verifier probe on accepted non-integer answers (needs a sandbox).
    """

    accept: Literal["integer", "rational", "any"] = "integer"
    max_digits: int = 20
    deadline_s: float = 5.0
    probe: bool = True

    def __post_init__(self) -> None:
        if self.accept not in ACCEPTED_KINDS:
            raise ValueError(f"accept must be one of {', '.join(ACCEPTED_KINDS)}, got {self.accept!r}")
        if self.max_digits < 1:
            raise ValueError(f"max_digits must be >= 1, got {self.max_digits}")
        if self.deadline_s <= 0:
            raise ValueError(f"deadline_s must be > 0, got {self.deadline_s}")


@dataclass(frozen=True)
class AnswerCheck:
    """The outcome for one answer: ``reason`` is None when it is kept.

    Attributes:
        kind: the :func:`classify_answer` kind.
        reason: the drop reason (``compound_answer``, ``text_answer``, ``empty_answer``, ``non_integer_answer``,
            ``expression_answer``, ``huge_answer``, ``unparsable_answer``, ``verifier_timeout``,
            ``verifier_error``, ``not_self_equal``) or None.
        detail: a short explanation for the report (the digit count, the verifier's detail).
    """

    kind: AnswerKind
    reason: str | None = None
    detail: str | None = None


_KIND_REASON = {
    "compound": "compound_answer",
    "text": "text_answer",
    "empty": "empty_answer",
    "rational": "non_integer_answer",
    "expression": "expression_answer",
}
_PROBE_REASON = {
    "unparsable_gold": "unparsable_answer",
    "timeout": "verifier_timeout",
    "answer_timeout": "verifier_timeout",
    "verifier_error": "verifier_error",
    "answer_error": "verifier_error",
}


VerifyData = Callable[[list[VerifyItem], VerifierConfig], list[Verdict]]
"""``(items, config) -> verdicts``: the probe's verification on a run's executor and loop
(:meth:`tirl.runtime.AgentRuntime.verify_data`, what ``tirl data curate`` passes)."""


def check_answers(
    answers: Sequence[str],
    policy: AnswerPolicy | None = None,
    executor: CodeExecutor | None = None,
    *,
    verify: VerifyData | None = None,
) -> list[AnswerCheck]:
    """Apply the answer filter to normalised answers.

    Args:
        answers: normalised answers (:func:`tirl.data.curation.text.normalize_answer`).
        policy: the rules (default: integers of at most 20 digits).
        executor: where the verifier probe runs when no ``verify`` is given, used from the verifier's own
            background loop, so not one bound to another event loop (None: the verifier's shared default
            ``LocalSandbox``, started only when there is something to probe).
        verify: the run's verification (:data:`VerifyData`), given the probe's items and its
            :class:`tirl.reward.VerifierConfig`; it wins over ``executor``.

    Returns:
        One :class:`AnswerCheck` per answer, in order.
    """
    policy = policy or AnswerPolicy()
    accepted = ACCEPTED_KINDS[policy.accept]
    checks: list[AnswerCheck | None] = [None] * len(answers)
    probe: list[int] = []
    for i, answer in enumerate(answers):
        kind = classify_answer(answer)
        if kind not in accepted:
            checks[i] = AnswerCheck(kind, _KIND_REASON[kind], f"{kind} answer ({policy.accept} accepted)")
        elif kind == "integer":
            digits = len(answer.lstrip("-"))
            if digits > policy.max_digits:
                checks[i] = AnswerCheck(kind, "huge_answer", f"{digits} digits > max_digits={policy.max_digits}")
            else:
                checks[i] = AnswerCheck(kind)
        elif policy.probe:
            probe.append(i)
        else:
            checks[i] = AnswerCheck(kind)
    if probe:
        config = VerifierConfig(timeout_s=policy.deadline_s, string_fast_path=False, integer_fast_path=False)
        items = [VerifyItem(response=None, gold=answers[i], answer=answers[i]) for i in probe]
        if verify is not None:
            verdicts = verify(items, config)
        else:
            verdicts = Verifier(executor=executor, config=config, stats=VerifierStats()).verify_batch(items)
        for i, verdict in zip(probe, verdicts):
            kind = classify_answer(answers[i])
            if verdict.status == "ok" and verdict.correct:
                checks[i] = AnswerCheck(kind)
            elif verdict.status == "ok":
                checks[i] = AnswerCheck(
                    kind, "not_self_equal", verdict.detail or "the verifier found it unequal to itself"
                )
            else:
                checks[i] = AnswerCheck(
                    kind, _PROBE_REASON.get(verdict.status, "verifier_error"), verdict.detail or verdict.status
                )
    return [c if c is not None else AnswerCheck("empty", "empty_answer") for c in checks]


__all__ = [
    "ACCEPTED_KINDS",
    "ANSWER_KINDS",
    "AnswerCheck",
    "AnswerKind",
    "AnswerPolicy",
    "VerifyData",
    "check_answers",
    "classify_answer",
]
