"""What the SFT and RL stages share: importing TRL, checkpoints, and loading the policy to train.

Covers :func:`trl_module` (TRL imported with its experimental-feature notice silenced), :func:`shared_args` (the
training arguments both stages set alike),
:func:`resolve_init_from` (``init_from: DIR`` or ``auto:DIR``), :func:`load_policy` (model, tokenizer and LoRA
config from a ``model:`` section; model references are read by :mod:`tirl.models.loading`). A run's checkpoints
(completeness marker, the newest complete one) are :mod:`tirl.runs.checkpoints`'. Importing
it imports neither torch nor TRL; the functions do when called. The trainers and their callbacks live in
:mod:`tirl.train.trainer` and :mod:`tirl.train.callbacks`.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tirl.models.loading import is_adapter, model_reference
from tirl.runs.checkpoints import resume_folder

if TYPE_CHECKING:
    from tirl.train.config import ModelConfig

logger = logging.getLogger(__name__)


def trl_module() -> Any:
    """The ``trl`` package, imported on first use (its experimental-feature notice silenced)."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    return trl


def shared_args(config: Any) -> dict[str, Any]:
    """The training arguments the SFT and RL stages set alike from a recipe (``RLConfig`` or ``SFTConfig``):
    the output folder, a checkpoint every ``save_steps`` (at most ``save_total_limit``), ``report_to`` (the
    transformers integrations of ``logging.report_to``; tirl's own ``jsonl`` and ``console`` are its callbacks,
    ``"none"`` when nothing is left), the seed, bf16 (on CUDA only; CPU runs use ``model.dtype``), gradient
    checkpointing, no tqdm, no data-loader workers and a shuffled dataset. Imports torch."""
    import torch

    return dict(
        output_dir=config.output_dir,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        report_to=[x for x in config.logging.report_to if x not in ("jsonl", "console")] or "none",
        seed=config.seed,
        bf16=bool(config.bf16 and torch.cuda.is_available()),
        gradient_checkpointing=config.model.gradient_checkpointing,
        disable_tqdm=True,
        dataloader_num_workers=0,
        shuffle_dataset=True,
    )


def resolve_init_from(spec: str) -> Path:
    """The weights folder named by ``init_from``: a folder, or ``auto:DIR`` (newest checkpoint in DIR, else DIR/final).

    Raises:
        FileNotFoundError: nothing usable there.
    """
    if spec.startswith("auto:"):
        root = Path(spec[len("auto:") :])
        found = resume_folder(root)
        if found is not None:
            return found
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


__all__ = ["load_policy", "resolve_init_from", "shared_args", "trl_module"]
