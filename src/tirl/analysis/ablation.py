"""The result table of an RL ablation (``tirl analyze ablation DIR``): arms x seeds, held-out and training.

Reads the folder that an ablation runner (``experiments/roc-ablation/run.py``) writes (``--out``, e.g.
``runs/ablation-toolfix``) or its archive (``--archive``, e.g. ``experiments/roc-ablation/results``, where
``.jsonl`` files are gzipped); the layout is the runner's:

* ``ARM-sSEED/metrics.jsonl[.gz]``: a training run's step records (:mod:`tirl.runs.metrics`);
* ``eval-ARM-sSEED-STEP/summary.json``: the held-out evaluation of its ``checkpoint-STEP``;
* ``eval-start/summary.json``: the starting model's (step 0 of every arm).

Per arm it reports, over its seeds (mean, sample standard deviation with n - 1, minimum, maximum, n):

* **held-out avg pass@1** at each evaluated step, and its difference from the baseline arm's mean (the first
  arm, plain GRPO G of G, unless ``baseline`` names another) with an exact two-sided permutation test over the
  seeds (:func:`permutation_test`: its p-value and the smallest p-value the seed counts allow) and, as a plan
  for a next experiment, the seeds per arm that would detect that difference at that spread
  (:func:`seeds_for_power`); also the
  held-out tool calls per trajectory and response length, so that a gain bought by longer answers shows;
* **wall hours to that step** (the sum of ``time/step_s``): where one arm is slower, equal steps are not equal
  compute, and the table says by how much (equal-wall-time curves: ``tirl plot --compare``); with the machines
  the arm's runs ran on (the runner's ``machine.json``), as hours compare only between runs of one machine;
* **training, mean over the run's steps**: the report's Figure 4 quantity (failing calls among the calls of
  correct trajectories) as sampled (``tool_error_in_correct/before``) and as trained on (``.../after``), tool calls
  per sampled trajectory, response length (model tokens), reward of the sampled trajectories.

A run that has not reached a step, or an evaluation not yet written, is left out of that cell (its ``n`` says
how many seeds a number rests on). Not covered: per-problem pairing across arms (the archive keeps each
evaluation's summary, not its per-problem verdicts) and any test that treats the 240 held-out samples of one
run as independent (they share one trained model: the seed is the unit of replication).
"""

from __future__ import annotations

import itertools
import json
import math
import random
import re
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tirl.runs.evals import read_summary
from tirl.runs.layout import MACHINE_FILE, eval_summary, has_metrics
from tirl.runs.metrics import read_metrics

ARM_LABELS = {"grpo": "GRPO (G of G)", "roc": "GRPO-RoC (G of 2G)", "grpo2g": "GRPO (2G of 2G)"}
"""Arm -> label of the RoC ablation's arms (plain GRPO G of G, GRPO-RoC G of 2G, plain GRPO 2G of 2G), in the
table and the runner's plots; an arm not named here is shown by its name."""

RUN_DIR = re.compile(r"^(?P<arm>[A-Za-z0-9_]+)-s(?P<seed>\d+)$")
"""A training run's folder name in an ablation (``grpo-s0``)."""
EVAL_DIR = re.compile(r"^eval-(?P<arm>[A-Za-z0-9_]+)-s(?P<seed>\d+)-(?P<step>\d+)$")
"""An evaluation's folder name (``eval-grpo-s0-10``: run ``grpo-s0``, ``checkpoint-10``)."""

TRAINING: tuple[tuple[str, str], ...] = (
    ("tool_error_in_correct/before", "failing calls in correct, sampled (Fig. 4)"),
    ("tool_error_in_correct/after", "failing calls in correct, trained on"),
    ("tool_calls/per_traj", "tool calls / sampled trajectory"),
    ("length/mean", "response length, model tokens"),
    ("reward/mean", "reward (all sampled)"),
)
"""Training metrics averaged over a run's steps: (key in ``metrics.jsonl`` without ``tirl/``, label)."""

