"""What the RL tests on a tiny model share: a scorer with mixed rewards, a problem set, the run's overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.reward.scorer import Score

SIX_TIMES_SEVEN = [Problem(id=f"p{i}", problem=f"What is 6 times 7? (variant {i})", answer="42") for i in range(4)]
"""Four problems with one answer (a tiny random model never solves them; the scorer decides the rewards)."""


class AlternatingScorer:
    """Mixed rewards (every other trajectory correct), so each step has a policy gradient."""

    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        return [Score(float(i % 2)) for i in range(len(trajectories))]


def tiny_run_overrides(output_dir: str | Path, model_dir: str | Path, max_steps: int = 2) -> list[str]:
    """A short RL run of the tiny model: 2 problems x (2 kept of 4 sampled), 2 turns of 24 tokens, no watch-dog."""
    return [
        f"output_dir={output_dir}",
        f"model.name_or_path={model_dir}",
        "model.dtype=float32",
        f"max_steps={max_steps}",
        "problems_per_step=2",
        "save_steps=10",
        "rollout.group_size=2",
        "rollout.oversample=2",
        "rollout.max_turns=2",
        "rollout.max_response_tokens=24",
        "optim.per_device_train_batch_size=2",
        "optim.warmup_steps=0",
        "roc.min_per_class=1",
        "logging.console=false",
        "watchdog.enabled=false",
    ]
