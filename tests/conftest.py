"""Shared pytest fixtures.

Model fixtures (session-scoped, built once per machine and cached under ``$TIRL_CACHE``, default
``~/.cache/tirl``, so later runs load them in seconds):

- ``qwen_tokenizer``: the real Qwen2.5-Coder-0.5B-Instruct tokenizer (vocab 151,936; ChatML with native
  ``<tool_call>`` tokens; ``eos_token`` = ``<|im_end|>``). No weights are converted.
- ``smollm2_tokenizer``: the real SmolLM2-135M-Instruct tokenizer (vocab 49,152; ChatML).
- ``tiny_model_dir``: HF folder of a random ~9.8M-parameter Qwen2-architecture model on the **Qwen2.5**
  tokenizer and chat template (``generation_config.eos_token_id`` = [``<|im_end|>``, ``<|endoftext|>``]).
- ``tiny_smollm2_model_dir``: the same on the SmolLM2 tokenizer (~3.2M parameters; cheaper logits).

These need the packaged models (``requirements-models.txt``) but not the Qwen weight conversion.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# OpenMP threads that spin while waiting slow torch down 10-20x when the 2 cores are shared with other processes
# (see tirl.cli.train); must be set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from tirl.models import load_tokenizer

    return load_tokenizer("qwen2.5-coder-0.5b-instruct")


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    from tirl.models import load_tokenizer

    return load_tokenizer("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def tiny_model_dir() -> Path:
    from tirl.models import cached_tiny_model

    return cached_tiny_model("qwen2.5-coder-0.5b-instruct")


@pytest.fixture(scope="session")
def tiny_smollm2_model_dir() -> Path:
    from tirl.models import cached_tiny_model

    return cached_tiny_model("smollm2-135m-instruct")
