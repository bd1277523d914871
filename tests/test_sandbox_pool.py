"""The pool around the workers: ordering, concurrency, worker death, watchdog, start failures, bad requests,
closing, configuration (preload, output policy, required layers, degraded mode), the sync wrapper, framing."""

from __future__ import annotations

import asyncio
import math
import os
import signal

import pytest

from sandbox_helpers import assert_follow_up_ok, host_pids_with_marker, no_descendants_soon, unique_marker
from tirl.sandbox import ExecutionRequest, LocalSandbox, SandboxConfig, SyncSandbox, wire

LIGHT = {"preload": ()}  # workers without numpy/scipy/sympy start in a fraction of a second


async def test_run_batch_answers_in_request_order():
    async with LocalSandbox(workers=2, slots_per_worker=3, **LIGHT) as sb:
        # Later requests finish first; the answers must still line up with the requests.
        reqs = [ExecutionRequest(f"import time\ntime.sleep({(12 - i) * 0.02})\nprint({i})") for i in range(12)]
        results = await sb.run_batch(reqs)
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(12)]
    assert [r.request_id for r in results] == [q.request_id for q in reqs]


async def test_64_concurrent_calls_half_timing_out_are_all_answered_in_order():
    async with LocalSandbox(workers=2, slots_per_worker=16, **LIGHT) as sb:
        reqs = [
            ExecutionRequest("import time\ntime.sleep(60)", timeout_s=1) if i % 2 else ExecutionRequest(f"print({i})")
            for i in range(64)
        ]
        results = await asyncio.wait_for(sb.run_batch(reqs), 60)
        assert await no_descendants_soon(sb) == []
    for i, r in enumerate(results):
        if i % 2:
            assert r.status == "timeout", (i, r)
        else:
            assert (r.status, r.stdout) == ("ok", f"{i}\n"), (i, r)


async def test_calls_beyond_capacity_wait_in_a_queue():
    async with LocalSandbox(workers=1, slots_per_worker=1, **LIGHT) as sb:
        assert sb.max_concurrency == 1
        task = asyncio.ensure_future(sb.run_batch([ExecutionRequest("import time\ntime.sleep(0.3)")] * 3))
        await asyncio.sleep(0.15)
        assert sb.stats()["running"] == 1 and sb.stats()["queued"] == 2
        assert [r.status for r in await task] == ["ok"] * 3


async def test_dead_worker_answers_internal_and_is_replaced():
    async with LocalSandbox(workers=1, **LIGHT) as sb:
        (pid,) = sb.worker_pids()
        task = asyncio.ensure_future(sb.run(ExecutionRequest("import time\ntime.sleep(30)", timeout_s=20)))
        await asyncio.sleep(0.3)
        os.kill(pid, signal.SIGKILL)
        result = await asyncio.wait_for(task, 10)
        assert result.status == "internal"
        assert "worker died" in result.stderr and "-9" in result.stderr
        follow = await asyncio.wait_for(sb.run(ExecutionRequest("print('again')")), 30)
        assert follow.stdout == "again\n"
        assert sb.worker_pids() and sb.worker_pids() != [pid]


async def test_hung_worker_is_killed_by_the_watchdog():
    async with LocalSandbox(workers=1, host_grace_s=0.5, **LIGHT) as sb:
        (pid,) = sb.worker_pids()
        os.kill(pid, signal.SIGSTOP)  # the worker can no longer answer anything
        result = await asyncio.wait_for(sb.run(ExecutionRequest("print(1)", timeout_s=0.5)), 10)
        assert result.status == "internal" and "no answer for call" in result.stderr
        follow = await asyncio.wait_for(sb.run(ExecutionRequest("print(2)")), 30)
        assert follow.stdout == "2\n"


async def test_workers_that_cannot_start_make_calls_internal_not_hang():
    sb = LocalSandbox(workers=1, python="/nonexistent/python3", max_start_failures=2, **LIGHT)
    try:
        result = await asyncio.wait_for(sb.run(ExecutionRequest("print(1)")), 30)
        assert result.status == "internal" and "failed to start" in result.stderr
        again = await asyncio.wait_for(sb.run(ExecutionRequest("print(1)")), 5)
        assert again.status == "internal"
        with pytest.raises(RuntimeError, match="failed to start"):
            await sb.layer_report()
    finally:
        await sb.aclose()


