"""The real-math experiment's results page (issue 43): the training curves and the held-out checks.

    python experiments/real-math/report.py                            # from the archive (results/, in git)
    python experiments/real-math/report.py --from runs/real-math      # the live folder of this machine

Reads, from ``SRC`` (``results/`` by default: what ``archive.py save`` keeps; or a ``runs/real-math`` folder, which
has the same layout):

- the RL runs' metrics logs (:data:`RL_RUNS`: ``SRC/RUN/metrics.jsonl`` or the archive's ``metrics.jsonl.gz``, and
  the run's ``config.yaml`` for the samples per step and the starting model), through :mod:`tirl.runs` and
  :func:`tirl.analysis.plot.load_runs` (a step logged twice, by a resume, keeps its last record);
- the SFT run's per-step loss and token accuracy (:data:`SFT_RUN`, its metrics log);
- every evaluation with a ``summary.json`` (the held-out checks, and later the full-set evaluations), each compared
  with the base model's chain-of-thought store of the same benchmark (:data:`BASE_COT`) on the problems both have
  sampled, with ``compare_slice.py``'s :func:`compare` (paired over problems, 95 % bootstrap interval).

Writes ``DST/report.md`` (``DST``: this folder by default): the held-out table (job, model, avg pass@1 [95 % CI],
paired difference against the base's CoT [95 % CI], no-answer share), the base's CoT on the checks' problems, and
a summary of each RL run and of the SFT run per :data:`BLOCK` steps; and ``DST/plots/rl_curve.png``
(:func:`plot_curves`): SFT loss, RL training reward per step with its trailing mean, no-answer share, response
length, and the held-out checks against their RL step with their intervals and the base's CoT as a line.

Nothing is run or written under ``SRC``.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tirl.analysis.ablation import markdown
from tirl.analysis.plot import PREFIX, load_runs, trailing_mean
from tirl.eval.metrics import bootstrap_interval
from tirl.runs.evals import read_summary
from tirl.runs.layout import FINAL_DIR, checkpoint_step, config_file, has_metrics
from tirl.runs.metrics import read_metrics

HERE = Path(__file__).resolve().parent
"""This experiment's folder (``experiments/real-math``)."""
RESULTS = HERE / "results"
"""The archive (``archive.py save``), kept in git; what the report reads by default."""


