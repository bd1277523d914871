"""Final-answer verification: the binary reward (rStar2-Agent, arXiv 2508.20722, sections 2.2 and 3.1).

Public API: :class:`Verifier` (configured once with its executor, deadline and counters; sync and async, one
item or a batch) and :func:`verify`, the one convenience function (one response, the shared default executor
unless one is given), both in :mod:`tirl.reward.verifier`; the types :class:`Verdict`, :class:`VerifyItem`,
:class:`VerifierConfig`, :class:`VerifierStats` (:mod:`tirl.reward.types`); :data:`PRELOAD_MODULES`, what a
sandbox pool preloads for the symbolic path. Helpers stay in their modules: the normalisation of the fast
paths (:mod:`tirl.reward.normalize`), the reading of answer forms (:mod:`tirl.reward.forms`, including
``value_key``, the vote key of maj@k), the ``POST /v1/verify/batch`` router (:mod:`tirl.reward.routes`, needs
FastAPI).

Importing this package does not import sympy or math-verify: they run in sandbox workers
(:mod:`tirl.reward.worker`, :mod:`tirl.reward.guards`). The policies are documented in docs/reward.md.
"""

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
from tirl.reward.verifier import Verifier, verify

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
    "verify",
]
