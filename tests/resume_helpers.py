"""Helpers of tests/test_train_resume.py (not a test module): a scripted GRPO-RoC run that can be killed.

The run trains the tiny random model with a scripted trajectory source (no generation: fixed token sequences
whose rewards depend on the problem and the sample index), so every update is a deterministic function of the
weights, the optimiser state and the problems of the step. Each rollout appends ``{"life", "step", "problems"}``
to a JSONL log (flushed and fsynced), which is what "the problems trained" is read from.

Fault points (:class:`Fault`): ``rollout`` (the source raises in step k's rollout), ``update`` (the loss of step
k's second micro-batch raises: gradients half accumulated, no optimiser step), ``checkpoint:<method>`` (the
trainer method raises while checkpoint-k is being written: ``_save_optimizer_and_scheduler`` after the weights,
``_save_rng_state`` after weights and optimiser, ``_save_checkpoint_tail`` after trainer_state.json but before
tirl's marker). In process the fault is an exception; run as a script (``python tests/resume_helpers.py
MODEL_DIR OUT_DIR LIFE POINT STEP``) the process instead prints ``PAUSED`` and sleeps at the point, so that the
test can SIGKILL it there.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.protocol.types import Trajectory, TurnRecord
from tirl.reward.scorer import Score
from tirl.train.config import load_config

PROBLEMS = [Problem(id=f"k{i}", problem=f"scripted problem number {i}", answer="0") for i in range(4)]


class Killed(RuntimeError):
    """The injected fault (stands for the process dying at that point)."""


@dataclass
class Fault:
    """Where to die: ``point`` (see the module docstring) during step ``step`` (1-based)."""

    point: str
    step: int


def _die(pause: bool) -> None:
    if pause:
        print("PAUSED", flush=True)
        time.sleep(600)
    raise Killed


class ScriptedSource:
    """Problem k's sample j: prompt = problem tokens; completion of 2-3 tokens ending in the stop id."""

    def __init__(
        self, tokenizer: Any, stop_id: int, log: Path, life: int, fault: Fault | None, pause: bool = False
    ) -> None:
        self.tok, self.stop, self.log, self.life, self.fault, self.pause = tokenizer, stop_id, log, life, fault, pause

    def generate(self, problems: Any, n: int, *, seed: int, trainer: Any) -> list[Trajectory]:
        step = int(trainer.state.global_step) + 1
        with open(self.log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"life": self.life, "step": step, "problems": [p.id for p in problems]}) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        if self.fault is not None and self.fault.point == "rollout" and self.fault.step == step:
            _die(self.pause)
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


def config(out: Path, model_dir: Path, max_steps: int = 4, save_steps: int = 1) -> Any:
    """4 problems, 2 per step (an epoch is 2 steps, so 4 steps cross an epoch boundary)."""
    return load_config(
        None,
        [
            f"output_dir={out}",
            f"model.name_or_path={model_dir}",
            "model.dtype=float32",
            f"max_steps={max_steps}",
            "problems_per_step=2",
            f"save_steps={save_steps}",
            "rollout.group_size=2",
            "rollout.oversample=2",
            "roc.min_per_class=1",
            "optim.per_device_train_batch_size=2",
            "optim.warmup_steps=0",
            "optim.learning_rate=1e-3",
            "logging.console=false",
            "watchdog.enabled=false",
        ],
    )


def run_life(cfg: Any, log: Path, life: int, fault: Fault | None = None, pause: bool = False) -> Any:
    """Build the run (resuming from the newest complete checkpoint) and train; returns the ``BuiltRun``.

    Raises:
        Killed: the fault fired (in process).
    """
    from tirl.models import load_tokenizer
    from tirl.protocol import stop_token_ids
    from tirl.train.rl import build_trainer

    tok = load_tokenizer(cfg.model.name_or_path)
    source = ScriptedSource(tok, stop_token_ids(tok)[0], log, life, fault, pause)
    run = build_trainer(cfg, problems=PROBLEMS, source=source, scorer=ModScorer(), num_processes=1)
    trainer = run.trainer
    if fault is not None and fault.point == "update":
        original = trainer.compute_loss
        calls = {"n": 0}

        def loss(*args: Any, **kwargs: Any) -> Any:
            if trainer.state.global_step + 1 == fault.step:
                calls["n"] += 1
                if calls["n"] == 2:
                    _die(pause)
            return original(*args, **kwargs)

        trainer.compute_loss = loss
    if fault is not None and fault.point.startswith("checkpoint:"):
        method = fault.point.split(":", 1)[1]
        if method == "_save_checkpoint_tail":  # after transformers' whole checkpoint, before tirl's marker
            import tirl.runs.checkpoints as common

            marker = common.write_checkpoint_marker

            def tail(folder: Any, step: int) -> Any:
                if step == fault.step:
                    _die(pause)
                return marker(folder, step)

            common.write_checkpoint_marker = tail  # read at call time by RocGRPOTrainer._save_checkpoint
        else:
            original_method = getattr(trainer, method)

            def fail(*args: Any, **kwargs: Any) -> Any:
                if trainer.state.global_step == fault.step:
                    if method == "_save_optimizer_and_scheduler":  # a torn optimizer file, as a kill leaves it
                        Path(args[0], "optimizer.pt").write_bytes(b"\0" * 100)
                    _die(pause)
                return original_method(*args, **kwargs)

            setattr(trainer, method, fail)
    try:
        trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
    finally:
        if fault is not None and fault.point == "checkpoint:_save_checkpoint_tail":
            import tirl.runs.checkpoints as common

            common.write_checkpoint_marker = marker
        run.close()
    return run


def main() -> None:
    model_dir, out, life, point, step = (
        Path(sys.argv[1]),
        Path(sys.argv[2]),
        int(sys.argv[3]),
        sys.argv[4],
        int(sys.argv[5]),
    )
    cfg = config(out / "run", model_dir)
    run_life(cfg, out / "rollouts.jsonl", life, Fault(point, step), pause=True)


if __name__ == "__main__":
    main()
