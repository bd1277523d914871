"""``tirl analyze ablation``: per-arm statistics over seeds from an ablation folder (plain or archived)."""

from __future__ import annotations

import gzip
import itertools
import json
import statistics
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.analysis import ablation as ablation_report
from tirl.analysis.ablation import load_ablation, permutation_test, report, seeds_for_power, table_rows
from tirl.cli.main import app

# arm -> seed -> (held-out avg pass@1 at step 10, at step 20, seconds a step, failing-call share sampled, after)
FIXTURE = {
    "grpo": {0: (0.30, 0.40, 60.0, 0.20, 0.20), 1: (0.32, 0.36, 70.0, 0.10, 0.10)},
    "roc": {0: (0.35, 0.50, 90.0, 0.30, 0.05), 1: (0.37, 0.44, 110.0, 0.20, 0.03), 2: (0.33, None, 100.0, 0.25, 0.0)},
}


def _write_run(folder: Path, step_s: float, before: float, after: float, gz: bool, steps: int = 20) -> None:
    folder.mkdir(parents=True)
    lines = []
    for step in range(1, steps + 1):
        rec = {
            "step": step,
            "tirl/reward/mean": 0.5,
            "tirl/time/step_s": step_s,
            "tirl/tool_error_in_correct/before": before,
            "tirl/tool_error_in_correct/after": after,
            "tirl/tool_calls/per_traj": 1.5,
            "tirl/length/mean": 200.0,
        }
        lines.append(json.dumps(rec))
    # a killed run had logged step 3 before its last checkpoint; resumed, it logs step 3 again: the last wins
    lines.insert(2, json.dumps({"step": 3, "tirl/reward/mean": 0.5, "tirl/time/step_s": 10_000.0}))
    text = "\n".join(lines) + "\n{broken"  # a line cut by a kill
    if gz:
        with gzip.open(folder / "metrics.jsonl.gz", "wt", encoding="utf-8") as fh:
            fh.write(text)
    else:
        (folder / "metrics.jsonl").write_text(text, encoding="utf-8")


def _write_eval(folder: Path, pass1: float) -> None:
    folder.mkdir(parents=True)
    bench = {"avg_pass1": pass1, "tool_calls_per_trajectory": 1.2, "mean_response_tokens": 180.0}
    (folder / "summary.json").write_text(json.dumps({"benchmarks": {"toolfix": bench}}), encoding="utf-8")


@pytest.fixture(params=[False, True], ids=["out", "archive"])
def ablation(tmp_path, request) -> Path:
    root = tmp_path / "ablation"
    _write_eval(root / "eval-start", 0.25)
    for arm, seeds in FIXTURE.items():
        for seed, (p10, p20, step_s, before, after) in seeds.items():
            _write_run(root / f"{arm}-s{seed}", step_s, before, after, gz=request.param, steps=20 if p20 else 12)
            _write_eval(root / f"eval-{arm}-s{seed}-10", p10)
            if p20 is not None:
                _write_eval(root / f"eval-{arm}-s{seed}-20", p20)
    machine = {"cpu": "AMD EPYC", "cores": 2, "native_bf16": True}
    (root / "roc-s0" / "machine.json").write_text(json.dumps(machine), encoding="utf-8")
    (root / "eval-roc-s2-20").mkdir()  # an evaluation still running: no summary yet
    (root / "grpo2g-s0").mkdir()  # a run that has logged no step yet
    (root / "plots").mkdir()
    return root


def test_report_statistics_over_seeds(ablation):
    rep = report(load_ablation(ablation))
    assert rep["baseline"] == "grpo" and rep["steps"] == [10, 20]
    assert list(rep["arms"]) == ["grpo", "roc"]  # grpo2g-s0 has no step logged: no arm yet
    assert rep["start"]["avg_pass1"] == 0.25
    roc = rep["arms"]["roc"]
    p10 = roc["heldout"][10]["avg_pass1"]
    assert p10["n"] == 3 and p10["mean"] == pytest.approx(0.35)
    assert p10["std"] == pytest.approx(statistics.stdev([0.35, 0.37, 0.33]))
    assert (p10["min"], p10["max"]) == (0.33, 0.37)
    assert roc["heldout"][20]["avg_pass1"]["n"] == 2  # seed 2 has not been evaluated at step 20
    assert roc["delta_pass1"][20] == pytest.approx(0.47 - 0.38)
    assert rep["arms"]["grpo"]["delta_pass1"][10] == pytest.approx(0.0)
    # wall hours: the sum of the steps' time/step_s, the resumed step's last record counted once
    hours = roc["hours_at"][10]
    assert hours["mean"] == pytest.approx(statistics.fmean([90.0, 110.0, 100.0]) * 10 / 3600)
    assert roc["hours_at"][20]["n"] == 2  # seed 2 stopped at step 12
    assert roc["steps_done"]["min"] == 12 and roc["steps_done"]["max"] == 20
    before = roc["training"]["tool_error_in_correct/before"]
    after = roc["training"]["tool_error_in_correct/after"]
    assert before["mean"] == pytest.approx(0.25) and after["mean"] == pytest.approx(statistics.fmean([0.05, 0.03, 0.0]))


