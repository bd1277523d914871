"""The real-math experiment's results page (issue 43): each recipe attempt's training curves and held-out checks.

    python experiments/real-math/report.py                            # from the archive (results/, in git)
    python experiments/real-math/report.py --from runs/real-math      # the live folder of this machine

The experiment tries the recipe several times (:data:`ATTEMPTS`: an SFT run, or none, and an RL run each). Reads,
from ``SRC`` (``results/`` by default: what ``archive.py save`` keeps; or a ``runs/real-math`` folder, which has
the same layout), for each attempt whose folders are there (the others are skipped):

- its RL run's metrics log (``SRC/RUN/metrics.jsonl`` or the archive's ``metrics.jsonl.gz``, and the run's
  ``config.yaml`` for the samples per step and the starting model), through :mod:`tirl.runs` and
  :func:`tirl.analysis.plot.load_runs` (a step logged twice, by a resume, keeps its last record);
- its SFT run's per-step loss and token accuracy (the SFT run's metrics log);

and every evaluation with a ``summary.json`` (the held-out checks, and later the full-set evaluations) and every
store of :data:`PROBES` (a store without a summary), each compared with the base model's chain-of-thought store
of the same benchmark (:data:`BASE_COT`) on the problems both have sampled, with ``compare_slice.py``'s
:func:`compare` (paired over problems, 95 % bootstrap interval). A check belongs to the attempt whose run made its
model (:func:`check_step`: the SFT run's ``final`` is step 0 of the attempt's RL axis, ``RL/checkpoint-N`` step N);
the others (the base with the tool, the probes) are listed after the attempts.

Writes ``DST/report.md`` (``DST``: this folder by default): the held-out table grouped by attempt (attempt, RL
step, job, model, avg pass@1 [95 % CI], paired difference against the base's CoT [95 % CI], no-answer share), the
base's CoT on the checks' problems, and per attempt a summary of its SFT and RL runs per :data:`BLOCK` steps; and
``DST/plots/rl_curve.png`` (:func:`plot_curves`): every attempt's SFT loss and token accuracy, RL training reward
per step with its trailing mean, no-answer share, response length, and the held-out checks against their
attempt's RL step with their intervals and the base's CoT as a line, one colour per attempt.

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
from tirl.data.benchmarks import BENCHMARKS
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


@dataclass(frozen=True)
class Attempt:
    """One attempt at the recipe: ``label`` (the report's and the plot's name for it: its number, then what it
    tried), ``sft``: the folder of its
    SFT run (None: it trained no SFT model of its own), ``rl``: the folder of its RL run.

    Its held-out checks are found by the model they evaluated (:func:`check_step`), not by their folder names:
    ``sft-gsm8k-tool-200`` (the second attempt's) and ``sft-pot-gsm8k-tool-200`` (the third's) share the prefix
    ``sft-``, while the second attempt's own two checks share none."""

    label: str
    sft: str | None
    rl: str


ATTEMPTS: tuple[Attempt, ...] = (
    # RL from the second attempt's SFT model: that model's check is the second attempt's (a check has one attempt)
    Attempt("1: RL on GSM8K + MATH, from sft", None, "rl"),
    Attempt("2: CoT, then a checking program", "sft", "rl-gsm8k"),
    Attempt("3: program-of-thought", "sft-pot", "rl-pot"),
    Attempt("4: program-of-thought, tag rows at their own rate", "sft-pot-rows", "rl-pot-rows"),
)
"""The attempts in the order they were made (the report's order; an attempt's colour is its index)."""


@dataclass(frozen=True)
class Probe:
    """A held-out store without a ``summary.json`` (not a ``tirl eval`` run): its folder, what made it (the table's
    model cell) and its benchmark (its records need not say)."""

    job: str
    model: str
    benchmark: str


