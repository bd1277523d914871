"""The on-disk cache of tirl's derived model artefacts, and safe build-once under concurrent processes.

Covers where derived files live (``TIRL_CACHE``, default ``~/.cache/tirl``) and :func:`build_once`, which builds
a file or folder exactly once even when several processes (pytest workers, a trainer and an evaluator) ask for
it at the same time: an exclusive lock file serialises the builders, the builder writes into a private
temporary path next to the target, and the result appears with one atomic ``os.replace``/``os.rename``. A
crash mid-build leaves only a temporary path (removed on the next build), never a half-written target.

It does not know what is being built (see :mod:`tirl.models.builtin`, :mod:`tirl.models.gguf`,
:mod:`tirl.models.tiny`).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

CACHE_ENV = "TIRL_CACHE"


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
