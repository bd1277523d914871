"""Run by the DDP, FSDP2 and ZeRO-3 tests on CPU (through tests/equal_steps_runs.py), alone or under ``accelerate
launch`` with a config of configs/accelerate/ (not a test module).

Trains GRPO-RoC steps of a model with the scripted trajectory source of mp_train_script.py (fixed token sequences,
rewards from the problem and sample index: the same batch whatever the number of processes) and writes, per rank,
the loss and gradient norm of each step, the problems each rank received, and whether the step resumed.
Generation is exercised too: before each rollout the source asks for the policy the agent loop would generate with
(unwrapped from DDP) and runs one forward pass on it, recording its logits' checksum (equal on all ranks: the same
weights). Each step's advantage check (``check/adv_diff_vs_trl``: tirl's group advantages against TRL's own on the
rows TRL grouped) is recorded too.
Usage: equal_steps_script.py MODEL_DIR OUT_DIR MAX_STEPS [PER_DEVICE_BATCH]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mp_train_script import ModScorer, ScriptedSource
from tirl.data.problem import Problem
from tirl.train.config import load_config
from tirl.train.rl import build_trainer


class CheckedSource(ScriptedSource):
    """ScriptedSource that also runs one forward pass on the generation policy of each step."""

    def __init__(self, tokenizer: Any, stop_id: int) -> None:
        super().__init__(tokenizer, stop_id)
        self.checksums: list[float] = []

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> Any:
        import torch

        from tirl.train.rollout_func import _policy_for_generation

        with _policy_for_generation(trainer) as model, torch.no_grad():
            ids = torch.tensor([self.tok.encode("a fixed probe", add_special_tokens=False)])
            self.checksums.append(float(model(input_ids=ids.to(model.device)).logits.double().sum()))
        return super().generate(problems, n, seed=seed, trainer=trainer)


def main() -> None:
    model_dir, out_dir, max_steps = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
    per_device = sys.argv[4] if len(sys.argv) > 4 else "2"
    from accelerate import PartialState

    state = PartialState()
    config = load_config(
        None,
        [
            f"output_dir={out_dir / 'run'}",
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            f"max_steps={max_steps}",
            "problems_per_step=4",
            "save_steps=3",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            f"optim.per_device_train_batch_size={per_device}",
            "optim.warmup_steps=0",
            "optim.learning_rate=1e-3",
            "optim.weight_decay=0.0",
            "logging.console=false",
            "data.seed=0",
        ],
    )
    problems = [Problem(id=f"k{i}", problem=f"scripted problem number {i}", answer="0") for i in range(16)]
    from tirl.models import load_tokenizer
    from tirl.protocol import stop_token_ids

    tok = load_tokenizer(model_dir)
    source = CheckedSource(tok, stop_token_ids(tok)[0])
    run = build_trainer(config, problems=problems, source=source, scorer=ModScorer())
    trainer = run.trainer
    diffs: list[float] = []
    original = trainer._generate_and_score_completions

    def spy(inputs: Any) -> Any:
        output = original(inputs)
        diffs.append(float(trainer._metrics["train"]["check/adv_diff_vs_trl"][-1]))
        return output

    trainer._generate_and_score_completions = spy
    trainer.train(resume_from_checkpoint=run.resume_from)
    from tirl.train.rollout_func import shard_numels

    full, per_rank = shard_numels(trainer.model_wrapped)  # parameters each rank holds (under FSDP, ZeRO-3: shards)
    local = per_rank[state.process_index]
    steps = [
        {"step": h["step"], "loss": h["loss"], "grad_norm": h["grad_norm"]}
        for h in trainer.state.log_history
        if "grad_norm" in h
    ]
    record = {
        "rank": state.process_index,
        "world": state.num_processes,
        "seen": source.seen,
        "steps": steps,
        "checksums": source.checksums,
        "adv_diffs": diffs,
        "global_step": trainer.state.global_step,
        "resumed_from": str(run.resume_from) if run.resume_from else None,
        "distributed_type": str(trainer.accelerator.distributed_type),
        "local_numel": local,
        "full_numel": full,
    }
    (out_dir / f"rank{state.process_index}.json").write_text(json.dumps(record))
    run.close()
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
