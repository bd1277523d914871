"""Carry the real-math experiment's evaluation stores across machines (issue 43).

``runs/`` is not in git and a fresh machine has none, while the experiment's evaluations take many sessions.
``save`` copies each ``runs/real-math/JOB/`` store (``run.json``, ``summary.json``, the appended
``trajectories.jsonl``, gzipped) into ``experiments/real-math/results/JOB/``; ``restore`` puts them back where the
archive holds more samples than the machine, so that re-running the job's ``tirl eval`` command resumes where the
last session stopped (the store skips the samples it has; ``tirl.eval.store``).

    python experiments/real-math/archive.py restore   # at the start of a session
    python experiments/real-math/archive.py save      # before it ends (then commit experiments/real-math/results)
"""

from __future__ import annotations

import argparse
import gzip
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
RUNS = ROOT / "runs" / "real-math"
RESULTS = HERE / "results"
COPIED = ("run.json", "summary.json")
STORE = "trajectories.jsonl"
# files that are not evaluation stores but took generation to make (build_tool_sft.py's plans: the programs the
# model wrote); saved gzipped beside the stores, restored where the machine has fewer lines
FILES = ("tool-sft/plans.jsonl",)


def _lines(path: Path) -> int:
    if not path.exists():
        return 0
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return sum(1 for line in f if line.strip())


def save() -> None:
    for job in sorted(p for p in RUNS.glob("*") if (p / STORE).exists()):
        dest = RESULTS / job.name
        dest.mkdir(parents=True, exist_ok=True)
        for name in COPIED:
            if (job / name).exists():
                shutil.copyfile(job / name, dest / name)
        with (
            open(job / STORE, "rb") as src,
            gzip.GzipFile(dest / (STORE + ".gz"), "wb", compresslevel=9, mtime=0) as gz,
        ):
            shutil.copyfileobj(src, gz)
        print(f"saved {job.name}: {_lines(job / STORE)} samples")
    for name in FILES:
        if (RUNS / name).exists():
            (RESULTS / name).parent.mkdir(parents=True, exist_ok=True)
            with open(RUNS / name, "rb") as src, gzip.GzipFile(RESULTS / f"{name}.gz", "wb", mtime=0) as gz:
                shutil.copyfileobj(src, gz)
            print(f"saved {name}: {_lines(RUNS / name)} lines")


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
