"""Benchmark of the local execution pool (issue 3) against a fresh-Python-process-per-call baseline.

Workloads (each answer is checked against what its code must print):

- ``trivial``: ``print(1)``;
- ``sympy``: solve a quadratic with sympy;
- ``numpy``: a 200x200 matrix product;
- ``mix_timeouts``: 90 % ``print(i)`` and 10 % ``while True: pass`` with ``timeout_s`` = 0.5 s.

Each workload runs through two executors in the same process run:

- ``pool``: ``LocalSandbox`` with the default configuration (one worker per core, numpy/scipy/sympy
  preloaded, every isolation layer the machine allows);
- ``baseline``: one fresh ``python -I -c`` process per call with the same limits (allowlisted environment,
  new session killed at the deadline, RLIMIT_AS/CPU/NPROC/FSIZE/NOFILE), as code-judge-style services do.

Both are driven by K closed-loop clients (K = the pool's ``max_concurrency``, so all cores are busy): each
client sends its next call when the previous one is answered. Throughput is calls answered per second of
the phase; latency p50/p99 is per call, from send to answer. The ``ratio`` column is pool over baseline
throughput. Two more trivial phases (pool only): ``trivial_seq`` (K = 1, the unloaded latency) and
``trivial_cores`` (K = one call per worker = per core: every core busy, no call waiting for a CPU). The
latency target is read there: at K above the core count, p50 is mostly time spent waiting for a CPU
(Little's law: p50 ~ K / throughput), not sandbox work.

Because the development machines are shared, the script also counts the CPU time of the whole system under
test (this process, the workers and every call process; for the baseline, the fresh interpreters) per call.
``idle N-core calls/s`` = N cores / CPU per call is the throughput that CPU cost allows on an idle machine,
a load-independent companion of the measured calls/s (it ignores the pool's idle gaps, so it is an upper
bound). Timeout calls count their full CPU use (a busy loop burns its whole deadline).

Targets (issue 3, on the 2-core machines): trivial >= 150 calls/s with p50 <= 15 ms; sympy >= 20x baseline.

Usage::

    .venv/bin/python benchmarks/sandbox_bench.py            # full run (about two minutes on 2 cores)
    .venv/bin/python benchmarks/sandbox_bench.py --quick    # small run
    .venv/bin/python benchmarks/sandbox_bench.py --json out.json
    .venv/bin/python benchmarks/sandbox_bench.py --quick --no-cgroup   # without the per-call cgroup layer
    .venv/bin/python benchmarks/sandbox_bench.py --quick --no-ipc-namespace   # without the per-call IPC namespace
    .venv/bin/python benchmarks/sandbox_bench.py --layers-ab 4   # with/without issue 13's layers, interleaved
    .venv/bin/python benchmarks/sandbox_bench.py --layers-split 8   # CPU per call, each of those layers off alone

Prints a table and writes JSON (default ``benchmarks/results/sandbox_bench.json``) with the load average
before and after, since timings on a shared machine depend on what else runs.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import os
import platform
import resource
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from tirl.sandbox import ExecutionRequest, ExecutionResult, LocalSandbox
from tirl.sandbox.isolation import scrubbed_env

console = Console(width=None if sys.stdout.isatty() else 150)

SYMPY_CODE = "from sympy import symbols, solve\nx = symbols('x')\nprint(solve(x**2 - 2*x - 3, x))"
NUMPY_CODE = (
    "import numpy as np\na = np.arange(40000, dtype=float).reshape(200, 200) / 40000\n"
    "print(round(float((a @ a).trace()), 3))"
)
LOOP_CODE = "while True:\n    pass"


@dataclass
class Call:
    """One call of a workload and what it must give."""

    code: str
    status: str
    stdout: str | None
    timeout_s: float = 10.0


def workload(name: str, n: int) -> list[Call]:
    """The ``n`` calls of workload ``name``."""
    if name.startswith("trivial"):
        return [Call("print(1)", "ok", "1\n") for _ in range(n)]
    if name == "sympy":
        return [Call(SYMPY_CODE, "ok", "[-1, 3]\n") for _ in range(n)]
    if name == "numpy":
        total = sum(sum((i * 200 + k) * (k * 200 + i) for k in range(200)) for i in range(200))
        expected = f"{round(float(total) / 40000**2, 3)}\n"
        return [Call(NUMPY_CODE, "ok", expected) for _ in range(n)]
    if name == "mix_timeouts":
        return [
            Call(LOOP_CODE, "timeout", None, 0.5) if i % 10 == 9 else Call(f"print({i})", "ok", f"{i}\n")
            for i in range(n)
        ]
    raise ValueError(name)


# -- the baseline: a fresh interpreter per call -------------------------------------------------------

_BASELINE_WRAPPER = r"""
import os, resource, sys
t, m = float(sys.argv[1]), int(sys.argv[2])
cpu = int(-(-t // 1)) + 1
for which, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, (m << 20,) * 2),
                     (resource.RLIMIT_NPROC, (256, 256)), (resource.RLIMIT_FSIZE, (64 << 20,) * 2),
                     (resource.RLIMIT_NOFILE, (256, 256))):
    resource.setrlimit(which, value)
