"""Isolated execution of untrusted Python: request/result types, the executor interface, the local pool.

- :mod:`tirl.sandbox.types`: ``ExecutionRequest``, ``ExecutionResult``, ``CodeExecutor`` (shared contract).
- :mod:`tirl.sandbox.pool`: ``LocalSandbox`` (async pool of warm, isolated workers) and ``SyncSandbox``.
- :mod:`tirl.sandbox.config`: ``SandboxConfig``.
- :mod:`tirl.sandbox.isolation`, :mod:`~tirl.sandbox.landlock`, :mod:`~tirl.sandbox.seccomp`,
  :mod:`~tirl.sandbox.cgroup`: the layers.
- :mod:`tirl.sandbox.doctor`: the layer report behind ``tirl sandbox doctor``.
"""

from tirl.sandbox.config import DEFAULT_PRELOAD, LAYER_NAMES, SandboxConfig
from tirl.sandbox.pool import LocalSandbox, SyncSandbox
from tirl.sandbox.types import (
    EXECUTION_STATUSES,
    CodeExecutor,
    ExecutionRequest,
    ExecutionResult,
    ExecutionStatus,
)

__all__ = [
    "DEFAULT_PRELOAD",
    "EXECUTION_STATUSES",
    "LAYER_NAMES",
    "CodeExecutor",
    "ExecutionRequest",
    "ExecutionResult",
    "ExecutionStatus",
    "LocalSandbox",
    "SandboxConfig",
    "SyncSandbox",
]
