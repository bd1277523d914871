"""Shared pytest fixtures.

Model fixtures (session-scoped, built once per machine and cached under ``$TIRL_CACHE``, default
``~/.cache/tirl``, so later runs load them in seconds):

- ``qwen_tokenizer``: the real Qwen2.5-Coder-0.5B-Instruct tokenizer (vocab 151,936; ChatML with native
  ``<tool_call>`` tokens; ``eos_token`` = ``<|im_end|>``). No weights are converted.
- ``smollm2_tokenizer``: the real SmolLM2-135M-Instruct tokenizer (vocab 49,152; ChatML).
- ``tiny_model_dir``: HF folder of a random ~9.8M-parameter Qwen2-architecture model on the **Qwen2.5**
  tokenizer and chat template (``generation_config.eos_token_id`` = [``<|im_end|>``, ``<|endoftext|>``]).
- ``tiny_smollm2_model_dir``: the same on the SmolLM2 tokenizer (~3.2M parameters; cheaper logits).

Training runs several test files read (session-scoped, trained once per session; tests/equal_steps_runs.py):

- ``equal_steps_reference``: tests/equal_steps_script.py in 1 process, 3 steps of the tiny SmolLM2 model: the
  reference of the DDP and FSDP2 tests.
- ``ddp_two_process_run``: the same script in 2 CPU processes (``accelerate launch`` with
  configs/accelerate/ddp-2cpu.yaml), 3 steps; read by tests/test_train_distributed.py and
  tests/test_train_equal_steps.py.

Under pytest-xdist (``make test`` runs the main suite in 2 workers), each of these is still trained once per
session: the first worker that needs it trains it under a file lock, the others read it (``_once_per_session``).

These need the packaged models (``requirements-models.txt``) but not the Qwen weight conversion.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

# OpenMP threads that spin while waiting slow torch down 10-20x when the 2 cores are shared with other processes
# (see tirl.cli.train); must be set before torch is first imported.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _once_per_session(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], None]) -> Path:
    """A folder ``build`` fills once per test session, also when pytest-xdist runs the session in several
    worker processes (``make test`` does): the first worker to ask builds it under a file lock in the folder the
    workers share (the session's base temp folder's parent), the others wait and read it. Without xdist, a
    fresh folder of this session. A failed build raises in the worker that ran it and leaves no done marker, so
    the next worker to ask builds it again (and fails the same way) instead of reading a half-written run.
    """
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        out = tmp_path_factory.mktemp(name)
        build(out)
        return out
    from filelock import FileLock

    shared = tmp_path_factory.getbasetemp().parent  # pytest-N/ of this session, shared by its gw* workers
    out, done = shared / name, shared / f"{name}.done"
    with FileLock(str(shared / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(out, ignore_errors=True)
            out.mkdir()
            build(out)
            done.touch()
    return out


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


@pytest.fixture(scope="session")
def equal_steps_reference(tmp_path_factory, tiny_smollm2_model_dir) -> dict:
    """Rank 0's record of 3 steps of tests/equal_steps_script.py in 1 process (its run folder is not shared)."""
    from equal_steps_runs import one_process, ranks, run_ok

    out = _once_per_session(
        tmp_path_factory, "equal-steps-one", lambda d: run_ok(one_process(tiny_smollm2_model_dir, d, 3))
    )
    return ranks(out, 1)[0]


@pytest.fixture(scope="session")
def ddp_two_process_run(tmp_path_factory, tiny_smollm2_model_dir) -> tuple[Path, list[dict]]:
    """3 steps of tests/equal_steps_script.py in 2 data-parallel CPU ranks: (its output folder, whose ``run``
    holds ``checkpoint-3``, never to be written into: copy it; the two ranks' records)."""
    from equal_steps_runs import ranks, run_ok, script_env, two_processes

    env = script_env(ACCELERATE_USE_CPU="1")
    out = _once_per_session(
        tmp_path_factory,
        "equal-steps-ddp",
        lambda d: run_ok(two_processes("ddp-2cpu.yaml", tiny_smollm2_model_dir, d, 3, env)),
    )
    return out, ranks(out, 2)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files that hold a ``slow`` test run first, those whose mark gives ``seconds`` (about how long the file
    takes alone on the 2-core machine; only their order counts, docs/benchmarks.md has the measurements) longest
    first, each file's tests in their own order: under
    pytest-xdist (``make test``) the long runs start while the many short tests fill the other worker, instead of a
    long file starting last and ending the session alone. The Makefile passes ``--no-loadscope-reorder``: without it
    xdist's ``--dist loadfile`` hands out the files with the most tests first and this order is lost (the 1-test
    slow files, the longest, went last). With several workers the shortest files go second, so that the worker
    handed the longest file is handed the shortest one up front, not the next-longest
    (tests/schedule_order.py: how xdist hands the files out)."""
    from schedule_order import file_order

    seconds: dict[Path, float] = {}
    for item in items:
        for mark in item.iter_markers("slow"):
            seconds[item.path] = max(seconds.get(item.path, 0.0), float(mark.kwargs.get("seconds", 0.0)))
    # collection happens in each xdist worker, which knows the count; the controller only hands the files out
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    order = {path: i for i, path in enumerate(file_order(list(dict.fromkeys(i.path for i in items)), seconds, workers))}
    items.sort(key=lambda item: order[item.path])  # stable: each file's tests in their own order
