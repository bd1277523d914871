"""The per-call uid allocator (``tirl.sandbox.uids``): exclusive across processes, released on every exit
path (clean release, process exit, SIGKILL), careful after a crash, and strict about its lock directory."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import subprocess
import time

import pytest

from tirl.sandbox import uids

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="lock directories must be root-owned")


@pytest.fixture()
def lock_dir(tmp_path):
    path = tmp_path / "locks"
    os.chmod(tmp_path, 0o755)
    uids.prepare_lock_dir(str(path))
    return str(path)


def _claim_many(lock_dir: str, first: int, count: int, n: int, seed: int, out) -> None:
    alloc = uids.UidAllocator(first, count, lock_dir, random.Random(seed))
    got = [alloc.claim() for _ in range(n)]
    out.put(got)
    time.sleep(1.0)  # hold them while the other processes claim theirs


def test_concurrent_processes_never_share_a_uid(lock_dir):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    # 4 processes x 6 uids from a range of 24: every uid is taken exactly once, whatever the start points.
    procs = [ctx.Process(target=_claim_many, args=(lock_dir, 5000, 24, 6, seed, out)) for seed in range(4)]
    for p in procs:
        p.start()
    claimed = [out.get(timeout=30) for _ in procs]
    for p in procs:
        p.join(30)
    flat = [u for got in claimed for u in got]
    assert sorted(flat) == list(range(5000, 5024))


def test_a_full_range_raises_and_a_release_frees_a_uid(lock_dir):
    a = uids.UidAllocator(7000, 2, lock_dir)
    b = uids.UidAllocator(7000, 2, lock_dir)
    first, second = a.claim(), a.claim()
    with pytest.raises(uids.UidRangeError, match="all 2 uids"):
        b.claim()
    a.release(first)
    assert b.claim() == first
    assert second in a.held and first not in a.held


def _holder(lock_dir: str, out) -> None:  # pragma: no cover - runs in a child process
    alloc = uids.UidAllocator(8000, 1, lock_dir)
    out.put(alloc.claim())
    time.sleep(60)


def test_a_killed_holder_releases_its_uid(lock_dir):
    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_holder, args=(lock_dir, out))
    proc.start()
    try:
        assert out.get(timeout=30) == 8000
        other = uids.UidAllocator(8000, 1, lock_dir)
        with pytest.raises(uids.UidRangeError):
            other.claim()
        os.kill(proc.pid, signal.SIGKILL)
        proc.join(10)
        # The kernel dropped the lock with the process; the file still names the dead holder (not a clean
        # release), so the claimer checked that no process runs as uid 8000 (none does here) and took it.
        assert open(os.path.join(lock_dir, "8000")).read().strip() == str(proc.pid)
        assert other.claim() == 8000
    finally:
        proc.kill()
        proc.join()


def test_after_a_crash_a_uid_still_in_use_is_skipped(lock_dir):
    """A holder that died without a clean release leaves its pid in the file; while a process still runs as
    that uid (a dying call's), claimers pass over it."""
    sleeper = subprocess.Popen(["sleep", "30"], user=9001, group=9001)
    try:
        with open(os.path.join(lock_dir, "9001"), "w") as fh:
            fh.write("12345\n")  # what a crashed holder leaves
        alloc = uids.UidAllocator(9001, 2, lock_dir, random.Random(0))
        alloc._cursor = 0  # start the scan at 9001
        assert uids.uid_in_use(9001)
        assert alloc.claim() == 9002
    finally:
        sleeper.kill()
        sleeper.wait()
    assert not uids.uid_in_use(9001)
    assert alloc.claim() == 9001


def test_an_unclean_release_keeps_the_holder_mark_and_a_clean_one_clears_it(lock_dir):
    alloc = uids.UidAllocator(9100, 2, lock_dir, random.Random(0))
    alloc._cursor = 0
    uid = alloc.claim()
    path = os.path.join(lock_dir, str(uid))
    assert open(path).read().strip() == str(os.getpid())
    alloc.release(uid, clean=False)
    assert open(path).read().strip() == str(os.getpid())
    uid = alloc.claim()
    alloc.release(uid)
    assert open(path).read() == ""


def test_lock_files_stay_bounded_for_a_long_lived_worker(lock_dir):
    alloc = uids.UidAllocator(20000, 4096, lock_dir)
    for _ in range(500):
        held = [alloc.claim() for _ in range(3)]
        for uid in held:
            alloc.release(uid)
    assert len(alloc._fds) <= 3  # it keeps reusing the uids at its start point


@pytest.mark.parametrize("mode", [0o777, 0o770])
def test_a_lock_dir_others_can_write_is_refused(tmp_path, mode):
    path = tmp_path / "open"
    path.mkdir()
    os.chmod(path, mode)
    with pytest.raises(uids.UidRangeError, match="unsafe"):
        uids.prepare_lock_dir(str(path))


def test_a_lock_dir_owned_by_another_user_is_refused(tmp_path):
    path = tmp_path / "theirs"
    path.mkdir(mode=0o700)
    os.chown(path, 12345, 12345)
    with pytest.raises(uids.UidRangeError, match="unsafe"):
        uids.prepare_lock_dir(str(path))
