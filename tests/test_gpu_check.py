"""benchmarks/gpu_check.sh on CPU: the GPU check's Python part with a tiny model of the same family (3 GRPO-RoC
steps through build_trainer, tool calls in the real local sandbox), and its refusals."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"


def run_script(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHON=sys.executable, PYTHONPATH=str(ROOT / "src"))
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env)


@pytest.mark.slow
def test_cpu_mode_runs_three_steps_with_sandboxed_tool_calls(tmp_path):
    proc = run_script("cpu", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "out" / "gpu_check.json").read_text())
    assert report["failed_checks"] == []
    assert [row["step"] for row in report["steps"]] == [1, 2, 3]
    for row in report["steps"]:
        # every sampled trajectory's scripted first turn is one call, run ok by the sandbox
        assert row["calls"] == report["sampled_per_step"] and row["ok"] == row["calls"]
        assert row["rollout_s"] > 0 and row["update_s"] >= 0 and row["generated_tokens"] > 0
    assert report["weight_change_max"] > 0
    table = proc.stdout
    for column in ("rollout_s", "tools_s", "verify_s", "update_s", "tokens_per_s", "peak_memory_gib"):
        assert column in table
    assert "checks: all passed" in table


def test_run_mode_without_a_carry_folder_says_how_to_prepare_it(tmp_path):
    proc = run_script("run", str(tmp_path / "nothing"), timeout=60)
    assert proc.returncode == 2
    assert "gpu_check.sh prepare" in proc.stderr


def test_the_carried_wheels_are_exact_pins():
    lines = [
        ln
        for ln in (ROOT / "benchmarks" / "gpu_check_wheels.txt").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    ]
    assert lines and all("==" in ln and ln.count("==") == 1 for ln in lines)
    names = {ln.split("==")[0].lower() for ln in lines}
    assert {"trl", "datasets", "pyarrow", "math-verify", "setuptools"} <= names
    assert not names & {"torch", "transformers", "accelerate", "peft", "vllm", "fastapi"}  # the machine's own


def _pins(name: str) -> dict[str, str]:
    text = (ROOT / "benchmarks" / name).read_text()
    return dict(ln.split("==") for ln in text.splitlines() if ln.strip() and not ln.startswith("#"))


def test_the_h200_list_is_the_full_list_less_what_the_image_has():
    full, lean = _pins("gpu_check_wheels.txt"), _pins("gpu_check_wheels_h200.txt")
    assert lean and all(full.get(name) == version for name, version in lean.items())  # same pins, a subset
    assert {"trl", "datasets", "math-verify", "pydantic"} <= set(lean)  # not in the image
    assert not set(lean) & {"pandas", "pyarrow", "fsspec", "requests", "setuptools", "packaging"}  # in the image


def test_run_mode_on_a_machine_without_cuda_stops_before_installing(tmp_path):
    carry = tmp_path / "carry"
    (carry / "wheels").mkdir(parents=True)
    (carry / "tokenizer").mkdir()
    (carry / "tokenizer" / "tokenizer.json.gz").write_bytes(gzip.compress(b"{}"))  # as prepare leaves it
    venv = tmp_path / "venv"
    env = dict(os.environ, PYTHON=sys.executable, GPU_CHECK_VENV=str(venv), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        ["bash", str(SCRIPT), "run", str(carry), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "sees no CUDA device" in proc.stderr and "GPU_CHECK_DEVICE=cpu" in proc.stderr
    assert not venv.exists()  # nothing installed on the wrong machine
