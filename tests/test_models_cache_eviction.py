"""The model cache stays bounded: merged LoRA checkpoints are evicted least recently used first, stale builds of a
packaged model are removed, and nothing in use (recent, or locked by another process) is touched."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tirl.models import cache, loading

OLD = time.time() - 3600  # an hour ago: past MIN_IDLE_S


def _entry(folder: Path, name: str, mtime: float) -> Path:
    path = folder / name
    path.mkdir(parents=True)
    (path / "model.safetensors").write_bytes(b"x" * 16)
    os.utime(path, (mtime, mtime))
    return path


def test_only_the_keep_most_recent_entries_stay_and_locks_and_scratch_are_not_entries(tmp_path):
    paths = [_entry(tmp_path, f"adapter-run-checkpoint-{i}-abc", OLD + i) for i in range(5)]
    (tmp_path / "adapter-run-checkpoint-0-abc.lock").touch()
    scratch = _entry(tmp_path, "adapter-run-checkpoint-9-abc.tmp-1-deadbeef", OLD - 100)
    other = _entry(tmp_path, "qwen2.5-coder-0.5b-instruct", OLD - 100)

    removed = cache.evict_least_recent(tmp_path, "adapter-*", keep=3)

    assert removed == paths[:2]
    assert [p.exists() for p in paths] == [False, False, True, True, True]
    assert scratch.exists() and other.exists()
    assert (tmp_path / "adapter-run-checkpoint-0-abc.lock").exists()


def test_an_entry_used_recently_is_kept_whatever_its_rank(tmp_path):
    recent = _entry(tmp_path, "adapter-a-1", time.time() - 5)
    newer = [_entry(tmp_path, f"adapter-b-{i}", time.time()) for i in range(2)]
    old = _entry(tmp_path, "adapter-c-1", OLD)

    removed = cache.evict_least_recent(tmp_path, "adapter-*", keep=1)

    assert removed == [old]
    assert recent.exists() and all(p.exists() for p in newer)


def test_an_entry_locked_by_another_process_is_not_removed(tmp_path):
    locked = _entry(tmp_path, "adapter-a-1", OLD)
    _entry(tmp_path, "adapter-b-1", OLD + 10)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from filelock import FileLock; "
            f"l = FileLock({str(locked) + '.lock'!r}); l.acquire(); print('held', flush=True); time.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert cache.evict_least_recent(tmp_path, "adapter-*", keep=1) == []
        assert locked.exists()
    finally:
        holder.kill()
        holder.wait()
    assert cache.evict_least_recent(tmp_path, "adapter-*", keep=1) == [locked]


def test_other_versions_of_a_packaged_model_are_removed_but_not_other_models(tmp_path):
    target = _entry(tmp_path, "qwen2.5-coder-0.5b-tirl-0123456789ab", OLD)
    stale = _entry(tmp_path, "qwen2.5-coder-0.5b-tirl-ba9876543210", OLD)
    sibling = _entry(tmp_path, "qwen2.5-coder-0.5b-tirl-sft-a21de6101f46", OLD)
    base = _entry(tmp_path, "qwen2.5-coder-0.5b-instruct", OLD)

    assert cache.evict_other_versions(target, "qwen2.5-coder-0.5b-tirl") == [stale]
    assert target.exists() and sibling.exists() and base.exists()


@pytest.mark.parametrize("raw", ["0", "-1", "three", "1.5"])
def test_a_bad_keep_setting_fails_with_a_line_naming_the_variable(monkeypatch, raw):
    monkeypatch.setenv(cache.KEEP_MERGED_ENV, raw)
    with pytest.raises(ValueError, match=f"{cache.KEEP_MERGED_ENV} must be a whole number >= 1, got '{raw}'"):
        cache.keep_merged()


def test_keep_setting_default_and_override(monkeypatch):
    monkeypatch.delenv(cache.KEEP_MERGED_ENV, raising=False)
    assert cache.keep_merged() == cache.DEFAULT_KEEP_MERGED
    monkeypatch.setenv(cache.KEEP_MERGED_ENV, " 7 ")
    assert cache.keep_merged() == 7


def _checkpoint(root: Path, step: int) -> Path:
    folder = root / "run" / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "unused"}))
    (folder / "adapter_model.safetensors").write_bytes(b"adapter %d" % step)
    return folder


def test_resolving_checkpoints_keeps_the_cache_of_merges_bounded(tmp_path, monkeypatch):
    """Through ``resolve``, as ``tirl eval --model run/checkpoint-N`` does, with the merge itself faked."""
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.KEEP_MERGED_ENV, "2")
    builds = []

    def fake_merge(folder: Path, out_dir: Path) -> None:
        builds.append(folder.name)
        out_dir.mkdir()
        (out_dir / "config.json").write_text("{}")

    monkeypatch.setattr(loading, "build_adapter_checkpoint", fake_merge)
    checkpoints = [_checkpoint(tmp_path, step) for step in (1, 2, 3, 4)]
    merged = [loading.resolve(c) for c in checkpoints[:3]]
    assert all(m.is_dir() for m in merged)  # all used within MIN_IDLE_S: none evicted yet
    for age, path in zip((300, 200, 100), merged):  # pretend they were used 1 h + age s ago, step 1 first
        os.utime(path, (OLD - age, OLD - age))

    fourth = loading.resolve(checkpoints[3])

    assert [m.exists() for m in merged] == [False, False, True]
    assert fourth.is_dir()
    assert loading.resolve(checkpoints[2]) == merged[2]  # kept: not merged again
    assert builds == ["checkpoint-1", "checkpoint-2", "checkpoint-3", "checkpoint-4"]
    loading.resolve(checkpoints[0])  # evicted: merged again
    assert builds[-1] == "checkpoint-1" and merged[0].is_dir()


def test_a_bad_keep_setting_fails_before_merging(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(cache.KEEP_MERGED_ENV, "none")
    monkeypatch.setattr(loading, "build_adapter_checkpoint", lambda *a: pytest.fail("merged before the check"))
    with pytest.raises(ValueError, match=cache.KEEP_MERGED_ENV):
        loading.resolve(_checkpoint(tmp_path, 1))
