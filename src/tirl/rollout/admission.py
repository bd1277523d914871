"""Admission control for rollout scheduling: which endpoint a trajectory runs on, and when it may start.

This module is the *policy* of the rollout scheduler, written as a synchronous, clock-free state machine so
that the same code drives the real asyncio scheduler (:mod:`tirl.rollout.scheduler`) and the discrete-event
simulator (:mod:`tirl.sim.simulator`). It keeps reservations, the FIFO wait queue, per-endpoint counters and
endpoint liveness. It does no I/O, owns no engines and never sleeps: callers pass the current time ``now``
(seconds, any monotonic origin) and act on the :class:`Admission` records it returns.

Policies (rStar2-Agent report §3.2 and Fig. 7; the public release, github.com/microsoft/rStar at ecbfb94):

- ``kv_aware`` (the paper's scheduler): a trajectory reserves ``ceil(budget_tokens * admission_coef)`` KV
  tokens, where ``budget_tokens`` is its prompt plus maximum response length (its worst-case KV footprint).
  Trajectories wait in one FIFO queue; the head is admitted to the alive endpoint with the most free
  capacity as soon as that endpoint can hold the reservation, and the reservation is returned when the
  trajectory ends. ``admission_coef < 1`` over-admits (most trajectories stop well before their budget) at
  the risk of KV overflow; ``1`` never overflows. The original code weighted each server by
  ``-capacity / server_budget_coef``; dividing the capacity by a coefficient equals multiplying every
  reservation by it, which is what this module does.
- ``static`` (verl v0.2 as described in the report): every trajectory is admitted at once; a batch planned
  with :meth:`AdmissionController.plan` is split into contiguous equal blocks, one per endpoint (so the
  samples of one problem share an endpoint, as verl's ``chunk`` does). Without a plan, ``static_batch_size``
  n gives the same blocks by arrival order (the k-th lease of each n goes to endpoint ``floor((k mod n) * E
  / n)``); without either, trajectories are dealt cyclically. No capacity check.
- ``round_robin`` (the released port, verl's ``AsyncLLMServerManager``): every trajectory is admitted at
  once to the endpoint with the fewest trajectories *ever assigned* (the counter is never decremented), ties
  broken by a seeded shuffle of the endpoint list; an LRU map (10,000 entries) keeps a trajectory id on the
  endpoint it used before.

Not covered here: talking to engines, health probing, timing out waits (see :mod:`tirl.rollout.scheduler`).
"""

from __future__ import annotations

import math
import random
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

PolicyName = Literal["kv_aware", "static", "round_robin"]
POLICIES: tuple[str, ...] = ("kv_aware", "static", "round_robin")


class AdmissionError(RuntimeError):
    """A trajectory cannot be admitted to any endpoint."""


class BudgetTooLargeError(AdmissionError, ValueError):
    """The trajectory's reservation exceeds the KV capacity of every alive endpoint, so it could never start."""


class NoEndpointAvailableError(AdmissionError):
    """Every endpoint has been taken out of rotation."""


@dataclass(frozen=True)
class Admission:
    """A trajectory admitted to an endpoint.

    Attributes:
        lease_id: the id :meth:`AdmissionController.submit` returned for this trajectory.
        trajectory_id: the caller's trajectory id.
        endpoint: name of the endpoint it runs on, for all its turns.
        reserved_tokens: KV tokens reserved on that endpoint (0 when the policy does not reserve).
        wait_s: seconds between submission and admission (0 when admitted at once).
    """

    lease_id: int
    trajectory_id: str
    endpoint: str
    reserved_tokens: int
    wait_s: float


@dataclass(frozen=True)
class Rejection:
    """A waiting trajectory that can no longer be admitted (its endpoints died); ``error`` says why."""

    lease_id: int
    trajectory_id: str
    error: AdmissionError


