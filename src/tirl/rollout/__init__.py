"""Generation: the engine interface, the engines side by side (in-process transformers, OpenAI-compatible
servers, TRL's colocated vLLM), the multi-turn agent loop and the KV-aware rollout scheduler.

Entry points: :class:`AgentLoop` and :func:`run_trajectories` (:mod:`tirl.rollout.agent_loop`, with the
settings :class:`AgentLoopSettings` / :class:`AgentLoopConfig`); the :class:`Engine` interface
(:mod:`tirl.rollout.engine`); :class:`HFEngine` (:mod:`tirl.rollout.hf_engine`), :class:`OpenAIEngine`
(:mod:`tirl.rollout.openai_engine`), :class:`VLLMEngine` (:mod:`tirl.rollout.vllm_engine`);
:class:`RolloutScheduler` (:mod:`tirl.rollout.scheduler`). Helpers stay in their modules.

Names are imported on first use (module ``__getattr__``), so importing the package imports no engine and
neither torch nor an HTTP client.
"""

from __future__ import annotations

from tirl._lazy import lazy_getattr

_EXPORTS = {
    "AgentLoop": "tirl.rollout.agent_loop",
    "AgentLoopConfig": "tirl.rollout.agent_loop",
    "AgentLoopSettings": "tirl.rollout.agent_loop",
    "run_trajectories": "tirl.rollout.agent_loop",
    "run_trajectories_sync": "tirl.rollout.agent_loop",
    "Engine": "tirl.rollout.engine",
    "EngineRouter": "tirl.rollout.engine",
    "GenerationOutput": "tirl.rollout.engine",
    "SamplingParams": "tirl.rollout.engine",
    "SingleEngineRouter": "tirl.rollout.engine",
    "HFEngine": "tirl.rollout.hf_engine",
    "OpenAIEngine": "tirl.rollout.openai_engine",
    "VLLMEngine": "tirl.rollout.vllm_engine",
    "RolloutScheduler": "tirl.rollout.scheduler",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_getattr(__name__, _EXPORTS)
