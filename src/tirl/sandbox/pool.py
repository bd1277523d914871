"""``LocalSandbox``: a pool of warm sandbox workers driven from asyncio, and ``SyncSandbox``, its sync wrapper.

The pool starts ``workers`` processes (:mod:`tirl.sandbox.worker`), each of which imports the preload
modules once and isolates itself; every request then runs in a fresh fork of a worker. Requests wait in
one FIFO queue and go to the ready worker with the fewest calls in flight (at most ``slots_per_worker``
each). Results come back in any order and are matched by an internal call id, so ``run_batch`` answers in
the order of its requests.

Failure policy (nothing hangs, nothing is lost):

- a malformed request is answered ``internal`` without running;
- a worker that dies (crash, OOM kill, killed by the watchdog) has its whole process group killed, every
  call it held answered ``internal`` with the exit code and the tail of its stderr, and is replaced;
- a worker that has not answered a call ``host_grace_s`` after the call's own deadline is killed as hung;
- a worker that cannot start is retried; after ``max_start_failures`` failures in a row the pool answers
  every call ``internal`` with the start error;
- ``aclose`` answers every queued or running call ``internal`` and stops the workers.

It does not retry calls (a call may have had side effects inside its sandbox; the caller decides).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import itertools
import math
import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterable, Sequence
from typing import Any

import tirl
from tirl.sandbox import isolation, outcome, wire
from tirl.sandbox.config import DEFAULT_PRELOAD, SandboxConfig
from tirl.sandbox.types import DEFAULT_MEMORY_MB, DEFAULT_TIMEOUT_S, ExecutionRequest, ExecutionResult

_RESULT_FIELDS = {f.name for f in dataclasses.fields(ExecutionResult)} - {"request_id"}


def _worker_command(python: str) -> list[str]:
    src_root = os.path.dirname(os.path.dirname(os.path.abspath(tirl.__file__)))
    # First on sys.path: the worker must run the same tirl as the pool, even where another copy (an editable
    # install of another checkout) is on the path too.
    bootstrap = f"import sys\nsys.path.insert(0, {src_root!r})\nfrom tirl.sandbox.worker import main\nmain()"
    return [python, "-I", "-c", bootstrap]


def validate_request(request: Any, config: SandboxConfig) -> str | None:
    """Why ``request`` cannot run (a one-line message), or None when it is well-formed."""
    if not isinstance(request, ExecutionRequest):
        return f"expected an ExecutionRequest, got {type(request).__name__}"
    if not isinstance(request.code, str):
        return f"code must be a string, got {type(request.code).__name__}"
    if not isinstance(request.stdin, str):
        return f"stdin must be a string, got {type(request.stdin).__name__}"
    t = request.timeout_s
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        return f"timeout_s must be a positive finite number, got {t!r}"
    if t > config.max_timeout_s:
        return f"timeout_s {t} exceeds the limit of {config.max_timeout_s} s"
    m = request.memory_mb
    if isinstance(m, bool) or not isinstance(m, int) or m <= 0:
        return f"memory_mb must be a positive integer, got {m!r}"
    if m > config.max_memory_mb:
        return f"memory_mb {m} exceeds the limit of {config.max_memory_mb} MiB"
    return None


@dataclasses.dataclass
class _Pending:
    cid: int
    request: ExecutionRequest
    future: asyncio.Future


class _Worker:
    """Host-side handle of one worker process."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.ready = False
        self.dead = False
        self.info: dict = {}
        self.inflight: dict[int, tuple[_Pending, asyncio.TimerHandle | None]] = {}
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=20)
        self.tasks: list[asyncio.Task] = []

    def kill(self) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the worker and the namespace inits of its calls
        except (ProcessLookupError, PermissionError):
            try:
                self.proc.kill()
            except ProcessLookupError:
                pass


