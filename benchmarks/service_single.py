"""Single-call requests through ``tirl sandbox serve`` against the in-process pool and a fresh process per call
(issue 13, item 7).

A client on the same machine keeps K = 16 calls in flight. The same calls, in the same run, per executor (the
HTTP client each row uses in brackets):

- ``in_process``: ``LocalSandbox`` (same workers, same preload) called directly by K coroutines (no HTTP);
- ``service``: one ``tirl sandbox serve`` process, one raw ``POST /v1/execute`` per call (aiohttp, keep-alive,
  no batching);
- ``service_httpx``: the same requests through httpx (the client of the runs before the switch to aiohttp;
  kept for comparison);
- ``service_client``: the same server through ``SandboxClient.run`` with its default ``ClientConfig`` (aiohttp):
  what RL and eval use when ``sandbox.backend`` is a URL; it coalesces the K callers' calls into
  ``POST /v1/execute/stream`` requests (sent when 64 are waiting or 5 ms after the first; at once when nothing
  is in flight) and answers each call as its line arrives (before the stream endpoint these rows went through
  ``POST /v1/execute/batch``, every call of a batch answered when its slowest one finished);
- ``service_routes``: raw single-call requests (aiohttp) to a second server started with ``--no-fast-path``
  (every request through FastAPI's routing: the configuration before issue 13's fast path);
- ``in_process_batch`` / ``service_batch`` / ``service_stream`` / ``service_client_batch``: batches of 16 calls,
  ``--batches-in-flight`` batches at a time (default 2: the next batch waits while one runs, as in an RL step):
  ``LocalSandbox.run_batch``; one raw ``POST /v1/execute/batch`` per batch (aiohttp); one raw
  ``POST /v1/execute/stream`` per batch (aiohttp, lines read as they come; the batch's caller still takes the
  results when the last line came, so this row differs from ``service_batch`` only by the stream's cost);
  ``SandboxClient.run_batch`` (aiohttp, through the stream endpoint: each call of the batch answered as it
  finishes; the client may merge the batches in flight into one POST);
- ``fresh``: one ``python -I -c`` per call with the same limits (``sandbox_bench.run_baseline``).

Workloads (each answer checked): ``trivial`` (``print(1)``), ``sympy`` (solve a quadratic), ``numpy`` (200x200
matmul), from :mod:`sandbox_bench`. Reported: calls/s, p50/p99, the ratios of each service row to its in-process
row (``service_client / in_process`` and ``service_client_batch / in_process_batch`` are issue 13's target) and
``x fresh`` ratios,
and the CPU time per call outside the sandbox workers, which does not depend on the machine's load: this
process (the client; in-process, the pool's host side) and the server process itself (without its workers).

Usage::

    .venv/bin/python benchmarks/service_single.py            # full run
    .venv/bin/python benchmarks/service_single.py --quick
    .venv/bin/python benchmarks/service_single.py --json out.json

Writes JSON (default ``benchmarks/results/service_single.json``) with the load average before and after.
Rows by executor name: the JSON's ``rows`` and ``summary`` keys are the executor names above.
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
from tirl.service.client import SandboxClient  # noqa: E402
from tirl.service.process import ServiceProcess  # noqa: E402
from tirl.service.schemas import result_from_wire  # noqa: E402
from tirl.service.transport import AiohttpTransport  # noqa: E402

console = Console(width=None if sys.stdout.isatty() else 200)
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

    return {
        "calls": len(calls),
        "k": k,
        "seconds": round(seconds, 2),
        "calls_per_s": round(len(calls) / seconds, 1),
        "p50_ms": pct(0.5),
        "p99_ms": pct(0.99),
        "wrong": wrong,
    }


async def drive_batches(calls, batch: int, fn, in_flight: int = 1) -> dict:
    """``in_flight`` closed-loop clients, each sending one batch of ``batch`` calls at a time;
    ``fn(requests) -> results`` (in order). With one client the pool idles while a batch's last calls finish and
    the next batch travels; with two or more the next batch is already waiting (what an RL step's many
    trajectories do). Checks every answer."""
    wrong = 0
    chunks = [calls[i : i + batch] for i in range(0, len(calls), batch)]
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
    return {
        "calls": len(calls),
        "k": batch,
        "batches_in_flight": in_flight,
        "seconds": round(seconds, 2),
        "calls_per_s": round(len(calls) / seconds, 1),
        "p50_ms": None,
        "p99_ms": None,
        "wrong": wrong,
    }


async def main_async(args: argparse.Namespace) -> dict:
    scale = 0.25 if args.quick else 1.0
    counts = {"trivial": (800, 80), "sympy": (200, 12), "numpy": (400, 40)}
    load_before = os.getloadavg()
    server = ServiceProcess(workers=args.workers, extra_args=["--preload", PRELOAD])
    routes = ServiceProcess(workers=args.workers, extra_args=["--preload", PRELOAD, "--no-fast-path"])
    server.start()
    routes.start()
    rows: list[dict] = []
    raw = AiohttpTransport(max_connections=args.k, keepalive_expiry_s=4.0)  # the raw aiohttp rows' connections
    try:
        limits = httpx.Limits(max_connections=args.k, max_keepalive_connections=args.k)
        async with (
            LocalSandbox(workers=args.workers, preload=tuple(PRELOAD.split(","))) as sb,
            httpx.AsyncClient(timeout=120, limits=limits, trust_env=False) as hx,
            SandboxClient(server.url) as client,
        ):

            def wire(req: ExecutionRequest) -> dict:
                return {"request_id": req.request_id, "code": req.code, "timeout_s": req.timeout_s}

            def single(url: str):
                """Raw single-call requests over aiohttp."""

                async def via(req: ExecutionRequest) -> ExecutionResult:
                    response = await raw.request(
                        "POST",
                        url + "/v1/execute",
                        body=json.dumps(wire(req)).encode(),
                        read_timeout_s=120,
                        connect_timeout_s=10,
                    )
                    return result_from_wire(response.json(), req.request_id)

                return via

            async def via_httpx(req: ExecutionRequest) -> ExecutionResult:
                """Raw single-call requests over httpx (the earlier runs' client)."""
                response = await hx.post(server.url + "/v1/execute", json=wire(req))
                return result_from_wire(response.json(), req.request_id)

            via_service, via_routes = single(server.url), single(routes.url)

            async def batch_via_service(reqs: list[ExecutionRequest]) -> list[ExecutionResult]:
                body = json.dumps({"requests": [wire(r) for r in reqs]}).encode()
                response = await raw.request(
                    "POST", server.url + "/v1/execute/batch", body=body, read_timeout_s=120, connect_timeout_s=10
                )
                return [result_from_wire(w, r.request_id) for r, w in zip(reqs, response.json()["results"])]

            async def batch_via_stream(reqs: list[ExecutionRequest]) -> list[ExecutionResult]:
                body = json.dumps({"requests": [wire(r) for r in reqs]}).encode()
                results: list[ExecutionResult | None] = [None] * len(reqs)
                async with raw.stream_lines(
                    "POST", server.url + "/v1/execute/stream", body=body, read_timeout_s=120, connect_timeout_s=10
                ) as stream:
                    async for line in stream.lines():
                        item = json.loads(line)
                        results[item["index"]] = result_from_wire(item["result"], reqs[item["index"]].request_id)
                return [
                    r if r is not None else ExecutionResult.internal_error("no line", q.request_id)
                    for r, q in zip(results, reqs)
                ]

            for _ in range(2 * sb.max_concurrency):  # warm every path
                await sb.run(ExecutionRequest("print(1)"))
                for via in (via_service, via_httpx, via_routes, client.run):
                    await via(ExecutionRequest("print(1)", request_id=uuid.uuid4().hex))
            for rnd in range(args.rounds):
                for name, (n, n_fresh) in counts.items():
                    n = max(args.k, int(n * scale))
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "in_process",
                            **await measured(drive(workload(name, n), args.k, sb.run), None, n),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service",
                            **await measured(drive(workload(name, n), args.k, via_service), server.pid, n),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_httpx",
                            **await measured(drive(workload(name, n), args.k, via_httpx), server.pid, n),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_client",
                            **await measured(drive(workload(name, n), args.k, client.run), server.pid, n),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_routes",
                            **await measured(drive(workload(name, n), args.k, via_routes), routes.pid, n),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "in_process_batch",
                            **await measured(
                                drive_batches(workload(name, n), args.k, sb.run_batch, args.batches_in_flight), None, n
                            ),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_batch",
                            **await measured(
                                drive_batches(workload(name, n), args.k, batch_via_service, args.batches_in_flight),
                                server.pid,
                                n,
                            ),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_stream",
                            **await measured(
                                drive_batches(workload(name, n), args.k, batch_via_stream, args.batches_in_flight),
                                server.pid,
                                n,
                            ),
                        }
                    )
                    rows.append(
                        {
                            "round": rnd,
                            "workload": name,
                            "executor": "service_client_batch",
                            **await measured(
                                drive_batches(workload(name, n), args.k, client.run_batch, args.batches_in_flight),
                                server.pid,
                                n,
                            ),
                        }
                    )
                    if rnd == 0:
                        rows.append(
                            {
                                "round": rnd,
                                "workload": name,
                                "executor": "fresh",
                                **await drive(workload(name, max(args.k, int(n_fresh * scale))), args.k, run_baseline),
                            }
                        )
    finally:
        await raw.aclose()
        server.stop()
        routes.stop()
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "k": args.k,
        "workers": args.workers,
        "batches_in_flight": args.batches_in_flight,
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "rows": rows,
        "summary": summarize(rows),
    }


