"""The stage-3 hard subset: problems the current policy does not solve k out of k times (the report's stage 3).

For each problem, sample ``samples`` trajectories with the policy and the Python tool (training temperature),
verify them, and keep the problems with fewer than ``samples`` correct. Progress is appended to
``<out>.progress.jsonl`` after every chunk of problems, so an interrupted run resumes where it stopped (finished
problems are not redone); the subset is written to ``out`` (the JSONL format of
:func:`tirl.data.training.load_jsonl_problems`) when all problems are done.

Covers the curation step only; the sampling is the agent loop's and the checking the reward's.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.data.training import write_problems


@dataclass
class HardSubsetConfig:
    """Settings of :func:`filter_hard` (how the trajectories are sampled is the ``generate`` callable's business,
    :class:`tirl.runtime.sampler.SamplerConfig` for ``tirl data filter-hard``).

    Attributes:
        samples: trajectories per problem (8 in the report); a problem is hard when fewer are correct.
        chunk_problems: problems per progress checkpoint.
    """

    samples: int = 8
    chunk_problems: int = 8


@dataclass
class HardSubsetResult:
    """Outcome of :func:`filter_hard`.

    Attributes:
        total: problems considered.
        hard: problems kept (fewer than ``samples`` correct).
        solved_all: problems solved every time (dropped).
        resumed: problems whose result came from an earlier, interrupted run.
        correct_counts: problem id -> number of correct samples.
    """

    total: int = 0
    hard: int = 0
    solved_all: int = 0
    resumed: int = 0
    correct_counts: dict[str, int] = field(default_factory=dict)


Generate = Callable[[Sequence[Problem], int], list[Any]]
ScoreFn = Callable[[Sequence[Any], Sequence[Problem]], list[float | None]]


def _read_progress(path: Path, samples: int) -> dict[str, int]:
    done: dict[str, int] = {}
    if not path.exists():
        return done
    for line in path.read_text(encoding="utf-8").split("\n"):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut by a crash: that problem is redone
        if isinstance(rec, dict) and rec.get("samples") == samples and isinstance(rec.get("correct"), int):
            done[str(rec["id"])] = rec["correct"]
    return done


def count_correct(
    problems: Sequence[Problem],
    generate: Generate,
    score: ScoreFn,
    progress_path: str | Path,
    samples: int,
    chunk_problems: int = 8,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[dict[str, int], int]:
    """Sample ``samples`` trajectories per problem and count the correct ones, resumably.

    The shared machinery of :func:`filter_hard` and the label-consistency step of curation
    (:mod:`tirl.data.curation.consistency`). After every chunk of problems one line per problem
    (``{"id", "correct", "samples"}``) is appended to ``progress_path``; problems already there (with the same
    ``samples``) are not redone, and a line cut by a crash is ignored.

    Args:
        problems: candidates (ids must be unique).
        generate: ``(problems, n) -> trajectories``, n per problem, problem-major.
        score: ``(trajectories, repeated problems) -> rewards`` (1.0 correct; 0.0 or None otherwise).
        progress_path: the progress file (created with its folder).
        samples: trajectories per problem.
        chunk_problems: problems per progress checkpoint.
        progress: called with ``(done, total)`` at the start and after each chunk.

    Returns:
        ``(problem id -> correct count, how many counts came from the progress file)``.

    Raises:
        ValueError: duplicate problem ids, ``samples < 1``, or a generator returning the wrong count.
    """
    if samples < 1:
        raise ValueError("samples must be >= 1")
    ids = [p.id for p in problems]
    if len(set(ids)) != len(ids):
        raise ValueError("problem ids must be unique")
    progress_path = Path(progress_path)
    progress_path.parent.mkdir(parents=True, exist_ok=True)
    done = _read_progress(progress_path, samples)
    counts = {i: done[i] for i in ids if i in done}
    resumed = len(counts)
    todo = [p for p in problems if p.id not in counts]
    if progress:
        progress(len(counts), len(problems))
    for start in range(0, len(todo), max(1, chunk_problems)):
        chunk = todo[start : start + max(1, chunk_problems)]
        trajectories = generate(chunk, samples)
        if len(trajectories) != len(chunk) * samples:
            raise ValueError(f"generator returned {len(trajectories)} trajectories for {len(chunk)} problems")
        repeated = [p for p in chunk for _ in range(samples)]
        rewards = score(trajectories, repeated)
        with open(progress_path, "a", encoding="utf-8") as fh:
            for k, p in enumerate(chunk):
                correct = sum(1 for r in rewards[k * samples : (k + 1) * samples] if r is not None and r > 0)
                counts[p.id] = correct
                fh.write(json.dumps({"id": p.id, "correct": correct, "samples": samples}) + "\n")
        if progress:
            progress(len(counts), len(problems))
    return counts, resumed


def filter_hard(
    problems: Sequence[Problem],
    generate: Generate,
    score: ScoreFn,
    out: str | Path,
    config: HardSubsetConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> HardSubsetResult:
    """Keep the problems the policy does not solve ``samples`` out of ``samples`` times.

    Args:
        problems: candidates (ids must be unique).
        generate: ``(problems, n) -> trajectories``, n per problem, problem-major.
        score: ``(trajectories, repeated problems) -> rewards`` (1.0 correct; 0.0 or None otherwise).
        out: the subset file to write; progress goes to ``<out>.progress.jsonl``.
        config: sampling settings.
        progress: called with ``(done, total)`` after each chunk.

    Returns:
        A :class:`HardSubsetResult`.

    Raises:
        ValueError: duplicate problem ids, ``samples < 1``, or a generator returning the wrong count.
    """
    cfg = config or HardSubsetConfig()
    out = Path(out)
    counts, resumed = count_correct(
        problems,
        generate,
        score,
        out.with_name(out.name + ".progress.jsonl"),
        cfg.samples,
        cfg.chunk_problems,
        progress,
    )
    result = HardSubsetResult(total=len(problems), resumed=resumed)
    hard = [p for p in problems if counts[p.id] < cfg.samples]
    write_problems(hard, out)
    result.hard = len(hard)
    result.solved_all = len(problems) - len(hard)
    result.correct_counts = counts
    return result


__all__ = ["HardSubsetConfig", "HardSubsetResult", "count_correct", "filter_hard"]
