"""`tirl data filter-pass-rate` (`tirl.eval.pass_rate`) on evaluation folders the real runner wrote.

The runs are `tirl.eval.runner.run_eval` with scripted components (no model): the engine answers problem
``ANSWER n SOLVE k`` correctly on its first k samples and wrongly after, so each problem's correct count is
known; a verifier deadline and an engine that always fails give the infrastructure cases.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections import defaultdict
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.data.benchmarks import load_benchmark
from tirl.eval.pass_rate import PassRateError, filter_pass_rate, stats_path
from tirl.eval.runner import EvalComponents, EvalConfig, run_eval
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.rollout.engine import GenerationOutput, SingleEngineRouter
from tirl.runs.layout import EVAL_SUMMARY, EVAL_TRAJECTORIES, METRICS_FILE

N = 4
SOLVED = {"p0": 0, "p1": 1, "p2": 4, "p3": 2, "p4": 3, "p5": 4, "p6": 0, "p7": 2}
"""Problem id -> correct samples of N (the engine's script); p8 below has a verifier deadline on one sample."""
FLAKY_GOLD = "777"
BAD_GOLD = "999"


def _rows(broken: bool) -> list[dict]:
    rows = [
        {"id": pid, "problem": f"ANSWER {10 + i} SOLVE {k}", "answer": str(10 + i), "level": i, "tags": ["x", i]}
        for i, (pid, k) in enumerate(SOLVED.items())
    ]
    rows.insert(3, {"id": "p8", "problem": f"ANSWER {FLAKY_GOLD} SOLVE 2", "answer": FLAKY_GOLD, "level": 8})
    rows.insert(5, {"id": "p9", "problem": f"ANSWER {BAD_GOLD} SOLVE 0", "answer": BAD_GOLD})
    if broken:  # the engine fails every call for it: its samples are never stored
        rows.insert(6, {"id": "pb", "problem": "ANSWER 5 SOLVE 2 BROKEN", "answer": "5"})
    rows.append({"id": "late", "problem": "ANSWER 1 SOLVE 1", "answer": "1"})  # outside the run (FILE:N)
    return rows


class ScriptedEngine:
    """First k calls of a problem ``ANSWER n SOLVE k`` answer n, the rest n + 1 (no tool, one turn)."""

    def __init__(self, tok):
        self.tok = tok
        self.calls: dict[str, int] = defaultdict(int)
        self.stop = tok.convert_tokens_to_ids("<|im_end|>")

    async def generate(self, prompt_ids, params):
        text = self.tok.decode(prompt_ids)
        n, k = (int(x) for x in re.findall(r"ANSWER (\d+) SOLVE (\d+)", text)[-1])
        if "BROKEN" in text:
            return GenerationOutput([], [], finish_reason="error", error="server gone")
        self.calls[text] += 1
        answer = n if self.calls[text] <= k else n + 1
        ids = self.tok.encode(f"done</reason><answer>\\boxed{{{answer}}}</answer>", add_special_tokens=False)
        return GenerationOutput([*ids, self.stop], [-0.1] * (len(ids) + 1))


def _grader():
    flaky = {"n": 0}

    async def grade(traj, response_text, gold):
        if gold == FLAKY_GOLD:
            flaky["n"] += 1
            if flaky["n"] == 1:  # one sample's check missed its deadline: the infrastructure's, not the model's
                return {"correct": False, "status": "timeout", "extracted": traj.final_answer}
        return {"correct": traj.final_answer == gold, "status": "ok", "extracted": traj.final_answer}

    return grade


async def _check_golds(golds):
    return ["cannot parse" if g == BAD_GOLD else None for g in golds]


def make_run(root: Path, tok, *, broken: bool = False) -> Path:
    """An evaluation folder written by the real runner: ``root/run``, of ``root/problems.jsonl`` (all but its
    last problem: ``problems.jsonl:N``), benchmark named by its relative path (the runner ran in ``root``)."""
    rows = _rows(broken)
    (root / "problems.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    config = EvalConfig(
        model="scripted",
        benchmarks=["problems.jsonl"],
        subsets={"problems.jsonl": len(rows) - 1},
        out_dir=root / "run",
        samples=N,
        use_tools=False,
        rollout=AgentLoopSettings(max_response_tokens=200, max_turns=1, temperature=1.0),
    )
    components = EvalComponents(
        router=SingleEngineRouter(ScriptedEngine(tok)),
        tokenizer=tok,
        executor=None,
        grader=_grader(),
        check_golds=_check_golds,
    )
    cwd = Path.cwd()
    try:
        import os

        os.chdir(root)  # the benchmark is named as a user names it: a path relative to where tirl eval runs
        asyncio.run(run_eval(config, components))
    finally:
        os.chdir(cwd)
    return root / "run"


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory, smollm2_tokenizer) -> Path:
    return make_run(tmp_path_factory.mktemp("clean"), smollm2_tokenizer)