HELDOUT: tuple[tuple[str, str], ...] = (
    ("avg_pass1", "held-out avg pass@1"),
    ("tool_calls_per_trajectory", "held-out tool calls / trajectory"),
    ("mean_response_tokens", "held-out response length, model tokens"),
)
"""Held-out summary fields reported per evaluated step: (field of ``summary.json``'s benchmark, label)."""

PREFIX = "tirl/"


def read_run(folder: Path) -> dict[str, Any]:
    """One training run's step records summarised.

    Returns:
        ``{"steps": last step, "hours_at": {step: cumulative wall hours}, "means": {key: mean over steps}}``
        (keys of :data:`TRAINING`; a key no step logged is absent).

    Raises:
        FileNotFoundError: no ``metrics.jsonl`` or ``metrics.jsonl.gz`` in ``folder``.
    """
    by_step: dict[int, dict[str, Any]] = {}
    for rec in read_metrics(folder):  # a line cut by a kill mid-write is skipped
        # a resumed run logs a step again: the last record of a step is the one its checkpoint holds
        if PREFIX + "reward/mean" in rec and isinstance(rec.get("step"), (int, float)):
            by_step[int(rec["step"])] = rec
    hours, total = {}, 0.0
    values: dict[str, list[float]] = {key: [] for key, _ in TRAINING}
    for step in sorted(by_step):
        rec = by_step[step]
        t = rec.get(PREFIX + "time/step_s")
        total += float(t) if isinstance(t, (int, float)) and math.isfinite(t) else 0.0
        hours[step] = total / 3600.0
        for key in values:
            v = rec.get(PREFIX + key)
            if isinstance(v, (int, float)) and math.isfinite(v):
                values[key].append(float(v))
    return {
        "steps": max(by_step) if by_step else 0,
        "hours_at": hours,
        "means": {k: statistics.fmean(v) for k, v in values.items() if v},
    }


def _json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(
            f"{file} is not valid JSON ({exc}); re-run the job that wrote it or remove the folder"
        ) from None
    if not isinstance(data, dict):
        raise ValueError(f"{file} holds no JSON object")
    return data


def read_machine(folder: Path) -> str | None:
    """The machine a job ran on, from the runner's ``machine.json`` (:func:`tirl.runs.machine.machine_record`
    and the job's starts), as ``CPU, N cores, native bf16`` or ``..., no native bf16``; None without a
    record (runs made before the runner wrote one).

    Raises:
        ValueError: the record is not valid JSON."""
    file = folder / MACHINE_FILE
    if not file.is_file():
        return None
    rec = _json(file)
    bf16 = "native bf16" if rec.get("native_bf16") else "no native bf16"
    return f"{rec.get('cpu', '?')}, {rec.get('cores', '?')} cores, {bf16}"


def read_eval(folder: Path, benchmark: str | None = None) -> dict[str, float] | None:
    """The :data:`HELDOUT` fields of an evaluation's ``summary.json`` for ``benchmark`` (None: the only or first
    one); None when the folder has no summary yet (an unfinished evaluation).

    Raises:
        ValueError: the summary is not valid JSON, or lacks ``benchmark``."""
    summary = read_summary(folder, strict=True)
    if summary is None:
        return None
    file = eval_summary(folder)
    benches = summary.get("benchmarks", {})
    if not benches:
        return None
    bench = benches.get(benchmark) if benchmark else next(iter(benches.values()))
    if bench is None:
        raise ValueError(f"{file} has no benchmark {benchmark!r} (it has {', '.join(benches)})")
    return {k: float(bench[k]) for k, _ in HELDOUT if isinstance(bench.get(k), (int, float))}


