"""``RocGRPOTrainer``: TRL's ``GRPOTrainer`` with tirl's per-group advantages, compacted micro-batches, the
per-sequence entropy mask and step timing.

Imports torch and TRL at module level: :mod:`tirl.train.rl` imports it when it builds a trainer.
"""

from __future__ import annotations

from typing import Any

import torch

from tirl.train.common import trl_module
from tirl.train.rollout_func import ADVANTAGE_KEY

trl = trl_module()


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

    Attributes:
        tirl_timing: the step timer's dict (:class:`tirl.train.callbacks.StepTimer`), read by :meth:`log`.
        tirl_entropy_mask_scope: ``optim.entropy_mask_scope`` (``sequence`` or ``batch``).
    """

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
        return output

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        """TRL's ``RepeatSampler`` whose shuffle is a function of ``(seed, epoch)`` (:class:`EpochRepeatSampler`),
        so that a run resumed in a later epoch sees the same order as one that never stopped."""
        base = super()._get_train_sampler(dataset)
        if not isinstance(base, trl.trainer.utils.RepeatSampler) or not base.shuffle:
            return base
        return EpochRepeatSampler(base.data_source, base.mini_repeat_count, base.batch_size, base.repeat_count,
                                  shuffle=True, seed=base.seed)

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        """transformers' checkpoint, then :func:`tirl.train.common.write_checkpoint_marker` (main process): a
        checkpoint without its marker or with a file of another size is half-written and never resumed from."""
        super()._save_checkpoint(model, trial)
        if self.args.should_save:
            from pathlib import Path

            from tirl.train.common import write_checkpoint_marker

            folder = Path(self._get_output_dir(trial=trial)) / f"checkpoint-{self.state.global_step}"
            write_checkpoint_marker(folder, self.state.global_step)

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
        if "step_s" in timing:
            logs["tirl/time/step_s"] = timing["step_s"]
            rollout = self._metrics["train"].get("tirl/time/rollout_s")
            verify = self._metrics["train"].get("tirl/time/verify_s")
            if rollout and verify:
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


__all__ = ["EpochRepeatSampler", "RocGRPOTrainer"]
