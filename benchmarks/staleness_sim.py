"""Step time of ``rollout.max_staleness`` k = 0, 1, 2, simulated (issue 42): at the report's GPU scale and on this
machine's measured CPU profile.

GPU scale (:class:`tirl.sim.staleness.GpuProfile`, every number's source in its docstring): 64 MI300X, 512 x 32
rollouts per step (about 45K tool calls, the report's turn-count and length model of :mod:`tirl.sim.workload`), the
KV-aware scheduler over the inference GPUs (:mod:`tirl.sim.simulator`, the real admission code), the update on the
other GPUs, a weight push between steps. k >= 1 needs generation on GPUs of its own, so each split of the 64 into
serving and training GPUs is simulated at k = 0, 1, 2, next to the report's own arrangement (colocated: all 64
generate, then all 64 train; synchronous).

This CPU: the 10 measured steps of ``configs/rl/cpu-toolmath-roc.yaml`` on a launched vLLM-CPU server
(:data:`tirl.sim.staleness.CPU_PROFILE`, docs/scale-records.md) replayed at k = 0, 1, 2, assuming generation and
the update do not slow each other; the break-even column says how much they may slow each other before k loses.

The admission rule is :class:`tirl.rollout.staleness.StalenessProducer`'s (``tests/test_sim_staleness.py`` checks
the simulated admissions against it). Simulated times do not depend on this machine's load.

Usage::

    .venv/bin/python benchmarks/staleness_sim.py              # about 3 minutes on 2 busy cores
    .venv/bin/python benchmarks/staleness_sim.py --quick      # a quarter of the scale: 128 x 32 on 16 GPUs
    .venv/bin/python benchmarks/staleness_sim.py --markdown   # also print the tables as Markdown

Writes JSON (default ``benchmarks/results/staleness_sim.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from dataclasses import asdict, replace
from pathlib import Path

from rich.console import Console
from rich.table import Table

from tirl.sim.simulator import EngineSpec
from tirl.sim.staleness import (
    CPU_PROFILE,
    EngineGenerator,
    GpuProfile,
    StalenessResult,
    TraceGenerator,
    break_even_slowdown,
    simulate_staleness,
)

console = Console(width=200)
KS = (0, 1, 2)
COLUMNS = (
    "arrangement",
    "k",
    "step s",
    "speed-up vs k=0",
    "vs colocated",
    "rollout s",
    "update s",
    "sync s",
    "lag mean (traj / token)",
    "lag max",
    "waited share",
    "waited mean s",
    "queue-wait share",
    "generator idle %",
    "break-even slowdown",
)


def row_of(name: str, r: StalenessResult, base_step: float, colocated_step: float | None, wall: float) -> dict:
    out = {"arrangement": name, **r.row()}
    out["speedup_vs_k0"] = round(base_step / r.mean_step_s, 3)
    out["speedup_vs_colocated"] = round(colocated_step / r.mean_step_s, 3) if colocated_step else None
    out["sim_wall_s"] = round(wall, 1)
    out["per_step"] = [
        {
            "step": s.step,
            "version": s.version,
            "admitted_s": round(s.admitted_s, 3),
            "done_s": round(s.done_s, 3),
            "rollout_s": round(s.rollout_s, 3),
            "sync_s": round(s.sync_s, 3),
            "update_s": round(s.update_s, 3),
            "step_s": round(s.step_s, 3),
            "held_s": round(s.held_s, 3),
        }
        for s in r.steps
    ]
    return out


def cells(r: dict) -> list[str]:
    def f(x, fmt="{:,.1f}"):
        return "-" if x is None or x != x else fmt.format(x)

    return [
        r["arrangement"],
        str(r["max_staleness"]),
        f(r["step_s"]),
        f(r["speedup_vs_k0"], "{:.2f}x"),
        f(r.get("speedup_vs_colocated"), "{:.2f}x"),
        f(r["rollout_s"]),
        f(r["update_s"]),
        f(r["sync_s"], "{:.2f}"),
        f"{r['lag_mean']:.2f} / " + f(r["lag_token_mean"], "{:.2f}"),
        str(r["lag_max"]),
        f(r["held_share"], "{:.2f}"),
        f(r["held_mean_s"]),
        f(r["queue_wait_share"], "{:.2f}"),
        f(100 * r["generator_idle_share"]),
        f(r.get("break_even_slowdown"), "{:.2f}x"),
    ]


def print_table(title: str, rows: list[dict], markdown: bool) -> None:
    table = Table(title=title)
    for col in COLUMNS:
        table.add_column(col, justify="left" if col == "arrangement" else "right")
    for r in rows:
        table.add_row(*cells(r))
    console.print(table)
    if markdown:
        print(f"\n{title}\n")
        print("| " + " | ".join(COLUMNS) + " |")
        print("|---|" + "---:|" * (len(COLUMNS) - 1))
        for r in rows:
            print("| " + " | ".join(cells(r)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=6, help="RL steps per run (the first and last are left out)")
    ap.add_argument("--splits", default="32,40,48", help="serving GPUs of the 64 (the rest train), comma-separated")
    ap.add_argument("--problems", type=int, default=512, help="problems per step (x32 rollouts)")
    ap.add_argument("--gpus", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="128 x 32 rollouts on 16 GPUs (splits 8,10,12), 4 steps")
    ap.add_argument("--json", default="benchmarks/results/staleness_sim.json")
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    if args.quick:
        args.problems, args.gpus, args.splits, args.steps = 128, 16, "8,10,12", 4
    splits = [int(x) for x in args.splits.split(",")]
    base = GpuProfile(gpus=args.gpus, engines=args.gpus // 2, problems=args.problems)
    engine = EngineSpec()
    load_before = os.getloadavg()

    console.print(f"generating {args.steps} workloads of {args.problems} x {base.samples} rollouts ...")
    workloads = base.workloads(args.steps, args.seed)
    calls = [round(w.summary()["mean_tool_calls"] * len(w.trajectories)) for w in workloads]
    console.print(f"tool calls per step: {calls}")

    def run(profile: GpuProfile, k: int) -> tuple[StalenessResult, float]:
        t0 = time.perf_counter()
        gen = EngineGenerator(workloads, engine, n_engines=profile.engines)
        update = [profile.update_s(w) for w in workloads]
        r = simulate_staleness(gen, k, update, profile.sync_s())
        return r, time.perf_counter() - t0

    gpu_rows: list[dict] = []
    colocated = base.colocated()
    r, wall = run(colocated, 0)
    colocated_step = r.mean_step_s
    gpu_rows.append(row_of(f"colocated {args.gpus}", r, r.mean_step_s, colocated_step, wall))
    console.print(f"colocated k=0: {r.mean_step_s:,.1f} s/step ({wall:.0f} s)")
    for engines in splits:
        profile = replace(base, engines=engines)
        name = f"split {engines} serve / {profile.train_gpus} train"
        k0 = None
        for k in KS:
            r, wall = run(profile, k)
            k0 = k0 or r.mean_step_s
            gpu_rows.append(row_of(name, r, k0, colocated_step, wall))
            console.print(f"{name} k={k}: {r.mean_step_s:,.1f} s/step ({wall:.0f} s)")

    cpu_rows: list[dict] = []
    p = CPU_PROFILE
    k0 = None
    for k in KS:
        t0 = time.perf_counter()
        r = simulate_staleness(TraceGenerator(p.rollout_s, p.trajectories), k, p.update_s, p.sync_s)
        k0 = k0 or r.mean_step_s
        row = row_of("this CPU (1 vLLM-CPU server)", r, k0, None, time.perf_counter() - t0)
        row["break_even_slowdown"] = round(break_even_slowdown(p.rollout_s, p.update_s, p.sync_s, k), 3) if k else None
        cpu_rows.append(row)

    steady = f"steps 2-{args.steps - 1} of {args.steps}"
    print_table(
        f"GPU scale: {args.gpus} MI300X, {args.problems} x {base.samples} rollouts/step, ~{sum(calls) // len(calls):,} "
        f"tool calls/step, KV-aware scheduler, {steady} (simulated)",
        gpu_rows,
        args.markdown,
    )
    print_table(
        "This CPU: the 10 measured steps of cpu-toolmath-roc.yaml replayed, steps 2-9 of 10 (generation and update "
        "not slowing each other)",
        cpu_rows,
        args.markdown,
    )

    report = {
        "benchmark": "staleness_sim",
        "command": "benchmarks/staleness_sim.py" + (" --quick" if args.quick else ""),
        "steps": args.steps,
        "seed": args.seed,
        "gpu_profile": asdict(base),
        "sync_s": base.sync_s(),
        "engine_spec": asdict(engine),
        "tool_calls_per_step": calls,
        "gpu": gpu_rows,
        "cpu_profile": asdict(p),
        "cpu": cpu_rows,
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_before": load_before,
            "loadavg_after": os.getloadavg(),
        },
    }
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, allow_nan=False))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    main()
