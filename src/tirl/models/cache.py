"""The on-disk cache of tirl's derived model artefacts, and safe build-once under concurrent processes.

Covers where derived files live (``TIRL_CACHE``, default ``~/.cache/tirl``) and :func:`build_once`, which builds
a file or folder exactly once even when several processes (pytest workers, a trainer and an evaluator) ask for
it at the same time: an exclusive lock file serialises the builders, the builder writes into a private
temporary path next to the target, and the result appears with one atomic ``os.replace``/``os.rename``. A
crash mid-build leaves only a temporary path (removed on the next build), never a half-written target.

Merged LoRA checkpoints (one full model each, 2.4 GB for a 0.5B model in float32) would otherwise pile up, one
per checkpoint ever evaluated: :func:`evict_least_recent` keeps the most recently used few (``TIRL_CACHE_KEEP_MERGED``,
default :data:`DEFAULT_KEEP_MERGED`) and :func:`evict_other_versions` drops the stale builds of a packaged model.

It does not know what is being built (see :mod:`tirl.models.builtin`, :mod:`tirl.models.gguf`,
:mod:`tirl.models.tiny`).
"""

from __future__ import annotations

import os
import re
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock, Timeout

CACHE_ENV = "TIRL_CACHE"
KEEP_MERGED_ENV = "TIRL_CACHE_KEEP_MERGED"
DEFAULT_KEEP_MERGED = 3
"""How many merged LoRA checkpoints (``models/adapter-*``) the cache keeps by default, most recently used first."""
MIN_IDLE_S = 600.0
"""An entry used less than this many seconds ago is never evicted (a server may still be loading from it)."""


def cache_dir() -> Path:
    """The root of tirl's cache: ``$TIRL_CACHE`` if set, else ``~/.cache/tirl``. Created if missing."""
    root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "tirl").expanduser()
    root.mkdir(parents=True, exist_ok=True)
    return root


def build_once(target: Path, build: Callable[[Path], None], *, lock_timeout_s: float = 3600.0) -> Path:
    """Return ``target``, building it first with ``build(tmp_path)`` if it does not exist yet.

    ``build`` receives a fresh temporary path in the same folder as ``target`` (not yet existing) and must
    create the file or folder there. It runs at most once across processes: the others wait on
    ``<target>.lock`` and then find the finished target.

    Args:
        target: the final path (file or folder).
        build: callable that creates the artefact at the given temporary path.
        lock_timeout_s: how long to wait for another process's build, in seconds.

    Returns:
        ``target``.

    Raises:
        filelock.Timeout: another process held the lock for longer than ``lock_timeout_s``.
        Whatever ``build`` raises (the temporary path is removed first); ``RuntimeError`` if ``build`` returned
        without creating anything.
    """
    target = Path(target)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=lock_timeout_s):
        if target.exists():  # another process finished while we waited
            return target
        for stale in target.parent.glob(target.name + ".tmp-*"):  # left by a crashed builder
            _remove(stale)
        tmp = target.parent / f"{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            build(tmp)
            if not tmp.exists():
                raise RuntimeError(f"building {target} produced nothing at {tmp}")
            os.replace(tmp, target) if tmp.is_file() else os.rename(tmp, target)
        except BaseException:
            _remove(tmp)
            raise
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def keep_merged() -> int:
    """``$TIRL_CACHE_KEEP_MERGED`` (how many merged LoRA checkpoints to keep), else :data:`DEFAULT_KEEP_MERGED`.

    Raises:
        ValueError: the variable is set to something other than a whole number >= 1 (the message names it).
    """
    raw = os.environ.get(KEEP_MERGED_ENV, "").strip()
    if not raw:
        return DEFAULT_KEEP_MERGED
    try:
        keep = int(raw)
    except ValueError:
        keep = 0
    if keep < 1:
        raise ValueError(f"{KEEP_MERGED_ENV} must be a whole number >= 1, got {raw!r}")
    return keep


def mark_used(path: Path) -> None:
    """Record that ``path`` (a cache entry) was just used: its modification time is what eviction orders by."""
    try:
        os.utime(path)
    except OSError:  # removed meanwhile, or a read-only cache: eviction order is only a hint
        pass


def evict_least_recent(folder: Path, pattern: str, keep: int, *, min_idle_s: float = MIN_IDLE_S) -> list[Path]:
    """Remove the least recently used entries of ``folder`` matching ``pattern`` beyond the ``keep`` newest.

    Entries are ordered by modification time (:func:`mark_used`). An entry is skipped, whatever its rank, when
    it was used less than ``min_idle_s`` seconds ago or another process holds its ``.lock`` (it is being built
    or rebuilt). Lock files and a crashed builder's ``.tmp-*`` paths are never counted as entries.

    Returns:
        The removed paths, oldest first.
    """
    entries = []
    for path in Path(folder).glob(pattern):
        if path.name.endswith(".lock") or ".tmp-" in path.name:
            continue
        try:
            entries.append((path.stat().st_mtime, path))
        except OSError:  # removed by another process meanwhile
            continue
    entries.sort(reverse=True)
    removed = []
    now = time.time()
    for mtime, path in reversed(entries[keep:]):
        if now - mtime < min_idle_s:
            continue
        if _remove_unless_locked(path):
            removed.append(path)
    return removed


def evict_other_versions(target: Path, stem: str) -> list[Path]:
    """Remove the entries next to ``target`` named ``<stem>-<hex fingerprint>`` other than ``target`` itself.

    For caches whose name ends with a fingerprint of what they were built from (a packaged trained model): an
    older fingerprint will never be asked for again. Only names of exactly that form are touched
    (``<stem>-sft-<hex>``, another model's entry, is not). Entries locked by another process are skipped.

    Returns:
        The removed paths.
    """
    target = Path(target)
    removed = []
    version = re.compile(re.escape(stem) + r"-[0-9a-f]+")
    for path in target.parent.glob(f"{stem}-*"):
        if path == target or not version.fullmatch(path.name):
            continue
        if _remove_unless_locked(path):
            removed.append(path)
    return removed


def _remove_unless_locked(path: Path) -> bool:
    lock = FileLock(str(path) + ".lock", timeout=0)
    try:
        lock.acquire()
    except Timeout:  # being built or rebuilt by another process
        return False
    try:
        _remove(path)
    finally:
        lock.release()
    # The empty lock file stays: unlinking it could let two later builders lock different inodes.
    return True
