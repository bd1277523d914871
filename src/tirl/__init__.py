"""tirl: tool-integrated reasoning with reinforcement learning.

An implementation of the rStar2-Agent system (arXiv 2508.20722): a conversation protocol in which a model
reasons in text and calls a Python tool, an isolated fast code-execution pool and service, answer
verification, a multi-turn agent rollout with KV-aware scheduling, GRPO with Resample-on-Correct on TRL, a
staged recipe, and an evaluation harness.
"""

__version__ = "0.1.0"
