"""The real-math experiment's results page (experiments/real-math/report.py, issue 43) on a fixture written by
:mod:`tirl.runs`' own writers (three attempts: an RL run alone, an SFT and an RL run with checks, an SFT run alone
with its check; evaluation stores with summaries and a probe's store without one; no model): the held-out table
grouped by attempt with the paired comparison against the base's chain-of-thought (``compare_slice.py``'s), the
per-10-step summaries of each attempt, the PNG; attempts absent from the folder left out; ``archive.py save``
carrying the training logs, and the report read back from the archive equal to the one read from the live folder.
Nothing here trains or evaluates."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

from test_runs_layout import spelled_names
from tirl.runs.evals import RunStore
from tirl.runs.layout import METRICS_ARCHIVE, config_file, metrics_path
from tirl.runs.metrics import MetricsLog

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "real-math"


def _load(name: str):
    """A script of the experiment as a module (the checkout's scripts, not part of the package)."""
    spec = importlib.util.spec_from_file_location(f"real_math_{name}_under_test", EXPERIMENT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


report = _load("report")
archive = _load("archive")
compare_slice = report.compare_slice

SFT_MODEL = "runs/real-math/sft/final"
POT_MODEL = "runs/real-math/sft-pot/final"
SECOND, THIRD = report.ATTEMPTS[1].label, report.ATTEMPTS[2].label
RL_RECIPE = f"problems_per_step: 4\nrollout:\n  group_size: 4\n  oversample: 2\nmodel:\n  name_or_path: {SFT_MODEL}\n"
"""The RL run's recipe as far as the report reads it: 4 problems x (2 x 4) = 32 sampled a step, from the SFT model."""


def _store(folder: Path, model: str, correct: dict[int, int], samples: int = 2, summary: dict | None = None) -> None:
    """An evaluation store of GSM8K problems 1..len(correct) (``correct[i]``: how many of the ``samples`` of
    problem i are correct), with a ``summary.json`` when ``summary`` is given (``tirl eval``'s keys)."""
    with RunStore(folder, {"model": model}) as store:
        for i, right in correct.items():
            for k in range(samples):
                store.append(
                    {
                        "benchmark": "gsm8k",
                        "problem_id": f"gsm8k-{i:04d}",
                        "sample_index": k,
                        "correct": k < right,
                        "num_response_tokens": 300,
                        "tool_classes": ["ok"],
                    }
                )
        if summary is not None:
            store.write_summary({"settings": {"model": model}, "benchmarks": {"gsm8k": summary}})


def _bench(avg: float, interval: list[float], no_answer: float, problems: int = 10) -> dict:
    return {
        "avg_pass1": avg,
        "num_problems": problems,
        "samples_per_problem": 2,
        "no_answer_rate": no_answer,
        "intervals": {"avg_pass1": interval},
    }


def _fixture(runs: Path) -> None:
    """``runs`` laid out as ``runs/real-math`` is on the training machine."""
    # the main RL run: 12 steps (two blocks: 1-10, 11-12), sampled reward step/100, 8 of 32 with no answer
    log = MetricsLog(metrics_path(runs / "rl-gsm8k"))
    for step in range(1, 13):
        log.write(
            {
                "step": step,
                "tirl/reward/mean": step / 100,
                "tirl/reward/kept_mean": 0.2,
                "reward": 0.2,
                "tirl/verify/no_answer": 8.0,
                "tirl/length/mean": 400.0,
                "frac_reward_zero_std": 0.5,
                "entropy": 1.5,
                "step_time": 120.0,
            }
        )
    config_file(runs / "rl-gsm8k").write_text(RL_RECIPE, encoding="utf-8")
    # the first attempt: 3 steps, no recipe beside it (the no-answer share cannot be known)
    log = MetricsLog(metrics_path(runs / "rl"))
    for step in range(1, 4):
        log.write({"step": step, "tirl/reward/mean": 0.1, "tirl/verify/no_answer": 12.0, "tirl/length/mean": 500.0})
    # SFT: 12 steps of loss 0.5 - 0.02 step, step 3 logged twice (a resume: the last record counts), the closing
    # record without a per-step loss
    log = MetricsLog(metrics_path(runs / "sft"))
    for step in range(1, 13):
        if step == 3:  # the killed run's step 3, logged again after the resume
            log.write({"step": 3, "loss": 9.0, "mean_token_accuracy": 0.1})
        log.write({"step": step, "loss": 0.5 - 0.02 * step, "mean_token_accuracy": 0.9, "entropy": 0.3})
    log.write({"step": 12, "train_loss": 0.3, "train_runtime": 100.0})
    # the stores: the base's CoT (no summary: a partial full-set run) on problems 1-12, right on 1-4 -> 40 % on 1-10
    _store(runs / "base-gsm8k-cot", "qwen2.5-coder-0.5b-instruct", {i: 2 * (i <= 4) for i in range(1, 13)})
    _store(
        runs / "sft-gsm8k-tool-200",
        SFT_MODEL,
        {i: 2 * (i <= 3) for i in range(1, 11)},
        summary=_bench(0.3, [0.1, 0.5], 0.25),
    )
    _store(
        runs / "rl-gsm8k-10-gsm8k-tool-200",
        "runs/real-math/rl-gsm8k/checkpoint-10",
        {i: 2 * (i <= 5) for i in range(1, 11)},
        summary=_bench(0.5, [0.3, 0.7], 0.125),
    )
    # a summary whose store has no sample (the base with the tool, say): no paired comparison, not on the RL axis
    _store(runs / "base-gsm8k-tool", "qwen2.5-coder-0.5b-instruct", {}, summary=_bench(0.1, [0.0, 0.2], 0.4))
    _third_attempt(runs)
    # the probe: a store without a summary on problems 1-10, 2 of 2 right on 1-6 -> 60 %, +20 points on the base
    _store(runs / "pot-probe-200", "unused", {i: 2 * (i <= 6) for i in range(1, 11)})
    # a store without a summary that is not a probe (the SFT problems' sampling): not a held-out check, not shown
    _store(runs / "cot-sample", "qwen2.5-coder-0.5b-instruct", {i: 1 for i in range(1, 11)})


def _third_attempt(runs: Path) -> None:
    """The program-of-thought attempt so far: its SFT run (5 steps, loss 1.0 - 0.1 step; no RL run yet) and its
    SFT model's check on problems 1-10 (right on 1-2: 20 %)."""
    log = MetricsLog(metrics_path(runs / "sft-pot"))
    for step in range(1, 6):
        log.write({"step": step, "loss": 1.0 - 0.1 * step, "mean_token_accuracy": 0.7 + 0.02 * step})
    config_file(runs / "sft-pot").write_text("stage: real-math-sft-pot\n", encoding="utf-8")
    _store(
        runs / "sft-pot-gsm8k-tool-200",
        POT_MODEL,
        {i: 2 * (i <= 2) for i in range(1, 11)},
        summary=_bench(0.2, [0.0, 0.4], 0.05),
    )


def _held_out(text: str) -> list[list[str]]:
    """The held-out table's rows of a report (the first table), as lists of cells."""
    lines = text.splitlines()
    first = lines.index(next(line for line in lines if line.startswith("| attempt | RL step | job |")))
    rows = []
    for line in lines[first + 2 :]:
        if not line.startswith("| "):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def _rows(text: str) -> dict[str, str]:
    """The held-out table's rows of a report by their job (code quotes dropped), each as its markdown line."""
    return {row[2].strip("`"): "| " + " | ".join(row) + " |" for row in _held_out(text)}


def test_report_table_plot_and_the_archive_read_back(tmp_path, capsys):
    from PIL import Image

    runs, results = tmp_path / "runs", tmp_path / "results"
    _fixture(runs)
    live, archived = tmp_path / "live", tmp_path / "archived"
    assert report.main(["--from", str(runs), "--to", str(live)]) == 0
    text = (live / "report.md").read_text(encoding="utf-8")
    rows = _rows(text)

    # grouped by attempt, each attempt's checks by RL step; then the evaluations of no attempt; then the base
    table = _held_out(text)
    assert [(row[0], row[1], row[2]) for row in table] == [
        (SECOND, "0 (SFT model)", "`sft-gsm8k-tool-200`"),
        (SECOND, "10", "`rl-gsm8k-10-gsm8k-tool-200`"),
        (THIRD, "0 (SFT model)", "`sft-pot-gsm8k-tool-200`"),
        ("-", "-", "`base-gsm8k-tool`"),
        ("-", "-", "`pot-probe-200`"),
        ("-", "-", "`base-gsm8k-cot`"),
    ]
    sft = rows["sft-gsm8k-tool-200"]
    prefix = (
        f"| {SECOND} | 0 (SFT model) | `sft-gsm8k-tool-200` | `{SFT_MODEL}` | gsm8k | 10 x 2 | 30.0 % [10.0, 50.0] | "
    )
    assert sft.startswith(prefix + "-10.0 [")
    assert sft.endswith("(10 problems) | 25.0 % |")  # paired on the 10 problems both stores have
    rl = rows["rl-gsm8k-10-gsm8k-tool-200"]
    assert "| 50.0 % [30.0, 70.0] | +10.0 [" in rl and rl.endswith("(10 problems) | 12.5 % |")
    # the paired interval is compare_slice's own (bootstrap over the same problems)
    span = re.search(r"\+10\.0 \[([-+]\d+\.\d), ([-+]\d+\.\d)\]", rl)
    expected = compare_slice.compare(
        compare_slice.per_problem(runs / "base-gsm8k-cot"), compare_slice.per_problem(runs / rl.split("`")[1])
    )
    assert span and (float(span[1]), float(span[2])) == (
        round(100 * expected.diff_low, 1),
        round(100 * expected.diff_high, 1),
    )
    assert rows["base-gsm8k-tool"].endswith("| 10.0 % [0.0, 20.0] | - | 40.0 % |")
    pot = rows["sft-pot-gsm8k-tool-200"]
    assert f"| `{POT_MODEL}` | gsm8k | 10 x 2 | 20.0 % [0.0, 40.0] | -20.0 [" in pot and pot.endswith("| 5.0 % |")
    # the probe: pass@1 and its interval from the store itself, paired with the base's CoT; no no-answer count
    probe = rows["pot-probe-200"]
    assert "| gsm8k | 10 x 2 | 60.0 % [" in probe and "| +20.0 [" in probe and probe.endswith("(10 problems) | - |")
    assert "cot-sample" not in rows
    base = rows["base-gsm8k-cot"]
    assert base.startswith(
        "| - | - | `base-gsm8k-cot` | base, chain-of-thought | gsm8k | 10 (the checks' problems) | 40.0 % ["
    )

    # the RL summaries per 10 steps: steps 1-10 reward mean 0.055, 8 of 32 with no answer, 120 s = 2.0 min
    assert "| 1-10 | 0.055 | 0.200 | 25.0 % | 400 | 50 % | 1.50 | 2.0 |" in text
    assert "| 11-12 | 0.115 | 0.200 | 25.0 % | 400 | 50 % | 1.50 | 2.0 |" in text
    assert "| 1-3 | 0.100 | - | - | 500 | - | - | - |" in text  # the first attempt: no recipe, fewer keys
    assert "32 sampled trajectories a step" in text and "samples a step unknown" in text
    # SFT: step 3's last record, the closing record left out; loss mean of 1-10 is 0.39, at step 10 0.30
    assert "| 1-10 | 0.390 | 0.900 | 0.300 |" in text and "| 11-12 | 0.270 | 0.900 | 0.260 |" in text
    assert "### SFT (`sft`, 12 steps)" in text
    # the third attempt: its SFT run (loss mean 0.7 over steps 1-5, 0.5 at step 5), and no RL run yet
    assert "### SFT (`sft-pot`, 5 steps)" in text and "| 1-5 | 0.700 | 0.760 | 0.500 |" in text
    assert "No metrics log of the RL run `rl-pot` here" in text
    # one section per attempt, in the declared order, each with its own runs' tables
    sections = re.findall(r"^## Attempt (.+) \(", text, flags=re.M)
    assert sections == [a.label for a in report.ATTEMPTS[:3]]  # the fixture has no fourth attempt's runs
    second = text.split(f"## Attempt {SECOND}")[1].split("## Attempt")[0]
    assert "### SFT (`sft`, 12 steps)" in second and "### RL (`rl-gsm8k`, 12 steps logged" in second
    assert "plots/rl_curve.png" in text and "wrote" in capsys.readouterr().out

    png = live / "plots" / "rl_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    with Image.open(png) as image:
        assert image.format == "PNG" and image.size == (1100, 1000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50  # axes, points, lines, text: not a blank canvas
    assert max(count for count, _ in colours) < 0.95 * 1100 * 1000

    # archive.py save: the stores as before, and now the training runs' metrics (gzipped) and recipes
    archive.save(runs, results)
    assert (results / "rl-gsm8k" / METRICS_ARCHIVE).is_file() and config_file(results / "rl-gsm8k").is_file()
    assert (results / "sft" / METRICS_ARCHIVE).is_file() and (results / "rl" / METRICS_ARCHIVE).is_file()
    assert (results / "sft-pot" / METRICS_ARCHIVE).is_file() and config_file(results / "sft-pot").is_file()
    assert compare_slice.store_file(results / "pot-probe-200") is not None  # the probe's store, gzipped
    assert not (results / "base-gsm8k-cot" / METRICS_ARCHIVE).exists()  # an evaluation has no metrics log
    assert report.main(["--from", str(results), "--to", str(archived)]) == 0
    from_archive = (archived / "report.md").read_text(encoding="utf-8")
    assert from_archive.replace(str(results), "SRC") == text.replace(str(runs), "SRC")


def test_checks_are_placed_on_their_attempts_steps(tmp_path):
    _fixture(tmp_path)
    data = report.load(tmp_path)
    placed = {c.job: (c.attempt, c.step) for c in data.checks}
    assert placed == {
        "sft-gsm8k-tool-200": (1, 0),  # not the first attempt's, though its RL run started from that model
        "rl-gsm8k-10-gsm8k-tool-200": (1, 10),
        "sft-pot-gsm8k-tool-200": (2, 0),
        "base-gsm8k-tool": (None, None),
        "pot-probe-200": (None, None),
    }
    assert [(a.index, a.sft is not None, a.rl is not None) for a in data.attempts] == [
        (0, False, True),
        (1, True, True),
        (2, True, False),
    ]
    assert [c.name for c in data.curves] == ["rl", "rl-gsm8k"] and data.curves[1].samples_per_step == 32
    assert data.curves[1].no_answer[0] == 0.25 and data.curves[0].no_answer == [None] * 3
    assert data.attempts[2].sft.steps == [1, 2, 3, 4, 5] and data.attempts[0].checks == []
    # the base's CoT on the problems every attempt's check has (1-10), not the probe's
    line = data.base["gsm8k"]
    assert (line.pass1, line.problems) == (0.4, 10) and line.low <= 0.4 <= line.high


def test_an_evaluation_of_training_problems_is_no_check(tmp_path):
    """The pass-rate filter's sampling (``tirl eval`` on a JSONL of training problems, with a summary) is not
    held out: left out of the checks, while an evaluation of a named benchmark by the same model is one."""
    _fixture(tmp_path)
    with RunStore(tmp_path / "sft-pot-passrate", {"model": POT_MODEL}) as store:
        store.append(
            {"benchmark": "rl-gsm8k-problems", "problem_id": "gsm8k-train-1", "sample_index": 0, "correct": True}
        )
        store.write_summary(
            {"settings": {"model": POT_MODEL}, "benchmarks": {"rl-gsm8k-problems": _bench(1.0, [1.0, 1.0], 0.0, 1)}}
        )
    jobs = [c.job for c in report.load(tmp_path).checks]
    assert "sft-pot-passrate" not in jobs and "sft-pot-gsm8k-tool-200" in jobs


def test_attempts_absent_from_the_folder_are_left_out(tmp_path, capsys):
    """A clone with only the third attempt's SFT run and check (no RL run at all): its section and row only, and
    the plot drawn with empty RL panels."""
    from PIL import Image

    runs = tmp_path / "runs"
    _third_attempt(runs)
    _store(runs / "base-gsm8k-cot", "qwen2.5-coder-0.5b-instruct", {i: 2 * (i <= 4) for i in range(1, 13)})
    data = report.load(runs)
    assert [a.attempt.label for a in data.attempts] == [THIRD] and data.curves == []
    assert report.main(["--from", str(runs), "--to", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert [row[2] for row in _held_out(text)] == ["`sft-pot-gsm8k-tool-200`", "`base-gsm8k-cot`"]
    assert re.findall(r"^## Attempt (.+) \(", text, flags=re.M) == [THIRD]
    assert "`rl-gsm8k`" not in text and "`sft`" not in text
    with Image.open(tmp_path / "out" / "plots" / "rl_curve.png") as image:
        assert image.size == (1100, 1000)
        colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 50


SECOND_ATTEMPT, FIRST_ATTEMPT = report.ATTEMPTS[1], report.ATTEMPTS[0]


@pytest.mark.parametrize(
    ("model", "attempt", "step"),
    [
        (SFT_MODEL, SECOND_ATTEMPT, 0),
        (SFT_MODEL + "/", SECOND_ATTEMPT, 0),
        ("/abs/runs/real-math/sft/final", SECOND_ATTEMPT, 0),  # by folder names: absolute or relative
        ("runs/real-math/sft/checkpoint-10", SECOND_ATTEMPT, None),  # an SFT checkpoint: not on the RL axis
        ("runs/real-math/rl-gsm8k/checkpoint-20", SECOND_ATTEMPT, 20),
        ("/abs/runs/real-math/rl-gsm8k/final", SECOND_ATTEMPT, 12),
        ("runs/real-math/rl/checkpoint-10", SECOND_ATTEMPT, None),  # another attempt's checkpoint
        ("runs/real-math/rl/checkpoint-10", FIRST_ATTEMPT, 10),
        (SFT_MODEL, FIRST_ATTEMPT, None),  # its starting model, but the attempt has no SFT run of its own
        (POT_MODEL, SECOND_ATTEMPT, None),  # the prefix sft- is not the folder sft
        ("qwen2.5-coder-0.5b-instruct", SECOND_ATTEMPT, None),
        ("runs/real-math/rl-gsm8k/incomplete-checkpoint-4", SECOND_ATTEMPT, None),
    ],
)
def test_check_step(model, attempt, step):
    assert report.check_step(model, attempt, SFT_MODEL, 12) == step


def test_the_rl_runs_final_without_a_log_is_no_step():
    assert report.check_step("runs/real-math/rl-gsm8k/final", SECOND_ATTEMPT, None, None) is None


def test_a_gzipped_store_reads_as_the_plain_one(tmp_path):
    runs, results = tmp_path / "runs", tmp_path / "results"
    _store(runs / "job", "m", {1: 1, 2: 2, 3: 0})
    archive.save(runs, results)
    plain, packed = compare_slice.per_problem(runs / "job"), compare_slice.per_problem(results / "job")
    assert plain == packed and plain["gsm8k-0001"]["pass1"] == 0.5
    with pytest.raises(FileNotFoundError):
        compare_slice.per_problem(tmp_path / "nothing")


def test_report_without_rl_runs_says_so(tmp_path, capsys):
    assert report.main(["--from", str(tmp_path), "--to", str(tmp_path / "r")]) == 2
    runs = ", ".join(dict.fromkeys(r for a in report.ATTEMPTS for r in (a.sft, a.rl) if r))
    assert runs.startswith("rl, sft, rl-gsm8k, sft-pot, rl-pot")
    assert f"no metrics log of {runs} in" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("script", ["report.py", "compare_slice.py", "archive.py"])
def test_the_scripts_spell_no_run_file_name(script):
    """The rule of tests/test_runs_layout.py for src/tirl, applied to the experiment's scripts."""
    assert spelled_names((EXPERIMENT / script).read_text(encoding="utf-8")) == []
