"""The order ``tests/conftest.py`` gives the test files, for pytest-xdist's ``--dist loadfile
--no-loadscope-reorder`` (``make test``): :func:`file_order`.

How xdist 3.8 hands the files out (``xdist/scheduler/loadscope.py``, ``LoadScopeScheduling.schedule`` and
``_reschedule``): the queue is the files in collection order; worker ``i`` of ``n`` gets file ``i``; then each
worker, in the same order, whose pending tests are 2 or fewer gets the next file of the queue at once; later, a
worker gets the next file whenever a test of its ends and it has 2 or fewer pending. So a worker whose first file
holds 1 or 2 tests (the long runs mostly do) is handed its second file up front, before anything has run: the
worker with the longest file gets file ``n``, the next one file ``n + 1``, and so on.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

File = TypeVar("File", bound=Hashable)


def file_order(files: Sequence[File], seconds: Mapping[File, float], workers: int) -> list[File]:
    """The files in the order to hand them out: longest first, with the ``workers`` shortest as the second file
    of the ``workers`` longest ones, in reverse (the longest file's worker gets the shortest).

    Args:
        files: the files in collection order, each once.
        seconds: about how long a file takes alone (its ``slow(seconds=N)`` mark; a ``slow`` mark without
            ``seconds`` is 0 here); a file absent holds no slow test and counts as shorter than any present
            (the files of 20 s or more carry a mark with ``seconds``).
        workers: pytest-xdist workers (1: no xdist).

    Returns:
        ``files`` reordered: the slow ones longest first (ties and the files without a slow test in collection
        order), then, with 2 or more workers and more than ``2 * workers`` files, the last ``workers`` of that
        order moved to positions ``workers`` ... ``2 * workers - 1``, shortest first. Without it the worker of the
        longest file (1 test) is handed the next-longest file up front and ends the session alone.
    """
    ranked = sorted(files, key=lambda f: (f not in seconds, -seconds.get(f, 0.0)))  # stable: collection order
    if workers < 2 or len(ranked) <= 2 * workers:
        return ranked
    shortest = ranked[-workers:][::-1]  # the shortest (the last of the unmarked files in collection order) first
    return ranked[:workers] + shortest + ranked[workers:-workers]
