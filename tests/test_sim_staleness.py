"""The step-time simulation of ``rollout.max_staleness`` (tirl.sim.staleness): k = 0 is the synchronous simulation,
the bound holds, the overlap gains only what the update leaves, and the admissions are the real producer's."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tirl.rollout.staleness import StalenessProducer
from tirl.sim.simulator import EngineSpec, simulate
from tirl.sim.staleness import (
    CPU_MEASURED_STEP_S,
    CPU_PROFILE,
    EngineGenerator,
    GpuProfile,
    TraceGenerator,
    break_even_slowdown,
    simulate_staleness,
)
from tirl.sim.workload import generate_workload, long_response_workload

SPEC = EngineSpec(capacity_tokens=120_000)


def small_workloads(steps: int, seed: int = 0):
    spec = long_response_workload(n_problems=6, samples=4, tool_latency_s=0.3)
    return [generate_workload(spec, seed + s) for s in range(steps)]


def engine_run(k: int, update_s, sync_s=2.0, steps: int = 4, seed: int = 0):
    gen = EngineGenerator(small_workloads(steps, seed), SPEC, n_engines=2)
    return simulate_staleness(gen, k, update_s, sync_s)


def test_k0_reproduces_the_synchronous_simulation_exactly():
    workloads = small_workloads(4)
    update = [30.0, 5.0, 60.0, 12.5]
    gen = EngineGenerator(workloads, SPEC, n_engines=2)
    result = simulate_staleness(gen, 0, update, 2.0)
    for rec, w, u in zip(result.steps, workloads, update, strict=True):
        alone = simulate(w, SPEC, "kv_aware", n_engines=2)
        assert rec.rollout_s == alone.makespan_s  # bit for bit: each step is its own simulation
        assert rec.step_s == pytest.approx(2.0 + alone.makespan_s + u, rel=1e-12)
        assert rec.lag == 0 and rec.sync_s == 2.0
        waits = gen.waits[rec.step]
        assert max(waits) == alone.queue_wait_max_s and float(np.mean(waits)) == alone.queue_wait_mean_s


@settings(max_examples=60, deadline=None)
@given(
    k=st.integers(0, 3),
    profile=st.lists(
        st.tuples(st.floats(0.5, 100.0), st.floats(0.0, 100.0), st.floats(0.0, 10.0)), min_size=1, max_size=9
    ),
)
def test_the_lag_bound_is_never_exceeded_and_every_step_is_trained_once_in_order(k, profile):
    rollout, update, sync = (list(x) for x in zip(*profile, strict=True))
    result = simulate_staleness(TraceGenerator(rollout), k, update, sync)
    assert [r.step for r in result.steps] == list(range(len(profile)))
    for rec in result.steps:
        assert 0 <= rec.lag <= k
        assert rec.admitted_s <= rec.done_s <= rec.taken_s <= rec.end_s  # trained only after it finished
    ends = [r.end_s for r in result.steps]
    assert ends == sorted(ends)  # oldest first, nothing dropped


@pytest.mark.parametrize("k", [1, 2])
def test_the_lag_bound_holds_on_the_engines_too(k):
    result = engine_run(k, [3.0, 40.0, 1.0, 80.0, 0.5, 2.0], steps=6)
    assert max(r.lag for r in result.steps) <= k
    assert result.lag_max == k  # the overlap did happen
    assert all(r.trajectories == 24 and r.rollout_s > 0 for r in result.steps)


def test_with_update_time_zero_the_overlap_gains_nothing():
    rollout, sync = [40.0, 55.0, 38.0, 61.0, 47.0], [5.0, 6.0, 4.0, 7.0, 5.5]
    update = [0.0] * 5
    base = simulate_staleness(TraceGenerator(rollout), 0, update, sync)
    k1 = simulate_staleness(TraceGenerator(rollout), 1, update, sync)
    assert k1.mean_step_s == pytest.approx(base.mean_step_s, rel=1e-12)
    # over the whole run k = 1 saves only the push after the last batch
    assert k1.steps[-1].end_s == pytest.approx(base.steps[-1].end_s - sync[-1], rel=1e-12)
    # k = 2 admits two batches on one push: it saves pushes, and nothing else (the generator's work is the same)
    k2 = simulate_staleness(TraceGenerator(rollout), 2, update, sync)
    assert k2.steps[-1].end_s >= base.steps[-1].end_s - sum(sync) + sync[0]
    no_sync = [simulate_staleness(TraceGenerator(rollout), k, update, 0.0).steps[-1].end_s for k in (0, 1, 2)]
    assert no_sync == pytest.approx([sum(rollout)] * 3, rel=1e-12)
    e0 = engine_run(0, [0.0] * 4)
    e1 = engine_run(1, [0.0] * 4)
    assert e1.mean_step_s == pytest.approx(e0.mean_step_s, rel=1e-12)


def test_with_a_long_update_k1_step_time_is_max_of_rollout_and_update_plus_sync():
    rollout, sync = [40.0, 55.0, 38.0, 61.0, 47.0], 5.0
    update = [400.0] * 5
    r = simulate_staleness(TraceGenerator(rollout), 1, update, sync)
    assert r.mean_step_s == pytest.approx(max(max(rollout), 400.0 + sync), rel=1e-12)
    base = simulate_staleness(TraceGenerator(rollout), 0, update, sync)
    assert base.mean_step_s > r.mean_step_s + 38.0  # k = 0 pays the rollout on top
    e = engine_run(1, [2_000.0] * 4, sync_s=3.0)
    longest = max(rec.rollout_s for rec in e.steps)
    assert longest < 2_000.0
    assert e.mean_step_s == pytest.approx(2_003.0, rel=1e-12)


def test_with_a_long_rollout_k1_step_time_approaches_the_rollout():
    rollout, sync, update = [400.0, 410.0, 420.0, 430.0], 2.0, [50.0] * 4
    r = simulate_staleness(TraceGenerator(rollout), 1, update, sync)
    assert [s.step_s for s in r.steps[1:-1]] == pytest.approx([sync + x for x in rollout[1:-1]], rel=1e-12)


def _real_admissions(k: int, n: int, slow_generation: bool) -> list[tuple[int, int]]:
    """The real producer's ``(step, version)`` admissions, driven so that no timing decides them: slow, a batch
    finishes only when its step is taken; fast, every batch has finished before each take."""
    release = {s: threading.Event() for s in range(n)}

    def generate(step: int) -> int:
        if slow_generation:
            assert release[step].wait(30)
        return step

    producer = StalenessProducer(generate, lambda: None, k, n)
    try:
        for step in range(n):
            if slow_generation:
                release[step].set()
            else:
                producer.wait_idle()
            producer.take(step, step)
    finally:
        for e in release.values():
            e.set()
        producer.close()
    return producer.admitted


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("slow_generation", [True, False])
def test_the_simulated_admissions_are_the_real_producers(k, slow_generation):
    n = 8
    if slow_generation:  # generation far longer than the update; distinct lengths so that batches end one by one
        rollout, update = [100.0 + s for s in range(n)], [1.0] * n
    else:
        rollout, update = [1.0] * n, [100.0] * n
    sim = simulate_staleness(TraceGenerator(rollout), k, update, 0.5)
    assert [(r.step, r.version) for r in sim.steps] == _real_admissions(k, n, slow_generation)


def test_the_cpu_replay_reproduces_the_measured_steps_and_k1_is_shorter():
    p = CPU_PROFILE
    k0 = simulate_staleness(TraceGenerator(p.rollout_s, p.trajectories), 0, p.update_s, p.sync_s)
    # the record's step s is rollout s + update s to within 1.5 s (the rest of the step is not in its columns)
    assert [r.step_s for r in k0.steps] == pytest.approx(CPU_MEASURED_STEP_S, abs=1.6)
    k1 = simulate_staleness(TraceGenerator(p.rollout_s, p.trajectories), 1, p.update_s, p.sync_s)
    assert k1.mean_step_s < k0.mean_step_s and k1.row()["lag_mean"] == 1.0
    f = break_even_slowdown(p.rollout_s, p.update_s, p.sync_s, 1)
    assert 1.0 < f < k0.mean_step_s / k1.mean_step_s + 0.2


def test_break_even_is_one_when_the_overlap_cannot_gain():
    assert break_even_slowdown([10.0, 10.0, 10.0], [0.0, 0.0, 0.0], 1.0, 1) == 1.0


def test_gpu_profile_is_the_reports_scale():
    g = GpuProfile()
    w = g.workloads(1)[0]
    s = w.summary()
    assert s["trajectories"] == 512 * 32
    assert 43_000 <= s["mean_tool_calls"] * s["trajectories"] <= 47_000  # the report's ~45K calls per step
    assert g.train_gpus == 32 and g.colocated().train_gpus == 64
    assert g.colocated().update_s(w) == pytest.approx(g.update_s(w) / 2)
    assert 2.0 < g.sync_s() < 2.2


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        simulate_staleness(TraceGenerator([1.0]), -1, [1.0], 1.0)
    with pytest.raises(ValueError):
        simulate_staleness(TraceGenerator([1.0, 2.0]), 1, [1.0, 1.0], [1.0])
    with pytest.raises(ValueError):
        TraceGenerator([0.0])
    with pytest.raises(ValueError):
        GpuProfile(engines=65)


def test_the_wait_for_admission_is_what_the_update_or_the_bound_costs_the_generator():
    rollout, sync = [40.0, 55.0, 38.0, 61.0, 47.0], 5.0
    update = [100.0, 120.0, 90.0, 110.0, 100.0]
    k0 = simulate_staleness(TraceGenerator(rollout, 8), 0, update, sync)
    # k = 0: the next batch waits for the whole update (the push is not counted: it needs an idle generator)
    assert [r.held_s for r in k0.steps[1:]] == pytest.approx(update[:-1], rel=1e-12)
    assert k0.row()["held_share"] == 1.0
    k1 = simulate_staleness(TraceGenerator(rollout, 8), 1, update, sync)
    # k = 1, update-bound: batch s+1 finishes during update s, then batch s+2 waits for the bound: U_s - R_{s+1}
    assert [r.held_s for r in k1.steps[2:]] == pytest.approx(
        [u - r for u, r in zip(update[:-2], rollout[1:-1], strict=True)], rel=1e-9
    )
    slow = simulate_staleness(TraceGenerator([400.0] * 5, 8), 1, update, sync)
    assert slow.row()["held_share"] == 0.0 and slow.row()["held_mean_s"] == 0.0  # rollout-bound: nothing waits
