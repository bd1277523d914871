"""Nothing of one call or answer check is readable by another (issue 23, item 1).

The exploit: a tool call is a fork of a warm worker; when the worker itself read the earlier calls' requests
(code, stdin: the answer checker's reference answers) and their outputs, freed copies stayed in its heap and
every later fork inherited them. A call that scans its own anonymous memory (``/proc/self/maps`` and
``/proc/self/mem``) found them: on the code before the fix, :data:`SCAN` printed ``QGLD1111`` (the reference of
an answer check), ``QCODE2222`` (code of an earlier call), ``QSTDN3333`` (its stdin) and ``QOUT4444`` (its
output) on a one-worker pool.

Now the worker moves each call's request and outputs between pipes and memory files with ``splice`` and
never holds them in its own memory, so a call inherits only the worker's post-import image; these tests run
the scan after checks and calls, earlier and concurrent, in the same and in other workers, and it must find
nothing, while a control run (the scan over its own request) shows that it does find what is there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest

from sandbox_helpers import host_pids_with_marker, unique_marker
from tirl.reward import PRELOAD_MODULES, Verifier, VerifyItem
from tirl.sandbox import ExecutionRequest, LocalSandbox

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="needs /proc/self/mem")

#: Markers match ``Q[A-Z]{3,5}[0-9]{4}``; the scan's own text contains no match of that pattern.
GOLD_MARKER = "QGLD1111"
CODE_MARKER = "QCODE2222"
STDIN_MARKER = "QSTDN3333"
OUT_MARKER = "QOUT4444"

#: Scans the call's own memory: every readable mapping that is anonymous, [heap], [stack] or writable
#: (pymalloc's arenas, malloc's heap, the interpreter's data); prints the sorted markers found as JSON.
#: It reads its own stdin first, so that the control test has something to find.
SCAN = r"""
import json, re, sys
own_stdin = sys.stdin.read()  # the call's own stdin, in its memory: the control test finds it
pattern = re.compile(rb"Q[A-Z]{3,5}[0-9]{4}")
found = set()
with open("/proc/self/maps") as fh:
    maps = fh.read().splitlines()
with open("/proc/self/mem", "rb", buffering=0) as mem:
    for line in maps:
        parts = line.split()
        perms, path = parts[1], (parts[5] if len(parts) > 5 else "")
        if "r" not in perms or path in ("[vvar]", "[vsyscall]", "[vdso]", "[vvar_vclock]"):
            continue
        if path and not path.startswith("[") and "w" not in perms:
            continue
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        try:
            mem.seek(lo)
            data = mem.read(hi - lo)
        except (OSError, OverflowError, ValueError):
            continue
        found.update(m.decode() for m in pattern.findall(data))
