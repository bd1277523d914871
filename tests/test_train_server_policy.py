"""RL rollouts from an inference server that is sent the policy's LoRA adapter before every rollout.

The server is tirl's testing server (vLLM's completion and runtime-LoRA routes) serving an HFEngine on the tiny
model; its LoRA hook merges each pushed adapter into a fresh copy of the base weights, as vLLM would serve it.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tirl.data.problem import Problem
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from tirl.train.server_policy import ServerPolicySync, ServerSyncError
from train_helpers import AlternatingScorer

PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]


@pytest.fixture()
def lora_server(tiny_smollm2_model_dir):
    import torch
    from peft import PeftModel
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    base = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    engine = HFEngine(copy.deepcopy(base), HFEngineConfig(max_batch_size=16))
    pushed: list[dict[str, Any]] = []

    def on_load_lora(name: str, path: str) -> None:
        pushed.append({"name": name, "weights": load_file(str(Path(path) / "adapter_model.safetensors"))})
        engine.set_model(PeftModel.from_pretrained(copy.deepcopy(base), path).merge_and_unload())

    server = TestingServer(engine, tokenizer=load_tokenizer(str(tiny_smollm2_model_dir)), on_load_lora=on_load_lora)
    with server:
        yield server, pushed


@pytest.mark.slow(seconds=50)
@pytest.mark.parametrize("api", ["openai", "sglang"])
def test_each_rollout_is_generated_by_the_server_with_the_current_adapter(
    tmp_path, tiny_smollm2_model_dir, lora_server, api
):
    import torch

    from tirl.models import load_tokenizer
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    server, pushed = lora_server
    config = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            f"model.name_or_path={tiny_smollm2_model_dir}",
            "model.dtype=float32",
            "model.lora.enabled=true",
            "model.lora.r=4",
            "max_steps=2",
            "problems_per_step=2",
            "save_steps=10",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "rollout.max_turns=2",
            "rollout.max_response_tokens=24",
            f"rollout.server_url={server.url}",
            f"rollout.server_api={api}",
            "optim.per_device_train_batch_size=2",
            "optim.learning_rate=5e-2",
            "optim.warmup_steps=0",
            "roc.min_per_class=1",
            "logging.console=false",
            "watchdog.enabled=false",
            "protocol.prompt_style=compact",  # ~110 prompt tokens instead of ~450
        ],
    )
    config.validate(1)
    tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
    source = AgentLoopSource(config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1))
    run = build_trainer(config, problems=PROBLEMS, source=source, scorer=AlternatingScorer(), num_processes=1)
    try:
        run.trainer.train()
    finally:
        run.close()
    assert [p["name"] for p in pushed] == ["policy", "policy"]  # one push per rollout, same name, in place
    assert server.app.state.prefix_cache_resets == 2
    assert server.generate_requests >= 2 * 2 * 4  # the server generated every trajectory's turns
    if api == "sglang":  # every /generate named the adapter (none went to the base model)
        assert set(server.app.state.lora_requests) == {"policy"}
        assert server.app.state.lora_requests["policy"] == server.generate_requests
    else:
        assert server.app.state.lora_requests == {}
    first, second = pushed
    lora_b = [k for k in first["weights"] if "lora_B" in k]
    assert lora_b and all(torch.count_nonzero(first["weights"][k]) == 0 for k in lora_b)  # step 1: untrained
    assert any(not torch.equal(first["weights"][k], second["weights"][k]) for k in lora_b)  # step 2: updated
    trained = {k: v for k, v in run.trainer.model.state_dict().items() if "lora_B" in k}
    assert any(torch.count_nonzero(v) for v in trained.values())
    assert run.rollout.last.metrics["time/sync_s"] > 0


def test_a_server_without_lora_is_a_clear_error(tmp_path, tiny_smollm2_model_dir):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.rollout.hf_engine import HFEngine

    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32),
        LoraConfig(r=2, target_modules=["q_proj"]),
    )
    with TestingServer(HFEngine(model)) as server:
        with pytest.raises(ServerSyncError, match="enable-lora"):
            ServerPolicySync(server.url, tmp_path / "a").push(model)
    with pytest.raises(ValueError, match="LoRA"):
        ServerPolicySync("http://127.0.0.1:9", tmp_path / "b").push(object())


def test_sending_an_adapter_needs_a_lora_policy():
    config = load_config(None, ["rollout.server_url=http://127.0.0.1:18200", "rollout.server_sync=adapter"])
    with pytest.raises(ValueError, match="lora"):
        config.validate(1)
    full = load_config(None, ["rollout.server_url=http://127.0.0.1:18200"])
    full.validate(1)
    assert full.server_sync_mode() == "weights"  # without LoRA the full weights are sent


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["openai", "sglang"])
def test_eval_of_a_lora_checkpoint_on_a_server_loads_the_adapter_and_requests_it(
    tmp_path, tiny_smollm2_model_dir, lora_server, engine
):
    import json

    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    from tirl.eval.runner import EvalConfig, run_eval_sync
    from tirl.rollout.agent_loop import AgentLoopSettings
    from tirl.rollout.lora_server import served_adapter_name

    server, pushed = lora_server
    ckpt = tmp_path / "run" / "checkpoint-3"
    model = get_peft_model(
        AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32),
        LoraConfig(r=2, target_modules=["q_proj"]),
    )
    model.save_pretrained(str(ckpt))
    bench = tmp_path / "two.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is 6 times {i}?", "answer": str(6 * i)}) + "\n" for i in (2, 7)
        )
    )
    config = EvalConfig(
        model=str(ckpt),
        benchmarks=[str(bench)],
        out_dir=tmp_path / "out",
        samples=2,
        rollout=AgentLoopSettings(max_turns=1, max_response_tokens=8),
        engine=engine,
        servers=[server.url],
        server_seed=False,
    )
    result = run_eval_sync(config)
    # the testing server answers 404 to a model name it does not serve: the samples ran under the adapter's name
    assert [p["name"] for p in pushed] == [served_adapter_name(ckpt)]
    assert result.new_samples == 4 and server.generate_requests >= 4
    assert server.app.state.prefix_cache_resets == 1
    if engine == "sglang":
        assert server.app.state.lora_requests == {served_adapter_name(ckpt): server.generate_requests}


def test_unknown_server_api_is_a_clear_error():
    config = load_config(None, ["rollout.server_api=tgi"])
    with pytest.raises(ValueError, match="server_api must be openai or sglang"):
        config.validate(1)


@pytest.mark.slow
def test_tirl_eval_with_engine_sglang_from_the_command_line(tmp_path, tiny_smollm2_model_dir):
    """``tirl eval --engine sglang --servers URL``: the samples are generated by the SGLang-shaped /generate."""
    import json
    import os
    import subprocess
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine

    bench = tmp_path / "two.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "problem": f"What is 6 times {i}?", "answer": str(6 * i)}) + "\n" for i in (2, 7)
        )
    )
    model = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    src = str(Path(__file__).resolve().parents[1] / "src")
    with TestingServer(HFEngine(model), tokenizer=load_tokenizer(str(tiny_smollm2_model_dir))) as server:
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "tirl.cli.main",
                "eval",
                "--model",
                str(tiny_smollm2_model_dir),
                "--engine",
                "sglang",
                "--servers",
                server.url,
                "--benchmarks",
                str(bench),
                "--samples",
                "2",
                "--max-turns",
                "1",
                "--max-response-tokens",
                "8",
                "--out-dir",
                str(tmp_path / "out"),
                "--quiet",
            ],
            capture_output=True,
            text=True,
            timeout=600,
            env=dict(os.environ, PYTHONPATH=src),
        )
        requests = server.generate_requests
        by_adapter = dict(server.app.state.lora_requests)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    records = (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()
    assert len(records) == 4 and requests >= 4
    assert by_adapter == {None: requests}  # all through /generate, on the base model