PROBES: tuple[Probe, ...] = (
    Probe("pot-probe-200", "base, a program instead of text (`pot_probe.py`, run once, not called)", "gsm8k"),
)
"""Stores read beside the evaluations: pass@1 and its interval from the store itself."""
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
    """One benchmark of one evaluation (a ``summary.json``, or a :data:`PROBES` store): ``avg_pass1`` and
    ``interval`` (fractions; the 95 % bootstrap interval over problems, None when the summary has none),
    ``no_answer`` (``no_answer_rate``; None for a probe), ``attempt``: the index in :data:`ATTEMPTS` of the attempt
    whose model it evaluated and ``step``: that model's step on the attempt's RL axis (both None: another model, a
    probe), ``vs_base``: ``compare_slice.Comparison`` of the base's CoT (A) and this store (B) on their common
    problems (None: no base store of the benchmark, no common problem, or this is the base's own store)."""

    job: str
    model: str
    benchmark: str
    avg_pass1: float
    interval: tuple[float, float] | None
    problems: int | None
    samples_per_problem: int | None
    no_answer: float | None
    attempt: int | None = None
    step: int | None = None
    vs_base: Any = None
    problem_ids: frozenset[str] = frozenset()


def check_step(model: str, attempt: Attempt, start_model: str | None, last_step: int | None) -> int | None:
    """The step of ``model`` on ``attempt``'s RL axis: 0 for the attempt's SFT model (its SFT run's ``final``, or
    its RL run's starting model ``start_model``; only for an attempt with an SFT run: the first attempt's RL started
    from the second's SFT model, whose check is the second's), N for its RL run's ``checkpoint-N``, ``last_step``
    for the RL run's ``final``; None for any other model (the base, another attempt's, an SFT checkpoint) and for
    the RL run's ``final`` when its last step is unknown (no metrics log). Only folder names are compared: an
    absolute and a relative path of the same run agree."""
    ref = str(model).rstrip("/")
    path = Path(ref)
    if attempt.sft is not None and (
        (path.parent.name == attempt.sft and path.name == FINAL_DIR)
        or (start_model is not None and ref == str(start_model).rstrip("/"))
    ):
        return 0
    if path.parent.name != attempt.rl:
        return None
    if path.name == FINAL_DIR:
        return last_step
    return checkpoint_step(path) or None


class _Stores:
    """:func:`compare_slice.per_problem` of each folder read once (None: the folder has no store)."""

    def __init__(self) -> None:
        self._cache: dict[Path, dict[str, dict[str, float]] | None] = {}

    def __call__(self, folder: Path) -> dict[str, dict[str, float]] | None:
        if folder not in self._cache:
            has = compare_slice.store_file(folder) is not None
            self._cache[folder] = compare_slice.per_problem(folder) if has else None
        return self._cache[folder]


def _against_base(src: Path, check: Check, folder: Path, stores: _Stores) -> Check:
    """``check`` with its problems and its paired comparison with the base's CoT store (:data:`BASE_COT`)."""
    base_dir = src / BASE_COT.format(benchmark=check.benchmark)
    mine, base = stores(folder), stores(base_dir)
    if mine is not None:
        check.problem_ids = frozenset(mine)
    if folder != base_dir and mine is not None and base is not None and set(mine) & set(base):
        check.vs_base = compare_slice.compare(base, mine)
    return check


def read_checks(src: Path, stores: _Stores | None = None) -> list[Check]:
    """Every benchmark of every evaluation in ``src`` that has a ``summary.json`` (by folder name), compared with
    the base's CoT store; not yet placed on an attempt (:func:`load` does). Only tirl's named benchmarks
    (:data:`tirl.data.benchmarks.BENCHMARKS`: held out) are checks; an evaluation of a JSONL of training problems
    (the pass-rate filter's sampling) is left out.

    Raises:
        ValueError: a summary is not valid JSON; a store is not JSON lines.
    """
    stores = stores or _Stores()
    checks: list[Check] = []
    for folder in sorted(p for p in src.iterdir() if p.is_dir()):
        summary = read_summary(folder, strict=True)
        if summary is None:
            continue
        model = str(summary.get("settings", {}).get("model", "?"))
        for name, bench in sorted(summary.get("benchmarks", {}).items()):
            if not isinstance(bench.get("avg_pass1"), (int, float)):
                continue
            if name not in BENCHMARKS:
                # a JSONL of training problems (the pass-rate filter's sampling, `tirl data filter-pass-rate`):
                # not held out, so never a check
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
            )
            checks.append(_against_base(src, check, folder, stores))
    return checks