def stats(values: Sequence[float]) -> dict[str, float | int | None]:
    """``mean``, ``std`` (sample, n - 1; 0 for one value), ``min``, ``max``, ``n`` of ``values`` (None when empty)."""
    vals = [float(v) for v in values]
    if not vals:
        return {"mean": None, "std": None, "min": None, "max": None, "n": 0}
    return {
        "mean": statistics.fmean(vals),
        "std": statistics.stdev(vals) if len(vals) > 1 else 0.0,
        "min": min(vals),
        "max": max(vals),
        "n": len(vals),
    }


PERMUTATION_LIMIT = 200_000
"""Above this many relabelings :func:`permutation_test` samples that many at random (seed 0) instead of all."""


def permutation_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float | int] | None:
    """Exact two-sided permutation test of a difference in means between two small samples (seeds of two arms).

    The Fisher-Pitman test: under the null hypothesis the arm labels are exchangeable, so every split of the
    pooled values into groups of ``len(a)`` and ``len(b)`` is equally likely; the p-value is the share of splits
    whose ``|mean(a') - mean(b')|`` is at least the observed one (the observed split included). With few seeds the
    test cannot reach small p-values at all: ``p_min`` is the p-value of the most extreme split of these values
    (2 / C(6, 3) = 0.1 for 3 seeds against 3; 2 / C(10, 5) = 0.008 for 5 against 5), which says what the design
    can show before any result is in.

    Args:
        a, b: per-seed values of the two arms (e.g. held-out avg pass@1 in [0, 1]), each non-empty.

    Returns:
        ``{"diff": mean(a) - mean(b), "p": two-sided p-value, "p_min": smallest p-value these group sizes and
        values allow, "splits": number of splits evaluated, "exact": 1 if all were enumerated else 0}``;
        None when either sample is empty. Above :data:`PERMUTATION_LIMIT` splits a random sample of that many
        (seed 0) stands in for the enumeration.
    """
    a, b = [float(x) for x in a], [float(x) for x in b]
    if not a or not b:
        return None
    pooled, k = a + b, len(a)
    total = sum(pooled)

    def diff(idx: Sequence[int]) -> float:
        sa = sum(pooled[i] for i in idx)
        return sa / k - (total - sa) / len(b)

    n_splits = math.comb(len(pooled), k)
    if n_splits <= PERMUTATION_LIMIT:
        splits: Any = itertools.combinations(range(len(pooled)), k)
        exact = 1
    else:
        rng = random.Random(0)
        splits = (rng.sample(range(len(pooled)), k) for _ in range(PERMUTATION_LIMIT))
        exact = 0
    observed = abs(diff(range(k)))
    # a relative tolerance, so that splits equal to the observed one up to float rounding count as "as extreme"
    eps = 1e-9 * max(1.0, max(abs(x) for x in pooled))
    diffs = [abs(diff(idx)) for idx in splits]
    extreme = max(diffs)
    n = len(diffs)
    return {
        "diff": statistics.fmean(a) - statistics.fmean(b),
        "p": sum(d >= observed - eps for d in diffs) / n,
        "p_min": sum(d >= extreme - eps for d in diffs) / n,
        "splits": n,
        "exact": exact,
    }


