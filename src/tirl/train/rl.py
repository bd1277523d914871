"""GRPO-RoC training on TRL's ``GRPOTrainer``: build the trainer from an :class:`RLConfig`, run, resume, chain stages.

Covers the pieces around :class:`tirl.train.rollout_func.RocRolloutFunc`: loading the policy (built-in name, HF
folder, GGUF; optional LoRA), the dataset of problems (``prompt`` = problem text), the mapping of tirl's config
onto ``trl.GRPOConfig`` (one optimiser step per RL step, ``num_generations`` = G), the trainer subclass that
uses tirl's per-group advantages, metric logging (JSONL, console, TensorBoard/W&B through ``report_to``),
checkpointing, resume, and starting a new stage from the last checkpoint of the previous one with a fresh
optimiser. It does not generate or select trajectories itself (:mod:`tirl.train.rollout_func`).

Resume and stages:

* ``output_dir/checkpoint-N`` is written every ``save_steps`` steps (weights or LoRA adapter, optimiser,
  scheduler, RNG states, trainer state). With ``resume: true`` (default) a run whose ``output_dir`` holds a
  checkpoint continues from the newest one; metrics of later steps that a crashed run had logged are dropped.
* ``init_from: DIR`` starts a stage from another run's checkpoint (or final model) with fresh optimiser and
  scheduler state, which is how stage 2 follows stage 1 (``configs/stage2.yaml``). ``init_from: auto:DIR``
  takes the newest ``checkpoint-N`` inside ``DIR`` (or ``DIR/final``).
* The final weights go to ``output_dir/final``; ``output_dir/config.yaml`` records the configuration used.

Not covered here: vLLM server mode for multi-turn rollouts (TRL's ``server`` mode only generates single turns).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.data.training import load_training_problems
from tirl.train.config import RLConfig, dump_config
from tirl.train.metrics import MetricsLog, log_value
from tirl.train.rollout_func import (
    ADVANTAGE_KEY,
    AgentLoopSource,
    RocRolloutFunc,
    Scorer,
    TrajectorySource,
    VerifierScorer,
    passthrough_reward,
)
from tirl.train.watchdog import RunStopped

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------------------------------------------
# checkpoints


def last_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` folder in ``output_dir`` (largest N), or None."""
    root = Path(output_dir)
    if not root.is_dir():
        return None
    found = []
    for child in root.iterdir():
        name = child.name
        if child.is_dir() and name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit():
            found.append((int(name[len("checkpoint-"):]), child))
    return max(found)[1] if found else None


def resolve_init_from(spec: str) -> Path:
    """The weights folder named by ``init_from``: a folder, or ``auto:DIR`` (newest checkpoint in DIR, else DIR/final).

    Raises:
        FileNotFoundError: nothing usable there.
    """
    if spec.startswith("auto:"):
        root = Path(spec[len("auto:"):])
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


def _is_adapter(path: Path) -> bool:
    return (path / "adapter_config.json").exists()


# --------------------------------------------------------------------------------------------------------------
# the trainer subclass and callbacks


def _trl() -> Any:
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    import trl

    return trl


