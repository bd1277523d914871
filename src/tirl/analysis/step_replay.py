"""Compare a recomputed step of an RL run with what the run logged (the reading half of ``tirl train replay``).

:func:`tirl.train.replay.replay_step` recomputes step N of a run (training); this module reads the two run
folders and says whether they agree: :func:`check_replayable` (the run's ``config.yaml``, the step's trajectory
log and a complete ``checkpoint-(N-1)`` are there), :func:`read_trajectories`, :func:`step_metrics` and
:func:`compare`, trajectory by trajectory (matched on group and sample index), with
``RUN_DIR/trajectories/step_NNNNN_rank0.jsonl``:

* ``response_ids`` equal (count of differing positions, the first one, and the lengths);
* ``reward`` equal (exactly: the verifier is deterministic given the tokens);
* ``problem_id`` equal (the data order of the step);

and the step's ``loss`` and ``grad_norm`` with the record of step N in the run's metrics log within
:data:`REL_TOL` (relative) or :data:`ABS_TOL` (absolute). Why a tolerance for these two and none for tokens: on
the same machine and thread count the replay is bit-identical (measured in ``tests/test_train_replay.py``),
but a different CPU, thread count or BLAS changes the order of float32 reductions, which moves a loss by a few
units in the 7th significant digit; 1e-4 relative is far above that and far below what a changed batch, a
changed advantage or a changed weight moves. Sampled tokens are compared exactly: a different token is a
different rollout (near-tie logits on another machine can flip one, which the report then shows with its
position). :func:`print_report` draws the :class:`ReplayReport` (rich). Every file is found through
:mod:`tirl.runs`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tirl.runs.checkpoints import checkpoint_problem
from tirl.runs.layout import checkpoint_dir, config_file, metrics_path, trajectory_file
from tirl.runs.metrics import read_metrics
from tirl.runs.trajectories import read_step_log

REL_TOL = 1e-4
"""Relative tolerance on the step's ``loss`` and ``grad_norm`` (see the module docstring)."""
ABS_TOL = 1e-6
"""Absolute tolerance on ``loss`` and ``grad_norm``, for values near 0 (a GRPO loss often is)."""

METRIC_KEYS = ("loss", "grad_norm")


class ReplayError(ValueError):
    """The step cannot be replayed (no checkpoint before it, trajectories not logged, no config); one line."""


@dataclass
class TrajectoryDiff:
    """One trajectory's comparison: ``group``/``sample`` (as logged), ``tokens_equal``, ``mismatched`` (positions
    that differ, plus the length difference), ``first_diff`` (first differing position or None), the logged and
    replayed lengths and rewards."""

    group: int
    sample: int
    problem_id: str
    tokens_equal: bool
    mismatched: int
    first_diff: int | None
    logged_len: int
    replayed_len: int
    logged_reward: float | None
    replayed_reward: float | None
    problem_equal: bool = True

    @property
    def reward_equal(self) -> bool:
        """Rewards equal (both None counts as equal)."""
        return self.logged_reward == self.replayed_reward

    @property
    def ok(self) -> bool:
        """Tokens, reward and problem all match."""
        return self.tokens_equal and self.reward_equal and self.problem_equal


