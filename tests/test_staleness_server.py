"""``rollout.max_staleness: 1`` through TRL on tirl's testing server (issue 42): step n+1's groups are generated on
version n's weights while step n updates, the correction weights them, and the metrics say so."""

from __future__ import annotations

import math
import threading
from pathlib import Path
from typing import Any

import pytest

from tirl.train.config import load_config
from tirl.train.rollout_func import AgentLoopSource
from train_helpers import SIX_TIMES_SEVEN, AlternatingScorer, tiny_run_overrides

pytestmark = pytest.mark.slow

TRAINED_VS_SAMPLED = [
    f"{group}/{which}"
    for group, names in [("length", ["mean", "p90"]), ("turns", ["mean"]), ("tool_calls", ["per_traj"])]
    for name in names
    for which in (name, f"kept_{name}")
]
"""The step's sampled and trained (``kept``) distribution of length, turns and tool calls (issue 42)."""


def _run(tmp_path: Path, tiny_smollm2_model_dir: Path, extra: list[str]) -> dict[str, Any]:
    import torch
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from testing_server import TestingServer
    from tirl.models import load_tokenizer
    from tirl.rollout.hf_engine import HFEngine, HFEngineConfig
    from tirl.runs.metrics import read_metrics
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    served = AutoModelForCausalLM.from_pretrained(str(tiny_smollm2_model_dir), dtype=torch.float32)
    engine = HFEngine(served, HFEngineConfig(max_batch_size=16))
    holder: dict[str, Any] = {}
    reloads: list[int] = []  # the trainer's global_step at each weight push

    def on_reload_weights(path: str) -> None:
        served.load_state_dict(load_file(str(Path(path) / "model.safetensors")), strict=False)
        served.tie_weights()
        reloads.append(int(holder["run"].trainer.state.global_step))

    overrides = tiny_run_overrides(tmp_path, tiny_smollm2_model_dir, max_steps=3) + [
        "optim.learning_rate=5e-2",
        "rollout.server_sync=weights",
        "rollout.temperature=1.0",
        "rollout.max_staleness=1",
        "logging.log_trajectories=true",
        "protocol.prompt_style=compact",  # the small tokenizer and a short prompt: TRL's log-probs cost a third
        *extra,
    ]
    tokenizer = load_tokenizer(str(tiny_smollm2_model_dir))
    with TestingServer(engine, tokenizer=tokenizer, model_name="base", on_reload_weights=on_reload_weights) as srv:
        config = load_config(None, overrides + [f"rollout.server_url={srv.url}"])
        source = AgentLoopSource(config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1))
        run = build_trainer(
            config, problems=SIX_TIMES_SEVEN, source=source, scorer=AlternatingScorer(), num_processes=1
        )
        holder["run"] = run
        try:
            run.trainer.train()
        finally:
            run.close()
    return {"run": run, "reloads": reloads, "metrics": read_metrics(tmp_path)}


@pytest.mark.parametrize("correction", ["token_truncate", "sequence_mask"])
def test_k_1_trains_step_n_plus_1_on_version_n_with_the_correction_and_its_metrics(
    tmp_path, tiny_smollm2_model_dir, correction
):
    out = _run(tmp_path, tiny_smollm2_model_dir, [f"rollout.staleness_correction={correction}"])
    rows = [r for r in out["metrics"] if "loss" in r or "train/loss" in r]
    assert len(rows) == 3, out["metrics"]

    def get(row: dict[str, Any], name: str) -> float:
        for key in (f"tirl/{name}", f"train/tirl/{name}", name):
            if key in row:
                return float(row[key])
        raise KeyError(f"{name} not in {sorted(row)}")

    # the step's trained-vs-sampled distribution reaches metrics.jsonl (tirl.algo.metrics)
    for r in rows:
        for name in TRAINED_VS_SAMPLED:
            assert get(r, name) >= 0.0
        assert get(r, "length/kept_mean") > 0.0 and get(r, "turns/kept_mean") >= 1.0  # something was trained
    # pushes: version 0 before step 1, version 1 after step 1's update (nothing in flight), none after the last
    assert out["reloads"] == [0, 1]
    assert [get(r, "stale/lag_0") for r in rows] == [1.0, 0.0, 0.0]
    assert [get(r, "stale/lag_1") for r in rows] == [0.0, 1.0, 1.0]
    first, later = rows[0], rows[1:]
    # step 1 samples the trainer's own weights: ratio 1 (float32), nothing clipped, ESS 1
    assert get(first, "stale/mismatch_kl") < 1e-6 and get(first, "stale/is_clipped") == 0.0
    assert get(first, "stale/ess") == pytest.approx(1.0, abs=1e-5)
    # steps 2-3 are one update behind (lr 5e-2): the gap is measured, and the weights stay finite and bounded
    for r in later:
        assert get(r, "stale/mismatch_kl") > get(first, "stale/mismatch_kl")
        assert 0.0 < get(r, "stale/ess") <= 1.0 and 0.0 <= get(r, "stale/is_clipped") <= 1.0
        assert get(r, "time/overlap_saved_s") >= 0.0 and get(r, "time/rollout_wait_s") >= 0.0
        assert math.isfinite(float(r.get("grad_norm", r.get("train/grad_norm", 0.0))))
    # what the loss saw: TRL's old log-probs are the trainer's pre-update policy (computed for the correction)
    assert all(t.finish_reason != "error" for t in out["run"].rollout.last.trajectories)


