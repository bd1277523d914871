"""The run folder's format: what ``tirl train rl``/``sft`` and ``tirl eval`` write, and how it is read back.

One low package (it imports nothing of tirl's), so that training, evaluation, the viewer and the analyses all
write and read a run the same way:

- :mod:`tirl.runs.layout`: the file names (the only place they are spelled; ``tests/test_runs_layout.py``
  fails on a run file's name written elsewhere in ``src/tirl``) and the paths built from them;
- :mod:`tirl.runs.metrics`: the metrics log (``metrics.jsonl``): append, cut back on resume, read (``.gz``
  archives included);
- :mod:`tirl.runs.checkpoints`: the checkpoints' completeness marker, the newest complete ``checkpoint-N``,
  ``final`` and its marker;
- :mod:`tirl.runs.trajectories`: a training run's trajectory logs (``trajectories/step_NNNNN_rankR.jsonl``),
  written and read, and a step's sampled groups;
- :mod:`tirl.runs.evals`: an evaluation's folder (``trajectories.jsonl``, ``run.json``, ``summary.json``): the
  crash-safe, resumable writer and the readers of its samples and summary;
- :mod:`tirl.runs.machine`: the machine record an experiment's runner writes beside a job (``machine.json``: CPU,
  native bf16, load average, package versions).
"""

from __future__ import annotations

from tirl.runs.checkpoints import last_checkpoint, write_checkpoint_marker
from tirl.runs.evals import ResumeMismatch, RunStore, read_samples, read_summary
from tirl.runs.layout import checkpoint_dir, checkpoint_step, config_file, final_dir, metrics_path, trajectory_file
from tirl.runs.machine import machine_record
from tirl.runs.metrics import MetricsLog, read_metrics
from tirl.runs.trajectories import read_step_log, step_groups, training_records, write_step_log

__all__ = [
    "MetricsLog",
    "ResumeMismatch",
    "RunStore",
    "checkpoint_dir",
    "checkpoint_step",
    "config_file",
    "final_dir",
    "last_checkpoint",
    "machine_record",
    "metrics_path",
    "read_metrics",
    "read_samples",
    "read_step_log",
    "read_summary",
    "step_groups",
    "trajectory_file",
    "training_records",
    "write_checkpoint_marker",
    "write_step_log",
]