@dataclass
class EndpointStats:
    """Counters of one endpoint, for logging.

    Attributes:
        name: endpoint name (its URL for servers).
        alive: False once taken out of rotation.
        capacity_tokens: KV capacity in tokens (None when unknown; only ``kv_aware`` needs it).
        reserved_tokens: tokens reserved by admitted trajectories (``static``/``round_robin`` count their
            budgets here too, so over-commitment is visible, but never block on it).
        free_tokens: ``capacity_tokens - reserved_tokens`` (None when the capacity is unknown; negative when
            over-committed).
        in_flight: trajectories admitted and not yet released.
        assigned_total: trajectories ever admitted here.
        completed_total: trajectories released from here.
        queue_wait_mean_s: mean wait of the trajectories admitted here.
        queue_wait_max_s: longest such wait.
        down_reason: why it was taken out of rotation ("" when alive).
    """

    name: str
    alive: bool
    capacity_tokens: int | None
    reserved_tokens: int
    free_tokens: int | None
    in_flight: int
    assigned_total: int
    completed_total: int
    queue_wait_mean_s: float
    queue_wait_max_s: float
    down_reason: str = ""


@dataclass
class _Endpoint:
    name: str
    capacity: int | None
    order: int
    alive: bool = True
    reserved: int = 0
    in_flight: int = 0
    assigned_total: int = 0
    completed_total: int = 0
    wait_sum: float = 0.0
    wait_max: float = 0.0
    down_reason: str = ""

    @property
    def free(self) -> int:
        return (self.capacity or 0) - self.reserved


@dataclass
class _Lease:
    lease_id: int
    trajectory_id: str
    budget: int
    reservation: int
    submitted_at: float
    endpoint: str | None = None  # None while waiting
    waited_s: float = 0.0  # accumulated over requeues


