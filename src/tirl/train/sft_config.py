"""Configuration of the SFT stage (``tirl train sft``): dataclasses, YAML loading and ``key=value`` overrides.

Covers :class:`SFTConfig` and its sections (model, data, optimisation, logging), read from a YAML recipe
(``configs/sft/*.yaml``) with the same loader, type checks and override syntax as the RL configuration
(:func:`tirl.config.load_dataclass_config`), and the batch arithmetic onto TRL's ``SFTConfig``. It does not
build the trainer (:mod:`tirl.train.sft`) or load data (:mod:`tirl.data.sft`).

Defaults are the report's SFT stage (the public release, github.com/microsoft/rStar at ecbfb94): 3 epochs, lr 5e-6, 4%
warm-up, cosine decay, 128 conversations per optimiser step; the model section is shared with RL (:class:`ModelConfig`,
LoRA off unless a recipe turns it on).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tirl.config import check_choice, load_dataclass_config, plain_dict
from tirl.protocol.config import ProtocolConfig
from tirl.train.config import DTYPES, ModelConfig


@dataclass
class SFTDataConfig:
    """SFT conversations (:func:`tirl.data.sft.load_sft_examples`).

    Attributes:
        sources: packaged sets, each ``name``, ``name:N`` (first N rows) or ``name:START-STOP``
            (``gsm8k_tir``: GSM8K train as tool-calling conversations; ``oasst``: chat replies), generated ones
            (``programs:N``, ``programs_recovery:N``), or ``trajectories:PATH``: the correct trajectories of a
            ``tirl eval`` run, trained on their exact tokens (:func:`tirl.data.sft.trajectory_examples`).
        limit: cap on the number of conversations after shuffling (None = all).
        seed: shuffling seed.
        max_length: conversations with more tokens are dropped, never truncated (a cut conversation would teach
            the model not to stop).
        max_per_problem: for ``trajectories:PATH`` sources (the model's own correct trajectories from a
            ``tirl eval`` run, rejection sampling), the most kept per problem; None = every distinct one.
        trajectory_tokens: what a ``trajectories:PATH`` example trains on: ``exact``, the sampled token ids and
            loss mask unchanged (the evaluation's prompt and call format); ``rerender``, the turns rebuilt in
            this recipe's ``protocol`` (its prompt, so a sampling instruction is dropped; every call, tagged or
            untagged, rewritten as the format's canonical call; the recorded tool responses), a trajectory
            skipped when its calls or answer would change (:func:`tirl.data.sft.rerendered_example`).
    """

    sources: list[str] = field(default_factory=lambda: ["gsm8k_tir", "oasst"])
    limit: int | None = None
    seed: int = 0
    max_length: int = 4096
    max_per_problem: int | None = None
    trajectory_tokens: Literal["exact", "rerender"] = "exact"


@dataclass
class SFTOptimConfig:
    """Optimisation (TRL/transformers fields of the same meaning).

    Attributes:
        learning_rate: AdamW learning rate (5e-6 in the report, full weights; LoRA wants more).
        lr_scheduler_type: a transformers scheduler name (``cosine``).
        warmup_ratio: share of the optimiser steps with linear warm-up (0.04).
        weight_decay: AdamW weight decay.
        max_grad_norm: gradient clipping.
        num_train_epochs: passes over the data (ignored when ``max_steps`` > 0).
        max_steps: optimiser steps; -1 = from ``num_train_epochs``.
        batch_size: conversations per optimiser step over all processes (128 in the report).
        per_device_train_batch_size: conversations per forward/backward micro-batch on one process.
        loss_type: TRL's SFT loss (``nll``: token-level mean over the step's loss-mask tokens).
    """

    learning_rate: float = 5e-6
    lr_scheduler_type: str = "cosine"
    warmup_ratio: float = 0.04
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    num_train_epochs: float = 3.0
    max_steps: int = -1
    batch_size: int = 128
    per_device_train_batch_size: int = 1
    loss_type: str = "nll"


@dataclass
class SFTLoggingConfig:
    """Where metrics go.

    Attributes:
        jsonl: write ``metrics.jsonl`` in the output folder (``tirl plot`` reads it).
        report_to: extra transformers integrations: ``tensorboard``, ``wandb``.
        console: print a progress line per logged step (loss, token accuracy, step time, remaining time).
        logging_steps: log every this many optimiser steps.
    """

    jsonl: bool = True
    report_to: list[str] = field(default_factory=list)
    console: bool = True
    logging_steps: int = 1


@dataclass
class SFTConfig:
    """The SFT stage.

    Attributes:
        stage: a name recorded in the metrics.
        output_dir: checkpoints, metrics, the resolved config and the final model (``final/``) go here.
        save_steps: checkpoint every this many optimiser steps.
        save_total_limit: keep at most this many checkpoints (None = all).
        resume: continue from the newest ``checkpoint-N`` in ``output_dir`` when there is one.
        merge_lora: with LoRA, merge the adapter into the base weights for ``final/`` (a plain HF folder that
            ``tirl eval --model`` and ``tirl train rl`` load); False saves the adapter only.
        seed: global seed.
        bf16: mixed precision on GPUs (CPU runs use ``model.dtype``).
        model, data, optim, logging: the sections.
        protocol: the conversation format the conversations are rendered in (use the RL stage's).
    """

    stage: str = "sft"
    output_dir: str = "runs/sft"
    save_steps: int = 50
    save_total_limit: int | None = None
    resume: bool = True
    merge_lora: bool = True
    seed: int = 0
    bf16: bool = False
    model: ModelConfig = field(default_factory=ModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    optim: SFTOptimConfig = field(default_factory=SFTOptimConfig)
    logging: SFTLoggingConfig = field(default_factory=SFTLoggingConfig)
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)

    def validate(self, num_processes: int = 1) -> None:
        """Check the configuration and the batch arithmetic for ``num_processes`` training processes.

        Raises:
            ValueError: with the offending field(s) named.
        """
        o = self.optim
        if self.model.train_token_rows and not self.model.lora.enabled:
            raise ValueError("model.train_token_rows needs model.lora.enabled (without LoRA every row trains)")
        if self.model.train_token_rows and o.weight_decay:
            raise ValueError("model.train_token_rows needs optim.weight_decay 0 (decay would move every row)")
        rows_lr = self.model.token_rows_learning_rate
        if rows_lr is not None and not rows_lr > 0:  # `not >` also refuses NaN
            raise ValueError(f"model.token_rows_learning_rate must be > 0 (got {rows_lr}); None = optim.learning_rate")
        if rows_lr is not None and not self.model.train_token_rows:
            raise ValueError("model.token_rows_learning_rate needs model.train_token_rows (the rows it trains)")
        if o.batch_size < 1 or o.per_device_train_batch_size < 1:
            raise ValueError("optim.batch_size and optim.per_device_train_batch_size must be >= 1")
        if o.batch_size % (o.per_device_train_batch_size * num_processes):
            raise ValueError(
                f"optim.batch_size={o.batch_size} must be a multiple of optim.per_device_train_batch_size="
                f"{o.per_device_train_batch_size} x {num_processes} processes"
            )
        if o.max_steps == 0 or (o.max_steps < 0 and o.num_train_epochs <= 0):
            raise ValueError("set optim.max_steps > 0 or optim.num_train_epochs > 0")
        if not 0.0 <= o.warmup_ratio < 1.0:
            raise ValueError("optim.warmup_ratio must be in [0, 1)")
        if self.save_steps < 1 or self.logging.logging_steps < 1:
            raise ValueError("save_steps and logging.logging_steps must be >= 1")
        if self.data.max_length < 16:
            raise ValueError("data.max_length must be >= 16 tokens")
        check_choice("optim.loss_type", o.loss_type, ("nll", "dft"))
        check_choice("model.dtype", self.model.dtype, DTYPES)

    def gradient_accumulation_steps(self, num_processes: int = 1) -> int:
        """Micro-batches per optimiser step on each process."""
        return self.optim.batch_size // (self.optim.per_device_train_batch_size * num_processes)

    def to_dict(self) -> dict[str, Any]:
        """A plain nested dict (YAML/JSON-serialisable)."""
        return dataclasses.asdict(self, dict_factory=plain_dict)


def load_sft_config(path: str | Path | None = None, overrides: Sequence[str] = ()) -> SFTConfig:
    """Read an :class:`SFTConfig` from a YAML file (or the defaults when ``path`` is None) plus overrides.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        ValueError: invalid YAML, an unknown key (the message lists the known ones), or a value of the wrong
            type.
    """
    return load_dataclass_config(SFTConfig, path, overrides)


__all__ = ["SFTConfig", "SFTDataConfig", "SFTLoggingConfig", "SFTOptimConfig", "load_sft_config"]
