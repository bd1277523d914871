"""RL rollouts over two inference servers behind the rollout scheduler, one of them killed in the middle of a step.

Two of tirl's testing servers (vLLM's completion and runtime-LoRA routes) serve an HFEngine on the tiny model; each
merges every pushed adapter into a fresh copy of the base weights, as vLLM would serve it. Server B kills itself
(listening socket closed, open connections aborted: :meth:`TestingServer.kill`) on its second generation request
of step 2, while other trajectories of that step are in flight on it. With fail-over on, those trajectories are
retried on server A and the step trains on all of them; with fail-over off they end as engine failures and are
masked (:mod:`tirl.algo.infra`), never trained as the model's. Either way each step returns every requested
trajectory exactly once.
"""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tirl.data.problem import Problem
from tirl.rollout.engine import GenerationOutput, SamplingParams
from tirl.rollout.scheduler import endpoint_key
from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from train_helpers import AlternatingScorer

PROBLEMS = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]
STEPS, PER_STEP = 3, 2 * 2 * 2  # problems_per_step x group_size x oversample


class KillSwitch:
    """An engine that forwards to ``inner`` until armed; then its ``after``-th call kills ``server`` and never
    answers (as a process killed while the request is on it)."""

    def __init__(self, inner: Any, after: int = 2) -> None:
        self.inner, self.after = inner, after
        self.server: Any = None
        self.armed = False
        self.calls_since_armed = 0
        self.fired = False

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        if self.armed:
            self.calls_since_armed += 1
            if self.calls_since_armed >= self.after:
                self.fired = True
                self.server.kill()
                await asyncio.sleep(3600)  # cancelled when the server's loop ends
        return await self.inner.generate(prompt_ids, params)

    def set_model(self, model: Any) -> None:
        self.inner.set_model(model)


