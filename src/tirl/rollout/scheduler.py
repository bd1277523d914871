"""The rollout scheduler: an :class:`~tirl.rollout.engine.EngineRouter` over several generation endpoints.

rStar2-Agent's load-balanced rollout scheduler (report §3.2, Fig. 7; the public release, github.com/microsoft/rStar at
ecbfb94). Each endpoint wraps an :class:`~tirl.rollout.engine.Engine` (an OpenAI-compatible server, or the in-process
engine) and has a KV capacity in tokens. A trajectory takes a lease for its whole life: entering the lease may wait
(``kv_aware``: until the endpoint with the most free KV capacity can hold the trajectory's budget); every turn
of the trajectory then runs on the leased endpoint (sticky, so the server's prefix cache is reused); leaving
the lease on any path (answer, limits, exceptions, cancellation) returns the reservation and admits waiting
trajectories at once (event-driven wake-ups, no polling). The policy itself (reservations, FIFO queue, the
``kv_aware``/``static``/``round_robin`` choice) lives in :mod:`tirl.rollout.admission`, shared with the
simulator.

Failures: when a generation call fails (an exception, or an output with ``finish_reason == "error"``) the
endpoint's health probe decides whether the server is dead. A dead endpoint is taken out of rotation; its
queue of waiting trajectories is served by the others; with ``failover`` on, the failing trajectory itself
moves to the front of the queue, is admitted on another endpoint and the call is retried there (token-in /
token-out makes this safe: the prompt ids are the whole history; only the prefix cache is lost). Endpoints
without a health probe are never declared dead by the scheduler (:meth:`RolloutScheduler.mark_down` does it
by hand). A dead endpoint is not probed again automatically (:meth:`RolloutScheduler.mark_up` restores it).
Both events are logged (``logging`` warnings of this module: the endpoint taken out of rotation and why, each
trajectory moved and where).

Per-step counters for training logs: :meth:`RolloutScheduler.step_stats` returns, since its previous call, the
trajectories admitted and generation calls sent per endpoint, the failed calls, the peak of the KV tokens
reserved on each endpoint, the fail-overs, and which endpoints are alive (``sched/...`` keys).

Not covered: generation itself, the agent loop, per-request timeouts (the engine's job).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tirl.rollout.admission import (
    POLICIES,
    Admission,
    AdmissionController,
    AdmissionError,
    BudgetTooLargeError,
    EndpointStats,
    NoEndpointAvailableError,
    Rejection,
)
from tirl.rollout.capacity import CapacityProbe, probe_health, probe_kv_capacity
from tirl.rollout.engine import Engine, GenerationOutput, SamplingParams

logger = logging.getLogger(__name__)

__all__ = [
    "AdmissionError",
    "BudgetTooLargeError",
    "Endpoint",
    "EndpointStats",
    "NoEndpointAvailableError",
    "RolloutScheduler",
    "SchedulerConfig",
    "SchedulerMetrics",
    "endpoint_key",
    "parse_kv_capacities",
]


@dataclass
class Endpoint:
    """One generation endpoint.

    Attributes:
        name: unique name (the server URL for OpenAI-compatible servers).
        engine: the engine that serves it.
        capacity_tokens: KV-cache capacity in tokens (required by ``kv_aware``).
        health: async probe, True when the endpoint is alive; None means "cannot tell" (never declared dead).
        capacity_source: where the capacity came from (``sglang:/get_server_info``, ``vllm:/metrics``,
            ``config``), for logs.
    """

    name: str
    engine: Engine
    capacity_tokens: int | None = None
    health: Callable[[], Awaitable[bool]] | None = None
    capacity_source: str = "config"


@dataclass
class SchedulerConfig:
    """Settings of :class:`RolloutScheduler`.

    Attributes:
        policy: ``kv_aware`` (default, the paper's), ``static`` or ``round_robin`` (the released port's).
        admission_coef: ``kv_aware`` reserves ``ceil(budget_tokens * admission_coef)`` tokens (> 0; below 1
            over-admits, since most trajectories stop early, at the risk of KV overflow on the server).
        capacity_tokens: capacity for endpoints that report none (tokens); None = must be reported.
        failover: move a trajectory whose endpoint died to another endpoint and retry the call there.
        max_failovers: fail-overs allowed per trajectory (>= 0).
        health_timeout_s: timeout of one health probe (seconds).
        seed: seed of the ``round_robin`` tie-break shuffle.
        static_batch_size: ``static`` policy: trajectories per step, split into contiguous equal blocks by
            arrival order (verl v0.2's even pre-allocation); None deals them cyclically. :meth:`plan` is the
            alternative when the trajectory ids are known in advance.
        metrics_log: path of a JSON-lines file; when set, a line ``{"time": unix_s, **as_log_dict()}`` is
            appended after a lease ends, at most every ``metrics_log_interval_s`` seconds (event-driven, no
            background task), plus one on :meth:`RolloutScheduler.aclose`.
        metrics_log_interval_s: minimum seconds between two logged lines.
    """

    policy: str = "kv_aware"
    admission_coef: float = 1.0
    capacity_tokens: int | None = None
    failover: bool = True
    max_failovers: int = 2
    health_timeout_s: float = 5.0
    seed: int = 0
    static_batch_size: int | None = None
    metrics_log: str | None = None
    metrics_log_interval_s: float = 10.0

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduler policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if self.max_failovers < 0:
            raise ValueError("max_failovers must be >= 0")
        if self.capacity_tokens is not None and self.capacity_tokens <= 0:
            raise ValueError("capacity_tokens must be positive")


@dataclass
class SchedulerMetrics:
    """A snapshot of the scheduler for logging.

    Attributes:
        policy: the policy name.
        queue_length: trajectories waiting for admission.
        oldest_wait_s: how long the head of the queue has waited (seconds).
        endpoints: per-endpoint counters (in flight, reserved and free tokens, queue waits, liveness).
    """

    policy: str
    queue_length: int
    oldest_wait_s: float
    endpoints: list[EndpointStats] = field(default_factory=list)

    def as_log_dict(self, prefix: str = "scheduler") -> dict[str, float]:
        """Flat ``{"scheduler/<endpoint>/in_flight": 3.0, ...}`` for trackers (wandb, TRL logs, JSON lines).

        Endpoint names are sanitized (non ``[A-Za-z0-9_.-]`` runs become ``_``); unknown capacities are
        omitted rather than logged as a fake number.
        """
        out: dict[str, float] = {
            f"{prefix}/queue_length": float(self.queue_length),
            f"{prefix}/oldest_wait_s": self.oldest_wait_s,
        }
        for ep in self.endpoints:
            key = f"{prefix}/{re.sub(r'[^A-Za-z0-9_.-]+', '_', ep.name).strip('_')}"
            out[f"{key}/alive"] = 1.0 if ep.alive else 0.0
            out[f"{key}/in_flight"] = float(ep.in_flight)
            out[f"{key}/reserved_tokens"] = float(ep.reserved_tokens)
            if ep.free_tokens is not None:
                out[f"{key}/free_tokens"] = float(ep.free_tokens)
                out[f"{key}/capacity_tokens"] = float(ep.capacity_tokens or 0)
            out[f"{key}/assigned_total"] = float(ep.assigned_total)
            out[f"{key}/completed_total"] = float(ep.completed_total)
            out[f"{key}/queue_wait_mean_s"] = ep.queue_wait_mean_s
            out[f"{key}/queue_wait_max_s"] = ep.queue_wait_max_s
        return out


def parse_kv_capacities(values: Sequence[str], n_servers: int) -> list[int | None] | None:
    """Per-server KV capacities from ``--kv-capacities`` options (repeatable, comma-separated, tokens).

    No value: None (read every capacity from its server). One value: the same for every server. Exactly
    ``n_servers`` values: one per server, in order.

    Raises:
        ValueError: another count, or a value that is not a positive integer.
    """
    items = [v.strip() for value in values for v in str(value).split(",") if v.strip()]
    if not items:
        return None
    caps: list[int | None] = []
    for item in items:
        if not item.isdigit() or int(item) <= 0:
            raise ValueError(f"--kv-capacities takes positive token counts, got {item!r}")
        caps.append(int(item))
    if len(caps) == 1:
        return caps * n_servers
    if len(caps) != n_servers:
        raise ValueError(f"{len(caps)} --kv-capacities values for {n_servers} servers: give one, or one per server")
    return caps


class _LeasedEngine:
    """The :class:`Engine` a lease yields: forwards to the leased endpoint, fails over when it dies."""

    def __init__(self, scheduler: RolloutScheduler, lease_id: int, endpoint: str, trajectory_id: str = "") -> None:
        self._scheduler = scheduler
        self.lease_id = lease_id
        self.trajectory_id = trajectory_id
        self.endpoint = endpoint  # name of the endpoint serving this trajectory now
        self.failovers = 0

    async def generate(self, prompt_ids: list[int], params: SamplingParams) -> GenerationOutput:
        """Generate on the leased endpoint; on a dead endpoint, fail over (if enabled) and retry there."""
        while True:
            name = self.endpoint
            engine = self._scheduler._endpoints[name].engine
            counts = self._scheduler._counts_for(name)
            counts.requests += 1
            try:
                out = await engine.generate(prompt_ids, params)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                counts.failed_requests += 1
                try:
                    moved = await self._scheduler._on_failure(self, name, f"{type(exc).__name__}: {exc}")
                except AdmissionError as adm:
                    raise adm from exc
                if moved:
                    continue
                raise
            if out.finish_reason == "error":
                counts.failed_requests += 1
                try:
                    moved = await self._scheduler._on_failure(self, name, out.error or "engine error")
                except AdmissionError as adm:
                    return GenerationOutput(
                        token_ids=out.token_ids,
                        logprobs=out.logprobs,
                        finish_reason="error",
                        error=f"{out.error}; fail-over impossible: {adm}",
                    )
                if moved:
                    continue
            return out


class RolloutScheduler:
    """Routes trajectories to endpoints under a scheduling policy; implements ``EngineRouter``.

    Args:
        endpoints: the endpoints (unique names).
        config: policy and options (default: ``kv_aware``, coefficient 1).
        clock: monotonic clock in seconds (for queue-wait metrics).

    Raises:
        ValueError: no endpoints, duplicate names, or (``kv_aware``) an endpoint without a capacity and no
            ``config.capacity_tokens`` fallback.

    Use::

        sched = RolloutScheduler.from_urls(["http://10.0.0.1:30000", "http://10.0.0.2:30000"])
        async with sched.lease(traj_id, prompt_len + max_response_tokens) as engine:
            out = await engine.generate(prompt_ids, params)   # every turn on the same endpoint
    """

    def __init__(
        self,
        endpoints: Sequence[Endpoint],
        config: SchedulerConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or SchedulerConfig()
        self._clock = clock
        self._endpoints: dict[str, Endpoint] = {}
        for ep in endpoints:
            if ep.name in self._endpoints:
                raise ValueError(f"duplicate endpoint name {ep.name!r}")
            if ep.capacity_tokens is None and self.config.capacity_tokens is not None:
                ep.capacity_tokens = self.config.capacity_tokens
                ep.capacity_source = "config"
            self._endpoints[ep.name] = ep
        self._core = AdmissionController(
            policy=self.config.policy,
            endpoints=[(ep.name, ep.capacity_tokens) for ep in self._endpoints.values()],
            admission_coef=self.config.admission_coef,
            seed=self.config.seed,
            static_batch_size=self.config.static_batch_size,
        )
        self._waiters: dict[int, asyncio.Future[Admission]] = {}
        self._probes: dict[str, asyncio.Task[bool]] = {}
        self._last_log = float("-inf")
        self._counts: dict[str, _StepCounts] = {name: _StepCounts() for name in self._endpoints}
        self._failovers_step = 0
        self.failovers_total = 0

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_urls(
        cls,
        urls: Sequence[str],
        config: SchedulerConfig | None = None,
        *,
        engine_factory: Callable[[str], Engine] | None = None,
        capacities: Sequence[int | None] | None = None,
        probe: bool = True,
    ) -> RolloutScheduler:
        """Build a scheduler over OpenAI-compatible servers (the constructor for eval and RL).

        Args:
            urls: server URLs (root or ``.../v1``), one endpoint each, named by the URL.
            config: scheduler settings.
            engine_factory: ``url -> Engine``; default ``tirl.rollout.openai_engine.OpenAIEngine(url)``.
            capacities: per-URL KV capacities (tokens) that override probing; None entries are probed.
            probe: read capacities from the servers (SGLang ``/get_server_info``, vLLM ``/metrics``); this
                makes blocking HTTP calls, so call it before the event loop's hot path (or in a thread).

        Raises:
            ValueError: empty or duplicate URLs, ``capacities`` of the wrong length, or (``kv_aware``) a server
                whose capacity is neither reported nor configured (the message says what the probe tried).
        """
        config = config or SchedulerConfig()
        if not urls:
            raise ValueError("from_urls needs at least one server URL")
        if capacities is not None and len(capacities) != len(urls):
            raise ValueError(f"{len(capacities)} capacities given for {len(urls)} URLs")
        if engine_factory is None:
            from tirl.rollout.openai_engine import OpenAIEngine  # late: optional part, heavier imports

            engine_factory = OpenAIEngine
        endpoints: list[Endpoint] = []
        for i, url in enumerate(urls):
            cap = capacities[i] if capacities is not None else None
            source = "config"
            result = CapacityProbe(None, "none", "probing disabled")
            if cap is None and probe:
                result = probe_kv_capacity(url, timeout_s=config.health_timeout_s)
                cap, source = result.tokens, result.source
            if cap is None and config.capacity_tokens is not None:
                cap, source = config.capacity_tokens, "config"
            if cap is None and config.policy == "kv_aware":
                raise ValueError(
                    f"server {url} reports no KV capacity ({result.detail}); pass a capacity "
                    "(--kv-capacities / SchedulerConfig.capacity_tokens) or use another policy"
                )
            endpoints.append(
                Endpoint(
                    name=url,
                    engine=engine_factory(url),
                    capacity_tokens=cap,
                    health=functools.partial(probe_health, url, config.health_timeout_s),
                    capacity_source=source,
                )
            )
        return cls(endpoints, config)

    # ------------------------------------------------------------------ public API

    @property
    def endpoints(self) -> list[Endpoint]:
        """The endpoints, in configuration order."""
        return list(self._endpoints.values())

    def plan(self, trajectory_ids: Sequence[str]) -> dict[str, str]:
        """``static`` policy: assign a known batch in contiguous equal blocks (see ``AdmissionController.plan``)."""
        return self._core.plan(trajectory_ids)

    @contextlib.asynccontextmanager
    async def lease(self, trajectory_id: str, budget_tokens: int) -> AsyncIterator[Engine]:
        """Reserve ``budget_tokens`` (prompt + maximum response tokens) for one trajectory, for all its turns.

        Yields an :class:`Engine` bound to one endpoint. Waits (``kv_aware``) in FIFO order until an endpoint
        can hold the reservation. The reservation is released on every way out of the ``async with`` block.

        Raises:
            ValueError: ``budget_tokens`` not a positive int.
            BudgetTooLargeError: the reservation exceeds every alive endpoint's capacity (raised at once, or
                while waiting if the endpoints able to hold it die).
            NoEndpointAvailableError: every endpoint was taken out of rotation.
        """
        lease_id, admission = self._core.submit(trajectory_id, budget_tokens, self._clock())
        try:
            if admission is None:
                admission = await self._wait(lease_id)
            self._note_admission(admission.endpoint)
            yield _LeasedEngine(self, lease_id, admission.endpoint, trajectory_id)
        finally:
            self._waiters.pop(lease_id, None)
            self._dispatch(self._core.release(lease_id, self._clock()))
            self._maybe_log()

    def metrics(self) -> SchedulerMetrics:
        """Per-endpoint in-flight trajectories, reserved/free tokens, queue waits, liveness; and the queue."""
        now = self._clock()
        return SchedulerMetrics(
            policy=self.config.policy,
            queue_length=self._core.queue_length,
            oldest_wait_s=self._core.oldest_wait(now),
            endpoints=self._core.stats(),
        )

    def step_stats(self, prefix: str = "sched") -> dict[str, float]:
        """Counters since the previous call (a training step's), then reset; flat keys for metric logs.

        Per endpoint (``<key>`` = its name without the URL scheme, non ``[A-Za-z0-9_.-]`` runs as ``_``):
        ``<prefix>/trajectories/<key>`` (trajectories admitted there, fail-overs included),
        ``<prefix>/requests/<key>`` (generation calls sent), ``<prefix>/failed_requests/<key>``,
        ``<prefix>/kv_peak/<key>`` (most KV tokens reserved there at once), ``<prefix>/kv_peak_frac/<key>``
        (that over its capacity, when known) and ``<prefix>/alive/<key>`` (now). Over all:
        ``<prefix>/failovers`` (trajectories moved off a dead endpoint) and ``<prefix>/alive`` (endpoints in
        rotation).
        """
        out: dict[str, float] = {}
        alive = 0
        for ep in self._core.stats():
            key = endpoint_key(ep.name)
            c = self._counts_for(ep.name)
            out[f"{prefix}/trajectories/{key}"] = float(c.trajectories)
            out[f"{prefix}/requests/{key}"] = float(c.requests)
            out[f"{prefix}/failed_requests/{key}"] = float(c.failed_requests)
            out[f"{prefix}/kv_peak/{key}"] = float(c.kv_peak)
            if ep.capacity_tokens:
                out[f"{prefix}/kv_peak_frac/{key}"] = c.kv_peak / ep.capacity_tokens
            out[f"{prefix}/alive/{key}"] = 1.0 if ep.alive else 0.0
            alive += ep.alive
            # the next step's peak starts from what is still reserved now
            self._counts[ep.name] = _StepCounts(kv_peak=ep.reserved_tokens)
        out[f"{prefix}/failovers"] = float(self._failovers_step)
        out[f"{prefix}/alive"] = float(alive)
        self._failovers_step = 0
        return out

    def is_alive(self, name: str) -> bool:
        """Whether endpoint ``name`` is in rotation (KeyError if unknown)."""
        return self._core.is_alive(name)

    def mark_down(self, name: str, reason: str = "marked down") -> None:
        """Take endpoint ``name`` out of rotation; waiting trajectories go to the others (KeyError if unknown)."""
        admissions, rejections = self._core.mark_down(name, self._clock(), reason)
        self._reject(rejections)
        self._dispatch(admissions)

    def mark_up(self, name: str) -> None:
        """Put endpoint ``name`` back in rotation (KeyError if unknown)."""
        self._dispatch(self._core.mark_up(name, self._clock()))

    def log_metrics(self) -> None:
        """Append one metrics line to ``config.metrics_log`` now (no-op without a log path; never raises for
        I/O errors, which would otherwise end a trajectory)."""
        path = self.config.metrics_log
        if not path:
            return
        self._last_log = self._clock()
        line = json.dumps({"time": round(time.time(), 3), **self.metrics().as_log_dict()})
        try:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError:
            pass

    def _maybe_log(self) -> None:
        if self.config.metrics_log and self._clock() - self._last_log >= self.config.metrics_log_interval_s:
            self.log_metrics()

    async def aclose(self) -> None:
        """Close every endpoint's engine that has an ``aclose`` (HTTP clients); cancel running health probes;
        write a last metrics line when logging."""
        self.log_metrics()
        for task in list(self._probes.values()):
            task.cancel()
        for ep in self._endpoints.values():
            close = getattr(ep.engine, "aclose", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                    await result

    # ------------------------------------------------------------------ internals

    def _counts_for(self, name: str) -> _StepCounts:
        return self._counts.setdefault(name, _StepCounts())

    def _note_admission(self, name: str) -> None:
        """Count a trajectory admitted on ``name`` and update that endpoint's peak reservation."""
        counts = self._counts_for(name)
        counts.trajectories += 1
        for ep in self._core.stats():
            if ep.name == name:
                counts.kv_peak = max(counts.kv_peak, ep.reserved_tokens)
                break

    async def _wait(self, lease_id: int) -> Admission:
        fut: asyncio.Future[Admission] = asyncio.get_running_loop().create_future()
        self._waiters[lease_id] = fut
        try:
            return await fut
        finally:
            self._waiters.pop(lease_id, None)

    def _dispatch(self, admissions: list[Admission]) -> None:
        for adm in admissions:
            fut = self._waiters.get(adm.lease_id)
            if fut is not None and not fut.done():
                fut.set_result(adm)
            # A cancelled waiter's own ``finally`` releases its lease; nothing to do here.

    def _reject(self, rejections: list[Rejection]) -> None:
        for rej in rejections:
            fut = self._waiters.get(rej.lease_id)
            if fut is not None and not fut.done():
                fut.set_exception(rej.error)

    async def _is_dead(self, name: str) -> bool:
        """Probe endpoint ``name`` once (concurrent callers share the probe); True when it is down."""
        if not self._core.is_alive(name):
            return True
        health = self._endpoints[name].health
        if health is None:
            return False
        task = self._probes.get(name)
        if task is None:
            task = asyncio.ensure_future(self._probe(health))
            self._probes[name] = task
            task.add_done_callback(lambda _t, n=name: self._probes.pop(n, None))
        alive = await asyncio.shield(task)
        return not alive

    async def _probe(self, health: Callable[[], Awaitable[bool]]) -> bool:
        try:
            return bool(await asyncio.wait_for(health(), self.config.health_timeout_s))
        except asyncio.CancelledError:
            raise
        except Exception:  # a probe that cannot even run counts as a failed probe
            return False

    async def _on_failure(self, handle: _LeasedEngine, name: str, reason: str) -> bool:
        """A call on ``name`` failed. Returns True when ``handle`` moved to another endpoint (retry there).

        Raises AdmissionError when the endpoint is dead and no other endpoint can take the trajectory.
        """
        if not await self._is_dead(name):
            return False
        if self._core.is_alive(name):
            logger.warning(
                "rollout server %s is down (health probe failed after: %s); taken out of rotation", name, reason
            )
            self.mark_down(name, f"health probe failed after: {reason}")
        if not self.config.failover or handle.failovers >= self.config.max_failovers:
            return False
        if handle.endpoint != name:  # another call of the same trajectory already moved it
            return True
        admissions = self._core.requeue(handle.lease_id, self._clock())  # AdmissionError propagates
        mine = [a for a in admissions if a.lease_id == handle.lease_id]
        self._dispatch([a for a in admissions if a.lease_id != handle.lease_id])
        admission = mine[0] if mine else await self._wait(handle.lease_id)
        handle.endpoint = admission.endpoint
        handle.failovers += 1
        self._failovers_step += 1
        self.failovers_total += 1
        self._note_admission(admission.endpoint)
        logger.warning(
            "fail-over: trajectory %s moved from %s to %s (its fail-over %d); the call is retried there",
            handle.trajectory_id or handle.lease_id,
            name,
            admission.endpoint,
            handle.failovers,
        )
        return True


@dataclass
class _StepCounts:
    """One endpoint's counters since the last :meth:`RolloutScheduler.step_stats`."""

    trajectories: int = 0
    requests: int = 0
    failed_requests: int = 0
    kv_peak: int = 0


def endpoint_key(name: str) -> str:
    """An endpoint's name as a metric-key part: the URL scheme dropped, non ``[A-Za-z0-9_.-]`` runs as ``_``
    (``http://127.0.0.1:18200`` -> ``127.0.0.1_18200``)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", re.sub(r"^[a-z]+://", "", name)).strip("_")