#: Every executor row, in the order they run (the module docstring says what each is and which client it uses).
EXECUTORS = (
    "in_process",
    "service",
    "service_httpx",
    "service_client",
    "service_routes",
    "in_process_batch",
    "service_batch",
    "service_stream",
    "service_client_batch",
    "fresh",
)


def summarize(rows: list[dict]) -> dict:
    """Per workload: median calls/s per executor over rounds, service / in_process, and x fresh."""
    out: dict = {}
    for name in dict.fromkeys(r["workload"] for r in rows):
        med, cpu = {}, {}
        for ex in EXECUTORS:
            mine = [r for r in rows if r["workload"] == name and r["executor"] == ex]
            values = sorted(r["calls_per_s"] for r in mine)
            med[ex] = values[len(values) // 2] if values else None
            for key in ("client_cpu_ms_per_call", "server_cpu_ms_per_call"):
                values = sorted(r[key] for r in mine if r.get(key) is not None)
                if values:
                    cpu[f"{ex}_{key}"] = values[len(values) // 2]
        fresh = med["fresh"] or float("nan")
        out[name] = {
            **{f"{k}_calls_per_s": v for k, v in med.items()},
            **cpu,
            "service_over_in_process": round(med["service"] / med["in_process"], 3),
            "httpx_over_in_process": round(med["service_httpx"] / med["in_process"], 3),
            "client_over_in_process": round(med["service_client"] / med["in_process"], 3),
            "routes_over_in_process": round(med["service_routes"] / med["in_process"], 3),
            "batch_over_in_process_batch": round(med["service_batch"] / med["in_process_batch"], 3),
            "stream_over_in_process_batch": round(med["service_stream"] / med["in_process_batch"], 3),
            "client_batch_over_in_process_batch": round(med["service_client_batch"] / med["in_process_batch"], 3),
            "service_x_fresh": round(med["service"] / fresh, 1),
            "client_x_fresh": round(med["service_client"] / fresh, 1),
            "in_process_x_fresh": round(med["in_process"] / fresh, 1),
        }
    return out


def render(report: dict) -> None:
    m = report["machine"]
    head = (
        f"service_single {report['date']} (K = {report['k']}, {report['workers']} workers, {m['cores']} cores, "
        f"load {m['load_avg_before'][0]:.1f} -> {m['load_avg_after'][0]:.1f})"
    )
    single = Table(title=f"{head}: single calls, K in flight")
    for col in (
        "workload",
        "in-process /s",
        "raw aiohttp /s",
        "raw/in-proc",
        "raw httpx /s",
        "httpx/in-proc",
        "SandboxClient.run /s",
        "client/in-proc",
        "raw aiohttp, no fast path /s",
        "fresh /s",
        "client x fresh",
        "in-process x fresh",
    ):
        single.add_column(col)
    for name, s in report["summary"].items():
        single.add_row(
            name,
            str(s["in_process_calls_per_s"]),
            str(s["service_calls_per_s"]),
            f"{s['service_over_in_process']:.2f}",
            str(s["service_httpx_calls_per_s"]),
            f"{s['httpx_over_in_process']:.2f}",
            str(s["service_client_calls_per_s"]),
            f"{s['client_over_in_process']:.2f}",
            str(s["service_routes_calls_per_s"]),
            str(s["fresh_calls_per_s"]),
            f"{s['client_x_fresh']}",
            f"{s['in_process_x_fresh']}",
        )
    console.print(single)
    batches = Table(title=f"batches of {report['k']}, {report.get('batches_in_flight', '?')} in flight")
    for col in (
        "workload",
        "in-process run_batch /s",
        "raw aiohttp POST /s",
        "raw/in-proc",
        "raw aiohttp stream /s",
        "stream/in-proc",
        "SandboxClient.run_batch /s",
        "client/in-proc",
    ):
        batches.add_column(col)
    for name, s in report["summary"].items():
        batches.add_row(
            name,
            str(s["in_process_batch_calls_per_s"]),
            str(s["service_batch_calls_per_s"]),
            f"{s['batch_over_in_process_batch']:.2f}",
            str(s["service_stream_calls_per_s"]),
            f"{s['stream_over_in_process_batch']:.2f}",
            str(s["service_client_batch_calls_per_s"]),
            f"{s['client_batch_over_in_process_batch']:.2f}",
        )
    console.print(batches)
    cpu = Table(
        title="CPU ms per call outside the sandbox workers (medians): this process (the client; in process, "
        "the pool's host side) / the server process itself"
    )
    cpu.add_column("executor (client)")
    names = list(report["summary"])
    for name in names:
        cpu.add_column(name)
    labels = {
        "in_process": "in-process (no HTTP)",
        "service": "single (raw aiohttp)",
        "service_httpx": "single (raw httpx)",
        "service_client": "single (SandboxClient.run)",
        "service_routes": "single, no fast path (raw aiohttp)",
        "in_process_batch": "batch in-process",
        "service_batch": "batch (raw aiohttp)",
        "service_stream": "batch, streamed (raw aiohttp)",
        "service_client_batch": "batch (SandboxClient.run_batch)",
    }
    for ex, label in labels.items():
        cpu.add_row(
            label,
            *(
                f"{report['summary'][n].get(f'{ex}_client_cpu_ms_per_call', '')} / "
                f"{report['summary'][n].get(f'{ex}_server_cpu_ms_per_call', '-')}"
                for n in names
            ),
        )
    console.print(cpu)
    bad = [r for r in report["rows"] if r["wrong"]]
    console.print("no wrong answers" if not bad else f"[red]{len(bad)} phases with wrong answers[/]")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--k", type=int, default=16, help="requests in flight")
    ap.add_argument(
        "--batches-in-flight",
        type=int,
        default=2,
        help="batch clients sending at once in the batch phases (1: one batch at a time)",
    )
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
