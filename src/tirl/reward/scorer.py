"""Outcome rewards of trajectories: the :class:`Scorer` interface, its :class:`Score`, and :class:`VerifierScorer`,
the scorer on a :class:`tirl.reward.Verifier` that RL training (:mod:`tirl.train.rollout_func`) and the data
sampler (:mod:`tirl.runtime.sampler`) grade with.

The reward is rStar2-Agent's binary outcome (:func:`outcome_reward`): 1 correct, 0 otherwise; a trajectory the
verifier could not judge (:data:`UNSCORED_STATUSES`) gets None and is masked by the caller, never scored 0.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from tirl.protocol.problem import Problem
from tirl.protocol.types import Trajectory
from tirl.reward.types import BUG_STATUS, Verdict, VerifyItem, bug_detail

logger = logging.getLogger(__name__)


@dataclass
class Score:
    """The outcome reward of one trajectory.

    Attributes:
        reward: 1.0 correct, 0.0 wrong (outcome only: tool calls never add reward, field case F91), None when
            it could not be scored (verifier infrastructure failure, unparsable reference).
        status: the verifier's status (``ok``, ``no_answer``, ``timeout``, ``unparsable_gold``,
            ``verifier_error``).
    """

    reward: float | None
    status: str = "ok"


class Scorer(Protocol):
    """Scores trajectories against their problems' reference answers."""

    def score(self, trajectories: Sequence[Trajectory], problems: Sequence[Problem]) -> list[Score]:
        """One :class:`Score` per trajectory, in order."""
        ...


UNSCORED_STATUSES = frozenset({"unparsable_gold", "verifier_error"})
"""Verifier statuses that mean "could not judge" rather than "wrong": the sample is masked, not scored 0."""


def outcome_reward(correct: bool, status: str) -> float | None:
    """The binary outcome reward of rStar2-Agent: 1 if correct else 0; None for :data:`UNSCORED_STATUSES`."""
    if status in UNSCORED_STATUSES:
        return None
    return 1.0 if correct else 0.0


class VerifierScorer:
    """A :class:`Scorer` on ``tirl.reward`` (math-verify with integer fast path, hard deadlines).

    The answer graded is the trajectory's ``final_answer``: what the agent loop extracted from the model's own
    turns with the run's protocol (:func:`tirl.protocol.answer.extract_answer_from_turns`); the decoded
    response, which holds tool output too, is never read, so nothing a program prints can supply the answer,
    and a trajectory without a final answer scores 0 (``no_answer``) whatever its tool responses say.

    Args:
        tokenizer: the policy's tokenizer (kept for callers; the answer comes from the turn records).
        verify: ``(items) -> list[Verdict]`` on the run's loop: :meth:`tirl.train.rollout_func.AgentLoopSource.verify`
            (what :func:`tirl.train.rl.build_trainer` passes), i.e. :meth:`tirl.runtime.AgentRuntime.verify`: the
            recipe's ``verifier:`` section and protocol, on the answer checks' own pool built from its
            ``sandbox:`` section (:func:`tirl.runtime.build_check_executor`); a stand-in in tests.
    """

    def __init__(self, tokenizer: Any, verify: Callable[[list[Any]], list[Any]]) -> None:
        self.tokenizer = tokenizer
        self._verify = verify

    def score(self, trajectories: Sequence[Trajectory], problems: Sequence[Problem]) -> list[Score]:
        items = [
            VerifyItem(
                response=None,  # model text only: the answer the agent loop read from the turn records
                gold=p.answer,
                answer=t.final_answer,
                question=p.problem,  # read only for the base a base-written reference asks for
            )
            for t, p in zip(trajectories, problems, strict=True)
        ]
        try:
            verdicts = list(self._verify(items))
            if len(verdicts) != len(items):
                raise RuntimeError(f"the verifier answered {len(verdicts)} of {len(items)} items")
        except Exception:  # noqa: BLE001 - tirl.reward never raises for an answer; if it does, one item pays
            verdicts = [self._verify_alone(item) for item in items]
        return [Score(outcome_reward(v.correct, v.status), v.status) for v in verdicts]

    def _verify_alone(self, item: Any) -> Any:
        """One item's verdict, or a ``verifier_bug`` verdict (reward 0, not masked) when verifying it raises:
        an answer that makes grading raise fails neither the batch nor the RL step (issue 41)."""
        try:
            return self._verify([item])[0]
        except Exception as exc:  # noqa: BLE001 - logged once per location by the status's counters
            detail = bug_detail("the verifier", exc)
            logger.error("verifying one answer raised (reward 0, status verifier_bug): %s", detail)
            return Verdict(False, BUG_STATUS, item.answer, str(item.gold), "none", 0.0, detail)


__all__ = ["UNSCORED_STATUSES", "Score", "Scorer", "VerifierScorer", "outcome_reward"]
