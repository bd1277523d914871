"""Running the service: uvicorn over the app, on a given or free port, with a machine-readable ready line.

:func:`serve_app` runs any ASGI app under uvicorn in the current event loop until it is told to stop
(SIGINT/SIGTERM, then a graceful drain). :func:`serve_local_sandbox` is what ``tirl sandbox serve`` runs: a
``LocalSandbox`` with ``workers`` warm worker processes behind :func:`tirl.service.app.create_app`.

One server process = one event loop = one idempotency cache. Do not run the app under ``uvicorn --workers``
(several processes would each have their own cache, so a retried id could run twice); scale with the
sandbox's ``--workers`` inside a node and with more ``serve`` processes/nodes across nodes (docs/service.md).

When the socket is listening, one line ``READY_PREFIX + url`` is printed to stdout (and flushed), so scripts
that bind port 0 learn the port. This module does not configure TLS or authentication: bind to 127.0.0.1 or a
private network, or put a reverse proxy in front (docs/service.md).
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import uvicorn

from tirl.service.app import create_app
from tirl.service.core import ServiceConfig

READY_PREFIX = "tirl-service ready: "


@dataclass
class ServeConfig:
    """How to run one server process.

    Attributes:
        host: interface to bind (``127.0.0.1`` unless other nodes must reach it).
        port: TCP port; 0 picks a free one (printed on the ready line).
        workers: sandbox worker processes (``LocalSandbox(workers=...)``).
        preload: modules each worker imports once at start; None keeps the sandbox's default.
        timeout_keep_alive_s: idle keep-alive connections are closed after this; keep it above the clients'
            ``keepalive_expiry_s``.
        graceful_shutdown_s: on SIGTERM, how long running requests may finish before the server exits.
        log_level: uvicorn log level.
        service: limits and policies of the app.
        check_workers: worker processes of the answer checks' own pool (``/v1/verify/batch``; preloads the
            ``check_preload`` of :func:`serve_local_sandbox`), apart from the ``workers`` that run
            ``/v1/execute``; 0 checks on those (reference answers then share workers with the callers' code).
        importable_packages: installed packages the ``/v1/execute`` calls may read and import
            (``SandboxConfig.importable_packages``); None keeps the sandbox's default.
    """

    host: str = "127.0.0.1"
    port: int = 8088
    workers: int = 4
    preload: tuple[str, ...] | None = None
    timeout_keep_alive_s: float = 30.0
    graceful_shutdown_s: float = 30.0
    log_level: str = "warning"
    service: ServiceConfig = field(default_factory=ServiceConfig)
    check_workers: int = 1
    importable_packages: tuple[str, ...] | None = None


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket bound to ``(host, port)`` (port 0: a free port).

    ``SO_REUSEADDR``: the bind fails only on a port that another socket listens on, not on one that still
    holds connections of a killed server (FIN-WAIT-2/TIME-WAIT, up to a minute), so a restarted server gets
    its port back at once. The socket is not inheritable (Python's default): no child process (a sandbox
    worker, or code it runs) may hold the listener, or the port would stay bound after the server died.
    ``tirl sandbox serve`` trial-binds with this function before its workers start.

    Raises:
        OSError: the address is in use or cannot be bound (``socket.gaierror``: the host does not resolve).
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


async def serve_app(
    app: Any,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    timeout_keep_alive_s: float = 30.0,
    graceful_shutdown_s: float = 30.0,
    log_level: str = "warning",
    on_ready: Callable[[str], None] | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve ``app`` with uvicorn until stopped; call ``on_ready(url)`` once it accepts connections.

    Stops on SIGINT/SIGTERM (in the main thread) or when ``stop`` is set, with a graceful drain either way.
    """
    sock = bind_socket(host, port)
    url = _url(sock)
    config = uvicorn.Config(
        app,
        log_level=log_level,
        timeout_keep_alive=int(timeout_keep_alive_s),
        timeout_graceful_shutdown=int(graceful_shutdown_s),
        lifespan="on",
        access_log=False,
    )
    server = uvicorn.Server(config)

    async def announce() -> None:
        while not server.started:
            if server.should_exit:
                return
            await asyncio.sleep(0.01)
        if on_ready is not None:
            on_ready(url)

    async def stopper() -> None:
        if stop is not None:
            await stop.wait()
            server.should_exit = True

    watchers = [asyncio.ensure_future(announce()), asyncio.ensure_future(stopper())]
    try:
        await server.serve(sockets=[sock])
    finally:
        for task in watchers:
            task.cancel()
        sock.close()


def print_ready(url: str) -> None:
    """Print the ready line (``READY_PREFIX + url``) and flush stdout."""
    print(READY_PREFIX + url, flush=True)


async def serve_local_sandbox(
    config: ServeConfig, routers: Sequence[Any] = (), check_preload: Sequence[str] | None = None
) -> None:
    """Run ``LocalSandbox(workers=config.workers)`` behind the app until stopped (``tirl sandbox serve``).

    Args:
        config: where and how to serve.
        routers: extra ``APIRouter`` objects to include (for example the reward part's verify endpoint).
        check_preload: modules the answer checks' own pool preloads (``tirl sandbox serve`` passes the
            verify router's, :data:`tirl.reward.PRELOAD_MODULES`; the service does not import ``tirl.reward``
            itself); None: the sandbox's default preload.
    """
    from tirl.sandbox import DEFAULT_PRELOAD, LocalSandbox

    kwargs: dict[str, Any] = {"workers": config.workers}
    if config.preload is not None:
        kwargs["preload"] = tuple(config.preload)
    if config.importable_packages is not None:
        kwargs["importable_packages"] = tuple(config.importable_packages)
    sandbox = LocalSandbox(**kwargs)
    checks = None
    if routers and config.check_workers > 0:  # the verify router's checks get workers of their own
        checks = LocalSandbox(
            workers=config.check_workers, preload=DEFAULT_PRELOAD if check_preload is None else tuple(check_preload)
        )
    app = create_app(sandbox, config.service, routers=routers, close_executor=True, check_executor=checks)
    try:
        if checks is not None:  # starts beside the serving (idempotent): /v1/execute does not wait for it
            check_start = asyncio.ensure_future(checks.start())
        await sandbox.start()  # announce ready only once the workers have imported their preload
        await serve_app(
            app,
            config.host,
            config.port,
            timeout_keep_alive_s=config.timeout_keep_alive_s,
            graceful_shutdown_s=config.graceful_shutdown_s,
            log_level=config.log_level,
            on_ready=lambda url: print_ready(f"{url} workers={config.workers}"),
        )
    finally:
        await sandbox.aclose()  # idempotent; also covers a failure before the app's lifespan ran
        if checks is not None:
            check_start.cancel()
            await checks.aclose()


def parse_ready_line(line: str) -> str | None:
    """The URL in a ready line, or None if ``line`` is not one."""
    if not line.startswith(READY_PREFIX):
        return None
    return line[len(READY_PREFIX) :].split()[0]
