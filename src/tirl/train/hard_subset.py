"""Re-export of :mod:`tirl.data.hard_subset` (the stage-3 hard-subset curation step lives in ``tirl.data``, below
``tirl.train`` in the package order; this old import path keeps working)."""

from tirl.data.hard_subset import (
    Generate,
    HardSubsetConfig,
    HardSubsetResult,
    ScoreFn,
    count_correct,
    filter_hard,
)

__all__ = ["Generate", "HardSubsetConfig", "HardSubsetResult", "ScoreFn", "count_correct", "filter_hard"]
