"""Training: the SFT stage and GRPO-RoC agentic RL on TRL (configs, rollout function, trainers, metrics, plots).

Heavy imports (torch, transformers, trl) happen only in :mod:`tirl.train.rl` and when a trainer is built.
"""

from tirl.train.config import RLConfig, load_config

__all__ = ["RLConfig", "load_config"]