async def test_missing_required_layer_refuses_to_run_code():
    sb = LocalSandbox(workers=1, seccomp=False, required_layers=("seccomp",), max_start_failures=1, **LIGHT)
    try:
        result = await asyncio.wait_for(sb.run(ExecutionRequest("print('should not run')")), 30)
        assert result.status == "internal"
        assert "required isolation layers are not available: seccomp" in result.stderr
        assert result.stdout == ""
    finally:
        await sb.aclose()


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (ExecutionRequest(code=123), "code must be a string"),  # type: ignore[arg-type]
        (ExecutionRequest("print(1)", stdin=None), "stdin must be a string"),  # type: ignore[arg-type]
        (ExecutionRequest("print(1)", timeout_s=-1), "timeout_s must be a positive"),
        (ExecutionRequest("print(1)", timeout_s=math.nan), "timeout_s must be a positive"),
        (ExecutionRequest("print(1)", timeout_s=10**6), "exceeds the limit"),
        (ExecutionRequest("print(1)", memory_mb=0), "memory_mb must be a positive integer"),
        (ExecutionRequest("print(1)", memory_mb=1.5), "memory_mb must be a positive integer"),  # type: ignore[arg-type]
        ({"code": "print(1)"}, "expected an ExecutionRequest"),
    ],
)
async def test_malformed_requests_are_answered_internal_without_running(request_, message):
    sb = LocalSandbox(workers=1, **LIGHT)
    try:
        result = await sb.run(request_)  # type: ignore[arg-type]
        assert result.status == "internal" and message in result.stderr
        assert sb.stats()["running"] == 0 and sb.worker_pids() == []  # nothing was started for it
    finally:
        await sb.aclose()