class RecordingSource(AgentLoopSource):
    """The default source, keeping every step's trajectories and scheduler counters."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.steps: list[dict[str, Any]] = []

    def generate(self, problems: Any, samples_per_problem: int, *, seed: int, trainer: Any) -> Any:
        trajectories = super().generate(problems, samples_per_problem, seed=seed, trainer=trainer)
        self.steps.append(
            {
                "trajectories": list(trajectories),
                "sched": dict(self.last_scheduler_stats),
                "expected": len(problems) * samples_per_problem,
            }
        )
        return trajectories


def _server(tiny_smollm2_model_dir: Path, kill_switch: bool) -> tuple[Any, list[str], Any]:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig

    base = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    hf = HFEngine(copy.deepcopy(base), HFEngineConfig(max_batch_size=16))
    engine = KillSwitch(hf) if kill_switch else hf
    pushes: list[str] = []

    def on_load_lora(name: str, path: str) -> None:
        pushes.append(name)
        hf.set_model(PeftModel.from_pretrained(copy.deepcopy(base), path).merge_and_unload())
        if kill_switch and len(pushes) == 2:  # step 2's policy arrived: die during step 2's rollout
            engine.armed = True

    server = TestingServer(engine, tokenizer=load_tokenizer(str(tiny_smollm2_model_dir)), on_load_lora=on_load_lora)
    if kill_switch:
        engine.server = server
    return server, pushes, engine


def _run(tmp_path: Path, tiny_smollm2_model_dir: Path, failover: bool) -> dict[str, Any]:
    from tirl.models import load_tokenizer
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    server_a, pushes_a, _ = _server(tiny_smollm2_model_dir, kill_switch=False)
    server_b, pushes_b, switch = _server(tiny_smollm2_model_dir, kill_switch=True)
    with server_a, server_b:
        config = load_config(
            None,
            [
                f"output_dir={tmp_path}",
                f"model.name_or_path={tiny_smollm2_model_dir}",
                "model.dtype=float32",
                "model.lora.enabled=true",
                "model.lora.r=4",
                f"max_steps={STEPS}",
                "problems_per_step=2",
                "save_steps=10",
                "rollout.group_size=2",
                "rollout.oversample=2",
                "rollout.max_turns=2",
                "rollout.max_response_tokens=24",
                f"rollout.server_url={server_a.url},{server_b.url}",
                f"rollout.server_failover={str(failover).lower()}",
                "optim.per_device_train_batch_size=2",
                "optim.learning_rate=5e-2",
                "optim.warmup_steps=0",
                "roc.min_per_class=1",
                "logging.console=false",
                "watchdog.enabled=false",
                "protocol.prompt_style=compact",  # ~110 prompt tokens instead of ~450
                "logging.log_trajectories=true",
            ],
        )
        config.validate(1)
        source = RecordingSource(
            config, load_tokenizer(str(tiny_smollm2_model_dir)), executor_factory=lambda: LocalSandbox(workers=1)
        )
        run = build_trainer(config, problems=PROBLEMS, source=source, scorer=AlternatingScorer(), num_processes=1)
        try:
            run.trainer.train()
        finally:
            run.close()
        logged = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
        return {
            "source": source,
            "a": server_a,
            "b": server_b,
            "pushes_a": pushes_a,
            "pushes_b": pushes_b,
            "switch": switch,
            "logged": [h for h in logged if "tirl/sched/alive" in h],
        }


def _check_counts(step: dict[str, Any]) -> None:
    """Every requested trajectory came back once: the (group, sample) pairs are complete and distinct."""
    trajectories = step["trajectories"]
    assert len(trajectories) == step["expected"] == PER_STEP
    pairs = {(t.metadata["group_id"], t.metadata["sample_index"]) for t in trajectories}
    assert len(pairs) == PER_STEP
    assert len({t.metadata["trajectory_id"] for t in trajectories}) == PER_STEP


@pytest.mark.slow(seconds=50)
@pytest.mark.parametrize("failover", [True, False], ids=["failover", "masked"])
def test_a_server_killed_mid_step_is_failed_over_and_no_trajectory_is_lost_or_duplicated(
    tmp_path, tiny_smollm2_model_dir, failover
):
    out = _run(tmp_path, tiny_smollm2_model_dir, failover)
    source, steps = out["source"], out["source"].steps
    key_a, key_b = endpoint_key(out["a"].url), endpoint_key(out["b"].url)
    assert out["switch"].fired and out["b"].killed
    assert len(steps) == STEPS
    for step in steps:
        _check_counts(step)

    # every step's policy reached every live server: A took all three, B the first two (dead at step 3)
    assert len(out["pushes_a"]) == STEPS and len(out["pushes_b"]) == 2
    first, killed, after = (s["sched"] for s in steps)
    assert first["sched/synced"] == 2 and first["sched/alive"] == 2
    assert first[f"sched/trajectories/{key_a}"] > 0 and first[f"sched/trajectories/{key_b}"] > 0  # both routed to
    assert first[f"sched/kv_peak/{key_a}"] > 0 and first["sched/failovers"] == 0
    assert killed[f"sched/alive/{key_b}"] == 0 and killed[f"sched/failed_requests/{key_b}"] >= 1
    assert after["sched/synced"] == 1 and after["sched/sync_failed"] == 1 and after["sched/alive"] == 1
    assert after[f"sched/trajectories/{key_b}"] == 0 and after[f"sched/trajectories/{key_a}"] == PER_STEP

    errors = [t for t in steps[1]["trajectories"] if t.finish_reason == "error"]
    if failover:
        # the trajectories in flight on B moved to A and finished there; admissions = trajectories + moves
        assert killed["sched/failovers"] >= 1 and not errors
        assert (
            killed[f"sched/trajectories/{key_a}"] + killed[f"sched/trajectories/{key_b}"]
            == PER_STEP + killed["sched/failovers"]
        )
    else:
        assert killed["sched/failovers"] == 0 and errors
    assert all(t.finish_reason != "error" for s in (steps[0], steps[2]) for t in s["trajectories"])

    # the counters reach the run's metric log once per step, and a failed trajectory is masked, not trained
    assert len(out["logged"]) == STEPS
    masked = [h["tirl/infra/masked_engine"] for h in out["logged"]]
    assert masked == [0.0, float(len(errors)), 0.0]
    assert out["logged"][1][f"tirl/sched/alive/{key_b}"] == 0.0
    assert source.last_scheduler_stats["sched/alive"] == 1.0
    # the step's log: a trajectory that failed on the dead server is marked as infrastructure and never kept
    rows = [
        json.loads(line) for line in (tmp_path / "trajectories" / "step_00002_rank0.jsonl").read_text().splitlines()
    ]
    assert len(rows) == PER_STEP
    failed = [r for r in rows if r["finish_reason"] == "error"]
    assert len(failed) == len(errors) and all(r["infra"] == "engine" and not r["kept"] for r in failed)


class _FakeAdapter:
    """Just enough of a peft model for ``ServerPolicySync.push``: it writes an adapter folder."""

    peft_config: dict[str, Any] = {"default": None}

    def save_pretrained(self, path: str) -> None:
        (Path(path) / "adapter_config.json").write_text("{}")


def test_the_policy_goes_to_every_server_and_a_dead_one_is_left_out(tmp_path):
    from testing_server import TestingServer
    from tirl.rollout.engine import GenerationOutput as Out
    from tirl.train.server_policy import ServerPolicySync, ServerSyncError

    class Idle:
        async def generate(self, prompt_ids: list[int], params: SamplingParams) -> Out:
            return Out(token_ids=[], logprobs=[], finish_reason="length")

    loaded: dict[str, list[str]] = {"a": [], "b": []}
    a = TestingServer(Idle(), on_load_lora=lambda name, path: loaded["a"].append(name))
    b = TestingServer(Idle(), on_load_lora=lambda name, path: loaded["b"].append(name))
    with a, b:
        sync = ServerPolicySync(f"{a.url}, {b.url}/", tmp_path / "adapter", "policy")
        assert sync.urls == [a.url, b.url]
        sync.push(_FakeAdapter())
        assert loaded == {"a": ["policy"], "b": ["policy"]} and sync.last_loaded == [a.url, b.url]
        b.kill()
        b.stop()
        sync.push(_FakeAdapter())
        assert loaded["a"] == ["policy"] * 2 and len(loaded["b"]) == 1
        assert sync.last_loaded == [a.url] and list(sync.last_failed) == [b.url]
        a.stop()
        with pytest.raises(ServerSyncError, match="no rollout server took the new policy"):
            sync.push(_FakeAdapter())


def test_server_url_takes_a_list_or_commas():
    assert load_config(None, ["rollout.server_url=http://a:1, http://b:2/"]).rollout.server_urls == [
        "http://a:1",
        "http://b:2",
    ]
    config = load_config(None, [])
    assert config.rollout.server_urls == []
    config.rollout.server_url = ["http://a:1", "http://b:2,http://c:3"]
    assert config.rollout.server_urls == ["http://a:1", "http://b:2", "http://c:3"]
    with pytest.raises(ValueError, match="names a server twice"):
        load_config(None, ["rollout.server_url=http://a:1,http://a:1/", "model.lora.enabled=true"]).validate(1)
    with pytest.raises(ValueError, match="server_scheduler"):
        load_config(None, ["rollout.server_scheduler=fastest"]).validate(1)


def test_a_server_that_missed_a_policy_leaves_rotation_and_rejoins_when_it_takes_one():
    from types import SimpleNamespace

    from tirl.rollout.scheduler import Endpoint, RolloutScheduler

    sched = RolloutScheduler(
        [
            Endpoint("http://a", engine=None, capacity_tokens=100),  # type: ignore[arg-type]
            Endpoint("http://b", engine=None, capacity_tokens=100),
        ]
    )  # type: ignore[arg-type]
    source = AgentLoopSource.__new__(AgentLoopSource)  # only _route_synced is used
    source._sync = SimpleNamespace(last_loaded=["http://a"], last_failed={"http://b": "refused"})
    source._route_synced(sched)
    assert sched.is_alive("http://a") and not sched.is_alive("http://b")
    source._sync = SimpleNamespace(last_loaded=["http://a", "http://b"], last_failed={})
    source._route_synced(sched)
    assert sched.is_alive("http://b")
    stats = sched.step_stats()
    assert stats["sched/alive"] == 2 and stats["sched/trajectories/a"] == 0