def read_probes(src: Path, stores: _Stores | None = None) -> list[Check]:
    """The :data:`PROBES` whose store is in ``src``: avg pass@1 the mean of the per-problem pass@1 (as the
    evaluations' summaries count it), its 95 % bootstrap interval over problems (``compare_slice``'s), the samples
    per problem when every problem has the same number (else None); compared with the base's CoT store.

    Raises:
        ValueError: a store is not JSON lines.
    """
    stores = stores or _Stores()
    out = []
    for probe in PROBES:
        if read_summary(src / probe.job, strict=True) is not None:
            continue  # it has become an evaluation: read_checks reads it
        per = stores(src / probe.job)
        if not per:
            continue
        scores = [per[p]["pass1"] for p in sorted(per)]  # compare_slice's order: the same bootstrap draws
        low, high = bootstrap_interval(scores)
        counts = {int(row["samples"]) for row in per.values()}
        check = Check(
            job=probe.job,
            model=probe.model,
            benchmark=probe.benchmark,
            avg_pass1=statistics.fmean(scores),
            interval=(float(low), float(high)),
            problems=len(per),
            samples_per_problem=counts.pop() if len(counts) == 1 else None,
            no_answer=None,
        )
        out.append(_against_base(src, check, src / probe.job, stores))
    return out


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
    """Per benchmark of ``checks`` (the attempts' checks: those plotted), the base's CoT on the problems all of them
    and its store have (:class:`BaseLine`); a benchmark without a base store, or with no problem common to all,
    has none."""
    out: dict[str, BaseLine] = {}
    for name in sorted({c.benchmark for c in checks}):
        base_dir = src / BASE_COT.format(benchmark=name)
        if compare_slice.store_file(base_dir) is None:
            continue
        base = compare_slice.per_problem(base_dir)
        common = set(base)
        for c in checks:
            if c.benchmark == name:
                common &= c.problem_ids
        if common:
            scores = [base[p]["pass1"] for p in sorted(common)]
            low, high = bootstrap_interval(scores)  # compare_slice's interval: the same resampling
            out[name] = BaseLine(name, statistics.fmean(scores), float(low), float(high), len(common))
    return out


@dataclass
class AttemptData:
    """What ``src`` holds of one attempt: ``index`` in :data:`ATTEMPTS` (its colour), its SFT and RL runs' series
    (None: no metrics log) and its held-out checks by step."""

    index: int
    attempt: Attempt
    sft: SftCurve | None
    rl: Curve | None
    checks: list[Check]


@dataclass
class Data:
    """Everything the report shows, read from one folder (:func:`load`): the attempts present (in
    :data:`ATTEMPTS`' order), the evaluations of no attempt (``other``: by folder name, then the probes), the
    base's CoT under the attempts' checks."""

    src: Path
    attempts: list[AttemptData]
    other: list[Check]
    base: dict[str, BaseLine]

    @property
    def curves(self) -> list[Curve]:
        """The RL runs present, in the attempts' order."""
        return [a.rl for a in self.attempts if a.rl is not None]

    @property
    def checks(self) -> list[Check]:
        """The attempts' checks (by attempt, then step), then the others."""
        return [c for a in self.attempts for c in a.checks] + self.other