@dataclass
class ReplayReport:
    """What :func:`replay_step` found; ``ok`` when everything matched. ``metrics`` maps ``loss``/``grad_norm``
    to ``{"logged", "replayed", "equal"}``; ``problems`` lists differences that are not per trajectory (counts)."""

    run_dir: str
    step: int
    checkpoint: str | None
    trajectories: list[TrajectoryDiff] = field(default_factory=list)
    metrics: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    rel_tol: float = REL_TOL
    abs_tol: float = ABS_TOL

    @property
    def ok(self) -> bool:
        """Every trajectory, every metric and the counts match."""
        return (
            not self.problems
            and all(t.ok for t in self.trajectories)
            and all(m["equal"] for m in self.metrics.values())
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable form (what ``RUN_DIR/replay_step_N.json`` holds)."""
        trajs = []
        for t in self.trajectories:
            d = asdict(t)
            d.update(reward_equal=t.reward_equal, ok=t.ok)
            trajs.append(d)
        return {
            "run_dir": self.run_dir,
            "step": self.step,
            "checkpoint": self.checkpoint,
            "ok": self.ok,
            "rel_tol": self.rel_tol,
            "abs_tol": self.abs_tol,
            "metrics": self.metrics,
            "problems": self.problems,
            "trajectories": trajs,
            "token_mismatches": sum(not t.tokens_equal for t in self.trajectories),
            "reward_mismatches": sum(not t.reward_equal for t in self.trajectories),
        }


def read_trajectories(path: str | Path) -> list[dict[str, Any]]:
    """The records of a trajectory log file, in file order.

    Raises:
        ReplayError: a record without ``response_ids`` (a log written before token ids were logged).
    """
    out = read_step_log(path)
    for rec in out:
        if "response_ids" not in rec:
            raise ReplayError(f"{path} has no response_ids (written by an older tirl): it cannot be replayed")
    return out


def check_replayable(run_dir: str | Path, step: int) -> tuple[Path, Path | None]:
    """The run's ``config.yaml`` and the checkpoint to start step ``step`` from (None for step 1: the starting
    model), after checking that the step can be replayed.

    Raises:
        ReplayError: ``step`` < 1, no ``config.yaml``, the step's trajectories were not logged (names the
            recipe key ``logging.log_trajectories``), or no complete ``checkpoint-(step-1)``.
    """
    root = Path(run_dir)
    if step < 1:
        raise ReplayError(f"--step must be >= 1, got {step}")
    cfg = config_file(root)
    if not cfg.is_file():
        raise ReplayError(f"{root} has no {cfg.name}: not the output_dir of a tirl train rl run")
    if not trajectory_file(root, step).is_file():
        raise ReplayError(
            f"{trajectory_file(root, step)} is missing: the run did not log its trajectories; "
            "train with logging.log_trajectories=true to make its steps replayable"
        )
    if step == 1:
        return cfg, None
    ckpt = checkpoint_dir(root, step - 1)
    if not ckpt.is_dir():
        raise ReplayError(
            f"no {ckpt.name} in {root} to replay step {step} from: keep a checkpoint of every step "
            "to replay (save_steps=1 and save_total_limit unset or large enough)"
        )
    problem = checkpoint_problem(ckpt)
    if problem is not None:
        raise ReplayError(f"{ckpt} is incomplete ({problem}): step {step} cannot be replayed")
    return cfg, ckpt


def step_metrics(run_dir: Path, step: int) -> dict[str, Any] | None:
    """The last record of ``step`` carrying a ``loss`` in the metrics log of ``run_dir`` (None if there is none
    or no log)."""
    path = metrics_path(run_dir)
    if not path.is_file():
        return None
    found = None
    for rec in read_metrics(path):
        if rec.get("step") == step and "loss" in rec:
            found = rec
    return found


def _close(a: Any, b: Any, rel: float, abs_: float) -> bool:
    if a is None or b is None:
        return a is None and b is None
    a, b = float(a), float(b)
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def compare(
    logged: list[dict[str, Any]],
    replayed: list[dict[str, Any]],
    logged_metrics: dict[str, Any] | None,
    replayed_metrics: dict[str, Any] | None,
    report: ReplayReport,
) -> ReplayReport:
    """Fill ``report`` with the comparison of a step's logged and replayed trajectory records (matched on
    ``(group, sample)``) and metric records (``loss``, ``grad_norm``; within ``report.rel_tol``/``abs_tol``).
    Returns ``report``."""
    if len(logged) != len(replayed):
        report.problems.append(f"{len(logged)} trajectories logged, {len(replayed)} replayed")
    by_key = {(r["group"], r["sample"]): r for r in replayed}
    for rec in logged:
        key = (rec["group"], rec["sample"])
        other = by_key.get(key)
        a = list(rec["response_ids"])
        if other is None:
            report.problems.append(f"trajectory group {key[0]} sample {key[1]} was not replayed")
            continue
        b = list(other["response_ids"])
        diffs = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
        first = diffs[0] if diffs else (min(len(a), len(b)) if len(a) != len(b) else None)
        report.trajectories.append(
            TrajectoryDiff(
                group=key[0],
                sample=key[1],
                problem_id=str(rec.get("problem_id")),
                tokens_equal=a == b,
                mismatched=len(diffs) + abs(len(a) - len(b)),
                first_diff=first,
                logged_len=len(a),
                replayed_len=len(b),
                logged_reward=rec.get("reward"),
                replayed_reward=other.get("reward"),
                problem_equal=rec.get("problem_id") == other.get("problem_id"),
            )
        )
    if logged_metrics is None:
        report.problems.append(f"metrics.jsonl has no record of step {report.step} with a loss")
    elif replayed_metrics is None:
        report.problems.append(f"the replay logged no metrics for step {report.step}")
    else:
        for key in METRIC_KEYS:
            lv, rv = logged_metrics.get(key), replayed_metrics.get(key)
            report.metrics[key] = {
                "logged": lv,
                "replayed": rv,
                "equal": _close(lv, rv, report.rel_tol, report.abs_tol),
            }
    return report


def print_report(report: ReplayReport, console: Any = None) -> None:
    """A short table of ``report`` (rich): metrics, then every trajectory that differs (or a line saying all
    matched), then the verdict."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    console.print(f"replay of step {report.step} of {report.run_dir} from {report.checkpoint or 'the starting model'}")
    mt = Table(title=f"step metrics (tolerance: relative {report.rel_tol:g}, absolute {report.abs_tol:g})")
    for col in ("metric", "logged", "replayed", "match"):
        mt.add_column(col)
    for key, m in report.metrics.items():
        mt.add_row(key, f"{m['logged']}", f"{m['replayed']}", "yes" if m["equal"] else "[red]NO[/]")
    console.print(mt)
    bad = [t for t in report.trajectories if not t.ok]
    n = len(report.trajectories)
    if bad:
        tt = Table(title=f"{len(bad)} of {n} trajectories differ")
        for col in (
            "group",
            "sample",
            "problem",
            "tokens",
            "first diff",
            "len logged/replayed",
            "reward logged",
            "reward replayed",
        ):
            tt.add_column(col)
        for t in bad:
            tt.add_row(
                str(t.group),
                str(t.sample),
                t.problem_id,
                "equal" if t.tokens_equal else f"[red]{t.mismatched} differ[/]",
                "-" if t.first_diff is None else str(t.first_diff),
                f"{t.logged_len}/{t.replayed_len}",
                str(t.logged_reward),
                str(t.replayed_reward) if t.reward_equal else f"[red]{t.replayed_reward}[/]",
            )
        console.print(tt)
    else:
        console.print(f"all {n} trajectories: tokens and rewards equal")
    for p in report.problems:
        console.print(f"[red]{p}[/]")
    console.print("[green]MATCH[/]: the step reproduces" if report.ok else "[red]MISMATCH[/]: the step differs")


__all__ = [
    "ABS_TOL",
    "METRIC_KEYS",
    "REL_TOL",
    "ReplayError",
    "ReplayReport",
    "TrajectoryDiff",
    "check_replayable",
    "compare",
    "print_report",
    "read_trajectories",
    "step_metrics",
]
