"""``rollout.max_staleness: 0`` is today's synchronous path, byte for byte (issue 42).

The tiny smoke recipe (``configs/rl/cpu-tiny-smoke.yaml``: the tiny random SmolLM2 model, synthetic problems, two
steps, the in-process engine and the local sandbox; rewards by sample parity, since the random model never answers
and a loss of 0 would check nothing) is run with ``max_staleness`` set to 0 (the default), and must reproduce the
numbers recorded from the code before issue 42 (commit ede93b4): the sampled tokens (a hash of every step's prompt
and completion ids), the rewards, the loss and the grad norm of each step. A change to the synchronous path shows
up here as a different hash or number.
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow(seconds=30)

RECIPE = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-tiny-smoke.yaml"

EXTRA = ["rollout.max_staleness=0"]

BEFORE: dict[str, Any] = {
    "tokens": "b4ed48699c514488995a643a2180d3e3dbeb52718e60eca390e72dd29ab2f8f4",
    "rewards": [[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 0.0, 1.0]],
    "loss": [0.0, 0.0],  # GRPO's loss at ratio 1 with zero-mean advantages: the grad norm is the check
    "grad_norm": [0.9253683090209961, 0.9509605765342712],
}
"""What the synchronous path gave before issue 42 (filled in from a run on commit ede93b4)."""


class ParityScorer:
    """Every other sampled trajectory correct: the random model never is, and a loss of 0 would check nothing."""

    def score(self, trajectories: Any, problems: Any) -> list[Any]:
        from tirl.reward.scorer import Score

        return [Score(float(i % 2)) for i in range(len(trajectories))]


def _run(tmp: Path, model_dir: Path, extra: list[str]) -> dict[str, Any]:
    from tirl.train.config import load_config
    from tirl.train.rl import build_trainer

    config = load_config(
        RECIPE,
        [
            f"output_dir={tmp}",
            f"model.name_or_path={model_dir}",
            "save_steps=10",
            "logging.console=false",
            "sandbox.workers=1",
        ]
        + extra,
    )
    run = build_trainer(config, scorer=ParityScorer(), num_processes=1)
    import torch

    from tirl.train.trainer import trl

    # the trainer scores only the completion positions on CPU (tests/test_train_fused_head.py); the numbers above,
    # recorded when TRL scored every position, must still come out
    assert trl.trainer.utils._use_triton(torch.device("cpu"))
    digest = hashlib.sha256()
    rewards: list[list[float | None]] = []
    original = run.rollout.__call__

    def spy(prompts: list[Any], trainer: Any) -> dict[str, Any]:
        out = original(prompts, trainer)
        for p, c in zip(out["prompt_ids"], out["completion_ids"], strict=True):
            digest.update(repr((list(p), list(c))).encode())
        rewards.append(list(out["tirl_reward"]))
        return out

    run.trainer.rollout_func = spy
    try:
        run.trainer.train()
    finally:
        run.close()
    from tirl.runs.metrics import read_metrics

    logs = [h for h in run.trainer.state.log_history if "loss" in h and "grad_norm" in h]
    return {
        "metrics": [r for r in read_metrics(tmp) if "loss" in r],
        "tokens": digest.hexdigest(),
        "rewards": rewards,
        "loss": [float(h["loss"]) for h in logs],
        "grad_norm": [float(h["grad_norm"]) for h in logs],
    }


def _same(got: dict[str, Any], want: dict[str, Any]) -> None:
    assert got["tokens"] == want["tokens"]
    assert got["rewards"] == want["rewards"]
    assert len(got["loss"]) == len(want["loss"]) == 2
    for key in ("loss", "grad_norm"):
        for a, b in zip(got[key], want[key], strict=True):
            # same kernels, same inputs: equal up to the last bits a different CPU's vector width may change
            assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-8), (key, got[key], want[key])


def test_max_staleness_0_is_the_synchronous_path(tmp_path, tiny_smollm2_model_dir):
    got = _run(tmp_path, tiny_smollm2_model_dir, EXTRA)
    _same(got, BEFORE)
    # at k = 0 the step's trained set is the RoC-kept subset of the sampled one; both reach metrics.jsonl
    from test_staleness_server import TRAINED_VS_SAMPLED

    assert len(got["metrics"]) == 2
    for row in got["metrics"]:
        assert all(row[f"tirl/{name}"] >= 0.0 for name in TRAINED_VS_SAMPLED), sorted(row)
