"""Run by tests/test_train_distributed.py under ``accelerate launch --num_processes 2`` (not a test module).

Trains 2 GRPO-RoC steps of the tiny random model with a scripted trajectory source (no generation: fixed token
sequences whose rewards depend on the problem and the sample index), and writes, per rank, which problems the
rollout function received in each step, the slot layout it returned, and TRL's advantage check.
Usage: mp_train_script.py MODEL_DIR OUT_DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.protocol.types import Trajectory, TurnRecord
from tirl.reward.scorer import Score
from tirl.train.config import load_config
from tirl.train.rl import build_trainer


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


def main() -> None:
    model_dir, out_dir = sys.argv[1], Path(sys.argv[2])
    from accelerate import PartialState

    state = PartialState()
    config = load_config(
        None,
        [
            f"output_dir={out_dir / 'run'}",
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            "max_steps=2",
            "problems_per_step=4",
            "save_steps=100",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            "optim.per_device_train_batch_size=2",
            "optim.warmup_steps=0",
            "optim.learning_rate=1e-3",
            "logging.console=false",
        ],
    )
    problems = [Problem(id=f"k{i}", problem=f"scripted problem number {i}", answer="0") for i in range(8)]
    from tirl.models import load_tokenizer
    from tirl.protocol import stop_token_ids

    tok = load_tokenizer(model_dir)
    source = ScriptedSource(tok, stop_token_ids(tok)[0])
    run = build_trainer(config, problems=problems, source=source, scorer=ModScorer())
    trainer = run.trainer
    diffs: list[float] = []
    original = trainer._generate_and_score_completions

    def spy(inputs: Any) -> Any:
        output = original(inputs)
        diffs.append(float(trainer._metrics["train"]["check/adv_diff_vs_trl"][-1]))
        return output

    trainer._generate_and_score_completions = spy
    trainer.train()
    record = {
        "rank": state.process_index,
        "world": state.num_processes,
        "seen": source.seen,
        "adv_diffs": diffs,
        "global_step": trainer.state.global_step,
    }
    (out_dir / f"rank{state.process_index}.json").write_text(json.dumps(record))
    run.close()
    import torch.distributed as dist

    if dist.is_initialized():  # tear the gloo group down before interpreter exit (an abort there failed a run)
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
