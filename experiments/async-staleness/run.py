"""The runner of the async-staleness experiment (issue 42): the toolmath recipe at ``rollout.max_staleness`` 1
against 0, 20 steps each from the same start, then the held-out evaluation of each final model and the report
(``python experiments/async-staleness/run.py {train ARM | eval ARM | report}``).

It works from a checkout (the recipes are beside it in ``recipes/``, the held-out evaluation is
``configs/eval/toolmath-heldout.yaml``) on the installed ``tirl``: it runs the ``tirl`` command beside the Python
that runs it (``--tirl CMD`` names another); both arms launch a vLLM server of their own
(``rollout.launch_server: true``), so run it with the vLLM environment's Python
(``.venv-vllm/bin/python experiments/async-staleness/run.py ...``). It reads runs only through
:mod:`tirl.runs` (names, metrics, summaries, final models) and :mod:`tirl.analysis` (a run's step records).

Subcommands (README.md beside this file has them in order):

- ``train ARM`` (``k0`` or ``k1``, :data:`ARMS`): ``tirl train rl --config recipes/ARM.yaml
  output_dir=OUT/ARM``. Resumable: a re-run resumes from the run's newest checkpoint (``tirl train rl`` does that
  by itself), and a run whose ``final`` holds step :data:`STEPS` is not started again. A job the kernel's
  out-of-memory killer ends (exit 137) is restarted up to ``--retries`` times.
- ``eval ARM`` (or ``eval start``, the starting model): ``tirl eval --config configs/eval/toolmath-heldout.yaml
  --model OUT/ARM/final --out-dir OUT/eval-ARM``; resumable (``tirl eval`` skips the samples it has).
- ``report``: a markdown table with a column per arm (held-out avg pass@1 with its 95 % interval, step time and
  its parts, the ``stale/*`` means, trained against sampled length, turns and tool calls) and a plot of the step
  time of each step for both arms (:func:`write_report`).

After every ``train`` and ``eval`` the job's small results (metrics gzipped, recipe, evaluation summary and
settings, and :data:`MACHINE_FILE`: the CPU and the load average at each start, so that a run made beside other
work shows it) are copied into the archive (``--archive``, default ``experiments/async-staleness/results``, kept
in git), which ``report`` reads by default. Checkpoints are not archived: a run is trained and evaluated on one
machine, in one ``OUT``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tirl.analysis.ablation import markdown, read_machine
from tirl.analysis.plot import PREFIX, load_runs
from tirl.runs.checkpoints import final_step
from tirl.runs.evals import read_summary
from tirl.runs.layout import (
    MACHINE_FILE,
    METRICS_ARCHIVE,
    config_file,
    eval_settings,
    eval_summary,
    final_dir,
    has_metrics,
)
from tirl.runs.machine import machine_record
from tirl.runs.metrics import metrics_file

HERE = Path(__file__).resolve().parent
"""This experiment's folder (``experiments/async-staleness``)."""
REPO = HERE.parents[1]
"""The checkout it lives in."""

ARMS: dict[str, Path] = {"k0": HERE / "recipes" / "k0.yaml", "k1": HERE / "recipes" / "k1.yaml"}
"""Arm -> recipe: ``rollout.max_staleness`` 0 and 1, otherwise identical
(``tests/test_experiment_async_staleness.py``)."""
LABELS = {"k0": "k = 0 (synchronous)", "k1": "k = 1 (asynchronous)"}
"""Arm -> its column heading and plot label."""
START = "start"
"""``eval start``: the held-out evaluation of the starting model, the arms' common step 0."""
START_MODEL = "qwen2.5-coder-0.5b-tirl-sft"
"""The starting model of both arms (their recipes' ``model.name_or_path``, checked by the test)."""
STEPS = 20
"""Steps per arm (the recipes' ``max_steps``, checked by the test)."""
EVAL_CONFIG = REPO / "configs" / "eval" / "toolmath-heldout.yaml"
"""The held-out evaluation: 120 toolmath problems x 4 samples at T = 0.6."""
BENCHMARK = "toolmath"
"""The benchmark of :data:`EVAL_CONFIG` whose avg pass@1 the report shows."""
ARCHIVE = HERE / "results"
"""The archive of the jobs' small results, kept in git; what ``report`` reads by default."""
KILLED = (137, -9)
"""Exit statuses of a process the kernel killed (out of memory): restarted."""
FIRST_STEPS = 1
"""Steps left out of the step means: step 1 waits for the server's start-up and, at k = 1, has nothing before it to
overlap with, so it measures neither arm's steady step."""

