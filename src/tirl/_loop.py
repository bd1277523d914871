"""The one background event loop of tirl: :class:`BackgroundLoop`, an asyncio event loop in a daemon thread.

A leaf module (standard library only), at the bottom of the package order (docs/architecture.md), so that the
sandbox (``SyncSandbox``), the reward's sync verification and :mod:`tirl.runtime` (which re-exports it) can all
use it without importing one another.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class BackgroundLoop:
    """One asyncio event loop running forever in a daemon thread; coroutines are submitted from any thread.

    Engines and executors bind to the loop they first run on; a persistent loop lets the local sandbox's warm
    workers and an engine's batcher live across calls (RL steps, sampler chunks, sync verifications).

    Args:
        name: the thread's name.
    """

    def __init__(self, name: str = "tirl-loop") -> None:
        self._ready = threading.Event()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(self._ready.set)
        self.loop.run_forever()

    def is_alive(self) -> bool:
        """Whether the loop's thread still runs."""
        return self.thread.is_alive() and not self.loop.is_closed()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        """Schedule ``coro`` on the loop; returns a concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (exceptions propagate).

        Raises:
            RuntimeError: called from the loop's own thread (it would wait for itself).
        """
        if threading.current_thread() is self.thread:
            raise RuntimeError("BackgroundLoop.run was called from the loop's own thread")
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        """Stop the loop and join the thread. Idempotent."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()


__all__ = ["BackgroundLoop"]
