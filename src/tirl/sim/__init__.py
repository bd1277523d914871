"""The rollout-step simulator: synthetic agentic workloads, a discrete-event simulation of engines under the real
scheduler's admission code, and Fig. 7-like timelines (docs/scheduler.md, ``benchmarks/scheduler_sim.py``).

Separate from :mod:`tirl.rollout` because nothing on the training or evaluation path uses it: it exists to
measure scheduling policies. Modules: :mod:`tirl.sim.workload`, :mod:`tirl.sim.simulator`, :mod:`tirl.sim.plot`,
and :mod:`tirl.sim.staleness` (the step time of ``rollout.max_staleness`` k = 0, 1, 2 over runs of steps:
``benchmarks/staleness_sim.py``).
"""
