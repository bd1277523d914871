"""A training run's trajectory logs (``RUN/trajectories/step_NNNNN_rankR.jsonl``), written and read, and the
JSONL reading every run file shares.

The writer (:func:`write_step_log`) is the rollout function's (``logging.log_trajectories``); one line per
sampled trajectory with at least ``step``, ``rank``, ``group`` and ``sample`` (the schema:
:meth:`tirl.train.rollout_func.RocRolloutFunc._log_trajectories`). The readers give a step's records
(:func:`read_step_log`), every record of a run in order (:func:`training_records`) and the sampled groups
(:func:`step_groups`). Lines that are not JSON objects are skipped and counted, never fatal.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.runs.layout import TRAJECTORY_DIR, step_files, trajectory_file

GroupKey = tuple[int, int, int]
"""``(step, rank, group)``: one sampled group of a training run."""


def read_jsonl(path: str | Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON objects of a JSONL file in file order (a ``.gz`` file read unpacked), and how many non-empty lines
    were not JSON objects.

    Raises:
        OSError: the file cannot be read (or a ``.gz`` file is not gzip).
    """
    rows: list[dict[str, Any]] = []
    skipped = 0
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(obj, dict):
                rows.append(obj)
            else:
                skipped += 1
    return rows, skipped


def write_step_log(run_dir: str | Path, step: int, rank: int, records: Iterable[dict[str, Any]]) -> Path:
    """Write ``records`` (JSON-serialisable, one per sampled trajectory) as the log of ``step`` on ``rank``,
    replacing an older one (a resumed run samples the step again); returns the file's path."""
    path = trajectory_file(run_dir, step, rank)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as fh:
        for record in records:
            fh.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


def read_step_log(path: str | Path) -> list[dict[str, Any]]:
    """The records of one trajectory log, in file order (bad lines skipped).

    Raises:
        OSError: the file cannot be read.
    """
    return read_jsonl(path)[0]


def trajectory_folder(run_dir: str | Path) -> Path | None:
    """The folder holding a run's trajectory logs: ``RUN/trajectories``, or ``run_dir`` itself when it is such a
    folder (it holds ``step_*_rank*.jsonl``); None when neither holds a log."""
    root = Path(run_dir)
    for folder in (root / TRAJECTORY_DIR, root):
        if step_files(folder):
            return folder
    return None


@dataclass
class TrainingRecords:
    """Every logged trajectory of a training run.

    Attributes:
        root: the run folder (the one holding ``trajectories/``).
        records: the records by step, then rank, then line; each has ``step``, ``rank`` (from the file name
            when a record lacks them) and ``_line`` (its line in its file).
        skipped_lines: lines that were not JSON objects.
    """

    root: Path
    records: list[dict[str, Any]] = field(default_factory=list)
    skipped_lines: int = 0


def training_records(run_dir: str | Path) -> TrainingRecords | None:
    """The logged trajectories of the training run at ``run_dir`` (or of its ``trajectories`` folder); None when
    there is no log (see :func:`trajectory_folder`)."""
    folder = trajectory_folder(run_dir)
    if folder is None:
        return None
    out = TrainingRecords(folder.parent if folder.name == TRAJECTORY_DIR else folder)
    for step, rank, path in step_files(folder):
        rows, skipped = read_jsonl(path)
        out.skipped_lines += skipped
        for i, row in enumerate(rows):
            row.setdefault("step", step)
            row.setdefault("rank", rank)
            row.setdefault("_line", i)
        out.records.extend(rows)
    return out


def step_groups(run_dir: str | Path, step: int | None = None) -> dict[GroupKey, list[dict[str, Any]]]:
    """The sampled groups of a training run (of one ``step``, or all), ``{(step, rank, group): records}`` in key
    order, each group's records by ``sample``; empty without logs. A record without ``group`` is left out."""
    found = training_records(run_dir)
    groups: dict[GroupKey, list[dict[str, Any]]] = {}
    for row in found.records if found is not None else []:
        if (step is not None and int(row["step"]) != step) or row.get("group") is None:
            continue
        groups.setdefault((int(row["step"]), int(row["rank"]), int(row["group"])), []).append(row)
    return {k: sorted(groups[k], key=lambda r: int(r.get("sample", 0))) for k in sorted(groups)}


__all__ = [
    "GroupKey",
    "TrainingRecords",
    "read_jsonl",
    "read_step_log",
    "step_groups",
    "trajectory_folder",
    "training_records",
    "write_step_log",
]
