"""A training run's checkpoints: the completeness marker tirl's trainers write last, and finding the newest
complete ``checkpoint-N`` (a run killed while saving leaves a half-written one, passed over and set aside).

Imports neither torch nor transformers: the trainers call :func:`write_checkpoint_marker` after transformers'
own save.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

from tirl.runs.layout import (
    CHECKPOINT_MARKER,
    CHECKPOINT_PREFIX,
    FINAL_MARKER,
    INCOMPLETE_PREFIX,
    TRAINER_STATE,
    checkpoint_dir,
    checkpoint_step,
    final_dir,
    partial_final_dir,
)

logger = logging.getLogger(__name__)


def write_checkpoint_marker(folder: str | Path, step: int) -> Path:
    """Record ``folder`` (a just-written ``checkpoint-N``) as complete: :data:`CHECKPOINT_MARKER` with ``step``
    and the byte size of every file in it, written to a temporary name, flushed and renamed (atomic)."""
    root = Path(folder)
    files = {
        str(p.relative_to(root)): p.stat().st_size
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != CHECKPOINT_MARKER
    }
    tmp = root / (CHECKPOINT_MARKER + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump({"step": int(step), "files": files}, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, root / CHECKPOINT_MARKER)
    return root / CHECKPOINT_MARKER


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why the ``checkpoint-N`` folder ``folder`` cannot be resumed from (None when it is complete).

    Complete means: with :data:`CHECKPOINT_MARKER` (tirl's trainers write it last), every file it lists is there
    with its recorded size; without one (a checkpoint of another trainer, or a run killed between the last
    file and the marker), ``trainer_state.json``, which transformers writes after the weights, optimiser and RNG
    states, parses and names step N. A run killed while writing a checkpoint leaves neither.
    """
    root = Path(folder)
    marker = root / CHECKPOINT_MARKER
    if marker.is_file():
        try:
            files = json.loads(marker.read_text(encoding="utf-8"))["files"]
        except (OSError, ValueError, KeyError, TypeError):
            return f"{CHECKPOINT_MARKER} is unreadable"
        for name, size in files.items():
            try:
                actual = (root / name).stat().st_size
            except OSError:
                return f"{name} is missing"
            if actual != size:
                return f"{name} has {actual} bytes, {size} were written"
        return None
    state = root / TRAINER_STATE
    if not state.is_file():
        return f"no {TRAINER_STATE} (the checkpoint was not finished)"
    try:
        step = json.loads(state.read_text(encoding="utf-8"))["global_step"]
    except (OSError, ValueError, KeyError, TypeError):
        return f"{TRAINER_STATE} is unreadable (the checkpoint was not finished)"
    if step != checkpoint_step(root):
        return f"{TRAINER_STATE} names step {step}"
    return None


def incomplete_checkpoints(output_dir: str | Path) -> list[tuple[Path, str]]:
    """The ``checkpoint-N`` folders of ``output_dir`` newer than :func:`last_checkpoint`, each with why it is
    incomplete (a run killed while writing it); oldest first."""
    root = Path(output_dir)
    good = last_checkpoint(root)
    floor = checkpoint_step(good) if good is not None else 0
    out = []
    for path in _checkpoint_folders(root):
        if checkpoint_step(path) > floor:
            problem = checkpoint_problem(path)
            if problem is not None:
                out.append((path, problem))
    return out


def _checkpoint_folders(root: Path) -> list[Path]:
    """``checkpoint-N`` folders of ``root`` (transformers' naming), ascending N."""
    if not root.is_dir():
        return []
    found = [
        p
        for p in root.iterdir()
        if p.is_dir() and checkpoint_step(p) > 0 and p.name == f"{CHECKPOINT_PREFIX}{checkpoint_step(p)}"
    ]
    return sorted(found, key=checkpoint_step)


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete ``checkpoint-N`` folder in ``output_dir`` (largest N that :func:`checkpoint_problem`
    accepts), or None (also for a missing folder). A newer, half-written checkpoint (a run killed while saving)
    is passed over with a warning, so the run resumes from the one before it."""
    for path in reversed(_checkpoint_folders(Path(output_dir))):
        problem = checkpoint_problem(path)
        if problem is None:
            return path
        logger.warning("%s is incomplete (%s): using the checkpoint before it", path, problem)
    return None


def set_aside_incomplete(output_dir: str | Path) -> list[Path]:
    """Rename every half-written checkpoint newer than :func:`last_checkpoint` to ``incomplete-checkpoint-N``
    (replacing an older folder of that name), so that the step is written afresh into an empty folder and
    transformers' checkpoint rotation never sees it. Returns the new paths."""
    moved = []
    for path, problem in incomplete_checkpoints(output_dir):
        target = path.with_name(INCOMPLETE_PREFIX + path.name)
        if target.exists():
            shutil.rmtree(target)
        path.rename(target)
        logger.warning("set aside %s as %s (%s)", path.name, target.name, problem)
        moved.append(target)
    return moved


