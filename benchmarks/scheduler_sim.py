"""Rollout-scheduler benchmark on the discrete-event simulator (issue 8).

Runs one RL rollout step (default: 512 problems x 16 trajectories, the report's batch with 16 samples) through
:func:`tirl.sim.simulator.simulate` under each scheduling policy, over scenarios of 4 and 8 engines, short and
long responses, and tool latencies of 0.05 s and 1 s. The baseline is ``static`` in the same run: every
speed-up is a ratio of simulated throughputs of the same workload (same seed). The policies run the real
scheduler's admission code (:mod:`tirl.rollout.admission`).

Also: a sweep of the ``kv_aware`` admission coefficient, a sweep of the step size (trajectories per engine),
and Fig. 7-like PNG timelines of engine load.

Simulated times do not depend on this machine's load (the simulator has no wall clock); only the
``sim_wall_s`` column (how long the simulation itself took) does.

Usage::

    .venv/bin/python benchmarks/scheduler_sim.py                # full: 3 seeds, about 2 minutes on 2 cores
    .venv/bin/python benchmarks/scheduler_sim.py --quick        # 128 problems, 1 seed
    .venv/bin/python benchmarks/scheduler_sim.py --markdown     # also print the tables as Markdown

Writes JSON (default ``benchmarks/results/scheduler_sim.json``) and PNGs (default ``docs/img/``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from statistics import mean

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirl.sim.plot import plot_timelines
from tirl.sim.simulator import EngineSpec, SimResult, simulate
from tirl.sim.workload import generate_workload, long_response_workload, short_response_workload

console = Console(width=170)

POLICIES: list[tuple[str, float]] = [("static", 1.0), ("round_robin", 1.0), ("kv_aware", 1.0), ("kv_aware", 0.5)]
WORKLOADS = {"short": short_response_workload, "long": long_response_workload}


def label(policy: str, coef: float) -> str:
    return policy if policy != "kv_aware" else f"kv_aware@{coef:g}"


def run_one(
    kind: str, engines: int, latency: float, problems: int, seed: int, policy: str, coef: float, spec: EngineSpec
) -> tuple[SimResult, float]:
    workload = generate_workload(WORKLOADS[kind](n_problems=problems, samples=16, tool_latency_s=latency), seed)
    t0 = time.perf_counter()
    result = simulate(workload, spec, policy, n_engines=engines, admission_coef=coef, seed=seed)
    return result, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--problems", type=int, default=512, help="problems per step (x16 trajectories)")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="128 problems, 1 seed, no sweeps")
    ap.add_argument("--json", default="benchmarks/results/scheduler_sim.json")
    ap.add_argument("--img-dir", default="docs/img")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.seeds = 128, 1
    spec = EngineSpec()
    seeds = list(range(args.seeds))
    scenarios = [(k, e, lat) for e in (4, 8) for k in ("short", "long") for lat in (0.05, 1.0)]
    load_before = os.getloadavg()

    rows: list[dict] = []
    timelines: dict[tuple, list[SimResult]] = {}
    total = len(scenarios) * len(POLICIES) * len(seeds)
    with Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
    ) as progress:
        task = progress.add_task("simulating", total=total)
        for kind, engines, lat in scenarios:
            for seed in seeds:
                base = None
                for policy, coef in POLICIES:
                    progress.update(
                        task, description=f"{kind} E={engines} tool={lat}s seed={seed} {label(policy, coef)}"
                    )
                    result, wall = run_one(kind, engines, lat, args.problems, seed, policy, coef, spec)
                    row = {
                        "scenario": f"{kind}/E{engines}/tool{lat:g}s",
                        "responses": kind,
                        "tool_latency_s": lat,
                        "seed": seed,
                        "label": label(policy, coef),
                        **result.row(),
                        "sim_wall_s": round(wall, 2),
                    }
                    if policy == "static":
                        base = result.tokens_per_s
                    row["speedup_vs_static"] = round(result.tokens_per_s / base, 3)
                    rows.append(row)
                    if seed == 0:
                        timelines.setdefault((kind, engines, lat), []).append(result)
                    progress.advance(task)

    # aggregate over seeds
    summary: list[dict] = []
    for kind, engines, lat in scenarios:
        name = f"{kind}/E{engines}/tool{lat:g}s"
        for policy, coef in POLICIES:
            sel = [r for r in rows if r["scenario"] == name and r["label"] == label(policy, coef)]
            summary.append(
                {
                    "scenario": name,
                    "label": label(policy, coef),
                    "makespan_s": round(mean(r["makespan_s"] for r in sel), 1),
                    "tokens_per_s": round(mean(r["tokens_per_s"] for r in sel)),
                    "speedup_vs_static": round(mean(r["speedup_vs_static"] for r in sel), 3),
                    "speedup_min": min(r["speedup_vs_static"] for r in sel),
                    "speedup_max": max(r["speedup_vs_static"] for r in sel),
                    "idle_fraction": round(mean(r["idle_fraction"] for r in sel), 4),
                    "evicted_tokens": round(mean(r["evicted_tokens"] for r in sel)),
                    "recomputed_tokens": round(mean(r["recomputed_tokens"] for r in sel)),
                    "queue_wait_mean_s": round(mean(r["queue_wait_mean_s"] for r in sel), 1),
                    "engine_finish_spread_s": round(mean(r["engine_finish_spread_s"] for r in sel), 1),
                }
            )

    table = Table(
        title=f"Rollout step {args.problems}x16, seeds {seeds} (speed-up = tokens/s vs static, same workload)"
    )
    for col in (
        "scenario",
        "policy",
        "makespan s",
        "tok/s",
        "speed-up",
        "idle %",
        "evicted tok",
        "recomputed tok",
        "wait s",
        "finish spread s",
    ):
        table.add_column(col, justify="right" if col not in ("scenario", "policy") else "left")
    for s in summary:
        table.add_row(
            s["scenario"],
            s["label"],
            f"{s['makespan_s']:,.0f}",
            f"{s['tokens_per_s']:,}",
            f"{s['speedup_vs_static']:.2f} ({s['speedup_min']:.2f}-{s['speedup_max']:.2f})",
            f"{100 * s['idle_fraction']:.1f}",
            f"{s['evicted_tokens']:,}",
            f"{s['recomputed_tokens']:,}",
            f"{s['queue_wait_mean_s']:,.1f}",
            f"{s['engine_finish_spread_s']:,.1f}",
        )
    console.print(table)

    sweeps: dict[str, list[dict]] = {}
    if not args.quick:
        coef_rows = []
        for engines in (4, 8):
            base, _ = run_one("long", engines, 0.05, args.problems, 0, "static", 1.0, spec)
            for coef in (1.0, 0.75, 0.5, 0.35, 0.25):
                r, _ = run_one("long", engines, 0.05, args.problems, 0, "kv_aware", coef, spec)
                coef_rows.append(
                    {
                        "engines": engines,
                        "admission_coef": coef,
                        "tokens_per_s": round(r.tokens_per_s),
                        "speedup_vs_static": round(r.tokens_per_s / base.tokens_per_s, 3),
                        "evicted_tokens": r.evicted_tokens,
                        "preemptions": r.preemptions,
                    }
                )
        sweeps["admission_coef_long_tool0.05s"] = coef_rows
        load_rows = []
        for problems in (32, 64, 128, 256, 512):
            if problems > args.problems:
                continue
            res = {
                lbl: run_one("long", 4, 0.05, problems, 0, p, c, spec)[0] for p, c in POLICIES for lbl in [label(p, c)]
            }
            for lbl, r in res.items():
                load_rows.append(
                    {
                        "problems": problems,
                        "trajectories_per_engine": problems * 16 // 4,
                        "label": lbl,
                        "tokens_per_s": round(r.tokens_per_s),
                        "speedup_vs_static": round(r.tokens_per_s / res["static"].tokens_per_s, 3),
                        "evicted_tokens": r.evicted_tokens,
                    }
                )
        sweeps["step_size_long_E4_tool0.05s"] = load_rows
        for name, srows in sweeps.items():
            t = Table(title=name)
            for col in srows[0]:
                t.add_column(col, justify="right")
            for r in srows:
                t.add_row(*[f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()])
            console.print(t)

    images = []
    for key in [("long", 4, 1.0), ("short", 8, 0.05)]:
        if key in timelines:
            kind, engines, lat = key
            path = Path(args.img_dir) / f"scheduler_timeline_{kind}_E{engines}_tool{lat:g}s.png"
            plot_timelines(
                timelines[key],
                path,
                title=f"{kind} responses, {engines} engines, tool latency {lat:g} s, "
                f"{args.problems}x16 trajectories: KV use per engine (blue), idle (grey), makespan (red)",
            )
            images.append(str(path))
    console.print(f"timelines: {', '.join(images)}")

    if args.markdown:
        print(
            "| scenario | policy | makespan s | tok/s | speed-up vs static (min-max) | idle % | evicted tok "
            "| recomputed tok | mean wait s |"
        )
        print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
        for s in summary:
            print(
                f"| {s['scenario']} | {s['label']} | {s['makespan_s']:,.0f} | {s['tokens_per_s']:,} | "
                f"{s['speedup_vs_static']:.2f} ({s['speedup_min']:.2f}-{s['speedup_max']:.2f}) | "
                f"{100 * s['idle_fraction']:.1f} | {s['evicted_tokens']:,} | {s['recomputed_tokens']:,} | "
                f"{s['queue_wait_mean_s']:,.1f} |"
            )
        for name, srows in sweeps.items():
            print(f"\n{name}\n")
            print("| " + " | ".join(srows[0]) + " |")
            print("|" + "---:|" * len(srows[0]))
            for r in srows:
                print("| " + " | ".join(f"{v:,}" if isinstance(v, int) else str(v) for v in r.values()) + " |")

    report = {
        "benchmark": "scheduler_sim",
        "problems": args.problems,
        "samples_per_problem": 16,
        "seeds": seeds,
        "engine_spec": asdict(spec),
        "workloads": {k: asdict(f(n_problems=args.problems, samples=16)) for k, f in WORKLOADS.items()},
        "summary": summary,
        "runs": rows,
        "sweeps": sweeps,
        "images": images,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