@pytest.fixture
def run(clean_run, tmp_path, monkeypatch) -> Path:
    """A private copy of the clean run (tests edit it), with the working directory where the eval ran."""
    shutil.copytree(clean_run.parent, tmp_path / "w")
    monkeypatch.chdir(tmp_path / "w")
    return tmp_path / "w" / "run"


def _expected(lo: int, hi: int) -> list[str]:
    ids = [r["id"] for r in _rows(False)[:-1]]
    return [i for i in ids if i in SOLVED and lo <= SOLVED[i] <= hi]


def test_default_bounds_keep_the_sometimes_solved_in_source_order_with_every_field(run, tmp_path):
    out = tmp_path / "subset.jsonl"
    result = filter_pass_rate(run, out)
    assert (result.samples, result.samples_from, result.min_correct, result.max_correct) == (N, EVAL_SUMMARY, 1, 3)
    assert [p.id for p in result.kept] == _expected(1, 3) == ["p1", "p3", "p4", "p7"]
    # histogram of the problems with N graded samples: p8 (a verifier deadline) and p9 (bad gold) are not in it
    assert result.histogram == [2, 1, 2, 1, 2]
    assert result.dropped == {
        "below_min": ["p0", "p6"],
        "above_max": ["p2", "p5"],
        "incomplete": [],
        "infra_failed": ["p8"],
        "unparsable_gold": ["p9"],
    }
    assert result.not_evaluated == 1 and result.ignored_samples == 0 and not result.partial
    # the rows are the source's rows, every field kept (answer as the loader reads it), in source order
    source = {r["id"]: r for r in _rows(False)}
    written = [json.loads(line) for line in out.read_text().splitlines()]
    for row in written:
        assert {k: v for k, v in row.items() if k != "source"} == source[row["id"]]
    assert load_benchmark(out) == result.kept  # readable as a benchmark (and RL source) again
    stats = json.loads(stats_path(out).read_text())
    assert stats["model"] == "scripted" and stats["temperature"] == 1.0 and stats["samples"] == N
    assert stats["eval_run"] == str(run.resolve()) and stats["benchmarks"] == {"problems.jsonl": "problems.jsonl"}
    assert stats["histogram"] == {"0": 2, "1": 1, "2": 2, "3": 1, "4": 2}
    assert (
        stats["kept"] == 4
        and stats["dropped"]["infra_failed"] == 1
        and stats["infra_failed_samples"] == {"verifier": 1}
    )


def test_every_pair_of_bounds_keeps_exactly_the_counts_between_them(run, tmp_path):
    for lo in range(N + 1):
        for hi in range(lo, N + 1):
            result = filter_pass_rate(run, tmp_path / f"s{lo}{hi}.jsonl", min_correct=lo, max_correct=hi)
            assert [p.id for p in result.kept] == _expected(lo, hi), (lo, hi)
            assert len(result.kept) == sum(result.histogram[lo : hi + 1])


