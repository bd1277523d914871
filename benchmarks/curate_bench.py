"""Speed of the non-model curation steps (normalise, answer filter, dedup, decontamination) on 100K problems,
against naive implementations of dedup and decontamination measured in the same process.

Workload: the packaged RL sources (GSM8K train, MATH train, AIME 1983-2023, CHAMP; 13,392 problems) replicated
with perturbations up to ``--problems``: copy k of a problem adds k to every number in its text and to its
answer (a variant: a different problem to dedup, since its answer differs), and every tenth copy is instead the
original with doubled spaces (an exact duplicate). Decontamination runs against the five packaged benchmarks
(8-grams); the answer probe is off (integer answers never need it).

Phases:

- ``curate_problems`` on all problems (the target: under 120 s on 2 cores);
- ``naive`` (baseline) on ``--naive`` problems (the same replication of ``--naive / 8`` base problems):
  all-pairs Jaccard dedup and a scan of every benchmark problem's n-gram set per problem, the same decisions
  without the indexes; ``curate_problems`` on the same subset gives the ratio.

Prints a table and writes ``benchmarks/results/curate_bench.json`` (with the load average: on a shared machine
absolute times move with the load; the ratio is measured under the same load).

Usage: ``python benchmarks/curate_bench.py [--problems 100000] [--naive 3000]``
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tirl.data.curation import AnswerPolicy, CurationConfig, curate_problems
from tirl.data.curation.decontam import benchmark_references
from tirl.data.curation.sources import SourceProblem
from tirl.data.curation.text import ngram_hashes, normalize_answer, normalize_problem, word_tokens, words_only
from tirl.data.problem import Problem
from tirl.data.training import load_rl_set

_NUMBER = re.compile(r"\d+")


def workload(total: int, base_size: int | None = None) -> list[SourceProblem]:
    base = [(name, p) for name in ("gsm8k", "math", "aime", "champ") for p in load_rl_set(name)]
    base = base[:: max(1, len(base) // base_size)][:base_size] if base_size else base
    out: list[SourceProblem] = []
    copy = 0
    while len(out) < total:
        for name, p in base:
            if len(out) >= total:
                break
            if copy == 0:
                out.append(SourceProblem(name, p))
            elif copy % 10 == 0:
                out.append(SourceProblem(name, Problem(f"{p.id}-dup{copy}", p.problem.replace(" ", "  "), p.answer)))
            else:
                text = _NUMBER.sub(lambda m, k=copy: str(int(m.group()) + k), p.problem)
                out.append(SourceProblem(name, Problem(f"{p.id}-v{copy}", text, str(int(p.answer) + copy))))
        copy += 1
    return out


def naive(problems: list[SourceProblem], refs: list[tuple[str, str]], cfg: CurationConfig) -> tuple[int, int]:
    """The same dedup and decontamination decisions by brute force: (near/exact duplicates, contaminated)."""
    items = [(normalize_problem(s.problem.problem), normalize_answer(s.problem.answer)) for s in problems]
    tokens = [word_tokens(t) for t, _ in items]
    grams = [ngram_hashes(t, cfg.dedup_n) for t in tokens]
    kept: list[int] = []
    dups = 0
    for i in range(len(items)):
        dup = any(tokens[j] == tokens[i] for j in kept) or any(
            items[j][1] == items[i][1]
            and len(grams[i] & grams[j]) / max(1, len(grams[i] | grams[j])) >= cfg.dedup_threshold
            for j in kept
        )
        if dup:
            dups += 1
        else:
            kept.append(i)
    ref_grams = [ngram_hashes(words_only(word_tokens(t)), cfg.decontam_n) for _, t in refs]
    contaminated = 0
    for i in kept:
        mine = ngram_hashes(words_only(tokens[i]), cfg.decontam_n)
        if any(mine & r for r in ref_grams):
            contaminated += 1
    return dups, contaminated


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--problems", type=int, default=100_000)
    ap.add_argument("--naive", type=int, default=3000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "curate_bench.json"))
    args = ap.parse_args()
    load_before = os.getloadavg()[0]
    cfg = CurationConfig(answers=AnswerPolicy(probe=False))
    refs = benchmark_references(cfg.benchmarks)
    start = time.perf_counter()
    problems = workload(args.problems)
    build_s = time.perf_counter() - start

    start = time.perf_counter()
    kept, drops, seconds = curate_problems(problems, cfg, references=refs)
    full_s = time.perf_counter() - start

    subset = workload(args.naive, base_size=max(1, args.naive // 8))  # 8 copies of each: variants and dups
    start = time.perf_counter()
    sub_kept, sub_drops, _ = curate_problems(subset, cfg, references=refs)
    indexed_s = time.perf_counter() - start
    start = time.perf_counter()
    dups, contaminated = naive(subset, refs, cfg)
    naive_s = time.perf_counter() - start
    sub_dups = sum(1 for d in sub_drops if d.step == "dedup")
    sub_cont = sum(1 for d in sub_drops if d.step == "decontam")
    agree = (dups, contaminated) == (sub_dups, sub_cont)

    rows = [
        {
            "phase": f"curate_problems, {len(problems):,} problems",
            "seconds": round(full_s, 2),
            "problems_per_s": round(len(problems) / full_s),
            "kept": len(kept),
            "dropped": len(drops),
        },
        {
            "phase": f"naive (baseline), {len(subset):,}",
            "seconds": round(naive_s, 2),
            "problems_per_s": round(len(subset) / naive_s),
            "kept": len(subset) - dups - contaminated,
            "dropped": dups + contaminated,
        },
        {
            "phase": f"curate_problems, same {len(subset):,}",
            "seconds": round(indexed_s, 2),
            "problems_per_s": round(len(subset) / indexed_s),
            "kept": len(sub_kept),
            "dropped": len(sub_drops),
        },
    ]
    table = Table(title="curation (non-model steps)")
    for col in ("phase", "seconds", "problems/s", "kept", "dropped"):
        table.add_column(col, justify="left" if col == "phase" else "right")
    for r in rows:
        table.add_row(
            r["phase"], f"{r['seconds']:.2f}", f"{r['problems_per_s']:,}", f"{r['kept']:,}", f"{r['dropped']:,}"
        )
    console = Console()
    console.print(table)
    per_step = {k: round(v, 2) for k, v in seconds.items()}
    ratio = naive_s / indexed_s
    console.print(f"per step on {len(problems):,}: {per_step}; workload built in {build_s:.1f} s")
    console.print(
        f"speed-up over the naive baseline on {len(subset):,} problems: {ratio:.1f}x (same decisions: {agree})"
    )
    result = {
        "benchmark": "curate_bench",
        "problems": len(problems),
        "target_s": 120,
        "full_s": round(full_s, 2),
        "per_step_s": per_step,
        "naive_subset": len(subset),
        "naive_s": round(naive_s, 2),
        "indexed_subset_s": round(indexed_s, 2),
        "speedup_vs_naive": round(ratio, 1),
        "same_decisions": agree,
        "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "load_avg_before": round(load_before, 2),
        "load_avg_after": round(os.getloadavg()[0], 2),
        "rows": rows,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    console.print(
        f"peak memory {result['max_rss_mb']} MB; load average {result['load_avg_before']} before, "
        f"{result['load_avg_after']} after; wrote {args.out}"
    )


if __name__ == "__main__":
    main()
