"""Quiet until something is wrong, and not silent while a step runs (issue 45, frictions 6 and 7).

Covers the rollout's progress lines (:mod:`tirl.train.progress`), the known-harmless third-party warnings
(:mod:`tirl.cli.quiet`), the step line's audit note (only the signs that matter), the log-prob mismatch
tolerance of the run's dtype, and the run folder's model card; one real run of the tiny smoke recipe checks them
together as a user sees them (a subprocess: warnings reach stderr there, not pytest's capture).
"""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from tirl.train.progress import RolloutProgress

ROOT = Path(__file__).resolve().parents[1]


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Calls:
    """A finished trajectory with ``n`` tool calls (what the progress reads of it)."""

    def __init__(self, n: int) -> None:
        self.tool_call_records = [object()] * n


def test_a_quick_rollout_prints_nothing():
    clock, lines = FakeClock(), []
    progress = RolloutProgress("run step 1/2 rollout", 8, write=lines.append, first_line_s=15, clock=clock)
    for _ in range(8):
        clock.now += 1.0
        progress.advance(Calls(1))
    progress.tick()
    assert lines == [] and progress.tool_calls == 8


def test_a_slow_rollout_prints_counts_tool_calls_and_an_eta():
    clock, lines = FakeClock(), []
    progress = RolloutProgress(
        "run step 3/60 rollout", 40, write=lines.append, first_line_s=15, every_s=30, clock=clock
    )
    clock.now = 16.0
    progress.tick()  # the heartbeat: nothing finished yet, but the user hears from the step
    assert lines == ["run step 3/60 rollout: 0/40 trajectories (0%), 0 tool calls, elapsed 0:16, ETA -"]
    for _ in range(4):
        clock.now += 1.0
        progress.advance(Calls(2))
    assert lines[-1] == "run step 3/60 rollout: 4/40 trajectories (10%), 8 tool calls, elapsed 0:20, ETA 3:00"
    progress.tick()
    assert len(lines) == 2  # within every_s of the last line
    clock.now += 30.0
    progress.tick()
    assert len(lines) == 3
    for _ in range(36):
        progress.advance(None)  # anything else counts without tool calls
    assert lines[-1].startswith("run step 3/60 rollout: 40/40 trajectories (100%), 8 tool calls")


def test_the_heartbeat_thread_stops_with_the_rollout():
    lines = []
    with RolloutProgress("r", 2, write=lines.append, first_line_s=0.0, every_s=0.0) as progress:
        progress.advance(Calls(0))
    assert progress._heartbeat is not None and not progress._heartbeat.is_alive()


def test_known_harmless_warnings_are_filtered_and_others_are_not(monkeypatch):
    from tirl.cli.quiet import KNOWN_HARMLESS, filter_known_warnings

    monkeypatch.delenv("TIRL_ALL_WARNINGS", raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_known_warnings()
        warnings.warn("`gradient_checkpointing` is deprecated and will be removed in v6.", FutureWarning, stacklevel=1)
        warnings.warn("'pin_memory' argument is set as true but no accelerator is found", UserWarning, stacklevel=1)
        warnings.warn(
            "`past_key_values` is deprecated and will be removed in version 5.40.0", FutureWarning, stacklevel=1
        )
        warnings.warn("something tirl does not know", FutureWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["something tirl does not know"]
    assert all(why for _, _, why in KNOWN_HARMLESS)  # each entry says why it is harmless
    monkeypatch.setenv("TIRL_ALL_WARNINGS", "1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_known_warnings()
        warnings.warn("`gradient_checkpointing` is deprecated", FutureWarning, stacklevel=1)
    assert len(caught) == 1


def test_the_step_line_reports_only_the_audit_signs_that_matter():
    from tirl.train.callbacks import audit_note

    ordinary = {"tirl/audit/answer_in_tool_output": 12.0, "tirl/audit/flagged": 12.0}
    assert audit_note(lambda key: ordinary.get(key, 0.0)) == ""  # before: "audit: 12 flagged"
    hacking = {**ordinary, "tirl/audit/hedged_answers": 2.0, "tirl/audit/probe_calls": 1.0}
    assert (
        audit_note(lambda key: hacking.get(key, 0.0)) == "  [yellow]audit: 2 hedged answers, 1 memory/socket probes[/]"
    )


def test_the_mismatch_tolerance_is_the_run_dtypes():
    import torch

    from tirl.train.trainer import mismatch_warning

    # the bf16 launched-server run of the shipped CPU recipe: bf16 rounding, not a fault (before: a warning)
    assert mismatch_warning(0.0107, 0.176, torch.bfloat16) is None
    assert mismatch_warning(0.0107, 0.176, "float32") is not None  # in float32 the same gap is a fault
    stale = mismatch_warning(0.2, 3.0, torch.bfloat16)  # a generator that missed an update: whole nats
    assert stale and "bf16/float16 tolerance" in stale and "weight sync" in stale


def test_the_run_folders_model_card_names_the_model():
    from tirl.train.trainer import model_card

    card = model_card("rl", "qwen2.5-coder-0.5b-tirl-sft", "runs/mine/rl")
    assert "[None]" not in card and "`qwen2.5-coder-0.5b-tirl-sft`" in card and "runs/mine/rl/final" in card


@pytest.mark.slow
def test_a_tiny_run_shows_rollout_progress_and_no_known_warning(tmp_path):
    # the first progress line after 0 s instead of 15, so the tiny model's short rollout shows it; 32 response
    # tokens instead of the recipe's 128 (the random model's turns run to the limit): the same path, less decoding
    script = (
        "import sys, tirl.train.progress as p; p.FIRST_LINE_S = 0.0\n"
        "from tirl.cli.main import main\n"
        f"sys.argv = ['tirl', 'train', 'rl', '--config', {str(ROOT / 'configs/rl/cpu-tiny-smoke.yaml')!r}, "
        f"'output_dir={tmp_path / 'run'}', 'max_steps=1', 'rollout.max_response_tokens=32']\n"
        "main()\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TIRL_ALL_WARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    err = result.stderr
    assert "cpu-tiny step 1/1 rollout: 8/8 trajectories (100%), 0 tool calls" in err
    assert "Warning:" not in err, err  # before: 3 FutureWarnings and a UserWarning (pin_memory) on this path
    card = (tmp_path / "run" / "README.md").read_text()
    assert "[None]" not in card and "tiny:smollm2-135m-instruct" in card
