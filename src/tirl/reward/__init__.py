"""Final-answer verification: the binary reward (rStar2-Agent, arXiv 2508.20722, sections 2.2 and 3.1).

Public API: :func:`verify`, :func:`verify_batch`, :func:`averify`, :func:`averify_batch`,
:func:`verify_answers` and :class:`Verifier` (:mod:`tirl.reward.verifier`); :class:`Verdict`,
:class:`VerifyItem`, :class:`VerifierConfig`, :class:`VerifierStats` (:mod:`tirl.reward.types`); the
normalisation helpers of the fast paths (:mod:`tirl.reward.normalize`); the reading of answer forms before
any comparison (:mod:`tirl.reward.forms`: mixed and separated numbers, constants, base numerals, trailing
punctuation, and ``value_key``, the vote key of maj@k); the ``POST /v1/verify/batch`` router
(:mod:`tirl.reward.routes`, imported on demand because it needs FastAPI).

Importing this package does not import sympy or math-verify: they run in sandbox workers
(:mod:`tirl.reward.worker`, :mod:`tirl.reward.guards`). The policies are documented in docs/reward.md.
"""

from tirl.reward.normalize import canonical_integer, latex_for_math_verify, normalize_text
from tirl.reward.payload import PRELOAD_MODULES
from tirl.reward.types import (
    VERIFY_PATHS,
    VERIFY_STATUSES,
    Verdict,
    VerifierConfig,
    VerifierStats,
    VerifyItem,
    VerifyPath,
    VerifyStatus,
)
from tirl.reward.verifier import (
    Verifier,
    averify,
    averify_batch,
    close_default_executor,
    create_default_executor,
    default_stats,
    verify,
    verify_answers,
    verify_batch,
)

__all__ = [
    "PRELOAD_MODULES",
    "VERIFY_PATHS",
    "VERIFY_STATUSES",
    "Verdict",
    "Verifier",
    "VerifierConfig",
    "VerifierStats",
    "VerifyItem",
    "VerifyPath",
    "VerifyStatus",
    "averify",
    "averify_batch",
    "canonical_integer",
    "close_default_executor",
    "create_default_executor",
    "default_stats",
    "latex_for_math_verify",
    "normalize_text",
    "verify",
    "verify_answers",
    "verify_batch",
]
