"""The recipe's first stage: non-reasoning SFT on TRL's ``SFTTrainer``, in tirl's own conversation format.

Covers building the SFT dataset from the packaged conversations (:mod:`tirl.data.sft`), each rendered by
:func:`tirl.protocol.render_conversation_ids` exactly as the agent loop builds the same conversation at RL and
evaluation time (system prompt with the tool schema, ``<reason>`` prefill, tool-response segments tokenized on
their own); the mapping of :class:`~tirl.train.sft_config.SFTConfig` onto ``trl.SFTConfig``; training with
checkpoints, resume and metrics (``metrics.jsonl``, a console progress line); and the final model folder, with a
LoRA adapter merged into the base weights so that ``tirl eval --model DIR`` and ``tirl train rl``
(``model.name_or_path: DIR``) start from it. It does not convert data (:mod:`tirl.data.sft`) and does not do RL
(:mod:`tirl.train.rl`).

The loss mask reaches TRL as the pre-tokenized ``assistant_masks`` column: ``SFTTrainer`` (trl 1.16,
``_prepare_dataset``) keeps ``input_ids`` as given, turns every position whose mask is 0 into label -100 and
drops the column; its collator pads with label -100. So the loss covers exactly the model's turn tokens and
their end-of-turn tokens (stopping after a tool call is learnt), never the prompt, the prefill or the injected
tool responses. Conversations longer than ``data.max_length`` are dropped, never truncated.

Resume: ``output_dir/checkpoint-N`` every ``save_steps`` optimiser steps (weights or adapter, optimiser,
scheduler, RNG, trainer state); re-running the same command continues from the newest one, dropping metric records
that an interrupted run wrote after it. The final model goes to ``output_dir/final`` (tokenizer and
``generation_config.json`` with the end-of-turn stop ids included), the resolved config to
``output_dir/config.yaml``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.data.sft import SFTExample, load_sft_examples, render_sft_example
from tirl.protocol import ProtocolConfig
from tirl.runs.checkpoints import checkpoint_step, last_checkpoint
from tirl.runs.layout import config_file, final_dir, metrics_path
from tirl.runs.metrics import MetricsLog
from tirl.train.common import load_policy, score_completion_positions_only, shared_args, trl_module
from tirl.train.sft_config import SFTConfig

logger = logging.getLogger(__name__)


@dataclass
class SFTDataStats:
    """What went into the dataset.

    Attributes:
        examples: conversations kept.
        dropped_too_long: conversations over ``data.max_length`` tokens, dropped.
        tokens: tokens of the kept conversations.
        loss_tokens: of those, tokens with loss mask 1.
        by_kind: kept conversations per kind (``tool``, ``chat``).
    """

    examples: int = 0
    dropped_too_long: int = 0
    tokens: int = 0
    loss_tokens: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)


def sft_rows(
    tokenizer: Any, examples: Sequence[SFTExample], max_length: int, protocol: ProtocolConfig | None = None
) -> tuple[list[dict[str, list[int]]], SFTDataStats]:
    """Render conversations into trainer rows ``{"input_ids": [...], "assistant_masks": [...]}`` (same length;
    mask 1 on model tokens, 0 on the prompt and every injected token), dropping those over ``max_length``."""
    rows: list[dict[str, list[int]]] = []
    stats = SFTDataStats()
    for ex in examples:
        rendered = render_sft_example(tokenizer, ex, protocol)
        ids, mask = rendered.input_ids, rendered.labels_mask
        if len(ids) > max_length:
            stats.dropped_too_long += 1
            continue
        rows.append({"input_ids": ids, "assistant_masks": mask})
        stats.examples += 1
        stats.tokens += len(ids)
        stats.loss_tokens += sum(mask)
        stats.by_kind[ex.kind] = stats.by_kind.get(ex.kind, 0) + 1
    return rows, stats


def sft_args(config: SFTConfig, num_processes: int = 1) -> Any:
    """The ``trl.SFTConfig`` of a run (no packing, no padding-free batches, TRL's gradient checkpointing and
    bf16 defaults replaced by tirl's settings)."""
    trl = trl_module()

    o = config.optim
    return trl.SFTConfig(
        **shared_args(config),
        num_train_epochs=o.num_train_epochs,
        max_steps=o.max_steps,
        per_device_train_batch_size=o.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps(num_processes),
        learning_rate=o.learning_rate,
        lr_scheduler_type=o.lr_scheduler_type,
        warmup_steps=o.warmup_ratio,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        loss_type=o.loss_type,
        max_length=config.data.max_length,
        packing=False,
        padding_free=False,
        completion_only_loss=None,
        assistant_only_loss=False,
        logging_steps=config.logging.logging_steps,
    )


@dataclass
class BuiltSFT:
    """Everything :func:`build_sft_trainer` made."""

    trainer: Any
    tokenizer: Any
    stats: SFTDataStats
    resume_from: Path | None
    metrics_log: MetricsLog | None


def build_sft_trainer(
    config: SFTConfig,
    *,
    examples: Sequence[SFTExample] | None = None,
    protocol: ProtocolConfig | None = None,
    num_processes: int | None = None,
) -> BuiltSFT:
    """Build the ``trl.SFTTrainer`` of ``config``.

    Args:
        config: the run.
        examples: conversations (default: from ``config.data``).
        protocol: the conversation format (default: ``config.protocol``).
        num_processes: training processes (default: the world size the training arguments see).

    Returns:
        A :class:`BuiltSFT`; ``trainer.train(resume_from_checkpoint=...)`` runs it (or use :func:`train_sft`).

    Raises:
        ValueError: an invalid configuration, or no conversation left after the length filter.
    """
    from datasets import Dataset

    if num_processes is None:
        num_processes = int(sft_args(config, 1).world_size)
    config.validate(num_processes)
    if protocol is None:
        protocol = config.protocol
    resume_from = last_checkpoint(config.output_dir) if config.resume else None
    model, tokenizer, peft_config = load_policy(config.model)
    if examples is None:
        examples = load_sft_examples(
            config.data.sources,
            seed=config.data.seed,
            limit=config.data.limit,
            config=protocol,
            max_per_problem=config.data.max_per_problem,
            trajectory_tokens=config.data.trajectory_tokens,
        )
    rows, stats = sft_rows(tokenizer, examples, config.data.max_length, protocol)
    if not rows:
        raise ValueError(
            f"no SFT conversations left (all {stats.dropped_too_long} are over data.max_length="
            f"{config.data.max_length} tokens?)"
        )
    if stats.dropped_too_long:
        logger.info("dropped %d conversations over %d tokens", stats.dropped_too_long, config.data.max_length)

    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    metrics_log = MetricsLog(metrics_path(config.output_dir)) if config.logging.jsonl else None
    if metrics_log is not None:
        dropped = metrics_log.truncate_after(checkpoint_step(resume_from) if resume_from is not None else 0)
        if dropped:
            logger.info("dropped %d metric records logged after the checkpoint by an interrupted run", dropped)
    from tirl.train.config import dump_config

    dump_config(config, config_file(config.output_dir))

    from tirl.train import token_rows
    from tirl.train.callbacks import JsonlMetrics, SFTProgress

    names = config.model.train_token_rows
    row_ids = token_rows.token_row_ids(tokenizer, names) if names else []
    # the JSONL writer last: the rows' metrics and the progress callback's step time are added to each record first
    callbacks = [token_rows.metrics_callback(row_ids)] if row_ids else []
    callbacks += [SFTProgress(config.stage, config.logging.console), JsonlMetrics(metrics_log, config.stage)]
    trainer = trl_module().SFTTrainer(
        model=model,
        args=sft_args(config, num_processes),
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
        callbacks=callbacks,
    )
    score_completion_positions_only()  # CPU: the loss projects only the labelled positions over the vocabulary
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    if row_ids:
        token_rows.make_rows_trainable(trainer.model, row_ids)
        if resume_from is not None and token_rows.load_token_rows(trainer.model, resume_from):
            logger.info("trained token rows restored from %s", resume_from)
        rows_lr = config.model.token_rows_learning_rate
        if rows_lr is not None:  # None: the rows stay in Trainer's own groups, at optim.learning_rate
            token_rows.build_rows_optimizer(trainer, rows_lr)
        start = token_rows.rows_metrics(trainer.model, row_ids)
        logger.info(
            "training token rows %s at lr %g: max cosine %.3f, mean norm %.3f",
            config.model.train_token_rows,
            rows_lr if rows_lr is not None else config.optim.learning_rate,
            start.get("token_rows/max_cosine", float("nan")),
            start["token_rows/mean_norm"],
        )
        trainer.add_callback(token_rows.checkpoint_callback(row_ids))
    return BuiltSFT(trainer, tokenizer, stats, resume_from, metrics_log)


def save_final(trainer: Any, tokenizer: Any, out_dir: str | Path, *, merge_lora: bool = True) -> Path:
    """Write the trained model as a plain HF folder: a peft model is merged into its base weights (unless
    ``merge_lora`` is False, then only the adapter is saved), with the tokenizer and the generation config (whose
    ``eos_token_id`` holds the end-of-turn stop ids the base model had).

    Returns:
        ``out_dir``.
    """
    out = Path(out_dir)
    model = trainer.accelerator.unwrap_model(trainer.model)
    if merge_lora and hasattr(model, "merge_and_unload"):
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    if trainer.accelerator.is_main_process:
        model.save_pretrained(str(out))
        tokenizer.save_pretrained(str(out))
    return out


def train_sft(config: SFTConfig, **kwargs: Any) -> Path:
    """Build and run the SFT stage; returns the final model folder (``output_dir/final``).

    Keyword arguments go to :func:`build_sft_trainer`.
    """
    built = build_sft_trainer(config, **kwargs)
    s = built.stats
    logger.info(
        "SFT data: %d conversations (%s), %d tokens, %d with loss; %d dropped as too long",
        s.examples,
        s.by_kind,
        s.tokens,
        s.loss_tokens,
        s.dropped_too_long,
    )
    if built.resume_from is not None:
        logger.info("resuming from %s", built.resume_from)
    t0 = time.perf_counter()
    built.trainer.train(resume_from_checkpoint=str(built.resume_from) if built.resume_from else None)
    logger.info("SFT finished in %.0f s", time.perf_counter() - t0)
    return save_final(built.trainer, built.tokenizer, final_dir(config.output_dir), merge_lora=config.merge_lora)


__all__ = [
    "BuiltSFT",
    "SFTDataStats",
    "build_sft_trainer",
    "save_final",
    "sft_args",
    "sft_rows",
    "train_sft",
]
