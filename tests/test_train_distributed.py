"""Under ``accelerate launch --num_processes 2`` on CPU, each problem's G trajectories stay in one process and
TRL groups them exactly as the rollout function did (the advantage check is ~0)."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parent / "mp_train_script.py"


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, tiny_smollm2_model_dir):
    out = tmp_path_factory.mktemp("mp")
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate's launcher is part of the train extra"
    # accelerate's --cpu flag selects its single-process launcher; torchrun (--multi_gpu) with
    # ACCELERATE_USE_CPU=1 gives 2 CPU processes on the gloo backend
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", ACCELERATE_USE_CPU="1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        accelerate,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(port),
        str(SCRIPT),
        str(tiny_smollm2_model_dir),
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def test_both_processes_trained_two_steps(two_process_run):
    assert [r["world"] for r in two_process_run] == [2, 2]
    assert [r["global_step"] for r in two_process_run] == [2, 2]


def test_each_process_gets_whole_distinct_groups(two_process_run):
    # the rollout function raises unless its prompts come as aligned blocks of G copies; here we also check
    # that the two processes never hold the same problem in a step and that each holds 2 problems per step
    for step in range(2):
        a, b = (r["seen"][step] for r in two_process_run)
        assert len(a) == len(b) == 2
        assert not set(a) & set(b)


def test_trl_grouping_matches_rollout_groups(two_process_run):
    diffs = [d for r in two_process_run for d in r["adv_diffs"]]
    assert len(diffs) == 4 and max(diffs) < 1e-3
