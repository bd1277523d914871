"""The unattended, resumable runner of the RoC ablation: arms x seeds trained one after another, checkpoints
evaluated, the comparison drawn and the report written (``python experiments/roc-ablation/run.py``).

It works from a checkout (the recipes are beside it in ``recipes/``, the held-out evaluation is
``configs/eval/toolfix-heldout.yaml``) on the installed ``tirl``: it runs the ``tirl`` command beside the Python
that runs it, and imports only the run folder's names (:mod:`tirl.runs.layout`) and the arms' labels.

Made for the RoC ablation of issue 26 (README.md beside this file): three arms (plain GRPO sampling and keeping G;
GRPO-RoC sampling 2G and keeping G; plain GRPO sampling and keeping 2G, :data:`ARMS`) x three seeds on the toolfix
task, each run evaluated on the held-out split at a few steps. What it does, in order (seed-major, so that a stopped
ablation has every arm at the same number of seeds):

1. the starting model's held-out evaluation (``OUT/eval-start``), once;
2. for each seed, for each arm: ``tirl train rl --config ARM.yaml seed=S output_dir=OUT/ARM-sS`` (a re-run
   resumes from the newest checkpoint, which ``tirl train rl`` does by itself), then ``tirl eval`` of each
   ``checkpoint-N`` in ``--eval-steps`` (``OUT/eval-ARM-sS-N``; eval resumes by itself too);
3. ``tirl plot --compare`` of all runs, the seeds of an arm under one label (mean and band), with their
   held-out evaluations (``OUT/plots``);
4. when every job is done, ``tirl analyze ablation OUT`` (``OUT/ablation_report.json`` and the table as
   markdown, ``OUT/report.md``).

Resumable: every finished job leaves ``OUT/done/JOB``; a re-run of the same command skips those and continues where it
stopped (the plot and the report, seconds of work, are made again by every invocation that gets to them). Across
machines (``OUT`` lives in ``runs/``, which a fresh machine does not have): with ``--archive DIR``, a folder kept in
git, each finished run and its evaluations leave their small results there (:func:`archive_ready`: metrics, recipe,
logged groups, summaries; no checkpoints), and the next invocation on any machine restores them first
(:func:`restore`) and runs only what is missing.

Unattended: a job that the kernel's out-of-memory killer ends (exit status 137, or -9 from a signal) is
restarted, up to ``--retries`` times; any other failure (3 = the training watchdog's stop, 2 = a configuration
error) is logged, its dependants are skipped, and the runner goes on with the next job and exits 1
at the end. Each job's output goes to ``OUT/logs/JOB.log``; ``OUT/runner.log`` has one line per event.

The training runs take the arms' recipes' generation path: ``rollout.launch_server: auto`` starts a vLLM server per
run when the runner's ``tirl`` is the vLLM environment's (``.venv-vllm/bin/python experiments/roc-ablation/run.py``),
in process otherwise; ``--set rollout.server_url=...`` uses a server of yours instead. Evaluation runs in process
unless ``--eval-arg=--engine --eval-arg=openai ...`` names a server. It never starts by itself.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from tirl.analysis.ablation import ARM_LABELS
from tirl.runs.layout import (
    CONFIG_FILE,
    EVAL_SETTINGS,
    EVAL_SUMMARY,
    MACHINE_FILE,
    METRICS_FILE,
    TRAJECTORY_DIR,
    checkpoint_dir,
)
from tirl.runs.machine import machine_record

HERE = Path(__file__).resolve().parent
"""This experiment's folder (``experiments/roc-ablation``)."""
REPO = HERE.parents[1]
"""The checkout it lives in."""

ARMS: dict[str, str] = {
    "grpo": str(HERE / "recipes" / "cpu-toolfix-grpo.yaml"),
    "roc": str(HERE / "recipes" / "cpu-toolfix-roc.yaml"),
    "grpo2g": str(HERE / "recipes" / "cpu-toolfix-grpo2g.yaml"),
}
"""Arm -> recipe: plain GRPO G of G, GRPO-RoC G of 2G, plain GRPO 2G of 2G."""

