"""Answer-verification throughput (issue 5): tirl.reward through the worker pool vs a fresh process per item.

Workloads (generated, deterministic for a seed; every item knows its expected verdict, and the run reports
how many verdicts agree, so the numbers measure real verification work):

* ``integer``: integer references and integer answers written several ways (``1,000``, ``\\$18``, ``30^\\circ``,
  ``009``, ``x = 12``), a third of them wrong; the report trains on integer answers only.
* ``symbolic``: MATH-500-style answers (fractions, radicals, intervals, tuples, matrices, polynomials,
  equations, pi) that need math-verify, a third of them wrong.
* ``mixed_rl``: integer references with 90% integer-formatted answers and 10% expressions (``2^{10}``,
  ``\\frac{84}{2}``), what an RL step mostly sees.

Methods, all in the same run on the same machine:

* ``tirl``: :class:`tirl.reward.Verifier` over a ``LocalSandbox`` that preloads the reward worker (integer
  fast path in process; everything else forked from warm workers with a hard per-item deadline).
* ``fresh_process``: the baseline, what a naive verification service does: one new ``python`` process per
  item that imports math-verify, parses both sides and verifies (same concurrency as the pool's workers).
* ``in_process_math_verify`` (reference only): math-verify plus the guards called directly in this process,
  one item after another; no isolation and no deadline, so unusable for training, but it shows what the
  comparisons themselves cost.

Targets on the 2-core machines: ``tirl`` at 500 verifications/s or more on ``integer`` and 50/s or more on
``symbolic``.

Usage::

    .venv/bin/python benchmarks/reward_bench.py            # full run (about a minute on 2 cores)
    .venv/bin/python benchmarks/reward_bench.py --quick    # smaller workloads
    .venv/bin/python benchmarks/reward_bench.py --json out.json --markdown

Prints a table and writes JSON (default ``benchmarks/results/reward_bench.json``) with the machine and its
load average before and after; timings taken while other work loads the CPUs are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import platform
import random
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from tirl.reward import PRELOAD_MODULES, Verifier, VerifierConfig, VerifierStats, VerifyItem
from tirl.reward.normalize import latex_for_math_verify
from tirl.sandbox import LocalSandbox

console = Console(width=150)

TARGETS = {"integer": 500.0, "symbolic": 50.0}

# The naive baseline: a fresh interpreter per item, math-verify imported each time (its own signal-based
# timeouts are fine here: the process is single-threaded). The item arrives on stdin.
BASELINE_PROGRAM = r"""
import json, sys
from math_verify import parse, verify, LatexExtractionConfig, ExprExtractionConfig
item = json.loads(sys.stdin.read())
gold = parse(item["gold"], [LatexExtractionConfig()])
pred = parse(item["pred"], [LatexExtractionConfig(), ExprExtractionConfig()])
print(json.dumps({"correct": bool(verify(gold, pred))}))
"""


@dataclass
class Case:
    gold: str
    answer: str
    expected: bool

    @property
    def response(self) -> str:
        return f"<reason>...</reason>\n<answer>The answer is \\boxed{{{self.answer}}}.</answer>"


def integer_cases(n: int, rng: random.Random) -> list[Case]:
    formats = [
        lambda v: str(v),
        lambda v: f"{v:,}",
        lambda v: "\\$" + str(v),
        lambda v: f"{v}^\\circ",
        lambda v: "00" + str(v),
        lambda v: f"x = {v}",
        lambda v: f"{v}\\text{{ cm}}",
        lambda v: f"{v:,}".replace(",", "{,}"),
    ]
    cases = []
    for i in range(n):
        gold = rng.randint(0, 10 ** rng.randint(1, 7))
        wrong = i % 3 == 0
        value = gold + rng.randint(1, 9) if wrong else gold
        cases.append(Case(str(gold), formats[i % len(formats)](value), not wrong))
    return cases


def symbolic_cases(n: int, rng: random.Random) -> list[Case]:
    def make(i: int) -> Case:
        a, c = rng.randint(2, 60), rng.randint(2, 60)
        k = rng.randint(2, 9)
        wrong = i % 3 == 0
        d = 1 if wrong else 0
        kind = i % 10
        if kind == 0:
            return Case(f"\\frac{{{a}}}{{{a + c}}}", f"\\frac{{{k * a + d}}}{{{k * (a + c)}}}", not wrong)
        if kind == 1:
            return Case(f"{k}\\sqrt{{{c}}}", f"\\sqrt{{{k * k * c + d}}}", not wrong or k * k * c + d == k * k * c)
        if kind == 2:
            return Case(f"[{a}, {a + c})", f"[{a},{a + c + d})", not wrong)
        if kind == 3:
            return Case(
                f"\\left( {a}, \\frac{{{c}}}{{{k}}} \\right)", f"({a}, \\frac{{{c * 2 + d}}}{{{k * 2}}})", not wrong
            )
        if kind == 4:
            return Case(
                f"\\begin{{pmatrix}} {a} \\\\ {c} \\end{{pmatrix}}",
                f"\\begin{{pmatrix}}{a}\\\\{c + d}\\end{{pmatrix}}",
                not wrong,
            )
        if kind == 5:
            return Case(f"x^2 + {2 * a}x + {a * a}", f"(x+{a + d})^2", not wrong)
        if kind == 6:
            return Case(f"y = {a}x + {c}", f"y - {c + d} = {a}x", not wrong)
        if kind == 7:
            return Case(f"\\frac{{{a}\\pi}}{{{c}}}", f"\\frac{{{a + d}}}{{{c}}}\\pi", not wrong or a + d == a)
        if kind == 8:
            return Case(f"\\frac{{{a}}}{{8}}", f"{(a + d) / 8}", not wrong)
        return Case(f"\\{{{a}, {c + 100}\\}}", f"\\{{{c + 100 + d}, {a}\\}}", not wrong)

    return [make(i) for i in range(n)]


def mixed_rl_cases(n: int, rng: random.Random) -> list[Case]:
    cases = integer_cases(n, rng)
    for i in range(0, n, 10):
        value = int(cases[i].gold)
        if i % 20:
            cases[i] = Case(str(value), f"\\frac{{{2 * value}}}{{2}}", True)
        else:
            cases[i] = Case(str(value), f"{value}+\\frac{{1}}{{2}}", False)
    return cases


async def run_tirl(cases: list[Case], sandbox: LocalSandbox) -> dict[str, Any]:
    stats = VerifierStats()
    verifier = Verifier(sandbox, VerifierConfig(), stats=stats)
    items = [VerifyItem(c.response, c.gold) for c in cases]
    start = time.perf_counter()
    verdicts = await verifier.averify_batch(items)
    seconds = time.perf_counter() - start
    agree = sum(v.correct == c.expected for v, c in zip(verdicts, cases))
    return {
        "items": len(cases),
        "seconds": seconds,
        "per_s": len(cases) / seconds,
        "agree": agree,
        "by_status": stats.snapshot()["by_status"],
        "by_path": stats.snapshot()["by_path"],
        "p50_item_ms": 1000 * statistics.median(v.duration_s for v in verdicts),
    }


async def run_fresh_process(cases: list[Case], concurrency: int, progress: Progress) -> dict[str, Any]:
    semaphore = asyncio.Semaphore(concurrency)
    task = progress.add_task("fresh process per item", total=len(cases))

    async def one(case: Case) -> bool | None:
        async with semaphore:
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                BASELINE_PROGRAM,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
            )
            payload = json.dumps({"gold": latex_for_math_verify(case.gold), "pred": latex_for_math_verify(case.answer)})
            try:
                out, _ = await asyncio.wait_for(proc.communicate(payload.encode()), timeout=60)
            except TimeoutError:
                proc.kill()
                await proc.wait()
                out = b""
            progress.advance(task)
            try:
                return bool(json.loads(out.decode().strip().splitlines()[-1])["correct"])
            except (ValueError, IndexError, KeyError):
                return None

    start = time.perf_counter()
    answers = await asyncio.gather(*(one(c) for c in cases))
    seconds = time.perf_counter() - start
    agree = sum(a == c.expected for a, c in zip(answers, cases))
    return {"items": len(cases), "seconds": seconds, "per_s": len(cases) / seconds, "agree": agree}


def run_in_process(cases: list[Case]) -> dict[str, Any]:
    from tirl.reward.normalize import canonical_integer, normalize_text
    from tirl.reward.worker import check

    start = time.perf_counter()
    agree = 0
    for case in cases:
        # The same fast paths as tirl, then the worker's comparison called directly.
        if normalize_text(case.gold) == normalize_text(case.answer):
            correct = True
        elif canonical_integer(case.gold) is not None and canonical_integer(case.answer) is not None:
            correct = canonical_integer(case.gold) == canonical_integer(case.answer)
        else:
            correct = check(case.gold, case.answer)["correct"]
        agree += correct == case.expected
    seconds = time.perf_counter() - start
    return {"items": len(cases), "seconds": seconds, "per_s": len(cases) / seconds, "agree": agree}


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    n_int, n_sym, n_base = (400, 60, 8) if args.quick else (4000, 400, 24)
    workloads = {
        "integer": integer_cases(n_int, rng),
        "symbolic": symbolic_cases(n_sym, rng),
        "mixed_rl": mixed_rl_cases(n_int // 2, rng),
    }
    workers = args.workers or len(os.sched_getaffinity(0))
    results: dict[str, dict[str, Any]] = {}
    with Progress(console=console, transient=True) as progress:
        start = time.perf_counter()
        sandbox = LocalSandbox(workers=workers, preload=PRELOAD_MODULES)
        await sandbox.start()
        startup_s = time.perf_counter() - start
        try:
            await run_tirl(symbolic_cases(4, random.Random(0)), sandbox)  # first forks, page-ins
            for name, cases in workloads.items():
                task = progress.add_task(f"tirl {name}", total=None)
                results[f"{name}/tirl"] = await run_tirl(cases, sandbox)
                progress.remove_task(task)
        finally:
            await sandbox.aclose()
        for name, cases in workloads.items():
            results[f"{name}/in_process_math_verify"] = run_in_process(cases)
        for name, cases in workloads.items():
            results[f"{name}/fresh_process"] = await run_fresh_process(cases[:n_base], workers, progress)
    return {"workers": workers, "pool_startup_s": startup_s, "results": results}


def render(report: dict[str, Any]) -> Table:
    table = Table(
        title=f"Answer verification throughput ({report['workers']} workers, {report['machine']['cpus']} CPUs)"
    )
    for col in ("workload", "method", "items", "seconds", "verif/s", "x fresh process", "agree", "target", "met"):
        table.add_column(col, justify="right" if col not in ("workload", "method") else "left")
    for key, row in report["results"].items():
        workload, method = key.split("/")
        base = report["results"].get(f"{workload}/fresh_process")
        ratio = row["per_s"] / base["per_s"] if base else float("nan")
        target = TARGETS.get(workload) if method == "tirl" else None
        table.add_row(
            workload,
            method,
            str(row["items"]),
            f"{row['seconds']:.2f}",
            f"{row['per_s']:.1f}",
            f"{ratio:.1f}",
            f"{row['agree']}/{row['items']}",
            f"{target:.0f}/s" if target else "",
            ("yes" if row["per_s"] >= target else "NO") if target else "",
        )
    return table


def markdown(report: dict[str, Any]) -> str:
    lines = [
        "| workload | method | items | verifications/s | x fresh process | agree | target |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for key, row in report["results"].items():
        workload, method = key.split("/")
        base = report["results"][f"{workload}/fresh_process"]
        target = TARGETS.get(workload) if method == "tirl" else None
        met = (" (met)" if row["per_s"] >= target else " (missed)") if target else ""
        lines.append(
            f"| {workload} | {method} | {row['items']} | {row['per_s']:.1f} | {row['per_s'] / base['per_s']:.1f} | "
            f"{row['agree']}/{row['items']} | {f'>= {target:.0f}/s{met}' if target else ''} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller workloads")
    parser.add_argument("--workers", type=int, default=None, help="pool workers (default: usable cores)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=Path("benchmarks/results/reward_bench.json"))
    parser.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    args = parser.parse_args()
    load_before = os.getloadavg()
    report = asyncio.run(main_async(args))
    report["machine"] = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpus": len(os.sched_getaffinity(0)),
        "loadavg_before": load_before,
        "loadavg_after": os.getloadavg(),
    }
    report["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    report["targets"] = TARGETS
    console.print(render(report))
    console.print(
        f"pool start-up (workers import sympy + math-verify and warm up): {report['pool_startup_s']:.1f} s; "
        f"load average before {load_before[0]:.2f}, after {report['machine']['loadavg_after'][0]:.2f}"
    )
    if args.markdown:
        console.print(markdown(report), soft_wrap=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2))
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
