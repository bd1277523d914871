"""Two evaluation stores compared on the problems both have sampled (the held-out checks of issue 43).

The full baselines take hours; a check of a new model needs only the problems it has been sampled on. This
reads two ``tirl eval`` stores (``trajectories.jsonl``, its folder, or an archive's ``trajectories.jsonl.gz``),
keeps the problems present in both, and prints each store's avg pass@1 on them and the paired difference B - A
with a 95 % bootstrap interval over problems (the same resampled problems for both;
:func:`tirl.eval.metrics.bootstrap_interval`). ``report.py`` beside it imports :func:`compare` for its table.

    python experiments/real-math/compare_slice.py runs/real-math/base-gsm8k-cot runs/real-math/sft-gsm8k-tool
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tirl.eval.metrics import bootstrap_interval
from tirl.runs.layout import EVAL_TRAJECTORIES

STORE_ARCHIVE = EVAL_TRAJECTORIES + ".gz"
"""An evaluation store as ``archive.py save`` keeps it in ``results/JOB/``."""


def store_file(path: Path) -> Path | None:
    """The samples file of ``path``: a file is itself; a folder's is its ``trajectories.jsonl``, else its
    ``trajectories.jsonl.gz``; None when there is none."""
    if not path.is_dir():
        return path if path.is_file() else None
    return next((path / n for n in (EVAL_TRAJECTORIES, STORE_ARCHIVE) if (path / n).is_file()), None)


def per_problem(path: Path) -> dict[str, dict[str, float]]:
    """``problem_id -> {"pass1", "samples", "tokens", "calls"}`` of a store (the mean over its samples; a
    ``.gz`` file is read unpacked).

    Raises:
        FileNotFoundError: ``path`` has no samples file (:func:`store_file`).
    """
    file = store_file(path)
    if file is None:
        raise FileNotFoundError(f"no {EVAL_TRAJECTORIES} (or {STORE_ARCHIVE}) at {path}")
    data = file.read_bytes()
    text = (gzip.decompress(data) if file.name.endswith(".gz") else data).decode("utf-8")
    rows: dict[str, list[dict]] = defaultdict(list)
    for line in text.splitlines():
        if line.strip():
            rec = json.loads(line)
            rows[rec["problem_id"]].append(rec)
    return {
        pid: {
            "pass1": float(np.mean([bool(r.get("correct")) for r in recs])),
            "samples": len(recs),
            "tokens": float(np.mean([r.get("num_response_tokens", 0) for r in recs])),
            "calls": float(np.mean([len(r.get("tool_classes") or []) for r in recs])),
        }
        for pid, recs in rows.items()
    }


@dataclass(frozen=True)
class StoreOnSlice:
    """One store on the common problems: avg pass@1 (a fraction) and its 95 % interval, samples, mean response
    tokens and tool calls per sample (means of the per-problem means)."""

    pass1: float
    low: float
    high: float
    samples: int
    tokens: float
    calls: float


@dataclass(frozen=True)
class Comparison:
    """Stores A and B on the ``problems`` problems both have, and the paired difference B - A of their per-problem
    avg pass@1 (fractions; ``diff_low``/``diff_high``: its 95 % bootstrap interval over problems)."""

    problems: int
    a: StoreOnSlice
    b: StoreOnSlice
    diff: float
    diff_low: float
    diff_high: float


def _on(store: dict[str, dict[str, float]], common: list[str]) -> StoreOnSlice:
    scores = np.array([store[p]["pass1"] for p in common])
    low, high = bootstrap_interval(scores)
    return StoreOnSlice(
        pass1=float(scores.mean()),
        low=float(low),
        high=float(high),
        samples=int(sum(store[p]["samples"] for p in common)),
        tokens=float(np.mean([store[p]["tokens"] for p in common])),
        calls=float(np.mean([store[p]["calls"] for p in common])),
    )


def compare(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> Comparison:
    """Compare two :func:`per_problem` results on the problems both have.

    Raises:
        ValueError: no problem is in both.
    """
    common = sorted(set(a) & set(b))
    if not common:
        raise ValueError("no problem is in both stores")
    diff = np.array([b[p]["pass1"] - a[p]["pass1"] for p in common])
    low, high = bootstrap_interval(diff)
    return Comparison(len(common), _on(a, common), _on(b, common), float(diff.mean()), float(low), float(high))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the reference store (e.g. the base model's chain-of-thought)")
    parser.add_argument("b", type=Path, help="the store compared with it")
    args = parser.parse_args(argv)
    try:
        c = compare(per_problem(args.a), per_problem(args.b))
    except (ValueError, FileNotFoundError) as exc:
        raise SystemExit(str(exc)) from None
    print(f"{c.problems} problems in both stores")
    print(f"{'store':<44} {'samples':>8} {'avg pass@1':>11} {'95 % CI':>16} {'tokens':>7} {'calls':>6}")
    for name, s in ((args.a, c.a), (args.b, c.b)):
        print(
            f"{str(name)[-44:]:<44} {s.samples:>8} {100 * s.pass1:>10.1f}% "
            f"[{100 * s.low:5.1f}, {100 * s.high:5.1f}] {s.tokens:>7.0f} {s.calls:>6.2f}"
        )
    span = f"[{100 * c.diff_low:+.1f}, {100 * c.diff_high:+.1f}]"
    print(f"B - A: {100 * c.diff:+.1f} points, 95 % CI {span} (paired over problems)")


if __name__ == "__main__":
    main()
