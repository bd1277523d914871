"""Synthetic agentic rollout workloads for the scheduler simulator (:mod:`tirl.sim.simulator`).

Covers the shape of one RL step's rollouts: problems x samples, prompt lengths, per-trajectory response
lengths (heavy-tailed, correlated within a problem, clipped at the response budget), the number of tool calls,
how the generated tokens split over turns, tool-response sizes and tool latencies. Deterministic for a seed.
It does not simulate engines (see :mod:`tirl.sim.simulator`).

Fitted to the rStar2-Agent report (arXiv 2508.20722):

- Response length: log-normal, ``log L = log(median) + problem_effect + sample_noise`` with independent
  normal effects (a problem's samples share its difficulty, as the 16-32 samples of one prompt do). The
  report's training responses average about 1K tokens at the start of stage 1 and 4K -> 6K -> 8K later, with
  a clipping ratio (responses hitting the 8K/12K budget) around 10% (§4.3, Fig. 8). ``long_response_workload``
  uses median 4,400 and total log-sd 0.78 under a 12,288 budget: about 10% clipped, mean about 5.4K.
  ``short_response_workload`` uses median 800 under 8,192: mean about 1.05K, under 0.5% clipped.
- Tool calls: about 45K calls per step over 512 x 32 trajectories (§3.1, Fig. 6), i.e. 2.7 per trajectory on
  average; a trajectory's count is Poisson with a mean proportional to its length, capped at max_turns - 1.
- Tool latency: log-normal with a given mean (the report: 0.3 s mean end to end; the benchmark uses 0.05 s
  and 1 s); tool responses are short (outputs are truncated): log-normal, median 60 tokens.
Tool-response tokens count against the response budget (the public release, github.com/microsoft/rStar at ecbfb94).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np


@dataclass
class WorkloadSpec:
    """Parameters of a synthetic RL step. Lengths in tokens, times in seconds.

    Attributes:
        n_problems: prompts in the step.
        samples_per_problem: trajectories per prompt (the report samples 32 and keeps 16).
        prompt_tokens: inclusive range of prompt lengths (system prompt + problem), uniform.
        max_response_tokens: response budget (model + tool tokens), the clip point.
        median_response_tokens: median of the unclipped log-normal response length.
        problem_sigma: log-sd of the per-problem difficulty effect.
        sample_sigma: log-sd of the per-sample noise.
        min_response_tokens: floor of a response length.
        mean_tool_calls: mean tool calls per trajectory (at the mean length).
        max_turns: turn limit (tool calls <= max_turns - 1).
        tool_latency_mean_s: mean tool latency.
        tool_latency_sigma: log-sd of tool latency.
        tool_tokens_median: median tokens of one tool response.
        tool_tokens_sigma: log-sd of tool-response tokens.
        turn_split_alpha: Dirichlet concentration of how generated tokens split over turns (small = uneven).
    """

    n_problems: int = 64
    samples_per_problem: int = 16
    prompt_tokens: tuple[int, int] = (200, 600)
    max_response_tokens: int = 12_288
    median_response_tokens: float = 4_400.0
    problem_sigma: float = 0.5
    sample_sigma: float = 0.6
    min_response_tokens: int = 32
    mean_tool_calls: float = 2.7
    max_turns: int = 15
    tool_latency_mean_s: float = 0.3
    tool_latency_sigma: float = 0.5
    tool_tokens_median: float = 60.0
    tool_tokens_sigma: float = 0.8
    turn_split_alpha: float = 2.0

    def __post_init__(self) -> None:
        if self.n_problems < 1 or self.samples_per_problem < 1:
            raise ValueError("n_problems and samples_per_problem must be >= 1")
        lo, hi = self.prompt_tokens
        if not 1 <= lo <= hi:
            raise ValueError("prompt_tokens must be a range 1 <= lo <= hi")
        if self.max_turns < 1 or self.max_response_tokens < self.min_response_tokens:
            raise ValueError("max_turns >= 1 and max_response_tokens >= min_response_tokens are required")


@dataclass
class TrajectoryPlan:
    """What one trajectory will do (the simulator replays it).

    Attributes:
        trajectory_id: ``p<problem>-s<sample>``.
        problem: problem index.
        prompt_tokens: prompt length.
        gen_tokens: tokens the model generates in each turn (len = turns, each >= 1).
        tool_tokens: tokens of the tool response after turn i (len = turns - 1).
        tool_latency_s: latency of the tool call after turn i (len = turns - 1).
        budget_tokens: prompt + response budget, what the trajectory reserves.
    """

    trajectory_id: str
    problem: int
    prompt_tokens: int
    gen_tokens: list[int]
    tool_tokens: list[int]
    tool_latency_s: list[float]
    budget_tokens: int

    @property
    def turns(self) -> int:
        """Number of assistant turns."""
        return len(self.gen_tokens)

    @property
    def response_tokens(self) -> int:
        """Generated + tool tokens (<= the response budget)."""
        return sum(self.gen_tokens) + sum(self.tool_tokens)


@dataclass
class Workload:
    """A generated step: the spec, the seed and the trajectories in batch order (problem-major)."""

    spec: WorkloadSpec
    seed: int
    trajectories: list[TrajectoryPlan] = field(default_factory=list)

    def summary(self) -> dict[str, float]:
        """Mean/max response tokens, clip ratio, mean turns and tool calls, total generated tokens."""
        resp = np.array([t.response_tokens for t in self.trajectories], dtype=float)
        turns = np.array([t.turns for t in self.trajectories], dtype=float)
        return {
            "trajectories": float(len(self.trajectories)),
            "mean_response_tokens": float(resp.mean()),
            "max_response_tokens": float(resp.max()),
            "clip_ratio": float((resp >= self.spec.max_response_tokens).mean()),
            "mean_turns": float(turns.mean()),
            "mean_tool_calls": float((turns - 1).mean()),
            "generated_tokens": float(sum(sum(t.gen_tokens) for t in self.trajectories)),
        }


def generate_workload(spec: WorkloadSpec, seed: int = 0) -> Workload:
    """Draw one step's trajectories from ``spec`` with ``numpy.random.default_rng(seed)``.

    Deterministic: the same spec and seed give the same workload (so every policy replays the same step).
    """
    rng = np.random.default_rng(seed)
    n_traj = spec.n_problems * spec.samples_per_problem
    problem_effect = rng.normal(0.0, spec.problem_sigma, size=spec.n_problems)
    log_len = (
        math.log(spec.median_response_tokens)
        + np.repeat(problem_effect, spec.samples_per_problem)
        + rng.normal(0.0, spec.sample_sigma, size=n_traj)
    )
    lengths = np.clip(np.exp(log_len), spec.min_response_tokens, spec.max_response_tokens).astype(int)
    total_sigma = math.hypot(spec.problem_sigma, spec.sample_sigma)
    mean_len = spec.median_response_tokens * math.exp(total_sigma**2 / 2)
    calls = rng.poisson(spec.mean_tool_calls * lengths / mean_len)
    calls = np.minimum(calls, spec.max_turns - 1)
    prompts = rng.integers(spec.prompt_tokens[0], spec.prompt_tokens[1] + 1, size=n_traj)
    lat_mu = math.log(max(spec.tool_latency_mean_s, 1e-9)) - spec.tool_latency_sigma**2 / 2

    out = Workload(spec=spec, seed=seed)
    for i in range(n_traj):
        n_calls = int(calls[i])
        length = int(lengths[i])
        tool = np.clip(
            np.exp(rng.normal(math.log(spec.tool_tokens_median), spec.tool_tokens_sigma, size=n_calls)), 1, 2048
        ).astype(int)
        turns = n_calls + 1
        # keep at least 8 generated tokens per turn: shrink tool outputs if a short response has many calls
        while n_calls and length - int(tool.sum()) < 8 * turns:
            tool = np.maximum(1, tool // 2)
            if int(tool.sum()) <= n_calls:
                break
        gen_total = max(turns, length - int(tool.sum()))
        shares = rng.dirichlet(np.full(turns, spec.turn_split_alpha))
        gen = np.maximum(1, np.floor(shares * gen_total).astype(int))
        gen[-1] += gen_total - int(gen.sum())
        if gen[-1] < 1:  # rounding pushed the last turn below 1: take from the largest
            j = int(np.argmax(gen[:-1]))
            deficit = 1 - int(gen[-1])
            gen[j] -= deficit
            gen[-1] = 1
        if spec.tool_latency_mean_s > 0:
            latency = np.exp(rng.normal(lat_mu, spec.tool_latency_sigma, size=n_calls))
        else:
            latency = np.zeros(n_calls)
        problem, sample = divmod(i, spec.samples_per_problem)
        out.trajectories.append(
            TrajectoryPlan(
                trajectory_id=f"p{problem}-s{sample}",
                problem=problem,
                prompt_tokens=int(prompts[i]),
                gen_tokens=[int(g) for g in gen],
                tool_tokens=[int(t) for t in tool],
                tool_latency_s=[float(x) for x in latency],
                budget_tokens=int(prompts[i]) + spec.max_response_tokens,
            )
        )
    return out


def long_response_workload(n_problems: int = 64, samples: int = 16, tool_latency_s: float = 0.3) -> WorkloadSpec:
    """Stage 2/3-like step: 12,288-token budget, about 10% clipped, mean about 5.4K tokens, 15 turns."""
    return WorkloadSpec(
        n_problems=n_problems,
        samples_per_problem=samples,
        max_response_tokens=12_288,
        median_response_tokens=4_400.0,
        max_turns=15,
        tool_latency_mean_s=tool_latency_s,
    )


def short_response_workload(n_problems: int = 64, samples: int = 16, tool_latency_s: float = 0.3) -> WorkloadSpec:
    """Early stage-1-like step: 8,192-token budget, mean about 1K tokens, 10 turns."""
    return WorkloadSpec(
        n_problems=n_problems,
        samples_per_problem=samples,
        max_response_tokens=8_192,
        median_response_tokens=800.0,
        max_turns=10,
        tool_latency_mean_s=tool_latency_s,
    )
