"""What the SFT and RL stages share: importing TRL, checkpoints, and loading the policy to train.

Covers :func:`trl_module` (TRL imported with its experimental-feature notice silenced), :func:`last_checkpoint`
(the newest *complete* ``checkpoint-N``, None for a missing folder; :func:`checkpoint_problem` says why a
half-written one is not, :func:`write_checkpoint_marker` marks one complete), :func:`checkpoint_step`,
:func:`resolve_init_from` (``init_from: DIR`` or ``auto:DIR``), :func:`load_policy` (model, tokenizer and LoRA
config from a ``model:`` section), and, re-exported from :mod:`tirl.models.loading` where they are defined,
:func:`model_reference` (``tiny:<tokenizer>`` smoke models) and :func:`is_adapter`. Importing
it imports neither torch nor TRL; the functions do when called. The trainers and their callbacks live in
:mod:`tirl.train.trainer` and :mod:`tirl.train.callbacks`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tirl.models.loading import is_adapter, model_reference

if TYPE_CHECKING:
    from tirl.train.config import ModelConfig

logger = logging.getLogger(__name__)


def trl_module() -> Any:
    """The ``trl`` package, imported on first use (its experimental-feature notice silenced)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    return trl


CHECKPOINT_MARKER = "tirl_checkpoint.json"
"""Written last into a ``checkpoint-N`` folder by tirl's trainers: the step and the size of every file."""

TRAINER_STATE = "trainer_state.json"


def write_checkpoint_marker(folder: str | Path, step: int) -> Path:
    """Record ``folder`` (a just-written ``checkpoint-N``) as complete: :data:`CHECKPOINT_MARKER` with ``step``
    and the byte size of every file in it, written to a temporary name, flushed and renamed (atomic)."""
    import json

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
    import json

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
        if p.is_dir() and checkpoint_step(p) > 0 and p.name == f"checkpoint-{checkpoint_step(p)}"
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
    import shutil

    moved = []
    for path, problem in incomplete_checkpoints(output_dir):
        target = path.with_name("incomplete-" + path.name)
        if target.exists():
            shutil.rmtree(target)
        path.rename(target)
        logger.warning("set aside %s as %s (%s)", path.name, target.name, problem)
        moved.append(target)
    return moved


def checkpoint_step(path: str | Path) -> int:
    """The N of a ``checkpoint-N`` folder (or a ``.../checkpoint-N`` model reference); 0 for anything else
    (a run's starting model)."""
    name = Path(str(path).rstrip("/")).name
    head, sep, tail = name.rpartition("checkpoint-")
    return int(tail) if sep and not head and tail.isdigit() else 0


def resolve_init_from(spec: str) -> Path:
    """The weights folder named by ``init_from``: a folder, or ``auto:DIR`` (newest checkpoint in DIR, else DIR/final).

    Raises:
        FileNotFoundError: nothing usable there.
    """
    if spec.startswith("auto:"):
        root = Path(spec[len("auto:") :])
        ckpt = last_checkpoint(root)
        if ckpt is not None:
            return ckpt
        if (root / "final").is_dir():
            return root / "final"
        raise FileNotFoundError(f"init_from {spec!r}: no checkpoint-N or final folder in {root}")
    path = Path(spec)
    if not path.is_dir():
        raise FileNotFoundError(f"init_from {spec!r}: no such folder")
    return path


def load_policy(model_config: ModelConfig, init_from: Path | None = None) -> tuple[Any, Any, Any]:
    """The policy model, its tokenizer and a peft config (or None) for a run's ``model:`` section.

    With ``init_from`` the weights come from that folder: a full model folder is loaded as the model; a LoRA
    adapter folder is loaded on top of ``model_config.name_or_path`` and kept trainable (no new adapter is
    added). ``model_config.init_token_rows`` is applied whenever the weights come from ``name_or_path`` (so a
    resumed LoRA run sees the same rows).

    Raises:
        ValueError: a name in ``init_token_rows`` is not one token of the tokenizer.

    Returns:
        ``(model, tokenizer, peft_config)``; ``peft_config`` is None when LoRA is off or the model already is a
        trainable peft model.
    """
    from tirl.models import load

    dtype = model_config.dtype
    if init_from is not None and not is_adapter(init_from):
        model, tokenizer = load(str(init_from), dtype=dtype)
    else:
        model, tokenizer = load(model_reference(model_config.name_or_path), dtype=dtype)
        if model_config.init_token_rows:
            from tirl.models.token_rows import init_token_rows

            done = init_token_rows(model, tokenizer, model_config.init_token_rows)
            logger.info("re-initialised token rows from their spelling: %s", done)
    peft_config = None
    if init_from is not None and is_adapter(init_from):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
    elif model_config.lora.enabled:
        from peft import LoraConfig

        lora = model_config.lora
        peft_config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            task_type="CAUSAL_LM",
        )
    return model, tokenizer, peft_config


__all__ = [
    "CHECKPOINT_MARKER",
    "checkpoint_problem",
    "checkpoint_step",
    "incomplete_checkpoints",
    "is_adapter",
    "last_checkpoint",
    "load_policy",
    "model_reference",
    "resolve_init_from",
    "set_aside_incomplete",
    "trl_module",
    "write_checkpoint_marker",
]
