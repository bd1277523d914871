"""``tirl eval --engine openai`` against two real HTTP servers through the rollout scheduler.

Two testing servers on 127.0.0.1 (vLLM-shaped HTTP, SGLang-style ``/get_server_info``) serve the tiny random
Qwen2 model; the CLI runs the agent loop with the real tokenizer, local sandbox and verifier.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from typer.testing import CliRunner  # noqa: E402

from testing_server import TestingServer  # noqa: E402
from tirl.cli.main import app  # noqa: E402
from tirl.rollout.hf_engine import HFEngine  # noqa: E402


@pytest.fixture(scope="module")
def two_servers(tiny_model_dir, qwen_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    servers = []
    try:
        for _ in range(2):
            servers.append(TestingServer(HFEngine(model), tokenizer=qwen_tokenizer, kv_capacity_tokens=4096).start())
        yield servers
    finally:
        for srv in servers:
            srv.stop()


@pytest.mark.slow
def test_tirl_eval_runs_against_two_servers_through_the_scheduler(two_servers, tiny_model_dir, tmp_path):
    before = [s.generate_requests for s in two_servers]
    out = tmp_path / "run"
    args = [
        "eval",
        "--model",
        str(tiny_model_dir),
        "--benchmarks",
        "math500:2",
        "--samples",
        "2",
        "--max-response-tokens",
        "16",
        "--max-turns",
        "2",
        "--temperature",
        "0",
        "--no-use-tools",
        "--engine",
        "openai",
        "--scheduler",
        "kv_aware",
        "--quiet",
        "--out-dir",
        str(out),
    ]
    for srv in two_servers:
        args += ["--servers", srv.url + "/v1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 4 and all(r["finish_reason"] != "error" for r in records)
    served = [s.generate_requests - b for s, b in zip(two_servers, before)]
    assert all(n > 0 for n in served)  # both servers generated
    log = [json.loads(x) for x in (out / "scheduler_metrics.jsonl").read_text().splitlines()]
    last = log[-1]
    completed = [v for k, v in last.items() if k.endswith("/completed_total")]
    capacity = [v for k, v in last.items() if k.endswith("/capacity_tokens")]
    assert sorted(completed) == [2.0, 2.0] and capacity == [4096.0, 4096.0]  # read from the servers
    assert all(v == 0.0 for k, v in last.items() if k.endswith("/reserved_tokens"))


def test_bad_scheduler_options_are_refused_with_a_message(tmp_path):
    base = [
        "eval",
        "--model",
        "x",
        "--benchmarks",
        "math500:1",
        "--engine",
        "openai",
        "--out-dir",
        str(tmp_path),
        "--servers",
        "http://127.0.0.1:9/v1",
        "--servers",
        "http://127.0.0.1:10/v1",
    ]
    result = CliRunner().invoke(app, base + ["--scheduler", "fastest"])
    assert result.exit_code == 2 and "kv_aware, static or round_robin" in result.output
    result = CliRunner().invoke(app, base + ["--kv-capacities", "1,2,3"])
    assert result.exit_code == 2 and "3 --kv-capacities values for 2 servers" in result.output
