"""A training run's metrics log: ``RUN/metrics.jsonl`` (or an archive's ``metrics.jsonl.gz``), written and read.

The writer (:class:`MetricsLog`) appends one JSON object per logged step and cuts back the steps a crashed run
wrote past its resume point; the one reader (:func:`read_metrics`) reads a file or a run folder, ``.gz``
included, skipping bad lines. What the records mean is :mod:`tirl.algo.metrics`'s business.
"""

from __future__ import annotations

import gzip
import json
import math
import os
from pathlib import Path
from typing import Any

from tirl.runs.layout import METRICS_ARCHIVE, METRICS_FILE


class MetricsLog:
    """Append-only ``metrics.jsonl``: one JSON object per logged step.

    A resumed run appends; records of steps at or after the resume point that a crashed run had written are
    dropped on :meth:`truncate_after` so the file never holds a step twice.

    Args:
        path: the file (its folder is created); :func:`tirl.runs.layout.metrics_path` names a run's.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        """Append one record (non-finite floats become null)."""
        clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}
        with open(self.path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(clean) + "\n")

    def truncate_after(self, step: int) -> int:
        """Drop records whose ``step`` is greater than ``step`` (and any line a killed run left half-written, so
        that the next append starts on a fresh line); returns how many records were dropped. The file is
        rewritten to a temporary name and renamed, so a kill here loses nothing."""
        if not self.path.exists():
            return 0
        lines = self.path.read_text(encoding="utf-8").split("\n")
        kept, dropped, broken = [], 0, 0
        for line in lines:
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                broken += 1
                continue
            if isinstance(rec, dict) and isinstance(rec.get("step"), (int, float)) and rec["step"] > step:
                dropped += 1
            else:
                kept.append(line)
        if dropped or broken or (lines and lines[-1] != ""):
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(line + "\n" for line in kept), encoding="utf-8")
            os.replace(tmp, self.path)
        return dropped


def metrics_file(path: str | Path) -> Path:
    """The metrics file of ``path``: a file is itself; a folder's is ``metrics.jsonl``, else its
    ``metrics.jsonl.gz`` (a run as an experiment's archive keeps it, experiments/roc-ablation/results/...).

    Raises:
        FileNotFoundError: the file, or a folder's both files, do not exist.
    """
    path = Path(path)
    if path.is_dir():
        found = next((path / n for n in (METRICS_FILE, METRICS_ARCHIVE) if (path / n).is_file()), None)
        if found is None:
            raise FileNotFoundError(f"no {METRICS_FILE} (or {METRICS_ARCHIVE}) in {path}")
        return found
    if not path.is_file():
        raise FileNotFoundError(f"no metrics file at {path}")
    return path


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Records of a metrics log, in file order (a folder is read through :func:`metrics_file`; a ``.gz`` file is
    read unpacked); lines that are not JSON objects are skipped.

    Raises:
        FileNotFoundError: no metrics file (see :func:`metrics_file`).
    """
    path = metrics_file(path)
    data = path.read_bytes()
    text = (gzip.decompress(data) if path.name.endswith(".gz") else data).decode("utf-8")
    out = []
    for line in text.split("\n"):
        if line.strip():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


__all__ = ["MetricsLog", "metrics_file", "read_metrics"]
