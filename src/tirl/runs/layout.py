"""The names of a run folder's files: the one place they are spelled.

A **training run** (``tirl train rl`` / ``tirl train sft``, the recipe's ``output_dir``)::

    RUN/config.yaml                              the resolved recipe (CONFIG_FILE)
    RUN/metrics.jsonl                            one JSON object per logged step (METRICS_FILE);
                                                 an archived run keeps metrics.jsonl.gz (METRICS_ARCHIVE)
    RUN/checkpoint-N/                            every save_steps steps (CHECKPOINT_PREFIX + N), complete when
        tirl_checkpoint.json                     its marker (CHECKPOINT_MARKER) lists every file with its size
    RUN/incomplete-checkpoint-N/                 a half-written checkpoint set aside on resume
    RUN/final/                                   the trained model (FINAL_DIR)
    RUN/trajectories/step_NNNNN_rankR.jsonl      every sampled trajectory of step N on rank R
                                                 (TRAJECTORY_DIR, :func:`trajectory_file`)
    RUN/replay_step_N.json                       ``tirl train replay``'s report

An **evaluation run** (``tirl eval``, ``tirl demo``)::

    RUN/trajectories.jsonl                       one JSON object per finished sample (EVAL_TRAJECTORIES)
    RUN/run.json                                 the settings a resume must match (EVAL_SETTINGS)
    RUN/summary.json                             the metrics (EVAL_SUMMARY)

Both may hold ``RUN/entropy/<label>.jsonl`` (``tirl analyze entropy``, ENTROPY_DIR) and ``RUN/vllm_server.log``
(the log of a vLLM server the run started for itself, ``launch_server``; SERVER_LOG), and a job of an experiment's
runner ``RUN/machine.json`` (the machine it ran on and its starts; MACHINE_FILE). Only names and paths live
here (no I/O beyond ``is_file``/``glob``); the writers and readers are the package's other modules.
"""

from __future__ import annotations

import re
from pathlib import Path

CONFIG_FILE = "config.yaml"
METRICS_FILE = "metrics.jsonl"
METRICS_ARCHIVE = METRICS_FILE + ".gz"
CHECKPOINT_PREFIX = "checkpoint-"
INCOMPLETE_PREFIX = "incomplete-"
CHECKPOINT_MARKER = "tirl_checkpoint.json"
"""Written last into a ``checkpoint-N`` folder by tirl's trainers: the step and the size of every file."""
TRAINER_STATE = "trainer_state.json"
"""What transformers writes into a checkpoint after the weights, optimiser and RNG states."""
FINAL_DIR = "final"
FINAL_MARKER = "tirl_final.json"
"""Written last into ``RUN/final`` by ``tirl train rl``: the step whose weights the folder holds."""
PARTIAL_SUFFIX = ".partial"
TRAJECTORY_DIR = "trajectories"
EVAL_TRAJECTORIES = "trajectories.jsonl"
EVAL_SETTINGS = "run.json"
EVAL_SUMMARY = "summary.json"
ENTROPY_DIR = "entropy"
SERVER_LOG = "vllm_server.log"
MACHINE_FILE = "machine.json"
"""An experiment's job folder: the machine the job ran on (:func:`tirl.runs.machine.machine_record`) and each of
its starts (``attempts``), written by the experiment's runner."""

_STEP_FILE = re.compile(r"step_(\d+)_rank(\d+)\.jsonl(\.gz)?$")
"""A trajectory log's name; ``.gz``: as an experiment's archive keeps it."""

PathLike = str | Path


def config_file(run_dir: PathLike) -> Path:
    """``RUN/config.yaml``: the recipe a training run saved."""
    return Path(run_dir) / CONFIG_FILE


def metrics_path(run_dir: PathLike) -> Path:
    """``RUN/metrics.jsonl``: where a training run appends its metrics (readers take
    :func:`tirl.runs.metrics.metrics_file`, which also finds an archive's ``.gz``)."""
    return Path(run_dir) / METRICS_FILE


def checkpoint_dir(run_dir: PathLike, step: int) -> Path:
    """``RUN/checkpoint-N`` for ``step`` = N (transformers' naming)."""
    return Path(run_dir) / f"{CHECKPOINT_PREFIX}{int(step)}"


