"""Label consistency by sampling: keep a problem only when a strong model's solutions agree with its label.

The report's check (rStar2-Agent, arXiv 2508.20722, section 4.1): a strong model generates 16 solutions per
problem and a problem stays only if at least 2 of them match the reference answer; a label that no sample
reaches is likely wrong. Here the solutions come from the agent loop (any engine, any model, tool on) through
the caller's ``generate``, are scored by the verifier through ``score``, and are counted by the resumable
machinery of ``tirl data filter-hard`` (:func:`tirl.data.hard_subset.count_correct`): progress is appended to
a file after every chunk, so an interrupted run continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tirl.data.hard_subset import Generate, ScoreFn, count_correct
from tirl.data.problem import Problem


@dataclass(frozen=True)
class ConsistencyConfig:
    """Settings of :func:`label_consistency`.

    Attributes:
        samples: solutions per problem (16 in the report).
        min_correct: a problem stays when at least this many match its label (2 in the report).
        chunk_problems: problems per progress checkpoint.
    """

    samples: int = 16
    min_correct: int = 2
    chunk_problems: int = 8

    def __post_init__(self) -> None:
        if self.samples < 1:
            raise ValueError(f"samples must be >= 1, got {self.samples}")
        if not 0 <= self.min_correct <= self.samples:
            raise ValueError(f"min_correct must be in [0, samples={self.samples}], got {self.min_correct}")


def label_consistency(
    problems: Sequence[Problem],
    generate: Generate,
    score: ScoreFn,
    progress_path: str | Path,
    config: ConsistencyConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, int]:
    """How many of ``config.samples`` solutions of each problem match its label (resumable).

    Args:
        problems: the problems (ids unique).
        generate: ``(problems, n) -> trajectories``, n per problem, problem-major (the agent loop).
        score: ``(trajectories, repeated problems) -> rewards`` (the verifier; 1.0 = matches the label).
        progress_path: the progress file; problems already counted there with the same ``samples`` are reused.
        config: samples and threshold.
        progress: called with ``(done, total)`` after each chunk.

    Returns:
        problem id -> matching solutions; keep the problem when the count is at least ``config.min_correct``.

    Raises:
        ValueError: duplicate ids or a generator returning the wrong number of trajectories.
    """
    cfg = config or ConsistencyConfig()
    counts, _ = count_correct(problems, generate, score, progress_path, cfg.samples, cfg.chunk_problems, progress)
    return counts


__all__ = ["ConsistencyConfig", "label_consistency"]