EVAL_CONFIG = str(REPO / "configs" / "eval" / "toolfix-heldout.yaml")
"""The held-out evaluation of every evaluated checkpoint."""

ARCHIVE = HERE / "results"
"""The archive of this ablation's finished jobs, kept in git."""

LABELS = ARM_LABELS
"""Arm -> the label of its seeds in the plots and the report (the report's, so both say the same)."""

KILLED = (137, -9)
"""Exit statuses of a process the kernel killed (out of memory): restarted."""


@dataclass
class Job:
    """One command of the plan.

    Attributes:
        name: unique, used for the marker ``OUT/done/NAME`` and the log ``OUT/logs/NAME.log``.
        argv: the command.
        needs: names of jobs that must have finished first (skipped otherwise).
        output: the folder the job writes (a run, an evaluation, the plots); what :func:`archive_ready` keeps of it.
    """

    name: str
    argv: list[str]
    needs: list[str] = field(default_factory=list)
    output: Path | None = None


def plan(
    out: Path,
    *,
    arms: Sequence[str],
    seeds: Sequence[int],
    eval_steps: Sequence[int],
    eval_config: str,
    start_model: str,
    tirl: Sequence[str],
    overrides: Sequence[str] = (),
    eval_args: Sequence[str] = (),
) -> list[Job]:
    """The jobs of the ablation, in the order they run (module docstring).

    Raises:
        ValueError: an unknown arm.
    """
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        raise ValueError(f"unknown arm(s) {unknown}; known: {', '.join(ARMS)}")
    tirl = list(tirl)
    jobs = [
        Job(
            "eval-start",
            [
                *tirl,
                "eval",
                "--config",
                eval_config,
                "--model",
                start_model,
                "--out-dir",
                str(out / "eval-start"),
                "--quiet",
                *eval_args,
            ],
            output=out / "eval-start",
        )
    ]
    for seed in seeds:
        for arm in arms:
            run = f"{arm}-s{seed}"
            jobs.append(
                Job(
                    f"train-{run}",
                    [
                        *tirl,
                        "train",
                        "rl",
                        "--config",
                        ARMS[arm],
                        f"seed={seed}",
                        f"output_dir={out / run}",
                        *overrides,
                    ],
                    output=out / run,
                )
            )
            for step in eval_steps:
                jobs.append(
                    Job(
                        f"eval-{run}-{step}",
                        [
                            *tirl,
                            "eval",
                            "--config",
                            eval_config,
                            "--model",
                            str(checkpoint_dir(out / run, step)),
                            "--out-dir",
                            str(out / f"eval-{run}-{step}"),
                            "--quiet",
                            *eval_args,
                        ],
                        needs=[f"train-{run}"],
                        output=out / f"eval-{run}-{step}",
                    )
                )
    compare = [f"{LABELS[arm]}={out / f'{arm}-s{seed}'}" for arm in arms for seed in seeds]
    evals = [f"--eval={LABELS[arm]}={out / 'eval-start'}" for arm in arms]
    evals += [
        f"--eval={LABELS[arm]}={out / f'eval-{arm}-s{seed}-{step}'}"
        for arm in arms
        for seed in seeds
        for step in eval_steps
    ]
    jobs.append(
        Job(
            "plot",
            [*tirl, "plot", "--compare", *compare, "--out", str(out / "plots"), *evals],
            needs=[j.name for j in jobs],
            output=out / "plots",
        )
    )
    return jobs


