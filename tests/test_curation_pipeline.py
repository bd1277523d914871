"""``curate`` end to end on small real collections: every drop recorded with its reason, per-source counts,
files written, the output read by the RL data loader, and the ``tirl data curate`` command as a user sees it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.data import load_benchmark
from tirl.data.curation import AnswerPolicy, CurationConfig, curate
from tirl.data.training import load_rl_set, load_training_problems


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def collection(tmp_path: Path) -> Path:
    gsm = load_rl_set("gsm8k", 3)
    m500 = load_benchmark("math500")[5]
    rows = [
        {"id": "keep-1", "problem": gsm[0].problem, "answer": "$\\boxed{72}$"},
        {"id": "copy-of-keep-1", "problem": "  " + gsm[0].problem.upper() + "  ", "answer": "72"},
        {"id": "tuple", "problem": "Find the point where the two lines y = x and y = 2 - x meet.", "answer": "(1, 1)"},
        {"id": "huge", "problem": "Write out 7 to the power 2366 in full.", "answer": "7" * 2000},
        {"id": "leak", "problem": m500.problem.replace(" ", "  ").replace(",", " ;"), "answer": "3"},
        {"id": "no-answer", "problem": "What is it?"},
        {"id": "keep-2", "problem": gsm[1].problem, "answer": "1,000"},
    ]
    return write_jsonl(tmp_path / "mixed.jsonl", rows)


def test_each_problem_is_kept_or_dropped_with_its_reason(tmp_path: Path, collection: Path) -> None:
    result = curate([str(collection)], tmp_path / "out", CurationConfig(answers=AnswerPolicy(probe=False)))
    reasons = {d.id: (d.step, d.reason) for d in result.dropped}
    assert reasons == {
        "copy-of-keep-1": ("dedup", "exact_duplicate"),
        "tuple": ("answer", "compound_answer"),
        "huge": ("answer", "huge_answer"),
        "leak": ("decontam", "contaminated"),
        "no-answer": ("normalise", "malformed"),
    }
    assert [p.id for p in result.kept] == ["keep-1", "keep-2"]
    assert [p.answer for p in result.kept] == ["72", "1000"]  # normalised
    leak = next(d for d in result.dropped if d.id == "leak")
    assert "math500/" + load_benchmark("math500")[5].id in leak.detail["benchmark_ids"]


def test_files_are_written_and_the_rl_loader_reads_the_output(tmp_path: Path, collection: Path) -> None:
    out = tmp_path / "out"
    result = curate([str(collection)], out, CurationConfig(answers=AnswerPolicy(probe=False)))
    loaded = load_training_problems([str(out / "problems.jsonl")], shuffle=False)
    assert [p.id for p in loaded] == [p.id for p in result.kept]
    dropped = [json.loads(line) for line in (out / "dropped.jsonl").read_text().splitlines()]
    assert len(dropped) == len(result.dropped) == 5 and all(d["reason"] and d["step"] for d in dropped)
    report = json.loads((out / "report.json").read_text())
    assert report["total_in"] == 7 and report["kept"] == 2
    assert [s["step"] for s in report["steps"]] == ["normalise", "answer", "dedup", "decontam"]
    assert report["steps"][-1]["out"] == 2 and report["steps"][0]["in"] == 7
    assert report["per_source"]["mixed"] == {"in": 7, "normalise": 1, "answer": 2, "dedup": 1, "decontam": 1, "kept": 2}
    assert report["reasons"]["huge_answer"]["examples"][0]["id"] == "huge"
    assert sum(report["answer_length_histogram"].values()) == 2
    md = (out / "report.md").read_text()
    assert "| decontam | 3 | 1 | 2 |" in md and "huge_answer" in md


def test_earlier_sources_win_duplicates_and_counts_are_per_source(tmp_path: Path) -> None:
    gsm = load_rl_set("gsm8k", 2)
    copy = write_jsonl(tmp_path / "copy.jsonl", [{"id": "c1", "problem": gsm[1].problem, "answer": gsm[1].answer}])
    result = curate(["gsm8k:2", str(copy)], tmp_path / "o", CurationConfig(answers=AnswerPolicy(probe=False)))
    assert [p.id for p in result.kept] == [p.id for p in gsm]
    assert result.report["per_source"]["copy"]["dedup"] == 1 and result.report["per_source"]["gsm8k"]["kept"] == 2


def test_problems_that_need_a_picture_or_a_file_are_dropped(tmp_path: Path) -> None:
    rows = [
        {"id": "pic", "problem": "See the figure. [Image: x.gif] How many?", "answer": "4", "has_image": True},
        {"id": "file", "problem": "Using names.txt, sum the scores.", "answer": "9", "resource_files": ["names.txt"]},
    ]
    result = curate(
        [str(write_jsonl(tmp_path / "a.jsonl", rows))],
        tmp_path / "o",
        CurationConfig(answers=AnswerPolicy(probe=False)),
    )
    assert {d.reason for d in result.dropped} == {"needs_attachment"} and not result.kept


def test_a_bad_source_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="neither a packaged set"):
        curate(["no/such/file.jsonl"], tmp_path / "o")


def test_cli_prints_the_step_table_and_writes_the_set(tmp_path: Path, collection: Path) -> None:
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["data", "curate", str(collection), "--out-dir", str(out)])
    assert res.exit_code == 0, res.output
    for word in ("normalise", "answer", "dedup", "decontam", "huge_answer 1", "2 of 7 problems kept"):
        assert word in res.output
    assert len((out / "problems.jsonl").read_text().splitlines()) == 2


def test_cli_answers_bad_input_with_exit_code_2(tmp_path: Path, collection: Path) -> None:
    res = CliRunner().invoke(app, ["data", "curate", "nope.jsonl", "--out-dir", str(tmp_path / "x")])
    assert res.exit_code == 2 and "error" in res.output
    res = CliRunner().invoke(
        app, ["data", "curate", str(collection), "--out-dir", str(tmp_path / "y"), "--accept", "everything"]
    )
    assert res.exit_code == 2 and "accept must be one of" in res.output
    res = CliRunner().invoke(
        app, ["data", "curate", str(collection), "--out-dir", str(tmp_path / "z"), "--benchmarks", "nope"]
    )
    assert res.exit_code == 2 and "unknown benchmark" in res.output
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"problem": "What is 2+2?", "answer": "4"}\n{"problem": "cut off\n')
    res = CliRunner().invoke(app, ["data", "curate", str(broken), "--out-dir", str(tmp_path / "w")])
    assert res.exit_code == 2 and "broken.jsonl:2: invalid JSON" in " ".join(res.output.split())  # rich wraps


@pytest.mark.slow
def test_the_packaged_curated_set_is_what_the_command_makes(tmp_path: Path) -> None:
    result = curate(["gsm8k", "math", "aime", "champ"], tmp_path / "c")
    packaged = load_rl_set("curated")
    assert [p.to_dict() for p in result.kept] == [p.to_dict() for p in packaged]
    assert result.report["kept"] == len(packaged) and result.report["contamination"]["matches"]
