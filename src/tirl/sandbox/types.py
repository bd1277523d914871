"""Requests, results and the executor interface shared by every code-execution backend.

This module covers the data that crosses the boundary between tirl's callers (the agent loop, the reward,
the HTTP service) and whatever runs the code (``LocalSandbox`` in process, ``SandboxClient`` over HTTP).
It does not run anything itself.

Status values of an :class:`ExecutionResult`:

``ok``
    The code ran to completion and the process exited with code 0.
``error``
    The code raised an exception (``error_type`` and ``traceback`` say which) or the process exited with a
    non-zero code (``sys.exit(3)``; ``exit_code`` says which).
``timeout``
    The wall-clock deadline (``timeout_s``) or the CPU-time limit passed; the whole process group was killed.
    Output produced before the deadline is kept.
``killed``
    The process was killed by the sandbox for a reason other than the deadline: the memory limit, the output
    cap when configured to kill, a signal from a resource limit (file size, processes).
``internal``
    tirl failed, not the code: a worker died, the service was unreachable after all retries, the request was
    malformed. The code may or may not have run; ``stderr`` holds tirl's explanation. Callers must not treat
    ``internal`` as the model's fault (the agent loop reports it as a tool ``error`` to the model, the reward
    reports ``verifier_error``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

ExecutionStatus = Literal["ok", "error", "timeout", "killed", "internal"]
EXECUTION_STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "killed", "internal")

DEFAULT_TIMEOUT_S = 10.0
DEFAULT_MEMORY_MB = 2048


def new_request_id() -> str:
    """A fresh random request id (32 hex characters)."""
    return uuid.uuid4().hex


@dataclass
class ExecutionRequest:
    """One piece of untrusted Python to run.

    Attributes:
        code: Python source, run as ``__main__`` in a fresh process.
        stdin: bytes of standard input, as text (UTF-8). Empty means stdin is at EOF.
        timeout_s: wall-clock deadline in seconds (also the CPU-seconds limit, rounded up).
        memory_mb: memory limit in MiB: the address space of each of the call's processes and, where the
            sandbox has the ``cgroup`` layer, the memory of all of them together.
        request_id: idempotency key; a service answers a retried id from its first execution.
    """

    code: str
    stdin: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    memory_mb: int = DEFAULT_MEMORY_MB
    request_id: str = field(default_factory=new_request_id)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the same field names."""
        return asdict(self)


@dataclass
class ExecutionResult:
    """What happened when a request ran. See the module docstring for the meaning of each ``status``.

    Attributes:
        status: one of ``ok``, ``error``, ``timeout``, ``killed``, ``internal``.
        stdout: standard output, decoded as UTF-8 with replacement characters; capped while it streams.
        stderr: standard error (without the traceback, which is in ``traceback``), decoded and capped likewise.
        display: ``repr`` of the value of the last top-level expression when it is not None and nothing was
            printed to stdout (IPython-style), else None.
        error_type: exception class name (``ZeroDivisionError``) when the code raised, else None.
        traceback: compact traceback with only the frames of the user's code, line numbers matching the code
            sent, ending with ``ErrorType: message``; None when nothing was raised.
        exit_code: process exit code; negative for a signal (``-9`` = SIGKILL); None when it never ran.
        duration_s: wall-clock seconds from start of execution to the result.
        stdout_truncated: True when stdout passed the cap and was cut.
        stderr_truncated: True when stderr passed the cap and was cut.
        request_id: the id of the request this answers.
    """

    status: ExecutionStatus
    stdout: str = ""
    stderr: str = ""
    display: str | None = None
    error_type: str | None = None
    traceback: str | None = None
    exit_code: int | None = None
    duration_s: float = 0.0
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    request_id: str = ""

    @property
    def ok(self) -> bool:
        """True when ``status == "ok"``."""
        return self.status == "ok"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict with the same field names."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExecutionResult:
        """Inverse of :meth:`to_dict`; unknown keys are ignored.

        Raises:
            ValueError: ``status`` is missing or not a known status.
        """
        status = data.get("status")
        if status not in EXECUTION_STATUSES:
            raise ValueError(f"unknown execution status {status!r}")
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def internal_error(cls, message: str, request_id: str = "", duration_s: float = 0.0) -> ExecutionResult:
        """A result with status ``internal`` and ``message`` in ``stderr``."""
        return cls(status="internal", stderr=message, request_id=request_id, duration_s=duration_s)


@runtime_checkable
class CodeExecutor(Protocol):
    """Anything that runs :class:`ExecutionRequest` objects: ``LocalSandbox`` and ``SandboxClient``.

    Implementations never raise for a request's content: every failure becomes a result (``internal`` when
    the fault is tirl's). ``run_batch`` answers in the order of ``requests``.
    """

    async def run(self, request: ExecutionRequest) -> ExecutionResult:
        """Run one request and return its result."""
        ...

    async def run_batch(self, requests: Sequence[ExecutionRequest]) -> list[ExecutionResult]:
        """Run many requests concurrently; results in the order of ``requests``."""
        ...

    async def aclose(self) -> None:
        """Release workers, connections and background tasks. Idempotent."""
        ...
