"""Invariants of the shared data types."""

import pytest

from tirl.protocol import ToolCall, ToolCallError, Trajectory
from tirl.protocol.types import classify_tool_call
from tirl.sandbox import ExecutionRequest, ExecutionResult


def test_trajectory_rejects_mask_length_mismatch():
    with pytest.raises(ValueError, match="loss_mask"):
        Trajectory(prompt_ids=[1, 2], response_ids=[3, 4, 5], loss_mask=[1, 1])


def test_trajectory_rejects_logprob_length_mismatch():
    with pytest.raises(ValueError, match="logprobs"):
        Trajectory(prompt_ids=[1], response_ids=[3, 4], loss_mask=[1, 0], logprobs=[0.0])


def test_trajectory_counts_model_tokens():
    traj = Trajectory(prompt_ids=[1], response_ids=[3, 4, 5, 6], loss_mask=[1, 0, 0, 1])
    assert traj.num_model_tokens == 2


@pytest.mark.parametrize(
    "status,expected",
    [("ok", "ok"), ("error", "error"), ("timeout", "timeout"), ("killed", "error"), ("internal", "error")],
)
def test_classify_tool_call_uses_status(status, expected):
    call = ToolCall(name="execute_python_code_with_standard_io", arguments={"code": "1"})
    assert classify_tool_call(call, ExecutionResult(status=status)) == expected


def test_classify_parse_error():
    assert classify_tool_call(ToolCallError(kind="invalid_json", message="x"), None) == "parse_error"


def test_execution_result_round_trip_and_bad_status():
    res = ExecutionResult(status="error", stdout="a", error_type="ValueError", exit_code=1)
    assert ExecutionResult.from_dict(res.to_dict()) == res
    with pytest.raises(ValueError):
        ExecutionResult.from_dict({"status": "weird"})


def test_requests_get_distinct_ids():
    assert ExecutionRequest(code="1").request_id != ExecutionRequest(code="1").request_id
