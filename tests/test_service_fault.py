"""Real servers (``tirl sandbox serve`` over LocalSandbox, child processes on 127.0.0.1) and real faults.

The short CI version of benchmarks/service_load.py: two servers, concurrent client coroutines with a mixed
workload, a sandbox worker of server A SIGKILLed while it runs calls, then the whole of server A SIGKILLed.
Every call must be answered exactly once with the result its code gives (nothing lost, doubled or wrong).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket

import httpx
import pytest

from tirl.sandbox.types import ExecutionRequest
from tirl.service.client import ClientConfig, SandboxClient
from tirl.service.process import ServiceProcess

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def start(n: int, workers: int = 1) -> list[ServiceProcess]:
    servers = [ServiceProcess(workers=workers, extra_args=["--preload", ""]) for _ in range(n)]
    try:
        for s in servers:
            s.start(timeout_s=120)
    except BaseException:
        for s in servers:
            s.stop()
        raise
    return servers


def workload(n: int, seed: int) -> list[tuple[ExecutionRequest, tuple]]:
    """(request, (status, stdout or None, error_type or None)) with fresh ids."""
    rng = random.Random(seed)
    calls = []
    for i in range(n):
        kind = rng.choices(["ok", "stdin", "error", "timeout"], weights=[60, 20, 15, 5])[0]
        if kind == "ok":
            calls.append((ExecutionRequest(code=f"print({i} * 3)", timeout_s=2), ("ok", f"{3 * i}\n", None)))
        elif kind == "stdin":
            calls.append(
                (
                    ExecutionRequest(code="print(int(input()) + 1)", stdin=f"{i}", timeout_s=2),
                    ("ok", f"{i + 1}\n", None),
                )
            )
        elif kind == "error":
            calls.append((ExecutionRequest(code=f"raise ValueError({i})", timeout_s=2), ("error", None, "ValueError")))
        else:
            calls.append((ExecutionRequest(code="import time\ntime.sleep(30)", timeout_s=0.5), ("timeout", None, None)))
    return calls


async def test_real_server_endpoints_and_busy_neighbours():
    (server,) = start(1, workers=2)
    try:
        async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=30) as http:
            health = (await http.get("/healthz")).json()
            bad = await http.post("/v1/execute", content=b"{", headers={"content-type": "application/json"})
            spec = (await http.get("/openapi.json")).json()
        # Field case F14 (scaled down): quick calls succeed while CPU-bound neighbours run into their timeout.
        async with SandboxClient(server.url, ClientConfig(senders=4)) as client:
            busy = [ExecutionRequest(code="while True:\n    pass", timeout_s=1) for _ in range(4)]
            quick = [ExecutionRequest(code="print(1)", timeout_s=10) for _ in range(60)]
            results = await client.run_batch(busy + quick)
        async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=30) as http:
            metrics = (await http.get("/metrics")).text
    finally:
        server.stop()
    assert health["status"] == "ok" and health["max_concurrency"] >= 2
    assert bad.status_code == 422 and "not valid JSON" in bad.json()["message"]
    assert "/v1/execute/batch" in spec["paths"]
    assert [r.status for r in results[:4]] == ["timeout"] * 4
    assert all(r.status == "ok" and r.stdout == "1\n" for r in results[4:])
    assert 'tirl_service_executions_total{status="timeout"} 4.0' in metrics


async def test_client_single_calls_and_batches_through_a_real_server():
    """What RL and eval send (``rollout.sandbox`` a URL): single calls from many coroutines and batches, every
    answer the one its code gives; a call the server refuses comes back as a structured ``internal`` result."""
    (server,) = start(1, workers=2)
    server_extra = ServiceProcess(workers=1, extra_args=["--preload", "", "--max-code-kb", "1"])
    server_extra.start(timeout_s=120)
    calls = workload(48, seed=3)
    try:
        async with SandboxClient(server.url, ClientConfig(senders=4)) as client:
            queue = list(calls)
            singles: list = []

            async def caller() -> None:
                while queue:
                    request, expected = queue.pop()
                    singles.append((request, await client.run(request), expected))

            await asyncio.gather(*(caller() for _ in range(8)))
            batch = [ExecutionRequest(code=f"print({i} ** 2)", timeout_s=5) for i in range(16)]
            batch_results = await client.run_batch(batch)
            health = await client.check_health()
        async with SandboxClient(server_extra.url, ClientConfig(flush_interval_s=0.05)) as client:
            small, big = await asyncio.gather(
                client.run(ExecutionRequest(code="print(7)", request_id="small")),
                client.run(ExecutionRequest(code="print(1)  # " + "x" * 2048, request_id="big")),
            )
    finally:
        server.stop()
        server_extra.stop()
    assert health == {server.url: True}
    assert len(singles) == len(calls)
    for request, result, (status, stdout, error_type) in singles:
        assert result.request_id == request.request_id and result.status == status
        assert stdout is None or result.stdout == stdout
        assert error_type is None or result.error_type == error_type
    assert [r.stdout for r in batch_results] == [f"{i**2}\n" for i in range(16)]
    assert [r.request_id for r in batch_results] == [r.request_id for r in batch]
    assert small.status == "ok" and small.stdout == "7\n"
    assert big.status == "internal" and big.request_id == "big" and "HTTP 413" in big.stderr


async def test_unreachable_url_fails_health_check_fast():
    """Field case F89: a misconfigured sandbox URL is reported at start-up, not discovered mid-training."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    async with SandboxClient(f"http://127.0.0.1:{port}", ClientConfig(unavailable_wait_s=0.2)) as client:
        health = await asyncio.wait_for(client.check_health(), 10)
        result = await asyncio.wait_for(client.run(ExecutionRequest(code="print(1)")), 10)
    assert health == {f"http://127.0.0.1:{port}": False}
    assert result.status == "internal" and "no server reachable" in result.stderr


