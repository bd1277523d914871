"""The run folder's file names are spelled in :mod:`tirl.runs` only, and its readers and writers agree.

The names test parses every module of ``src/tirl`` outside ``src/tirl/runs`` with ``ast`` and fails on a string
literal (docstrings and messages with spaces aside) that spells a run file's name: a path built by hand is a
reader or writer that does not go through :mod:`tirl.runs`.
"""

from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path

import pytest

from tirl.runs import layout
from tirl.runs.checkpoints import (
    final_from_checkpoint,
    final_step,
    last_checkpoint,
    resume_folder,
    write_checkpoint_marker,
)
from tirl.runs.evals import RunStore, read_samples, read_summary, sample_count
from tirl.runs.metrics import MetricsLog, metrics_file, read_metrics
from tirl.runs.trajectories import read_step_log, step_groups, training_records, write_step_log

SRC = Path(__file__).resolve().parents[1] / "src" / "tirl"

NAMES = re.compile(
    r"(?<![\w.-])(config\.yaml|metrics\.jsonl|summary\.json|run\.json|trajectories\.jsonl|tirl_checkpoint\.json"
    r"|tirl_final\.json|trainer_state\.json)(?![\w])|(?<![\w-])checkpoint-|step_\{\}_rank"
)
"""A run file's name inside a literal (an f-string's fields read as ``{}``)."""

FOLDERS = frozenset({layout.FINAL_DIR, layout.TRAJECTORY_DIR})
"""Folder names too common to look for everywhere: flagged as an operand of ``/`` (a path built by hand)."""


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
        else:
            continue
        # a docstring, and the attribute docstrings that follow assignments
        for i, stmt in enumerate(body):
            if (
                isinstance(stmt, ast.Expr)
                and isinstance(stmt.value, ast.Constant)
                and isinstance(stmt.value.value, str)
            ):
                if i == 0 or isinstance(body[i - 1], (ast.Assign, ast.AnnAssign)):
                    ids.add(id(stmt.value))
    return ids


def _template(node: ast.JoinedStr) -> str:
    return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)


def spelled_names(source: str, filename: str = "<src>") -> list[tuple[int, str]]:
    """``(line, literal)`` of every literal in ``source`` that spells a run file's name (see the module
    docstring)."""
    tree = ast.parse(source, filename)
    skip = _docstrings(tree)
    found = []
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in n.values}
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = _template(node)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip | inner:
            text = node.value
        else:
            if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
                for side in (node.left, node.right):
                    if isinstance(side, ast.Constant) and side.value in FOLDERS:
                        found.append((node.lineno, side.value))
            continue
        if not re.search(r"\s", text) and NAMES.search(text):
            found.append((node.lineno, text))
    return found


def test_run_file_names_are_spelled_in_tirl_runs_only():
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line}: {text!r}"
        for path in sorted(SRC.rglob("*.py"))
        if "runs" not in path.relative_to(SRC).parts[:1]
        for line, text in spelled_names(path.read_text(encoding="utf-8"), str(path))
    ]
    assert offenders == [], "run file names spelled outside tirl.runs (use tirl.runs.layout):\n" + "\n".join(offenders)


def test_the_scan_finds_hand_built_paths_and_spares_docs_and_messages():
    source = '''
"""Reads ``RUN/metrics.jsonl``."""
from pathlib import Path
def f(run, step, rank):
    """Writes checkpoint-N/config.yaml."""
    a = Path(run) / "metrics.jsonl.gz"
    b = Path(run) / f"checkpoint-{step}"
    c = run / "final"
    d = f"step_{step:05d}_rank{rank}.jsonl"
    e = "summary.json"
    ok = f"no summary.json in {run}: an unfinished run"
    fine = {"trajectories": 3, "final": 1, "dry_run.json": 0}
'''
    assert sorted(line for line, _ in spelled_names(source)) == [6, 7, 8, 9, 10]


def test_metrics_log_cut_back_and_archive_read_the_same(tmp_path):
    log = MetricsLog(layout.metrics_path(tmp_path))
    for step in (1, 2, 3):
        log.write({"step": step, "loss": float("nan") if step == 2 else 0.5})
    with open(log.path, "a", encoding="utf-8") as fh:
        fh.write('{"step": 4, "lo')  # a killed run's torn line
    assert log.truncate_after(2) == 1
    records = read_metrics(tmp_path)
    assert [r["step"] for r in records] == [1, 2] and records[1]["loss"] is None
    archive = tmp_path / "archived"
    (archive / "empty").mkdir(parents=True)
    (archive / layout.METRICS_ARCHIVE).write_bytes(gzip.compress(log.path.read_bytes()))
    assert metrics_file(archive).name == layout.METRICS_ARCHIVE
    assert read_metrics(archive) == records
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        read_metrics(archive / "empty")  # a folder without either file
    with pytest.raises(FileNotFoundError, match="no metrics file"):
        read_metrics(tmp_path / "nothing")