class LocalSandbox:
    """A pool of warm, isolated Python workers; implements :class:`~tirl.sandbox.types.CodeExecutor`.

    Args:
        workers: worker processes (default: one per usable core).
        preload: modules each worker imports once (default numpy, scipy, sympy). Add ``"math_verify"`` for
            answer checking, for example.
        config: every other setting (:class:`~tirl.sandbox.config.SandboxConfig`); ``workers``,
            ``preload`` and ``**options`` override its fields.

    Attributes:
        config: the effective configuration.
        workers: number of worker processes.
        max_concurrency: calls run at once (``workers * slots_per_worker``); more wait in a FIFO queue.

    Use ``async with LocalSandbox() as sb: result = await sb.run(ExecutionRequest("print(1)"))``. Workers
    start on ``start()`` (or lazily on the first call) and take a second or two to import the preload.
    """

    def __init__(
        self,
        workers: int | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        *,
        config: SandboxConfig | None = None,
        **options: Any,
    ) -> None:
        changes = dict(options)
        if workers is not None:
            changes["workers"] = workers
        if config is None or tuple(preload) != DEFAULT_PRELOAD:
            changes["preload"] = tuple(preload)
        self.config = dataclasses.replace(config or SandboxConfig(), **changes)
        self.workers = self.config.worker_count
        self.max_concurrency = self.workers * self.config.slots_per_worker
        self._ids = itertools.count(1)
        self._pending: collections.deque[_Pending] = collections.deque()
        self._pool: list[_Worker] = []
        self._started = False
        self._closed = False
        self._broken: str | None = None
        self._start_failures = 0
        self._scratch_root: str | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._first_ready: asyncio.Event | None = None
        self._all_settled: asyncio.Event | None = None
        self._close_done: asyncio.Event | None = None
        self._bg: set[asyncio.Task] = set()
        self._settled_slots: set[int] = set()  # worker indices that became ready or failed a start

    # ----- public API -------------------------------------------------------------------------------
    async def __aenter__(self) -> LocalSandbox:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def start(self) -> None:
        """Start the workers and wait until each is ready or has failed to start. Idempotent."""
        self._ensure_started()
        assert self._all_settled is not None
        await self._all_settled.wait()

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request; never raises for the request's content (failures become results)."""
        problem = validate_request(request, self.config)
        rid = getattr(request, "request_id", "") or ""
        if problem is not None:
            return ExecutionResult.internal_error(f"tirl-sandbox: malformed request: {problem}", str(rid))
        if self._closed:
            return ExecutionResult.internal_error("tirl-sandbox: the sandbox is closed", rid)
        self._ensure_started()
        if self._broken is not None:
            return ExecutionResult.internal_error(self._broken, rid)
        loop = asyncio.get_running_loop()
        pending = _Pending(next(self._ids), request, loop.create_future())
        self._pending.append(pending)
        self._dispatch()
        try:
            return await asyncio.shield(pending.future)
        except asyncio.CancelledError:
            if pending in self._pending:  # never sent: forget it; a sent call finishes in its worker
                self._pending.remove(pending)
            raise

    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run ``requests`` concurrently; results in the same order."""
        return list(await asyncio.gather(*(self.run(r) for r in requests)))

    async def layer_report(self) -> list[dict]:
        """The isolation layers of a ready worker: dicts with ``name``, ``active``, ``detail``.

        Raises:
            RuntimeError: no worker could start (the message says why).
        """
        await self.start()
        for w in self._pool:
            if w.ready:
                return list(w.info.get("layers", []))
        raise RuntimeError(self._broken or "no sandbox worker is ready")

    async def worker_info(self) -> dict:
        """The ``ready`` message of a ready worker: layers, preload results, plan, Python version."""
        await self.start()
        for w in self._pool:
            if w.ready:
                return dict(w.info)
        raise RuntimeError(self._broken or "no sandbox worker is ready")

    def worker_pids(self) -> list[int]:
        """Process ids of the live, ready workers (for monitoring and tests)."""
        return [w.proc.pid for w in self._pool if w.ready and not w.dead and w.proc is not None]

    def stats(self) -> dict[str, int]:
        """Counts: ``queued`` (waiting for a slot), ``running`` (sent to a worker), ``workers_ready``."""
        return {
            "queued": len(self._pending),
            "running": sum(len(w.inflight) for w in self._pool),
            "workers_ready": sum(1 for w in self._pool if w.ready and not w.dead),
        }

    async def aclose(self) -> None:
        """Stop the workers; answer every queued or running call ``internal``. Idempotent."""
        if self._closed:
            if self._close_done is not None:
                await self._close_done.wait()
            return
        self._closed = True
        self._close_done = asyncio.Event()
        try:
            while self._pending:
                p = self._pending.popleft()
                if not p.future.done():
                    p.future.set_result(
                        ExecutionResult.internal_error(
                            "tirl-sandbox: the sandbox was closed before the call ran", p.request.request_id
                        )
                    )
            for w in list(self._pool):
                if w.proc is not None and w.proc.returncode is None and w.proc.stdin is not None:
                    try:
                        w.proc.stdin.write(wire.encode({"op": "shutdown"}))
                        w.proc.stdin.close()
                    except (ConnectionError, RuntimeError):
                        pass
            for w in list(self._pool):
                if w.proc is not None:
                    try:
                        await asyncio.wait_for(w.proc.wait(), 3.0)
                    except TimeoutError:
                        pass
                w.kill()
                self._fail_inflight(w, "tirl-sandbox: the sandbox was closed while the call ran")
            tasks = [
                t for t in list(self._bg) + [t for w in self._pool for t in w.tasks] if t is not asyncio.current_task()
            ]
            for task in tasks:
                task.cancel()
            if tasks:  # let them finish cancelling: a loop closed right after would drop them still pending
                await asyncio.wait(tasks, timeout=3.0)
            for w in self._pool:
                if w.proc is not None:
                    try:
                        await asyncio.wait_for(w.proc.wait(), 3.0)
                    except TimeoutError:  # pragma: no cover - SIGKILL was sent
                        pass
            if self._scratch_root:
                shutil.rmtree(self._scratch_root, ignore_errors=True)
        finally:
            if self._all_settled is not None:
                self._all_settled.set()
            self._close_done.set()

    # ----- internals --------------------------------------------------------------------------------
    def _ensure_started(self) -> None:
        if self._started:
            return
        self._started = True
        self._loop = asyncio.get_running_loop()
        self._first_ready = asyncio.Event()
        self._all_settled = asyncio.Event()
        self._scratch_root = tempfile.mkdtemp(prefix="tirl-sandbox-", dir=self.config.scratch_root)
        os.chmod(self._scratch_root, 0o711)
        for index in range(self.workers):
            self._spawn(index)

    def _spawn(self, index: int, delay: float = 0.0) -> None:
        w = _Worker(index)
        w.stderr_tail = collections.deque(maxlen=self.config.worker_stderr_lines)
        self._pool.append(w)
        task = asyncio.ensure_future(self._start_worker(w, delay))
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _settle_check(self) -> None:
        """``start()`` returns once every worker slot has become ready or has failed to start once."""
        if self._all_settled is not None and len(self._settled_slots) >= self.workers:
            self._all_settled.set()

    async def _start_worker(self, w: _Worker, delay: float) -> None:
        if delay:
            await asyncio.sleep(delay)
        if self._closed:
            w.dead = True
            self._settled_slots.add(w.index)
            self._settle_check()
            return
        cfg = self.config.to_worker_dict()
        assert self._scratch_root is not None
        cfg["scratch_dir"] = os.path.join(self._scratch_root, f"w{w.index}-{next(self._ids)}")
        error: str | None = None
        try:
            w.proc = await asyncio.create_subprocess_exec(
                *_worker_command(self.config.python or sys.executable),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=isolation.scrubbed_env(self.config.env_passthrough),
                start_new_session=True,
                limit=wire.MAX_FRAME_BYTES,
            )
            assert w.proc.stdin is not None and w.proc.stderr is not None
            w.tasks.append(asyncio.ensure_future(self._read_stderr(w)))
            w.proc.stdin.write(wire.encode(cfg))
            message = await asyncio.wait_for(self._read_frame(w), self.config.start_timeout_s)
            if message is None:
                error = "the worker exited during start-up"
            elif message.get("op") == "fatal":
                error = str(message.get("error"))
            elif message.get("op") != "ready":
                error = f"unexpected first message {message.get('op')!r}"
            else:
                w.info = message
        except TimeoutError:
            error = f"the worker did not become ready within {self.config.start_timeout_s} s"
        except asyncio.CancelledError:
            w.kill()
            raise
        except Exception as exc:  # noqa: BLE001 - e.g. the interpreter cannot be executed
            error = f"{type(exc).__name__}: {exc}"
        if error is not None:
            await self._on_start_failure(w, error)
            return
        w.ready = True
        self._start_failures = 0
        self._settled_slots.add(w.index)
        w.tasks.append(asyncio.ensure_future(self._read_results(w)))
        assert self._first_ready is not None
        self._first_ready.set()
        self._settle_check()
        self._dispatch()

    async def _on_start_failure(self, w: _Worker, error: str) -> None:
        w.kill()
        if w.proc is not None:
            try:
                await asyncio.wait_for(w.proc.wait(), 3.0)
            except TimeoutError:  # pragma: no cover
                pass
        await asyncio.sleep(0)  # let the stderr reader catch up
        tail = "".join(w.stderr_tail).strip()
        w.dead = True
        if w in self._pool:
            self._pool.remove(w)
        self._start_failures += 1
        self._settled_slots.add(w.index)
        self._settle_check()
        message = f"tirl-sandbox: worker failed to start: {error}" + (f"\nworker stderr:\n{tail}" if tail else "")
        if self._closed:
            return
        if self._start_failures >= self.config.max_start_failures and not any(x.ready for x in self._pool):
            self._broken = message
            while self._pending:
                p = self._pending.popleft()
                if not p.future.done():
                    p.future.set_result(ExecutionResult.internal_error(message, p.request.request_id))
            self._settle_check()
            if self._all_settled is not None:
                self._all_settled.set()
            return
        self._spawn(w.index, delay=min(5.0, 0.2 * self._start_failures))

    async def _read_frame(self, w: _Worker) -> dict | None:
        assert w.proc is not None and w.proc.stdout is not None
        try:
            header = await w.proc.stdout.readexactly(wire.HEADER.size)
            (length,) = wire.HEADER.unpack(header)
            if length > wire.MAX_FRAME_BYTES:
                raise ValueError(f"frame of {length} bytes")
            return wire.decode_body(await w.proc.stdout.readexactly(length))
        except asyncio.IncompleteReadError:
            return None

    async def _read_stderr(self, w: _Worker) -> None:
        assert w.proc is not None and w.proc.stderr is not None
        try:
            while line := await w.proc.stderr.readline():
                w.stderr_tail.append(line[:2000].decode("utf-8", "replace"))
        except (ValueError, asyncio.LimitOverrunError):  # pragma: no cover - absurd line
            pass

    async def _read_results(self, w: _Worker) -> None:
        reason = "the worker process exited"
        try:
            while True:
                message = await self._read_frame(w)
                if message is None:
                    break
                op = message.get("op")
                if op == "done":  # what the worker observed, then the call's kept output bytes, unread by it
                    assert w.proc is not None and w.proc.stdout is not None
                    blobs = [
                        await w.proc.stdout.readexactly(int(message[k]))
                        for k in ("out_bytes", "err_bytes", "res_bytes")
                    ]
                    try:
                        fields = outcome.assemble(message, *blobs)
                    except Exception as exc:  # noqa: BLE001 - the bytes were the call's: fail it, not the worker
                        fields = {
                            "status": "internal",
                            "stderr": f"tirl-sandbox: could not assemble the result: {type(exc).__name__}",
                        }
                elif op == "result":  # answered without running (the worker could not start the call)
                    fields = message.get("result") or {}
                else:
                    continue
                entry = w.inflight.pop(int(message.get("id", -1)), None)
                if entry is None:
                    continue
                pending, handle = entry
                if handle is not None:
                    handle.cancel()
                fields = {k: v for k, v in fields.items() if k in _RESULT_FIELDS}
                try:
                    result = ExecutionResult(**fields, request_id=pending.request.request_id)
                except TypeError as exc:  # pragma: no cover - worker and pool are the same version
                    result = ExecutionResult.internal_error(
                        f"tirl-sandbox: bad result from worker: {exc}", pending.request.request_id
                    )
                if not pending.future.done():
                    pending.future.set_result(result)
                self._dispatch()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - a corrupt frame ends this worker
            reason = f"unreadable message from the worker: {exc}"
        await self._on_worker_death(w, reason)

    async def _on_worker_death(self, w: _Worker, reason: str) -> None:
        if w.dead:
            return
        w.dead = True
        w.ready = False
        w.kill()
        code = None
        if w.proc is not None:
            try:
                code = await asyncio.wait_for(w.proc.wait(), 3.0)
            except TimeoutError:  # pragma: no cover
                pass
        await asyncio.sleep(0.05)  # let the stderr reader deliver the last lines
        tail = "".join(w.stderr_tail).strip()[-2000:]
        message = f"tirl-sandbox: worker died ({reason}; exit code {code})" + (
            f"; worker stderr:\n{tail}" if tail else ""
        )
        self._fail_inflight(w, message)
        for task in w.tasks:
            if task is not asyncio.current_task():
                task.cancel()
        if w in self._pool:
            self._pool.remove(w)
        if not self._closed:
            self._spawn(w.index)
        self._dispatch()

    def _fail_inflight(self, w: _Worker, message: str) -> None:
        for pending, handle in list(w.inflight.values()):
            if handle is not None:
                handle.cancel()
            if not pending.future.done():
                pending.future.set_result(ExecutionResult.internal_error(message, pending.request.request_id))
        w.inflight.clear()

    def _on_watchdog(self, w: _Worker, cid: int) -> None:
        if cid not in w.inflight or w.dead:
            return
        limit = w.inflight[cid][0].request.timeout_s + self.config.host_grace_s
        w.kill()  # the reader sees EOF and answers every call of this worker
        w.stderr_tail.append(f"[pool] killed: no answer for call {cid} within {limit:g} s\n")

    def _dispatch(self) -> None:
        if self._closed:
            return
        slots = self.config.slots_per_worker
        while self._pending:
            ready = [w for w in self._pool if w.ready and not w.dead and len(w.inflight) < slots]
            if not ready:
                return
            w = min(ready, key=lambda x: len(x.inflight))
            pending = self._pending.popleft()
            if pending.future.done():
                continue
            req = pending.request
            # The code and stdin follow the frame raw: the worker splices them into the call's memory files
            # and never holds them (a later call, a fork of the worker, would inherit them).
            code = req.code.encode("utf-8", "surrogatepass")
            stdin = req.stdin.encode("utf-8", "replace")
            frame = (
                wire.encode(
                    {
                        "op": "run",
                        "id": pending.cid,
                        "timeout_s": float(req.timeout_s),
                        "memory_mb": int(req.memory_mb),
                        "code_bytes": len(code),
                        "stdin_bytes": len(stdin),
                    }
                )
                + code
                + stdin
            )
            assert self._loop is not None and w.proc is not None and w.proc.stdin is not None
            handle = self._loop.call_later(
                float(req.timeout_s) + self.config.host_grace_s, self._on_watchdog, w, pending.cid
            )
            w.inflight[pending.cid] = (pending, handle)
            try:
                w.proc.stdin.write(frame)
            except (ConnectionError, RuntimeError):
                pass  # the reader will see the death and answer this call


class SyncSandbox:
    """Blocking wrapper of :class:`LocalSandbox` running its event loop in a background thread.

    Takes the same arguments. Use as a context manager or call :meth:`close`. Thread-safe: several
    threads may call :meth:`run` at once.
    """

    def __init__(
        self,
        workers: int | None = None,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        *,
        config: SandboxConfig | None = None,
        **options: Any,
    ) -> None:
        from tirl._loop import BackgroundLoop

        self._loop = BackgroundLoop("tirl-sandbox")
        self.sandbox = LocalSandbox(workers, preload, config=config, **options)
        self._closed = False
        self._call(self.sandbox.start())

    def _call(self, coro: Any) -> Any:
        return self._loop.run(coro)

    def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request and wait for its result."""
        return self._call(self.sandbox.run(request))

    def run_batch(self, requests: Iterable[ExecutionRequest]) -> list[ExecutionResult]:
        """Run requests concurrently; results in their order."""
        return self._call(self.sandbox.run_batch(list(requests)))

    def run_code(
        self, code: str, stdin: str = "", timeout_s: float = DEFAULT_TIMEOUT_S, memory_mb: int = DEFAULT_MEMORY_MB
    ) -> ExecutionResult:
        """Shorthand for ``run(ExecutionRequest(code, stdin, timeout_s, memory_mb))``."""
        return self.run(ExecutionRequest(code, stdin=stdin, timeout_s=timeout_s, memory_mb=memory_mb))

    def layer_report(self) -> list[dict]:
        """See :meth:`LocalSandbox.layer_report`."""
        return self._call(self.sandbox.layer_report())

    def close(self) -> None:
        """Stop the workers and the background loop. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._call(self.sandbox.aclose())
        finally:
            self._loop.close()

    def __enter__(self) -> SyncSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