@pytest.mark.parametrize("k", [1, 2])
def test_a_server_killed_mid_rollout_at_k_loses_nothing(tmp_path, tiny_smollm2_model_dir, k):
    """Two testing servers behind the rollout scheduler, server B killed while an admitted batch generates on a
    background thread. k = 1: during the rollout of step 3 (generated on version 1's adapter while step 2 updates).
    k = 2: during the rollouts of steps 2 and 3, both admitted on version 0 and generating at once while step 1
    updates. Either way every requested trajectory comes back once (failed over to A), every generated batch is
    trained by exactly one step and no trajectory twice, and the lag stays within k."""
    from test_train_multi_server import PER_STEP, PROBLEMS, STEPS, RecordingSource, _check_counts, _server
    from tirl.models import load_tokenizer
    from tirl.rollout.scheduler import endpoint_key
    from tirl.runs.metrics import read_metrics
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    server_a, pushes_a, _ = _server(tiny_smollm2_model_dir, kill_switch=False)
    server_b, pushes_b, switch = _server(tiny_smollm2_model_dir, kill_switch=True)  # k = 1: armed by push 2

    class ServedRecording(RecordingSource):
        def generate_served(self, problems: Any, n: int, *, seed: int) -> Any:
            if k == 2 and self.calls_started:
                switch.armed = True  # a background batch starts: B dies while steps 2 and 3 generate
            self.calls_started += 1
            with self.lock:
                self.running += 1
                self.most_running = max(self.most_running, self.running)
            try:
                trajectories = super().generate_served(problems, n, seed=seed)
            finally:
                with self.lock:
                    self.running -= 1
            self.steps.append(  # in the order the batches finish (two may run at once when k = 2)
                {
                    "trajectories": list(trajectories),
                    "sched": dict(self.last_scheduler_stats),
                    "expected": len(problems) * n,
                }
            )
            return trajectories

    with server_a, server_b:
        overrides = tiny_run_overrides(tmp_path, tiny_smollm2_model_dir, max_steps=STEPS) + [
            "model.lora.enabled=true",
            "model.lora.r=4",
            f"rollout.server_url={server_a.url},{server_b.url}",
            "optim.learning_rate=5e-2",
            "rollout.temperature=1.0",
            f"rollout.max_staleness={k}",
            "protocol.prompt_style=compact",
        ]
        config = load_config(None, overrides)
        source = ServedRecording(
            config, load_tokenizer(str(tiny_smollm2_model_dir)), executor_factory=lambda: LocalSandbox()
        )
        source.calls_started = source.running = source.most_running = 0
        source.lock = threading.Lock()
        run = build_trainer(config, problems=PROBLEMS, source=source, scorer=AlternatingScorer(), num_processes=1)
        trained: list[tuple[list[str], list[str]]] = []  # per step: its batch's trajectory ids, the trained ones
        fill_slots = run.rollout._fill_slots

        def recording_fill_slots(problems: Any, n: int, step: int, rule: Any, trajectories: Any, *rest: Any) -> Any:
            out = fill_slots(problems, n, step, rule, trajectories, *rest)
            ids = [t.metadata["trajectory_id"] for t in trajectories]
            trained.append((ids, [ids[i] for i in out[2] if i is not None]))
            return out

        run.rollout._fill_slots = recording_fill_slots
        try:
            run.trainer.train()
        finally:
            run.close()
    steps = source.steps
    assert switch.fired and server_b.killed and len(steps) == len(trained) == STEPS
    assert source.most_running == k  # k = 2: two admitted batches were generating at once
    for step in steps:
        _check_counts(step)
        assert all(t.finish_reason != "error" for t in step["trajectories"])  # failed over, not lost
    # nothing lost, nothing trained twice: each generated batch is the batch of exactly one trained step, and a
    # trajectory fills at most one slot of the run
    generated = sorted(sorted(t.metadata["trajectory_id"] for t in s["trajectories"]) for s in steps)
    assert sorted(sorted(ids) for ids, _ in trained) == generated
    assert len({i for ids in generated for i in ids}) == STEPS * PER_STEP
    slots = [i for ids, kept in trained for i in kept]
    assert len(slots) == len(set(slots)) > 0 and all(set(kept) <= set(ids) for ids, kept in trained)
    # the bound: admitted at most k versions behind the step that trains it, trained oldest first
    lags = [0, 1, 1] if k == 1 else [0, 1, 2]  # k = 2: steps 2 and 3 are both admitted on version 0
    assert run.rollout.producer.admitted == [(s, s - lag) for s, lag in enumerate(lags)]
    rows = [r for r in read_metrics(tmp_path) if "loss" in r]
    assert [[r[f"tirl/stale/lag_{j}"] for j in range(k + 1)] for r in rows] == [
        [float(j == lag) for j in range(k + 1)] for lag in lags
    ]
    # the batch that met the kill read its counters after it (two batches' counters may interleave when k = 2)
    assert any(s["sched"][f"sched/alive/{endpoint_key(server_b.url)}"] == 0 for s in steps)
    if k == 1:
        assert len(pushes_a) == len(pushes_b) == 2  # version 0 before step 1, version 1 after it; B dies in step 3
        assert steps[2]["sched"]["sched/failovers"] >= 1
    else:  # version 1 reaches A only when step 3's batch finished before step 2 was taken; B never gets it
        assert len(pushes_a) in (1, 2) and len(pushes_b) == 1