def load(src: Path) -> Data:
    """Read each attempt's runs (:data:`ATTEMPTS`), the evaluations and the probes in ``src``; an attempt with no
    metrics log and no check there is left out. Each evaluation is given to the first attempt whose model it
    evaluated (:func:`check_step`).

    Raises:
        ValueError: no run of :data:`ATTEMPTS` in ``src`` has a metrics log; a summary, store or recipe is
            unreadable.
    """
    stores = _Stores()
    evaluations = read_checks(src, stores)
    attempts = []
    for index, attempt in enumerate(ATTEMPTS):
        rl = read_curve(src / attempt.rl, attempt.label)
        sft = read_sft(src / attempt.sft) if attempt.sft else None
        last = rl.steps[-1] if rl is not None and rl.steps else None
        start = rl.start_model if rl is not None else None
        mine = []
        for check in evaluations:
            if check.attempt is None and (step := check_step(check.model, attempt, start, last)) is not None:
                check.attempt, check.step = index, step
                mine.append(check)
        if rl is not None or sft is not None or mine:
            mine.sort(key=lambda c: (c.step, c.benchmark, c.job))
            attempts.append(AttemptData(index, attempt, sft, rl, mine))
    if not any(a.rl is not None or a.sft is not None for a in attempts):
        names = [name for a in ATTEMPTS for name in (a.sft, a.rl) if name]
        raise ValueError(f"no metrics log of {', '.join(names)} in {src}")
    other = [c for c in evaluations if c.attempt is None] + read_probes(src, stores)
    return Data(src, attempts, other, base_lines(src, [c for a in attempts for c in a.checks]))


# ---- the tables ----------------------------------------------------------------------------------------------


