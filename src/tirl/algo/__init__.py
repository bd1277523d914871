"""RL algorithms of tirl, pure Python (no torch): Resample-on-Correct selection and GRPO advantages."""

from tirl.algo.advantages import group_advantages, grouped_advantages
from tirl.algo.roc import (
    Candidate,
    RocConfig,
    Selection,
    candidate,
    class_quotas,
    p_err,
    p_format,
    p_total,
    select,
    select_group,
)

__all__ = [
    "Candidate",
    "RocConfig",
    "Selection",
    "candidate",
    "class_quotas",
    "group_advantages",
    "grouped_advantages",
    "p_err",
    "p_format",
    "p_total",
    "select",
    "select_group",
]
