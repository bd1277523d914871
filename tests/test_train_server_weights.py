"""RL rollouts from an inference server that is sent the policy's full weights before every rollout.

The server is tirl's testing server (vLLM's completion route and its ``/collective_rpc`` ``reload_weights``
development route) serving an HFEngine on a copy of the tiny model; its reload hook loads the written safetensors
into that copy, as vLLM reloads them. Two cases: a full-parameter policy, and a LoRA policy served merged
(``rollout.server_sync: weights``).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from tirl.data.problem import Problem
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from train_helpers import AlternatingScorer

pytestmark = pytest.mark.slow(seconds=30)

PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]


def _merged_state(model: Any) -> dict[str, Any]:
    """The weights the generator must hold: the policy's own, with a LoRA adapter merged."""
    import torch

    if not hasattr(model, "peft_config"):
        return {k: v.detach().clone() for k, v in model.state_dict().items()}
    merged = copy.deepcopy(model).merge_and_unload()
    with torch.no_grad():
        return {k: v.detach().clone() for k, v in merged.state_dict().items()}


def _run(tmp_path: Path, tiny_smollm2_model_dir: Path, lora: bool) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    served = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    engine = HFEngine(served, HFEngineConfig(max_batch_size=16))
    holder: dict[str, Any] = {}
    reloads: list[dict[str, Any]] = []

    def on_reload_weights(path: str) -> None:
        weights = load_file(str(Path(path) / "model.safetensors"))
        missing, unexpected = served.load_state_dict(weights, strict=False)
        assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
        served.tie_weights()
        expected = _merged_state(holder["run"].trainer.model)
        reloads.append({"equal": all(torch.equal(weights[k], expected[k]) for k in weights), "weights": weights})

    overrides = [
        f"output_dir={tmp_path}",
        f"model.name_or_path={tiny_smollm2_model_dir}",
        "model.dtype=float32",
        "max_steps=2",
        "problems_per_step=2",
        "save_steps=10",
        "rollout.group_size=2",
        "rollout.oversample=2",
        "rollout.max_turns=2",
        "rollout.max_response_tokens=24",
        "optim.per_device_train_batch_size=2",
        "optim.learning_rate=5e-2",
        "optim.warmup_steps=0",
        "roc.min_per_class=1",
        "logging.console=false",
        "watchdog.enabled=false",
        "rollout.server_sync=weights",
        "protocol.prompt_style=compact",  # ~110 prompt tokens instead of ~450: each step scores a third
    ]
    if lora:
        overrides += ["model.lora.enabled=true", "model.lora.r=4"]
    with TestingServer(
        engine,
        tokenizer=load_tokenizer(str(tiny_smollm2_model_dir)),
        model_name="base",
        on_reload_weights=on_reload_weights,
    ) as server:
        config = load_config(None, overrides + [f"rollout.server_url={server.url}"])
        tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
        source = AgentLoopSource(config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1))
        run = build_trainer(config, problems=PROBLEMS, source=source, scorer=AlternatingScorer(), num_processes=1)
        holder["run"] = run
        try:
            run.trainer.train()
        finally:
            run.close()
        return {"reloads": reloads, "server": server, "run": run}


@pytest.mark.parametrize("lora", [False, True], ids=["full-parameter", "lora-merged"])
def test_every_rollout_is_generated_from_the_trainers_current_weights(tmp_path, tiny_smollm2_model_dir, lora):
    import torch

    out = _run(tmp_path, tiny_smollm2_model_dir, lora)
    reloads, server, run = out["reloads"], out["server"], out["run"]
    assert len(reloads) == 2 and all(r["equal"] for r in reloads)  # one reload per rollout, the current weights
    first, second = (r["weights"] for r in reloads)
    assert any(not torch.equal(first[k], second[k]) for k in first)  # step 2 serves the updated weights
    assert server.app.state.prefix_cache_resets == 2
    # the testing server answers 404 to a model it does not serve: every turn was requested as "base"
    assert server.generate_requests >= 2 * 2 * 4
    assert all(t.finish_reason != "error" for t in run.rollout.last.trajectories)
    assert run.rollout.last.metrics["time/sync_s"] > 0
    # what the trainer scored is what the server sampled: the log-prob gap is logged every step, within tolerance
    from tirl.train.trainer import LOGPROB_MISMATCH_TOLERANCE

    logged = [h for h in run.trainer.state.log_history if "loss" in h]
    assert len(logged) == 2
    for h in logged:
        assert 0 <= h["logprob_mismatch/mean"] <= LOGPROB_MISMATCH_TOLERANCE["mean"], h
        assert h["logprob_mismatch/mean"] <= h["logprob_mismatch/max"] <= LOGPROB_MISMATCH_TOLERANCE["max"], h
