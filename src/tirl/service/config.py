"""The settings of a run's code executor: the ``sandbox:`` section of RL recipes and eval configs.

Covers :class:`ExecutorConfig` (where code runs, ``backend``: the local pool or sandbox services, with every
setting of the local pool, :class:`tirl.sandbox.config.SandboxConfig`, and of the HTTP client,
:class:`ClientConfig`) and :class:`ClientConfig` itself. :func:`tirl.runtime.build_executor` builds the executor
from an :class:`ExecutorConfig`. This module holds dataclasses only: importing it imports no HTTP library.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from tirl.sandbox.config import SandboxConfig


@dataclass
class ClientConfig:
    """Batching, balancing and retry policy of a :class:`tirl.service.client.SandboxClient` (``sandbox.client``).

    Attributes:
        batch_size: most calls in one batch (the report: 64). Must not exceed the servers' ``max_batch_size``.
        flush_interval_s: longest wait for a batch to fill after its first call.
        flush_when_idle: when the client has no call in flight, send a batch at once instead of waiting up to
            ``flush_interval_s`` (calls queued in the same event-loop turn, as from ``run_batch`` or a
            ``gather``, still go together). Waiting buys fewer POSTs per call, which is worth a few ms only
            while the servers are busy with earlier calls; an idle client would only add that wait to the
            call's latency and leave the workers idle meanwhile.
        stream: send batches to ``/v1/execute/stream`` and answer each call as its line arrives; False sends
            ``/v1/execute/batch`` (every call of a batch answered when the slowest one finished).
        senders: sender tasks, i.e. batches in flight at once (the report: 32); a batch is in flight until its
            last call is answered. They fill batches one at a time, so calls that trickle in are coalesced.
        max_queue: calls waiting to be sent before ``run`` blocks (backpressure).
        call_deadline_s: total seconds a call may take (queueing, sending, retries); past it the caller gets
            an ``internal`` result. None: no overall deadline (attempts and ``unavailable_wait_s`` still bound it).
        server_grace_s: the servers' ``deadline_grace_s`` (their safety deadline is ``timeout_s`` + this); a
            larger value learnt from a server's ``/healthz`` wins.
        http_timeout_margin_s: added to ``max(timeout_s) + server_grace_s`` to get the HTTP read timeout.
        connect_timeout_s: TCP connect timeout.
        probe_interval_s: seconds between health probes of a down server.
        probe_timeout_s: timeout of one health probe.
        max_attempts: POSTs of one batch (same or other server) before its calls are answered ``internal``.
        unavailable_wait_s: how long a batch waits for a server to come back when all are down.
        retry_internal: times a call answered ``internal`` by a server is sent again (same id).
        keepalive_expiry_s: idle keep-alive connections are dropped after this; keep it below the servers'
            keep-alive timeout (``serve`` uses 30 s) so a connection the server closed is never reused.
        latency_window: how many recent call latencies :meth:`tirl.service.client.SandboxClient.stats` keeps
            for percentiles.
    """

    batch_size: int = 64
    flush_interval_s: float = 0.005
    flush_when_idle: bool = True
    stream: bool = True
    senders: int = 32
    max_queue: int = 8192
    call_deadline_s: float | None = None
    server_grace_s: float = 15.0
    http_timeout_margin_s: float = 30.0
    connect_timeout_s: float = 5.0
    probe_interval_s: float = 0.5
    probe_timeout_s: float = 2.0
    max_attempts: int = 8
    unavailable_wait_s: float = 30.0
    retry_internal: int = 1
    keepalive_expiry_s: float = 4.0
    latency_window: int = 10_000

    def __post_init__(self) -> None:
        for name in ("batch_size", "senders", "max_queue", "max_attempts", "latency_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"ClientConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.flush_interval_s < 0 or self.retry_internal < 0:
            raise ValueError("flush_interval_s and retry_internal must be >= 0")


@dataclass
class ExecutorConfig(SandboxConfig):
    """Where a run's code runs, and how: the ``sandbox:`` section (``sandbox.backend``, ``sandbox.workers``,
    ``sandbox.max_memory_mb``, ``sandbox.client.batch_size``, ...).

    The fields of :class:`tirl.sandbox.config.SandboxConfig` (limits, isolation layers, ``workers``,
    ``preload``) configure the local pool; ``client`` configures the HTTP client used when ``backend`` names
    services. The limits of each *call* are not here: they are the agent loop's ``rollout.tool_timeout_s`` and
    ``rollout.tool_memory_mb`` (capped by ``max_timeout_s``/``max_memory_mb``) and the verifier's
    ``verifier.timeout_s``/``verifier.memory_mb``.

    Attributes:
        backend: ``local`` (a ``LocalSandbox`` pool in this process) or the ``http(s)://`` URL of a
            code-execution service (``tirl sandbox serve``), several separated by commas (a ``SandboxClient``
            balancing over them).
        client: the ``SandboxClient``'s batching, balancing and retry policy (with a service ``backend``).
        preload: modules the local workers import once (the verifier's modules,
            :data:`tirl.reward.PRELOAD_MODULES`, are always added by :func:`tirl.runtime.build_executor`).

    Raises:
        ValueError: a ``backend`` that is neither ``local`` nor http(s) URLs, or an invalid pool setting.
    """

    KEY_HINTS: ClassVar[dict[str, str]] = {
        "memory_mb": "rollout.tool_memory_mb (each tool call), verifier.memory_mb (each answer check) or "
        "sandbox.max_memory_mb (the largest a call may ask for)",
        "timeout_s": "rollout.tool_timeout_s (each tool call), verifier.timeout_s (each answer check) or "
        "sandbox.max_timeout_s (the largest a call may ask for)",
        "url": "backend",
        "urls": "backend",
        "sandbox": "backend",
    }
    """Where the settings people look for here live (named in the error for an unknown key)."""

    backend: str = "local"
    client: ClientConfig = field(default_factory=ClientConfig)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.backend = self.backend.strip()
        if self.backend != "local" and (
            not self.urls or not all(u.startswith(("http://", "https://")) for u in self.urls)
        ):
            raise ValueError(
                f"sandbox.backend must be 'local' or http(s):// URL(s) separated by commas, got {self.backend!r}"
            )

    @property
    def urls(self) -> list[str]:
        """The service URLs of ``backend`` ([] for ``local``)."""
        if self.backend == "local":
            return []
        return [u.strip() for u in self.backend.split(",") if u.strip()]

    def local_config(self) -> SandboxConfig:
        """The local pool's part of these settings, as a plain :class:`SandboxConfig`."""
        return SandboxConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(SandboxConfig)})


__all__ = ["ClientConfig", "ExecutorConfig"]