def test_a_tool_internal_error_counts_neither_right_nor_wrong(run, tmp_path):
    lines = (run / EVAL_TRAJECTORIES).read_text().splitlines()
    edited = []
    for line in lines:
        rec = json.loads(line)
        if rec["problem_id"] == "p3" and rec["correct"]:
            rec["tool_internal_errors"] = 1  # the sandbox failed a call, its control too: masked
        edited.append(json.dumps(rec))
    (run / EVAL_TRAJECTORIES).write_text("\n".join(edited) + "\n")
    result = filter_pass_rate(run, tmp_path / "s.jsonl")
    assert result.dropped["infra_failed"] == ["p8", "p3"]  # source order and "p3" not in [p.id for p in result.kept]
    assert result.stats["infra_failed_samples"] == {"tool_internal": 2, "verifier": 1}


def test_a_partial_run_is_refused_naming_the_problems_or_filtered_to_complete_ones(
    tmp_path, smollm2_tokenizer, monkeypatch
):
    run = make_run(tmp_path, smollm2_tokenizer, broken=True)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "s.jsonl"
    with pytest.raises(PassRateError, match=r"partial eval run: 1 problem\(s\) have fewer than 4 samples: pb \(0/4\)"):
        filter_pass_rate(run, out)
    assert not out.exists()  # nothing written on an error
    result = filter_pass_rate(run, out, complete_only=True)
    assert result.partial and result.dropped["incomplete"] == ["pb"]
    assert [p.id for p in result.kept] == ["p1", "p3", "p4", "p7"]


def test_a_run_without_summary_is_partial_and_a_torn_line_is_skipped(run, tmp_path):
    (run / EVAL_SUMMARY).unlink()
    lines = (run / EVAL_TRAJECTORIES).read_text().splitlines()
    drop = next(i for i, line in enumerate(lines) if json.loads(line)["problem_id"] == "p4")
    text = "\n".join(lines[:drop] + lines[drop + 1 :]) + '\n{"benchmark": "problems.js'  # a crash mid-write
    (run / EVAL_TRAJECTORIES).write_text(text)
    with pytest.raises(PassRateError, match=r"p4 \(3/4\).*has not finished.*--complete-only"):
        filter_pass_rate(run, tmp_path / "s.jsonl")
    result = filter_pass_rate(run, tmp_path / "s.jsonl", complete_only=True)
    assert result.samples_from == "the records" and result.bad_lines == 1
    assert result.dropped["incomplete"] == ["p4"] and [p.id for p in result.kept] == ["p1", "p3", "p7"]
    # without the summary the unparsable reference is unknown: its problem scores 0 of N, dropped as never solved
    assert "p9" in result.dropped["below_min"]


def test_samples_below_the_stored_count_ignore_the_later_indices(run, tmp_path):
    result = filter_pass_rate(run, tmp_path / "s.jsonl", samples=2)
    assert result.ignored_samples == 10 * (N - 2) and result.samples_from == "--samples"
    # the first two samples of each problem: the engine's calls were not in index order, so only the bounds hold
    assert sum(result.histogram) + len(result.dropped["infra_failed"]) == 9 and result.max_correct == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"min_correct": 3, "max_correct": 2}, "--min-correct 3 is above --max-correct 2"),
        ({"max_correct": 5}, r"bounds must lie in 0..4"),
        ({"min_correct": -1}, r"bounds must lie in 0..4"),
        ({"samples": 1}, "one sample per problem: evaluate with --samples 8"),
        ({"samples": 0}, "--samples must be >= 1"),
        ({"source": "nope.jsonl"}, "cannot read the problems of benchmark 'problems.jsonl'.*--source PATH"),
    ],
)
def test_bad_requests_are_one_line_errors(run, tmp_path, kwargs, message):
    with pytest.raises(PassRateError, match=message) as info:
        filter_pass_rate(run, tmp_path / "s.jsonl", **kwargs)
    assert "\n" not in str(info.value)


