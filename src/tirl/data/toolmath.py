"""``toolmath``: generated problems where the Python tool is decisive, with a fixed held-out split.

The CPU learning-curve task. Every problem has an exact integer answer that a 0.5B model rarely gets by mental
arithmetic but one short program gets right: large sums and products, modular powers, digit sums of large
powers, prime and divisor counts, sums of powers, inclusion-exclusion and digit counts, greatest common
divisors (:data:`TOOLMATH_KINDS`, generators in :mod:`tirl.data.training`).

* **Training** draws from the data source ``toolmath:N`` (N generated problems of these kinds, seeded with the
  run's ``data.seed``) and GSM8K train word problems (``gsm8k:N``), see :func:`training_sources`.
* **Held-out evaluation** (:func:`heldout_problems`, packaged as the benchmark ``toolmath``): 12 problems of
  each kind generated with :data:`HELDOUT_SEED`, a seed no recipe trains with. Some kinds have small problem
  spaces (digit sums of powers of 2, 3, 7 and 11), so any seed can draw a held-out text again: training
  sources (``synthetic:...`` in :func:`tirl.data.training.load_training_problems`) therefore drop every
  problem whose text is in :func:`heldout_texts`. The packaged file
  ``benchmark_files/toolmath.jsonl`` is exactly this function's output (a test rebuilds and compares it), so
  it is fixed and reproducible.

Not covered: evaluation itself (``tirl eval --benchmarks toolmath``) and curation of public data.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from tirl.data.problem import Problem
from tirl.data.training import synthetic_problems

TOOLMATH_KINDS: tuple[str, ...] = (
    "add_big",
    "multiply",
    "gcd",
    "modpow",
    "digit_sum_power",
    "sum_of_powers",
    "divisor_count",
    "prime_count",
    "inclusion_exclusion",
    "count_digit",
)
"""The generated kinds of the task, each solvable with one short program."""

HELDOUT_SEED = 9_000_001
"""Generator seed of the held-out split (training recipes use small seeds; the tests check disjointness)."""

HELDOUT_PER_KIND = 12
"""Held-out problems per kind (120 in all)."""


def heldout_problems() -> list[Problem]:
    """The held-out split: :data:`HELDOUT_PER_KIND` problems of each of :data:`TOOLMATH_KINDS`, generated with
    :data:`HELDOUT_SEED`, in kind-cycling order. Deterministic (the same list on every machine)."""
    return synthetic_problems(HELDOUT_PER_KIND * len(TOOLMATH_KINDS), seed=HELDOUT_SEED, kinds=TOOLMATH_KINDS)


@functools.cache
def heldout_texts() -> frozenset[str]:
    """The problem texts of the held-out split, which training never uses."""
    return frozenset(p.problem for p in heldout_problems())


def training_sources(synthetic: int, gsm8k: int = 0) -> list[str]:
    """``data.sources`` entries for a training mixture of ``synthetic`` generated toolmath problems and the
    first ``gsm8k`` GSM8K train word problems (``["toolmath:2000", "gsm8k:500"]``).

    Raises:
        ValueError: a negative count.
    """
    if synthetic < 0 or gsm8k < 0:
        raise ValueError("counts must be >= 0")
    out = [f"toolmath:{synthetic}"] if synthetic else []
    if gsm8k:
        out.append(f"gsm8k:{gsm8k}")
    return out


def write_heldout(path: str | Path) -> int:
    """Write :func:`heldout_problems` as benchmark JSONL (``id, problem, answer, source, kind``); returns the
    number of rows."""
    rows = heldout_problems()
    Path(path).write_text("".join(json.dumps(p.to_dict(), ensure_ascii=False) + "\n" for p in rows), encoding="utf-8")
    return len(rows)


__all__ = [
    "HELDOUT_PER_KIND",
    "HELDOUT_SEED",
    "TOOLMATH_KINDS",
    "heldout_problems",
    "heldout_texts",
    "training_sources",
    "write_heldout",
]