def make_trainer_class() -> type:
    """``RocGRPOTrainer``: ``trl.GRPOTrainer`` using tirl's per-group advantages (built lazily: imports trl)."""
    trl = _trl()
    import torch

    class RocGRPOTrainer(trl.GRPOTrainer):
        """``GRPOTrainer`` whose advantages are tirl's, computed per kept group by the rollout function.

        TRL computes its own group advantages from the passed-through rewards; they are replaced here by the
        ones of :func:`tirl.algo.advantages.group_advantages` (paper Eq. 7, std floor, masking), and the largest
        difference is logged as ``check/adv_diff_vs_trl``: near 0 for binary rewards whenever TRL grouped the
        rows the same way as the rollout function did.
        """

        tirl_timing: dict[str, float]
        tirl_entropy_mask_scope: str = "sequence"  # optim.entropy_mask_scope, set by build_run

        def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
            output = super()._generate_and_score_completions(inputs)
            ours = [row.get(ADVANTAGE_KEY) for row in inputs]
            if all(a is not None for a in ours) and len(ours) == len(output["advantages"]):
                trl_adv = output["advantages"]
                mine = torch.tensor(ours, dtype=trl_adv.dtype, device=trl_adv.device)
                mode = "train" if self.model.training else "eval"
                self._metrics[mode]["check/adv_diff_vs_trl"].append(float((mine - trl_adv).abs().max().item()))
                output["advantages"] = mine
            return output

        def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            """TRL's loss on the micro-batch cut to the rows and columns that carry gradient
            (:mod:`tirl.train.micro_batch`; same loss value and gradient); the share of token positions still
            computed is logged as ``tirl/update/computed_fraction``."""
            from tirl.train.micro_batch import compact_micro_batch, row_policy

            batch_wide = self.tirl_entropy_mask_scope == "batch" and self.top_entropy_quantile < 1.0
            policy = row_policy(self.loss_type, float(self.beta), batch_wide)
            inputs, done = compact_micro_batch(inputs, policy)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["tirl/update/computed_fraction"].append(done.computed_fraction)
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)

        def get_high_entropy_mask(self, entropies: Any, mask: Any, threshold: float) -> Any:
            """Per-sequence top fraction (``optim.entropy_mask_scope: sequence``, the release's ranking) or
            TRL's batch-wide quantile (``batch``); see :mod:`tirl.algo.entropy_mask`. ``mask`` is TRL's
            completion mask times the tool mask, so injected tokens never enter."""
            if self.tirl_entropy_mask_scope == "batch":
                return super().get_high_entropy_mask(entropies, mask, threshold)
            from tirl.algo.entropy_mask import top_entropy_mask

            return top_entropy_mask(entropies, mask, float(self.top_entropy_quantile))

        def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
            timing = getattr(self, "tirl_timing", None) or {}
            if "step_s" in timing:
                logs["tirl/time/step_s"] = timing["step_s"]
                rollout = self._metrics["train"].get("tirl/time/rollout_s")
                verify = self._metrics["train"].get("tirl/time/verify_s")
                if rollout and verify:
                    spent = sum(rollout) / len(rollout) + sum(verify) / len(verify)
                    logs["tirl/time/update_s"] = max(0.0, timing["step_s"] - spent)
            super().log(logs, start_time)

    return RocGRPOTrainer