print(json.dumps(sorted(found)))
"""

#: An ordinary call carrying all three kinds of secret: in its code, its stdin and its output.
SECRET_CODE = f"secret = {CODE_MARKER!r}\nline = input()\nprint('QOUT' + '4444', len(line), len(secret))"
#: The same, still running (holding its data) while other calls start in its worker: after printing, it
#: waits in ``sleep 100.<tag>`` (a host process the test can see, and kills once it has scanned).
SLOW_SECRET_CODE = SECRET_CODE + "\nimport subprocess, sys\nsys.stdout.flush()\nsubprocess.run(['sleep', '100.{tag}'])"


async def scan(sb: LocalSandbox, stdin: str = "") -> list[str]:
    result = await sb.run(ExecutionRequest(SCAN, stdin=stdin, timeout_s=60))
    assert result.status == "ok", result.stderr
    return json.loads(result.stdout)


async def check_gold(sb: LocalSandbox) -> None:
    """An answer check whose reference (with the marker) goes to the pool on stdin, as in RL."""
    sent: list[ExecutionRequest] = []

    class Spy:
        async def run(self, request):
            sent.append(request)
            return await sb.run(request)

        async def run_batch(self, requests):
            sent.extend(requests)
            return await sb.run_batch(requests)

    verdict = await Verifier(executor=Spy()).averify_batch(
        [VerifyItem(r"<answer>\boxed{0.5}</answer>", rf"\frac{{1}}{{2}} + 0\cdot {GOLD_MARKER[0]}_{{{GOLD_MARKER}}}")]
    )
    assert any(GOLD_MARKER in r.stdin for r in sent), "the check did not reach the sandbox"
    assert verdict[0].status in ("ok", "unparsable_gold", "error", "timeout"), verdict


async def secrets_round(sb: LocalSandbox, n: int) -> None:
    await check_gold(sb)
    results = await sb.run_batch([ExecutionRequest(SECRET_CODE, stdin=STDIN_MARKER + "\n", timeout_s=60)] * n)
    assert all(r.status == "ok" and OUT_MARKER in r.stdout for r in results), results


async def test_scan_finds_what_is_there():
    """Control: the scan does find markers in the call's own memory (its own stdin), so an empty scan
    below means that the secrets are absent, not that the scan is blind."""
    async with LocalSandbox(workers=1, preload=()) as sb:
        assert STDIN_MARKER in await scan(sb, stdin=STDIN_MARKER + "\n")


async def test_one_worker_earlier_checks_and_calls_are_unreadable():
    """The issue's reproduction: a one-worker pool, an answer check with the marked reference, calls with
    marked code, stdin and output; then scans (several, as a heap's reuse varies) find nothing."""
    async with LocalSandbox(workers=1, preload=PRELOAD_MODULES) as sb:
        for _ in range(2):
            await secrets_round(sb, 4)
            for _ in range(3):
                assert await scan(sb) == []


async def test_other_workers_and_concurrent_calls_are_unreadable():
    """Two workers of two slots: scans in every worker while marked calls run beside them (their outputs
    already written, their requests delivered) and after they ended."""
    async with LocalSandbox(workers=2, slots_per_worker=2, preload=PRELOAD_MODULES) as sb:
        await secrets_round(sb, 6)
        tag = unique_marker()
        slow = [
            asyncio.ensure_future(
                sb.run(ExecutionRequest(SLOW_SECRET_CODE.format(tag=tag), stdin=STDIN_MARKER + "\n", timeout_s=200))
            )
            for _ in range(2)
        ]
        for _ in range(600):  # both slow calls (one per worker) printed their marker and now sleep
            if len(host_pids_with_marker(tag)) >= 2:
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail("the slow calls did not start")
        found = await asyncio.gather(*(scan(sb) for _ in range(2)))
        sleepers = host_pids_with_marker(tag)
        assert len(sleepers) >= 2  # the scans ran while both slow calls were running
        for pid in sleepers:
            os.kill(pid, signal.SIGKILL)  # the slow calls' subprocess.run returns; they end normally
        assert [f for f in found if f] == []
        done = await asyncio.gather(*slow)
        assert all(r.status == "ok" and OUT_MARKER in r.stdout for r in done), done
        found = await asyncio.gather(*(scan(sb) for _ in range(4)))
        assert [f for f in found if f] == []


# ----- answer checks on a pool of their own (runtime and service) ------------------------------------------

MARKED_ITEM = VerifyItem(r"<answer>\boxed{0.5}</answer>", rf"\frac{{1}}{{2}} + 0\cdot q_{{{GOLD_MARKER}}}")


async def test_service_checks_never_reach_the_execute_pool():
    """``create_app(check_executor=...)``: /v1/verify/batch's checks (with the reference) go to the checks'
    pool, /v1/execute to the other; without it both share one (as before)."""
    import httpx

    from test_reward_verifier import ScriptedExecutor, in_process
    from tirl.reward.routes import create_verify_router
    from tirl.service.app import create_app

    tools, checks = ScriptedExecutor(in_process), ScriptedExecutor(in_process)
    app = create_app(tools, routers=[create_verify_router()], check_executor=checks)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        response = await client.post(
            "/v1/verify/batch", json={"items": [{"response": MARKED_ITEM.response, "gold": MARKED_ITEM.gold}]}
        )
        assert response.status_code == 200, response.text
    assert any(GOLD_MARKER in r.stdin for r in checks.requests)
    assert tools.requests == []


def test_runtime_checks_run_on_their_own_pool():
    """RL's ``AgentRuntime.verify``: the checks run on a second ``LocalSandbox`` (other worker processes),
    never on the tool-call pool, which then holds no reference even in its calls' memory."""
    from tirl.runtime import AgentRuntime, build_check_executor

    runtime = AgentRuntime(lambda: LocalSandbox(workers=1, preload=()))
    try:
        verdicts = runtime.verify([MARKED_ITEM])
        assert verdicts[0].status in ("ok", "unparsable_gold"), verdicts
        tools, checks = runtime.executor, runtime._checks
        assert isinstance(checks, LocalSandbox) and checks is not tools
        assert set(PRELOAD_MODULES) <= set(checks.config.preload)
        assert set(checks.worker_pids()).isdisjoint(tools.worker_pids())
        assert runtime.run(scan(tools)) == []
    finally:
        runtime.close()
    fake = object()
    assert build_check_executor(fake) is fake  # a test double is kept (it runs nothing)