code = os.environ.pop("TIRL_BENCH_CODE")
exec(compile(code, "<code>", "exec"), {"__name__": "__main__"})
"""


async def run_baseline(req: ExecutionRequest) -> ExecutionResult:
    """Run ``req`` in a fresh ``python -I`` process (new session, rlimits, killed at the deadline)."""
    env = scrubbed_env()
    env["TIRL_BENCH_CODE"] = req.code
    start = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-I",
        "-c",
        _BASELINE_WRAPPER,
        str(req.timeout_s),
        str(req.memory_mb),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(req.stdin.encode()), req.timeout_s)
    except TimeoutError:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        await proc.wait()
        return ExecutionResult("timeout", duration_s=time.perf_counter() - start, exit_code=-9)
    status = "ok" if proc.returncode == 0 else "error"
    return ExecutionResult(
        status,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        exit_code=proc.returncode,
        duration_s=time.perf_counter() - start,
    )


# -- driving ------------------------------------------------------------------------------------------


@dataclass
class PhaseResult:
    """Outcome of one workload through one executor."""

    workload: str
    executor: str
    calls: int
    concurrency: int
    seconds: float
    calls_per_s: float
    p50_ms: float
    p99_ms: float
    wrong: int
    cpu_ms_per_call: float


def cpu_seconds(worker_pids: list[int]) -> float:
    """CPU seconds used so far by this process, its reaped children, and the pool's workers with theirs."""
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    tick = os.sysconf("SC_CLK_TCK")
    for pid in worker_pids:
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
            total += sum(int(x) for x in fields[11:15]) / tick  # utime stime cutime cstime
        except OSError:
            pass
    return total


async def drive(
    name: str,
    executor: str,
    calls: list[Call],
    k: int,
    fn: Callable[[ExecutionRequest], Awaitable[ExecutionResult]],
    progress: Progress,
    worker_pids: list[int],
) -> PhaseResult:
    """Send ``calls`` through ``fn`` from ``k`` closed-loop clients; check every answer. CPU time of the
    whole system under test (this process, the workers, all call processes) is counted per call."""
    task = progress.add_task(f"{name} / {executor}", total=len(calls))
    latencies: list[float] = []
    wrong = 0
    index = 0

    async def client() -> None:
        nonlocal index, wrong
        while index < len(calls):
            call = calls[index]
            index += 1
            t0 = time.perf_counter()
            result = await fn(ExecutionRequest(call.code, timeout_s=call.timeout_s))
            latencies.append(time.perf_counter() - t0)
            if result.status != call.status or (call.stdout is not None and result.stdout != call.stdout):
                wrong += 1
            progress.advance(task)

    cpu0 = cpu_seconds(worker_pids)
    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(k)))
    seconds = time.perf_counter() - start
    cpu = cpu_seconds(worker_pids) - cpu0
    latencies.sort()

    def pct(q: float) -> float:
        return round(latencies[min(len(latencies) - 1, math.ceil(q * len(latencies)) - 1)] * 1000, 1)

    return PhaseResult(
        name,
        executor,
        len(calls),
        k,
        round(seconds, 2),
        round(len(calls) / seconds, 1),
        pct(0.5),
        pct(0.99),
        wrong,
        round(cpu / len(calls) * 1000, 2),
    )