def test_folders_that_are_not_eval_runs_are_refused(tmp_path):
    with pytest.raises(PassRateError, match="is not a folder"):
        filter_pass_rate(tmp_path / "missing", tmp_path / "s.jsonl")
    with pytest.raises(PassRateError, match="is not a tirl eval run.*--out-dir"):
        filter_pass_rate(tmp_path, tmp_path / "s.jsonl")
    (tmp_path / METRICS_FILE).write_text("{}\n")
    with pytest.raises(PassRateError, match="is a training run"):
        filter_pass_rate(tmp_path, tmp_path / "s.jsonl")
    (tmp_path / EVAL_TRAJECTORIES).write_text("")
    with pytest.raises(PassRateError, match="no run.json: not written by tirl eval"):
        filter_pass_rate(tmp_path, tmp_path / "s.jsonl")


def test_the_source_must_be_reachable_unchanged_and_not_the_output(run, tmp_path, monkeypatch):
    src = run.parent / "problems.jsonl"
    with pytest.raises(PassRateError, match="is the file the evaluation read"):
        filter_pass_rate(run, src)
    monkeypatch.chdir(tmp_path)  # elsewhere, the relative benchmark path reaches nothing
    with pytest.raises(PassRateError, match="run from the folder tirl eval ran in, or pass the file"):
        filter_pass_rate(run, tmp_path / "s.jsonl")
    assert [p.id for p in filter_pass_rate(run, tmp_path / "s.jsonl", source=src).kept] == _expected(1, 3)
    rows = [json.loads(line) for line in src.read_text().splitlines()]
    rows[2]["answer"] = "12345"  # the reference changed since the evaluation graded against it
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(PassRateError, match="'p2' of benchmark 'problems.jsonl' differs from the one tirl eval read"):
        filter_pass_rate(run, tmp_path / "s.jsonl", source=src)


def test_cli_prints_the_histogram_and_the_reasons(run, tmp_path):
    out = tmp_path / "s.jsonl"
    cli = CliRunner()
    res = cli.invoke(
        app,
        ["data", "filter-pass-rate", "--eval-run", str(run), "--out", str(out)],
        env={"COLUMNS": "200"},
        terminal_width=200,
    )
    assert res.exit_code == 0, res.output
    assert re.search(r"0/4 .*2 .*dropped: never solved \(0/4\)", res.output)
    assert re.search(r"4/4 .*2 .*dropped: always solved \(4/4\)", res.output)
    assert "kept 4 of 10 problems (1 <= correct <= 3 of 4" in res.output
    assert "dropped 1: a sample failed in tirl" in res.output and "verifier 1" in res.output
    assert "1 problems of the source after the last evaluated one" in res.output
    assert len(out.read_text().splitlines()) == 4
    bad = cli.invoke(app, ["data", "filter-pass-rate", "--eval-run", str(tmp_path), "--out", str(out)])
    assert bad.exit_code == 2 and "error:" in bad.output and "not a tirl eval run" in bad.output


def test_a_sample_index_outside_0_to_n_minus_1_is_not_one_of_the_n(run, tmp_path):
    lines = [json.loads(line) for line in (run / EVAL_TRAJECTORIES).read_text().splitlines()]
    victim = next(r for r in lines if r["problem_id"] == "p1")
    victim["sample_index"] = -1  # a corrupt record must not complete a problem's N samples
    (run / EVAL_TRAJECTORIES).write_text("".join(json.dumps(r) + "\n" for r in lines))
    with pytest.raises(PassRateError, match=r"p1 \(3/4\)"):
        filter_pass_rate(run, tmp_path / "s.jsonl")
    result = filter_pass_rate(run, tmp_path / "s.jsonl", complete_only=True)
    assert result.ignored_samples == 1 and result.dropped["incomplete"] == ["p1"]
