"""Ctrl-C and SIGTERM during `tirl train rl` (issue 25, item 4): the run stops with one line that says how to
resume from the last checkpoint, exits 130, prints no asyncio noise and leaves no sandbox scratch folder in the
temporary directory. A real training process on the tiny smoke recipe, interrupted after its first checkpoint.
Behaviour only: no assertion on how long the stop takes (the suite runs on busy machines)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "rl" / "cpu-tiny-smoke.yaml"


@pytest.mark.slow(seconds=20)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_an_interrupted_run_says_how_to_resume_and_leaves_no_scratch(tmp_path, sig):
    out, scratch = tmp_path / "run", tmp_path / "tmp"
    scratch.mkdir()
    env = dict(os.environ, TMPDIR=str(scratch), PYTHONPATH=str(ROOT / "src"), OMP_NUM_THREADS="1")
    cmd = [
        sys.executable,
        "-m",
        "tirl.cli.main",
        "train",
        "rl",
        "--config",
        str(SMOKE),
        f"output_dir={out}",
        "max_steps=50",
        "save_steps=1",
        # the tiny random model never calls the tool: the watchdog would stop the run (exit 3) at step 3 if
        # the signal were not handled by then
        "watchdog.enabled=false",
        # the random model's turns run to the token limit: a quarter of the recipe's 128 reaches checkpoint-1 sooner
        "rollout.max_response_tokens=32",
    ]
    # SIGINT's default disposition, as in a terminal: pytest-xdist workers ignore SIGINT, and a child inherits the
    # ignored signal (Python then installs no KeyboardInterrupt handler, as for a background job of a shell)
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 900  # a generous bound for a loaded machine, not a measurement
        while not (out / "checkpoint-1" / "tirl_checkpoint.json").exists():
            assert proc.poll() is None, f"the run ended before its first checkpoint: {proc.stdout.read()[-3000:]}"
            assert time.monotonic() < deadline, "no checkpoint-1 in 900 s"
            time.sleep(0.5)
        proc.send_signal(sig)
        text, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, text[-3000:]
    # "interrupted:" (the message), not "interrupted": pytest's tmp path holds the test's name, and a signal that
    # lands during a checkpoint write adds a line naming that incomplete checkpoint under that path
    lines = [line for line in text.splitlines() if "interrupted:" in line]
    assert len(lines) == 1, text[-3000:]
    assert "re-run the same command to resume from" in lines[0] and "checkpoint-" in lines[0]
    assert "Task was destroyed but it is pending" not in text
    assert "Traceback" not in text
    assert not list(scratch.glob("tirl-sandbox-*")), sorted(p.name for p in scratch.iterdir())
