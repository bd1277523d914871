"""A discrete-event simulator of one agentic rollout step over several inference engines.

Covers: inference engines with a KV-cache capacity, continuous batching (up to ``max_running`` sequences
decode one token per step), a decode step time that grows with the batch and with the KV tokens it reads
(roofline: ``max(weights + KV reads, batch compute)``), a prefill cost per token, a prefix cache that keeps a
trajectory's KV while its tool call runs (evicted LRU under memory pressure), and overflow handling as the
vLLM does it: when a decode step does not fit, the engine first drops idle prefix caches (LRU), then preempts
the newest running sequence, one at a time, and later recomputes its whole context (recompute preemption).
SGLang's retraction differs (the report, §3.2, says it "evicts half of the in-progress rollouts", and SGLang
then backs off its admission through ``new_token_ratio``); that back-off is not modelled, so SGLang is not
offered as a mode (a naive "evict half" without back-off thrashes far worse than any real engine). Trajectories come
from :mod:`tirl.sim.workload`; tool calls run asynchronously (a trajectory's next turn is queued on its engine
when its tool returns).

The rollout scheduler's policy is the *same code* as the real scheduler: an
:class:`~tirl.rollout.admission.AdmissionController` decides which engine each trajectory goes to and when it
may start, in virtual time.

Reports makespan, generated tokens per second, engine idle fraction, KV tokens evicted and recomputed,
preemptions, scheduler queue waits, and per-engine load timelines (for Fig. 7-like plots, see
:mod:`tirl.sim.plot`). Deterministic: no wall clock and no randomness beyond the workload's seed.

Not covered: network latency, chunked-prefill scheduling details, speculative decoding, tensor/data
parallelism inside an engine, engine failures, and the per-turn batch synchronisation of verl v0.2 (tools
here are always dispatched asynchronously, for every policy).
"""

from __future__ import annotations

import heapq
import math
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np

from tirl.rollout.admission import AdmissionController
from tirl.sim.workload import Workload


@dataclass
class EngineSpec:
    """Performance model of one inference engine. Tokens and seconds.

    Defaults: one AMD MI300X (192 GB HBM, 5.3 TB/s; the report's GPU) serving a 14B dense model in bf16
    (28 GB of weights; Qwen3-14B KV = 40 layers x 8 KV heads x 128 x 2 x 2 B = 160 KiB per token), at about
    70% of peak bandwidth and 500 TFLOP/s sustained:

    - ``capacity_tokens`` = (0.85 x 192 GB - 28 GB weights - ~8 GB activations) / 160 KiB ~ 800K.
    - ``step_base_s`` = weights read per decode step = 28 GB / 3.7 TB/s ~ 7.5 ms.
    - ``step_per_kv_token_s`` = 160 KiB / 3.7 TB/s ~ 4.4e-8 s per KV token read by attention.
    - ``step_per_seq_s`` = ``prefill_per_token_s`` = 2 x 14e9 FLOP / 500 TFLOP/s ~ 5.6e-5 s per token.
    - ``max_running`` = 256, vLLM's default ``max_num_seqs``.

    Attributes:
        capacity_tokens: KV-cache capacity.
        max_running: most sequences decoded together (vLLM ``max_num_seqs``, SGLang ``max_running_requests``).
        step_base_s, step_per_kv_token_s, step_per_seq_s: decode step =
            ``max(step_base_s + step_per_kv_token_s * kv_tokens_in_batch, step_per_seq_s * batch)``.
        prefill_per_token_s: prefill (and recompute) cost per token, added to the iteration that admits.
        prefix_cache: keep a trajectory's KV during its tool call (evictable); False = recompute every turn.
    """

    capacity_tokens: int = 800_000
    max_running: int = 256
    step_base_s: float = 7.5e-3
    step_per_kv_token_s: float = 4.4e-8
    step_per_seq_s: float = 5.6e-5
    prefill_per_token_s: float = 5.6e-5
    prefix_cache: bool = True

    def __post_init__(self) -> None:
        if self.capacity_tokens <= 0 or self.max_running <= 0:
            raise ValueError("capacity_tokens and max_running must be positive")

    def macro_time(self, batch: int, kv0: int, steps: int) -> float:
        """Seconds for ``steps`` decode steps of ``batch`` sequences holding ``kv0`` KV tokens at the start
        (each step adds ``batch`` tokens). Closed form of the roofline sum."""
        if steps <= 0:
            return 0.0
        a = self.step_base_s + self.step_per_kv_token_s * kv0
        c = self.step_per_kv_token_s * batch
        comp = self.step_per_seq_s * batch
        if c > 0:
            j_star = min(steps, max(0, math.ceil((comp - a) / c)))
        else:
            j_star = steps if comp > a else 0
        total = j_star * comp + (steps - j_star) * a
        total += c * ((steps - 1) * steps / 2 - (j_star - 1) * j_star / 2)
        return total