def _log(out: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
    print(line, flush=True)
    with open(out / "runner.log", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


ARCHIVED = (
    METRICS_FILE,
    CONFIG_FILE,
    EVAL_SUMMARY,
    EVAL_SETTINGS,
    MACHINE_FILE,
    f"{TRAJECTORY_DIR}/step_*.jsonl",
)
"""What :func:`archive_ready` keeps of a job's output folder: a training run's metrics, recipe and logged groups
(``tirl plot``, ``tirl analyze roc``), an evaluation's summary, the machine record (:data:`MACHINE_FILE`); not
checkpoints (hundreds of MB) nor an evaluation's trajectories. ``.jsonl`` files are stored gzipped."""


def _write_machine(folder: Path, attempts: list[dict[str, object]]) -> None:
    """Write ``folder``'s :data:`MACHINE_FILE`: :func:`tirl.runs.machine.machine_record` (CPU, cores, native bf16,
    load average, torch/vLLM/transformers/TRL versions) and ``attempts``, one entry per start with its wall seconds,
    because an ablation made over several sessions runs on different machines, and wall time is comparable between
    runs of one machine only (``tirl analyze ablation`` shows which machine each arm's seeds ran on)."""
    import json

    record = machine_record()
    record["attempts"] = attempts
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MACHINE_FILE).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _archived_files(folder: Path) -> list[Path]:
    return sorted({f for pattern in ARCHIVED for f in folder.glob(pattern) if f.is_file()})


def archive_ready(jobs: Sequence[Job], out: Path, archive: Path) -> list[str]:
    """Copy the small results of every finished job whose dependants have all finished too into ``archive``
    (a folder kept in git), so that a later session on a fresh machine, where ``out`` is gone, continues the
    ablation instead of starting it over (:func:`restore`).

    A training run and its evaluations are archived together, once all of them are done (the evaluations need
    the run's checkpoints, which are not archived, and an evaluation without its run would be of another run
    after a retrain); the plot job is not a dependant (it is re-drawn from the archived files). Layout:
    ``archive/done/JOB`` markers and ``archive/<the job's folder under out>/...`` with :data:`ARCHIVED` files
    (``.jsonl`` gzipped).

    Returns:
        the names of the jobs archived by this call.
    """
    import gzip
    import shutil

    done = {p.name for p in (out / "done").glob("*")} if (out / "done").is_dir() else set()
    archived = {p.name for p in (archive / "done").glob("*")} if (archive / "done").is_dir() else set()
    new: list[str] = []
    for job in jobs:
        if job.name == "plot" or job.name in archived or job.name not in done or job.output is None:
            continue
        # a run and its evaluations travel together: an evaluation restored without its run would sit beside
        # a re-trained run whose samples differ; the run's checkpoints are not archived, so it waits for them all
        unit = {job.name, *(n for n in job.needs if n != "plot")}
        unit |= {j.name for j in jobs if unit & set(j.needs) and j.name != "plot"}
        if any(n not in done for n in unit):
            continue
        target = archive / job.output.relative_to(out)
        for f in _archived_files(job.output):
            dest = target / f.relative_to(job.output)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if f.suffix == ".jsonl":
                with open(f, "rb") as src, gzip.open(str(dest) + ".gz", "wb", compresslevel=9) as dst:
                    shutil.copyfileobj(src, dst)
            else:
                shutil.copyfile(f, dest)
        (archive / "done").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(out / "done" / job.name, archive / "done" / job.name)
        new.append(job.name)
    return new


SERVED_WEIGHTS = "served_weights"
"""A training run's full merged weights for its vLLM server (:mod:`tirl.train.server_policy`), rewritten at
every weight sync: 2.4 GB for the 0.5B model in float32, needed by nothing once the run and its evaluations are
done (the evaluations read the run's LoRA checkpoints), so :func:`prune_finished` removes them."""


def prune_finished(jobs: Sequence[Job], out: Path) -> list[Path]:
    """Remove the served weights (:data:`SERVED_WEIGHTS`) of every finished training run whose evaluations
    have all finished too; checkpoints, metrics and logs stay. Nine runs would otherwise keep about 22 GB that
    nothing reads (on the 2-core machines the disk filled to 90 % after six).

    Returns:
        the folders removed by this call.
    """
    import shutil

    done = {p.name for p in (out / "done").glob("*")} if (out / "done").is_dir() else set()
    removed: list[Path] = []
    for job in jobs:
        if not job.name.startswith("train-") or job.name not in done or job.output is None:
            continue
        # an evaluation still to run needs only the checkpoints, but a training run that is not done (a
        # restart) rewrites the weights itself: waiting for the evaluations keeps the rule "done means done"
        dependants = [j.name for j in jobs if job.name in j.needs and j.name != "plot"]
        weights = job.output / SERVED_WEIGHTS
        if weights.is_dir() and all(n in done for n in dependants):
            shutil.rmtree(weights, ignore_errors=True)
            removed.append(weights)
    return removed


def restore(archive: Path, out: Path) -> list[str]:
    """Bring the archived jobs (:func:`archive_ready`) back into ``out``: their files (``.jsonl.gz`` unpacked)
    and their ``done`` markers, for the jobs ``out`` does not already have as done.

    Returns:
        the names of the jobs restored.
    """
    import gzip
    import shutil

    if not (archive / "done").is_dir():
        return []
    (out / "done").mkdir(parents=True, exist_ok=True)
    restored = []
    for marker in sorted((archive / "done").iterdir()):
        if (out / "done" / marker.name).exists():
            continue
        restored.append(marker.name)
    if not restored:
        return []
    for f in sorted(archive.rglob("*")):
        if not f.is_file() or f.parts[len(archive.parts)] == "done":
            continue
        rel = f.relative_to(archive)
        dest = out / (str(rel)[: -len(".gz")] if f.name.endswith(".jsonl.gz") else rel)
        if dest.exists():
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        if f.name.endswith(".jsonl.gz"):
            with gzip.open(f, "rb") as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst)
        else:
            shutil.copyfile(f, dest)
    for name in restored:
        shutil.copyfile(archive / "done" / name, out / "done" / name)
    return restored


