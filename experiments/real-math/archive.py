"""Carry the real-math experiment's evaluation stores across machines (issue 43).

``runs/`` is not in git and a fresh machine has none, while the experiment's evaluations take many sessions.
``save`` copies each ``runs/real-math/JOB/`` store (``run.json``, ``summary.json``, the appended
``trajectories.jsonl``, gzipped) into ``experiments/real-math/results/JOB/``; ``restore`` puts them back where the
archive holds more samples than the machine, so that re-running the job's ``tirl eval`` command resumes where the
last session stopped (the store skips the samples it has; ``tirl.eval.store``).

``save`` also keeps each training run's metrics log (``runs/real-math/RUN/metrics.jsonl``, gzipped, and its
``config.yaml``: the RL runs' per-step metrics, the SFT run's per-step loss) in ``results/RUN/``, which
``report.py`` reads by default. ``restore`` leaves them in the archive: a training run resumes from its
checkpoints, which only the machine that trained it has, and its log is appended there.

    python experiments/real-math/archive.py restore   # at the start of a session
    python experiments/real-math/archive.py save      # before it ends (then commit experiments/real-math/results)
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

from tirl.runs.layout import (
    CONFIG_FILE,
    EVAL_SETTINGS,
    EVAL_SUMMARY,
    EVAL_TRAJECTORIES,
    METRICS_ARCHIVE,
    METRICS_FILE,
)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNS = ROOT / "runs" / "real-math"
RESULTS = HERE / "results"
COPIED = (EVAL_SETTINGS, EVAL_SUMMARY)
STORE = EVAL_TRAJECTORIES
# files that are not evaluation stores but took generation to make (build_tool_sft.py's plans: the programs the
# model wrote; pot_probe.py's samples on the SFT problems); saved gzipped beside the stores, restored where the
# machine has fewer lines
FILES = ("tool-sft/plans.jsonl", "pot-sample/responses.jsonl")


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def _gzip(src: Path, dest: Path) -> None:
    """``src`` gzipped into ``dest`` (no time stamp in the header: an unchanged file gives identical bytes)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fh, gzip.GzipFile(dest, "wb", compresslevel=9, mtime=0) as gz:
        shutil.copyfileobj(fh, gz)


def save_training_logs(runs: Path = RUNS, results: Path = RESULTS) -> list[str]:
    """Copy every training run's metrics log under ``runs`` (``RUN/metrics.jsonl``) into ``results/RUN/`` as
    ``metrics.jsonl.gz``, with the run's ``config.yaml`` (the recipe: ``report.py`` reads the samples per step
    and the starting model from it); returns the names of the runs saved. An evaluation store's folder has no
    metrics log and is left to :func:`save`'s loop."""
    saved = []
    for run in sorted(p for p in runs.glob("*") if (p / METRICS_FILE).is_file()):
        _gzip(run / METRICS_FILE, results / run.name / METRICS_ARCHIVE)
        if (run / CONFIG_FILE).is_file():
            shutil.copyfile(run / CONFIG_FILE, results / run.name / CONFIG_FILE)
        print(f"saved {run.name}: {_lines(run / METRICS_FILE)} metrics records")
        saved.append(run.name)
    return saved


def save(runs: Path = RUNS, results: Path = RESULTS) -> None:
    """Copy the evaluation stores, :data:`FILES` and the training runs' metrics logs
    (:func:`save_training_logs`) under ``runs`` into ``results`` (module docstring)."""
    for job in sorted(p for p in runs.glob("*") if (p / STORE).exists()):
        dest = results / job.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            if (job / name).exists():
                shutil.copyfile(job / name, dest / name)
        _gzip(job / STORE, dest / (STORE + ".gz"))
        print(f"saved {job.name}: {_lines(job / STORE)} samples")
    for name in FILES:
        if (runs / name).exists():
            (results / name).parent.mkdir(parents=True, exist_ok=True)
            with open(runs / name, "rb") as src, gzip.GzipFile(results / f"{name}.gz", "wb", mtime=0) as gz:
                shutil.copyfileobj(src, gz)
            print(f"saved {name}: {_lines(runs / name)} lines")
    save_training_logs(runs, results)


def restore() -> None:
    for archived in sorted(p for p in RESULTS.glob("*") if (p / (STORE + ".gz")).exists()):
        job = RUNS / archived.name
        have, kept = _lines(job / STORE), _lines(archived / (STORE + ".gz"))
        if have >= kept:
            print(f"{archived.name}: this machine has {have} samples (archive {kept}): kept")
            continue
        job.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            if (archived / name).exists():
                shutil.copyfile(archived / name, job / name)
        with gzip.open(archived / (STORE + ".gz"), "rb") as gz, open(job / STORE, "wb") as out:
            shutil.copyfileobj(gz, out)
        print(f"restored {archived.name}: {kept} samples")
    for name in FILES:
        archived = RESULTS / f"{name}.gz"
        if archived.exists() and _lines(RUNS / name) < _lines(archived):
            (RUNS / name).parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(archived, "rb") as gz, open(RUNS / name, "wb") as out:
                shutil.copyfileobj(gz, out)
            print(f"restored {name}: {_lines(RUNS / name)} lines")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("save", "restore"))
    args = parser.parse_args(argv)
    save() if args.action == "save" else restore()
    return 0


if __name__ == "__main__":
    sys.exit(main())