@dataclass
class SimResult:
    """Outcome of :func:`simulate` (tokens, seconds).

    Attributes:
        policy: the scheduling policy.
        admission_coef: its coefficient (``kv_aware``).
        engines: number of engines.
        trajectories: number of trajectories.
        makespan_s: time when the last trajectory ended.
        generated_tokens: decode tokens (each generated token once; recomputation is not counted here).
        tokens_per_s: ``generated_tokens / makespan_s``.
        idle_fraction: mean over engines of the share of the makespan with nothing to compute.
        evicted_tokens: KV tokens dropped from the cache while their trajectory still needed them (preempted
            sequences and evicted prefix caches of trajectories waiting on a tool).
        recomputed_tokens: tokens prefilled again because their KV had been dropped.
        preemptions: running sequences preempted on overflow.
        queue_wait_mean_s, queue_wait_p95_s, queue_wait_max_s: scheduler admission waits.
        engine_finish_s: per engine, when its last trajectory ended.
        engine_busy_s: per engine, time spent computing.
        timelines: per engine, ``(t, running, kv_used_tokens)`` samples at each iteration boundary.
    """

    policy: str
    admission_coef: float
    engines: int
    trajectories: int
    makespan_s: float
    generated_tokens: int
    tokens_per_s: float
    idle_fraction: float
    evicted_tokens: int
    recomputed_tokens: int
    preemptions: int
    queue_wait_mean_s: float
    queue_wait_p95_s: float
    queue_wait_max_s: float
    engine_finish_s: list[float]
    engine_busy_s: list[float]
    capacity_tokens: int = 0
    timelines: list[list[tuple[float, int, int]]] = field(default_factory=list, repr=False)

    def row(self) -> dict[str, float | str | int]:
        """The scalar metrics (no timelines), for tables and JSON."""
        return {
            "policy": self.policy,
            "admission_coef": self.admission_coef,
            "engines": self.engines,
            "trajectories": self.trajectories,
            "makespan_s": round(self.makespan_s, 3),
            "tokens_per_s": round(self.tokens_per_s, 1),
            "idle_fraction": round(self.idle_fraction, 4),
            "evicted_tokens": self.evicted_tokens,
            "recomputed_tokens": self.recomputed_tokens,
            "preemptions": self.preemptions,
            "queue_wait_mean_s": round(self.queue_wait_mean_s, 3),
            "queue_wait_p95_s": round(self.queue_wait_p95_s, 3),
            "queue_wait_max_s": round(self.queue_wait_max_s, 3),
            "engine_finish_spread_s": round(max(self.engine_finish_s) - min(self.engine_finish_s), 3),
        }


class _Seq:
    __slots__ = ("traj", "ctx0", "g0", "end_g", "order")

    def __init__(self, traj: int, ctx0: int, g0: int, end_g: int, order: int) -> None:
        self.traj, self.ctx0, self.g0, self.end_g, self.order = traj, ctx0, g0, end_g, order


class _Req:
    __slots__ = ("traj", "ctx", "remaining", "computed_before")

    def __init__(self, traj: int, ctx: int, remaining: int, computed_before: int) -> None:
        self.traj = traj  # trajectory index
        self.ctx = ctx  # KV tokens needed before decoding (prompt + history)
        self.remaining = remaining  # tokens to generate in this turn
        self.computed_before = computed_before  # of ctx, tokens whose KV existed before (recompute on miss)


