"""An evaluation run's folder: its crash-safe, resumable writer and its readers.

Covers the output folder of ``tirl eval`` (names: :mod:`tirl.runs.layout`): ``trajectories.jsonl`` (one JSON
object per finished trajectory, appended, flushed and fsynced one at a time, so a crash loses at most the
trajectories in flight), ``run.json`` (the settings that must match for a resume), and ``summary.json`` (written
by the runner); and the readers of a finished run: :func:`read_samples`, :func:`read_summary` and
:func:`read_settings`. It does not compute metrics or run anything.

Resume policy:

- A record is identified by ``(benchmark, problem_id, sample_index)``; a re-run skips the keys present.
- A torn last line (the process died mid-write) is ignored and cut off the file before the next append, so the
  file stays valid JSONL. A malformed line elsewhere is also skipped and counted (``RunStore.skipped_lines``),
  never fatal.
- ``run.json`` holds the settings that change what a sample means (model, sampling, limits, tools). Opening an
  existing folder with different settings raises :class:`ResumeMismatch` instead of mixing two runs (one line:
  the keys that differ, a nested setting by its dotted key, long values cut). Settings that only select *which*
  samples exist (benchmarks, subset, samples per problem) may differ: a larger ``--samples`` or ``--subset``
  extends a run.
- A folder whose run stored no sample (it failed before its first one: a misspelled model, a dead server) holds
  nothing to mix: its ``run.json`` is replaced by the new settings, and :attr:`RunStore.replaced` says so, so
  that the corrected command runs in the same folder.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tirl.runs.layout import eval_settings, eval_summary, eval_trajectories
from tirl.runs.trajectories import read_jsonl

RecordKey = tuple[str, str, int]


class ResumeMismatch(ValueError):
    """The output folder holds a run with different settings; resuming would mix two runs."""


def record_key(record: dict[str, Any]) -> RecordKey:
    """The identity ``(benchmark, problem_id, sample_index)`` of a record.

    Raises:
        KeyError: when a field is missing.
    """
    return (str(record["benchmark"]), str(record["problem_id"]), int(record["sample_index"]))


def settings_diff(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> dict[str, tuple[Any, Any]]:
    """``{dotted key: (old value, new value)}`` of the settings that differ; a mapping on both sides
    (``protocol``, ``verifier``) is compared key by key, so one changed field is one entry."""
    out: dict[str, tuple[Any, Any]] = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if a == b:
            continue
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(settings_diff(a, b, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = (a, b)
    return out


def _short(value: Any, limit: int = 40) -> str:
    text = json.dumps(value, ensure_ascii=False) if value is not None else "unset"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_diff(diff: dict[str, tuple[Any, Any]], most: int = 4) -> str:
    """``key: old -> new`` of the first ``most`` differences (values cut at 40 characters), and how many more:
    what a one-line message can hold (a whole protocol section made a 1,424-character line)."""
    parts = [f"{k}: {_short(a)} -> {_short(b)}" for k, (a, b) in list(diff.items())[:most]]
    more = len(diff) - most
    return ", ".join(parts) + (f" and {more} more" if more > 0 else "")


class RunStore:
    """The output folder of one evaluation run, opened for resume.

    Args:
        out_dir: the folder (created when missing).
        settings: JSON-serialisable settings that must match an existing run (see the module docstring).

    Raises:
        ResumeMismatch: ``out_dir`` holds a ``run.json`` whose settings differ from ``settings``.
    """

    def __init__(self, out_dir: str | os.PathLike[str], settings: dict[str, Any]) -> None:
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = eval_trajectories(self.out_dir)
        self.skipped_lines = 0
        self.records: dict[RecordKey, dict[str, Any]] = {}
        good_end = self._load()  # read only: nothing of the folder changes before its settings are checked
        self.replaced: dict[str, tuple[Any, Any]] | None = None
        """The settings that differed from those of the folder's earlier run, which stored no sample and was
        replaced (``{dotted key: (old, new)}``); None when nothing was replaced."""
        self._check_settings(settings)
        self._cut_torn_line(good_end)
        self._fh = open(self.path, "a", encoding="utf-8")

    # -- settings -------------------------------------------------------------------------------------
    def _check_settings(self, settings: dict[str, Any]) -> None:
        run_path = eval_settings(self.out_dir)
        settings = json.loads(json.dumps(settings))  # normalise (tuples to lists, int keys to str)
        if run_path.exists():
            try:
                previous = json.loads(run_path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                previous = None
            if isinstance(previous, dict):
                diff = settings_diff(previous, settings)
                if not diff:
                    return
                if self.records:
                    raise ResumeMismatch(
                        f"{self.out_dir} holds {len(self.records)} samples of a run with other settings "
                        f"({describe_diff(diff)}): use another output folder, or the same settings to resume"
                    )
                self.replaced = diff  # nothing stored under the old settings: nothing to mix
        tmp = run_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, run_path)

    # -- records --------------------------------------------------------------------------------------
    def _load(self) -> int:
        """Read the stored records; returns the byte offset past the last complete line (the file's size when
        its last line is complete, 0 without a file)."""
        if not self.path.exists():
            return 0
        data = self.path.read_bytes()
        good_end = 0  # byte offset just past the last newline-terminated line
        pos = 0
        while pos < len(data):
            nl = data.find(b"\n", pos)
            if nl < 0:  # torn last line: no newline was written
                break
            line = data[pos:nl]
            pos = good_end = nl + 1
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                key = record_key(record)
            except (ValueError, KeyError, TypeError):
                self.skipped_lines += 1
                continue
            self.records[key] = record
        if good_end < len(data):
            self.skipped_lines += 1
        return good_end

    def _cut_torn_line(self, good_end: int) -> None:
        """Cut a torn last line (a crash mid-write) off the file, so the next append starts a line."""
        if self.path.exists() and self.path.stat().st_size > good_end:
            with open(self.path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())

    def __contains__(self, key: RecordKey) -> bool:
        return key in self.records

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(list(self.records.values()))

    def append(self, record: dict[str, Any]) -> None:
        """Write one finished record durably (one line, flush, fsync) and remember it.

        Raises:
            KeyError: the record lacks ``benchmark``, ``problem_id`` or ``sample_index``.
            ValueError: the record is already stored (a resume must not redo it).
        """
        key = record_key(record)
        if key in self.records:
            raise ValueError(f"record {key} is already stored")
        line = json.dumps(record, ensure_ascii=False)
        self._fh.write(line + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.records[key] = record

    def write_summary(self, summary: dict[str, Any]) -> Path:
        """Write ``summary.json`` atomically (temp file, then rename) and return its path."""
        path = eval_summary(self.out_dir)
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        os.replace(tmp, path)
        return path

    def close(self) -> None:
        """Close the file. Idempotent."""
        if not self._fh.closed:
            self._fh.close()

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_samples(run_dir: str | os.PathLike[str]) -> tuple[list[dict[str, Any]], int]:
    """The samples of an evaluation run (its ``trajectories.jsonl``, in file order; schema:
    :func:`tirl.eval.runner.trajectory_record`) and how many lines were not JSON objects (a torn last line
    included).

    Raises:
        FileNotFoundError: ``run_dir`` holds no ``trajectories.jsonl``.
    """
    path = eval_trajectories(run_dir)
    if not path.is_file():
        raise FileNotFoundError(f"no {path.name} in {run_dir} (not a tirl eval output)")
    return read_jsonl(path)


def read_summary(run_dir: str | os.PathLike[str], *, strict: bool = False) -> dict[str, Any] | None:
    """An evaluation run's ``summary.json`` (:meth:`RunStore.write_summary`), or None when it is missing (a run
    that has not finished), and, unless ``strict``, when it is unreadable or not a JSON object.

    Raises:
        ValueError: ``strict`` and the file is there but not a JSON object (its path named).
    """
    return _read_json_object(eval_summary(run_dir), strict=strict)


def read_settings(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """An evaluation run's ``run.json`` (the settings :class:`RunStore` recorded: model, sampling, limits,
    tools), or None when it is missing.

    Raises:
        ValueError: the file is there but not a JSON object (its path named).
    """
    return _read_json_object(eval_settings(run_dir), strict=True)


def _read_json_object(path: Path, *, strict: bool) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is missing, and, unless ``strict``, when it is unreadable
    or not a JSON object.

    Raises:
        ValueError: ``strict`` and the file is there but not a JSON object (its path named).
    """
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        if strict:
            raise ValueError(f"{path} is not valid JSON ({exc}); re-run the job that wrote it") from None
        return None
    if not isinstance(value, dict):
        if strict:
            raise ValueError(f"{path} holds no JSON object")
        return None
    return value


def sample_count(run_dir: str | os.PathLike[str]) -> int:
    """Lines in an evaluation run's ``trajectories.jsonl`` (0 without one): its stored samples, cheaply."""
    path = eval_trajectories(run_dir)
    return path.read_bytes().count(b"\n") if path.is_file() else 0
