"""2 processes against 1 on the same batch: under ``accelerate launch`` with configs/accelerate/ddp-2cpu.yaml (2 CPU
ranks on gloo), GRPO-RoC steps of the tiny model on scripted trajectories give the same loss and gradient norm as
one process, each rank holds whole groups, and a checkpoint written by the 2 processes resumes in 1.

Tolerance: relative 1e-4 on loss and gradient norm (float32; the 2-process sum is reduced in another order).
Measured on the reference run (docs/scale.md): differences below 1e-6 relative."""

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
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SCRIPT = TESTS / "equal_steps_script.py"
RTOL = 1e-4


def _env() -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT / "src"))


def one_process(model_dir: Path, out: Path, steps: int) -> dict:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), str(model_dir), str(out), str(steps)],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=900,
        env=_env(),
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads((out / "rank0.json").read_text())


def two_processes(model_dir: Path, out: Path, steps: int) -> list[dict]:
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate's launcher is part of the train extra"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [
        accelerate,
        "launch",
        "--config_file",
        str(ROOT / "configs" / "accelerate" / "ddp-2cpu.yaml"),
        "--main_process_port",
        str(port),
        str(SCRIPT),
        str(model_dir),
        str(out),
        str(steps),
    ]
    proc = subprocess.run(
        cmd, cwd=TESTS, capture_output=True, text=True, timeout=900, env=dict(_env(), ACCELERATE_USE_CPU="1")
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_smollm2_model_dir):
    base = tmp_path_factory.mktemp("equal")
    two = two_processes(tiny_smollm2_model_dir, base / "two", 3)
    one = one_process(tiny_smollm2_model_dir, base / "one", 3)
    resumed = base / "resumed-in-one"  # the 2-process run's checkpoint-3, continued for a 4th step in 1 process
    shutil.copytree(base / "two" / "run", resumed / "run")
    again = one_process(tiny_smollm2_model_dir, resumed, 4)
    return {"one": one, "two": two, "resumed": again}


def test_two_ranks_hold_disjoint_whole_groups_of_the_same_batch(runs):
    a, b = runs["two"]
    assert a["world"] == b["world"] == 2 and a["distributed_type"].endswith("MULTI_CPU")
    for step in range(3):
        assert len(a["seen"][step]) == len(b["seen"][step]) == 2 and not set(a["seen"][step]) & set(b["seen"][step])
        assert set(a["seen"][step]) | set(b["seen"][step]) == set(runs["one"]["seen"][step])


def test_loss_and_grad_norm_equal_one_process(runs):
    one = runs["one"]["steps"]
    for rank in runs["two"]:
        assert [s["step"] for s in rank["steps"]] == [1, 2, 3]
        for mine, ref in zip(rank["steps"], one):
            assert mine["grad_norm"] == pytest.approx(ref["grad_norm"], rel=RTOL)
            assert mine["loss"] == pytest.approx(ref["loss"], rel=RTOL, abs=1e-6)
    a, b = runs["two"]
    assert a["checksums"] == pytest.approx(b["checksums"], rel=1e-9)  # both ranks generate with the same weights


def test_a_two_process_checkpoint_resumes_in_one_process(runs):
    again = runs["resumed"]
    assert again["resumed_from"].endswith("checkpoint-3") and again["global_step"] == 4
    assert [s["step"] for s in again["steps"]][-1] == 4