async def test_aclose_answers_running_and_queued_calls_and_is_idempotent():
    sb = LocalSandbox(workers=1, slots_per_worker=1, **LIGHT)
    await sb.start()
    running = asyncio.ensure_future(sb.run(ExecutionRequest("import time\ntime.sleep(30)", timeout_s=20)))
    queued = asyncio.ensure_future(sb.run(ExecutionRequest("print('never')")))
    await asyncio.sleep(0.3)
    pids = sb.worker_pids()
    await sb.aclose()
    await sb.aclose()
    a, b = await asyncio.wait_for(asyncio.gather(running, queued), 5)
    assert a.status == b.status == "internal" and "closed" in a.stderr and "closed" in b.stderr
    after = await sb.run(ExecutionRequest("print(1)"))
    assert after.status == "internal" and "closed" in after.stderr
    await asyncio.sleep(0.1)
    assert all(not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z" for pid in pids)


async def test_cancelled_callers_do_not_leak_slots():
    async with LocalSandbox(workers=1, slots_per_worker=1, **LIGHT) as sb:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(sb.run(ExecutionRequest("import time\ntime.sleep(0.5)")), 0.1)
        results = await asyncio.wait_for(sb.run_batch([ExecutionRequest("print(3)")] * 3), 10)
        assert [r.stdout for r in results] == ["3\n"] * 3
        assert sb.stats() == {"queued": 0, "running": 0, "workers_ready": 1}


async def test_preload_is_configurable():
    code = "import sys\nprint('sympy' in sys.modules, 'json' in sys.modules)"
    async with LocalSandbox(workers=1, preload=("json", "no_such_module_xyz")) as sb:
        info = await sb.worker_info()
        result = await sb.run(ExecutionRequest(code))
    assert info["preload"]["json"] == "ok"
    assert info["preload"]["no_such_module_xyz"].startswith("ModuleNotFoundError")
    assert result.stdout == "False True\n"


async def test_default_preload_imports_the_scientific_stack_once_and_warms_it():
    async with LocalSandbox(workers=1) as sb:
        info = await sb.worker_info()
        result = await sb.run(
            ExecutionRequest("import sys\nprint(all(m in sys.modules for m in ('numpy', 'scipy', 'sympy')))")
        )
    assert result.stdout == "True\n"
    assert info["preload"] == {"numpy": "ok", "scipy": "ok", "sympy": "ok"} and info["warmup_errors"] == []


async def test_a_failing_warmup_is_reported_and_not_fatal():
    async with LocalSandbox(workers=1, preload=(), warmup="raise ValueError('boom')") as sb:
        info = await sb.worker_info()
        result = await sb.run(ExecutionRequest("print('fine')"))
    assert info["warmup_errors"] == ["ValueError: boom"]
    assert result.stdout == "fine\n"


async def test_output_overflow_can_kill_the_call():
    async with LocalSandbox(workers=1, max_output_bytes=1000, kill_on_output_overflow=True, **LIGHT) as sb:
        result = await sb.run(ExecutionRequest("import sys\nwhile True:\n    sys.stdout.write('z' * 100)"))
        await assert_follow_up_ok(sb)
    assert result.status == "killed" and result.stdout_truncated
    assert result.stdout == "z" * 1000 and "output passed the 1000-byte cap" in result.stderr


async def test_degraded_mode_without_any_optional_layer_still_isolates_calls():
    off = dict(
        network_namespace=False,
        pid_namespace=False,
        mount_namespace=False,
        ipc_namespace=False,
        unprivileged_user=False,
        landlock=False,
        seccomp=False,
        cgroup=False,
    )
    async with LocalSandbox(workers=1, **off, **LIGHT) as sb:
        layers = {layer["name"]: layer for layer in await sb.layer_report()}
        for name in off:
            assert not layers[name]["active"] and "switched off" in layers[name]["detail"]
        assert layers["rlimits"]["active"] and layers["env_scrub"]["active"]
        marker = unique_marker()
        code = (
            "import os, subprocess, time\nif os.fork() == 0:\n    os.setsid()\n"
            f"    subprocess.Popen(['sleep', '{marker}'])\n    os._exit(0)\ntime.sleep(60)"
        )
        result = await sb.run(ExecutionRequest(code, timeout_s=1))
        assert result.status == "timeout"
        await asyncio.sleep(0.3)  # the subreaper worker kills escaped orphans on its next scan
        assert host_pids_with_marker(marker) == []
        ok = await sb.run(ExecutionRequest("x = 6 * 7\nx"))
        assert ok.display == "42"


def test_sync_sandbox_runs_code_and_closes_idempotently():
    sb = SyncSandbox(workers=1, preload=())
    try:
        assert sb.run_code("print(input())", stdin="hi\n").stdout == "hi\n"
        assert [r.stdout for r in sb.run_batch([ExecutionRequest("print(1)"), ExecutionRequest("print(2)")])] == [
            "1\n",
            "2\n",
        ]
        assert {layer["name"] for layer in sb.layer_report()} >= {"seccomp", "landlock", "rlimits"}
    finally:
        sb.close()
        sb.close()


def test_sync_sandbox_close_leaves_no_pending_task(caplog):
    # aclose() cancelled its reader tasks without waiting for them; SyncSandbox then closed its loop and the
    # garbage collector reported "Task was destroyed but it is pending!".
    import gc

    def use_and_close() -> str:
        with SyncSandbox(workers=1, preload=()) as sb:
            return sb.run_code("print(1)").stdout

    with caplog.at_level("ERROR", logger="asyncio"):
        assert use_and_close() == "1\n"
        gc.collect()
    assert "destroyed but it is pending" not in caplog.text


def test_config_rejects_bad_values():
    with pytest.raises(ValueError, match="unknown layer"):
        SandboxConfig(required_layers=("firewall",))
    with pytest.raises(ValueError, match="workers"):
        SandboxConfig(workers=0)


def test_frame_buffer_reassembles_split_frames():
    data = wire.encode({"op": "run", "code": "print('é\\udcff')"}) + wire.encode({"op": "shutdown"})
    buf = wire.FrameBuffer()
    messages = []
    for i in range(len(data)):  # one byte at a time
        messages += buf.feed(data[i : i + 1])
    assert messages == [{"op": "run", "code": "print('é\\udcff')"}, {"op": "shutdown"}]


def test_frame_buffer_rejects_oversized_and_non_object_frames():
    with pytest.raises(ValueError, match="exceeds"):
        wire.FrameBuffer().feed(wire.HEADER.pack(wire.MAX_FRAME_BYTES + 1))
    with pytest.raises(ValueError, match="not a JSON object"):
        wire.FrameBuffer().feed(wire.HEADER.pack(2) + b"[]")


def test_killing_the_host_process_leaves_no_worker_or_call_process():
    import subprocess
    import sys
    import time

    marker = unique_marker()
    host = (
        "import asyncio, sys\n"
        "from tirl.sandbox import ExecutionRequest, LocalSandbox\n"
        "async def main():\n"
        "    sb = LocalSandbox(workers=1, preload=())\n"
        "    await sb.start()\n"
        '    task = asyncio.ensure_future(sb.run(ExecutionRequest("import subprocess, time\\n'
        f"subprocess.Popen(['sleep', '{marker}'])\\ntime.sleep(60)\", timeout_s=50)))\n"
        "    await asyncio.sleep(0.5)\n"
        "    print(' '.join(map(str, sb.worker_pids())), flush=True)\n"
        "    await task\n"
        "asyncio.run(main())\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", host], stdout=subprocess.PIPE, text=True)
    worker_pids = [int(p) for p in proc.stdout.readline().split()]
    assert worker_pids and host_pids_with_marker(marker)  # the call's background process is running
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (
        host_pids_with_marker(marker)
        or any(os.path.exists(f"/proc/{p}") and open(f"/proc/{p}/stat").read().split()[2] != "Z" for p in worker_pids)
    ):
        time.sleep(0.05)
    assert host_pids_with_marker(marker) == []
    assert all(
        not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z" for p in worker_pids
    )


async def test_workers_run_the_same_tirl_as_their_parent():
    # A checkout on PYTHONPATH next to an editable install elsewhere: the workers must import this copy.
    import tirl

    async with LocalSandbox(workers=1, **LIGHT) as sb:
        result = await sb.run(ExecutionRequest("import tirl\nprint(tirl.__file__)"))
    assert (result.status, result.stdout.strip()) == ("ok", os.path.abspath(tirl.__file__))
