"""A service request with ``memory_mb`` over the limit is a 422 naming the field (issue 23, small findings).

Before, ``memory_mb`` over the sandbox's ``max_memory_mb`` passed the service's checks, reached the
``LocalSandbox`` and came back as a 200 with status ``internal`` ("memory_mb ... exceeds the limit"), a
status clients and the verifier retry. Now the app checks it with the other limits: against
``ServiceConfig.max_memory_mb``, or by default the executor's own ``config.max_memory_mb``.
"""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from test_service_support import ScriptedExecutor
from tirl.sandbox.config import SandboxConfig
from tirl.service.app import create_app
from tirl.service.core import ServiceConfig


def client_for(app) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def body(memory_mb: int, rid: str = "a") -> dict:
    return {"code": "echo 1", "request_id": rid, "memory_mb": memory_mb}


class SandboxLike(ScriptedExecutor):
    """A scripted executor with a ``LocalSandbox``-like ``config`` (its limit is the service's default)."""

    config = dataclasses.replace(SandboxConfig(), max_memory_mb=2048)


@pytest.mark.parametrize("fast_path", [True, False])
async def test_memory_over_the_executors_limit_is_422_and_not_run(fast_path: bool) -> None:
    ex = SandboxLike()
    async with client_for(create_app(ex, ServiceConfig(fast_path=fast_path))) as c:
        one = await c.post("/v1/execute", json=body(4096))
        batch = await c.post("/v1/execute/batch", json={"requests": [body(512, "ok"), body(2049, "b")]})
        stream = await c.post("/v1/execute/stream", json={"requests": [body(9999, "c")]})
        fine = await c.post("/v1/execute", json=body(2048, "d"))
    for r in (one, batch, stream):
        assert r.status_code == 422, r.text
        assert "memory_mb" in r.json()["message"] and "over the limit of 2048" in r.json()["message"]
    assert batch.json()["detail"] == [
        {"index": 1, "request_id": "b", "message": "memory_mb 2049 is over the limit of 2048"}
    ]
    assert fine.status_code == 200 and fine.json()["status"] == "ok"
    assert ex.runs.get("a", 0) == ex.runs.get("b", 0) == ex.runs.get("c", 0) == ex.runs.get("ok", 0) == 0


async def test_service_limit_overrides_and_unknown_limits_pass() -> None:
    ex = SandboxLike()
    async with client_for(create_app(ex, ServiceConfig(max_memory_mb=100))) as c:
        r = await c.post("/v1/execute", json=body(101))
    assert r.status_code == 422 and "over the limit of 100" in r.json()["message"]
    plain = ScriptedExecutor()  # no config: no limit known here, the executor decides
    async with client_for(create_app(plain)) as c:
        r = await c.post("/v1/execute", json=body(10**6))
    assert r.status_code == 200
