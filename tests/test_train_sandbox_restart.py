"""The sandbox service in a training run: benchmarks/sandbox_restart_run.py with two ``tirl sandbox serve``
processes, one killed and restarted during step 2 of 3; and the step metric that counts ``internal`` tool calls."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tirl.algo.metrics import step_metrics
from tirl.protocol.types import Trajectory

ROOT = Path(__file__).resolve().parents[1]


def test_internal_tool_calls_are_counted_in_the_step_metrics():
    from tirl.algo.roc import Candidate, Selection

    trajs = [
        Trajectory(prompt_ids=[1], response_ids=[2], loss_mask=[1], metadata={"tool_internal_errors": k})
        for k in (0, 2, 1, 0)
    ]
    cands = [Candidate(reward=0.0, p_err=0.5, p_format=1.0) for _ in range(4)]
    sels = [
        Selection(indices=[0, 1], status="selected", n_pos=0, n_neg=2),
        Selection(indices=[0, 1], status="selected", n_pos=0, n_neg=2),
    ]  # indices within the group
    assert step_metrics(trajs, [0.0] * 4, cands, 2, sels)["tool_calls/internal"] == 3.0


@pytest.mark.slow(seconds=40)
def test_a_restarted_service_loses_no_trajectory_and_is_counted(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "sandbox_restart_run.py"),
            "--out",
            str(tmp_path / "out"),
            "--steps",
            "3",
            "--restart-step",
            "2",
            "--json",
            str(tmp_path / "r.json"),
            "--prompt-style",
            "compact",  # the same tool calls and restart; a quarter of the prompt tokens to generate and train on
            "--call-sleep-s",
            "1",  # half the default: the 8 calls of a step still hold a service for about 4 s, the kill comes 0.5 s in
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["failed_checks"] == []
    steps = report["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["trajectories"] == s["distinct_slots"] == report["expected_per_step"] for s in steps)
    assert report["logged_trajectories"] == 3 * report["expected_per_step"]
    met = steps[1]
    assert (
        met["sandbox/failovers"] + met["sandbox/resent"] + met["sandbox/internal_retries"] + met["tool_calls/internal"]
        > 0
    )
    # the killed service came back on its port and answered /healthz (a restart refused with "Address already in
    # use" once went unnoticed: the client failed over to the other service and every other check passed)
    restart = report["restart"]
    assert restart["killed"] and restart["restarted"] and restart["error"] is None, restart
    port = restart["victim"].rsplit(":", 1)[1]
    events = [e.split(" ", 1)[1] for e in report["service_events"] if e.endswith(f" on {port}")]
    killed = next(i for i, e in enumerate(events) if e.startswith("SIGKILL"))
    assert any(e.startswith("started pid") for e in events[killed + 1 :]), report["service_events"]
