"""DeepSpeed ZeRO-3 in 2 CPU processes on gloo (configs/accelerate/zero3-2cpu.yaml; tirl.train.cpu_sharding gives
accelerate the backend it does not find without an accelerator), against 1 process on the same batch: each rank
holds half of every partitioned parameter, both ranks generate on the same gathered weights, loss and gradient
norm equal one process's (relative 1e-4, as for FSDP), the checkpoint resumes in 2 processes under DeepSpeed and
continues as one process would, and a 1-process run refuses it (transformers would drop its optimiser state).

DeepSpeed is not one of tirl's extras: these tests run where it is importable (``pip install deepspeed==0.19.8``;
its directory is passed on to the launched ranks) and are skipped elsewhere."""

from __future__ import annotations

import importlib.util
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
CONFIG = ROOT / "configs" / "accelerate" / "zero3-2cpu.yaml"
RTOL = 1e-4


def _deepspeed_dir() -> Path | None:
    spec = importlib.util.find_spec("deepspeed")
    return Path(spec.origin).parent.parent if spec and spec.origin else None


def _env() -> dict[str, str]:
    paths = [str(ROOT / "src"), str(_deepspeed_dir())]
    path = os.pathsep.join([str(_deepspeed_dir() / "bin"), os.environ.get("PATH", "")])  # ninja for its JIT op
    return dict(
        os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=os.pathsep.join(paths), PATH=path
    )


def _one(model_dir: Path, out: Path, steps: int) -> tuple[list[str], dict[str, str]]:
    return [sys.executable, str(SCRIPT), str(model_dir), str(out), str(steps)], _env()


def _two(model_dir: Path, out: Path, steps: int) -> tuple[list[str], dict[str, str]]:
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate's launcher is part of the train extra"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in _env().items() if k != "ACCELERATE_USE_CPU"}
    return (
        [
            accelerate,
            "launch",
            "--config_file",
            str(CONFIG),
            "--main_process_port",
            str(port),
            str(SCRIPT),
            str(model_dir),
            str(out),
            str(steps),
        ],
        env,
    )


def _run_together(*jobs: tuple[list[str], dict[str, str]]) -> list[tuple[int, str]]:
    procs = [
        subprocess.Popen(cmd, cwd=TESTS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd, env in jobs
    ]
    return [(p.returncode, out) for p, out in ((p, p.communicate(timeout=1200)[0]) for p in procs)]


def _ranks(out: Path, n: int) -> list[dict]:
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_smollm2_model_dir):
    if _deepspeed_dir() is None:
        pytest.skip("DeepSpeed is not installed (not one of tirl's extras)")
    base, model = tmp_path_factory.mktemp("zero3"), tiny_smollm2_model_dir
    for rc, out in _run_together(_two(model, base / "two", 3), _one(model, base / "one", 3)):
        assert rc == 0, out[-6000:]
    for name in ("in-one", "in-two", "plain"):
        shutil.copytree(base / ("two" if name != "plain" else "one") / "run", base / name / "run")
    (rc_two, out_two), (rc_one, out_one), (rc_plain, out_plain) = _run_together(
        _two(model, base / "in-two", 5), _one(model, base / "in-one", 5), _one(model, base / "plain", 5)
    )
    assert rc_two == 0, out_two[-6000:]
    assert rc_plain == 0, out_plain[-6000:]
    return {
        "one": _ranks(base / "one", 1)[0],
        "two": _ranks(base / "two", 2),
        "in_two": _ranks(base / "in-two", 2),
        "plain": _ranks(base / "plain", 1)[0],
        "in_one": (rc_one, out_one),
    }


def test_parameters_are_partitioned_over_the_two_ranks(runs):
    for rank in runs["two"]:
        assert rank["world"] == 2 and rank["distributed_type"].endswith("DEEPSPEED")
        assert rank["local_numel"] == pytest.approx(rank["full_numel"] / 2, rel=0.01)
    assert runs["two"][0]["full_numel"] == runs["one"]["full_numel"]


def test_whole_groups_and_the_loss_of_one_process(runs):
    a, b = runs["two"]
    for step in range(3):
        assert not set(a["seen"][step]) & set(b["seen"][step])
        assert set(a["seen"][step]) | set(b["seen"][step]) == set(runs["one"]["seen"][step])
    for rank in runs["two"]:
        for mine, ref in zip(rank["steps"], runs["one"]["steps"]):
            assert mine["grad_norm"] == pytest.approx(ref["grad_norm"], rel=RTOL)
            assert mine["loss"] == pytest.approx(ref["loss"], rel=RTOL, abs=1e-6)
    assert a["checksums"] == pytest.approx(b["checksums"], rel=1e-9)
    assert a["checksums"] == pytest.approx(runs["one"]["checksums"], rel=1e-4)


def test_the_checkpoint_resumes_in_two_processes_as_one_process_continues(runs):
    plain = runs["plain"]  # the 1-process run's own checkpoint-3, continued in 1 process
    for rank in runs["in_two"]:
        assert rank["resumed_from"].endswith("checkpoint-3") and rank["global_step"] == 5
        for mine, ref in zip(rank["steps"][3:], plain["steps"][3:]):
            assert mine["grad_norm"] == pytest.approx(ref["grad_norm"], rel=RTOL)
        assert rank["checksums"] == pytest.approx(plain["checksums"], rel=1e-4)  # step 5 used the optimiser state


def test_one_process_refuses_the_deepspeed_checkpoint(runs):
    rc, out = runs["in_one"]
    assert rc != 0 and "was written under DeepSpeed" in out