def _sibling(name: str) -> Any:
    """A script beside this one as a module (they are not a package; this works run as a script or loaded by a
    test)."""
    module_name = f"real_math_{name}"
    if module_name not in sys.modules:
        spec = importlib.util.spec_from_file_location(module_name, HERE / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module
        spec.loader.exec_module(module)
    return sys.modules[module_name]


compare_slice = _sibling("compare_slice")

RL_RUNS: dict[str, str] = {
    "rl-gsm8k": "GRPO-RoC on GSM8K train",
    "rl": "first attempt (2/3 GSM8K, 1/3 MATH train)",
}
"""RL run folder -> its label; the first is the run whose checkpoints the held-out checks evaluate (their x axis)."""
SFT_RUN = "sft"
"""The SFT run's folder (its metrics log has the per-step loss)."""
BASE_COT = "base-{benchmark}-cot"
"""The folder of the base model's chain-of-thought store of a benchmark (``summary.json``'s benchmark name)."""
WINDOW = 5
"""Steps in the trailing mean of the training reward (one step is 4 problems: noise around the trend)."""
BLOCK = 10
"""Steps per row of the curves' summaries in the report."""
PLOT = Path("plots") / "rl_curve.png"
REPORT = "report.md"


# ---- reading -------------------------------------------------------------------------------------------------


def _value(rec: dict[str, Any], *keys: str) -> float | None:
    """The first finite number among ``keys`` (each tried with and without :data:`PREFIX`); None if none."""
    for key in keys:
        v = rec.get(PREFIX + key, rec.get(key))
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            return float(v)
    return None


def run_settings(run: Path) -> tuple[int | None, str | None]:
    """The trajectories sampled per step and the starting model of an RL run, from its ``config.yaml`` (read by
    tirl's own loader, with the defaults of keys it does not state); ``(None, None)`` without one.

    The samples per step are counted as ``tirl.train.rollout_func`` samples them: ``problems_per_step`` problems,
    ``oversample * group_size`` each under a rule that oversamples (RoC), else ``group_size``. One process (this
    experiment's runs; TRL averages a count over processes).

    Raises:
        ValueError: the file is not a valid recipe.
    """
    path = config_file(run)
    if not path.is_file():
        return None, None
    from tirl.algo.selection import get_rule, rule_name
    from tirl.train.config import load_config

    cfg = load_config(path)
    per_problem = (
        cfg.rollout.samples_per_problem if get_rule(rule_name(cfg.roc)).oversamples else cfg.rollout.group_size
    )
    return cfg.problems_per_step * per_problem, cfg.model.name_or_path


@dataclass
class Curve:
    """An RL run's per-step series (``steps[i]`` is the step of every other list's ``i``-th value; None: not
    logged that step). ``reward``: the mean reward of all sampled trajectories (``tirl/reward/mean``, before
    selection); ``reward_kept``: of the trained ones; ``no_answer``: the share of sampled trajectories with no
    answer (``tirl/verify/no_answer`` over :attr:`samples_per_step`); ``length``: mean response tokens (model
    tokens) of the sampled ones; ``zero_std``: the share of groups whose kept rewards are all equal
    (``frac_reward_zero_std``: no gradient); ``entropy``: TRL's mean token entropy; ``step_s``: wall seconds."""

    name: str
    label: str
    samples_per_step: int | None
    start_model: str | None
    steps: list[int] = field(default_factory=list)
    reward: list[float | None] = field(default_factory=list)
    reward_kept: list[float | None] = field(default_factory=list)
    no_answer: list[float | None] = field(default_factory=list)
    length: list[float | None] = field(default_factory=list)
    zero_std: list[float | None] = field(default_factory=list)
    entropy: list[float | None] = field(default_factory=list)
    step_s: list[float | None] = field(default_factory=list)


def read_curve(run: Path, label: str) -> Curve | None:
    """The :class:`Curve` of the RL run in ``run``; None when the folder has no metrics log.

    Raises:
        ValueError: its ``config.yaml`` is not a valid recipe.
    """
    if not has_metrics(run):
        return None
    n, start = run_settings(run)
    curve = Curve(run.name, label, n, start)
    for rec in load_runs([run]):
        count = _value(rec, "verify/no_answer")
        curve.steps.append(int(rec["global_step"]))
        curve.reward.append(_value(rec, "reward/mean"))
        curve.reward_kept.append(_value(rec, "reward/kept_mean", "reward"))
        curve.no_answer.append(count / n if count is not None and n else None)
        curve.length.append(_value(rec, "length/mean"))
        curve.zero_std.append(_value(rec, "frac_reward_zero_std"))
        curve.entropy.append(_value(rec, "entropy"))
        curve.step_s.append(_value(rec, "step_time", "time/step_s"))
    return curve


@dataclass
class SftCurve:
    """The SFT run's per-step loss and token accuracy (``mean_token_accuracy``; None where not logged)."""

    steps: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    accuracy: list[float | None] = field(default_factory=list)


def read_sft(run: Path) -> SftCurve | None:
    """The per-step records of the SFT run in ``run`` that carry a ``loss`` (the trainer's closing record, with
    ``train_loss``, does not), by step, a step logged twice (a resume) keeping its last record; None without a
    metrics log or without such a record."""
    if not has_metrics(run):
        return None
    by_step: dict[int, dict[str, Any]] = {}
    for rec in read_metrics(run):
        if isinstance(rec.get("step"), (int, float)) and _value(rec, "loss") is not None:
            by_step[int(rec["step"])] = rec
    if not by_step:
        return None
    out = SftCurve()
    for step in sorted(by_step):
        out.steps.append(step)
        out.loss.append(float(_value(by_step[step], "loss")))
        out.accuracy.append(_value(by_step[step], "mean_token_accuracy"))
    return out


@dataclass
class Check:
    """One benchmark of one evaluation (a ``summary.json``): ``avg_pass1`` and ``interval`` (fractions; the
    summary's 95 % bootstrap interval, None when it has none), ``no_answer`` (``no_answer_rate``), ``step``: the
    RL step of the evaluated model on the main run's axis (0: the run's starting model; None: another model),
    ``vs_base``: ``compare_slice.Comparison`` of the base's CoT (A) and this store (B) on their common problems
    (None: no base store of the benchmark, no common problem, or this is the base's own store)."""

    job: str
    model: str
    benchmark: str
    avg_pass1: float
    interval: tuple[float, float] | None
    problems: int | None
    samples_per_problem: int | None
    no_answer: float | None
    step: int | None
    vs_base: Any = None
    problem_ids: frozenset[str] = frozenset()


def check_step(model: str, start_model: str | None, run: str, last_step: int | None) -> int | None:
    """The RL step of ``model`` on the axis of the run named ``run``: 0 for the run's starting model, N for its
    ``checkpoint-N``, ``last_step`` for its ``final``; None for any other model (the base, another run)."""
    ref = str(model).rstrip("/")
    if start_model and ref == str(start_model).rstrip("/"):
        return 0
    path = Path(ref)
    if path.parent.name != run:
        return None
    if path.name == FINAL_DIR:
        return last_step
    return checkpoint_step(path) or None


def read_checks(src: Path, curve: Curve | None) -> list[Check]:
    """Every benchmark of every evaluation in ``src`` that has a ``summary.json`` (by folder name), placed on the
    RL run ``curve``'s axis (:func:`check_step`) and compared with the base's CoT store (:data:`BASE_COT`).

    Raises:
        ValueError: a summary is not valid JSON; a store is not JSON lines.
    """
    checks: list[Check] = []
    stores: dict[Path, dict[str, dict[str, float]] | None] = {}

    def store(folder: Path) -> dict[str, dict[str, float]] | None:
        if folder not in stores:
            stores[folder] = None if compare_slice.store_file(folder) is None else compare_slice.per_problem(folder)
        return stores[folder]

    last = curve.steps[-1] if curve and curve.steps else None
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        summary = read_summary(folder, strict=True)
        if summary is None:
            continue
        model = str(summary.get("settings", {}).get("model", "?"))
        for name, bench in sorted(summary.get("benchmarks", {}).items()):
            if not isinstance(bench.get("avg_pass1"), (int, float)):
                continue
            interval = (bench.get("intervals") or {}).get("avg_pass1")
            check = Check(
                job=folder.name,
                model=model,
                benchmark=name,
                avg_pass1=float(bench["avg_pass1"]),
                interval=(float(interval[0]), float(interval[1])) if interval else None,
                problems=bench.get("num_problems"),
                samples_per_problem=bench.get("samples_per_problem"),
                no_answer=_value(bench, "no_answer_rate"),
                step=check_step(model, curve.start_model, curve.name, last) if curve else None,
            )
            base_dir = src / BASE_COT.format(benchmark=name)
            mine, base = store(folder), store(base_dir)
            if mine is not None:
                check.problem_ids = frozenset(mine)
            if folder != base_dir and mine is not None and base is not None and set(mine) & set(base):
                check.vs_base = compare_slice.compare(base, mine)
            checks.append(check)
    return checks


@dataclass(frozen=True)
class BaseLine:
    """The base's CoT avg pass@1 (a fraction, 95 % bootstrap interval) on the ``problems`` problems that its store
    and every plotted check of the benchmark share."""

    benchmark: str
    pass1: float
    low: float
    high: float
    problems: int


def base_lines(src: Path, checks: Sequence[Check]) -> dict[str, BaseLine]:
    """Per benchmark of the checks on the RL axis (``step`` not None), the base's CoT on their common problems
    (:class:`BaseLine`); a benchmark without a base store, or with no problem common to all, has none."""
    out: dict[str, BaseLine] = {}
    for name in sorted({c.benchmark for c in checks if c.step is not None}):
        base_dir = src / BASE_COT.format(benchmark=name)
        if compare_slice.store_file(base_dir) is None:
            continue
        base = compare_slice.per_problem(base_dir)
        common = set(base)
        for c in checks:
            if c.step is not None and c.benchmark == name:
                common &= c.problem_ids
        if common:
            scores = [base[p]["pass1"] for p in sorted(common)]
            low, high = bootstrap_interval(scores)  # compare_slice's interval: the same resampling
            out[name] = BaseLine(name, statistics.fmean(scores), float(low), float(high), len(common))
    return out


@dataclass
class Data:
    """Everything the report shows, read from one folder (:func:`load`)."""

    src: Path
    curves: list[Curve]
    sft: SftCurve | None
    checks: list[Check]
    base: dict[str, BaseLine]


def load(src: Path) -> Data:
    """Read the RL runs (:data:`RL_RUNS`), the SFT run and the evaluations in ``src``.

    Raises:
        ValueError: no RL run in ``src`` has a metrics log; a summary, store or recipe is unreadable.
    """
    curves = [c for name, label in RL_RUNS.items() if (c := read_curve(src / name, label)) is not None]
    if not curves:
        raise ValueError(f"no metrics log of {', '.join(RL_RUNS)} in {src}")
    main = next((c for c in curves if c.name == next(iter(RL_RUNS))), None)
    checks = read_checks(src, main)
    return Data(src, curves, read_sft(src / SFT_RUN), checks, base_lines(src, checks))


# ---- the tables ----------------------------------------------------------------------------------------------


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f} %"