def _p_by_all_orders(a: list[float], b: list[float]) -> float:
    """The permutation p-value by brute force over every ordering of the pooled values (n! of them)."""
    pooled, k = a + b, len(a)
    observed = abs(statistics.fmean(a) - statistics.fmean(b))
    orders = list(itertools.permutations(pooled))
    hits = sum(abs(statistics.fmean(o[:k]) - statistics.fmean(o[k:])) >= observed - 1e-12 for o in orders)
    return hits / len(orders)


def test_permutation_test_over_seeds(monkeypatch):
    # fully separated 3 against 3: only the observed split and its mirror are as extreme, p = 2 / C(6, 3)
    sep = permutation_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
    assert sep == {"diff": -3.0, "p": 0.1, "p_min": 0.1, "splits": 20, "exact": 1}
    # the ablation's step-20 numbers so far (GRPO-RoC 2 seeds, GRPO 3): the same p as every ordering gives
    roc, grpo = [0.346, 0.396], [0.379, 0.317, 0.275]
    test = permutation_test(roc, grpo)
    assert test["p"] == pytest.approx(_p_by_all_orders(roc, grpo))
    assert test["diff"] == pytest.approx(statistics.fmean(roc) - statistics.fmean(grpo))
    assert test["p_min"] == pytest.approx(1 / 10) and test["splits"] == 10  # 2 vs 3: one most extreme split
    assert 0.1 < test["p"] < 1.0
    # no difference at all: every split is as extreme as the observed one
    assert permutation_test([0.3, 0.3], [0.3, 0.3])["p"] == 1.0
    assert permutation_test([], [0.3]) is None and permutation_test([0.3], []) is None
    # above the limit a seeded random sample of splits stands in, close to the exact value
    a, b = [0.1, 0.5, 0.2, 0.6, 0.3], [0.4, 0.9, 0.7, 0.8, 0.35]
    exact = permutation_test(a, b)
    monkeypatch.setattr(ablation_report, "PERMUTATION_LIMIT", 50)
    sampled = permutation_test(a, b)
    assert exact["exact"] == 1 and exact["splits"] == 252
    assert sampled["exact"] == 0 and sampled["splits"] == 50
    assert sampled["p"] == pytest.approx(exact["p"], abs=0.2)


def _arms_with_effect(effect: float) -> tuple[list[float], list[float]]:
    """Two arms of 2 seeds whose difference of means is ``effect`` pooled standard deviations (each std sqrt 2)."""
    delta = effect * 2**0.5
    return [delta + 1.0, delta - 1.0], [1.0, -1.0]


def test_seeds_for_power_matches_the_t_test_tables():
    # Cohen (1988), Table 2.4.1: two-sided alpha 0.05, power 0.8, per-group n of the exact two-sample t-test
    for effect, n in ((0.5, 64), (0.8, 26), (1.0, 17)):
        plan = seeds_for_power(*_arms_with_effect(effect))
        assert plan["n"] == n and plan["effect"] == pytest.approx(effect) and plan["sigma"] == pytest.approx(2**0.5)
    # the sign of the difference does not matter, a smaller effect needs more seeds, a stricter level too
    lo, hi = _arms_with_effect(0.8)
    assert seeds_for_power(hi, lo)["n"] == 26
    assert seeds_for_power(*_arms_with_effect(0.4))["n"] > 64
    assert seeds_for_power(*_arms_with_effect(1.0), alpha=0.01)["n"] > 17
    assert seeds_for_power(*_arms_with_effect(1.0), power=0.9)["n"] > 17
    # a huge effect is floored where n against n can reach p < 0.05 at all: 2 / C(8, 4) = 0.029, 2 / C(6, 3) = 0.1
    assert seeds_for_power(*_arms_with_effect(10.0))["n"] == 4
    assert permutation_test([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0])["p_min"] < 0.05
    assert permutation_test([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])["p_min"] > 0.05
    # nothing to plan from: one seed a side, no spread, no difference
    assert seeds_for_power([0.3], [0.2, 0.4]) is None
    assert seeds_for_power([0.3, 0.3], [0.2, 0.2]) is None
    assert seeds_for_power([0.2, 0.4], [0.4, 0.2]) is None
    with pytest.raises(ValueError, match="alpha and power"):
        seeds_for_power([0.2, 0.4], [0.1, 0.3], alpha=1.5)


def test_report_tests_each_arm_against_the_baseline(ablation):
    rep = report(load_ablation(ablation))
    assert rep["arms"]["grpo"]["test_pass1"][20] is None  # the baseline is not tested against itself
    roc20 = rep["arms"]["roc"]["test_pass1"][20]
    assert roc20 == permutation_test([0.50, 0.44], [0.40, 0.36])
    assert roc20["splits"] == 6 and roc20["p"] == pytest.approx(2 / 6)  # separated: the split and its mirror
    header, rows = table_rows(rep)
    cells = {r[0]: r[1:] for r in rows}["  permutation p over seeds (smallest possible), step 20"]
    assert cells == ["baseline", "p = 0.33 (≥ 0.33)"]
    plan = rep["arms"]["roc"]["power_pass1"][20]
    assert plan == seeds_for_power([0.50, 0.44], [0.40, 0.36]) and rep["arms"]["grpo"]["power_pass1"][20] is None
    cells = {r[0]: r[1:] for r in rows}["  seeds per arm for 80 % power at this difference and spread (plan), step 20"]
    assert cells == ["baseline", f"{plan['n']} (effect {plan['effect']:.2f} std)"]


