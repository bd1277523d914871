"""Training: the SFT stage and GRPO-RoC agentic RL on TRL (configs, rollout function, trainers, metrics, plots).

Entry points: :func:`train` (GRPO-RoC, :mod:`tirl.train.rl`) with :class:`RLConfig` and :func:`load_config`
(:mod:`tirl.train.config`); :func:`train_sft` (:mod:`tirl.train.sft`) with :class:`SFTConfig`
(:mod:`tirl.train.sft_config`). Helpers stay in their modules.

Names are imported on first use (module ``__getattr__``): importing the package imports neither torch,
transformers nor trl.
"""

from __future__ import annotations

from tirl._lazy import lazy_getattr

_EXPORTS = {
    "RLConfig": "tirl.train.config",
    "load_config": "tirl.train.config",
    "train": "tirl.train.rl",
    "SFTConfig": "tirl.train.sft_config",
    "train_sft": "tirl.train.sft",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
