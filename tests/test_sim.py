"""The rollout-step simulator (tirl.sim.simulator) and its workload generator (tirl.sim.workload)."""

import numpy as np
import pytest

from tirl.sim.simulator import EngineSpec, simulate
from tirl.sim.workload import (
    TrajectoryPlan,
    Workload,
    WorkloadSpec,
    generate_workload,
    long_response_workload,
    short_response_workload,
)

SIMPLE = dict(step_base_s=0.01, step_per_kv_token_s=0.0, step_per_seq_s=0.0, prefill_per_token_s=0.001)


def plan(tid, prompt, gen, tool=(), latency=(), budget=None):
    return TrajectoryPlan(
        trajectory_id=tid,
        problem=0,
        prompt_tokens=prompt,
        gen_tokens=list(gen),
        tool_tokens=list(tool),
        tool_latency_s=list(latency),
        budget_tokens=budget or prompt + sum(gen) + sum(tool),
    )


def workload(*plans):
    return Workload(spec=WorkloadSpec(), seed=0, trajectories=list(plans))


def test_single_trajectory_time_is_prefill_plus_decode_plus_tool_latency():
    w = workload(plan("a", 100, [10, 20], [5], [0.5]))
    r = simulate(w, EngineSpec(capacity_tokens=10_000, **SIMPLE), "kv_aware", n_engines=1)
    # 100 prompt tokens + 10 steps, tool 0.5 s, then only the 5 tool tokens are prefilled (prefix cache hit)
    assert r.makespan_s == pytest.approx(0.1 + 0.1 + 0.5 + 0.005 + 0.2)
    assert r.generated_tokens == 30
    assert r.recomputed_tokens == 0 and r.evicted_tokens == 0
    assert r.idle_fraction == pytest.approx(0.5 / r.makespan_s)


def test_without_prefix_cache_every_later_turn_recomputes_its_history():
    w = workload(plan("a", 100, [10, 20], [5], [0.5]))
    r = simulate(w, EngineSpec(capacity_tokens=10_000, prefix_cache=False, **SIMPLE), "kv_aware", n_engines=1)
    assert r.recomputed_tokens == 110
    assert r.makespan_s == pytest.approx(0.1 + 0.1 + 0.5 + 0.115 + 0.2)


def test_macro_time_matches_the_step_by_step_roofline_sum():
    spec = EngineSpec()
    for batch, kv0, steps in [(1, 100, 7), (64, 200_000, 300), (256, 10_000, 50), (200, 700_000, 1)]:
        brute = sum(
            max(spec.step_base_s + spec.step_per_kv_token_s * (kv0 + batch * j), spec.step_per_seq_s * batch)
            for j in range(steps)
        )
        assert spec.macro_time(batch, kv0, steps) == pytest.approx(brute, rel=1e-9)


def test_overflow_preempts_and_recomputes_under_static_but_kv_aware_never_evicts():
    # two 900-token trajectories on one 1,000-token engine
    w = workload(plan("a", 100, [800]), plan("b", 100, [800]))
    spec = EngineSpec(capacity_tokens=1_000, **SIMPLE)
    static = simulate(w, spec, "static", n_engines=1)
    kv = simulate(w, spec, "kv_aware", n_engines=1)
    assert static.preemptions >= 1 and static.recomputed_tokens > 0
    assert static.evicted_tokens == static.recomputed_tokens
    assert kv.preemptions == 0 and kv.evicted_tokens == 0 and kv.recomputed_tokens == 0
    assert kv.queue_wait_max_s > 0  # the second waited for the first to finish
    assert static.generated_tokens == kv.generated_tokens == 1600


def test_idle_prefix_caches_are_evicted_before_running_sequences_are_preempted():
    # "a" sits in a long tool call holding 150 cached tokens when "b" grows to 950 of the 1,000 tokens
    w = workload(plan("a", 100, [50, 10], [10], [100.0]), plan("b", 100, [850]))
    r = simulate(w, EngineSpec(capacity_tokens=1_000, **SIMPLE), "static", n_engines=1)
    assert r.preemptions == 0
    assert r.evicted_tokens == 150 and r.recomputed_tokens == 150  # a's whole history, once


def test_every_policy_generates_exactly_the_workload_tokens():
    w = generate_workload(long_response_workload(n_problems=16, samples=8, tool_latency_s=0.05), seed=1)
    expected = int(w.summary()["generated_tokens"])
    spec = EngineSpec(capacity_tokens=120_000)
    for policy in ("kv_aware", "static", "round_robin"):
        r = simulate(w, spec, policy, n_engines=2)
        assert r.generated_tokens == expected, policy
        assert len(r.timelines) == 2 and all(r.timelines)


def test_kv_aware_with_coefficient_one_never_evicts_even_when_static_thrashes():
    w = generate_workload(long_response_workload(n_problems=32, samples=8, tool_latency_s=0.3), seed=2)
    spec = EngineSpec(capacity_tokens=100_000)
    static = simulate(w, spec, "static", n_engines=2)
    kv = simulate(w, spec, "kv_aware", n_engines=2)
    assert static.evicted_tokens > 0
    assert kv.evicted_tokens == 0 and kv.preemptions == 0


def test_simulation_is_deterministic_for_a_seed():
    spec = short_response_workload(n_problems=8, samples=4)
    a = simulate(generate_workload(spec, seed=5), EngineSpec(capacity_tokens=60_000), "round_robin", n_engines=3)
    b = simulate(generate_workload(spec, seed=5), EngineSpec(capacity_tokens=60_000), "round_robin", n_engines=3)
    c = simulate(generate_workload(spec, seed=6), EngineSpec(capacity_tokens=60_000), "round_robin", n_engines=3)
    assert a.row() == b.row() and a.timelines == b.timelines
    assert a.row() != c.row()


def test_a_budget_larger_than_an_engine_is_refused():
    w = workload(plan("a", 100, [2_000]))
    with pytest.raises(ValueError, match="does not fit"):
        simulate(w, EngineSpec(capacity_tokens=1_000), "static", n_engines=1)


def test_long_workload_matches_the_report_ranges():
    w = generate_workload(long_response_workload(n_problems=256, samples=16), seed=0)
    s = w.summary()
    assert 0.06 <= s["clip_ratio"] <= 0.14  # about 10% of responses hit the 12K budget (report §4.3)
    assert 4_500 <= s["mean_response_tokens"] <= 6_500  # stage 2 averages 4K -> 6K
    assert 1.8 <= s["mean_tool_calls"] <= 3.2  # ~45K calls over 512 x 32 trajectories
    for t in w.trajectories:
        assert t.response_tokens <= w.spec.max_response_tokens
        assert 1 <= t.turns <= w.spec.max_turns and min(t.gen_tokens) >= 1
        assert len(t.tool_tokens) == len(t.tool_latency_s) == t.turns - 1


def test_samples_of_one_problem_share_its_difficulty():
    w = generate_workload(long_response_workload(n_problems=200, samples=16), seed=3)
    logs = np.log([t.response_tokens for t in w.trajectories]).reshape(200, 16)
    within = logs.var(axis=1).mean()
    total = logs.var()
    assert within < 0.8 * total  # a problem effect exists


def test_short_workload_is_short():
    s = generate_workload(short_response_workload(n_problems=128, samples=16), seed=0).summary()
    assert 700 <= s["mean_response_tokens"] <= 1_500 and s["clip_ratio"] < 0.01