def test_step_logs_round_trip_into_groups(tmp_path):
    rows = [{"step": 3, "rank": 0, "group": g, "sample": s, "reward": float(s)} for g in (1, 0) for s in (1, 0)]
    path = write_step_log(tmp_path, 3, 0, rows)
    assert path == layout.trajectory_file(tmp_path, 3, 0) and path.name == "step_00003_rank0.jsonl"
    write_step_log(tmp_path, 2, 1, [{"group": 0, "sample": 0}])  # step and rank from the file name
    assert read_step_log(path) == rows
    groups = step_groups(tmp_path)
    assert list(groups) == [(2, 1, 0), (3, 0, 0), (3, 0, 1)]
    assert [r["sample"] for r in groups[(3, 0, 1)]] == [0, 1]
    assert list(step_groups(tmp_path, step=2)) == [(2, 1, 0)]
    found = training_records(layout.trajectory_dir(tmp_path))  # the trajectories folder itself
    assert found is not None and found.root == tmp_path and len(found.records) == 5
    assert training_records(tmp_path / "empty") is None


def test_eval_folder_written_by_the_store_reads_back(tmp_path):
    with RunStore(tmp_path, {"model": "m"}) as store:
        store.append({"benchmark": "b", "problem_id": "1", "sample_index": 0, "correct": True})
        store.write_summary({"benchmarks": {"b": {"avg_pass1": 1.0}}})
    assert layout.is_eval_run(tmp_path) and sample_count(tmp_path) == 1
    assert read_samples(tmp_path) == ([{"benchmark": "b", "problem_id": "1", "sample_index": 0, "correct": True}], 0)
    assert read_summary(tmp_path) == {"benchmarks": {"b": {"avg_pass1": 1.0}}}
    assert json.loads(layout.eval_settings(tmp_path).read_text()) == {"model": "m"}
    layout.eval_summary(tmp_path).write_text("{torn")
    assert read_summary(tmp_path) is None
    with pytest.raises(ValueError, match="summary.json is not valid JSON"):
        read_summary(tmp_path, strict=True)
    with pytest.raises(FileNotFoundError):
        read_samples(tmp_path / "none")


def test_checkpoints_final_and_resume_folder(tmp_path):
    assert resume_folder(tmp_path) is None
    for step in (1, 2):
        folder = layout.checkpoint_dir(tmp_path, step)
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"w" * step)
        (folder / "optimizer.pt").write_bytes(b"o")
    write_checkpoint_marker(layout.checkpoint_dir(tmp_path, 1), 1)  # checkpoint-2 is half-written
    assert last_checkpoint(tmp_path) == layout.checkpoint_dir(tmp_path, 1)
    assert resume_folder(tmp_path) == layout.checkpoint_dir(tmp_path, 1)
    final = final_from_checkpoint(layout.checkpoint_dir(tmp_path, 1), tmp_path)
    assert final == layout.final_dir(tmp_path) and final_step(tmp_path) == 1
    assert sorted(p.name for p in final.iterdir()) == ["model.safetensors", layout.FINAL_MARKER]
    assert layout.checkpoint_step(layout.checkpoint_dir(tmp_path, 12)) == 12
    assert layout.checkpoint_step(final) == 0 and layout.checkpoint_step("incomplete-checkpoint-3") == 0
    assert layout.is_model_folder_name("final") and layout.is_model_folder_name("checkpoint-7")
    assert not layout.is_model_folder_name("checkpoint-x")


def test_archived_step_logs_read_like_live_ones(tmp_path):
    """An experiment's archive keeps trajectory logs gzipped (``step_NNNNN_rankR.jsonl.gz``): the readers take them
    (``tirl analyze roc`` and ``tirl view`` on an archived run), and a plain log of the same step wins."""
    live = write_step_log(tmp_path, 1, 0, [{"group": 0, "sample": 0, "reward": 1.0}])
    archived = live.with_name(live.name + ".gz")
    archived.write_bytes(gzip.compress(b'{"group": 0, "sample": 0, "reward": 0.0}\n'))
    gz_only = layout.trajectory_file(tmp_path, 2, 0).with_suffix(".jsonl.gz")
    gz_only.write_bytes(gzip.compress(b'{"group": 3, "sample": 1}\n{"torn'))
    assert [(s, r, p.name) for s, r, p in layout.step_files(layout.trajectory_dir(tmp_path))] == [
        (1, 0, live.name),
        (2, 0, gz_only.name),
    ]
    groups = step_groups(tmp_path)
    assert groups[(1, 0, 0)][0]["reward"] == 1.0 and list(groups) == [(1, 0, 0), (2, 0, 3)]
    assert training_records(tmp_path).skipped_lines == 1
