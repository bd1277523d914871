"""Launching tests/equal_steps_script.py in 1 process or in 2 under ``accelerate launch`` (not a test module).

Shared by the data-parallel, FSDP2 and ZeRO-3 tests on CPU and by the session fixtures of tests/conftest.py that
start the runs several test files read (the 1-process reference, the 2-process DDP run), so each is trained once
per test session.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
SCRIPT = TESTS / "equal_steps_script.py"
ACCELERATE_CONFIGS = ROOT / "configs" / "accelerate"

Job = tuple[list[str], dict[str, str]]
"""A command line and its environment."""


def script_env(**extra: str) -> dict[str, str]:
    """The environment of a run: one OpenMP thread per process (2 cores), this checkout's ``src`` first."""
    return dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONPATH=str(ROOT / "src"), **extra)


def one_process(model_dir: Path, out: Path, steps: int, env: dict[str, str] | None = None) -> Job:
    """The script in this Python, alone: trains up to ``steps`` (resuming a checkpoint under ``out/run``)."""
    return [sys.executable, str(SCRIPT), str(model_dir), str(out), str(steps)], env or script_env()


def two_processes(config: str, model_dir: Path, out: Path, steps: int, env: dict[str, str]) -> Job:
    """The script under ``accelerate launch --config_file configs/accelerate/<config>`` (2 ranks on a free port)."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    assert accelerate, "accelerate's launcher is part of the train extra"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [accelerate, "launch", "--config_file", str(ACCELERATE_CONFIGS / config), "--main_process_port", str(port)]
    return [*cmd, str(SCRIPT), str(model_dir), str(out), str(steps)], env


def run_together(*jobs: Job, timeout: float = 1200) -> list[tuple[int, str]]:
    """Run the commands side by side (most of each is start-up and waiting on the other rank); for each, its exit
    status and its output (stdout and stderr together)."""
    procs = [
        subprocess.Popen(cmd, cwd=TESTS, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for cmd, env in jobs
    ]
    return [(p.returncode, out) for p, out in ((p, p.communicate(timeout=timeout)[0]) for p in procs)]


def run_ok(*jobs: Job) -> None:
    """:func:`run_together`, asserting that every command succeeded (with the tail of its output if not)."""
    for rc, output in run_together(*jobs):
        assert rc == 0, output[-6000:]


def ranks(out: Path, n: int) -> list[dict]:
    """The records the script wrote under ``out`` for ranks 0..n-1."""
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(n)]
