"""A/B of answer-verification speed: this checkout against a baseline checkout, interleaved in one run.

For a change to ``tirl.reward`` (issue 14 added answer reading before the fast paths and new worker checks),
the question is whether the integer and symbolic paths stay as fast as before. Each round runs one measurement
process per tree (``PYTHONPATH`` set to that tree's ``src``), alternating baseline and candidate, and reports
the best of the rounds and the candidate/baseline ratio. Workloads are ``benchmarks/reward_bench.py``'s
``integer`` (4000 items) and ``symbolic`` (400 items), generated with the same seed in both trees.

Measures, per tree:

* ``integer_fast_path``: items per CPU second of ``Verifier._prepare`` (extraction, reading, string and
  integer fast paths; everything the integer workload needs), best of 7 passes, each with the cache of
  reference readings emptied first (in training a reference repeats for every sample of its group, so the
  real integer path is faster than measured here);
* ``symbolic_worker``: items per CPU second of the worker's ``check`` (math-verify plus guards, in process),
  best of 2 passes;
* ``integer_pool`` and ``symbolic_pool``: verifications per wall second through a warm 2-worker
  ``LocalSandbox`` (what ``reward_bench.py`` reports), best of 3 and 1 passes.

CPU seconds are far less sensitive than wall seconds to other jobs on a shared machine; both are printed.

Usage::

    git worktree add /tmp/base <commit>        # or: git archive <commit> src benchmarks | tar -x -C /tmp/base
    .venv/bin/python benchmarks/reward_ab.py --baseline /tmp/base --rounds 3 --json out.json

Prints a table and writes JSON (default ``benchmarks/results/reward_ab.json``) with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

MEASURE = r"""
import asyncio, json, random, sys, time
sys.path.insert(0, sys.argv[1] + "/benchmarks")
from reward_bench import integer_cases, symbolic_cases, run_tirl
from tirl.reward import PRELOAD_MODULES, Verifier, VerifierStats, VerifyItem
from tirl.reward import verifier as verifier_module
from tirl.reward.worker import check

def cold():
    # A tree that caches readings of references must not gain from the repeated passes over one workload.
    cached = getattr(verifier_module, "_gold_view", None)
    if cached is not None:
        cached.cache_clear()
from tirl.sandbox import LocalSandbox

rng = random.Random(0)
ints, syms = integer_cases(4000, rng), symbolic_cases(400, rng)

def best_cpu(fn, reps):
    best = float("inf")
    for _ in range(reps):
        start = time.process_time(); fn(); best = min(best, time.process_time() - start)
    return best

verifier = Verifier(stats=VerifierStats())
items = [VerifyItem(c.response, c.gold) for c in ints]
out = {"integer_fast_path": len(items) / best_cpu(lambda: (cold(), verifier._prepare(items)), 7)}
for c in syms[:20]:
    check(c.gold, c.answer)
out["symbolic_worker"] = len(syms) / best_cpu(lambda: [check(c.gold, c.answer) for c in syms], 2)
out["symbolic_agree"] = sum(check(c.gold, c.answer)["correct"] == c.expected for c in syms)

async def pool():
    sandbox = LocalSandbox(workers=2, preload=PRELOAD_MODULES)
    await sandbox.start()
    try:
        await run_tirl(symbolic_cases(8, random.Random(0)), sandbox)
        passes = []
        for _ in range(3):
            cold()
            passes.append((await run_tirl(ints, sandbox))["per_s"])
        out["integer_pool"] = max(passes)
        cold()
        out["symbolic_pool"] = (await run_tirl(syms, sandbox))["per_s"]
    finally:
        await sandbox.aclose()

if sys.argv[2] == "pool":
    asyncio.run(pool())
print(json.dumps(out))
"""

METRICS = (
    ("integer_fast_path", "integer, fast paths", "items per CPU s"),
    ("symbolic_worker", "symbolic, worker check", "items per CPU s"),
    ("integer_pool", "integer, through the pool", "verifications per wall s"),
    ("symbolic_pool", "symbolic, through the pool", "verifications per wall s"),
)


def measure(tree: Path, pool: bool) -> dict[str, Any]:
    """One measurement process with ``tree``'s ``src`` first on the path (its benchmark workloads too)."""
    env = {**os.environ, "PYTHONPATH": str(tree / "src")}
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(tree), "pool" if pool else "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"measurement in {tree} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", type=Path, required=True, help="a checkout (with src/ and benchmarks/)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=HERE / "results" / "reward_ab.json")
    parser.add_argument("--cpu-only", action="store_true", help="skip the pool (wall-clock) measurements")
    args = parser.parse_args()
    trees = {"baseline": args.baseline.resolve(), "candidate": ROOT}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    load_before = os.getloadavg()
    for _ in range(args.rounds):
        for name, tree in trees.items():
            runs[name].append(measure(tree, pool=not args.cpu_only))
    load_after = os.getloadavg()
    metrics = [m for m in METRICS if not (args.cpu_only and m[0].endswith("_pool"))]
    best = {name: {key: max(r[key] for r in rs) for key, _, _ in metrics} for name, rs in runs.items()}
    table = Table(title=f"reward A/B, best of {args.rounds} rounds (load {load_before[0]:.1f} -> {load_after[0]:.1f})")
    for col in ("path", "unit", "baseline", "candidate", "candidate / baseline"):
        table.add_column(col, justify="left" if col in ("path", "unit") else "right")
    for key, label, unit in metrics:
        b, c = best["baseline"][key], best["candidate"][key]
        table.add_row(label, unit, f"{b:,.1f}", f"{c:,.1f}", f"{c / b:.2f}")
    Console(width=150).print(table)
    report = {
        "baseline": str(trees["baseline"]),
        "candidate": str(trees["candidate"]),
        "rounds": args.rounds,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cpus": os.cpu_count(),
        "runs": runs,
        "best": best,
        "ratio": {key: best["candidate"][key] / best["baseline"][key] for key, _, _ in metrics},
        "symbolic_agree": {name: [r["symbolic_agree"] for r in rs] for name, rs in runs.items()},
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
