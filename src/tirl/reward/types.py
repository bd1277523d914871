"""Verdicts, items, configuration and counters of answer verification.

Covers the data of :mod:`tirl.reward`: what goes in (:class:`VerifyItem`), what comes out (:class:`Verdict`), the
knobs (:class:`VerifierConfig`) and the per-status counters (:class:`VerifierStats`). It does not verify anything
(see :mod:`tirl.reward.verifier`).

Statuses of a :class:`Verdict` (the reward is ``1.0`` only for ``ok`` with ``correct=True``):

``ok``
    The answer was compared with the reference; ``correct`` says how it came out.
``no_answer``
    No final answer could be extracted from the response (no box, the box was cut off by truncation, the
    ``<answer>`` block had no box). Reward 0. Counted, not logged: it is the model's doing.
``hedged``
    The box holds no single committed answer: a hedge (``2 \\text{ (or possibly 3)}``), a negation
    (``5\\text{ is wrong}``) or alternatives joined by "or" (``2\\text{ or 3}``); see
    :func:`tirl.reward.forms.commitment_problem`. Reward 0. Counted, not logged: it is the model's doing.
``unparsable_gold``
    The reference answer is not a string math-verify can parse and the prediction is not textually the same.
    Reward 0, counted and logged at WARNING: the data set needs fixing.
``timeout``
    The comparison passed its hard deadline (``VerifierConfig.timeout_s``) or another resource limit of the
    sandbox (memory) and its process was killed. Reward 0, counted and logged. Usually an absurd prediction
    (a power tower, a huge factorial); with ``timeout_control`` (the default) only when the control comparison
    of the reference with itself did not finish either (a slow reference, or a machine too loaded to compare).
``answer_timeout``
    The comparison passed its deadline, and a control comparison of the reference with itself, under the same
    deadline, finished (``VerifierConfig.timeout_control``): the answer made it slow, not the machine or the
    reference. Reward 0, counted and logged; the model's doing, so never masked as infrastructure
    (:mod:`tirl.algo.infra`). Without the control, an answer built to time the comparison out (200 nested
    braces, ``\\Gamma(10^{7})``) was a ``timeout``, masked, and so escaped the negative reward of a wrong answer.
``verifier_error``
    The verifier's infrastructure failed: the executor answered ``internal`` (after ``internal_retries``
    retries), the worker process crashed or gave no verdict line, and the control comparison of the reference
    with itself failed too (``VerifierConfig.timeout_control``). Reward 0, counted and logged at WARNING; a
    trainer masks such samples instead of treating them as wrong (:mod:`tirl.algo.infra`).
``answer_error``
    The comparison's worker failed as for ``verifier_error``, but the control comparison of the reference with
    itself succeeded: the answer is what broke the worker (a memory blow-up, a crash of the comparison), so the
    failure is the model's. Reward 0, counted and logged; never masked.
``verifier_bug``
    Grading code raised on this answer (issue 41): answer reading, a guard, math-verify's parser or comparison,
    in the caller's process or in the worker (``detail``: where, the exception type and location, its message).
    Reward 0, *not* masked: the answer is what made grading fail, so a policy that learnt to write answers that
    make the verifier raise must not escape the negative reward of a wrong answer (before, such an answer raised
    out of ``verify_batch`` and failed the whole batch, or became a masked ``verifier_error``). Counted; logged
    at ERROR once per distinct exception type and location (:func:`bug_detail`), so a bug shows in the log
    without one line per sample.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, get_args

logger = logging.getLogger("tirl.reward")

VerifyStatus = Literal[
    "ok",
    "no_answer",
    "hedged",
    "unparsable_gold",
    "timeout",
    "answer_timeout",
    "verifier_error",
    "answer_error",
    "verifier_bug",
]
VERIFY_STATUSES: tuple[str, ...] = get_args(VerifyStatus)  # the same names, in the same order, written once

VerifyPath = Literal["none", "string", "integer", "symbolic"]
VERIFY_PATHS: tuple[str, ...] = ("none", "string", "integer", "symbolic")

# Statuses that mean something other than "the model's answer was judged"; logged when they happen.
LOGGED_STATUSES = frozenset({"unparsable_gold", "timeout", "answer_timeout", "verifier_error", "answer_error"})
#: Grading code raised on the answer: reward 0, not masked; logged once per signature (:func:`bug_signature`).
BUG_STATUS = "verifier_bug"

_BUGS_SEEN: set[str] = set()
_BUGS_LOCK = threading.Lock()


def bug_detail(where: str, exc: BaseException) -> str:
    """The ``detail`` of a ``verifier_bug`` verdict: ``"<where> raised <Type> at <file>:<line>: <message>"``.

    The location is the innermost frame of the exception's traceback (file name only), so that one bug gives
    one signature (:func:`bug_signature`) whatever the answer; the message is cut to 200 characters (never the
    expressions' text in full: ``str()`` of a huge object can take long).
    """
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    location = f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}" if tb is not None else "?"
    try:
        message = str(exc)[:200]
    except Exception:  # noqa: BLE001 - an exception whose str() raises still gets a detail
        message = "<unprintable>"
    return f"{where} raised {type(exc).__name__} at {location}: {message}"


def bug_signature(detail: str | None) -> str:
    """What identifies one bug in a :func:`bug_detail` text: the part before the message."""
    return (detail or "").partition(": ")[0]


@dataclass
class Verdict:
    """The outcome of verifying one response against one reference answer.

    Attributes:
        correct: True when the extracted answer matches the reference (only ever True with status ``ok``).
        status: one of :data:`VERIFY_STATUSES` (see the module docstring).
        extracted: the predicted answer taken from the response (the content of the final box), or None.
        gold: the reference answer as given.
        path: how the decision was made: ``string`` (normalised texts identical), ``integer`` (the in-process
            integer fast path), ``symbolic`` (math-verify in a sandbox worker), ``none`` (no comparison made).
        duration_s: wall-clock seconds spent on this item, extraction included.
        detail: a short human-readable reason when it helps (which guard fired, the worker's error), else None.
    """

    correct: bool
    status: VerifyStatus
    extracted: str | None = None
    gold: str = ""
    path: VerifyPath = "none"
    duration_s: float = 0.0
    detail: str | None = None

    @property
    def reward(self) -> float:
        """The binary reward of the report: 1.0 when correct, else 0.0."""
        return 1.0 if self.correct else 0.0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the fields and ``reward``."""
        data = asdict(self)
        data["reward"] = self.reward
        return data


@dataclass
class VerifyItem:
    """One verification to do.

    Attributes:
        response: the model's response text (one turn or the whole trajectory text; tool responses are ignored
            by the extractor). Ignored when ``answer`` is given.
        gold: the reference answer (``"42"``, ``"\\frac{1}{2}"``, ``"$[2,5)$"``).
        answer: an already extracted answer; when given, no extraction is done.
        question: the problem text, or None. Used only for the subscript-base policy: when the reference is
            written in base b (``123_8``) and the question asks for base b, a bare numeral answer is read in
            base b (:func:`tirl.reward.forms.question_base`).
    """

    response: str | None
    gold: str
    answer: str | None = None
    question: str | None = None

    @classmethod
    def coerce(cls, item: Any) -> VerifyItem:
        """A :class:`VerifyItem` from an item, a ``(response, gold)`` pair or a dict with those keys (and
        optionally ``answer`` and ``question``).

        Raises:
            TypeError: ``item`` is none of these shapes.
        """
        if isinstance(item, VerifyItem):
            return item
        if isinstance(item, dict):
            return cls(
                response=item.get("response"),
                gold=item.get("gold", ""),
                answer=item.get("answer"),
                question=item.get("question"),
            )
        if isinstance(item, (tuple, list)) and len(item) == 2:
            return cls(response=item[0], gold=item[1])
        raise TypeError(f"cannot make a VerifyItem from {type(item).__name__}; pass (response, gold) pairs")


@dataclass(frozen=True)
class VerifierConfig:
    """Knobs of verification. The defaults are the documented policies of docs/reward.md.

    Attributes:
        timeout_s: hard deadline per symbolic item in seconds, enforced by the executor killing the process.
        memory_mb: address-space limit of the worker process for one symbolic item, in MiB.
        integer_fast_path: compare integer references in the caller's process, without sympy.
        string_fast_path: accept identical normalised texts in the caller's process.
        float_rounding: math-verify's ``float_rounding`` (decimal places floats are rounded to).
        numeric_precision: math-verify's ``numeric_precision`` (significant digits of numeric checks).
        exact_number_guard: after math-verify says equal, reject exact numbers that differ (catches
            ``1/2004!`` vs ``1/2006!`` and ``1/2^99`` vs ``1/2^98``, which its absolute tolerance accepts).
        magnitude_guard_digits: a side estimated to have more than this many digits, compared with a side
            of known small magnitude, is unequal without evaluating it (``(10^7)!`` vs ``5``).
        decimal_gold_rounding: a reference written as a finite decimal of at least 3 significant digits
            (``33.3``) matches an exact prediction (``\\frac{100}{3}``) that rounds to it at the reference's number
            of decimal places (``0.5`` does not: :data:`tirl.reward.guards.ROUNDED_GOLD_MIN_SIGNIFICANT`).
        assume_positive: when math-verify says unequal, retry expressions in free variables with the
            variables taken as positive reals (``\\sqrt{1/n}`` vs ``\\frac{1}{\\sqrt{n}}``); never for
            expressions with ``|x|``, sign, min/max, floor/ceiling or piecewise parts.
        internal_retries: times a request answered ``internal`` by the executor is retried (with a fresh
            request id) before its items become ``verifier_error``.
        chunk_size: most comparisons sent to one sandbox process (one fork serves them one after another);
            1 sends each alone. An item a chunk did not answer before the deadline is re-run alone with the
            full deadline, so chunking never turns a slow neighbour into a timeout.
        timeout_control: when a comparison passes its deadline or its worker fails, compare the reference with
            itself under the same deadline; if that finishes, the answer was the cause: status
            ``answer_timeout`` / ``answer_error`` (the model's, reward 0) instead of ``timeout`` /
            ``verifier_error`` (which a trainer masks as infrastructure).
    """

    timeout_s: float = 5.0
    memory_mb: int = 2048
    integer_fast_path: bool = True
    string_fast_path: bool = True
    float_rounding: int = 6
    numeric_precision: int = 15
    exact_number_guard: bool = True
    magnitude_guard_digits: int = 100_000
    decimal_gold_rounding: bool = True
    assume_positive: bool = True
    internal_retries: int = 1
    chunk_size: int = 8
    timeout_control: bool = True

    def worker_options(self) -> dict[str, Any]:
        """The options the sandbox worker program needs (JSON-serialisable)."""
        return {
            "float_rounding": self.float_rounding,
            "numeric_precision": self.numeric_precision,
            "exact_number_guard": self.exact_number_guard,
            "magnitude_guard_digits": self.magnitude_guard_digits,
            "decimal_gold_rounding": self.decimal_gold_rounding,
            "assume_positive": self.assume_positive,
        }


@dataclass
class VerifierStats:
    """Thread-safe counters of verdicts by status and by path, with total and per-status time.

    One object can be shared by many threads and event loops. :meth:`record` also logs the statuses that
    must never be hidden (``unparsable_gold``, ``timeout``, ``answer_timeout``, ``verifier_error``) at WARNING
    on the ``tirl.reward`` logger, and the first ``verifier_bug`` of each signature at ERROR.
    """

    by_status: dict[str, int] = field(default_factory=lambda: {s: 0 for s in VERIFY_STATUSES})
    by_path: dict[str, int] = field(default_factory=lambda: {p: 0 for p in VERIFY_PATHS})
    correct: int = 0
    total: int = 0
    seconds: float = 0.0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def record(self, verdict: Verdict) -> None:
        """Count one verdict (and log it when its status is one of the logged ones)."""
        with self._lock:
            self.total += 1
            self.by_status[verdict.status] = self.by_status.get(verdict.status, 0) + 1
            self.by_path[verdict.path] = self.by_path.get(verdict.path, 0) + 1
            self.correct += int(verdict.correct)
            self.seconds += verdict.duration_s
        if verdict.status == BUG_STATUS:
            signature = bug_signature(verdict.detail)
            with _BUGS_LOCK:
                first = signature not in _BUGS_SEEN
                _BUGS_SEEN.add(signature)
            if first:  # once per distinct exception type and location, not once per sample
                logger.error(
                    "verification raised (reward 0, status verifier_bug; logged once per location) "
                    "gold=%r, extracted=%r: %s",
                    _clip(verdict.gold),
                    _clip(verdict.extracted),
                    verdict.detail or "",
                )
        elif verdict.status in LOGGED_STATUSES:
            logger.warning(
                "verification %s (gold=%r, extracted=%r): %s",
                verdict.status,
                _clip(verdict.gold),
                _clip(verdict.extracted),
                verdict.detail or "",
            )

    def snapshot(self) -> dict[str, Any]:
        """A consistent copy as a plain dict: ``total``, ``correct``, ``seconds``, ``by_status``, ``by_path``."""
        with self._lock:
            return {
                "total": self.total,
                "correct": self.correct,
                "seconds": self.seconds,
                "by_status": dict(self.by_status),
                "by_path": dict(self.by_path),
            }

    def merge(self, other: VerifierStats) -> None:
        """Add the counts of ``other`` (without logging again)."""
        snap = other.snapshot()
        with self._lock:
            self.total += snap["total"]
            self.correct += snap["correct"]
            self.seconds += snap["seconds"]
            for key, value in snap["by_status"].items():
                self.by_status[key] = self.by_status.get(key, 0) + value
            for key, value in snap["by_path"].items():
                self.by_path[key] = self.by_path.get(key, 0) + value


def _clip(text: str | None, limit: int = 120) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[:limit] + f"...(+{len(text) - limit} chars)"