def final_dir(run_dir: PathLike) -> Path:
    """``RUN/final``: the trained model of a finished run."""
    return Path(run_dir) / FINAL_DIR


def partial_final_dir(run_dir: PathLike) -> Path:
    """``RUN/final.partial``: where ``final`` is written before it is renamed into place."""
    return Path(run_dir) / (FINAL_DIR + PARTIAL_SUFFIX)


def checkpoint_step(path: PathLike) -> int:
    """The N of a ``checkpoint-N`` folder (or a ``.../checkpoint-N`` model reference); 0 for anything else
    (a run's starting model, ``final``, ``incomplete-checkpoint-N``)."""
    name = Path(str(path).rstrip("/")).name
    head, sep, tail = name.rpartition(CHECKPOINT_PREFIX)
    return int(tail) if sep and not head and tail.isdigit() else 0


def is_model_folder_name(name: str) -> bool:
    """Whether ``name`` is the folder name of a run's model: ``final`` or ``checkpoint-N``."""
    return name == FINAL_DIR or re.fullmatch(re.escape(CHECKPOINT_PREFIX) + r"\d+", name) is not None


def trajectory_dir(run_dir: PathLike) -> Path:
    """``RUN/trajectories``: a training run's trajectory logs."""
    return Path(run_dir) / TRAJECTORY_DIR


def trajectory_file(run_dir: PathLike, step: int, rank: int = 0) -> Path:
    """``RUN/trajectories/step_NNNNN_rankR.jsonl``: the trajectories of ``step`` sampled on ``rank``."""
    return trajectory_dir(run_dir) / f"step_{int(step):05d}_rank{int(rank)}.jsonl"


def step_files(folder: PathLike) -> list[tuple[int, int, Path]]:
    """``(step, rank, path)`` of every trajectory log in ``folder`` (a ``trajectories/`` folder), by step, then
    rank; empty for a missing folder. A log archived as ``.jsonl.gz`` counts too; where a step and rank have both,
    the plain file is taken (a restored archive beside a live run)."""
    root = Path(folder)
    if not root.is_dir():
        return []
    found: dict[tuple[int, int], Path] = {}
    for p in sorted(root.iterdir(), key=lambda p: p.name.endswith(".gz")):  # plain files first
        if m := _STEP_FILE.search(p.name):
            found.setdefault((int(m.group(1)), int(m.group(2))), p)
    return [(step, rank, found[(step, rank)]) for step, rank in sorted(found)]


def eval_trajectories(run_dir: PathLike) -> Path:
    """``RUN/trajectories.jsonl``: an evaluation's samples."""
    return Path(run_dir) / EVAL_TRAJECTORIES


def eval_summary(run_dir: PathLike) -> Path:
    """``RUN/summary.json``: an evaluation's metrics."""
    return Path(run_dir) / EVAL_SUMMARY


def eval_settings(run_dir: PathLike) -> Path:
    """``RUN/run.json``: the settings an evaluation's resume must match."""
    return Path(run_dir) / EVAL_SETTINGS


def server_log(run_dir: PathLike) -> Path:
    """``RUN/vllm_server.log``: the log of the vLLM server a training run or an evaluation started for itself."""
    return Path(run_dir) / SERVER_LOG


def replay_report(run_dir: PathLike, step: int) -> Path:
    """``RUN/replay_step_N.json``: the report of ``tirl train replay --step N``."""
    return Path(run_dir) / f"replay_step_{int(step)}.json"


def is_eval_run(run_dir: PathLike) -> bool:
    """Whether ``run_dir`` holds an evaluation's samples (``trajectories.jsonl``)."""
    return eval_trajectories(run_dir).is_file()


def has_metrics(run_dir: PathLike) -> bool:
    """Whether ``run_dir`` holds a metrics log (``metrics.jsonl`` or its archive ``metrics.jsonl.gz``)."""
    root = Path(run_dir)
    return (root / METRICS_FILE).is_file() or (root / METRICS_ARCHIVE).is_file()
