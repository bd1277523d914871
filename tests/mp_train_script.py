"""The scripted trajectory source and scorer of tests/equal_steps_script.py (not a test module).

No generation: fixed token sequences whose rewards depend on the problem and the sample index, so a batch is the
same whatever the number of processes.
"""

from __future__ import annotations

from typing import Any

from tirl.protocol.types import Trajectory, TurnRecord
from tirl.reward.scorer import Score


class ScriptedSource:
    """Problem k's sample j: prompt = problem tokens; completion of 3 + j tokens ending in the stop id."""

    def __init__(self, tokenizer: Any, stop_id: int) -> None:
        self.tok = tokenizer
        self.stop = stop_id
        self.seen: list[list[str]] = []

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
        self.seen.append([p.id for p in problems])
        out = []
        for p in problems:
            prompt = self.tok.encode(p.problem, add_special_tokens=False)
            for j in range(n):
                ids = [100 + j, 200 + int(p.id[1:]), 300][: 2 + (j % 2)] + [self.stop]
                out.append(
                    Trajectory(
                        prompt_ids=prompt,
                        response_ids=ids,
                        loss_mask=[1] * len(ids),
                        logprobs=[-1.0] * len(ids),
                        turns=[TurnRecord(text="", answer_blocks=1)],
                        final_answer=str(j),
                        metadata={"j": j},
                    )
                )
        return out


class ModScorer:
    """Sample j of problem k is correct when (j + k) % 3 == 0: mixed groups."""

    def score(self, trajectories: Any, problems: Any) -> list[Score]:
        return [
            Score(1.0 if (t.metadata["j"] + int(p.id[1:])) % 3 == 0 else 0.0) for t, p in zip(trajectories, problems)
        ]
