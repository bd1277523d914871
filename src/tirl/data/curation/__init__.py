"""RL data curation as the rStar2-Agent report describes it (arXiv 2508.20722, section 4.1): ``tirl data curate``.

Modules, one step each: :mod:`~tirl.data.curation.text` (normal forms, tokens, n-grams),
:mod:`~tirl.data.curation.sources` (what is read), :mod:`~tirl.data.curation.answers` (the answer filter),
:mod:`~tirl.data.curation.dedup` (duplicates), :mod:`~tirl.data.curation.decontam` (benchmark overlap),
:mod:`~tirl.data.curation.consistency` (label check by sampling), :mod:`~tirl.data.curation.report` and
:mod:`~tirl.data.curation.pipeline` (:func:`curate`, which runs them in order). Documented in docs/data.md.
"""

from tirl.data.curation.answers import AnswerPolicy, check_answers, classify_answer
from tirl.data.curation.consistency import ConsistencyConfig, label_consistency
from tirl.data.curation.decontam import DEFAULT_BENCHMARKS, ContaminationIndex, benchmark_references
from tirl.data.curation.dedup import find_duplicates
from tirl.data.curation.pipeline import CurationConfig, CurationResult, Drop, curate, curate_problems

__all__ = [
    "AnswerPolicy",
    "ConsistencyConfig",
    "ContaminationIndex",
    "CurationConfig",
    "CurationResult",
    "DEFAULT_BENCHMARKS",
    "Drop",
    "benchmark_references",
    "check_answers",
    "classify_answer",
    "curate",
    "curate_problems",
    "find_duplicates",
    "label_consistency",
]
