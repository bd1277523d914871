"""A policy sampler for data curation: ``(generate, score)`` callables over a model, the agent loop (tool on)
and the verifier, as :func:`tirl.data.hard_subset.count_correct` and the label-consistency step of
``tirl data curate`` (:mod:`tirl.data.curation.consistency`) take them.

The pieces come from :mod:`tirl.runtime`, as in RL training: generation is an in-process engine
(:func:`tirl.runtime.build_hf_engine`) under the agent loop, code runs in the configured executor (``local``
sandbox pool or service URLs: the ``sandbox`` section, :func:`tirl.runtime.build_executor`) on an
:class:`tirl.runtime.AgentRuntime` (:func:`sampler_runtime`), and scoring is
:class:`tirl.reward.scorer.VerifierScorer` on that runtime's verifier. Heavy imports happen on call.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tirl.protocol.config import ProtocolConfig
from tirl.reward.types import VerifierConfig
from tirl.rollout.agent_loop import TrainingLoopSettings
from tirl.runtime import ENGINE_BATCH_SIZE
from tirl.service.config import ExecutorConfig

SAMPLER_WORKERS = 2
"""Local sandbox workers of the sampler by default (``tirl data filter-hard``/``curate --workers``)."""


@dataclass
class SamplerConfig(TrainingLoopSettings):
    """Settings of :func:`policy_sampler`: the agent-loop settings with the RL rollout's defaults
    (:class:`~tirl.rollout.agent_loop.TrainingLoopSettings`, as :class:`tirl.train.config.RolloutConfig`: the
    policy is sampled as in training, 10 turns, 8192 tokens, temperature 1.0), the conversation format and the
    executor. The agent-loop fields are described once, in :class:`~tirl.rollout.agent_loop.AgentLoopSettings`
    (the flags of ``tirl data`` take their help from there).

    Attributes:
        sandbox: where the tool calls run (:class:`tirl.service.config.ExecutorConfig`, the ``sandbox:`` section
            of an RL recipe: ``backend`` ``local`` or service URLs; :data:`SAMPLER_WORKERS` local workers
            by default).
        batch_size: largest generation batch of the engine (:data:`tirl.runtime.ENGINE_BATCH_SIZE` by default).
        seed: sampling seed.
        protocol: the conversation format (the policy's, as in its RL recipe).
        verifier: the scoring verifier's settings (the ``verifier:`` section of an RL recipe).
    """

    sandbox: ExecutorConfig = field(default_factory=lambda: ExecutorConfig(workers=SAMPLER_WORKERS))
    batch_size: int = ENGINE_BATCH_SIZE
    seed: int = 0
    protocol: ProtocolConfig = field(default_factory=ProtocolConfig)
    verifier: VerifierConfig = field(default_factory=VerifierConfig)


def sampler_runtime(config: SamplerConfig) -> Any:
    """The :class:`tirl.runtime.AgentRuntime` of a sampling run: its ``sandbox``, ``protocol`` and ``verifier``
    sections (the executor is built on first use). A command that needs the executor besides the sampler
    (``tirl data curate``'s answer probe) builds it here once and gives it to :func:`policy_sampler`."""
    from tirl.runtime import AgentRuntime

    return AgentRuntime(
        name="tirl-sampler-loop", protocol=config.protocol, sandbox=config.sandbox, verifier=config.verifier
    )


@contextlib.contextmanager
def policy_sampler(
    policy: Any, tokenizer: Any, config: SamplerConfig | None = None, runtime: Any = None
) -> Iterator[tuple[Any, Any]]:
    """``(generate, score)`` for a loaded policy; the engine (and the runtime when this made it) are closed on
    exit.

    ``generate(problems, n)`` returns ``n`` trajectories per problem (problem-major) from the agent loop with
    the Python tool; ``score(trajectories, repeated_problems)`` returns the verifier's rewards (1.0 correct).
    Both run on one :class:`tirl.runtime.AgentRuntime` (its executor serves the tool calls, its verifier the
    scores): ``runtime``, owned by the caller, or one of :func:`sampler_runtime`.
    """
    from tirl.reward.scorer import VerifierScorer
    from tirl.runtime import build_hf_engine

    cfg = config or SamplerConfig()
    owned = runtime is None
    runtime = sampler_runtime(cfg) if owned else runtime
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
        if owned:
            runtime.close(engine)
        else:
            closer = getattr(engine, "aclose", None)
            if closer is not None:
                runtime.run(closer(), timeout=30)


__all__ = ["SAMPLER_WORKERS", "SamplerConfig", "policy_sampler", "sampler_runtime"]