def seeds_for_power(
    a: Sequence[float], b: Sequence[float], alpha: float = 0.05, power: float = 0.8
) -> dict[str, float | int] | None:
    """Seeds per arm that a next experiment would need to detect the observed difference, if it were the true one.

    A plan, not a result: it takes the observed difference of means ``delta`` and the pooled sample standard
    deviation ``sigma`` of the two arms' per-seed values as the truth, and returns the per-arm ``n`` at which a
    two-sided two-sample test at level ``alpha`` has the given ``power``: the normal approximation with Guenther's
    (1981) correction for the t-test, ``n = 2 ((z_{1-alpha/2} + z_power) sigma / delta)^2 + z_{1-alpha/2}^2 / 4``,
    rounded up (within one seed of the exact t-test for effect sizes of 0.5 and more: 17 per arm for
    ``delta / sigma = 1``), and never below the smallest ``n`` at which :func:`permutation_test` of ``n`` against
    ``n`` can reach ``alpha`` at all (4 for 0.05: 2 / C(8, 4) = 0.029). With 2-3 seeds per arm ``sigma`` is itself
    uncertain (with 3 seeds per arm, 4 degrees of freedom, its 95 % interval spans about 0.6x to 2.9x the
    estimate), so the answer is an order of magnitude.

    Args:
        a, b: per-seed values of the two arms, at least 2 each (a standard deviation needs two).
        alpha: two-sided level in (0, 1).
        power: wanted power in (0, 1).

    Returns:
        ``{"n": seeds per arm, "effect": delta / sigma, "sigma": pooled std}``; None when either arm has fewer
        than 2 values, or the two arms are identical (no difference to detect) or without any spread.

    Raises:
        ValueError: ``alpha`` or ``power`` outside (0, 1).
    """
    if not (0 < alpha < 1 and 0 < power < 1):
        raise ValueError(f"alpha and power must lie in (0, 1), got {alpha} and {power}")
    a, b = [float(x) for x in a], [float(x) for x in b]
    if len(a) < 2 or len(b) < 2:
        return None
    delta = statistics.fmean(a) - statistics.fmean(b)
    pooled_var = ((len(a) - 1) * statistics.variance(a) + (len(b) - 1) * statistics.variance(b)) / (len(a) + len(b) - 2)
    sigma = math.sqrt(pooled_var)
    if sigma == 0 or delta == 0:
        return None
    z_a = statistics.NormalDist().inv_cdf(1 - alpha / 2)
    z_b = statistics.NormalDist().inv_cdf(power)
    effect = abs(delta) / sigma
    n = math.ceil(2 * ((z_a + z_b) / effect) ** 2 + z_a**2 / 4)
    # the permutation test's floor: n against n must have a split extreme enough to reach alpha (2 / C(2n, n))
    floor = 2
    while 2 / math.comb(2 * floor, floor) > alpha:
        floor += 1
    return {"n": max(n, floor), "effect": effect, "sigma": sigma}