def _span(low: float, high: float, signed: bool = False) -> str:
    f = "+.1f" if signed else ".1f"
    return f"[{100 * low:{f}}, {100 * high:{f}}]"


def check_rows(data: Data) -> tuple[list[str], list[list[str]]]:
    """The held-out table: a row per evaluated benchmark (job, model, benchmark, problems x samples, avg pass@1
    [95 % CI], paired difference B - A against the base's CoT in points [95 % CI] on the problems both have, the
    no-answer share), then a row per :class:`BaseLine` (the base's CoT on the checks' common problems)."""
    header = [
        "job",
        "model",
        "benchmark",
        "problems x samples",
        "avg pass@1 [95 % CI]",
        "vs base CoT, paired [95 % CI]",
        "no answer",
    ]
    rows = []
    for c in data.checks:
        cell = _pct(c.avg_pass1) + (f" {_span(*c.interval)}" if c.interval else "")
        if c.vs_base is None:
            diff = "-"
        else:
            v = c.vs_base
            diff = f"{100 * v.diff:+.1f} {_span(v.diff_low, v.diff_high, signed=True)} ({v.problems} problems)"
        size = f"{c.problems} x {c.samples_per_problem}" if c.problems else "-"
        rows.append([f"`{c.job}`", f"`{c.model}`", c.benchmark, size, cell, diff, _pct(c.no_answer)])
    for b in data.base.values():
        job = f"`{BASE_COT.format(benchmark=b.benchmark)}`"
        rows.append(
            [
                job,
                "base, chain-of-thought",
                b.benchmark,
                f"{b.problems} (the checks' problems)",
                f"{_pct(b.pass1)} {_span(b.low, b.high)}",
                "-",
                "-",
            ]
        )
    return header, rows