TIME_ROWS: tuple[tuple[str, str], ...] = (
    ("time/step_s", "step s"),
    ("time/rollout_s", "rollout s (generation, tools, scoring)"),
    ("time/update_s", "update s"),
    ("time/sync_s", "weight push s (sync)"),
    ("time/rollout_wait_s", "waited for the rollout s"),
    ("time/overlap_saved_s", "generation hidden by the overlap s"),
)
"""The step time and its parts (keys without ``tirl/``): means over the steps after :data:`FIRST_STEPS`. At k = 1
``update_s`` is the step less the wait for the rollout (``tirl.train.trainer``); the wait and the saving are
logged at k > 0 only."""
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("length/mean", "length/kept_mean", "response length, model tokens"),
    ("turns/mean", "turns/kept_mean", "model turns / trajectory"),
    ("tool_calls/per_traj", "tool_calls/kept_per_traj", "tool calls / trajectory"),
)
"""Sampled against trained (kept): a trained mean below the sampled one is training biased to short trajectories."""
STALE = "stale/"
"""The prefix of the staleness metrics (``tirl.algo.staleness``): every key under it that an arm logged is shown."""

PLOT = Path("plots") / "step_time.png"
REPORT = "report.md"


# ---- running -----------------------------------------------------------------------------------------------


def _load() -> list[float] | None:
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def _record_attempts(folder: Path, attempts: list[dict[str, Any]]) -> None:
    """Add ``attempts`` to ``folder``'s :data:`MACHINE_FILE` (kept across resumes: every start of the job is
    there, with the load average it started beside)."""
    path = folder / MACHINE_FILE
    old: list[dict[str, Any]] = []
    if path.is_file():
        try:
            old = list(json.loads(path.read_text(encoding="utf-8")).get("attempts", []))
        except (ValueError, AttributeError, TypeError):
            old = []  # a torn record: this start's is written anew
    # the record's keys as this runner has always written them: no load average of the moment (each attempt has
    # its own, at its start), the versions of torch, vLLM and TRL
    record = machine_record(("torch", "vllm", "trl"), load_average=False)
    record["attempts"] = old + attempts
    folder.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")


