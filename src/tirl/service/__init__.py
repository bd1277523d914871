"""The code-execution service: an HTTP API over a ``CodeExecutor`` and the batching client that calls it.

Server side: :func:`create_app` (FastAPI app; endpoints, limits, idempotency by request id, metrics) and
:func:`serve_local_sandbox` (uvicorn over ``LocalSandbox``, what ``tirl sandbox serve`` runs). Client side:
:class:`SandboxClient`, a ``CodeExecutor`` that batches calls and spreads them over one or more servers.
See docs/service.md for the API and multi-node deployment.

Names are imported lazily, so ``from tirl.service import SandboxClient`` needs only the base dependencies
(aiohttp, pydantic), not the ``service`` extra (FastAPI, uvicorn, prometheus-client).
"""

from __future__ import annotations

from tirl._lazy import lazy_getattr

_EXPORTS = {
    "ClientConfig": "tirl.service.config",
    "ExecutorConfig": "tirl.service.config",
    "ClientStats": "tirl.service.client",
    "SandboxClient": "tirl.service.client",
    "ResultCache": "tirl.service.cache",
    "ExecutionService": "tirl.service.core",
    "ServiceConfig": "tirl.service.core",
    "create_app": "tirl.service.app",
    "get_service": "tirl.service.app",
    "ServeConfig": "tirl.service.server",
    "serve_app": "tirl.service.server",
    "serve_local_sandbox": "tirl.service.server",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
