"""Two evaluation stores compared on the problems both have sampled (the held-out checks of issue 43).

The full baselines take hours; a check of a new model needs only the problems it has been sampled on. This
reads two ``tirl eval`` stores (``trajectories.jsonl`` or its folder), keeps the problems present in both, and
prints each store's avg pass@1 on them and the paired difference B - A with a 95 % bootstrap interval over
problems (the same resampled problems for both; :func:`tirl.eval.metrics.bootstrap_interval`).

    python experiments/real-math/compare_slice.py runs/real-math/base-gsm8k-cot runs/real-math/sft-gsm8k-tool
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np

from tirl.eval.metrics import bootstrap_interval


def per_problem(path: Path) -> dict[str, dict[str, float]]:
    """``problem_id -> {"pass1", "samples", "tokens", "calls"}`` of a store (the mean over its samples)."""
    file = path / "trajectories.jsonl" if path.is_dir() else path
    rows: dict[str, list[dict]] = defaultdict(list)
    for line in file.read_text(encoding="utf-8").splitlines():
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path, help="the reference store (e.g. the base model's chain-of-thought)")
    parser.add_argument("b", type=Path, help="the store compared with it")
    args = parser.parse_args(argv)
    a, b = per_problem(args.a), per_problem(args.b)
    common = sorted(set(a) & set(b))
    if not common:
        raise SystemExit("no problem is in both stores")
    print(f"{len(common)} problems in both stores")
    print(f"{'store':<44} {'samples':>8} {'avg pass@1':>11} {'95 % CI':>16} {'tokens':>7} {'calls':>6}")
    for name, store in ((args.a, a), (args.b, b)):
        scores = np.array([store[p]["pass1"] for p in common])
        low, high = bootstrap_interval(scores)
        samples = sum(store[p]["samples"] for p in common)
        tokens = np.mean([store[p]["tokens"] for p in common])
        calls = np.mean([store[p]["calls"] for p in common])
        print(
            f"{str(name)[-44:]:<44} {samples:>8} {100 * scores.mean():>10.1f}% "
            f"[{100 * low:5.1f}, {100 * high:5.1f}] {tokens:>7.0f} {calls:>6.2f}"
        )
    diff = np.array([b[p]["pass1"] - a[p]["pass1"] for p in common])
    low, high = bootstrap_interval(diff)
    span = f"[{100 * low:+.1f}, {100 * high:+.1f}]"
    print(f"B - A: {100 * diff.mean():+.1f} points, 95 % CI {span} (paired over problems)")


if __name__ == "__main__":
    main()
