"""Replay one step of an RL run: recompute step N from the checkpoint before it and compare with the logs.

``tirl train replay RUN_DIR --step N`` (:func:`replay_step`) answers "is step N of this run reproducible on this
machine, and did it do what the logs say?". It reads the run's saved configuration (``RUN_DIR/config.yaml``,
written by :func:`tirl.train.rl.build_trainer`), resumes a fresh trainer in a temporary output folder from
``RUN_DIR/checkpoint-(N-1)`` (the run's starting model when N = 1), runs exactly step N with
``logging.log_trajectories`` on and saves nothing (:func:`recompute_step`, the training half), then compares what
it sampled and the step's ``loss`` and ``grad_norm`` with what the run logged (:mod:`tirl.analysis.step_replay`,
the reading half: which fields, and why the tolerances are what they are).

Randomness is already per step (the rollout seed is a function of ``config.seed`` and the step; RoC's rng of
``seed``, step and problem id), and resume restores the optimiser, scheduler, data order and RNG states from the
checkpoint, so a replay is a resume that stops after one step. The run's ``max_steps`` is kept (the learning-rate
schedule depends on it); training stops after step N by a callback.

Limits: one process only (a run trained with ``accelerate launch`` on several processes is replayed on one, so
its steps' batches differ: not supported and not checked); rank 0's trajectories only; a run using a server
(``rollout.server_url``) replays against that server as it is now; ``RUN_DIR`` is only read, except for the report
``RUN_DIR/replay_step_N.json``.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tirl.analysis.step_replay import (
    ABS_TOL,
    REL_TOL,
    ReplayError,
    ReplayReport,
    check_replayable,
    compare,
    read_trajectories,
    step_metrics,
)
from tirl.runs.layout import replay_report, trajectory_file


@contextlib.contextmanager
def _replay_dir(keep: str | Path | None) -> Iterator[Path]:
    if keep is not None:
        Path(keep).mkdir(parents=True, exist_ok=True)
        yield Path(keep)
        return
    with tempfile.TemporaryDirectory(prefix="tirl-replay-") as tmp:
        yield Path(tmp)


def recompute_step(run_dir: str | Path, step: int, out_dir: str | Path, **build_kwargs: Any) -> Path:
    """Run step ``step`` of the run in ``run_dir`` again, into ``out_dir`` (its trajectories and metrics land
    there; nothing is saved: no checkpoint, no final model). Returns ``out_dir``.

    ``out_dir/checkpoint-(step-1)`` is a symbolic link to the run's checkpoint (read only, never copied: a
    real model's checkpoint is gigabytes). ``build_kwargs`` go to :func:`tirl.train.rl.build_trainer` (tests
    pass a scripted ``source``/``scorer``/``problems``; by default the run's own agent loop and verifier).

    Raises:
        ReplayError: see :func:`tirl.analysis.step_replay.check_replayable`.
    """
    from transformers import TrainerCallback

    from tirl.train.config import load_config
    from tirl.train.rl import build_trainer

    cfg_path, ckpt = check_replayable(run_dir, step)
    out = Path(out_dir)
    if ckpt is not None:
        link = out / ckpt.name
        if not link.exists():
            link.symlink_to(ckpt.resolve(), target_is_directory=True)
    cfg = load_config(
        cfg_path,
        [
            f"output_dir={out}",
            "resume=true",
            "logging.log_trajectories=true",
            "logging.jsonl=true",
            "logging.report_to=[]",
            "logging.console=false",
            "watchdog.enabled=false",
        ],
    )
    if cfg.max_steps < step:
        raise ReplayError(f"step {step} is past the run's max_steps={cfg.max_steps}")
    if ckpt is None:
        cfg.resume = False

    class _StopAfterStep(TrainerCallback):
        """Stop after step ``step`` and save nothing (the run's ``max_steps`` stays, for its LR schedule)."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> Any:
            control.should_save = False
            if state.global_step >= step:
                control.should_training_stop = True
            return control

    run = build_trainer(cfg, num_processes=1, **build_kwargs)
    try:
        run.trainer.add_callback(_StopAfterStep())
        run.trainer.train(resume_from_checkpoint=str(out / ckpt.name) if ckpt is not None else None)
    finally:
        run.close()
    return out


def replay_step(
    run_dir: str | Path,
    step: int,
    *,
    keep: str | Path | None = None,
    rel_tol: float = REL_TOL,
    abs_tol: float = ABS_TOL,
    write: bool = True,
    **build_kwargs: Any,
) -> ReplayReport:
    """Recompute step ``step`` of the run in ``run_dir`` (:func:`recompute_step`) and compare it with what the
    run logged (:func:`tirl.analysis.step_replay.compare`); the report is also written to
    ``run_dir/replay_step_N.json`` (``write``).

    Args:
        run_dir: the ``output_dir`` of a ``tirl train rl`` run (finished or interrupted) that logged trajectories.
        step: the step to replay, 1-based.
        keep: a folder to replay into and keep (default a temporary folder, removed afterwards).
        rel_tol, abs_tol: tolerance on ``loss`` and ``grad_norm``.
        write: write ``replay_step_N.json``.
        build_kwargs: passed to :func:`tirl.train.rl.build_trainer`.

    Raises:
        ReplayError: the step cannot be replayed (:func:`tirl.analysis.step_replay.check_replayable`).
    """
    root = Path(run_dir)
    _, ckpt = check_replayable(root, step)
    logged = read_trajectories(trajectory_file(root, step))
    report = ReplayReport(
        run_dir=str(root), step=step, checkpoint=str(ckpt) if ckpt else None, rel_tol=rel_tol, abs_tol=abs_tol
    )
    with _replay_dir(keep) as tmp:
        recompute_step(root, step, tmp, **build_kwargs)
        replayed_file = trajectory_file(tmp, step)
        replayed = read_trajectories(replayed_file) if replayed_file.is_file() else []
        compare(logged, replayed, step_metrics(root, step), step_metrics(tmp, step), report)
    if write:
        replay_report(root, step).write_text(json.dumps(report.to_dict(), indent=1), encoding="utf-8")
    return report


__all__ = ["recompute_step", "replay_step"]
