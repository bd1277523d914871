"""benchmarks/rl_step_bench.py --tiny: one RL step per generation path and TRL's own tool loop, split into phases.

Runs the benchmark once on the tiny random model (every path in its own subprocess, with the vLLM environment's
Python when ``.venv-vllm`` exists, as ``make test`` installs it) and checks its JSON: every path measured, the
phases non-negative and adding up to the step's wall time, ratios against the in-process baseline. No wall-clock
thresholds: the figures of a tiny model on a busy machine mean nothing, only the bookkeeping is checked.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _bench():
    spec = importlib.util.spec_from_file_location("rl_step_bench", ROOT / "benchmarks" / "rl_step_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rl_step_bench"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    bench = _bench()
    out = tmp_path_factory.mktemp("rl_step_bench") / "rl_step_bench.json"
    python = bench.default_python()
    bench.main(["--tiny", "--eager", "--python", python, "--out", str(out), "--timeout", "1200"])
    return bench, json.loads(out.read_text()), bench._has_vllm(python)


def _check_phases(name, res):
    assert "phases" in res, f"{name}: {res.get('error')} {res.get('log_tail', '')[-1500:]}"
    ph = res["phases"]
    for key in ("sync", "rollout", "tools", "verify", "prepare", "update", "step", "other"):
        assert key in ph, (name, key)
    for key in ("sync", "rollout", "tools", "verify", "update", "step"):
        assert ph[key] >= 0.0, (name, key, ph[key])
    assert ph["rollout"] > 0 and ph["update"] > 0, (name, ph)
    assert ph["tools"] <= ph["rollout"] + 1e-6 or name != "trl", ph  # TRL's tool calls are inside its rollout
    parts = sum(ph[k] for k in ("sync", "rollout", "verify", "prepare", "update"))
    assert abs(parts - ph["step"]) <= 0.1 * ph["step"], (name, parts, ph["step"])  # "other" is a small remainder
    assert res["trajectories"] == 32, (name, res["trajectories"])  # 4 problems x 8 samples
    assert res["model_tokens"] > 0 and res["step_x_baseline"] > 0


def test_in_process_and_trl_paths_are_measured(tiny_run):
    _, out, _ = tiny_run
    assert out["tiny"] and out["baseline"] == "hf"
    assert set(out["paths"]) == {"hf", "server_adapter", "server_weights", "colocate", "trl"}
    for name in ("hf", "trl"):
        _check_phases(name, out["paths"][name])
    assert out["paths"]["hf"]["step_x_baseline"] == pytest.approx(1.0)
    assert out["paths"]["hf"]["phases"]["sync"] == 0.0  # the in-process engine reads the trainer's weights
    assert out["paths"]["trl"]["trained_rows"] == 32 and out["paths"]["hf"]["trained_rows"] == 16  # RoC keeps half
    assert out["problems"] and len(out["problems"]) == 4


def test_vllm_paths_are_measured(tiny_run):
    _, out, has_vllm = tiny_run
    if not has_vllm:
        for name in ("server_adapter", "server_weights", "colocate"):
            assert "no vLLM" in out["paths"][name]["skipped"]
        pytest.skip("no vLLM environment (make vllm-cpu): the vLLM paths were recorded as skipped")
    for name in ("server_adapter", "server_weights", "colocate"):
        res = out["paths"][name]
        _check_phases(name, res)
        assert res["startup_s"] > 0, name  # vLLM's start-up, timed apart from the step
        assert res["phases"]["sync"] > 0, name  # adapter or weights pushed before the rollout