def _callbacks(config: RLConfig, timing: dict[str, float], metrics_log: MetricsLog | None,
               rollout: RocRolloutFunc | None = None) -> list[Any]:
    from transformers import TrainerCallback

    class WatchdogStop(TrainerCallback):
        """Stops training (after saving a checkpoint) when the rollout's watch-dog asks for it; with several
        processes the flag is reduced with max so that every process stops at the same step."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if rollout is None:
                return
            flag = 1.0 if rollout.watchdog.stop_reason else 0.0
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                import torch

                t = torch.tensor([flag])
                dist.all_reduce(t, op=dist.ReduceOp.MAX)
                flag = float(t.item())
                if flag and not rollout.watchdog.stop_reason:
                    rollout.watchdog.stop_reason = f"stopped at step {state.global_step}: another process's watchdog"
            if flag:
                control.should_training_stop = True
                control.should_save = True

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            timing["t0"] = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
            if "t0" in timing:
                timing["step_s"] = time.perf_counter() - timing["t0"]

    class JsonlMetrics(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if metrics_log is None or not state.is_world_process_zero or not logs:
                return
            record = {"step": state.global_step, "stage": config.stage, "time": time.time()}
            record.update({k: v for k, v in logs.items() if isinstance(v, (int, float)) or v is None})
            metrics_log.write(record)

    class RichConsole(TrainerCallback):
        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
            if not config.logging.console or not state.is_world_process_zero or not logs:
                return
            if "tirl/reward/mean" not in logs:
                return
            from rich.console import Console

            def g(key: str) -> float:
                return log_value(logs, key)

            Console(stderr=True).print(
                f"[bold]{config.stage}[/] step {state.global_step}/{state.max_steps}  "
                f"reward {g('tirl/reward/mean'):.3f}  kept {g('tirl/reward/kept_mean'):.3f}  "
                f"tool-err(correct) {g('tirl/tool_error_in_correct/before'):.3f}->"
                f"{g('tirl/tool_error_in_correct/after'):.3f}  len {g('tirl/length/mean'):.0f} "
                f"(p90 {g('tirl/length/p90'):.0f})  trunc {g('tirl/truncation_rate'):.2f}  "
                f"calls/traj {g('tirl/tool_calls/per_traj'):.2f}  step {g('tirl/time/step_s'):.1f}s "
                f"(rollout {g('tirl/time/rollout_s'):.1f}s)"
            )

    return [StepTimer(), JsonlMetrics(), RichConsole(), WatchdogStop()]


# --------------------------------------------------------------------------------------------------------------
# building


@dataclass
class BuiltRun:
    """Everything :func:`build_trainer` made (kept for tests and for closing)."""

    trainer: Any
    rollout: RocRolloutFunc
    problems: list[Problem]
    resume_from: Path | None
    metrics_log: MetricsLog | None

    def close(self) -> None:
        """Release the rollout's sandbox, engine and event loop."""
        closer = getattr(self.rollout.source, "close", None)
        if closer is not None:
            closer()


def model_reference(name_or_path: str) -> str:
    """Resolve ``tiny:<tokenizer>`` (a cached tiny random model on that tokenizer, for smoke runs) to its folder;
    any other reference is returned unchanged (``tirl.models.load`` resolves built-in names, folders, GGUF)."""
    if name_or_path.startswith("tiny:"):
        from tirl.models import cached_tiny_model

        return str(cached_tiny_model(name_or_path[len("tiny:"):]))
    return name_or_path


