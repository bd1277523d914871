"""``tirl sandbox ...``: commands of the code-execution sandbox and its HTTP service.

Thin wrappers: parse options, call the library. ``serve`` runs :func:`tirl.service.server.serve_local_sandbox`;
``doctor`` runs :func:`tirl.sandbox.doctor.collect_report` and prints it.
"""

from __future__ import annotations

import asyncio

import typer

from tirl.sandbox.config import DEFAULT_IMPORTABLE

# numpy/scipy/sympy for tool calls, plus tirl.reward.PRELOAD_MODULES for /v1/verify/batch (kept literal here so
# that the CLI does not import the verifier; tests/test_cli.py checks the two agree).
SERVE_PRELOAD = "numpy,scipy,sympy,math_verify,latex2sympy2_extended,tirl.reward.worker,tirl.reward.warm"

app = typer.Typer(help="Run untrusted Python: the local sandbox pool and its HTTP service.", no_args_is_help=True)


def _check_listen(host: str, port: int) -> None:
    """Exit 2 with one line when ``host:port`` cannot be listened on (a port out of range, one in use, an
    address not of this machine), before any worker starts.

    The trial bind is the server's own (:func:`tirl.service.server.bind_socket`, with ``SO_REUSEADDR``), so it
    refuses exactly what the server's bind would: a port another socket listens on. Connections of a killed
    server left in FIN-WAIT-2/TIME-WAIT on the port (for up to a minute) do not block it, so a supervisor that
    restarts a killed server on its port gets the port back at once.
    """
    if not 0 <= port <= 65535:
        typer.secho(
            f"tirl sandbox serve: --port {port} is not a TCP port: use 1-65535 (0 picks a free one)", fg="red", err=True
        )
        raise typer.Exit(2)
    from tirl.service.server import bind_socket

    try:
        bind_socket(host, port).close()
    except OSError as exc:  # socket.gaierror (a host that does not resolve) included
        typer.secho(
            f"tirl sandbox serve: cannot listen on {host}:{port} ({exc.strerror or exc}): pick another "
            "--port (0 picks a free one) or --host",
            fg="red",
            err=True,
        )
        raise typer.Exit(2) from None


@app.command()
def serve(
    host: str = typer.Option("127.0.0.1", help="Interface to bind; use a private address for other nodes."),
    port: int = typer.Option(8088, help="TCP port; 0 picks a free one (printed on the ready line)."),
    workers: int = typer.Option(4, min=1, help="Sandbox worker processes (LocalSandbox(workers=N))."),
    check_workers: int = typer.Option(
        1,
        min=0,
        help="Worker processes of the answer checks' own pool"
        " (/v1/verify/batch), apart from those of /v1/execute; 0 shares them.",
    ),
    preload: str = typer.Option(
        SERVE_PRELOAD,
        help="Modules each worker imports once at start, comma-separated ('' for none). The default adds the"
        " answer verifier's modules (tirl.reward.PRELOAD_MODULES) so /v1/verify/batch runs warm.",
    ),
    importable_packages: str = typer.Option(
        ",".join(DEFAULT_IMPORTABLE),
        help="Installed packages the calls may read and import (with what they require and the preload's),"
        " comma-separated; '*' for every installed package (packages ship data, such as training sets with"
        " their answers: docs/sandbox.md).",
    ),
    max_code_kb: int = typer.Option(1024, min=1, help="Largest code accepted, KiB (larger: HTTP 413)."),
    max_stdin_kb: int = typer.Option(1024, min=1, help="Largest stdin accepted, KiB (larger: HTTP 413)."),
    max_batch_size: int = typer.Option(1024, min=1, help="Most requests per batch (more: HTTP 413)."),
    cache_entries: int = typer.Option(100_000, min=0, help="Finished results kept for idempotent retries."),
    log_level: str = typer.Option("warning", help="uvicorn log level."),
    fast_path: bool = typer.Option(
        True,
        help="Answer well-formed execute requests without FastAPI's routing "
        "(same answers, less CPU); --no-fast-path routes every request.",
    ),
) -> None:
    """Serve the code-execution API (POST /v1/execute, /v1/execute/batch, /v1/execute/stream, /v1/verify/batch;
    GET /healthz, /metrics).

    One process, one event loop, one idempotency cache. Scale out with more serve processes or nodes,
    and give the client all their URLs (see docs/service.md).
    """
    _check_listen(host, port)
    from tirl.service.core import ServiceConfig
    from tirl.service.server import ServeConfig, serve_local_sandbox

    service = ServiceConfig(
        max_code_bytes=max_code_kb * 1024,
        max_stdin_bytes=max_stdin_kb * 1024,
        max_batch_size=max_batch_size,
        cache_max_entries=cache_entries,
        fast_path=fast_path,
    )
    modules = tuple(m.strip() for m in preload.split(",") if m.strip())
    config = ServeConfig(
        host=host,
        port=port,
        workers=workers,
        preload=modules,
        log_level=log_level,
        service=service,
        check_workers=check_workers,
        importable_packages=tuple(p.strip() for p in importable_packages.split(",") if p.strip()),
    )
    try:
        from tirl.reward import PRELOAD_MODULES
        from tirl.reward.routes import create_verify_router  # POST /v1/verify/batch (answer verification)

        asyncio.run(serve_local_sandbox(config, routers=[create_verify_router()], check_preload=PRELOAD_MODULES))
    except KeyboardInterrupt:  # pragma: no cover - interactive stop
        pass


@app.command()
def doctor(
    json_out: bool = typer.Option(False, "--json", help="Print the report as JSON instead of tables."),
    strict: bool = typer.Option(False, help="Exit with code 1 unless every layer is active and every probe held."),
    preload: str = typer.Option("numpy,scipy,sympy", help="Modules the worker imports, comma-separated."),
    trivial_calls: int = typer.Option(20, min=0, help="print(1) calls timed for the latency line (0: skip)."),
) -> None:
    """Report which isolation layers are active on this machine (and why any is not), then probe them.

    Exit codes: 0 report printed; 1 --strict and something is missing; 2 the sandbox could not start.
    """
    import json

    from tirl.sandbox.config import SandboxConfig
    from tirl.sandbox.doctor import collect_report, render

    modules = tuple(m.strip() for m in preload.split(",") if m.strip())
    report = asyncio.run(collect_report(SandboxConfig(preload=modules), trivial_calls=trivial_calls))
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        render(report)
    if report.error:
        raise typer.Exit(2)
    if strict and not report.all_active:
        raise typer.Exit(1)
