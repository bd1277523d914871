"""The one problem type of tirl: a problem statement and its reference answer, for evaluation and training.

Benchmarks (:func:`tirl.data.benchmarks.load_benchmark`), RL training sets
(:func:`tirl.data.training.load_training_problems`), the held-out toolmath split and curation all hand out
:class:`Problem` objects, and the agent loop (:func:`tirl.rollout.agent_loop.run_trajectories`) takes them. It
is defined here, low in the package order (docs/architecture.md), so that ``rollout`` can take it without
depending on ``tirl.data``; its public name is ``tirl.data.Problem`` (:mod:`tirl.data.problem` re-exports it).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class Problem:
    """One math problem with a reference answer.

    Attributes:
        id: unique within its set (``2024-I-1``, ``math500-007``, ``gsm8k-train-00000``, ``<stem>-<row>``).
        problem: the bare problem statement, given to the model as the user message (no prompt template).
        answer: the reference final answer as a string (an integer for the packaged training sets).
        source: where it comes from (``AIME 2024``, ``repo@commit path``, ``PyPI pkg==ver path``, a local path,
            ``tirl synthetic``).
        meta: any other fields of the row (MATH-500's ``subject``/``level``/``unique_id``, GSM8K's
            ``solution``, synthetic ``kind``); not part of equality.
    """

    id: str
    problem: str
    answer: str
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """A flat JSON-serialisable dict: ``id, problem, answer, source`` plus the ``meta`` keys."""
        row = {k: v for k, v in asdict(self).items() if k != "meta"}
        row.update(self.meta)
        return row