def run_jobs(
    jobs: Sequence[Job], out: Path, retries: int = 5, dry_run: bool = False, archive: Path | None = None
) -> int:
    """Run the jobs not yet done, restarting killed ones (:data:`KILLED`) up to ``retries`` times each; with
    ``archive``, first :func:`restore` from it and after each finished job :func:`archive_ready` into it.

    Returns:
        0 when every job is done, else 1 (failures are in ``OUT/runner.log``).
    """
    done_dir, log_dir = out / "done", out / "logs"
    done_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    if archive is not None and not dry_run:
        restored = restore(archive, out)
        if restored:
            _log(out, f"restored {len(restored)} finished jobs from {archive}: {', '.join(restored)}")
    failed: set[str] = set()
    planned: set[str] = set()  # dry run: what would have run counts as done for its dependants
    for job in jobs:
        # the plot is re-drawn by every invocation (seconds): its marker would go stale once a later invocation,
        # e.g. of other --arms or --seeds, adds runs to the same folder
        if (done_dir / job.name).exists() and job.name != "plot":
            continue
        missing = [n for n in job.needs if not (done_dir / n).exists() and n not in planned]
        if missing:
            _log(out, f"skip {job.name}: {', '.join(missing)} not done")
            failed.add(job.name)
            continue
        if dry_run:
            print(shlex.join(job.argv))
            planned.add(job.name)
            continue
        attempts: list[dict[str, object]] = []
        for attempt in range(retries + 1):
            _log(out, f"start {job.name} (attempt {attempt + 1}): {shlex.join(job.argv)}")
            started, load = time.time(), list(os.getloadavg()) if hasattr(os, "getloadavg") else None
            with open(log_dir / f"{job.name}.log", "a", encoding="utf-8") as fh:
                rc = subprocess.call(job.argv, stdout=fh, stderr=subprocess.STDOUT)
            attempts.append(
                {
                    "started": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(started)),
                    "wall_s": round(time.time() - started, 1),
                    "exit": rc,
                    "load_average_at_start": load,
                }
            )
            if rc not in KILLED:
                break
            _log(out, f"{job.name} was killed (exit {rc}): restarting, it resumes from its last checkpoint")
        if rc == 0:
            if job.output is not None and job.name != "plot":
                _write_machine(job.output, attempts)
            (done_dir / job.name).write_text(time.strftime("%Y-%m-%d %H:%M:%S") + "\n", encoding="utf-8")
            _log(out, f"done {job.name}")
            if archive is not None:
                for name in archive_ready(jobs, out, archive):
                    _log(out, f"archived {name} into {archive}")
            for folder in prune_finished(jobs, out):
                _log(out, f"removed {folder} (the finished run's served weights; its checkpoints stay)")
        else:
            failed.add(job.name)
            _log(out, f"FAILED {job.name} (exit {rc}); see {log_dir / (job.name + '.log')}")
    return 1 if failed else 0


