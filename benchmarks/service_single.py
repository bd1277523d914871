"""Single-call requests through ``tirl sandbox serve`` against the in-process pool and a fresh process per call
(issue 13, item 7).

A client on the same machine keeps K = 16 single-call ``POST /v1/execute`` requests in flight (httpx, one
request per call, keep-alive connections; no batching). The same calls, in the same run:

- ``in_process``: ``LocalSandbox`` (same workers, same preload) called directly by K coroutines;
- ``service``: one ``tirl sandbox serve`` process, single-call requests;
- ``service_routes``: the same through a second server started with ``--no-fast-path`` (every request through
  FastAPI's routing: the configuration before issue 13's fast path);
- ``in_process_batch`` / ``service_batch``: ``run_batch`` of 16 calls, ``--batches-in-flight`` batches at a time
  (default 2: the next batch waits while one runs, as in an RL step), in process and through
  ``POST /v1/execute/batch`` of the same server (the shape ``SandboxClient`` sends);
- ``fresh``: one ``python -I -c`` per call with the same limits (``sandbox_bench.run_baseline``).

Workloads (each answer checked): ``trivial`` (``print(1)``), ``sympy`` (solve a quadratic), ``numpy`` (200x200
matmul), from :mod:`sandbox_bench`. Reported: calls/s, p50/p99, ``service / in_process`` and ``x fresh`` ratios,
and the CPU time per call outside the sandbox workers, which does not depend on the machine's load: this
process (the client; in-process, the pool's host side) and the server process itself (without its workers).

Usage::

    .venv/bin/python benchmarks/service_single.py            # full run
    .venv/bin/python benchmarks/service_single.py --quick
    .venv/bin/python benchmarks/service_single.py --json out.json

Writes JSON (default ``benchmarks/results/service_single.json``) with the load average before and after.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import sys
import time
import uuid
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sandbox_bench import run_baseline, workload  # noqa: E402
from tirl.sandbox import ExecutionRequest, ExecutionResult, LocalSandbox  # noqa: E402
from tirl.service.process import ServiceProcess  # noqa: E402
from tirl.service.schemas import result_from_wire  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 150)
PRELOAD = "numpy,scipy,sympy"


_TICK = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """CPU seconds of process ``pid`` itself (not its children: for the server, without its sandbox workers)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def measured(coro, server_pid: int | None, n: int) -> dict:
    """Run a phase and add the CPU per call of this process (the client, or the pool's host side in-process)
    and of the server process (its own, without the workers)."""
    c0 = process_cpu_s(os.getpid())
    s0 = process_cpu_s(server_pid) if server_pid else 0.0
    row = await coro
    row["client_cpu_ms_per_call"] = round((process_cpu_s(os.getpid()) - c0) / n * 1000, 3)
    row["server_cpu_ms_per_call"] = round((process_cpu_s(server_pid) - s0) / n * 1000, 3) if server_pid else None
    return row


def _request(call) -> ExecutionRequest:
    """The execution request of a workload call (a fresh request id: no idempotency-cache hits)."""
    return ExecutionRequest(call.code, timeout_s=call.timeout_s, request_id=uuid.uuid4().hex)


def _wrong(call, result: ExecutionResult) -> bool:
    """Whether ``result`` is not the workload call's expected answer."""
    return result.status != call.status or (call.stdout is not None and result.stdout != call.stdout)


async def drive(calls, k: int, fn) -> dict:
    """K closed-loop clients over ``calls``; ``fn(request) -> ExecutionResult``. Checks every answer."""
    latencies: list[float] = []
    wrong = 0
    index = 0

    async def client() -> None:
        nonlocal index, wrong
        while index < len(calls):
            call = calls[index]
            index += 1
            t0 = time.perf_counter()
            result = await fn(_request(call))
            latencies.append(time.perf_counter() - t0)
            wrong += _wrong(call, result)

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(k)))
    seconds = time.perf_counter() - start
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, math.ceil(q * len(latencies)) - 1)] * 1000, 1)

    return {"calls": len(calls), "k": k, "seconds": round(seconds, 2), "calls_per_s": round(len(calls) / seconds, 1),
            "p50_ms": pct(0.5), "p99_ms": pct(0.99), "wrong": wrong}