def _log(out: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}"
    print(line, flush=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "runner.log", "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def run_job(name: str, argv: list[str], out: Path, folder: Path, retries: int) -> int:
    """Run ``argv`` with its output appended to ``OUT/logs/NAME.log``, restarting it after an out-of-memory kill
    (:data:`KILLED`) up to ``retries`` times; each start is recorded in ``folder``'s :data:`MACHINE_FILE` (its
    wall seconds, exit status and the load average at its start). Returns the last exit status."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    attempts: list[dict[str, Any]] = []
    rc = 1
    for attempt in range(retries + 1):
        _log(out, f"start {name} (attempt {attempt + 1}): {shlex.join(argv)}")
        started, load = time.time(), _load()
        with open(out / "logs" / f"{name}.log", "a", encoding="utf-8") as fh:
            rc = subprocess.call(argv, stdout=fh, stderr=subprocess.STDOUT)
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
        _log(out, f"{name} was killed (exit {rc}): restarting, it resumes from its last checkpoint")
    if folder.is_dir():
        _record_attempts(folder, attempts)
    _log(out, f"done {name}" if rc == 0 else f"FAILED {name} (exit {rc}); see {out / 'logs' / (name + '.log')}")
    return rc


def archive_run(run: Path, target: Path) -> list[Path]:
    """Copy a training run's small results into ``target``: its metrics (gzipped), recipe and
    :data:`MACHINE_FILE`; what is there is replaced (a resumed run's archive is its latest state). Returns the
    files written."""
    written = []
    if has_metrics(run):
        target.mkdir(parents=True, exist_ok=True)
        source = metrics_file(run)
        dest = target / METRICS_ARCHIVE
        if source.name == METRICS_ARCHIVE:
            shutil.copyfile(source, dest)
        else:
            with open(source, "rb") as src, gzip.open(dest, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
        written.append(dest)
    for source in (config_file(run), run / MACHINE_FILE):
        if source.is_file():
            target.mkdir(parents=True, exist_ok=True)
            written.append(Path(shutil.copyfile(source, target / source.name)))
    return written


def archive_eval(run: Path, target: Path) -> list[Path]:
    """Copy an evaluation's summary, settings and :data:`MACHINE_FILE` into ``target`` (not its samples);
    returns the files written."""
    written = []
    for source in (eval_summary(run), eval_settings(run), run / MACHINE_FILE):
        if source.is_file():
            target.mkdir(parents=True, exist_ok=True)
            written.append(Path(shutil.copyfile(source, target / source.name)))
    return written


def train(
    arm: str,
    out: Path,
    archive: Path | None,
    tirl: list[str],
    overrides: Sequence[str] = (),
    *,
    dry_run: bool = False,
    retries: int = 2,
) -> int:
    """``train ARM``: train (or resume) the arm's run in ``OUT/ARM``, then archive its small results into
    ``archive/ARM`` (None: nowhere); ``dry_run``: print the command only.

    Returns:
        the exit status of ``tirl train rl`` (0 when the run had already finished).
    """
    run = out / arm
    argv = [*tirl, "train", "rl", "--config", str(ARMS[arm]), f"output_dir={run}", *overrides]
    if dry_run:
        print(shlex.join(argv))
        return 0
    if final_step(run) == STEPS:
        _log(out, f"{arm}: {final_dir(run)} holds step {STEPS}; nothing to train")
        rc = 0
    else:
        rc = run_job(f"train-{arm}", argv, out, run, retries)
    if archive is not None:
        archive_run(run, archive / arm)
    return rc


def evaluate(
    arm: str,
    out: Path,
    archive: Path | None,
    tirl: list[str],
    eval_args: Sequence[str] = (),
    *,
    dry_run: bool = False,
    retries: int = 2,
) -> int:
    """``eval ARM``: the held-out evaluation of the arm's final model (``eval start``: of :data:`START_MODEL`) in
    ``OUT/eval-ARM``, then archive its summary into ``archive/eval-ARM``; ``dry_run``: print the command only.

    Returns:
        the exit status of ``tirl eval``; 2 when the arm has not trained its :data:`STEPS` steps.
    """
    if arm == START:
        model = START_MODEL
    elif final_step(out / arm) != STEPS and not dry_run:
        print(f"error: {out / arm} has no final model of step {STEPS}: run `train {arm}` first", file=sys.stderr)
        return 2
    else:
        model = str(final_dir(out / arm))
    folder = out / f"eval-{arm}"
    argv = [*tirl, "eval", "--config", str(EVAL_CONFIG), "--model", model, "--out-dir", str(folder), "--quiet"]
    argv += list(eval_args)
    if dry_run:
        print(shlex.join(argv))
        return 0
    rc = run_job(f"eval-{arm}", argv, out, folder, retries)
    if archive is not None:
        archive_eval(folder, archive / f"eval-{arm}")
    return rc


# ---- the report --------------------------------------------------------------------------------------------


def _value(rec: dict[str, Any], key: str) -> float | None:
    v = rec.get(PREFIX + key, rec.get(key))
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def step_records(run: Path) -> list[dict[str, Any]]:
    """A training run's step records (``tirl.analysis.plot.load_runs``: a resumed step's last record, ``.gz``
    archives included), by step; empty when the folder has no metrics."""
    if not has_metrics(run):
        return []
    return load_runs([run])


def mean_after_first(records: Sequence[dict[str, Any]], key: str) -> float | None:
    """The mean of ``key`` over the steps after :data:`FIRST_STEPS` that logged it; None when none did."""
    values = [v for r in records if r["global_step"] > FIRST_STEPS and (v := _value(r, key)) is not None]
    return statistics.fmean(values) if values else None


def heldout(folder: Path) -> dict[str, Any] | None:
    """An evaluation's :data:`BENCHMARK` summary (avg pass@1, its bootstrap interval over problems when the
    summary has one, problems and samples); None when the evaluation has not finished.

    Raises:
        ValueError: the summary is not valid JSON, or has no :data:`BENCHMARK`.
    """
    summary = read_summary(folder, strict=True)
    if summary is None:
        return None
    bench = summary.get("benchmarks", {}).get(BENCHMARK)
    if bench is None:
        raise ValueError(f"{eval_summary(folder)} has no benchmark {BENCHMARK!r}")
    interval = (bench.get("intervals") or {}).get("avg_pass1")
    return {
        "avg_pass1": float(bench["avg_pass1"]),
        "interval": [float(x) for x in interval] if interval else None,
        "problems": bench.get("num_problems"),
        "samples": bench.get("samples_per_problem"),
    }


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _heldout_cell(h: dict[str, Any] | None) -> str:
    if h is None:
        return "not yet"
    text = f"{100 * h['avg_pass1']:.1f} %"
    if h["interval"]:
        text += f" [{100 * h['interval'][0]:.1f}, {100 * h['interval'][1]:.1f}]"
    return text + f" ({h['problems']} x {h['samples']})"


def _starts(folder: Path) -> str:
    """The 1-minute load average at each start of a job (its :data:`MACHINE_FILE`), e.g. ``2.1, 2.3``."""
    path = folder / MACHINE_FILE
    if not path.is_file():
        return "-"
    try:
        attempts = json.loads(path.read_text(encoding="utf-8")).get("attempts", [])
    except (ValueError, AttributeError):
        return "-"
    loads = [a["load_average_at_start"][0] for a in attempts if a.get("load_average_at_start")]
    return ", ".join(f"{x:.1f}" for x in loads) or "-"


def report_rows(src: Path) -> tuple[list[str], list[list[str]]]:
    """The report's table: a row per quantity, a column per arm (module docstring), from the runs in ``src``
    (``src/ARM``, ``src/eval-ARM``, ``src/eval-start``: the runner's ``--out`` or its archive).

    Raises:
        ValueError: neither arm has step records; an evaluation's summary is unreadable.
    """
    records = {arm: step_records(src / arm) for arm in ARMS}
    if not any(records.values()):
        raise ValueError(f"no step records of {', '.join(ARMS)} in {src}")
    start = heldout(src / f"eval-{START}")
    header = ["", *(LABELS[a] for a in ARMS)]
    rows: list[list[str]] = []

    def row(label: str, cells: list[str]) -> None:
        rows.append([label, *cells])

    row("steps trained", [f"{r[-1]['global_step'] if r else 0} of {STEPS}" for r in records.values()])
    row("machine", [read_machine(src / a) or "-" for a in ARMS])
    row("load average (1 min) at each start of the training", [_starts(src / a) for a in ARMS])
    row("held-out avg pass@1 [95 % CI] of the start model (both arms')", [_heldout_cell(start)] * len(ARMS))
    row("held-out avg pass@1 [95 % CI] of the final model", [_heldout_cell(heldout(src / f"eval-{a}")) for a in ARMS])
    totals = [sum(_value(r, "time/step_s") or 0.0 for r in recs) / 60 for recs in records.values()]
    row("wall time of the steps, minutes (sum of step s)", [_num(t) for t in totals])
    row(
        "step 1 s (the server's start-up, nothing to overlap)",
        [_num(_value(recs[0], "time/step_s")) if recs else "-" for recs in records.values()],
    )
    after = f"steps {FIRST_STEPS + 1}-N"
    for key, label in TIME_ROWS:
        row(f"{label}, mean of {after}", [_num(mean_after_first(recs, key)) for recs in records.values()])
    stale = sorted(
        {k[len(PREFIX) :] for recs in records.values() for r in recs for k in r if k.startswith(PREFIX + STALE)}
    )
    for key in stale:
        row(f"`{key}`, mean of {after}", [_num(mean_after_first(recs, key), 3) for recs in records.values()])
    for sampled, kept, label in PAIRS:
        cells = []
        for recs in records.values():
            a, b = mean_after_first(recs, sampled), mean_after_first(recs, kept)
            cells.append("-" if a is None and b is None else f"{_num(a, 2)} / {_num(b, 2)}")
        row(f"{label}, sampled / trained, mean of {after}", cells)
    return header, rows


def plot_step_times(src: Path, path: Path) -> Path:
    """Draw the step time of every step for both arms (solid) and their update time (dashed) into ``path``
    (PNG, matplotlib headless); returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    for (arm, label), color in zip(LABELS.items(), ("tab:blue", "tab:orange"), strict=True):
        recs = step_records(src / arm)
        for key, style, what in (("time/step_s", "-o", "step"), ("time/update_s", "--", "update")):
            pts = [(r["global_step"], v) for r in recs if (v := _value(r, key)) is not None]
            if pts:
                xs, ys = zip(*pts, strict=True)
                ax.plot(xs, ys, style, color=color, label=f"{label}: {what}", markersize=4)
    ax.set_xlabel("RL step")
    ax.set_ylabel("seconds")
    ax.set_title("Step time per step, k = 1 against k = 0 (toolmath recipe)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(src: Path, dst: Path) -> tuple[Path, Path]:
    """Write ``DST/report.md`` (the table of :func:`report_rows` and how to read it) and ``DST/plots/step_time.png``
    from the runs in ``src``; returns both paths.

    Raises:
        ValueError: as :func:`report_rows`.
    """
    header, rows = report_rows(src)
    png = plot_step_times(src, dst / PLOT)
    text = (
        "# async-staleness: k = 1 against k = 0 (written by `run.py report`)\n\n"
        + markdown(header, rows)
        + f"\nMeans over the steps after step {FIRST_STEPS}; `-`: not logged (the waits, the saving and `stale/*`"
        " are logged at k > 0 only). One run per arm: a difference in held-out avg pass@1 inside the intervals is"
        ' not a difference (README.md, "What one run per arm can and cannot show").\n\n'
        f"![step time per step]({PLOT.as_posix()})\n"
    )
    dst.mkdir(parents=True, exist_ok=True)
    (dst / REPORT).write_text(text, encoding="utf-8")
    return dst / REPORT, png


# ---- command line ------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring); returns the exit status."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, default=Path("runs/async-staleness"), help="folder of the runs")
    common.add_argument(
        "--archive",
        default=str(ARCHIVE),
        help=f"where each job's small results are copied (default {ARCHIVE.relative_to(REPO)}); '' for nowhere",
    )
    common.add_argument("--tirl", default=None, help="the tirl command (default: the tirl next to this Python)")
    common.add_argument("--retries", type=int, default=2, help="restarts of a job killed for memory")
    common.add_argument("--dry-run", action="store_true", help="print the command and exit")
    p = argparse.ArgumentParser(prog="experiments/async-staleness/run.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", parents=[common], help="train (or resume) an arm")
    t.add_argument("arm", choices=list(ARMS))
    t.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="recipe override (repeat); give both arms the same ones",
    )
    e = sub.add_parser("eval", parents=[common], help="held-out evaluation of an arm's final model, or the start's")
    e.add_argument("arm", choices=[*ARMS, START])
    e.add_argument(
        "--eval-arg",
        dest="eval_args",
        action="append",
        default=[],
        help="extra tirl eval argument (repeat; --eval-arg=--engine --eval-arg=openai ...)",
    )
    r = sub.add_parser("report", parents=[common], help="the table and the step-time plot")
    r.add_argument("--from", dest="src", type=Path, default=None, help="the runs (default: --archive, else --out)")
    r.add_argument("--to", dest="dst", type=Path, default=HERE, help="where report.md and plots/ go (default: here)")
    args = p.parse_args(argv)
    archive = Path(args.archive) if args.archive else None
    tirl = shlex.split(args.tirl) if args.tirl else [os.path.join(os.path.dirname(sys.executable), "tirl")]
    common = {"dry_run": args.dry_run, "retries": args.retries}
    if args.command == "train":
        return train(args.arm, args.out, archive, tirl, args.overrides, **common)
    if args.command == "eval":
        return evaluate(args.arm, args.out, archive, tirl, args.eval_args, **common)
    src = args.src or archive or args.out
    try:
        md, png = write_report(src, args.dst)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(md.read_text(encoding="utf-8"))
    print(f"wrote {md} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
