"""What the SFT and RL stages share: importing TRL, checkpoints, and loading the policy to train.

Covers :func:`trl_module` (TRL imported with its experimental-feature notice silenced),
:func:`score_completion_positions_only` (TRL's fused LM head scores only the labelled positions on CPU, both
stages' losses), :func:`shared_args` (the training arguments both stages set alike),
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


_COMPACT_MARK = "_tirl_compact_on_cpu"


def score_completion_positions_only() -> None:
    """Make TRL's fused LM head score only the labelled positions of a batch on CPU, not every position.

    trl 1.16's ``add_fused_lm_head`` (``trl.trainer.utils``: the forward every GRPO loss and log-prob pass of
    :class:`~tirl.train.trainer.RocGRPOTrainer` runs, and ``SFTTrainer``'s loss) projects the hidden states through
    the LM head in tiles and folds them into per-token log-probabilities. With Triton (CUDA, XPU) it passes only the
    positions whose label is not -100, the completion tokens; everywhere else it passes every position of the
    ``[batch, sequence]`` rows, prompt and padding included, then zeroes the unlabelled ones (``compact =
    _use_triton(device)``: on devices that compile the tiles, e.g. Neuron, a varying token count would recompile).
    CPU runs the tiles eagerly, so scoring every position buys nothing there and costs much: each position is a
    ``[hidden, vocabulary]`` projection in the forward and again in the backward (on the tests' tiny models most of
    the update; in the tiny smoke recipe's micro-batches about 1,200 positions scored for 256 labelled ones; an SFT
    conversation of the SFT tests, about 390 positions for 125 labelled). This makes ``compact`` true on CPU as
    well; the labelled positions' values are the same computation on a smaller tile (equal up to the last bits of a
    differently shaped matrix product), and the unlabelled ones are zero either way. GPUs and other devices are
    unchanged. Process-wide and idempotent; does nothing when TRL has no ``trl.trainer.utils._use_triton``
    (re-read on a TRL upgrade: ``tests/test_train_fused_head.py`` fails then).
    """
    import torch

    trl_module()  # TRL's experimental-feature notice silenced before its first import
    import trl.trainer.utils as utils

    original = getattr(utils, "_use_triton", None)
    if original is None or getattr(original, _COMPACT_MARK, False):
        return

    def compact_on_cpu(device: torch.device) -> bool:
        # the name is read only by _fused_forward's `compact` choice in trl.trainer.utils; the kernels' own choice
        # (Triton or torch tiles) reads trl.kernels.chunked_logprob._use_triton, which stays as it is
        return device.type == "cpu" or original(device)

    setattr(compact_on_cpu, _COMPACT_MARK, True)
    utils._use_triton = compact_on_cpu


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