async def drive_batches(calls, batch: int, fn, in_flight: int = 1) -> dict:
    """``in_flight`` closed-loop clients, each sending one batch of ``batch`` calls at a time;
    ``fn(requests) -> results`` (in order). With one client the pool idles while a batch's last calls finish and
    the next batch travels; with two or more the next batch is already waiting (what an RL step's many
    trajectories do). Checks every answer."""
    wrong = 0
    chunks = [calls[i:i + batch] for i in range(0, len(calls), batch)]
    index = 0

    async def client() -> None:
        nonlocal index, wrong
        while index < len(chunks):
            chunk = chunks[index]
            index += 1
            results = await fn([_request(c) for c in chunk])
            wrong += sum(_wrong(call, result) for call, result in zip(chunk, results))

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(in_flight)))
    seconds = time.perf_counter() - start
    return {"calls": len(calls), "k": batch, "batches_in_flight": in_flight, "seconds": round(seconds, 2),
            "calls_per_s": round(len(calls) / seconds, 1), "p50_ms": None, "p99_ms": None, "wrong": wrong}


async def main_async(args: argparse.Namespace) -> dict:
    scale = 0.25 if args.quick else 1.0
    counts = {"trivial": (800, 80), "sympy": (200, 12), "numpy": (400, 40)}
    load_before = os.getloadavg()
    server = ServiceProcess(workers=args.workers, extra_args=["--preload", PRELOAD])
    routes = ServiceProcess(workers=args.workers, extra_args=["--preload", PRELOAD, "--no-fast-path"])
    server.start()
    routes.start()
    rows: list[dict] = []
    try:
        limits = httpx.Limits(max_connections=args.k, max_keepalive_connections=args.k)
        async with LocalSandbox(workers=args.workers, preload=tuple(PRELOAD.split(","))) as sb, \
                httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as http:

            def single(url: str):
                async def via(req: ExecutionRequest) -> ExecutionResult:
                    body = {"request_id": req.request_id, "code": req.code, "timeout_s": req.timeout_s}
                    response = await http.post(url + "/v1/execute", json=body)
                    return result_from_wire(response.json(), req.request_id)
                return via

            via_service, via_routes = single(server.url), single(routes.url)

            async def batch_via_service(reqs: list[ExecutionRequest]) -> list[ExecutionResult]:
                body = {"requests": [{"request_id": r.request_id, "code": r.code, "timeout_s": r.timeout_s}
                                     for r in reqs]}
                response = await http.post(server.url + "/v1/execute/batch", json=body)
                return [result_from_wire(w, r.request_id) for r, w in zip(reqs, response.json()["results"])]

            for _ in range(2 * sb.max_concurrency):  # warm both
                await sb.run(ExecutionRequest("print(1)"))
                await via_service(ExecutionRequest("print(1)", request_id=uuid.uuid4().hex))
                await via_routes(ExecutionRequest("print(1)", request_id=uuid.uuid4().hex))
            for rnd in range(args.rounds):
                for name, (n, n_fresh) in counts.items():
                    n = max(args.k, int(n * scale))
                    rows.append({"round": rnd, "workload": name, "executor": "in_process",
                                 **await measured(drive(workload(name, n), args.k, sb.run), None, n)})
                    rows.append({"round": rnd, "workload": name, "executor": "service",
                                 **await measured(drive(workload(name, n), args.k, via_service), server.pid, n)})
                    rows.append({"round": rnd, "workload": name, "executor": "service_routes",
                                 **await measured(drive(workload(name, n), args.k, via_routes), routes.pid, n)})
                    rows.append({"round": rnd, "workload": name, "executor": "in_process_batch",
                                 **await measured(drive_batches(workload(name, n), args.k, sb.run_batch,
                                                                args.batches_in_flight), None, n)})
                    rows.append({"round": rnd, "workload": name, "executor": "service_batch",
                                 **await measured(drive_batches(workload(name, n), args.k, batch_via_service,
                                                                args.batches_in_flight),
                                                  server.pid, n)})
                    if rnd == 0:
                        rows.append({"round": rnd, "workload": name, "executor": "fresh",
                                     **await drive(workload(name, max(args.k, int(n_fresh * scale))), args.k,
                                                   run_baseline)})
    finally:
        server.stop()
        routes.stop()
    return {"date": time.strftime("%Y-%m-%dT%H:%M:%S"), "k": args.k, "workers": args.workers,
            "machine": {"platform": platform.platform(), "python": platform.python_version(),
                        "cores": len(os.sched_getaffinity(0)), "load_avg_before": load_before,
                        "load_avg_after": os.getloadavg()},
            "rows": rows, "summary": summarize(rows)}