async def main_async(args: argparse.Namespace) -> dict:
    scale = 0.25 if args.quick else 1.0
    counts = {  # (pool calls, baseline calls)
        "trivial": (600, 60),
        "sympy": (200, 10),
        "numpy": (300, 40),
        "mix_timeouts": (300, 60),
    }
    load_before = os.getloadavg()
    results: list[PhaseResult] = []
    async with LocalSandbox(cgroup=not args.no_cgroup, ipc_namespace=not args.no_ipc_namespace) as sb:
        k = sb.max_concurrency
        layers = await sb.layer_report()
        for _ in range(2 * k):  # warm the workers' first-call paths
            await sb.run(ExecutionRequest("print(1)"))
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            pids = sb.worker_pids()
            results.append(
                await drive(
                    "trivial_seq", "pool", workload("trivial", max(20, int(200 * scale))), 1, sb.run, progress, pids
                )
            )
            results.append(
                await drive(
                    "trivial_cores",
                    "pool",
                    workload("trivial", max(20, int(400 * scale))),
                    sb.workers,
                    sb.run,
                    progress,
                    pids,
                )
            )
            for name, (n_pool, n_base) in counts.items():
                results.append(
                    await drive(name, "pool", workload(name, max(k, int(n_pool * scale))), k, sb.run, progress, pids)
                )
                results.append(
                    await drive(
                        name, "baseline", workload(name, max(k, int(n_base * scale))), k, run_baseline, progress, pids
                    )
                )
    load_after = os.getloadavg()
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_before": load_before,
            "load_avg_after": load_after,
        },
        "pool": {
            "workers": sb.workers,
            "max_concurrency": sb.max_concurrency,
            "active_layers": [layer["name"] for layer in layers if layer["active"]],
        },
        "results": [asdict(r) for r in results],
    }


# -- A/B of the issue-13 layers (uid per call, private /proc and /dev/shm) in the same run -----------------

#: The layers issue 13 added; ``--layers-ab`` compares the pool with and without them.
NEW_LAYERS = ("uid_per_call", "private_proc", "private_shm")


def setup_cost(n: int = 300) -> dict:
    """CPU and wall time per call of the issue-13 set-up steps alone, in forked processes like a call's
    (each the init of a fresh PID namespace): ``unshare(CLONE_NEWNS)`` + mounting ``/proc`` and a tmpfs on
    ``/dev/shm`` (and the namespace's teardown at exit), against the same fork without them; and one
    claim + release of a per-call uid. Needs root; runs in a forked helper (its own mount namespace)."""
    import tempfile

    from tirl.sandbox import _linux, uids
    from tirl.sandbox.isolation import CallPlan, _private_mounts

    r, w = os.pipe()
    helper = os.fork()
    if helper == 0:  # pragma: no cover - the helper
        os.close(r)
        out: dict = {}
        try:
            _linux.unshare(_linux.CLONE_NEWNS)
            _linux.mount(None, "/", None, _linux.MS_REC | _linux.MS_PRIVATE)
            selfns = os.open("/proc/self/ns/pid", os.O_RDONLY)
            plan = CallPlan(private_proc=True, private_shm=True)
            for _round in range(3):
                for mounts in (False, True):
                    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    t0 = time.perf_counter()
                    for _ in range(n):
                        _linux.setns(selfns, _linux.CLONE_NEWPID)
                        _linux.unshare(_linux.CLONE_NEWPID)
                        pid = os.fork()
                        if pid == 0:
                            _linux.unshare(_linux.CLONE_NEWIPC)
                            if mounts:
                                _private_mounts(plan)
                            os._exit(0)
                        os.waitpid(pid, 0)
                    wall = (time.perf_counter() - t0) / n * 1000
                    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
                    cpu = ((c1.ru_utime + c1.ru_stime) - (c0.ru_utime + c0.ru_stime)) / n * 1000
                    key = "with_mounts" if mounts else "without"
                    out.setdefault(key, []).append({"wall_ms": round(wall, 3), "child_cpu_ms": round(cpu, 3)})
            with tempfile.TemporaryDirectory() as tmp:
                os.chmod(tmp, 0o755)
                lock_dir = os.path.join(tmp, "uids")
                uids.prepare_lock_dir(lock_dir)
                alloc = uids.UidAllocator(uids.DEFAULT_FIRST_UID, 64, lock_dir)
                t0 = time.perf_counter()
                for _ in range(n * 10):
                    alloc.release(alloc.claim())
                out["uid_claim_release_ms"] = round((time.perf_counter() - t0) / (n * 10) * 1000, 4)
                alloc.close()
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            out["error"] = f"{type(exc).__name__}: {exc}"
        os.write(w, json.dumps(out).encode())
        os._exit(0)
    os.close(w)
    data = b""
    while chunk := os.read(r, 65536):
        data += chunk
    os.close(r)
    os.waitpid(helper, 0)
    return json.loads(data or b"{}")


