"""Label consistency (tirl.data.curation.consistency): the keep rule, resuming, and a real run of the step
with the tiny random model through the agent loop (tool on) from ``tirl data curate``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.data.curation import AnswerPolicy, ConsistencyConfig, CurationConfig, curate_problems, label_consistency
from tirl.data.curation.sources import SourceProblem
from tirl.data.problem import Problem

PROBLEMS = [
    Problem(id=f"p{i}", problem=f"Problem number {i} about {w}.", answer=str(i))
    for i, w in enumerate(["apples", "boats", "cards", "dice"])
]


def scripted(matches: dict[str, int], asked: list[str]):
    """generate/score where problem ``id`` gets ``matches[id]`` correct samples (the first ones)."""

    def generate(problems, n):
        asked.extend(p.id for p in problems)
        return [(p.id, k) for p in problems for k in range(n)]

    def score(trajectories, repeated):
        return [1.0 if k < matches[pid] else 0.0 for pid, k in trajectories]

    return generate, score


def test_a_problem_stays_only_with_at_least_m_matching_samples(tmp_path: Path) -> None:
    asked: list[str] = []
    gen, score = scripted({"p0": 0, "p1": 1, "p2": 2, "p3": 16}, asked)
    items = [SourceProblem("toy", p) for p in PROBLEMS]
    cfg = CurationConfig(answers=AnswerPolicy(probe=False), consistency=ConsistencyConfig(samples=16, min_correct=2))
    kept, drops, _ = curate_problems(
        items, cfg, references=[], sampler=(gen, score), progress_path=tmp_path / "progress.jsonl"
    )
    assert [k.problem.id for k in kept] == ["p2", "p3"]
    assert {d.id: (d.reason, d.detail["correct"]) for d in drops} == {
        "p0": ("label_inconsistent", 0),
        "p1": ("label_inconsistent", 1),
    }


def test_an_interrupted_run_resumes_without_resampling_finished_problems(tmp_path: Path) -> None:
    progress = tmp_path / "progress.jsonl"
    asked: list[str] = []
    gen, score = scripted({"p0": 3, "p1": 0, "p2": 5, "p3": 1}, asked)
    calls = {"n": 0}

    def flaky(problems, n):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("engine died")
        return gen(problems, n)

    cfg = ConsistencyConfig(samples=4, min_correct=2, chunk_problems=2)
    with pytest.raises(RuntimeError):
        label_consistency(PROBLEMS, flaky, score, progress, cfg)
    asked.clear()
    counts = label_consistency(PROBLEMS, gen, score, progress, cfg)
    assert asked == ["p2", "p3"]  # p0 and p1 came from the progress file
    assert counts == {"p0": 3, "p1": 0, "p2": 4, "p3": 1}


def test_bad_settings_are_rejected() -> None:
    with pytest.raises(ValueError):
        ConsistencyConfig(samples=4, min_correct=5)
    with pytest.raises(ValueError):
        ConsistencyConfig(samples=0)


@pytest.mark.slow
def test_the_step_runs_for_real_with_the_tiny_model_and_the_tool(tmp_path: Path, tiny_model_dir: Path) -> None:
    src = tmp_path / "two.jsonl"
    src.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is {i} plus {i}?", "answer": str(2 * i)}) + "\n"
            for i in (3, 4)
        )
    )
    base = [
        "data",
        "curate",
        str(src),
        "--consistency-model",
        str(tiny_model_dir),
        "--consistency-samples",
        "2",
        "--max-turns",
        "1",
        "--max-response-tokens",
        "8",
        "--dtype",
        "float32",
        "--workers",
        "1",
    ]
    res = CliRunner().invoke(app, base + ["--out-dir", str(tmp_path / "a"), "--consistency-min", "1"])
    assert res.exit_code == 0, res.output
    lines = (tmp_path / "a" / "consistency.progress.jsonl").read_text().splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == ["q3", "q4"]
    report = json.loads((tmp_path / "a" / "report.json").read_text())
    assert report["steps"][-1]["step"] == "consistency"
    # a random 8-token model never writes a correct boxed answer: with m=1 every problem is dropped
    assert report["kept"] == 0 and report["steps"][-1]["by_reason"] == {"label_inconsistent": 2}