def summarize(rows: list[dict]) -> dict:
    """Per workload: median calls/s per executor over rounds, service / in_process, and x fresh."""
    out: dict = {}
    for name in dict.fromkeys(r["workload"] for r in rows):
        med, cpu = {}, {}
        for ex in ("in_process", "service", "service_routes", "in_process_batch", "service_batch", "fresh"):
            mine = [r for r in rows if r["workload"] == name and r["executor"] == ex]
            values = sorted(r["calls_per_s"] for r in mine)
            med[ex] = values[len(values) // 2] if values else None
            for key in ("client_cpu_ms_per_call", "server_cpu_ms_per_call"):
                values = sorted(r[key] for r in mine if r.get(key) is not None)
                if values:
                    cpu[f"{ex}_{key}"] = values[len(values) // 2]
        fresh = med["fresh"] or float("nan")
        out[name] = {**{f"{k}_calls_per_s": v for k, v in med.items()}, **cpu,
                     "service_over_in_process": round(med["service"] / med["in_process"], 3),
                     "routes_over_in_process": round(med["service_routes"] / med["in_process"], 3),
                     "batch_over_in_process_batch": round(med["service_batch"] / med["in_process_batch"], 3),
                     "service_x_fresh": round(med["service"] / fresh, 1),
                     "in_process_x_fresh": round(med["in_process"] / fresh, 1)}
    return out


def render(report: dict) -> None:
    m = report["machine"]
    table = Table(title=f"service_single {report['date']} (K = {report['k']}, {report['workers']} workers, "
                        f"{m['cores']} cores, load {m['load_avg_before'][0]:.1f} -> {m['load_avg_after'][0]:.1f})")
    for col in ("workload", "in-process /s", "service /s", "svc/in-proc", "no fast path /s", "in-proc batch /s",
                "svc batch /s", "batch svc/in-proc", "fresh /s", "service x fresh", "in-process x fresh"):
        table.add_column(col)
    for name, s in report["summary"].items():
        table.add_row(name, str(s["in_process_calls_per_s"]), str(s["service_calls_per_s"]),
                      f"{s['service_over_in_process']:.2f}", str(s["service_routes_calls_per_s"]),
                      str(s["in_process_batch_calls_per_s"]),
                      str(s["service_batch_calls_per_s"]), f"{s['batch_over_in_process_batch']:.2f}",
                      str(s["fresh_calls_per_s"]), f"{s['service_x_fresh']}", f"{s['in_process_x_fresh']}")
    console.print(table)
    cpu = Table(title="CPU ms per call outside the sandbox workers (medians): the client / the pool's host side "
                      "in-process, and the server process itself")
    for col in ("workload", "in-process host", "service: client", "service: server", "no fast path: server",
                "batch in-process host", "batch: client", "batch: server"):
        cpu.add_column(col)
    for name, s in report["summary"].items():
        cpu.add_row(name, *(str(s.get(k, "")) for k in (
            "in_process_client_cpu_ms_per_call", "service_client_cpu_ms_per_call", "service_server_cpu_ms_per_call",
            "service_routes_server_cpu_ms_per_call",
            "in_process_batch_client_cpu_ms_per_call", "service_batch_client_cpu_ms_per_call",
            "service_batch_server_cpu_ms_per_call")))
    console.print(cpu)
    bad = [r for r in report["rows"] if r["wrong"]]
    console.print("no wrong answers" if not bad else f"[red]{len(bad)} phases with wrong answers[/]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=16, help="requests in flight")
    ap.add_argument("--batches-in-flight", type=int, default=2,
                    help="batch clients sending at once in the batch phases (1: one batch at a time)")
    ap.add_argument("--workers", type=int, default=None, help="sandbox workers (default: cores)")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians reported)")
    ap.add_argument("--quick", action="store_true", help="a quarter of the calls, one round")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "service_single.json")
    args = ap.parse_args()
    if args.workers is None:
        args.workers = len(os.sched_getaffinity(0))
    if args.quick:
        args.rounds = 1
    report = asyncio.run(main_async(args))
    render(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
