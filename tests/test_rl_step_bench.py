"""benchmarks/rl_step_bench.py --tiny: one RL step per generation path and TRL's own tool loop, split into phases.

Runs the benchmark on the tiny random model for the paths the main environment has (in process and TRL's own
tool loop; each in its own subprocess) and checks its JSON: both paths measured, the phases non-negative and adding
up to the step's wall time, ratios against the in-process baseline. The vLLM paths (server + adapter, colocated;
that file's docstring says why server + weights is left out) are checked the same way by
``tests/vllm_backed/test_rl_step_bench_vllm.py`` in the vLLM environment. No wall-clock thresholds: the figures
of a tiny model on a busy machine mean nothing, only the bookkeeping is checked.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow(seconds=35)


def _bench():
    spec = importlib.util.spec_from_file_location("rl_step_bench", ROOT / "benchmarks" / "rl_step_bench.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["rl_step_bench"] = module
    spec.loader.exec_module(module)
    return module


def run_tiny(tmp_path: Path, paths: str, python: str, problems: int = 1, samples: int = 4) -> tuple[object, dict]:
    """Run the benchmark's ``--tiny`` mode for ``paths`` with ``python`` on ``problems`` x ``samples`` (sampled per
    problem; RoC keeps half; 1 x 4 where the benchmark's default is 4 x 8: the bookkeeping is the same with fewer
    rows, and ``--tiny``'s micro-batch of 2 rows takes the 2 kept ones); (the module, its JSON)."""
    bench = _bench()
    out = tmp_path / "rl_step_bench.json"
    bench.main(
        [
            "--tiny",
            "--eager",
            "--dtype",
            "float32",
            "--paths",
            paths,
            "--python",
            python,
            "--out",
            str(out),
            "--timeout",
            "1500",
            "--problems",
            str(problems),
            "--samples",
            str(samples),
        ]
    )
    return bench, json.loads(out.read_text())


def _check_phases(name, res, trajectories=4):
    """``res``'s phases are all there, non-negative and add up to the step; ``trajectories`` were sampled."""
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
    assert res["trajectories"] == trajectories, (name, res["trajectories"])  # problems x samples
    assert res["model_tokens"] > 0 and res["step_x_baseline"] > 0


def test_in_process_and_trl_paths_are_measured(tmp_path):
    _, out = run_tiny(tmp_path, "hf,trl", sys.executable)  # 1 problem x 4 samples
    assert out["tiny"] and out["baseline"] == "hf"
    assert {"hf", "trl"} <= set(out["paths"])
    for name in ("hf", "trl"):
        _check_phases(name, out["paths"][name])
    assert out["paths"]["hf"]["step_x_baseline"] == pytest.approx(1.0)
    assert out["paths"]["hf"]["phases"]["sync"] == 0.0  # the in-process engine reads the trainer's weights
    assert out["paths"]["trl"]["trained_rows"] == 4 and out["paths"]["hf"]["trained_rows"] == 2  # RoC keeps half
    assert out["problems"] and len(out["problems"]) == 1 and out["samples_per_problem"] == 4