def load_policy(config: RLConfig, init_from: Path | None = None) -> tuple[Any, Any, Any]:
    """The policy model, its tokenizer and a peft config (or None) for a run.

    With ``init_from`` the weights come from that folder: a full model folder is loaded as the model; a LoRA
    adapter folder is loaded on top of ``model.name_or_path`` and kept trainable (no new adapter is added).
    ``model.init_token_rows`` is applied whenever the weights come from ``model.name_or_path`` (so a resumed
    LoRA run sees the same rows).

    Raises:
        ValueError: a name in ``model.init_token_rows`` is not one token of the tokenizer.

    Returns:
        ``(model, tokenizer, peft_config)``; ``peft_config`` is None when LoRA is off or the model already is a
        trainable peft model.
    """
    from tirl.models import load

    dtype = config.model.dtype
    if init_from is not None and not _is_adapter(init_from):
        model, tokenizer = load(str(init_from), dtype=dtype)
    else:
        model, tokenizer = load(model_reference(config.model.name_or_path), dtype=dtype)
        if config.model.init_token_rows:
            from tirl.models.token_rows import init_token_rows

            done = init_token_rows(model, tokenizer, config.model.init_token_rows)
            logger.info("re-initialised token rows from their spelling: %s", done)
    peft_config = None
    if init_from is not None and _is_adapter(init_from):
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(init_from), is_trainable=True)
    elif config.model.lora.enabled:
        from peft import LoraConfig

        lora = config.model.lora
        peft_config = LoraConfig(r=lora.r, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                 target_modules=list(lora.target_modules), task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


def grpo_args(config: RLConfig, num_processes: int = 1) -> Any:
    """The ``trl.GRPOConfig`` of a run (see the module docstring of :mod:`tirl.train.config` for defaults)."""
    trl = _trl()
    import torch

    r, o = config.rollout, config.optim
    spg = config.steps_per_generation(num_processes)
    report_to = [x for x in config.logging.report_to if x not in ("jsonl", "console")] or "none"
    kwargs: dict[str, Any] = dict(
        output_dir=config.output_dir,
        max_steps=config.max_steps,
        per_device_train_batch_size=o.per_device_train_batch_size,
        gradient_accumulation_steps=spg,
        steps_per_generation=spg,
        num_generations=r.group_size,
        num_iterations=1,
        max_completion_length=r.max_response_tokens,
        temperature=r.temperature,
        top_p=r.top_p,
        learning_rate=o.learning_rate,
        lr_scheduler_type=o.lr_scheduler_type,
        warmup_steps=o.warmup_steps,
        weight_decay=o.weight_decay,
        max_grad_norm=o.max_grad_norm,
        loss_type=o.loss_type,
        epsilon=o.epsilon,
        epsilon_high=o.epsilon_high,
        beta=o.beta,
        entropy_coef=o.entropy_coef,
        top_entropy_quantile=o.retain_high_entropy_token_ratio,  # ranking: RocGRPOTrainer.get_high_entropy_mask
        scale_rewards="group",
        mask_truncated_completions=False,
        logging_steps=1,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        report_to=report_to,
        seed=config.seed,
        bf16=bool(config.bf16 and torch.cuda.is_available()),
        gradient_checkpointing=config.model.gradient_checkpointing,
        remove_unused_columns=False,
        shuffle_dataset=True,
        disable_tqdm=True,
        log_completions=False,
        use_vllm=r.use_vllm,
        dataloader_num_workers=0,
    )
    if r.use_vllm:
        kwargs.update(vllm_mode=r.vllm_mode, vllm_gpu_memory_utilization=r.vllm_gpu_memory_utilization,
                      vllm_tensor_parallel_size=r.vllm_tensor_parallel_size)
        if r.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = r.vllm_server_base_url
    return trl.GRPOConfig(**kwargs)


def filter_prompt_length(problems: Sequence[Problem], tokenizer: Any, max_tokens: int,
                         protocol: Any = None) -> list[Problem]:
    """Problems whose rendered prompt (system, tools, user, generation prompt; ``protocol``, a
    :class:`tirl.protocol.ProtocolConfig`, None for the default) has at most ``max_tokens`` tokens."""
    from tirl.protocol import render_prompt_ids

    kept = [p for p in problems if len(render_prompt_ids(tokenizer, p.problem, protocol)) <= max_tokens]
    if len(kept) < len(problems):
        logger.info("skipped %d problems with prompts over %d tokens", len(problems) - len(kept), max_tokens)
    return kept


def build_trainer(
    config: RLConfig,
    *,
    problems: Sequence[Problem] | None = None,
    source: TrajectorySource | None = None,
    scorer: Scorer | None = None,
    num_processes: int | None = None,
) -> BuiltRun:
    """Build the GRPO-RoC trainer of ``config``.

    Args:
        config: the run.
        problems: training problems (default: from ``config.data``).
        source: trajectory source (default :class:`~tirl.train.rollout_func.AgentLoopSource` on the policy).
        scorer: reward (default :class:`~tirl.train.rollout_func.VerifierScorer`).
        num_processes: training processes (default: the world size the training arguments see).

    Returns:
        A :class:`BuiltRun`; call ``run.trainer.train(resume_from_checkpoint=run.resume_from)`` (or use
        :func:`train`).

    Raises:
        ValueError: an invalid configuration, or no problems left after filtering.
        FileNotFoundError: ``init_from`` names nothing usable.
    """
    from datasets import Dataset

    if num_processes is None:
        # The training arguments set up accelerate's distributed state (on CPU a PartialState created earlier can
        # still report one process), so ask them for the world size.
        num_processes = int(grpo_args(config, 1).world_size)
    config.validate(num_processes)
    resume_from = last_checkpoint(config.output_dir) if config.resume else None
    init_from = None
    if config.init_from and resume_from is None:
        init_from = resolve_init_from(config.init_from)
    model, tokenizer, peft_config = load_policy(config, init_from)
    if problems is None:
        problems = load_training_problems(config.data.sources, seed=config.data.seed, limit=config.data.limit)
        problems = filter_prompt_length(problems, tokenizer, config.rollout.max_prompt_tokens, config.protocol)
    problems = list(problems)
    if not problems:
        raise ValueError("no training problems (check data.sources and rollout.max_prompt_tokens)")
    if len(problems) < config.problems_per_step:
        raise ValueError(f"{len(problems)} problems are fewer than problems_per_step={config.problems_per_step}")
    dataset = Dataset.from_list([{"prompt": p.problem, "problem_id": p.id, "answer": p.answer} for p in problems])

    if source is None:
        source = AgentLoopSource(config, tokenizer)
        if source.context_window is None:
            source.context_window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if scorer is None:  # verification on the run's executor (a sandbox service URL included), not a second pool
        scorer = VerifierScorer(tokenizer, on_executor=getattr(source, "run_on_executor", None))
    from tirl.protocol.render import stop_token_ids

    stops = list(stop_token_ids(tokenizer, config.protocol))
    pad_id = stops[0] if stops else tokenizer.eos_token_id
    rollout = RocRolloutFunc(config, problems, source, scorer, pad_token_id=pad_id)

    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    metrics_log = MetricsLog(Path(config.output_dir) / "metrics.jsonl") if config.logging.jsonl else None
    if metrics_log is not None:
        done = _checkpoint_step(resume_from) if resume_from is not None else 0
        dropped = metrics_log.truncate_after(done)
        if dropped:
            logger.info("dropped %d metric records logged after step %d by an interrupted run", dropped, done)
    dump_config(config, Path(config.output_dir) / "config.yaml")

    timing: dict[str, float] = {}
    trainer_cls = make_trainer_class()
    trainer = trainer_cls(
        model=model,
        reward_funcs=[passthrough_reward],
        args=grpo_args(config, num_processes),
        train_dataset=dataset,
        processing_class=tokenizer,
        peft_config=peft_config,
        rollout_func=rollout,
        callbacks=_callbacks(config, timing, metrics_log, rollout),
    )
    trainer.tirl_timing = timing
    trainer.tirl_entropy_mask_scope = config.optim.entropy_mask_scope
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return BuiltRun(trainer, rollout, problems, resume_from, metrics_log)


def _checkpoint_step(path: Path) -> int:
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return 0


def train(config: RLConfig, **kwargs: Any) -> Path:
    """Build and run one stage; returns the folder of the final weights (``output_dir/final``).

    Keyword arguments go to :func:`build_trainer`. The rollout's sandbox and event loop are released even when
    training fails.

    Raises:
        tirl.train.watchdog.RunStopped: the watch-dog stopped the run (a checkpoint of its last step is saved;
            no ``final`` folder is written).
    """
    run = build_trainer(config, **kwargs)
    try:
        if run.resume_from is not None:
            logger.info("resuming from %s", run.resume_from)
        run.trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
        if run.rollout.watchdog.stop_reason:
            raise RunStopped(run.rollout.watchdog.stop_reason)
        final = Path(config.output_dir) / "final"
        run.trainer.save_model(str(final))
        if run.trainer.accelerator.is_main_process:
            run.trainer.processing_class.save_pretrained(str(final))
        return final
    finally:
        run.close()


__all__ = [
    "BuiltRun",
    "build_trainer",
    "filter_prompt_length",
    "grpo_args",
    "last_checkpoint",
    "load_policy",
    "make_trainer_class",
    "resolve_init_from",
    "train",
]