TRAINING_STATE_FILES = (
    "optimizer.pt",
    "scheduler.pt",
    "scaler.pt",
    TRAINER_STATE,
    "training_args.bin",
    CHECKPOINT_MARKER,
)
"""Files of a ``checkpoint-N`` folder that are training state, not the model (left out of ``final``; so are
``rng_state*``)."""


def final_step(run_dir: str | Path) -> int | None:
    """The step whose weights ``RUN/final`` holds, or None when there is no complete final folder."""
    marker = final_dir(run_dir) / FINAL_MARKER
    try:
        return int(json.loads(marker.read_text(encoding="utf-8"))["step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def publish_final(tmp: str | Path, run_dir: str | Path, step: int) -> Path:
    """Mark ``tmp`` (a finished model folder, usually :func:`tirl.runs.layout.partial_final_dir`) as holding step
    ``step`` and move it to ``RUN/final`` (replacing an older one); returns ``RUN/final``."""
    tmp, final = Path(tmp), final_dir(run_dir)
    (tmp / FINAL_MARKER).write_text(json.dumps({"step": int(step)}), encoding="utf-8")
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    return final


def final_from_checkpoint(checkpoint: str | Path, run_dir: str | Path) -> Path:
    """Write ``RUN/final`` from ``checkpoint`` (a complete ``checkpoint-N``): its model files (weights or
    LoRA adapter, configs, tokenizer), without optimiser, scheduler, RNG and trainer state. The last step's
    checkpoint holds exactly the weights training ends with, so this is what an interrupted final save (or a
    watch-dog stop on the last step) leaves to be done."""
    src, tmp = Path(checkpoint), partial_final_dir(run_dir)
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    for path in src.iterdir():
        if path.is_file() and path.name not in TRAINING_STATE_FILES and not path.name.startswith("rng_state"):
            shutil.copy2(path, tmp / path.name)
    return publish_final(tmp, run_dir, checkpoint_step(src))


def finished_final(
    run_dir: str | Path, max_steps: int, *, write: bool = True, log: logging.Logger | None = None
) -> Path | None:
    """``RUN/final`` when the run has trained its ``max_steps`` (its newest complete checkpoint is at or past that
    step), else None. A finished run whose ``final`` is missing, half-written or of another step gets it written
    from that checkpoint first (:func:`final_from_checkpoint`) when ``write`` (False in the processes of a
    multi-process launch other than the main one: one process writes), said in one INFO line on ``log``
    (default this module's logger; the trainer passes its own, whose INFO lines the command prints)."""
    ckpt = last_checkpoint(run_dir)
    if ckpt is None or checkpoint_step(ckpt) < max_steps:
        return None
    if write and final_step(run_dir) != checkpoint_step(ckpt):
        (log or logger).info("writing %s from %s (the run had trained all its steps)", final_dir(run_dir), ckpt.name)
        final_from_checkpoint(ckpt, run_dir)
    return final_dir(run_dir)


def resume_folder(run_dir: str | Path) -> Path | None:
    """The model folder that continues ``run_dir``: its newest complete checkpoint, else its ``final``, else
    None (what ``init_from: auto:DIR`` takes)."""
    ckpt = last_checkpoint(run_dir)
    if ckpt is not None:
        return ckpt
    final = final_dir(run_dir)
    return final if final.is_dir() else None


__all__ = [
    "checkpoint_dir",
    "checkpoint_problem",
    "checkpoint_step",
    "final_from_checkpoint",
    "finished_final",
    "final_step",
    "incomplete_checkpoints",
    "last_checkpoint",
    "publish_final",
    "resume_folder",
    "set_aside_incomplete",
    "write_checkpoint_marker",
]