def _pct(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{100 * x:.{digits}f} %"


def _span(low: float, high: float, signed: bool = False) -> str:
    f = "+.1f" if signed else ".1f"
    return f"[{100 * low:{f}}, {100 * high:{f}}]"


def _step_cell(check: Check) -> str:
    if check.step is None:
        return "-"
    return "0 (SFT model)" if check.step == 0 else str(check.step)


def check_rows(data: Data) -> tuple[list[str], list[list[str]]]:
    """The held-out table: a row per evaluated benchmark, grouped by attempt and by RL step within one (attempt,
    its RL step, job, model, benchmark, problems x samples, avg pass@1 [95 % CI], paired difference B - A against
    the base's CoT in points [95 % CI] on the problems both have, the no-answer share), then the evaluations of no
    attempt (attempt and step "-"), then a row per :class:`BaseLine` (the base's CoT on the checks' common
    problems)."""
    header = [
        "attempt",
        "RL step",
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
        size = f"{c.problems} x {c.samples_per_problem or '?'}" if c.problems else "-"
        attempt = "-" if c.attempt is None else ATTEMPTS[c.attempt].label
        model = c.model if c.job in {p.job for p in PROBES} else f"`{c.model}`"
        rows.append([attempt, _step_cell(c), f"`{c.job}`", model, c.benchmark, size, cell, diff, _pct(c.no_answer)])
    for b in data.base.values():
        job = f"`{BASE_COT.format(benchmark=b.benchmark)}`"
        rows.append(
            [
                "-",
                "-",
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


COLOURS = ("tab:gray", "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple")
"""An attempt's colour in the plot, by its index in :data:`ATTEMPTS` (stable whichever attempts are present)."""
MARKERS = ("o", "s", "^", "D")
"""A benchmark's marker among the held-out checks (by its place in the sorted benchmark names)."""


def _colour(index: int) -> str:
    return COLOURS[index % len(COLOURS)]


def plot_curves(data: Data, path: Path) -> Path:
    """Draw ``path`` (PNG, 1100 x 1000 pixels, matplotlib headless), one colour per attempt (:data:`COLOURS`):
    each attempt's SFT loss (solid) and token accuracy (dashed, right axis); each RL run's training reward per step
    (points) with its :data:`WINDOW`-step trailing mean; the no-answer share; the mean response length; and, below
    across the width, the held-out checks on their attempt's RL axis (avg pass@1 with its 95 % interval; the
    attempts side by side at a step) with the base's CoT on their problems as a black line (its interval shaded).
    Returns ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import MaxNLocator

    fig = plt.figure(figsize=(11, 10), dpi=100)
    grid = fig.add_gridspec(3, 2, height_ratios=[1, 1, 1.15])
    ax_sft, ax_reward = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_none, ax_len = fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])
    ax_held = fig.add_subplot(grid[2, :])

    with_sft = [a for a in data.attempts if a.sft is not None]
    twin = ax_sft.twinx() if any(x is not None for a in with_sft for x in a.sft.accuracy) else None
    for a in with_sft:
        colour = _colour(a.index)
        ax_sft.plot(a.sft.steps, a.sft.loss, "-o", color=colour, markersize=3, label=f"{a.attempt.label}: loss")
        acc_x, acc_y = _points(a.sft.steps, a.sft.accuracy)
        if twin is not None and acc_x:
            twin.plot(acc_x, acc_y, "--", color=colour, label=f"{a.attempt.label}: token accuracy")
    if with_sft:
        ax_sft.set_ylim(bottom=0)
        if twin is not None:
            twin.set_ylabel("token accuracy (dashed)")
        # one entry per attempt (its colour; solid and dashed are named on the axes), under the panel: inside it
        # the legend covered the curves
        handles = [Line2D([], [], color=_colour(a.index), marker="o", markersize=3) for a in with_sft]
        ax_sft.legend(
            handles,
            [a.attempt.label for a in with_sft],
            loc="upper center",
            bbox_to_anchor=(0.5, -0.22),
            fontsize=7,
            frameon=False,
        )
    else:
        ax_sft.text(0.5, 0.5, "no SFT metrics log", ha="center", va="center", transform=ax_sft.transAxes)
    ax_sft.set_title("SFT: loss and token accuracy per step")
    ax_sft.set_xlabel("SFT step")
    ax_sft.set_ylabel("loss (solid)")

    with_rl = [a for a in data.attempts if a.rl is not None]
    for a in with_rl:
        curve, colour = a.rl, _colour(a.index)
        xs, ys = _points(curve.steps, curve.reward)
        ax_reward.plot(xs, ys, "o", color=colour, markersize=4, alpha=0.5)
        if xs:
            label = f"{a.attempt.label}: {WINDOW}-step mean"
            ax_reward.plot(xs, trailing_mean(ys, WINDOW), "-", color=colour, linewidth=2, label=label)
        for ax, series, scale in ((ax_none, curve.no_answer, 100.0), (ax_len, curve.length, 1.0)):
            px, py = _points(curve.steps, series, scale)
            ax.plot(px, py, "-o", color=colour, markersize=3, label=a.attempt.label)
    sizes = {a.rl.samples_per_step for a in with_rl}
    n = sizes.pop() if len(sizes) == 1 else None  # in the title only when every run samples as many
    ax_reward.set_title("RL: training reward per step" + (f" ({n} samples a step)" if n else ""))
    ax_reward.set_ylabel("mean reward of the sampled")
    ax_reward.set_ylim(-0.02, 1.0)  # a reward is in [0, 1]; the top half holds the legend
    ax_none.set_title("RL: samples with no answer")
    ax_none.set_ylabel("% of the sampled")
    ax_none.set_ylim(0, 100)
    ax_len.set_title("RL: response length")
    ax_len.set_ylabel("model tokens (mean)")
    ax_len.set_ylim(0, 1.6 * ax_len.get_ylim()[1])  # headroom: the legend sits above the curves
    for ax in (ax_reward, ax_none, ax_len):
        ax.set_xlabel("RL step")
        if with_rl:
            ax.legend(fontsize=7, loc="upper right")
        else:
            ax.text(0.5, 0.5, "no RL metrics log", ha="center", va="center", transform=ax.transAxes)

    placed = [a for a in data.attempts if a.checks]
    benchmarks = sorted({c.benchmark for a in placed for c in a.checks})
    width = 0.25  # the attempts' checks of one step side by side, not on top of each other
    for k, a in enumerate(placed):
        offset = width * (k - (len(placed) - 1) / 2)
        for name in benchmarks:
            mine = [c for c in a.checks if c.benchmark == name]
            if not mine:
                continue
            ys = [100 * c.avg_pass1 for c in mine]
            low = [100 * (c.avg_pass1 - c.interval[0]) if c.interval else 0.0 for c in mine]
            high = [100 * (c.interval[1] - c.avg_pass1) if c.interval else 0.0 for c in mine]
            xs = [c.step + offset for c in mine]
            sizes = sorted({f"{c.problems} x {c.samples_per_problem}" for c in mine})
            ax_held.errorbar(
                xs,
                ys,
                yerr=[low, high],
                fmt=MARKERS[benchmarks.index(name) % len(MARKERS)],
                color=_colour(a.index),
                capsize=5,
                markersize=7,
                label=f"{a.attempt.label}: {name} with the tool ({', '.join(sizes)} problems x samples)",
            )
            for x, y in zip(xs, ys):
                # staggered by attempt: the attempts' SFT models all sit at step 0, a quarter step apart
                ax_held.annotate(f"{y:.1f} %", (x, y), textcoords="offset points", xytext=(6, 4 + 10 * k), fontsize=8)
    for i, name in enumerate(benchmarks):
        base = data.base.get(name)
        if base is not None:
            label = f"{name}, base model's chain-of-thought on the same {base.problems} problems"
            label += f": {100 * base.pass1:.1f} %"
            style = ("--", ":", "-.")[i % 3]
            ax_held.axhline(100 * base.pass1, color="black", linestyle=style, linewidth=1, label=label)
            ax_held.axhspan(100 * base.low, 100 * base.high, color="black", alpha=0.06, linewidth=0)
    if not placed:
        ax_held.text(0.5, 0.5, "no held-out check yet", ha="center", va="center", transform=ax_held.transAxes)
    last = max([c.steps[-1] for c in data.curves if c.steps] + [c.step for a in placed for c in a.checks] + [1])
    ax_held.set_xlim(-1, last + 1)
    ax_held.set_ylim(0, ax_held.get_ylim()[1] + 3)  # room for the value labels above the highest bar
    ax_held.set_title(
        "Held-out checks: avg pass@1 with 95 % interval (bootstrap over problems); step 0 = the attempt's SFT model"
    )
    ax_held.set_xlabel("RL step of the attempt's own run")
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


def _curve_section(curve: Curve) -> list[str]:
    n = f"{curve.samples_per_step} sampled trajectories a step" if curve.samples_per_step else "samples a step unknown"
    return [
        f"### RL (`{curve.name}`, {len(curve.steps)} steps logged, {n})\n\n"
        "Means per block of steps. *Sampled*: all trajectories of the step (before selection); *trained*: those"
        " kept by the selection rule; *groups with equal rewards*: kept groups whose rewards are all equal"
        " (no gradient).\n",
        markdown(*curve_rows(curve)),
    ]


def _shown(src: Path) -> str:
    """``src`` as the page names it: relative to the checkout when inside it (the page is committed: no machine's
    own path in it), else as given."""
    root = HERE.parents[1]
    try:
        return Path(src).resolve().relative_to(root).as_posix()
    except ValueError:
        return str(src)


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
        f"From `{_shown(src)}`. Attempts present: {'; '.join(a.attempt.label for a in data.attempts)}."
        " Avg pass@1 with its 95 % bootstrap interval over problems; *RL step*: the step of the attempt's"
        " RL run whose checkpoint was evaluated (0: its SFT model); *vs base CoT*: the paired difference in"
        " points against the base model's chain-of-thought on the problems both stores have"
        " (`compare_slice.py`); an interval that holds 0 shows no difference.\n",
        markdown(*check_rows(data)),
        f"![training curves and held-out checks]({PLOT.as_posix()})\n",
    ]
    for a in data.attempts:
        runs = [f"SFT `{a.attempt.sft}`" if a.attempt.sft else "no SFT run of its own", f"RL `{a.attempt.rl}`"]
        parts.append(f"## Attempt {a.attempt.label} ({', '.join(runs)})\n")
        if a.sft is not None:
            parts.append(f"### SFT (`{a.attempt.sft}`, {len(a.sft.steps)} steps)\n")
            parts.append(markdown(*sft_rows(a.sft)))
        elif a.attempt.sft:
            parts.append(f"No metrics log of the SFT run `{a.attempt.sft}` here.\n")
        if a.rl is not None:
            parts.extend(_curve_section(a.rl))
        else:
            parts.append(f"No metrics log of the RL run `{a.attempt.rl}` here (not started, or not archived).\n")
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