def test_baseline_choice_and_errors(ablation, tmp_path):
    rep = report(load_ablation(ablation), baseline="roc")
    assert rep["arms"]["grpo"]["delta_pass1"][10] == pytest.approx(0.31 - 0.35)
    with pytest.raises(ValueError, match="grpo2g"):
        report(load_ablation(ablation), baseline="grpo2g")
    with pytest.raises(FileNotFoundError, match="no ablation run"):
        load_ablation(tmp_path / "ablation" / "plots")
    with pytest.raises(ValueError, match="no benchmark 'aime'"):
        load_ablation(ablation, benchmark="aime")
    (ablation / "eval-grpo-s0-10" / "summary.json").write_text('{"benchmarks": {', encoding="utf-8")  # cut
    with pytest.raises(ValueError, match="summary.json is not valid JSON"):
        load_ablation(ablation)


def test_table_rows_read_as_text(ablation):
    header, rows = table_rows(report(load_ablation(ablation)), {"grpo": "GRPO (G of G)", "roc": "GRPO-RoC"})
    assert header == ["quantity", "GRPO (G of G)", "GRPO-RoC"]
    by_name = {r[0]: r[1:] for r in rows}
    assert by_name["held-out avg pass@1, step 0 (start)"] == ["25.0 %", "25.0 %"]
    assert by_name["held-out avg pass@1, step 10"][1] == "35.0 % ± 2.0 [33.0, 37.0] (n=3)"
    assert by_name["  difference from GRPO (G of G), step 20"] == ["+0.0 pp", "+9.0 pp"]
    machines = by_name["machines of the runs (wall hours compare within one)"]
    assert machines == ["not recorded", "AMD EPYC, 2 cores, native bf16; not recorded"]
    assert by_name["failing calls in correct, trained on, mean over steps"][0] == "15.0 % ± 7.1 [10.0, 20.0] (n=2)"


def test_cli_prints_table_and_writes_json_and_markdown(ablation, tmp_path):
    md = tmp_path / "table.md"
    result = CliRunner().invoke(app, ["analyze", "ablation", str(ablation), "--markdown", str(md)])
    assert result.exit_code == 0, result.output
    assert "GRPO-RoC (G of 2G)" in result.output and "held-out avg pass@1, step 20" in result.output
    assert "35.0 % ± 2.0" in result.output
    data = json.loads((ablation / "ablation_report.json").read_text())
    assert data["arms"]["roc"]["heldout"]["10"]["avg_pass1"]["n"] == 3
    text = md.read_text()
    assert text.startswith("| quantity | GRPO (G of G) | GRPO-RoC (G of 2G) |")
    assert "| wall hours to step 20 |" in text
    start_only = tmp_path / "start-only"
    _write_eval(start_only / "eval-start", 0.146)
    early = CliRunner().invoke(app, ["analyze", "ablation", str(start_only)])
    assert early.exit_code == 0 and "no training run has logged a step yet" in early.output
    assert "start model's held-out avg pass@1: 14.6 %" in early.output
    bad = CliRunner().invoke(app, ["analyze", "ablation", str(tmp_path / "missing")])
    assert bad.exit_code == 2 and "not a folder" in bad.output
    (ablation / "grpo-s0" / "machine.json").write_text("[1, 2]", encoding="utf-8")
    broken = CliRunner().invoke(app, ["analyze", "ablation", str(ablation)])
    assert broken.exit_code == 2 and "holds no JSON object" in broken.output


def test_the_committed_archive_reads_as_its_done_markers_say():
    """The archive kept in git (experiments/roc-ablation/results) stays readable by the report as it grows: every
    archived run and evaluation shows up in its arm's cells, and nothing else does."""
    archive = Path(__file__).resolve().parents[1] / "experiments" / "roc-ablation" / "results"
    if not (archive / "done").is_dir():
        pytest.skip("no ablation archived yet")
    markers = {p.name for p in (archive / "done").iterdir()}
    rep = report(load_ablation(archive))
    if "eval-start" in markers:
        assert 0.0 <= rep["start"]["avg_pass1"] <= 1.0
    runs = {m.removeprefix("train-") for m in markers if m.startswith("train-")}
    assert {f"{arm}-s{seed}" for arm, row in rep["arms"].items() for seed in row["seeds"]} >= runs
    for arm, row in rep["arms"].items():
        assert row["steps_done"]["n"] == len([r for r in runs if r.startswith(f"{arm}-s")])
        for step in rep["steps"]:
            evals = [m for m in markers if m.startswith(f"eval-{arm}-s") and m.endswith(f"-{step}")]
            assert row["heldout"][step]["avg_pass1"]["n"] == len(evals)