def load_ablation(root: str | Path, benchmark: str | None = None) -> dict[str, Any]:
    """Every run and evaluation of an ablation folder (module docstring), per arm and seed.

    Returns:
        ``{"start": held-out fields or None, "arms": {arm: {seed: {"run": read_run(...) or None,
        "evals": {step: held-out fields}}}}}``, arms in order of first appearance in the sorted folder names.

    Raises:
        FileNotFoundError: ``root`` is not a folder, or holds no run and no evaluation of the layout.
    """
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a folder (an ablation's --out or --archive)")
    arms: dict[str, dict[int, dict[str, Any]]] = {}
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        if m := RUN_DIR.match(d.name):
            if not has_metrics(d):
                continue  # started, no step logged yet
            slot = arms.setdefault(m["arm"], {}).setdefault(int(m["seed"]), {"run": None, "evals": {}})
            slot["run"] = read_run(d)
            slot["run"]["machine"] = read_machine(d)
        elif m := EVAL_DIR.match(d.name):
            point = read_eval(d, benchmark)
            if point is not None:
                slot = arms.setdefault(m["arm"], {}).setdefault(int(m["seed"]), {"run": None, "evals": {}})
                slot["evals"][int(m["step"])] = point
    start = read_eval(root / "eval-start", benchmark) if (root / "eval-start").is_dir() else None
    if not arms and start is None:
        raise FileNotFoundError(f"{root} holds no ablation run (ARM-sSEED/metrics.jsonl) and no evaluation")
    return {"start": start, "arms": arms}


def report(ablation: dict[str, Any], baseline: str | None = None) -> dict[str, Any]:
    """The per-arm statistics over seeds of :func:`load_ablation`'s result (module docstring).

    Args:
        ablation: :func:`load_ablation`'s result.
        baseline: the arm the held-out differences are taken against (default: ``grpo`` when present, else the
            first arm).

    Returns:
        ``{"baseline", "start", "steps": [evaluated steps], "arms": {arm: {"seeds": [...], "heldout":
        {step: {field: stats}}, "delta_pass1": {step: mean difference from the baseline or None},
        "test_pass1": {step: :func:`permutation_test` of the seeds' avg pass@1 against the baseline's, or None
        (the baseline itself, or a side without an evaluation at that step)}, "power_pass1": {step:
        :func:`seeds_for_power` of the same values, or None (the baseline itself, or fewer than 2 seeds a side)},
        "hours_at": {step: stats}, "training": {key: stats}, "steps_done": stats}}}``.

    Raises:
        ValueError: ``baseline`` names no arm of the ablation.
    """
    arms = ablation["arms"]
    if baseline is None:
        baseline = "grpo" if "grpo" in arms else next(iter(arms), None)
    elif baseline not in arms:
        raise ValueError(f"baseline arm {baseline!r} is not in the ablation (arms: {', '.join(arms)})")
    steps = sorted({s for seeds in arms.values() for slot in seeds.values() for s in slot["evals"]})
    out: dict[str, Any] = {"baseline": baseline, "start": ablation["start"], "steps": steps, "arms": {}}
    for arm, seeds in arms.items():
        runs = [slot["run"] for slot in seeds.values() if slot["run"] is not None]
        heldout = {
            step: {
                key: stats([slot["evals"][step][key] for slot in seeds.values() if key in slot["evals"].get(step, {})])
                for key, _ in HELDOUT
            }
            for step in steps
        }
        out["arms"][arm] = {
            "seeds": sorted(seeds),
            "heldout": heldout,
            "hours_at": {step: stats([r["hours_at"][step] for r in runs if step in r["hours_at"]]) for step in steps},
            "training": {key: stats([r["means"][key] for r in runs if key in r["means"]]) for key, _ in TRAINING},
            "steps_done": stats([r["steps"] for r in runs]),
            # wall hours compare only between runs of one machine: the table names the machines of each arm
            "machines": sorted({r.get("machine") or "not recorded" for r in runs}),
        }
    base = out["arms"].get(baseline, {}).get("heldout", {})

    def seed_values(seeds: dict[int, dict[str, Any]], step: int) -> list[float]:
        points = (slot["evals"].get(step, {}) for slot in seeds.values())
        return [point["avg_pass1"] for point in points if "avg_pass1" in point]

    for arm, row in out["arms"].items():
        row["delta_pass1"], row["test_pass1"], row["power_pass1"] = {}, {}, {}
        for step in steps:
            mine, ref = row["heldout"][step]["avg_pass1"]["mean"], base.get(step, {}).get("avg_pass1", {}).get("mean")
            row["delta_pass1"][step] = None if mine is None or ref is None else mine - ref
            mine_seeds, ref_seeds = seed_values(arms[arm], step), seed_values(arms[baseline], step)
            own = arm == baseline
            row["test_pass1"][step] = None if own else permutation_test(mine_seeds, ref_seeds)
            row["power_pass1"][step] = None if own else seeds_for_power(mine_seeds, ref_seeds)
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f}"


def format_stat(stat: dict[str, Any], percent: bool = False, digits: int = 2) -> str:
    """``mean ± std [min, max] (n=N)`` of :func:`stats`' result; ``n/a`` when empty, no spread for one value."""
    if stat.get("mean") is None:
        return "n/a"

    def fmt(x: float) -> str:
        return _pct(x) if percent else f"{x:.{digits}f}"

    text = fmt(stat["mean"]) + (" %" if percent else "")
    if stat["n"] > 1:
        text += f" ± {fmt(stat['std'])} [{fmt(stat['min'])}, {fmt(stat['max'])}]"
    return text + f" (n={stat['n']})"