def write_report(out: Path, tirl: Sequence[str]) -> int:
    """``tirl analyze ablation OUT --markdown OUT/report.md`` (also writes ``OUT/ablation_report.json``), its
    output in ``OUT/logs/report.log``; returns its exit status."""
    argv = [*tirl, "analyze", "ablation", str(out), "--markdown", str(out / "report.md")]
    _log(out, f"start report: {shlex.join(argv)}")
    with open(out / "logs" / "report.log", "a", encoding="utf-8") as fh:
        rc = subprocess.call(argv, stdout=fh, stderr=subprocess.STDOUT)
    _log(out, "done report" if rc == 0 else f"FAILED report (exit {rc}); see {out / 'logs' / 'report.log'}")
    return rc


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python experiments/roc-ablation/run.py [--out DIR] [--seeds 0 1 2] [--arms ...] [--dry-run]``."""
    p = argparse.ArgumentParser(prog="experiments/roc-ablation/run.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/ablation-toolfix"), help="folder of all runs")
    p.add_argument("--arms", nargs="+", default=list(ARMS), help=f"arms to run ({', '.join(ARMS)})")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--eval-steps", nargs="+", type=int, default=[10, 20], help="checkpoints evaluated")
    p.add_argument("--eval-config", default=EVAL_CONFIG)
    p.add_argument(
        "--start-model",
        default="qwen2.5-coder-0.5b-tirl-sft-recovery",
        help="the starting model evaluated as step 0 (the arms' recipes name it as model.name_or_path)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override for every training run (repeat), e.g. rollout.server_url=http://127.0.0.1:18200",
    )
    p.add_argument(
        "--eval-arg",
        dest="eval_args",
        action="append",
        default=[],
        help="extra tirl eval argument (repeat; --eval-arg=--engine --eval-arg=openai)",
    )
    p.add_argument("--tirl", default=None, help="the tirl command (default: the tirl next to this Python)")
    p.add_argument("--retries", type=int, default=5, help="restarts of a killed job")
    p.add_argument(
        "--archive",
        type=Path,
        default=None,
        help="folder (kept in git) of the finished jobs' small results: restored into --out first, added to "
        f"after each job, so a fresh machine continues the ablation (this ablation's: {ARCHIVE.relative_to(REPO)})",
    )
    p.add_argument("--dry-run", action="store_true", help="print the commands still to run and exit")
    args = p.parse_args(argv)
    tirl = shlex.split(args.tirl) if args.tirl else [os.path.join(os.path.dirname(sys.executable), "tirl")]
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        jobs = plan(
            args.out,
            arms=args.arms,
            seeds=args.seeds,
            eval_steps=args.eval_steps,
            eval_config=args.eval_config,
            start_model=args.start_model,
            tirl=tirl,
            overrides=args.overrides,
            eval_args=args.eval_args,
        )
    except ValueError as exc:
        p.error(str(exc))
    rc = run_jobs(jobs, args.out, retries=args.retries, dry_run=args.dry_run, archive=args.archive)
    if rc == 0 and not args.dry_run:
        rc = 1 if write_report(args.out, tirl) else 0
    return rc


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = [
    "ARCHIVED",
    "ARMS",
    "Job",
    "KILLED",
    "MACHINE_FILE",
    "archive_ready",
    "prune_finished",
    "machine_record",
    "main",
    "plan",
    "restore",
    "run_jobs",
]
