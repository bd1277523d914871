"""The signal a call died of is the one it received (issue 23, small findings).

A call is the init of its PID namespace, which ignores its own SIGABRT while the disposition is the
default; ``os.abort()`` then ended by SIGSEGV (glibc's abort instruction after the ignored raise) and was
reported "terminated by SIGSEGV". The call process now has a SIGABRT handler whose C-level part writes the
signal number to a pipe the worker reads, and the result names SIGABRT.
"""

from __future__ import annotations

import pytest

from tirl.sandbox import ExecutionRequest, LocalSandbox


@pytest.fixture(scope="module")
def cases() -> dict[str, object]:
    import asyncio

    codes = {
        "abort": "import os\nprint('before', flush=True)\nos.abort()",
        "segv": "import ctypes\nctypes.string_at(0)",
        "self_sigabrt": "import os, signal\nos.kill(os.getpid(), signal.SIGABRT)\nprint('still here')",
        "ok": "print(1)",
    }

    async def run() -> dict[str, object]:
        async with LocalSandbox(workers=1, preload=()) as sb:
            results = await sb.run_batch([ExecutionRequest(c, timeout_s=30) for c in codes.values()])
        return dict(zip(codes, results))

    return asyncio.run(run())


def test_abort_is_reported_as_sigabrt(cases) -> None:
    r = cases["abort"]
    assert r.status == "error" and r.exit_code == -6, (r.status, r.exit_code, r.stderr)
    assert "terminated by SIGABRT" in r.stderr and "SIGSEGV" not in r.stderr
    assert r.stdout == "before\n"


def test_a_real_segfault_is_still_sigsegv(cases) -> None:
    r = cases["segv"]
    assert r.status == "error" and r.exit_code == -11 and "terminated by SIGSEGV" in r.stderr


def test_sigabrt_sent_to_itself_is_ignored_as_before_and_the_call_ends_normally(cases) -> None:
    r = cases["self_sigabrt"]
    assert r.status == "ok" and r.stdout == "still here\n", r
    assert cases["ok"].status == "ok" and cases["ok"].stdout == "1\n"