def _mean(values: Sequence[float | None]) -> float | None:
    xs = [v for v in values if v is not None]
    return statistics.fmean(xs) if xs else None


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def curve_rows(curve: Curve) -> tuple[list[str], list[list[str]]]:
    """An RL run's summary, a row per :data:`BLOCK` steps (1-10, 11-20, ...): the means of its series over the
    block's logged steps."""
    header = [
        "steps",
        "reward, sampled",
        "reward, trained",
        "no answer",
        "response tokens",
        "groups with equal rewards",
        "entropy",
        "step min",
    ]
    rows = []
    for first in range(1, (curve.steps[-1] if curve.steps else 0) + 1, BLOCK):
        idx = [i for i, s in enumerate(curve.steps) if first <= s < first + BLOCK]
        if not idx:
            continue

        def block(series: list[float | None], idx: list[int] = idx) -> float | None:
            return _mean([series[i] for i in idx])

        step_s = block(curve.step_s)
        rows.append(
            [
                f"{curve.steps[idx[0]]}-{curve.steps[idx[-1]]}",
                _num(block(curve.reward), 3),
                _num(block(curve.reward_kept), 3),
                _pct(block(curve.no_answer)),
                _num(block(curve.length), 0),
                _pct(block(curve.zero_std), 0),
                _num(block(curve.entropy), 2),
                _num(None if step_s is None else step_s / 60),
            ]
        )
    return header, rows


def sft_rows(sft: SftCurve) -> tuple[list[str], list[list[str]]]:
    """The SFT run's summary, a row per :data:`BLOCK` steps: mean loss and token accuracy, and the last step's."""
    header = ["steps", "loss (mean)", "token accuracy (mean)", "loss at the block's last step"]
    rows = []
    for first in range(1, sft.steps[-1] + 1, BLOCK):
        idx = [i for i, s in enumerate(sft.steps) if first <= s < first + BLOCK]
        if idx:
            rows.append(
                [
                    f"{sft.steps[idx[0]]}-{sft.steps[idx[-1]]}",
                    _num(_mean([sft.loss[i] for i in idx]), 3),
                    _num(_mean([sft.accuracy[i] for i in idx]), 3),
                    _num(sft.loss[idx[-1]], 3),
                ]
            )
    return header, rows


