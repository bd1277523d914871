"""The generator/trainer log-prob gap: its warning, and a run whose generator misses a weight update says so."""

from __future__ import annotations

import logging

import pytest

from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from tirl.train.trainer import LOGPROB_MISMATCH_TOLERANCE, mismatch_warning
from train_helpers import SIX_TIMES_SEVEN, AlternatingScorer, tiny_run_overrides


def test_the_warning_is_silent_within_the_tolerance_and_names_both_causes_over_it():
    tol = LOGPROB_MISMATCH_TOLERANCE
    assert mismatch_warning(tol["mean"], tol["max"]) is None
    assert mismatch_warning(1e-6, 7.5e-5) is None  # the float32 colocated run (docs/scale.md)
    for mean, largest in [(0.0107, 0.176), (0.001, 0.2), (0.02, 0.05)]:  # bf16 steps of the launched run, ...
        line = mismatch_warning(mean, largest)
        assert line and "\n" not in line and "bf16" in line and "weight sync" in line


@pytest.mark.slow(seconds=25)
def test_a_generator_that_keeps_stale_weights_is_warned_about_once(tmp_path, tiny_smollm2_model_dir, caplog):
    """A server that acknowledges the weight reload but keeps its old weights: after step 1's large update the
    gap at step 2 is over the tolerance, and the run warns (once)."""
    import torch
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    served = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    engine = HFEngine(served, HFEngineConfig(max_batch_size=16))
    tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
    overrides = tiny_run_overrides(tmp_path, tiny_smollm2_model_dir) + [
        "optim.learning_rate=5e-1",
        "rollout.server_sync=weights",
        "protocol.prompt_style=compact",  # ~110 prompt tokens instead of ~450: each step scores a third
    ]
    caplog.set_level(logging.WARNING, logger="tirl.train.rl")
    with TestingServer(engine, tokenizer=tokenizer, model_name="base", on_reload_weights=lambda path: None) as srv:
        config = load_config(None, overrides + [f"rollout.server_url={srv.url}"])
        source = AgentLoopSource(config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1))
        run = build_trainer(
            config, problems=SIX_TIMES_SEVEN, source=source, scorer=AlternatingScorer(), num_processes=1
        )
        try:
            run.trainer.train()
        finally:
            run.close()
    logged = [h for h in run.trainer.state.log_history if "logprob_mismatch/max" in h]
    assert logged and logged[0]["logprob_mismatch/max"] <= LOGPROB_MISMATCH_TOLERANCE["max"]  # step 1: same weights
    assert max(h["logprob_mismatch/max"] for h in logged[1:]) > LOGPROB_MISMATCH_TOLERANCE["max"]
    warnings = [r.getMessage() for r in caplog.records if "logprob_mismatch" in r.getMessage()]
    assert len(warnings) == 1 and "check the weight sync" in warnings[0], warnings