class _Engine:
    def __init__(self, idx: int, spec: EngineSpec) -> None:
        self.idx = idx
        self.spec = spec
        self.g = 0  # decode steps done
        self.running: dict[int, _Seq] = {}  # admission order -> seq (insertion order = age)
        self.ends: list[tuple[int, int]] = []  # heap of (end_g, order)
        self.kv_running = 0  # KV tokens of running sequences (at step g)
        self.cache: OrderedDict[int, int] = OrderedDict()  # traj -> cached prefix tokens (LRU)
        self.kv_cached = 0
        self.waiting: deque[_Req] = deque()
        self.busy = False
        self.kicked = False
        self.version = 0
        self.macro: tuple[float, float, int, int, int] | None = None  # start, prefill_s, batch, kv0, steps
        self.busy_s = 0.0
        self.finish_s = 0.0
        self.timeline: list[tuple[float, int, int]] = []

    @property
    def used(self) -> int:
        return self.kv_running + self.kv_cached


class _Simulator:
    def __init__(self, workload: Workload, engines: list[EngineSpec], controller: AdmissionController) -> None:
        self.w = workload
        self.trajs = workload.trajectories
        self.engines = [_Engine(i, spec) for i, spec in enumerate(engines)]
        self.ctl = controller
        self.now = 0.0
        self.events: list[tuple[float, int, int, int, int]] = []  # (t, seq, kind, a, b)
        self.event_seq = 0
        self.order = 0
        n = len(self.trajs)
        self.engine_of = [-1] * n
        self.lease_of = [-1] * n
        self.turn = [0] * n
        self.ctx = [0] * n  # KV tokens the trajectory holds after its last completed computation
        self.finished = 0
        self.generated = 0
        self.evicted = 0
        self.recomputed = 0
        self.preemptions = 0
        self.waits: list[float] = []
        self.admitted: list[int] = []  # trajectory of each entry of ``waits``
        self.end_time = 0.0
        self.lease_index: dict[int, int] = {}
        self.on_done: Callable[[int], None] | None = None  # called with a trajectory's index when it finishes

    # ---------------------------------------------------------------- events
    def push(self, t: float, kind: int, a: int, b: int = 0) -> None:
        self.event_seq += 1
        heapq.heappush(self.events, (t, self.event_seq, kind, a, b))

    def run(self) -> None:
        self.submit(range(len(self.trajs)))
        while self.events:
            self.step_event()
        if self.finished != len(self.trajs):
            raise RuntimeError(f"simulation stalled with {len(self.trajs) - self.finished} trajectories unfinished")

    def submit(self, indices: Iterable[int]) -> None:
        """Submit trajectories ``indices`` (of the workload, batch order) to the scheduler at ``self.now``.

        :meth:`run` submits the whole workload at t=0; :mod:`tirl.sim.staleness` submits one step's batch at a
        time (the admission times of ``rollout.max_staleness``)."""
        indices = list(indices)
        self.ctl.plan([self.trajs[i].trajectory_id for i in indices])
        for i in indices:
            t = self.trajs[i]
            lease, adm = self.ctl.submit(t.trajectory_id, t.budget_tokens, self.now)
            self.lease_of[i] = lease
            self.lease_index[lease] = i
            if adm is not None:
                self.admit(i, adm.endpoint, adm.wait_s)

    def step_event(self) -> None:
        """Process the next event (the caller checks ``self.events`` is not empty)."""
        t, _, kind, a, b = heapq.heappop(self.events)
        self.now = t
        if kind == 0:  # macro step done on engine a, version b
            eng = self.engines[a]
            if eng.version == b and eng.busy:
                self.finish_macro(eng)
        elif kind == 1:  # tool of trajectory a returned
            self.tool_returned(a)
        else:  # engine a has new work and was idle: start after all arrivals of this instant
            eng = self.engines[a]
            eng.kicked = False
            if not eng.busy:
                self.start_iteration(eng)

    # ---------------------------------------------------------------- scheduler side
    def admit(self, i: int, endpoint: str, wait_s: float) -> None:
        e = int(endpoint.removeprefix("engine"))
        self.engine_of[i] = e
        self.waits.append(wait_s)
        self.admitted.append(i)
        plan = self.trajs[i]
        self.ctx[i] = 0
        self.enqueue(self.engines[e], _Req(i, plan.prompt_tokens, plan.gen_tokens[0], 0))

    def enqueue(self, eng: _Engine, req: _Req) -> None:
        eng.waiting.append(req)
        if eng.busy:
            self.interrupt(eng)
        elif not eng.kicked:
            eng.kicked = True
            self.push(self.now, 2, eng.idx)

    def tool_returned(self, i: int) -> None:
        plan = self.trajs[i]
        k = self.turn[i]  # the turn that is about to run
        before = self.ctx[i]
        self.ctx[i] = before + plan.tool_tokens[k - 1]
        self.enqueue(self.engines[self.engine_of[i]], _Req(i, self.ctx[i], plan.gen_tokens[k], before))

    def trajectory_done(self, i: int) -> None:
        self.finished += 1
        self.end_time = max(self.end_time, self.now)
        for adm in self.ctl.release(self.lease_of[i], self.now):
            self.admit(self.lease_index[adm.lease_id], adm.endpoint, adm.wait_s)
        if self.on_done is not None:
            self.on_done(i)

    # ---------------------------------------------------------------- engine side
    def interrupt(self, eng: _Engine) -> None:
        """New work arrived while ``eng`` is mid macro-step: end the macro-step after the step in progress."""
        start, prefill_s, batch, kv0, steps = eng.macro
        elapsed = self.now - start - prefill_s
        if elapsed < 0:
            done = 1
        else:
            lo, hi = 1, steps
            while lo < hi:  # smallest k with macro_time(k) >= elapsed
                mid = (lo + hi) // 2
                if eng.spec.macro_time(batch, kv0, mid) >= elapsed:
                    hi = mid
                else:
                    lo = mid + 1
            done = lo
        if done < steps:
            eng.macro = (start, prefill_s, batch, kv0, done)
            eng.version += 1
            self.push(start + prefill_s + eng.spec.macro_time(batch, kv0, done), 0, eng.idx, eng.version)

    def evict_cache_until(self, eng: _Engine, need_free: int, keep: int = -1) -> None:
        cap = eng.spec.capacity_tokens
        while cap - eng.used < need_free and eng.cache:
            victim = next(iter(eng.cache))
            if victim == keep:
                if len(eng.cache) == 1:
                    return
                eng.cache.move_to_end(victim)
                continue
            tokens = eng.cache.pop(victim)
            eng.kv_cached -= tokens
            self.evicted += tokens

    def start_iteration(self, eng: _Engine) -> None:
        spec = eng.spec
        cap = spec.capacity_tokens
        prefill = 0
        # 1. admit waiting requests (FCFS; stop at the first that does not fit)
        while eng.waiting and len(eng.running) < spec.max_running:
            req = eng.waiting[0]
            hit = eng.cache.get(req.traj, 0) if spec.prefix_cache else 0
            need = req.ctx - hit + 1  # room for the prompt and the first decode token
            if need > cap - eng.used + (eng.kv_cached - hit):
                break
            self.evict_cache_until(eng, need, keep=req.traj)
            eng.waiting.popleft()
            if hit:
                del eng.cache[req.traj]
                eng.kv_cached -= hit
            prefill += req.ctx - hit
            self.recomputed += max(0, req.computed_before - hit)
            self.order += 1
            seq = _Seq(req.traj, req.ctx, eng.g, eng.g + req.remaining, self.order)
            eng.running[self.order] = seq
            eng.kv_running += req.ctx
            heapq.heappush(eng.ends, (seq.end_g, seq.order))
        if not eng.running:
            eng.busy = False
            eng.macro = None
            eng.timeline.append((self.now, 0, eng.used))
            return
        # 2. make room for at least one decode step: evict idle prefixes, then preempt
        batch = len(eng.running)
        if cap - eng.used < batch:
            self.evict_cache_until(eng, batch)
        while eng.running and cap - eng.used < len(eng.running):
            self.preempt_newest(eng)
        batch = len(eng.running)
        if batch == 0:  # cannot happen when every budget fits the capacity; guard against a stall
            raise RuntimeError("engine cannot fit a single sequence: capacity below a trajectory's context")
        # 3. decode until the first turn ends or memory runs out
        while eng.ends and (eng.ends[0][1] not in eng.running or eng.running[eng.ends[0][1]].end_g != eng.ends[0][0]):
            heapq.heappop(eng.ends)  # stale entries of preempted sequences
        steps = max(1, min(eng.ends[0][0] - eng.g, (cap - eng.used) // batch))
        prefill_s = prefill * spec.prefill_per_token_s
        eng.macro = (self.now, prefill_s, batch, eng.kv_running, steps)
        eng.busy = True
        eng.version += 1
        eng.timeline.append((self.now, batch, eng.used))
        self.push(self.now + prefill_s + spec.macro_time(batch, eng.kv_running, steps), 0, eng.idx, eng.version)

    def preempt_newest(self, eng: _Engine) -> None:
        order, seq = eng.running.popitem()
        ctx = seq.ctx0 + (eng.g - seq.g0)
        eng.kv_running -= ctx
        self.evicted += ctx
        self.preemptions += 1
        eng.waiting.appendleft(_Req(seq.traj, ctx, seq.end_g - eng.g, ctx))

    def finish_macro(self, eng: _Engine) -> None:
        start, prefill_s, batch, kv0, steps = eng.macro
        eng.busy = False
        eng.busy_s += self.now - start
        eng.g += steps
        eng.kv_running += batch * steps
        self.generated += batch * steps
        while eng.ends and eng.ends[0][0] <= eng.g:
            end_g, order = heapq.heappop(eng.ends)
            seq = eng.running.get(order)
            if seq is None or seq.end_g != end_g:
                continue
            del eng.running[order]
            ctx = seq.ctx0 + (eng.g - seq.g0)
            eng.kv_running -= ctx
            self.turn_ended(eng, seq.traj, ctx)
        self.start_iteration(eng)

    def turn_ended(self, eng: _Engine, i: int, ctx: int) -> None:
        plan = self.trajs[i]
        self.ctx[i] = ctx
        self.turn[i] += 1
        if self.turn[i] >= plan.turns:
            eng.finish_s = max(eng.finish_s, self.now)
            self.trajectory_done(i)
            return
        if eng.spec.prefix_cache:
            eng.cache[i] = ctx
            eng.kv_cached += ctx
        self.push(self.now + plan.tool_latency_s[self.turn[i] - 1], 1, i)


def simulate(
    workload: Workload,
    engines: list[EngineSpec] | EngineSpec,
    policy: str = "kv_aware",
    *,
    n_engines: int | None = None,
    admission_coef: float = 1.0,
    seed: int = 0,
) -> SimResult:
    """Run one rollout step of ``workload`` on the engines under ``policy``; return the metrics.

    Args:
        workload: trajectories (from :func:`tirl.sim.workload.generate_workload`), submitted at t=0
            in batch order (problem-major).
        engines: one spec per engine, or one spec used ``n_engines`` times.
        policy: ``kv_aware``, ``static`` or ``round_robin`` (the real scheduler's admission code).
        n_engines: engine count when ``engines`` is a single spec.
        admission_coef: ``kv_aware`` reservation coefficient.
        seed: seed of the ``round_robin`` shuffle.

    Raises:
        ValueError: a trajectory's budget exceeds an engine's capacity (the engine could never hold it), or
            bad arguments.
    """
    if isinstance(engines, EngineSpec):
        if not n_engines or n_engines < 1:
            raise ValueError("n_engines >= 1 is required with a single EngineSpec")
        engines = [engines] * n_engines
    biggest = max(t.budget_tokens for t in workload.trajectories)
    smallest_cap = min(e.capacity_tokens for e in engines)
    if biggest + 1 > smallest_cap:
        raise ValueError(f"a trajectory budget of {biggest} tokens does not fit an engine of {smallest_cap} tokens")
    ctl = AdmissionController(
        policy,
        [(f"engine{i}", e.capacity_tokens) for i, e in enumerate(engines)],
        admission_coef=admission_coef,
        seed=seed,
    )
    sim = _Simulator(workload, list(engines), ctl)
    sim.run()
    makespan = sim.end_time
    waits = np.array(sim.waits) if sim.waits else np.zeros(1)
    busy = [e.busy_s for e in sim.engines]
    return SimResult(
        policy=policy,
        admission_coef=admission_coef,
        engines=len(engines),
        trajectories=len(workload.trajectories),
        makespan_s=makespan,
        generated_tokens=sim.generated,
        tokens_per_s=sim.generated / makespan if makespan > 0 else 0.0,
        idle_fraction=float(np.mean([1 - b / makespan for b in busy])) if makespan > 0 else 0.0,
        evicted_tokens=sim.evicted,
        recomputed_tokens=sim.recomputed,
        preemptions=sim.preemptions,
        queue_wait_mean_s=float(waits.mean()),
        queue_wait_p95_s=float(np.percentile(waits, 95)),
        queue_wait_max_s=float(waits.max()),
        engine_finish_s=[e.finish_s for e in sim.engines],
        engine_busy_s=busy,
        capacity_tokens=smallest_cap,
        timelines=[e.timeline for e in sim.engines],
    )