async def test_worker_kill_then_server_kill_loses_and_doubles_nothing():
    victim, survivor = start(2, workers=1)
    calls = workload(160, seed=7)
    answers: dict[str, list] = {}
    events: list[str] = []
    done = 0

    async def in_flight(url: str) -> int:
        try:
            async with httpx.AsyncClient(timeout=5, trust_env=False) as http:
                return (await http.get(url + "/healthz")).json()["in_flight"]
        except httpx.HTTPError:
            return 0

    async def faults() -> None:
        while done < len(calls) // 4:
            await asyncio.sleep(0.01)
        for _ in range(300):
            if await in_flight(victim.url) > 0:
                break
            await asyncio.sleep(0.01)
        pids = victim.worker_pids()
        assert pids, "server A has no worker process to kill"
        os.kill(pids[0], signal.SIGKILL)
        events.append("worker")
        while done < len(calls) // 2:
            await asyncio.sleep(0.01)
        victim.kill()
        events.append("server")

    config = ClientConfig(senders=4, batch_size=8, probe_interval_s=0.1, call_deadline_s=120)
    try:
        async with SandboxClient([victim.url, survivor.url], config) as client:
            queue = list(calls)

            async def caller() -> None:
                nonlocal done
                while queue:
                    request, expected = queue.pop()
                    result = await client.run(request)
                    answers.setdefault(request.request_id, []).append((result, expected))
                    done += 1

            fault_task = asyncio.ensure_future(faults())
            await asyncio.gather(*(caller() for _ in range(16)))
            await fault_task
            stats = client.stats()
    finally:
        victim.stop()
        survivor.stop()

    assert events == ["worker", "server"]
    assert len(answers) == len(calls)  # none lost
    assert all(len(v) == 1 for v in answers.values())  # none doubled
    wrong = []
    for rid, [(result, (status, stdout, error_type))] in answers.items():
        if (
            result.request_id != rid
            or result.status != status
            or (stdout is not None and result.stdout != stdout)
            or (error_type is not None and result.error_type != error_type)
        ):
            wrong.append((rid, result))
    assert wrong == []  # includes "no internal results": every call got its real answer
    assert stats.failovers >= 1
    assert stats.servers[victim.url]["up"] is False


def _listener_inode(port: int) -> str:
    """The inode of the socket listening on 127.0.0.1:``port`` (``/proc/net/tcp``, state 0A: LISTEN)."""
    with open("/proc/net/tcp", encoding="ascii") as fh:
        for line in fh.readlines()[1:]:
            fields = line.split()
            if fields[1] == f"0100007F:{port:04X}" and fields[3] == "0A":
                return fields[9]
    raise AssertionError(f"nothing listens on 127.0.0.1:{port}")


def _holders(inode: str, pids: list[int]) -> list[int]:
    """Those of ``pids`` with a descriptor on the socket ``inode`` (``/proc/PID/fd``)."""
    held = []
    for pid in pids:
        fds = os.listdir(f"/proc/{pid}/fd")  # the workers run as the test's user: readable (else this fails)
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                    held.append(pid)
                    break
            except OSError:
                continue
    return held


def test_a_killed_server_restarts_on_its_port_at_once(tmp_path):
    """A supervisor (systemd, k8s) restarts a SIGKILLed ``tirl sandbox serve`` on the same port right away.

    The killed server's connection to a client that still holds it open is left in FIN-WAIT-2 on the port for
    up to a minute; ``serve``'s check of the port before its workers start once bound without ``SO_REUSEADDR``
    and so refused the port ("Address already in use") for that minute. No sandbox worker may hold the
    listening socket either (it would keep the port bound after the server died).
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    args = ["--preload", "", "--check-workers", "0"]
    first = ServiceProcess(workers=1, port=port, extra_args=args)
    second = ServiceProcess(workers=1, port=port, extra_args=args)
    try:
        first.start(timeout_s=120)
        workers = first.worker_pids()
        assert workers and _holders(_listener_inode(port), [first.pid, *workers]) == [first.pid]
        with httpx.Client(trust_env=False) as held:  # a keep-alive connection the client does not close
            assert held.get(first.url + "/healthz", timeout=30).status_code == 200
            first.kill()
            second.start(timeout_s=120)  # ServiceStartError (with the server's output) if the port is refused
            assert second.url == first.url
            assert httpx.get(second.url + "/healthz", timeout=30, trust_env=False).status_code == 200
    finally:
        first.stop()
        second.stop()
