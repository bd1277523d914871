"""``tirl view`` without a browser: what the page's data holds, read from runs written by tirl's own writers."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.view import render_html, view_records
from tirl.view.load import read_run, record_id
from view_fixtures import HOSTILE, write_eval_run, write_train_run


def _page_data(html: str) -> dict:
    m = re.search(r'<script id="run-data" type="application/json">(.*?)</script>', html, re.S)
    assert m, "the page embeds its data"

    def no_constants(name):  # NaN/Infinity are not JSON: the browser's JSON.parse would fail on them
        raise AssertionError(f"{name} in the page data")

    return json.loads(m.group(1), parse_constant=no_constants)


def test_eval_records_keep_verdicts_classes_and_the_mask_split(tmp_path):
    run = read_run(write_eval_run(tmp_path / "run", 12))
    recs = view_records(run)
    assert [r["verdict"] for r in recs] == ["correct" if k % 2 == 0 else "wrong" for k in range(12)]
    for k, r in enumerate(recs):
        raw = run.records[k]
        assert r["model_tokens"] == sum(raw["loss_mask"])
        assert r["injected_tokens"] == raw["loss_mask"].count(0)
        assert r["classes"] == raw["tool_classes"]
        assert r["truncated"] == (k % 5 == 4)


def test_every_tool_call_class_shows_its_facts(tmp_path):
    recs = view_records(read_run(write_eval_run(tmp_path / "run", 4)))
    calls = {r["turns"][0]["calls"][0]["cls"]: r["turns"][0]["calls"][0] for r in recs}
    assert set(calls) == {"ok", "error", "timeout", "parse_error"}
    assert "out-0" in calls["ok"]["output"] and calls["ok"]["duration"] == pytest.approx(0.25)
    assert "ZeroDivisionError" in calls["error"]["output"]
    assert calls["parse_error"]["status"] == "not run"
    assert calls["parse_error"]["parse_error"].startswith("invalid_json")
    assert calls["parse_error"]["raw"] == "{print(1)" and calls["parse_error"]["code_html"] == ""
    assert 'class="k"' in calls["ok"]["code_html"]  # Pygments marked the keywords


def test_code_is_escaped_by_the_highlighter(tmp_path):
    run = read_run(write_eval_run(tmp_path / "run", 1))
    run.records[0]["turns"][0]["tool_calls"][0]["call"]["arguments"]["code"] = "print('<script>x</script>')"
    html = view_records(run)[0]["turns"][0]["calls"][0]["code_html"]
    assert "<script>" not in html and "&lt;script&gt;" in html


def test_hostile_text_never_reaches_the_page_as_markup(tmp_path):
    html = render_html(write_eval_run(tmp_path / "run", 3, hostile_at=1))
    assert HOSTILE not in html and "<img" not in html
    assert _page_data(html)["records"][1]["problem"] == HOSTILE  # but the text itself is kept


def test_training_run_shows_roc_decisions(tmp_path):
    run = read_run(write_train_run(tmp_path / "train", steps=2))
    assert run.kind == "train"
    recs = view_records(run)
    assert len(recs) == 16 and sorted({r["step"] for r in recs}) == [1, 2]
    for step in (1, 2):
        kept = [r for r in recs if r["step"] == step and r["kept"]]
        assert len(kept) == 4
    for r in recs:
        assert r["reason"].startswith("kept" if r["kept"] else "dropped")
        assert r["p_err"] is not None and r["p_format"] is not None
    dropped_correct = [r for r in recs if not r["kept"] and r["verdict"] == "correct"]
    assert all("1 / (p_err + p_format)" in r["reason"] for r in dropped_correct)


def test_the_trajectories_folder_itself_is_accepted(tmp_path):
    root = write_train_run(tmp_path / "train", steps=1)
    assert len(read_run(root / "trajectories").records) == len(read_run(root).records) == 8


def test_ids_are_unique_within_a_run(tmp_path):
    for run in (read_run(write_eval_run(tmp_path / "e", 40)), read_run(write_train_run(tmp_path / "t", 3))):
        ids = [record_id(run.kind, r) for r in run.records]
        assert len(set(ids)) == len(ids)


def test_malformed_lines_are_skipped_and_counted(tmp_path):
    folder = write_eval_run(tmp_path / "run", 3)
    with open(folder / "trajectories.jsonl", "a") as fh:
        fh.write("{not json\n[1, 2]\n")
    run = read_run(folder)
    assert len(run.records) == 3 and run.skipped_lines == 2
    assert "2 malformed lines skipped" in render_html(folder)


def test_old_training_logs_without_tool_details_are_readable(tmp_path):
    folder = tmp_path / "old" / "trajectories"
    folder.mkdir(parents=True)
    old = {
        "problem_id": "q",
        "answer": "1",
        "sample": 0,
        "kept": False,
        "reward": 0.0,
        "verify_status": "ok",
        "final_answer": "2",
        "p_err": 0.0,
        "p_format": 0.0,
        "finish_reason": "answer",
        "model_tokens": 9,
        "tool_calls": ["ok"],
        "turns": [{"text": "hi", "tool_responses": ["resp"]}],
    }
    (folder / "step_00003_rank0.jsonl").write_text(json.dumps(old) + "\n")
    rec = view_records(read_run(tmp_path / "old"))[0]
    assert rec["step"] == 3 and rec["turns"][0]["calls"][0]["response"] == "resp"
    assert rec["turns"][0]["calls"][0]["cls"] == "ok" and rec["response_tokens"] is None


def test_cli_writes_the_page_and_rejects_a_folder_without_trajectories(tmp_path):
    folder = write_eval_run(tmp_path / "run", 2)
    res = CliRunner().invoke(app, ["view", str(folder), "--out", str(tmp_path / "v.html")])
    assert res.exit_code == 0, res.output
    html = (tmp_path / "v.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and len(_page_data(html)["records"]) == 2
    assert not re.search(r'(src|href)="(https?:)?//', html), "the page must load nothing from the network"
    res = CliRunner().invoke(app, ["view", str(tmp_path / "empty")])
    assert res.exit_code == 2 and "no trajectories" in " ".join(res.output.split())


def test_a_folder_of_runs_names_them(tmp_path):
    write_eval_run(tmp_path / "demo" / "tools", 1)
    write_eval_run(tmp_path / "demo" / "no-tools", 1)
    with pytest.raises(FileNotFoundError, match="no-tools, tools"):
        read_run(tmp_path / "demo")


_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)
_fields = [
    "benchmark",
    "problem_id",
    "sample_index",
    "sample",
    "step",
    "group",
    "rank",
    "problem",
    "gold",
    "answer",
    "final_answer",
    "correct",
    "verdict",
    "reward",
    "verify_status",
    "finish_reason",
    "model_tokens",
    "num_response_tokens",
    "response_ids",
    "loss_mask",
    "prompt_ids",
    "tool_classes",
    "tool_calls",
    "turns",
    "kept",
    "p_err",
    "p_format",
    "selection",
    "roc_mode",
]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    records=st.lists(st.fixed_dictionaries({}, optional={k: _junk for k in _fields}), min_size=1, max_size=3),
    kind=st.sampled_from(["eval", "train"]),
)
def test_records_of_any_shape_never_break_the_page(tmp_path, records, kind):
    folder = tmp_path / f"junk-{kind}"
    if kind == "eval":
        folder.mkdir(exist_ok=True)
        (folder / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    else:
        (folder / "trajectories").mkdir(parents=True, exist_ok=True)
        (folder / "trajectories" / "step_00001_rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    html = render_html(folder)
    assert len(_page_data(html)["records"]) == len(records)


def test_eval_summary_is_shown_and_a_damaged_summary_is_ignored(tmp_path):
    folder = write_eval_run(tmp_path / "run", 2)
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "benchmarks": {
                    "bench": {
                        "num_problems": 1,
                        "samples_per_problem": 2,
                        "avg_pass1": 0.5,
                        "maj_at_k": 1.0,
                        "tool_calls_per_trajectory": 1.0,
                        "truncation_rate": 0.0,
                        "no_answer_rate": 0.0,
                        "mean_response_tokens": 15.0,
                    }
                }
            }
        )
    )
    html = render_html(folder)
    assert "<td>bench</td>" in html and "50.0 %" in html
    (folder / "summary.json").write_text(json.dumps({"benchmarks": {"bench": {"avg_pass1": "x"}, "b2": 3}}))
    assert "<td>bench</td>" in render_html(folder)
    (folder / "summary.json").write_text(json.dumps({"benchmarks": [1]}))
    assert 'class="summary"' not in render_html(folder)
