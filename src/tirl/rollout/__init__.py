"""Generation engines, the multi-turn agent loop and rollout scheduling."""

from tirl.rollout.engine import Engine, EngineRouter, GenerationOutput, SamplingParams, SingleEngineRouter

__all__ = ["Engine", "EngineRouter", "GenerationOutput", "SamplingParams", "SingleEngineRouter"]
