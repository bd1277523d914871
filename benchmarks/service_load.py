"""Load and fault benchmark of the code-execution service (issue 4): throughput, latency, nothing lost or doubled.

Three phases, all in one run so the numbers compare like with like:

1. ``in_process``: ``LocalSandbox(workers=2W)`` called directly by K coroutines (the baseline: no HTTP).
2. ``service``: the same calls through ``SandboxClient`` to two ``tirl sandbox serve --workers W`` processes
   on 127.0.0.1 (same total workers). ``service / in_process`` throughput is the cost of the HTTP layer.
3. ``faults``: two fresh servers, a mixed workload (ok, stdin, errors, timeouts) from K coroutines; when a
   quarter of the calls are answered a sandbox worker process of server A is SIGKILLed while it runs calls,
   and at half the whole of server A (process group) is SIGKILLed. Every answer is checked against the result
   its code must give.

Counts reported for ``faults`` (all must be 0): ``lost`` (no answer, or an ``internal`` answer), ``duplicated``
(a call answered more than once, or an answer carrying another call's id), ``wrong`` (status or output not
what the code gives). ``extra_executions`` (executions counted by the servers' metrics beyond one per call) is
reported for information: work that was running on the killed worker or server must run again elsewhere.

Usage::

    .venv/bin/python benchmarks/service_load.py                 # full run (a few minutes on 2 cores)
    .venv/bin/python benchmarks/service_load.py --quick         # small run
    .venv/bin/python benchmarks/service_load.py --json out.json

Prints a table and writes JSON (default ``benchmarks/results/service_load.json``). Timing numbers depend on
machine load; the JSON records the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirl.sandbox.types import CodeExecutor, ExecutionRequest, ExecutionResult
from tirl.service.client import ClientConfig, SandboxClient
from tirl.service.process import ServiceProcess

console = Console(width=None if sys.stdout.isatty() else 150)


# -- workload --------------------------------------------------------------------------------------


@dataclass
class Expected:
    status: str
    stdout: str | None = None
    error_type: str | None = None


def make_call(i: int, kind: str, timeout_s: float) -> tuple[ExecutionRequest, Expected]:
    """The request of call ``i`` of a kind, and what its result must be."""
    rid = f"load-{i:06d}-{os.urandom(4).hex()}"
    if kind == "ok":
        return (
            ExecutionRequest(code=f"print({i} * 3)", request_id=rid, timeout_s=timeout_s),
            Expected("ok", f"{3 * i}\n"),
        )
    if kind == "stdin":
        return (
            ExecutionRequest(code="print(int(input()) + 1)", stdin=f"{i}\n", request_id=rid, timeout_s=timeout_s),
            Expected("ok", f"{i + 1}\n"),
        )
    if kind == "error":
        return (
            ExecutionRequest(code=f"x = {i}\nraise ValueError(f'bad {{x}}')", request_id=rid, timeout_s=timeout_s),
            Expected("error", error_type="ValueError"),
        )
    if kind == "timeout":
        return (
            ExecutionRequest(code="import time\ntime.sleep(30)", request_id=rid, timeout_s=timeout_s),
            Expected("timeout"),
        )
    raise ValueError(kind)


def make_workload(
    n: int, mix: dict[str, float], timeout_s: float, seed: int
) -> list[tuple[ExecutionRequest, Expected]]:
    rng = random.Random(seed)
    kinds = rng.choices(list(mix), weights=list(mix.values()), k=n)
    return [make_call(i, kind, timeout_s) for i, kind in enumerate(kinds)]


def check(result: ExecutionResult, request: ExecutionRequest, expected: Expected) -> str:
    """'ok', 'lost', 'duplicated' (another call's id) or 'wrong'."""
    if result.request_id != request.request_id:
        return "duplicated"
    if result.status == "internal":
        return "lost"
    if result.status != expected.status:
        return "wrong"
    if expected.stdout is not None and result.stdout != expected.stdout:
        return "wrong"
    if expected.error_type is not None and result.error_type != expected.error_type:
        return "wrong"
    return "ok"


# -- driver ----------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    name: str
    calls: int
    concurrency: int
    wall_s: float
    throughput_per_s: float
    p50_s: float
    p99_s: float
    outcomes: dict[str, int]
    lost: int
    duplicated: int
    wrong: int
    extra: dict[str, Any] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def drive(
    name: str,
    executor: CodeExecutor,
    workload: list[tuple[ExecutionRequest, Expected]],
    concurrency: int,
    milestones: list[tuple[float, Any]] = (),
) -> PhaseResult:
    """K coroutines pull calls from the workload; each answer is checked. ``milestones``: (fraction answered,
    async callback) run once when that fraction of calls has been answered."""
    answers: dict[str, int] = {}
    outcomes: dict[str, int] = {}
    latencies: list[float] = []
    next_index = 0
    done = 0
    pending_milestones = sorted(milestones, key=lambda m: m[0])
    milestone_tasks: list[asyncio.Task] = []

    with Progress(
        TextColumn(f"[bold]{name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    ) as progress:
        bar = progress.add_task(name, total=len(workload))

        async def worker() -> None:
            nonlocal next_index, done
            while next_index < len(workload):
                request, expected = workload[next_index]
                next_index += 1
                start = time.perf_counter()
                result = await executor.run(request)
                latencies.append(time.perf_counter() - start)
                answers[request.request_id] = answers.get(request.request_id, 0) + 1
                outcome = check(result, request, expected)
                if outcome == "wrong":
                    console.print(f"[red]wrong[/red] {request.code!r}: {result}")
                if outcome == "lost":
                    console.print(f"[yellow]lost[/yellow] {request.request_id}: {result.stderr[:200]}")
                outcomes[outcome] = outcomes.get(outcome, 0) + 1
                done += 1
                progress.advance(bar)
                while pending_milestones and done >= pending_milestones[0][0] * len(workload):
                    _, callback = pending_milestones.pop(0)
                    milestone_tasks.append(asyncio.ensure_future(callback()))

        start = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        wall = time.perf_counter() - start
        await asyncio.gather(*milestone_tasks)

    never = sum(1 for request, _ in workload if request.request_id not in answers)
    doubled = sum(n - 1 for n in answers.values() if n > 1)
    return PhaseResult(
        name=name,
        calls=len(workload),
        concurrency=concurrency,
        wall_s=wall,
        throughput_per_s=len(workload) / wall,
        p50_s=percentile(latencies, 0.50),
        p99_s=percentile(latencies, 0.99),
        outcomes=outcomes,
        lost=outcomes.get("lost", 0) + never,
        duplicated=outcomes.get("duplicated", 0) + doubled,
        wrong=outcomes.get("wrong", 0),
    )


# -- servers ---------------------------------------------------------------------------------------


def executions_from_metrics(text: str) -> int:
    """Sum of ``tirl_service_executions_total`` samples in Prometheus text."""
    return int(sum(float(m) for m in re.findall(r"^tirl_service_executions_total\{[^}]*\} (\S+)$", text, re.M)))


async def scrape_executions(url: str) -> int | None:
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            return executions_from_metrics((await http.get(url + "/metrics")).text)
    except httpx.HTTPError:
        return None


async def in_flight(url: str) -> int:
    try:
        async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
            return int((await http.get(url + "/healthz")).json()["in_flight"])
    except (httpx.HTTPError, ValueError, KeyError):
        return 0


def start_servers(n: int, workers: int, preload: str) -> list[ServiceProcess]:
    servers = [ServiceProcess(workers=workers, extra_args=["--preload", preload]) for _ in range(n)]
    for s in servers:
        s.start()
    return servers


def local_sandbox(workers: int, preload: str) -> CodeExecutor:
    from tirl.sandbox import LocalSandbox

    modules = tuple(m for m in preload.split(",") if m)
    return LocalSandbox(workers=workers, preload=modules)


# -- phases ----------------------------------------------------------------------------------------


async def phase_in_process(args: argparse.Namespace, workload) -> PhaseResult:
    sandbox = local_sandbox(2 * args.workers, args.preload)
    try:
        await sandbox.run(ExecutionRequest(code="pass"))  # warm: workers started
        return await drive("in_process", sandbox, workload, args.concurrency)
    finally:
        await sandbox.aclose()


async def phase_service(args: argparse.Namespace, workload) -> PhaseResult:
    servers = start_servers(2, args.workers, args.preload)
    try:
        async with SandboxClient([s.url for s in servers], client_config(args)) as client:
            await client.check_health()
            await client.run_batch([ExecutionRequest(code="pass") for _ in range(4)])
            result = await drive("service", client, workload, args.concurrency)
            stats = client.stats()
        result.extra["mean_batch_size"] = round(stats.mean_batch_size, 1)
        return result
    finally:
        for s in servers:
            s.stop()


async def phase_faults(args: argparse.Namespace, workload) -> PhaseResult:
    servers = start_servers(2, args.workers, args.preload)
    victim, survivor = servers
    events: list[str] = []
    victim_executions: list[int] = []

    async def kill_worker() -> None:
        for _ in range(200):  # wait until server A is running calls, so the kill lands mid-batch
            if await in_flight(victim.url) > 0:
                break
            await asyncio.sleep(0.01)
        pids = victim.worker_pids()
        if not pids:
            events.append("no worker process found to kill")
            return
        pid = random.Random(args.seed).choice(pids)
        os.kill(pid, signal.SIGKILL)
        events.append(f"killed worker pid {pid} of server A (in flight: {await in_flight(victim.url)})")

    async def kill_server() -> None:
        count = await scrape_executions(victim.url)
        busy = await in_flight(victim.url)
        victim.kill()
        victim_executions.append(count or 0)
        events.append(f"killed server A (pid group {victim.pid}) with {busy} calls in flight")

    try:
        config = client_config(args)
        async with SandboxClient([s.url for s in servers], config) as client:
            await client.check_health()
            result = await drive(
                "faults", client, workload, args.concurrency, milestones=[(0.25, kill_worker), (0.5, kill_server)]
            )
            stats = client.stats()
        survivor_executions = await scrape_executions(survivor.url) or 0
        executions = survivor_executions + (victim_executions[0] if victim_executions else 0)
        result.extra.update(
            events=events,
            executions_counted=executions,
            extra_executions=max(0, executions - len(workload)),
            executions_note="server A's count was scraped just before it was killed; work it ran after that "
            "scrape is not counted",
            failovers=stats.failovers,
            resent_same_server=stats.resent_same_server,
            internal_retries=stats.internal_retries,
            mean_batch_size=round(stats.mean_batch_size, 1),
            servers=stats.servers,
        )
        return result
    finally:
        for s in servers:
            s.stop()


def client_config(args: argparse.Namespace) -> ClientConfig:
    return ClientConfig(batch_size=args.batch_size, senders=args.senders, probe_interval_s=0.2, call_deadline_s=300)


# -- report ----------------------------------------------------------------------------------------


def print_table(phases: list[PhaseResult], ratio: float | None) -> None:
    table = Table(title="code-execution service: load and faults")
    for col in ("phase", "calls", "K", "calls/s", "p50 ms", "p99 ms", "lost", "dup", "wrong", "notes"):
        table.add_column(col, justify="right" if col not in ("phase", "notes") else "left")
    for p in phases:
        note = ""
        if p.name == "service" and ratio is not None:
            note = f"{ratio:.2f}x in-process throughput; batch {p.extra.get('mean_batch_size')}"
        if p.name == "faults":
            note = f"extra executions {p.extra.get('extra_executions')}, failovers {p.extra.get('failovers')}"
        table.add_row(
            p.name,
            str(p.calls),
            str(p.concurrency),
            f"{p.throughput_per_s:.0f}",
            f"{p.p50_s * 1000:.0f}",
            f"{p.p99_s * 1000:.0f}",
            str(p.lost),
            str(p.duplicated),
            str(p.wrong),
            note,
        )
    console.print(table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=2000, help="calls per phase")
    ap.add_argument("--concurrency", type=int, default=256, help="K concurrent client coroutines")
    ap.add_argument("--workers", type=int, default=2, help="sandbox workers per server (in-process: 2x)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--senders", type=int, default=32)
    ap.add_argument("--timeout-s", type=float, default=1.0, help="timeout_s of every call")
    ap.add_argument("--preload", default="", help="modules the sandbox workers import (comma-separated)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="small run (400 calls, K=64)")
    ap.add_argument("--skip-baseline", action="store_true", help="only the fault phase")
    ap.add_argument("--json", default="benchmarks/results/service_load.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.calls, args.concurrency = 400, 64
    return args


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    load_before = os.getloadavg()
    phases: list[PhaseResult] = []
    ratio = None
    fast = make_workload(args.calls, {"ok": 1.0}, args.timeout_s, args.seed)
    if not args.skip_baseline:
        phases.append(await phase_in_process(args, fast))
        fast = make_workload(args.calls, {"ok": 1.0}, args.timeout_s, args.seed)  # fresh ids
        phases.append(await phase_service(args, fast))
        ratio = phases[1].throughput_per_s / phases[0].throughput_per_s
    mixed = make_workload(
        args.calls, {"ok": 0.6, "stdin": 0.2, "error": 0.15, "timeout": 0.05}, args.timeout_s, args.seed + 1
    )
    phases.append(await phase_faults(args, mixed))
    load_after = os.getloadavg()
    print_table(phases, ratio)
    return {
        "benchmark": "service_load",
        "config": vars(args),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "loadavg_before": load_before,
            "loadavg_after": load_after,
        },
        "service_vs_in_process_throughput": ratio,
        "phases": [asdict(p) for p in phases],
        "zero_lost_duplicated_wrong": all(p.lost == p.duplicated == p.wrong == 0 for p in phases),
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    report = asyncio.run(main_async(args))
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, default=str))
    console.print(f"wrote {path}")
    return 0 if report["zero_lost_duplicated_wrong"] else 1


if __name__ == "__main__":
    sys.exit(main())