def _test_cell(arm: str, baseline: str, test: dict[str, Any] | None) -> str:
    if arm == baseline:
        return "baseline"
    if test is None:
        return "n/a"
    return f"p = {test['p']:.2f} (≥ {test['p_min']:.2f})"


def _power_cell(arm: str, baseline: str, plan: dict[str, Any] | None) -> str:
    if arm == baseline:
        return "baseline"
    if plan is None:
        return "n/a"
    return f"{plan['n']} (effect {plan['effect']:.2f} std)"


def table_rows(rep: dict[str, Any], labels: dict[str, str] | None = None) -> tuple[list[str], list[list[str]]]:
    """The report as one table: a header (``quantity`` then one column per arm) and its rows, as text.

    Held-out rows come first (step 0 is the starting model's evaluation, the same for every arm), then wall
    hours, then the training means. Percentages for shares and pass@1; lengths as whole tokens.
    """
    labels = labels or {}
    arms = list(rep["arms"])
    header = ["quantity", *[labels.get(a, a) for a in arms]]
    rows: list[list[str]] = []
    start = rep.get("start") or {}
    if "avg_pass1" in start:
        rows.append(["held-out avg pass@1, step 0 (start)", *[f"{_pct(start['avg_pass1'])} %"] * len(arms)])
    for step in rep["steps"]:
        rows.append(
            [
                f"held-out avg pass@1, step {step}",
                *[format_stat(rep["arms"][a]["heldout"][step]["avg_pass1"], percent=True) for a in arms],
            ]
        )
        rows.append(
            [
                f"  difference from {labels.get(rep['baseline'], rep['baseline'])}, step {step}",
                *["n/a" if (d := rep["arms"][a]["delta_pass1"][step]) is None else f"{100 * d:+.1f} pp" for a in arms],
            ]
        )
        rows.append(
            [
                f"  permutation p over seeds (smallest possible), step {step}",
                *[_test_cell(a, rep["baseline"], rep["arms"][a].get("test_pass1", {}).get(step)) for a in arms],
            ]
        )
        rows.append(
            [
                f"  seeds per arm for 80 % power at this difference and spread (plan), step {step}",
                *[_power_cell(a, rep["baseline"], rep["arms"][a].get("power_pass1", {}).get(step)) for a in arms],
            ]
        )
    for step in rep["steps"][-1:]:
        rows.append(
            [
                f"held-out tool calls / trajectory, step {step}",
                *[format_stat(rep["arms"][a]["heldout"][step]["tool_calls_per_trajectory"]) for a in arms],
            ]
        )
        rows.append(
            [
                f"held-out response tokens, step {step}",
                *[format_stat(rep["arms"][a]["heldout"][step]["mean_response_tokens"], digits=0) for a in arms],
            ]
        )
    for step in rep["steps"]:
        rows.append([f"wall hours to step {step}", *[format_stat(rep["arms"][a]["hours_at"][step]) for a in arms]])
    rows.append(
        [
            "machines of the runs (wall hours compare within one)",
            *["; ".join(rep["arms"][a]["machines"]) or "n/a" for a in arms],
        ]
    )
    rows.append(["training steps done", *[format_stat(rep["arms"][a]["steps_done"], digits=0) for a in arms]])
    for key, label in TRAINING:
        percent = key.startswith("tool_error")
        digits = 0 if key.startswith("length") else 2
        rows.append(
            [
                f"{label}, mean over steps",
                *[format_stat(rep["arms"][a]["training"][key], percent=percent, digits=digits) for a in arms],
            ]
        )
    return header, rows


def markdown(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub markdown table of :func:`table_rows`' output."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


__all__ = [
    "EVAL_DIR",
    "HELDOUT",
    "RUN_DIR",
    "TRAINING",
    "format_stat",
    "load_ablation",
    "markdown",
    "permutation_test",
    "read_eval",
    "read_machine",
    "read_run",
    "report",
    "seeds_for_power",
    "stats",
    "table_rows",
]