@dataclass
class AdmissionController:
    """The scheduling policy's state: endpoints, reservations, the FIFO queue.

    Args:
        policy: ``kv_aware``, ``static`` or ``round_robin`` (see the module docstring).
        endpoints: ``(name, capacity_tokens)`` pairs; names must be unique. ``kv_aware`` needs every capacity
            (a positive int); the other policies accept None.
        admission_coef: reservation multiplier for ``kv_aware`` (> 0; < 1 over-admits).
        seed: seed of the ``round_robin`` tie-break shuffle.
        affinity_size: entries of the trajectory-id -> endpoint LRU map.
        static_batch_size: ``static`` without a plan: split each run of this many arrivals into contiguous
            blocks (None: deal cyclically).

    Raises:
        ValueError: unknown policy, duplicate or empty endpoint list, non-positive coefficient, or a missing
            or non-positive capacity under ``kv_aware``.
    """

    policy: str
    endpoints: Sequence[tuple[str, int | None]]
    admission_coef: float = 1.0
    seed: int = 0
    affinity_size: int = 10_000
    static_batch_size: int | None = None
    _eps: dict[str, _Endpoint] = field(init=False, repr=False)
    _leases: dict[int, _Lease] = field(init=False, repr=False)
    _queue: deque[int] = field(init=False, repr=False)
    _affinity: OrderedDict[str, str] = field(init=False, repr=False)
    _plan: dict[str, str] = field(init=False, repr=False)
    _next_id: int = field(init=False, default=0, repr=False)
    _cyclic: int = field(init=False, default=0, repr=False)

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown scheduling policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if not self.admission_coef > 0 or not math.isfinite(self.admission_coef):
            raise ValueError(f"admission_coef must be a positive finite number, got {self.admission_coef!r}")
        if not self.endpoints:
            raise ValueError("at least one endpoint is required")
        if self.static_batch_size is not None and self.static_batch_size < 1:
            raise ValueError("static_batch_size must be >= 1")
        order = list(range(len(self.endpoints)))
        if self.policy == "round_robin":
            random.Random(self.seed).shuffle(order)  # the released manager shuffles its server list
        self._eps = {}
        for (name, cap), rank in zip(self.endpoints, order):
            if name in self._eps:
                raise ValueError(f"duplicate endpoint name {name!r}")
            if cap is not None and (not isinstance(cap, int) or cap <= 0):
                raise ValueError(f"endpoint {name!r}: capacity must be a positive int of tokens, got {cap!r}")
            if self.policy == "kv_aware" and cap is None:
                raise ValueError(
                    f"endpoint {name!r} has no KV capacity: kv_aware needs one (probe the server or set "
                    "it in the config)"
                )
            self._eps[name] = _Endpoint(name=name, capacity=cap, order=rank)
        self._leases = {}
        self._queue = deque()
        self._affinity = OrderedDict()
        self._plan = {}

    # ------------------------------------------------------------------ queries

    @property
    def queue_length(self) -> int:
        """Trajectories waiting for admission."""
        return len(self._queue)

    def oldest_wait(self, now: float) -> float:
        """Seconds the head of the queue has waited (0 when the queue is empty)."""
        if not self._queue:
            return 0.0
        return max(0.0, now - self._leases[self._queue[0]].submitted_at)

    def endpoint_of(self, lease_id: int) -> str | None:
        """The endpoint a lease runs on, or None while it waits (KeyError for an unknown or released lease)."""
        return self._leases[lease_id].endpoint

    def is_alive(self, name: str) -> bool:
        """Whether endpoint ``name`` is in rotation."""
        return self._eps[name].alive

    def alive_endpoints(self) -> list[str]:
        """Names of the endpoints in rotation, in configuration order."""
        return [e.name for e in self._eps.values() if e.alive]

    def reservation_for(self, budget_tokens: int) -> int:
        """KV tokens a ``kv_aware`` lease of ``budget_tokens`` reserves: ``ceil(budget * admission_coef)``, >= 1."""
        return max(1, math.ceil(budget_tokens * self.admission_coef))

    def stats(self) -> list[EndpointStats]:
        """Per-endpoint counters, in configuration order."""
        out = []
        for e in self._eps.values():
            admitted = e.assigned_total
            out.append(
                EndpointStats(
                    name=e.name,
                    alive=e.alive,
                    capacity_tokens=e.capacity,
                    reserved_tokens=e.reserved,
                    free_tokens=None if e.capacity is None else e.capacity - e.reserved,
                    in_flight=e.in_flight,
                    assigned_total=e.assigned_total,
                    completed_total=e.completed_total,
                    queue_wait_mean_s=e.wait_sum / admitted if admitted else 0.0,
                    queue_wait_max_s=e.wait_max,
                    down_reason=e.down_reason,
                )
            )
        return out

    # ------------------------------------------------------------------ commands

    def plan(self, trajectory_ids: Sequence[str]) -> dict[str, str]:
        """``static`` only: split a known batch into contiguous equal blocks over the alive endpoints.

        The i-th of n trajectories goes to alive endpoint ``floor(i * E / n)``. Returns the id -> endpoint map
        (also kept for later :meth:`submit` calls). Other policies ignore plans and return ``{}``.
        """
        if self.policy != "static":
            return {}
        alive = self.alive_endpoints()
        if not alive:
            raise NoEndpointAvailableError("no endpoint in rotation")
        n = len(trajectory_ids)
        mapping = {tid: alive[(i * len(alive)) // n] for i, tid in enumerate(trajectory_ids)}
        self._plan.update(mapping)
        return mapping

    def submit(self, trajectory_id: str, budget_tokens: int, now: float) -> tuple[int, Admission | None]:
        """Ask to start a trajectory that may hold up to ``budget_tokens`` KV tokens (prompt + max response).

        Returns ``(lease_id, admission)``; ``admission`` is None when the trajectory must wait (``kv_aware``
        only); it is then delivered by a later :meth:`release`, :meth:`mark_up` or :meth:`requeue` call.

        Raises:
            ValueError: ``budget_tokens`` is not a positive int.
            BudgetTooLargeError: (``kv_aware``) the reservation exceeds the capacity of every alive endpoint.
            NoEndpointAvailableError: every endpoint is out of rotation.
        """
        if isinstance(budget_tokens, bool) or not isinstance(budget_tokens, int) or budget_tokens <= 0:
            raise ValueError(f"budget_tokens must be a positive int, got {budget_tokens!r}")
        alive = [e for e in self._eps.values() if e.alive]
        if not alive:
            raise NoEndpointAvailableError("no endpoint in rotation: all were taken out after failures")
        reservation = self.reservation_for(budget_tokens) if self.policy == "kv_aware" else budget_tokens
        if self.policy == "kv_aware":
            largest = max(alive, key=lambda e: e.capacity or 0)
            if reservation > (largest.capacity or 0):
                raise BudgetTooLargeError(
                    f"trajectory {trajectory_id!r} needs {reservation} KV tokens (budget {budget_tokens} x "
                    f"coefficient {self.admission_coef}) but the largest alive endpoint {largest.name!r} holds "
                    f"{largest.capacity}; lower the prompt/response limits or the admission coefficient"
                )
        lease_id = self._next_id
        self._next_id += 1
        lease = _Lease(lease_id, trajectory_id, budget_tokens, reservation, submitted_at=now)
        self._leases[lease_id] = lease
        if self.policy == "kv_aware":
            self._queue.append(lease_id)
            admitted = self._pump(now)
            mine = [a for a in admitted if a.lease_id == lease_id]
            assert len(admitted) == len(mine), "FIFO: a new arrival can only be admitted when the queue was empty"
            return lease_id, (mine[0] if mine else None)
        return lease_id, self._admit(lease, self._pick_immediate(lease), now)

    def release(self, lease_id: int, now: float) -> list[Admission]:
        """End a lease on any way out (answer, limit, error, cancellation), admitted or still waiting.

        Returns the waiting trajectories that the freed capacity admits (FIFO order). Releasing an unknown or
        already released lease is a no-op returning ``[]`` (so cleanup paths may call it twice).
        """
        lease = self._leases.pop(lease_id, None)
        if lease is None:
            return []
        if lease.endpoint is None:
            self._remove_from_queue(lease_id)
            return self._pump(now)  # the head may have left
        ep = self._eps[lease.endpoint]
        ep.reserved -= lease.reservation
        ep.in_flight -= 1
        ep.completed_total += 1
        return self._pump(now)

    def requeue(self, lease_id: int, now: float) -> list[Admission]:
        """Move an admitted lease off its endpoint (which died) back to the *front* of the queue.

        Used for fail-over: the trajectory keeps its place ahead of later arrivals. Returns admissions (which
        may include this lease, on another endpoint). ``static``/``round_robin`` re-pick at once.

        Raises:
            KeyError: unknown or released lease.
            NoEndpointAvailableError: every endpoint is out of rotation (the lease is then released).
            BudgetTooLargeError: no alive endpoint can ever hold it (the lease is then released).
        """
        lease = self._leases[lease_id]
        if lease.endpoint is not None:
            ep = self._eps[lease.endpoint]
            ep.reserved -= lease.reservation
            ep.in_flight -= 1
            lease.endpoint = None
        self._affinity.pop(lease.trajectory_id, None)
        alive = [e for e in self._eps.values() if e.alive]
        error = self._unadmittable(lease, alive)
        if error is not None:
            self._leases.pop(lease_id)
            self._remove_from_queue(lease_id)
            raise error
        lease.submitted_at = now
        if self.policy == "kv_aware":
            if lease_id not in self._queue:
                self._queue.appendleft(lease_id)
            return self._pump(now)
        return [self._admit(lease, self._pick_immediate(lease), now)]

    def mark_down(self, name: str, now: float, reason: str = "") -> tuple[list[Admission], list[Rejection]]:
        """Take endpoint ``name`` out of rotation: nothing new is admitted to it.

        Leases already running there keep their bookkeeping until released (their engine calls fail).
        Waiting trajectories stay queued for the other endpoints; those that no alive endpoint can ever hold
        are removed and returned as rejections. Returns ``(admissions, rejections)``. Idempotent.

        Raises:
            KeyError: unknown endpoint.
        """
        ep = self._eps[name]
        if not ep.alive:
            return [], []
        ep.alive = False
        ep.down_reason = reason or "marked down"
        for tid in [t for t, n in self._affinity.items() if n == name]:
            del self._affinity[tid]
        alive = [e for e in self._eps.values() if e.alive]
        rejections = []
        for lease_id in list(self._queue):
            lease = self._leases[lease_id]
            error = self._unadmittable(lease, alive)
            if error is not None:
                self._remove_from_queue(lease_id)
                del self._leases[lease_id]
                rejections.append(Rejection(lease_id, lease.trajectory_id, error))
        return self._pump(now), rejections

    def mark_up(self, name: str, now: float) -> list[Admission]:
        """Put endpoint ``name`` back in rotation; returns the admissions this allows (KeyError if unknown)."""
        ep = self._eps[name]
        ep.alive = True
        ep.down_reason = ""
        return self._pump(now)

    # ------------------------------------------------------------------ internals

    def _unadmittable(self, lease: _Lease, alive: list[_Endpoint]) -> AdmissionError | None:
        if not alive:
            return NoEndpointAvailableError(
                f"trajectory {lease.trajectory_id!r} cannot run: every endpoint was taken out of rotation"
            )
        if self.policy == "kv_aware":
            largest = max(alive, key=lambda e: e.capacity or 0)
            if lease.reservation > (largest.capacity or 0):
                return BudgetTooLargeError(
                    f"trajectory {lease.trajectory_id!r} needs {lease.reservation} KV tokens but the largest "
                    f"alive endpoint {largest.name!r} now holds {largest.capacity}"
                )
        return None

    def _remove_from_queue(self, lease_id: int) -> None:
        try:
            self._queue.remove(lease_id)
        except ValueError:
            pass

    def _pick_immediate(self, lease: _Lease) -> _Endpoint:
        alive = [e for e in self._eps.values() if e.alive]
        sticky = self._affinity.get(lease.trajectory_id)
        if self.policy == "round_robin":
            if sticky is not None and self._eps[sticky].alive:
                self._affinity.move_to_end(lease.trajectory_id)
                return self._eps[sticky]
            return min(alive, key=lambda e: (e.assigned_total, e.order))
        planned = self._plan.get(lease.trajectory_id)  # static
        if planned is not None and self._eps[planned].alive:
            return self._eps[planned]
        if planned is not None:  # its planned endpoint died: least-assigned alive one
            return min(alive, key=lambda e: (e.in_flight, e.order))
        if self.static_batch_size:
            k = self._cyclic % self.static_batch_size
            ep = alive[(k * len(alive)) // self.static_batch_size]
        else:
            ep = alive[self._cyclic % len(alive)]
        self._cyclic += 1
        return ep

    def _admit(self, lease: _Lease, ep: _Endpoint, now: float) -> Admission:
        wait = max(0.0, now - lease.submitted_at)
        lease.waited_s += wait
        lease.endpoint = ep.name
        ep.reserved += lease.reservation
        ep.in_flight += 1
        ep.assigned_total += 1
        ep.wait_sum += wait
        ep.wait_max = max(ep.wait_max, wait)
        self._affinity[lease.trajectory_id] = ep.name
        self._affinity.move_to_end(lease.trajectory_id)
        while len(self._affinity) > self.affinity_size:
            self._affinity.popitem(last=False)
        reserved = lease.reservation if self.policy == "kv_aware" else 0
        return Admission(lease.lease_id, lease.trajectory_id, ep.name, reserved, wait)

    def _pump(self, now: float) -> list[Admission]:
        """``kv_aware``: admit from the head of the FIFO queue while the best endpoint can hold the head."""
        admitted: list[Admission] = []
        while self._queue:
            lease = self._leases[self._queue[0]]
            alive = [e for e in self._eps.values() if e.alive]
            if not alive:
                break
            target = None
            sticky = self._affinity.get(lease.trajectory_id)
            if sticky is not None and self._eps[sticky].alive and self._eps[sticky].free >= lease.reservation:
                target = self._eps[sticky]  # a re-leased trajectory goes back to its cached prefix if it fits
            else:
                best = max(alive, key=lambda e: (e.free, -e.order))
                if best.free >= lease.reservation:
                    target = best
            if target is None:
                break
            self._queue.popleft()
            admitted.append(self._admit(lease, target, now))
        return admitted
