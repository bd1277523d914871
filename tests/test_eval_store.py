"""Resumable JSONL output: durable appends, torn last lines, settings that must match."""

import json

import pytest

from tirl.eval.store import RUN_FILE, TRAJECTORIES_FILE, ResumeMismatch, RunStore


def rec(b="math500", p="1", j=0, **extra):
    return {"benchmark": b, "problem_id": p, "sample_index": j, **extra}


def test_records_survive_reopen(tmp_path):
    with RunStore(tmp_path, {"model": "m"}) as store:
        store.append(rec(j=0, correct=True))
        store.append(rec(j=1, correct=False))
    with RunStore(tmp_path, {"model": "m"}) as store:
        assert len(store) == 2
        assert ("math500", "1", 1) in store
        assert ("math500", "1", 2) not in store


def test_torn_last_line_is_dropped_and_file_stays_valid(tmp_path):
    with RunStore(tmp_path, {}) as store:
        store.append(rec(j=0))
    path = tmp_path / TRAJECTORIES_FILE
    with open(path, "a") as fh:
        fh.write('{"benchmark": "math500", "problem_id": "1", "sam')  # crash mid-write
    with RunStore(tmp_path, {}) as store:
        assert len(store) == 1 and store.skipped_lines == 1
        store.append(rec(j=1))
    lines = path.read_text().splitlines()
    assert [json.loads(x)["sample_index"] for x in lines] == [0, 1]


def test_malformed_middle_line_is_skipped_not_fatal(tmp_path):
    path = tmp_path / TRAJECTORIES_FILE
    lines = [json.dumps(rec(j=0)), "not json", json.dumps({"no": "key"}), json.dumps(rec(j=1))]
    path.write_text("\n".join(lines) + "\n")
    with RunStore(tmp_path, {}) as store:
        assert len(store) == 2 and store.skipped_lines == 2


def test_duplicate_append_is_refused(tmp_path):
    with RunStore(tmp_path, {}) as store:
        store.append(rec())
        with pytest.raises(ValueError, match="already"):
            store.append(rec())


def test_different_settings_refuse_to_resume(tmp_path):
    RunStore(tmp_path, {"model": "a", "temperature": 0.6}).close()
    with pytest.raises(ResumeMismatch, match="temperature"):
        RunStore(tmp_path, {"model": "a", "temperature": 1.0})
    # the original settings file is untouched
    assert json.loads((tmp_path / RUN_FILE).read_text())["temperature"] == 0.6


def test_summary_is_written_atomically(tmp_path):
    with RunStore(tmp_path, {}) as store:
        path = store.write_summary({"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}
    assert not list(tmp_path.glob("*.tmp"))
