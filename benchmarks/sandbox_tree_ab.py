"""``sandbox_bench.py`` of two source trees, interleaved in one run: the pool's throughput and CPU per call of
this checkout against a baseline checkout (for example the commit before a change, extracted into /tmp).

Each round runs ``sandbox_bench.py --quick`` once with ``PYTHONPATH=<baseline>/src`` and once with this
tree's ``src`` (the order alternates between rounds, so drift in the machine's load hits both alike), each in
a fresh process. Per workload of the ``pool`` executor it reports the ratio new/baseline of calls/s and of CPU
ms per call, per round and as the median over rounds. The machines are shared: read the ratios, not the
absolute numbers, and the load averages the JSON records.

Usage::

    git archive <old-commit> | tar -x -C /tmp/old
    .venv/bin/python benchmarks/sandbox_tree_ab.py --baseline-tree /tmp/old --rounds 3 --json runs/ab.json
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

HERE = Path(__file__).resolve().parent
TREE = HERE.parent


def run_bench(tree: Path, extra: list[str]) -> dict:
    """One ``sandbox_bench.py --quick`` of ``tree`` (its own script and sources); its JSON report.

    Raises:
        RuntimeError: the benchmark failed (its stderr's tail).
    """
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "report.json"
        env = dict(os.environ, PYTHONPATH=str(tree / "src"))
        proc = subprocess.run(
            [sys.executable, str(tree / "benchmarks" / "sandbox_bench.py"), "--quick", "--json", str(out), *extra],
            env=env,
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"sandbox_bench.py of {tree} failed: {proc.stderr[-2000:]}")
        return json.loads(out.read_text())


def pool_rows(report: dict) -> dict[str, dict]:
    return {r["workload"]: r for r in report["results"] if r["executor"] == "pool"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline-tree", type=Path, required=True, help="a checkout of the baseline commit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=Path("runs/sandbox_tree_ab.json"))
    args, extra = parser.parse_known_args()
    trees = {"baseline": args.baseline_tree.resolve(), "new": TREE}
    load_before = os.getloadavg()
    rounds: list[dict[str, dict]] = []
    for rnd in range(args.rounds):
        order = ["baseline", "new"] if rnd % 2 == 0 else ["new", "baseline"]
        got = {name: pool_rows(run_bench(trees[name], extra)) for name in order}
        rounds.append(got)
        Console(stderr=True).print(f"round {rnd + 1}/{args.rounds} done, load {os.getloadavg()[0]:.1f}")
    workloads = list(rounds[0]["new"])
    summary = {}
    for w in workloads:
        tput = [r["new"][w]["calls_per_s"] / r["baseline"][w]["calls_per_s"] for r in rounds]
        cpu = [r["new"][w]["cpu_ms_per_call"] / r["baseline"][w]["cpu_ms_per_call"] for r in rounds]
        summary[w] = {
            "calls_per_s_ratio": [round(x, 3) for x in tput],
            "cpu_per_call_ratio": [round(x, 3) for x in cpu],
            "calls_per_s_ratio_median": round(sorted(tput)[len(tput) // 2], 3),
            "cpu_per_call_ratio_median": round(sorted(cpu)[len(cpu) // 2], 3),
            "wrong": sum(r[n][w]["wrong"] for r in rounds for n in r),
        }
    report = {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "trees": {k: str(v) for k, v in trees.items()},
        "machine": {
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "summary": summary,
        "rounds": [
            {n: {w: {k: r[n][w][k] for k in ("calls_per_s", "cpu_ms_per_call", "p50_ms")} for w in r[n]} for n in r}
            for r in rounds
        ],
    }
    table = Table(
        title=f"sandbox pool, new/baseline tree, {args.rounds} interleaved rounds "
        f"(load {load_before[0]:.1f} -> {report['machine']['load_avg_after'][0]:.1f})"
    )
    for col in ("workload", "calls/s ratio (median)", "per round", "CPU/call ratio (median)", "per round", "wrong"):
        table.add_column(col)
    for w, s in summary.items():
        table.add_row(
            w,
            f"{s['calls_per_s_ratio_median']:.3f}",
            " ".join(f"{x:.2f}" for x in s["calls_per_s_ratio"]),
            f"{s['cpu_per_call_ratio_median']:.3f}",
            " ".join(f"{x:.2f}" for x in s["cpu_per_call_ratio"]),
            str(s["wrong"]),
        )
    Console().print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    Console().print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
