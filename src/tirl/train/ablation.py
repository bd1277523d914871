"""The unattended, resumable runner of an RL ablation: arms x seeds trained one after another, checkpoints
evaluated, the comparison drawn (``python -m tirl.train.ablation``).

Made for the RoC ablation of issue 26 (docs/training.md, "RoC on a task where correct answers follow failing
calls"): three arms (plain GRPO sampling and keeping G; GRPO-RoC sampling 2G and keeping G; plain GRPO sampling
and keeping 2G, :data:`ARMS`) x three seeds on the toolfix task, each run evaluated on the held-out split at a few
steps. What it does, in order (seed-major, so that a stopped ablation has every arm at the same number of seeds):

1. the starting model's held-out evaluation (``OUT/eval-start``), once;
2. for each seed, for each arm: ``tirl train rl --config ARM.yaml seed=S output_dir=OUT/ARM-sS`` (a re-run
   resumes from the newest checkpoint, which ``tirl train rl`` does by itself), then ``tirl eval`` of each
   ``checkpoint-N`` in ``--eval-steps`` (``OUT/eval-ARM-sS-N``; eval resumes by itself too);
3. ``tirl plot --compare`` of all runs, the seeds of an arm under one label (mean and band), with their
   held-out evaluations (``OUT/plots``).

Resumable: every finished job leaves ``OUT/done/JOB``; a re-run of the same command skips those and continues
where it stopped. Unattended: a job that the kernel's out-of-memory killer ends (exit status 137, or -9 from a
signal) is restarted, up to ``--retries`` times; any other failure (3 = the training watchdog's stop, 2 = a
configuration error) is logged, its dependants are skipped, and the runner goes on with the next job and exits 1
at the end. Each job's output goes to ``OUT/logs/JOB.log``; ``OUT/runner.log`` has one line per event.

The training runs take the arms' recipes' generation path: ``rollout.launch_server: auto`` starts a vLLM server
per run when the runner's ``tirl`` is the vLLM environment's (``.venv-vllm/bin/python -m tirl.train.ablation``),
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

ARMS: dict[str, str] = {
    "grpo": "configs/rl/cpu-toolfix-grpo.yaml",
    "roc": "configs/rl/cpu-toolfix-roc.yaml",
    "grpo2g": "configs/rl/cpu-toolfix-grpo2g.yaml",
}
"""Arm -> recipe: plain GRPO G of G, GRPO-RoC G of 2G, plain GRPO 2G of 2G."""

LABELS = {"grpo": "GRPO (G of G)", "roc": "GRPO-RoC (G of 2G)", "grpo2g": "GRPO (2G of 2G)"}

KILLED = (137, -9)
"""Exit statuses of a process the kernel killed (out of memory): restarted."""


@dataclass
class Job:
    """One command of the plan.

    Attributes:
        name: unique, used for the marker ``OUT/done/NAME`` and the log ``OUT/logs/NAME.log``.
        argv: the command.
        needs: names of jobs that must have finished first (skipped otherwise).
    """

    name: str
    argv: list[str]
    needs: list[str] = field(default_factory=list)


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
                            str(out / run / f"checkpoint-{step}"),
                            "--out-dir",
                            str(out / f"eval-{run}-{step}"),
                            "--quiet",
                            *eval_args,
                        ],
                        needs=[f"train-{run}"],
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
        )
    )
    return jobs


def _log(out: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
    print(line, flush=True)
    with open(out / "runner.log", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def run_jobs(jobs: Sequence[Job], out: Path, retries: int = 5, dry_run: bool = False) -> int:
    """Run the jobs not yet done, restarting killed ones (:data:`KILLED`) up to ``retries`` times each.

    Returns:
        0 when every job is done, else 1 (failures are in ``OUT/runner.log``).
    """
    done_dir, log_dir = out / "done", out / "logs"
    done_dir.mkdir(parents=True, exist_ok=True)
    log_dir.mkdir(parents=True, exist_ok=True)
    failed: set[str] = set()
    planned: set[str] = set()  # dry run: what would have run counts as done for its dependants
    for job in jobs:
        if (done_dir / job.name).exists():
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
        for attempt in range(retries + 1):
            _log(out, f"start {job.name} (attempt {attempt + 1}): {shlex.join(job.argv)}")
            with open(log_dir / f"{job.name}.log", "a", encoding="utf-8") as fh:
                rc = subprocess.call(job.argv, stdout=fh, stderr=subprocess.STDOUT)
            if rc not in KILLED:
                break
            _log(out, f"{job.name} was killed (exit {rc}): restarting, it resumes from its last checkpoint")
        if rc == 0:
            (done_dir / job.name).write_text(time.strftime("%Y-%m-%d %H:%M:%S") + "\n", encoding="utf-8")
            _log(out, f"done {job.name}")
        else:
            failed.add(job.name)
            _log(out, f"FAILED {job.name} (exit {rc}); see {log_dir / (job.name + '.log')}")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: ``python -m tirl.train.ablation [--out DIR] [--seeds 0 1 2] [--arms ...] [--dry-run]``."""
    p = argparse.ArgumentParser(prog="python -m tirl.train.ablation", description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/ablation-toolfix"), help="folder of all runs")
    p.add_argument("--arms", nargs="+", default=list(ARMS), help=f"arms to run ({', '.join(ARMS)})")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--eval-steps", nargs="+", type=int, default=[10, 20, 30], help="checkpoints evaluated")
    p.add_argument("--eval-config", default="configs/eval/toolfix-heldout.yaml")
    p.add_argument("--start-model", default="qwen2.5-coder-0.5b-tirl-sft", help="the arms' starting model")
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
    return run_jobs(jobs, args.out, retries=args.retries, dry_run=args.dry_run)


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["ARMS", "Job", "KILLED", "main", "plan", "run_jobs"]
