"""Isolated execution of untrusted Python: request/result types and the executor interface."""

from tirl.sandbox.types import (
    EXECUTION_STATUSES,
    CodeExecutor,
    ExecutionRequest,
    ExecutionResult,
    ExecutionStatus,
)

__all__ = ["EXECUTION_STATUSES", "CodeExecutor", "ExecutionRequest", "ExecutionResult", "ExecutionStatus"]
