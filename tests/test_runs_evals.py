"""Resumable JSONL output: durable appends, torn last lines, settings that must match."""

import json

import pytest

from tirl.runs.evals import ResumeMismatch, RunStore, describe_diff, read_settings, settings_diff
from tirl.runs.layout import EVAL_SETTINGS as RUN_FILE
from tirl.runs.layout import EVAL_TRAJECTORIES as TRAJECTORIES_FILE


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
    with RunStore(tmp_path, {"model": "a", "temperature": 0.6}) as store:
        store.append(rec())
    with pytest.raises(ResumeMismatch, match="temperature"):
        RunStore(tmp_path, {"model": "a", "temperature": 1.0})
    # the original settings file is untouched
    assert json.loads((tmp_path / RUN_FILE).read_text())["temperature"] == 0.6


def test_a_run_that_stored_no_sample_is_replaced_by_the_corrected_one(tmp_path):
    # issue 45: an eval that failed on a misspelled model left a run.json that refused the corrected command
    RunStore(tmp_path, {"model": "qwen-typo", "temperature": 0.6}).close()
    (tmp_path / TRAJECTORIES_FILE).write_text('{"torn": ')  # a torn line is no sample either
    with RunStore(tmp_path, {"model": "qwen", "temperature": 0.6}) as store:
        assert store.replaced == {"model": ("qwen-typo", "qwen")}
        store.append(rec())
    assert json.loads((tmp_path / RUN_FILE).read_text())["model"] == "qwen"
    with RunStore(tmp_path, {"model": "qwen", "temperature": 0.6}) as store:
        assert store.replaced is None and len(store) == 1


def test_a_refusal_is_one_short_line_naming_nested_keys(tmp_path):
    protocol = {f"field_{i}": "x" * 60 for i in range(20)}
    with RunStore(tmp_path, {"model": "a", "protocol": protocol}) as store:
        store.append(rec())
    changed = {**protocol, "prompt_style": "compact", "tool": "python_session"}
    with pytest.raises(ResumeMismatch) as info:
        RunStore(tmp_path, {"model": "b", "protocol": changed})
    text = str(info.value)
    assert "\n" not in text and len(text) < 400, text
    assert 'protocol.prompt_style: unset -> "compact"' in text and 'model: "a" -> "b"' in text
    assert "another output folder" in text and "--out " not in text
    # a mismatched folder is not touched: its settings stay
    assert json.loads((tmp_path / RUN_FILE).read_text())["model"] == "a"


def test_settings_diff_names_each_changed_nested_field():
    assert settings_diff({"a": 1, "p": {"x": 1, "y": 2}}, {"a": 1, "p": {"x": 1, "y": 3}, "b": True}) == {
        "b": (None, True),
        "p.y": (2, 3),
    }
    assert describe_diff({f"k{i}": (i, i + 1) for i in range(6)}, most=2) == "k0: 0 -> 1, k1: 1 -> 2 and 4 more"


def test_summary_is_written_atomically(tmp_path):
    with RunStore(tmp_path, {}) as store:
        path = store.write_summary({"x": 1})
    assert json.loads(path.read_text()) == {"x": 1}
    assert not list(tmp_path.glob("*.tmp"))


def test_read_settings_gives_the_recorded_settings_none_without_them_and_refuses_a_non_object(tmp_path):
    assert read_settings(tmp_path) is None
    RunStore(tmp_path, {"model": "m", "temperature": 1.0}).close()
    assert read_settings(tmp_path) == {"model": "m", "temperature": 1.0}
    (tmp_path / RUN_FILE).write_text("[1, 2]")
    with pytest.raises(ValueError, match="holds no JSON object"):
        read_settings(tmp_path)
    (tmp_path / RUN_FILE).write_text("{torn")
    with pytest.raises(ValueError, match="is not valid JSON"):
        read_settings(tmp_path)