# ---- the plot ------------------------------------------------------------------------------------------------


def _points(steps: Sequence[int], values: Sequence[float | None], scale: float = 1.0) -> tuple[list, list]:
    pts = [(s, scale * v) for s, v in zip(steps, values) if v is not None]
    return [p[0] for p in pts], [p[1] for p in pts]


def plot_curves(data: Data, path: Path) -> Path:
    """Draw ``path`` (PNG, 1100 x 1000 pixels, matplotlib headless): SFT loss and token accuracy; each RL run's
    training reward per step (points) with its :data:`WINDOW`-step trailing mean (the main run in colour, the
    others grey); the no-answer share; the mean response length; and, below across the width, the held-out checks
    on the main run's axis (avg pass@1 with its 95 % interval) with the base's CoT on their problems as a line
    (its interval shaded). Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig = plt.figure(figsize=(11, 10), dpi=100)
    grid = fig.add_gridspec(3, 2, height_ratios=[1, 1, 1.15])
    ax_sft, ax_reward = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_none, ax_len = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    ax_held = fig.add_subplot(grid[2, :])

    if data.sft is not None:
        ax_sft.plot(data.sft.steps, data.sft.loss, "-o", color="tab:purple", markersize=3, label="loss")
        ax_sft.set_ylim(bottom=0)
        acc_x, acc_y = _points(data.sft.steps, data.sft.accuracy)
        if acc_x:
            twin = ax_sft.twinx()
            twin.plot(acc_x, acc_y, "--", color="tab:green", label="token accuracy")
            twin.set_ylabel("token accuracy")
            twin.legend(loc="center right", fontsize=8)
        ax_sft.legend(loc="upper right", fontsize=8)
    else:
        ax_sft.text(0.5, 0.5, "no SFT metrics log", ha="center", va="center", transform=ax_sft.transAxes)
    ax_sft.set_title("SFT: loss per step")
    ax_sft.set_xlabel("SFT step")
    ax_sft.set_ylabel("loss")

    colours = ["tab:blue"] + ["0.6"] * (len(data.curves) - 1)
    for curve, colour in zip(data.curves, colours):
        xs, ys = _points(curve.steps, curve.reward)
        ax_reward.plot(xs, ys, "o", color=colour, markersize=4, alpha=0.6)
        if xs:
            label = f"{curve.label}: {WINDOW}-step mean"
            ax_reward.plot(xs, trailing_mean(ys, WINDOW), "-", color=colour, linewidth=2, label=label)
        for ax, series, scale in ((ax_none, curve.no_answer, 100.0), (ax_len, curve.length, 1.0)):
            px, py = _points(curve.steps, series, scale)
            ax.plot(px, py, "-o", color=colour, markersize=3, label=curve.label)
    n = data.curves[0].samples_per_step
    ax_reward.set_title("RL: training reward per step" + (f" ({n} samples a step)" if n else ""))
    ax_reward.set_ylabel("mean reward of the sampled")
    ax_reward.set_ylim(-0.02, max(0.5, ax_reward.get_ylim()[1]))
    ax_none.set_title("RL: samples with no answer")
    ax_none.set_ylabel("% of the sampled")
    ax_none.set_ylim(0, 100)
    ax_len.set_title("RL: response length")
    ax_len.set_ylabel("model tokens (mean)")
    ax_len.set_ylim(bottom=0)
    for ax in (ax_reward, ax_none, ax_len):
        ax.set_xlabel("RL step")
        ax.legend(fontsize=8)

    placed = [c for c in data.checks if c.step is not None]
    for i, name in enumerate(sorted({c.benchmark for c in placed})):
        colour = f"C{(i + 1) % 10}"
        mine = sorted((c for c in placed if c.benchmark == name), key=lambda c: c.step)
        ys = [100 * c.avg_pass1 for c in mine]
        low = [100 * (c.avg_pass1 - c.interval[0]) if c.interval else 0.0 for c in mine]
        high = [100 * (c.interval[1] - c.avg_pass1) if c.interval else 0.0 for c in mine]
        sizes = sorted({f"{c.problems} x {c.samples_per_problem}" for c in mine})
        ax_held.errorbar(
            [c.step for c in mine],
            ys,
            yerr=[low, high],
            fmt="o",
            color=colour,
            capsize=5,
            markersize=7,
            label=f"{name}, the trained model with the tool ({', '.join(sizes)} problems x samples)",
        )
        for c, y in zip(mine, ys):
            ax_held.annotate(f"{y:.1f} %", (c.step, y), textcoords="offset points", xytext=(8, 4), fontsize=8)
        base = data.base.get(name)
        if base is not None:
            label = (
                f"{name}, base model's chain-of-thought on the same {base.problems} problems: {100 * base.pass1:.1f} %"
            )
            ax_held.axhline(100 * base.pass1, color=colour, linestyle="--", label=label)
            ax_held.axhspan(100 * base.low, 100 * base.high, color=colour, alpha=0.1, linewidth=0)
    if not placed:
        ax_held.text(0.5, 0.5, "no held-out check yet", ha="center", va="center", transform=ax_held.transAxes)
    last = max([c.steps[-1] for c in data.curves if c.steps] + [c.step for c in placed])
    ax_held.set_xlim(-1, last + 1)
    ax_held.set_ylim(bottom=0)
    ax_held.set_title(
        "Held-out checks: avg pass@1 with 95 % interval (bootstrap over problems); step 0 = the SFT model"
    )
    ax_held.set_xlabel(f"RL step of {data.curves[0].label}")
    ax_held.set_ylabel("avg pass@1 (%)")
    if placed:
        ax_held.legend(fontsize=8, loc="lower right")
    for ax in (ax_sft, ax_reward, ax_none, ax_len, ax_held):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.grid(alpha=0.3)
    fig.suptitle("real-math (issue 43): SFT and GRPO-RoC from Qwen2.5-Coder-0.5B-Instruct", fontsize=12)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


# ---- the page ------------------------------------------------------------------------------------------------


def write_report(src: Path, dst: Path) -> tuple[Path, Path]:
    """Write ``DST/report.md`` and ``DST/plots/rl_curve.png`` from the runs and evaluations in ``src`` (module
    docstring); returns both paths.

    Raises:
        ValueError: as :func:`load`.
    """
    data = load(src)
    png = plot_curves(data, dst / PLOT)
    parts = [
        "# real-math: training curves and held-out checks (written by `report.py`)\n",
        f"From `{src}`. Avg pass@1 with its 95 % bootstrap interval over problems; *vs base CoT*: the paired"
        " difference in points against the base model's chain-of-thought on the problems both stores have"
        " (`compare_slice.py`); an interval that holds 0 shows no difference.\n",
        markdown(*check_rows(data)),
        f"![training curves and held-out checks]({PLOT.as_posix()})\n",
    ]
    for curve in data.curves:
        n = (
            f"{curve.samples_per_step} sampled trajectories a step"
            if curve.samples_per_step
            else "samples a step unknown"
        )
        parts.append(
            f"## RL: {curve.label} (`{curve.name}`, {len(curve.steps)} steps logged, {n})\n\n"
            "Means per block of steps. *Sampled*: all trajectories of the step (before selection); *trained*: those"
            " kept by the selection rule; *groups with equal rewards*: kept groups whose rewards are all equal"
            " (no gradient).\n"
        )
        parts.append(markdown(*curve_rows(curve)))
    if data.sft is not None:
        parts.append(f"## SFT (`{SFT_RUN}`, {len(data.sft.steps)} steps)\n")
        parts.append(markdown(*sft_rows(data.sft)))
    dst.mkdir(parents=True, exist_ok=True)
    (dst / REPORT).write_text("\n".join(parts), encoding="utf-8")
    return dst / REPORT, png


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring); returns the exit status (2: nothing to report)."""
    p = argparse.ArgumentParser(prog="experiments/real-math/report.py", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--from", dest="src", type=Path, default=RESULTS, help="the runs and evaluations (default: results/)"
    )
    p.add_argument("--to", dest="dst", type=Path, default=HERE, help="where report.md and plots/ go (default: here)")
    args = p.parse_args(argv)
    try:
        md, png = write_report(args.src, args.dst)
    except (ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(md.read_text(encoding="utf-8"))
    print(f"wrote {md} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
