"""The trainer callbacks of the SFT and RL stages: step timing, the JSONL metric log, console lines, the
watch-dog's stop.

Covers :class:`StepTimer` (both stages), :class:`JsonlMetrics` (both), :class:`RLConsole` and
:class:`WatchdogStop` (RL) and :class:`SFTProgress` (SFT; it also adds the step time to each log record, so it
goes before :class:`JsonlMetrics`). Imports transformers: the stages import this module when they build a
trainer.
"""

from __future__ import annotations

import math
import time
from typing import Any

from transformers import TrainerCallback

from tirl.runs.metrics import MetricsLog


def log_value(logs: dict[str, Any], key: str) -> float:
    """``logs[key]`` as a float for console lines; NaN when it is missing, not a number, or not finite."""
    value = logs.get(key)
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else float("nan")


class StepTimer(TrainerCallback):
    """Times each optimiser step into ``timing["step_s"]`` (read by the RL trainer's ``log``)."""

    def __init__(self, timing: dict[str, float]) -> None:
        self.timing = timing

    def on_step_begin(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        self.timing["t0"] = time.perf_counter()

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if "t0" in self.timing:
            self.timing["step_s"] = time.perf_counter() - self.timing["t0"]


class JsonlMetrics(TrainerCallback):
    """Appends every log record (numbers only) to ``metrics.jsonl`` with the step, the stage and the time
    (process zero only; nothing when ``metrics_log`` is None)."""

    def __init__(self, metrics_log: MetricsLog | None, stage: str) -> None:
        self.metrics_log = metrics_log
        self.stage = stage

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
        if self.metrics_log is None or not state.is_world_process_zero or not logs:
            return
        record = {"step": state.global_step, "stage": self.stage, "time": time.time()}
        record.update({k: v for k, v in logs.items() if isinstance(v, (int, float)) or v is None})
        self.metrics_log.write(record)


class RLConsole(TrainerCallback):
    """One console line per RL step: reward, kept reward, tool errors before/after RoC, lengths, times."""

    def __init__(self, stage: str, enabled: bool = True) -> None:
        self.stage = stage
        self.enabled = enabled

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
        if not self.enabled or not state.is_world_process_zero or not logs or "tirl/reward/mean" not in logs:
            return
        from rich.console import Console

        def g(key: str) -> float:
            return log_value(logs, key)

        Console(stderr=True, soft_wrap=True).print(  # one line per step, whatever the terminal width
            f"[bold]{self.stage}[/] step {state.global_step}/{state.max_steps}  "
            f"reward {g('tirl/reward/mean'):.3f}  kept {g('tirl/reward/kept_mean'):.3f}  "
            f"tool-err(correct) {g('tirl/tool_error_in_correct/before'):.3f}->"
            f"{g('tirl/tool_error_in_correct/after'):.3f}  len {g('tirl/length/mean'):.0f} "
            f"(p90 {g('tirl/length/p90'):.0f})  trunc {g('tirl/truncation_rate'):.2f}  "
            f"calls/traj {g('tirl/tool_calls/per_traj'):.2f}  step {g('tirl/time/step_s'):.1f}s "
            f"(rollout {g('tirl/time/rollout_s'):.1f}s)" + audit_note(g)
        )


AUDIT_SIGNS = {
    "tirl/audit/tool_output_tags": "tool outputs with protocol tags",
    "tirl/audit/hedged_answers": "hedged answers",
    "tirl/audit/probe_calls": "memory/socket probes",
}
"""The audit counts that the step's console line reports (:mod:`tirl.protocol.audit`): signs that the policy
forges structure, hedges or probes. ``answer_in_tool_output`` is left out of the line (and so is ``flagged``,
which counts it): a final answer the tool printed first is ordinary tool use, which every step of a tool-using
policy has; it stays in metrics.jsonl and the viewer."""


def audit_note(value: Any) -> str:
    """The console line's audit note, ``  audit: 2 hedged answers, 1 memory/socket probes`` (yellow), or ``""``
    when none of :data:`AUDIT_SIGNS` is above 0; ``value(key)`` reads one logged value."""
    parts = [f"{value(key):.0f} {what}" for key, what in AUDIT_SIGNS.items() if value(key) > 0]
    return f"  [yellow]audit: {', '.join(parts)}[/]" if parts else ""


class WatchdogStop(TrainerCallback):
    """Stops training (after saving a checkpoint) when the rollout's watch-dog asks for it; with several
    processes the flag is reduced with max so that every process stops at the same step.

    Args:
        rollout: the run's :class:`tirl.train.rollout_func.RocRolloutFunc` (its ``watchdog``).
    """

    def __init__(self, rollout: Any) -> None:
        self.rollout = rollout

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        watchdog = self.rollout.watchdog
        flag = 1.0 if watchdog.stop_reason else 0.0
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            import torch

            t = torch.tensor([flag])
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
            flag = float(t.item())
            if flag and not watchdog.stop_reason:
                watchdog.stop_reason = f"stopped at step {state.global_step}: another process's watchdog"
        if flag:
            control.should_training_stop = True
            control.should_save = True


class SFTProgress(StepTimer):
    """Times optimiser steps, adds ``tirl/time/step_s`` to each log record (before the JSONL writer sees it)
    and prints a progress line (loss, token accuracy, learning rate, gradient norm, time left, and the trained
    token rows' cosine and norm when the record has them: :func:`rows_note`)."""

    def __init__(self, stage: str, console: bool = True) -> None:
        super().__init__({})
        self.stage = stage
        self.console = console
        self.step_times: list[float] = []

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        super().on_step_end(args, state, control, **kw)
        if "step_s" in self.timing:
            self.step_times.append(self.timing["step_s"])

    def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kw: Any) -> None:
        if not logs or "loss" not in logs:
            return
        if "step_s" in self.timing:
            logs["tirl/time/step_s"] = self.timing["step_s"]
        if not self.console or not state.is_world_process_zero:
            return
        from rich.console import Console

        recent = self.step_times[-10:]
        mean = sum(recent) / len(recent) if recent else float("nan")
        left = (state.max_steps - state.global_step) * mean

        def g(key: str) -> float:
            return log_value(logs, key)

        Console(stderr=True).print(
            f"[bold]{self.stage}[/] step {state.global_step}/{state.max_steps}  loss {g('loss'):.4f}  "
            f"token-acc {g('mean_token_accuracy'):.3f}  lr {g('learning_rate'):.2e}  "
            f"grad-norm {g('grad_norm'):.3f}  step {mean:.1f}s  left {left / 60:.1f} min" + rows_note(logs)
        )


def rows_note(logs: dict[str, Any]) -> str:
    """The SFT progress line's note on the trained token rows (``model.train_token_rows``),
    ``  rows cos 0.804 norm 0.260`` (largest pairwise cosine, mean norm), or ``""`` when the record has none."""
    if "token_rows/mean_norm" not in logs:
        return ""
    cosine, norm = log_value(logs, "token_rows/max_cosine"), log_value(logs, "token_rows/mean_norm")
    return f"  rows cos {cosine:.3f} norm {norm:.3f}"


__all__ = ["JsonlMetrics", "RLConsole", "SFTProgress", "StepTimer", "WatchdogStop"]
