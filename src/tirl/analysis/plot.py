"""Training curves from ``metrics.jsonl`` as PNG files (matplotlib, headless).

Covers reading one or several runs (stages are drawn one after another on a common step axis) and drawing
the report's curves: reward and accuracy, the share of failing tool calls inside correct trajectories before
and after RoC selection (Figure 4), response length (mean and p90, model tokens), and an overview panel with
format penalty, truncation rate, tool calls per trajectory and the time split. It does not compute metrics
(:mod:`tirl.algo.metrics`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tirl.runs.evals import read_summary
from tirl.runs.layout import EVAL_SUMMARY, checkpoint_step
from tirl.runs.metrics import read_metrics

PREFIX = "tirl/"


def load_runs(paths: Sequence[str | Path]) -> list[dict[str, Any]]:
    """Step records of the given runs (folders or ``metrics.jsonl`` files), stages concatenated in order.

    A folder without ``metrics.jsonl`` is read from its ``metrics.jsonl.gz`` (an ablation archive's run).

    Each record gets ``global_step`` (the step plus the steps of the earlier runs) and keeps its ``stage``.
    Only records that carry rollout metrics (``tirl/reward/mean``) are kept; a step logged twice keeps the
    last record.

    Raises:
        FileNotFoundError: a path has no metrics file.
    """
    out: list[dict[str, Any]] = []
    offset = 0
    for path in paths:
        p = Path(path)
        by_step: dict[int, dict[str, Any]] = {}
        for rec in read_metrics(p):  # a folder: metrics.jsonl, else an archive's metrics.jsonl.gz
            if PREFIX + "reward/mean" in rec and isinstance(rec.get("step"), (int, float)):
                by_step[int(rec["step"])] = rec
        for step in sorted(by_step):
            rec = dict(by_step[step])
            rec["global_step"] = offset + step
            out.append(rec)
        if by_step:
            offset += max(by_step)
    return out


def _series(records: list[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    xs, ys = [], []
    for rec in records:
        value = rec.get(key, rec.get(PREFIX + key))
        if isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(rec["global_step"])
            ys.append(float(value))
    return xs, ys


PANELS: dict[str, list[tuple[str, str]]] = {
    "reward": [
        ("reward/mean", "reward (all sampled)"),
        ("reward/kept_mean", "reward (kept by RoC)"),
        ("accuracy", "accuracy"),
    ],
    "tool_errors": [
        ("tool_error_in_correct/before", "before selection"),
        ("tool_error_in_correct/after", "after selection (trained on)"),
    ],
    "length": [("length/mean", "mean"), ("length/p90", "p90"), ("length/kept_mean", "mean of kept")],
}
TITLES = {
    "reward": ("Reward", "reward / accuracy"),
    "tool_errors": ("Failing tool calls inside correct trajectories (Figure 4)", "share of tool calls"),
    "length": ("Response length", "model tokens"),
}
# A trailing mean drawn over the per-step line: with 4 problems a step, one step's reward is noise around the trend.
SMOOTHED = {
    "reward": ("reward/mean", "reward (all sampled)"),
    "tool_errors": ("tool_error_in_correct/before", "before selection"),
}
SMOOTH_WINDOW = 10


def trailing_mean(ys: Sequence[float], window: int) -> list[float]:
    """The mean of each value and the ``window - 1`` before it (fewer at the start); same length as ``ys``.

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    out, total = [], 0.0
    for i, y in enumerate(ys):
        total += y
        if i >= window:
            total -= ys[i - window]
        out.append(total / min(i + 1, window))
    return out


OVERVIEW = [
    ("p_format/mean", "p_format"),
    ("truncation_rate", "truncation rate"),
    ("tool_calls/per_traj", "tool calls / trajectory"),
    ("groups/dropped", "groups dropped"),
    ("time/rollout_s", "rollout s"),
    ("time/update_s", "update s"),
]


def plot_runs(paths: Sequence[str | Path], out_dir: str | Path, title: str | None = None) -> list[Path]:
    """Draw ``reward.png``, ``tool_errors.png``, ``length.png`` and ``overview.png`` into ``out_dir``.

    With at least :data:`SMOOTH_WINDOW` steps, ``reward.png`` and ``tool_errors.png`` also draw the trailing mean
    of the sampled reward and of the failing-call share before selection (:func:`trailing_mean`).

    Returns:
        The written files.

    Raises:
        FileNotFoundError: a run has no metrics file.
        ValueError: no step records to plot.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    records = load_runs(paths)
    if not records:
        raise ValueError("no step records with rollout metrics to plot")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    boundaries = [
        cur["global_step"] - 0.5 for prev, cur in zip(records, records[1:]) if cur.get("stage") != prev.get("stage")
    ]
    written = []
    suffix = f" - {title}" if title else ""
    for name, series in PANELS.items():
        fig, ax = plt.subplots(figsize=(7, 4))
        for key, label in series:
            xs, ys = _series(records, key)
            if xs:
                ax.plot(xs, ys, marker="o", markersize=3, label=label)
        if name in SMOOTHED:
            key, label = SMOOTHED[name]
            xs, ys = _series(records, key)
            if len(xs) >= SMOOTH_WINDOW:
                ax.plot(
                    xs,
                    trailing_mean(ys, SMOOTH_WINDOW),
                    color="black",
                    linewidth=2.2,
                    label=f"{label}, mean of the last {SMOOTH_WINDOW} steps",
                )
        for b in boundaries:
            ax.axvline(b, color="grey", linestyle=":", linewidth=1)
        heading, ylabel = TITLES[name]
        ax.set_title(heading + suffix)
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        path = out / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    fig, axes = plt.subplots(2, 3, figsize=(12, 6))
    for ax, (key, label) in zip(axes.flat, OVERVIEW):
        xs, ys = _series(records, key)
        if xs:
            ax.plot(xs, ys, marker="o", markersize=3)
        ax.set_title(label)
        ax.set_xlabel("RL step")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle("Training overview" + suffix)
    fig.tight_layout()
    path = out / "overview.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    written.append(path)
    return written


# The ablation's panels. "failing calls in correct, sampled" is the report's Figure 4 measurement (the policy's own
# positives, before any selection); "trained on" is what RoC's selection leaves (the same as sampled without RoC).
COMPARE = [
    ("reward/mean", "reward (all sampled)"),
    ("tool_error_in_correct/before", "failing calls in correct, sampled (Fig. 4)"),
    ("tool_error_in_correct/after", "failing calls in correct, trained on"),
    ("tool_calls/error_rate", "failing calls (all)"),
    ("tool_calls/per_traj", "tool calls / trajectory"),
    ("length/mean", "response length (model tokens)"),
]


def _wall_hours(records: list[dict[str, Any]]) -> list[float]:
    """Cumulative wall time in hours at the end of each step (sum of ``time/step_s``; 0 where missing)."""
    total, out = 0.0, []
    for rec in records:
        value = rec.get(PREFIX + "time/step_s")
        total += float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0
        out.append(total / 3600.0)
    return out


BANDS = ("minmax", "std")
"""Spread drawn around the mean of several runs under one label: min-max, or mean +- one standard deviation."""


def aggregate_series(
    series: Sequence[tuple[Sequence[float], Sequence[float]]], band: str = "minmax", grid: Sequence[float] | None = None
) -> tuple[list[float], list[float], list[float], list[float]]:
    """Mean and band of several runs' ``(xs, ys)`` series (seeds of one arm).

    Args:
        series: one ``(xs, ys)`` per run, ``xs`` ascending.
        band: ``minmax`` (lowest and highest run) or ``std`` (mean -+ population standard deviation).
        grid: x values to aggregate at, each run linearly interpolated there (for wall time, where runs do not
            share x values); only grid points inside every run's range are kept. None: the x values every run
            has (equal steps).

    Returns:
        ``(xs, mean, low, high)``; empty lists when the runs share no x.

    Raises:
        ValueError: an unknown band.
    """
    import numpy as np

    if band not in BANDS:
        raise ValueError(f"band must be one of {BANDS}, got {band!r}")
    runs = [(list(map(float, xs)), list(map(float, ys))) for xs, ys in series if len(xs)]
    if not runs:
        return [], [], [], []
    if grid is None:
        common = sorted(set.intersection(*(set(xs) for xs, _ in runs)))
        values = np.array([[dict(zip(xs, ys))[x] for x in common] for xs, ys in runs])
    else:
        lo, hi = max(xs[0] for xs, _ in runs), min(xs[-1] for xs, _ in runs)
        common = [float(x) for x in grid if lo <= x <= hi]
        values = np.array([np.interp(common, xs, ys) for xs, ys in runs])
    if not common:
        return [], [], [], []
    mean = values.mean(axis=0)
    if band == "minmax":
        low, high = values.min(axis=0), values.max(axis=0)
    else:
        std = values.std(axis=0)
        low, high = mean - std, mean + std
    return list(common), mean.tolist(), low.tolist(), high.tolist()


def _key_series(records: list[dict[str, Any]], key: str, axis: str) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for rec, h in zip(records, _wall_hours(records)):
        value = rec.get(PREFIX + key)
        if isinstance(value, (int, float)) and math.isfinite(value):
            xs.append(rec["global_step"] if axis == "steps" else h)
            ys.append(float(value))
    return xs, ys


def plot_compare(
    runs: Mapping[str, str | Path | Sequence[str | Path]],
    out_dir: str | Path,
    title: str | None = None,
    band: str = "minmax",
) -> list[Path]:
    """Overlay separate runs (an ablation: GRPO-RoC against plain GRPO) at equal steps and at equal wall time.

    Args:
        runs: label -> run folder (or ``metrics.jsonl``), or label -> several run folders (the seeds of one arm);
            each run is read on its own step axis.
        out_dir: where ``compare_steps.png`` (x = RL step) and ``compare_time.png`` (x = cumulative hours of
            ``time/step_s``) go, each with the panels of :data:`COMPARE`. A single run with at least
            :data:`SMOOTH_WINDOW` steps is drawn as faint step values under its trailing mean (:func:`trailing_mean`).
            Several runs under one label are drawn as the mean of their trailing means (at the steps all of them
            have; at equal wall time on a common grid of hours inside every run's span) with a shaded band
            (:func:`aggregate_series`).
        title: suffix for the figure titles.
        band: the band of a label with several runs: ``minmax`` or ``std`` (:data:`BANDS`).

    Returns:
        The written files.

    Raises:
        FileNotFoundError: a run has no metrics file.
        ValueError: fewer than one run, a run without step records, or an unknown band.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    if not runs:
        raise ValueError("no runs to compare")
    if band not in BANDS:
        raise ValueError(f"band must be one of {BANDS}, got {band!r}")
    loaded: dict[str, list[list[dict[str, Any]]]] = {}
    for label, paths in runs.items():
        group = [paths] if isinstance(paths, (str, Path)) else list(paths)
        loaded[label] = [load_runs([p]) for p in group]
    empty = [label for label, recs in loaded.items() if not recs or any(not r for r in recs)]
    if empty:
        raise ValueError(f"no step records with rollout metrics in {', '.join(empty)}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    suffix = f" - {title}" if title else ""
    colors = [f"C{i % 10}" for i in range(len(loaded))]
    band_text = "min-max" if band == "minmax" else "mean ± std"
    for axis in ("steps", "time"):
        fig, axes = plt.subplots(2, 3, figsize=(15, 7))
        for ax, (key, label) in zip(axes.flat, COMPARE):
            for color, (run_label, group) in zip(colors, loaded.items()):
                if len(group) > 1:  # seeds of one arm: the mean of their trends, the spread as a band
                    series = []
                    for records in group:
                        xs, ys = _key_series(records, key, axis)
                        series.append((xs, trailing_mean(ys, SMOOTH_WINDOW) if len(xs) >= SMOOTH_WINDOW else ys))
                    grid = None
                    if axis == "time":
                        top = max((xs[-1] for xs, _ in series if xs), default=0.0)
                        grid = np.linspace(0.0, top, 200).tolist()
                    gx, mean, low, high = aggregate_series(series, band, grid)
                    if gx:
                        ax.fill_between(gx, low, high, color=color, alpha=0.2, linewidth=0)
                        ax.plot(
                            gx,
                            mean,
                            color=color,
                            linewidth=2.2,
                            label=f"{run_label} (mean of {len(group)} runs, {band_text})",
                        )
                    continue
                xs, ys = _key_series(group[0], key, axis)
                if len(xs) >= SMOOTH_WINDOW:  # the step values faint, the trend drawn over them
                    ax.plot(xs, ys, color=color, marker="o", markersize=2, linewidth=0.8, alpha=0.35)
                    ax.plot(
                        xs,
                        trailing_mean(ys, SMOOTH_WINDOW),
                        color=color,
                        linewidth=2.2,
                        label=f"{run_label} (mean of the last {SMOOTH_WINDOW} steps)",
                    )
                elif xs:
                    ax.plot(xs, ys, color=color, marker="o", markersize=2, label=run_label)
            ax.set_title(label)
            ax.set_xlabel("RL step" if axis == "steps" else "wall time (hours)")
            ax.grid(alpha=0.3)
        # one legend for the figure, in a strip below the panels: six per-panel legends covered the curves
        handles, names = axes.flat[0].get_legend_handles_labels()
        for ax in axes.flat[1:]:
            for h, n in zip(*ax.get_legend_handles_labels()):
                if n not in names:
                    handles.append(h)
                    names.append(n)
        if handles:
            fig.legend(handles, names, loc="lower center", ncol=min(len(names), 3), frameon=False)
        fig.suptitle(("At equal steps" if axis == "steps" else "At equal wall time") + suffix)
        rows = -(-len(names) // 3) if handles else 0
        fig.tight_layout(rect=(0, 0.045 * rows, 1, 1))
        path = out / f"compare_{axis}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


__all__ = ["BANDS", "COMPARE", "aggregate_series", "load_runs", "plot_compare", "plot_runs"]


def heldout_points(eval_dirs: Sequence[str | Path]) -> dict[str, list[tuple[int, float]]]:
    """Per benchmark, ``(RL step, avg pass@1)`` of evaluations of a run's checkpoints, sorted by step.

    Each folder is a ``tirl eval`` output (``summary.json``); its step is the N of the evaluated
    ``checkpoint-N`` (0 for any other model: the run's starting point).

    Raises:
        FileNotFoundError: a folder has no ``summary.json``.
    """
    points: dict[str, list[tuple[int, float]]] = {}
    for d in eval_dirs:
        summary = read_summary(d, strict=True)
        if summary is None:
            raise FileNotFoundError(f"no {EVAL_SUMMARY} in {d} (an unfinished tirl eval run?)")
        step = checkpoint_step(summary.get("settings", {}).get("model", ""))
        for name, bench in summary.get("benchmarks", {}).items():
            if isinstance(bench.get("avg_pass1"), (int, float)):
                points.setdefault(name, []).append((step, float(bench["avg_pass1"])))
    return {name: sorted(pts) for name, pts in points.items()}


def plot_heldout(
    eval_dirs: Sequence[str | Path] | Mapping[str, Sequence[str | Path]],
    out_dir: str | Path,
    title: str | None = None,
    band: str = "minmax",
) -> Path:
    """Draw ``heldout.png``: avg pass@1 of each evaluated checkpoint against its RL step.

    Args:
        eval_dirs: ``tirl eval`` folders of one run's checkpoints (one line per benchmark), or label -> such
            folders for several runs (an ablation: one line per run and benchmark, named ``label: benchmark``;
            the starting model's evaluation can be given to each label). Where one label holds evaluations of
            several runs at the same step (the seeds of one arm), its line is their mean with a shaded band.
        out_dir: where ``heldout.png`` goes.
        title: suffix for the figure title.
        band: ``minmax`` or ``std``, the band of a label with several runs (:data:`BANDS`).

    Raises:
        FileNotFoundError: a folder has no ``summary.json``.
        ValueError: no evaluation to plot, or an unknown band.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    if band not in BANDS:
        raise ValueError(f"band must be one of {BANDS}, got {band!r}")
    groups = dict(eval_dirs) if isinstance(eval_dirs, Mapping) else {"": list(eval_dirs)}
    lines: dict[str, list[tuple[int, float]]] = {}
    for label, dirs in groups.items():
        for name, pts in sorted(heldout_points(dirs).items()):
            lines[f"{label}: {name}" if label else name] = pts
    if not lines:
        raise ValueError("no benchmark results in the given evaluation folders")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4))
    for i, (name, pts) in enumerate(lines.items()):
        by_step: dict[int, list[float]] = {}
        for step, value in pts:
            by_step.setdefault(step, []).append(100 * value)
        steps = sorted(by_step)
        if any(len(v) > 1 for v in by_step.values()):  # several runs (seeds) under one label: mean and band
            mean = [statistics.fmean(by_step[s]) for s in steps]
            if band == "minmax":
                low, high = [min(by_step[s]) for s in steps], [max(by_step[s]) for s in steps]
            else:
                sd = [statistics.pstdev(by_step[s]) for s in steps]
                low, high = [m - d for m, d in zip(mean, sd)], [m + d for m, d in zip(mean, sd)]
            ax.fill_between(steps, low, high, color=f"C{i % 10}", alpha=0.2, linewidth=0)
            most = max(len(v) for v in by_step.values())
            ax.plot(steps, mean, marker="o", color=f"C{i % 10}", label=f"{name} (mean of up to {most} runs)")
        else:
            ax.plot(steps, [by_step[s][0] for s in steps], marker="o", color=f"C{i % 10}", label=name)
    ax.set_title("Held-out accuracy of the checkpoints" + (f" - {title}" if title else ""))
    ax.set_xlabel("RL step (0 = starting model)")
    ax.set_ylabel("avg pass@1 (%)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "heldout.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