async def layers_ab(args: argparse.Namespace) -> dict:
    """Interleaved rounds of the same phases through two pools alive at once: ``before`` (the issue-13
    layers off, the configuration of docs/benchmarks.md's issue-3 run) and ``after`` (defaults)."""
    scale = 0.25 if args.quick else 1.0
    phases = [
        ("trivial_cores", "trivial", None, 300),
        ("trivial", "trivial", "k", 400),
        ("sympy", "sympy", "k", 120),
        ("numpy", "numpy", "k", 200),
    ]
    load_before = os.getloadavg()
    off = {name: False for name in NEW_LAYERS}
    rows: list[dict] = []
    async with LocalSandbox(**off) as before, LocalSandbox() as after:
        pools = {"before": before, "after": after}
        layers = {
            name: [layer["name"] for layer in await sb.layer_report() if layer["active"]] for name, sb in pools.items()
        }
        for sb in pools.values():
            for _ in range(2 * sb.max_concurrency):
                await sb.run(ExecutionRequest("print(1)"))
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress:
            for rnd in range(args.layers_ab):
                for phase, work, kind, n in phases:
                    order = ("before", "after") if rnd % 2 == 0 else ("after", "before")
                    for name in order:
                        sb = pools[name]
                        k = sb.max_concurrency if kind == "k" else sb.workers
                        res = await drive(
                            phase, name, workload(work, max(k, int(n * scale))), k, sb.run, progress, sb.worker_pids()
                        )
                        rows.append({"round": rnd, **asdict(res)})
    summary = {}
    for phase, *_ in phases:
        ratios, cpu_delta = [], []
        for rnd in range(args.layers_ab):
            pair = {r["executor"]: r for r in rows if r["round"] == rnd and r["workload"] == phase}
            ratios.append(pair["after"]["calls_per_s"] / pair["before"]["calls_per_s"])
            cpu_delta.append(pair["after"]["cpu_ms_per_call"] - pair["before"]["cpu_ms_per_call"])
        ratios.sort()
        cpu_delta.sort()
        summary[phase] = {
            "after_over_before_median": round(ratios[len(ratios) // 2], 3),
            "ratios": [round(x, 3) for x in ratios],
            "cpu_ms_per_call_delta_median": round(cpu_delta[len(cpu_delta) // 2], 2),
        }
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "platform": platform.platform(),
            "python": platform.python_version(),
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "layers": layers,
        "rows": rows,
        "summary": summary,
        "setup_cost": setup_cost(),
    }


#: ``--layers-split``: each issue-13 layer switched off on its own.
SPLIT_CONFIGS: dict[str, dict[str, bool]] = {
    "all": {},
    "no_uid_per_call": {"uid_per_call": False},
    "no_private_mounts": {"private_proc": False, "private_shm": False},
    "none_of_the_three": {name: False for name in NEW_LAYERS},
}


async def layers_split(rounds: int, calls: int = 120) -> dict:
    """CPU per sequential trivial call (K = 1, one worker each) of four pools alive at once, rounds interleaved
    in alternating order: all layers, without ``uid_per_call``, without the private mounts, without all three.
    Sequential calls keep contention out of the CPU figures (at K = 1 a call never waits for another)."""
    pools = {name: LocalSandbox(workers=1, preload=("numpy",), **opts) for name, opts in SPLIT_CONFIGS.items()}
    per_call: dict[str, list[float]] = {name: [] for name in pools}
    load_before = os.getloadavg()
    try:
        for sb in pools.values():
            await sb.start()
        for rnd in range(rounds):
            names = list(pools) if rnd % 2 == 0 else list(pools)[::-1]
            for name in names:
                sb = pools[name]
                pids = sb.worker_pids()
                for _ in range(5):
                    await sb.run(ExecutionRequest("print(1)"))
                cpu0 = cpu_seconds(pids)
                for _ in range(calls):
                    await sb.run(ExecutionRequest("print(1)"))
                per_call[name].append(round((cpu_seconds(pids) - cpu0) / calls * 1000, 3))
    finally:
        for sb in pools.values():
            await sb.aclose()
    medians = {name: sorted(v)[len(v) // 2] for name, v in per_call.items()}
    return {
        "date": dt.datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cores": len(os.sched_getaffinity(0)),
            "load_avg_before": load_before,
            "load_avg_after": os.getloadavg(),
        },
        "cpu_ms_per_call": per_call,
        "median": medians,
        "delta_vs_none_ms": {n: round(m - medians["none_of_the_three"], 3) for n, m in medians.items()},
    }


def render_ab(report: dict) -> None:
    """Print the A/B summary and the set-up cost."""
    m = report["machine"]
    table = Table(
        title=f"issue-13 layers A/B {report['date']} ({m['cores']} cores, load "
        f"{m['load_avg_before'][0]:.1f} -> {m['load_avg_after'][0]:.1f})"
    )
    for col in ("phase", "after/before calls/s (median)", "per round", "CPU ms/call delta (median)"):
        table.add_column(col)
    for phase, s in report["summary"].items():
        table.add_row(
            phase,
            f"{s['after_over_before_median']:.3f}",
            " ".join(f"{x:.2f}" for x in s["ratios"]),
            f"{s['cpu_ms_per_call_delta_median']:+.2f}",
        )
    console.print(table)
    console.print(f"set-up steps alone: {json.dumps(report['setup_cost'])}")


def render(report: dict) -> None:
    """Print the table of a report (and the targets)."""
    rows = report["results"]
    base = {r["workload"]: r for r in rows if r["executor"] == "baseline"}
    load = report["machine"]["load_avg_before"][0], report["machine"]["load_avg_after"][0]
    table = Table(
        title=f"sandbox_bench {report['date']} ({report['machine']['cores']} cores, "
        f"load {load[0]:.1f} -> {load[1]:.1f})"
    )
    cores = report["machine"]["cores"]
    for col in (
        "workload",
        "executor",
        "calls",
        "K",
        "calls/s",
        "p50 ms",
        "p99 ms",
        "wrong",
        "ratio",
        "CPU ms/call",
        f"idle {cores}-core calls/s",
    ):
        table.add_column(col, justify="right" if col not in ("workload", "executor") else "left")
    for r in rows:
        ratio = ""
        if r["executor"] == "pool" and r["workload"] in base:
            ratio = f"{r['calls_per_s'] / base[r['workload']]['calls_per_s']:.1f}x"
        table.add_row(
            r["workload"],
            r["executor"],
            str(r["calls"]),
            str(r["concurrency"]),
            f"{r['calls_per_s']:.1f}",
            f"{r['p50_ms']:.1f}",
            f"{r['p99_ms']:.1f}",
            str(r["wrong"]),
            ratio,
            f"{r['cpu_ms_per_call']:.1f}",
            f"{cores * 1000 / r['cpu_ms_per_call']:.0f}" if r["cpu_ms_per_call"] > 0 else "",
        )
    console.print(table)
    pool = {r["workload"]: r for r in rows if r["executor"] == "pool"}
    checks = {
        "trivial >= 150 calls/s": pool["trivial"]["calls_per_s"] >= 150,
        "trivial p50 <= 15 ms (K = cores)": pool["trivial_cores"]["p50_ms"] <= 15,
        "sympy >= 20x baseline": pool["sympy"]["calls_per_s"] >= 20 * base["sympy"]["calls_per_s"],
        "no wrong answers": all(r["wrong"] == 0 for r in rows),
    }
    report["targets"] = checks
    for name, ok in checks.items():
        console.print(f"  {'[green]met[/]' if ok else '[red]NOT met[/]'}: {name}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a quarter of the calls")
    parser.add_argument(
        "--no-cgroup", action="store_true", help="switch the per-call cgroup layer off (to measure its cost)"
    )
    parser.add_argument(
        "--no-ipc-namespace",
        action="store_true",
        help="switch the per-call IPC namespace layer off (to measure its cost)",
    )
    parser.add_argument(
        "--layers-ab",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: ROUNDS interleaved rounds with and without the issue-13 layers (uid per "
        "call, private /proc and /dev/shm), plus the set-up cost of those steps alone",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--layers-split",
        type=int,
        default=0,
        metavar="ROUNDS",
        help="instead: CPU per sequential trivial call with each issue-13 layer off on its own",
    )
    args = parser.parse_args()
    if args.layers_split:
        report = asyncio.run(layers_split(args.layers_split))
        console.print_json(data={k: report[k] for k in ("machine", "median", "delta_vs_none_ms")})
        path = args.json or Path(__file__).parent / "results" / "sandbox_layers_split.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {path}")
        return
    if args.layers_ab:
        report = asyncio.run(layers_ab(args))
        render_ab(report)
        path = args.json or Path(__file__).parent / "results" / "sandbox_layers_ab.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        console.print(f"wrote {path}")
        return
    args.json = args.json or Path(__file__).parent / "results" / "sandbox_bench.json"
    report = asyncio.run(main_async(args))
    render(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
