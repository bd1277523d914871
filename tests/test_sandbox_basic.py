"""Basic behaviour of LocalSandbox: output semantics, display, tracebacks, exit codes, stdin, order."""

from __future__ import annotations

import pytest

from tirl.sandbox import CodeExecutor, ExecutionRequest, LocalSandbox


@pytest.fixture(scope="module")
def sandbox_config():
    return {"workers": 2}


async def run(code: str, **kw) -> object:
    async with LocalSandbox(workers=1) as sb:
        return await sb.run(ExecutionRequest(code, **kw))


async def test_local_sandbox_is_a_code_executor():
    sb = LocalSandbox(workers=1)
    try:
        assert isinstance(sb, CodeExecutor)
    finally:
        await sb.aclose()


async def test_print_and_display_semantics():
    async with LocalSandbox(workers=1) as sb:
        r = await sb.run(ExecutionRequest("print(1)"))
        assert (r.status, r.stdout, r.display) == ("ok", "1\n", None)
        r = await sb.run(ExecutionRequest("x = 41\nx + 1"))
        assert (r.status, r.stdout, r.display) == ("ok", "", "42")
        r = await sb.run(ExecutionRequest("x = 41\nx + 1;"))
        assert (r.status, r.display) == ("ok", None)
