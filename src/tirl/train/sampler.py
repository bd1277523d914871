"""A policy sampler for data curation: ``(generate, score)`` callables over a model, the agent loop (tool on)
and the verifier, as :func:`tirl.train.hard_subset.count_correct` and the label-consistency step of
``tirl data curate`` (:mod:`tirl.data.curation.consistency`) take them.

The pieces come from :mod:`tirl.runtime`, as in RL training: generation is an in-process engine
(:func:`tirl.runtime.build_hf_engine`) under the agent loop, code runs in the configured executor (``local``
sandbox pool or a service URL, :func:`tirl.runtime.build_executor`) on an :class:`tirl.runtime.AgentRuntime`,
and scoring is :class:`tirl.train.rollout_func.VerifierScorer` on that executor. Heavy imports happen on call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.protocol.config import ProtocolConfig
from tirl.rollout.agent_loop import AgentLoopSettings
from tirl.train.config import RolloutConfig


@dataclass
class SamplerConfig(AgentLoopSettings):
    """Settings of :func:`policy_sampler`: the agent-loop settings (:class:`AgentLoopSettings`) with the RL
    rollout's defaults (the policy is sampled as in training), the conversation format and the executor.

    Attributes:
        max_turns, max_response_tokens, temperature: as in :class:`tirl.train.config.RolloutConfig` (10 turns,
            8192 tokens, temperature 1.0).
        sandbox: ``local`` (a sandbox pool in this process) or the URL of a code-execution service.
        workers: local sandbox workers.
        batch_size: largest generation batch of the engine.
        seed: sampling seed.
        protocol: the conversation format (the policy's, as in its RL recipe).
    """

    max_turns: int = RolloutConfig.max_turns
    max_response_tokens: int = RolloutConfig.max_response_tokens
    temperature: float = RolloutConfig.temperature
    sandbox: str = RolloutConfig.sandbox
    workers: int = 2
    batch_size: int = RolloutConfig.engine_batch_size
    seed: int = 0
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)


@contextlib.contextmanager
def policy_sampler(policy: Any, tokenizer: Any, config: SamplerConfig | None = None) -> Iterator[tuple[Any, Any]]:
    """``(generate, score)`` for a loaded policy; the engine and executor are closed on exit.

    ``generate(problems, n)`` returns ``n`` trajectories per problem (problem-major) from the agent loop with
    the Python tool; ``score(trajectories, repeated_problems)`` returns the verifier's rewards (1.0 correct).
    Both run on one :class:`tirl.runtime.AgentRuntime` (its executor serves the tool calls and the verifier).
    """
    from tirl.runtime import AgentRuntime, build_executor, build_hf_engine
    from tirl.train.rollout_func import VerifierScorer

    cfg = config or SamplerConfig()
    runtime = AgentRuntime(lambda: build_executor(cfg.sandbox, cfg.workers), name="tirl-sampler-loop",
                           protocol=cfg.protocol)
    engine = build_hf_engine(policy, batch_size=cfg.batch_size)
    agent_cfg = cfg.agent_loop_config(cfg.protocol)
    scorer = VerifierScorer(tokenizer, runtime.verify)
    calls = {"n": 0}

    def generate(problems: Sequence[Any], n: int) -> list[Any]:
        rows = list(problems)  # the agent loop takes Problems (group id: the problem id)
        calls["n"] += 1
        return runtime.rollouts(rows, n, engine, tokenizer, agent_cfg, seed=cfg.seed, check_sandbox=calls["n"] == 1)

    def score(trajectories: Sequence[Any], repeated: Sequence[Any]) -> list[float | None]:
        return [s.reward for s in scorer.score(trajectories, repeated)]

    try:
        yield generate, score
    finally:
        runtime.close(engine)


__all__ = ["SamplerConfig", "policy_sampler"]
