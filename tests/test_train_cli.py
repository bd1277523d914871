"""`tirl train rl`, `tirl plot`, the metrics log and the stage-3 hard-subset filter (no model needed)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.algo.metrics import percentile
from tirl.analysis.plot import SMOOTH_WINDOW, load_runs, plot_runs, trailing_mean
from tirl.cli.main import app
from tirl.data.hard_subset import HardSubsetConfig, filter_hard
from tirl.data.problem import Problem
from tirl.data.training import load_jsonl_problems
from tirl.runs.metrics import MetricsLog, read_metrics

CONFIGS = Path(__file__).resolve().parent.parent / "configs" / "rl"
runner = CliRunner()


def test_train_rl_prints_resolved_config_with_overrides():
    result = runner.invoke(
        app,
        [
            "train",
            "rl",
            "--config",
            str(CONFIGS / "cpu-tiny-smoke.yaml"),
            "--print-config",
            "rollout.group_size=4",
            "optim.learning_rate=3e-5",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "group_size: 4" in result.output and "learning_rate: 3.0e-05" in result.output


def test_train_rl_rejects_bad_override_with_exit_2():
    result = runner.invoke(
        app, ["train", "rl", "--config", str(CONFIGS / "cpu-tiny-smoke.yaml"), "rollout.gruop_size=4"]
    )
    assert result.exit_code == 2
    assert "unknown key" in result.output


def test_train_rl_missing_config_exit_2(tmp_path):
    result = runner.invoke(app, ["train", "rl", "--config", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2


# ---------------------------------------------------------------------------------------------------------------
# metrics log and plots


def _write_run(folder: Path, stage: str, steps: int, reward0: float) -> None:
    log = MetricsLog(folder / "metrics.jsonl")
    for s in range(1, steps + 1):
        log.write(
            {
                "step": s,
                "stage": stage,
                "loss": 0.1,
                "tirl/reward/mean": reward0 + 0.01 * s,
                "tirl/reward/kept_mean": reward0,
                "tirl/accuracy": reward0,
                "tirl/tool_error_in_correct/before": 0.3,
                "tirl/tool_error_in_correct/after": 0.2,
                "tirl/length/mean": 100.0 + s,
                "tirl/length/p90": 150.0,
                "tirl/p_format/mean": 0.5,
                "tirl/truncation_rate": 0.1,
                "tirl/time/rollout_s": 3.0,
                "tirl/time/update_s": float("nan"),
            }
        )
    log.write({"step": steps, "train_runtime": 9.0})  # the trainer's final record: not a step record


def test_metrics_log_truncates_steps_after_resume_point(tmp_path):
    _write_run(tmp_path, "s1", 5, 0.2)
    log = MetricsLog(tmp_path / "metrics.jsonl")
    assert log.truncate_after(3) == 3  # steps 4, 5 and the final record at step 5
    assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3]
    assert read_metrics(tmp_path)[0]["tirl/time/update_s"] is None  # NaN is written as null


def test_plot_table_writes_one_markdown_row_per_step(tmp_path):
    _write_run(tmp_path / "a", "stage1", 3, 0.1)
    _write_run(tmp_path / "b", "stage2", 2, 0.5)
    table = tmp_path / "t" / "steps.md"
    result = runner.invoke(
        app, ["plot", str(tmp_path / "a"), str(tmp_path / "b"), "--out", str(tmp_path / "p"), "--table", str(table)]
    )
    assert result.exit_code == 0, result.output
    lines = table.read_text().splitlines()
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:3] == ["step", "reward", "kept reward"] and len(lines) == 2 + 5
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[2:]]
    assert [r[0] for r in rows] == ["1", "2", "3", "4", "5"]
    assert rows[0][1] == "0.110" and rows[4][1] == "0.520"  # reward0 + 0.01 * step, stages chained
    assert rows[0][header.index("update s")] == "-"  # NaN / not logged


def test_heldout_curve_reads_checkpoint_steps_from_eval_summaries(tmp_path):
    import json

    import matplotlib.image

    from tirl.analysis.plot import heldout_points

    def write_eval(name: str, model: str, pass1: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(
            json.dumps(
                {
                    "settings": {"model": model},
                    "benchmarks": {"toolmath": {"avg_pass1": pass1}, "gsm8k": {"avg_pass1": pass1 / 2}},
                }
            )
        )
        return d

    dirs = [
        write_eval("e20", "runs/x/checkpoint-20", 0.3),
        write_eval("e0", "qwen2.5-coder-0.5b-tirl-sft", 0.05),
        write_eval("e10", "runs/x/checkpoint-10/", 0.1),
    ]
    points = heldout_points(dirs)
    assert points["toolmath"] == [(0, 0.05), (10, 0.1), (20, 0.3)]
    assert points["gsm8k"][-1] == (20, 0.15)
    _write_run(tmp_path / "run", "s", 2, 0.1)
    result = runner.invoke(
        app,
        ["plot", str(tmp_path / "run"), "--out", str(tmp_path / "p")] + [a for d in dirs for a in ("--eval", str(d))],
    )
    assert result.exit_code == 0, result.output
    image = matplotlib.image.imread(tmp_path / "p" / "heldout.png")
    assert image.shape[0] > 300 and image.shape[1] > 600 and image[..., :3].std() > 0.05  # drawn, not blank
    (tmp_path / "unfinished").mkdir()
    with pytest.raises(FileNotFoundError, match="summary.json"):
        heldout_points([tmp_path / "unfinished"])


def test_compare_draws_one_heldout_line_per_run(tmp_path):
    import json

    from matplotlib.colors import to_rgb

    def write_eval(name: str, model: str, pass1: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(
            json.dumps({"settings": {"model": model}, "benchmarks": {"toolmath": {"avg_pass1": pass1}}})
        )
        return d

    start = write_eval("e0", "sft", 0.3)
    a40, b40 = write_eval("a40", "runs/a/checkpoint-40", 0.5), write_eval("b40", "runs/b/checkpoint-40", 0.7)
    _write_run(tmp_path / "a", "a", 3, 0.1)
    _write_run(tmp_path / "b", "b", 3, 0.1)
    base = ["plot", "--compare", f"A={tmp_path / 'a'}", f"B={tmp_path / 'b'}"]
    one = runner.invoke(app, base + ["--out", str(tmp_path / "p1"), "--eval", f"A={start}", "--eval", f"A={a40}"])
    two = runner.invoke(
        app,
        base
        + [
            "--out",
            str(tmp_path / "p2"),
            "--eval",
            f"A={start}",
            "--eval",
            f"A={a40}",
            "--eval",
            f"B={start}",
            "--eval",
            f"B={b40}",
        ],
    )
    assert one.exit_code == 0 and two.exit_code == 0, one.output + two.output
    # the second run's line (colour C1) is drawn only when its evaluations are given
    assert _pixels_near(tmp_path / "p1" / "heldout.png", to_rgb("C1")) < 20
    assert _pixels_near(tmp_path / "p2" / "heldout.png", to_rgb("C1")) > 200
    bad = runner.invoke(app, base + ["--out", str(tmp_path / "p3"), "--eval", str(a40)])
    assert bad.exit_code == 2 and "LABEL=DIR" in bad.output


def test_load_runs_chains_stages(tmp_path):
    _write_run(tmp_path / "a", "stage1", 3, 0.1)
    _write_run(tmp_path / "b", "stage2", 2, 0.5)
    recs = load_runs([tmp_path / "a", tmp_path / "b"])
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4, 5]
    assert [r["stage"] for r in recs] == ["stage1"] * 3 + ["stage2"] * 2
    with pytest.raises(FileNotFoundError):
        load_runs([tmp_path / "missing"])


def test_plot_writes_pngs(tmp_path):
    _write_run(tmp_path / "a", "stage1", 4, 0.1)
    _write_run(tmp_path / "b", "stage2", 3, 0.4)
    written = plot_runs([tmp_path / "a", tmp_path / "b"], tmp_path / "plots", "test")
    assert sorted(p.name for p in written) == ["length.png", "overview.png", "reward.png", "tool_errors.png"]
    for p in written:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and p.stat().st_size > 5000


def test_plot_cli_and_empty_run(tmp_path):
    _write_run(tmp_path / "a", "s", 2, 0.1)
    result = runner.invoke(app, ["plot", str(tmp_path / "a"), "--out", str(tmp_path / "p")])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "p" / "reward.png").exists()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.1}\n')
    assert runner.invoke(app, ["plot", str(tmp_path / "empty"), "--out", str(tmp_path / "q")]).exit_code == 2


def test_percentile():
    assert percentile([], 90) == 0.0
    assert percentile([5.0], 90) == 5.0
    assert percentile(list(map(float, range(11))), 90) == pytest.approx(9.0)


# ---------------------------------------------------------------------------------------------------------------
# stage-3 hard subset


PROBLEMS = [Problem(id=f"h{i}", problem=f"problem {i}", answer=str(i)) for i in range(6)]


def _score_by_solved(solved_counts: dict[str, int]):
    def score(trajectories, repeated):
        out, seen = [], {}
        for p in repeated:
            k = seen.get(p.id, 0)
            seen[p.id] = k + 1
            out.append(1.0 if k < solved_counts[p.id] else 0.0)
        return out

    return score


def test_filter_hard_keeps_problems_not_solved_every_time(tmp_path):
    solved = {"h0": 8, "h1": 7, "h2": 0, "h3": 8, "h4": 1, "h5": 8}
    result = filter_hard(
        PROBLEMS,
        lambda ps, n: [object()] * (len(ps) * n),
        _score_by_solved(solved),
        tmp_path / "hard.jsonl",
        HardSubsetConfig(samples=8, chunk_problems=4),
    )
    assert (result.total, result.hard, result.solved_all) == (6, 3, 3)
    assert [p.id for p in load_jsonl_problems(tmp_path / "hard.jsonl")] == ["h1", "h2", "h4"]
    assert result.correct_counts == solved


def test_filter_hard_resumes_without_redoing_finished_problems(tmp_path):
    solved = {p.id: 0 for p in PROBLEMS}
    asked: list[str] = []

    def failing_generate(ps, n):
        asked.extend(p.id for p in ps)
        if "h2" in [p.id for p in ps]:
            raise RuntimeError("machine went away")
        return [object()] * (len(ps) * n)

    cfg = HardSubsetConfig(samples=2, chunk_problems=2)
    with pytest.raises(RuntimeError):
        filter_hard(PROBLEMS, failing_generate, _score_by_solved(solved), tmp_path / "hard.jsonl", cfg)
    progress = tmp_path / "hard.jsonl.progress.jsonl"
    with open(progress, "a") as fh:
        fh.write('{"id": "h2", "corr')  # a line cut by the crash
    asked.clear()
    result = filter_hard(
        PROBLEMS,
        lambda ps, n: asked.extend(p.id for p in ps) or [object()] * (len(ps) * n),
        _score_by_solved(solved),
        tmp_path / "hard.jsonl",
        cfg,
    )
    assert asked == ["h2", "h3", "h4", "h5"]
    assert result.resumed == 2 and result.hard == 6


def test_filter_hard_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError):
        filter_hard(PROBLEMS + PROBLEMS[:1], lambda ps, n: [], lambda t, p: [], tmp_path / "x.jsonl")
    with pytest.raises(ValueError, match="returned"):
        filter_hard(PROBLEMS, lambda ps, n: [], lambda t, p: [], tmp_path / "y.jsonl")


def test_filter_hard_cli_reports_bad_source(tmp_path):
    result = runner.invoke(
        app, ["data", "filter-hard", "--model", "x", "--source", "nope", "--out", str(tmp_path / "h.jsonl")]
    )
    assert result.exit_code == 2 and "neither" in result.output


def _data_help(command: str) -> str:
    res = CliRunner().invoke(
        app, ["data", command, "--help"], env={"TERMINAL_WIDTH": "200", "COLUMNS": "200"}, terminal_width=200
    )
    assert res.exit_code == 0, res.output
    return res.output


@pytest.mark.parametrize("command", ["filter-hard", "curate"])
def test_data_help_lists_the_sampler_flags_generated_from_its_fields(command):
    import dataclasses

    from tirl.cli.sampler_options import RENAMED_FLAGS, SAMPLER_FLAGS
    from tirl.rollout.agent_loop import AgentLoopSettings
    from tirl.runtime.sampler import SamplerConfig

    text = _data_help(command)
    shown = set(re.findall(r"--[a-z][a-z0-9.-]*", text))
    expected = {
        "--max-turns",
        "--max-response-tokens",
        "--temperature",
        "--top-p",
        "--context-window",
        "--tool-timeout-s",
        "--tool-memory-mb",
        "--max-concurrency",
        "--batch-size",
        "--seed",
        "--sandbox",
        "--workers",
        "--prompt-style",
        "--tool-call-format",
        "--protocol.answer-fallback",
        "--multi-call",
        "--lenient",
        "--chat-template",
        "--tool-response-max-chars",
        "--dtype",
        "--chunk",
    }
    assert expected <= shown, sorted(expected - shown)
    assert not shown & set(RENAMED_FLAGS), sorted(shown & set(RENAMED_FLAGS))
    # generated: every top-level SamplerConfig setting (the AgentLoopSettings fields among them) has its flag
    top = {f.name for f in dataclasses.fields(SamplerConfig)} - {"sandbox", "protocol", "verifier"}
    assert {f.name for f in dataclasses.fields(AgentLoopSettings)} <= top
    assert {fl.dotted_key for fl in SAMPLER_FLAGS if len(fl.key) == 1} == top
    assert "wall-clock deadline of each tool call, seconds" in text  # AgentLoopSettings' docstring
    assert "[default: 8192]" in text  # SamplerConfig's default (the RL rollout's), not AgentLoopSettings' 30720
    workers = next(fl for fl in SAMPLER_FLAGS if fl.dotted_key == "sandbox.workers")
    assert workers.default == SamplerConfig().sandbox.workers == 2  # the section's default in SamplerConfig
    if command == "curate":
        assert {"--out-dir", "--benchmarks", "--accept", "--deadline"} <= shown and "--out " not in text
    else:
        assert {"--out", "--source", "--samples", "--model"} <= shown


@pytest.mark.parametrize(
    "command, old, new",
    [
        ("filter-hard", "--max-tokens", "--max-response-tokens"),
        ("filter-hard", "--tool-timeout", "--tool-timeout-s"),
        ("curate", "--max-tokens", "--max-response-tokens"),
        ("curate", "--tool-timeout", "--tool-timeout-s"),
        ("curate", "--out", "--out-dir"),
        ("curate", "--benchmark", "--benchmarks"),
    ],
)
def test_data_refuses_an_old_flag_name_in_one_line_naming_the_new(command, old, new, tmp_path):
    args = ["--model", "m"] if command == "filter-hard" else [str(tmp_path / "x.jsonl")]
    res = CliRunner().invoke(app, ["data", command, *args, f"{old}=4"])
    assert res.exit_code == 2, res.output
    lines = [line for line in res.output.splitlines() if line.strip()]
    assert len(lines) == 1 and f"tirl data {command}: {old} is now {new}" in lines[0], res.output


class _Stop(Exception):
    pass


_FLAG_ARGS = [
    "--max-turns",
    "3",
    "--max-response-tokens",
    "77",
    "--temperature",
    "0.5",
    "--tool-timeout-s",
    "2.5",
    "--batch-size",
    "4",
    "--seed",
    "9",
    "--workers",
    "1",
    "--prompt-style",
    "compact",
    "--protocol.answer-fallback",
    "none",
    "--lenient",
]


def _check_sampler_config(config):
    from tirl.runtime.sampler import SamplerConfig

    assert isinstance(config, SamplerConfig)
    assert (config.max_turns, config.max_response_tokens, config.temperature, config.tool_timeout_s) == (
        3,
        77,
        0.5,
        2.5,
    )
    assert (config.batch_size, config.seed, config.sandbox.workers) == (4, 9, 1)
    assert (config.protocol.prompt_style, config.protocol.answer_fallback, config.protocol.lenient) == (
        "compact",
        "none",
        True,
    )
    default = SamplerConfig()
    assert config.top_p == default.top_p and config.sandbox.backend == default.sandbox.backend  # not given: kept
    assert config.sandbox.preload == default.sandbox.preload


def test_filter_hard_flag_values_reach_the_sampler_config(monkeypatch, tmp_path):
    import tirl.runtime
    import tirl.runtime.sampler

    seen = []

    def fake_sampler(policy, tokenizer, config=None, runtime=None):
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(tirl.runtime, "load_sampling_policy", lambda model, base, dtype: (None, None))
    monkeypatch.setattr(tirl.runtime.sampler, "policy_sampler", fake_sampler)
    res = CliRunner().invoke(
        app,
        [
            "data",
            "filter-hard",
            "--model",
            "m",
            "--source",
            "synthetic:2:add3",
            "--out",
            str(tmp_path / "h.jsonl"),
            *_FLAG_ARGS,
        ],
    )
    assert isinstance(res.exception, _Stop), res.output
    _check_sampler_config(seen[0])


def test_curate_flag_values_reach_the_sampler_config(monkeypatch, tmp_path):
    import tirl.runtime.sampler

    seen = []

    def fake_runtime(config):
        seen.append(config)
        raise _Stop

    monkeypatch.setattr(tirl.runtime.sampler, "sampler_runtime", fake_runtime)
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"id": "a", "problem": "What is 2+2?", "answer": "4"}) + "\n")
    res = CliRunner().invoke(app, ["data", "curate", str(src), "--out-dir", str(tmp_path / "o"), *_FLAG_ARGS])
    assert isinstance(res.exception, _Stop), res.output
    _check_sampler_config(seen[0])
    res = CliRunner().invoke(
        app, ["data", "curate", str(src), "--out-dir", str(tmp_path / "o"), "--tool-timeout-s", "0"]
    )
    assert res.exit_code == 2 and "tool_timeout_s must be > 0" in res.output, res.output


def test_progress_file_format_is_jsonl(tmp_path):
    filter_hard(
        PROBLEMS[:2],
        lambda ps, n: [object()] * (len(ps) * n),
        _score_by_solved({"h0": 1, "h1": 0}),
        tmp_path / "hard.jsonl",
        HardSubsetConfig(samples=1),
    )
    lines = (tmp_path / "hard.jsonl.progress.jsonl").read_text().splitlines()
    assert [json.loads(x) for x in lines] == [
        {"id": "h0", "correct": 1, "samples": 1},
        {"id": "h1", "correct": 0, "samples": 1},
    ]


@pytest.mark.slow
def test_filter_hard_cli_end_to_end_on_tiny_model(tmp_path, tiny_smollm2_model_dir):
    # a random model solves nothing: both problems are hard, and each got its progress line
    out = tmp_path / "hard.jsonl"
    result = runner.invoke(
        app,
        [
            "data",
            "filter-hard",
            "--model",
            str(tiny_smollm2_model_dir),
            "--samples",
            "2",
            "--source",
            "synthetic:2:add3",
            "--out",
            str(out),
            "--max-turns",
            "1",
            "--max-response-tokens",
            "16",
            "--workers",
            "1",
            "--chunk",
            "1",
            "--dtype",
            "float32",
        ],
    )
    assert result.exit_code == 0, result.output
    assert len(load_jsonl_problems(out)) == 2
    progress = [json.loads(x) for x in (tmp_path / "hard.jsonl.progress.jsonl").read_text().splitlines()]
    assert [p["correct"] for p in progress] == [0, 0]
    assert "2 of 2 problems are hard" in result.output


def test_compare_overlays_runs_at_equal_steps_and_equal_wall_time(tmp_path):
    import matplotlib.image

    from tirl.analysis.plot import _wall_hours, plot_compare

    for name, step_s in (("roc", 7200.0), ("grpo", 3600.0)):
        log = MetricsLog(tmp_path / name / "metrics.jsonl")
        for s in range(1, 4):
            log.write(
                {
                    "step": s,
                    "stage": name,
                    "tirl/reward/mean": 0.1 * s,
                    "tirl/time/step_s": step_s,
                    "tirl/tool_error_in_correct/after": 0.2,
                    "tirl/tool_calls/per_traj": 1.0,
                    "tirl/length/mean": 90.0,
                }
            )
    recs = load_runs([tmp_path / "roc"])
    assert _wall_hours(recs) == [2.0, 4.0, 6.0]  # cumulative hours of time/step_s
    result = runner.invoke(
        app, ["plot", "--compare", f"RoC={tmp_path / 'roc'}", str(tmp_path / "grpo"), "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 0, result.output
    for name in ("compare_steps.png", "compare_time.png"):
        image = matplotlib.image.imread(tmp_path / "p" / name)
        assert image.shape[0] > 500 and image.shape[1] > 800 and image.std() > 0.01  # a drawn figure
    with pytest.raises(ValueError):
        plot_compare({}, tmp_path / "q")


def _pixels_near(path, rgb, tol=0.03) -> int:
    import matplotlib.image
    import numpy as np

    image = matplotlib.image.imread(path)[..., :3]
    return int((np.abs(image - np.array(rgb)).max(axis=-1) < tol).sum())


def test_compare_draws_faint_steps_under_a_trend_once_a_run_is_long_enough(tmp_path):
    from matplotlib.colors import to_rgb

    from tirl.analysis.plot import plot_compare

    _write_run(tmp_path / "short", "s", SMOOTH_WINDOW - 1, 0.1)
    _write_run(tmp_path / "long", "s", SMOOTH_WINDOW, 0.1)
    plot_compare({"A": tmp_path / "short"}, tmp_path / "p_short")
    plot_compare({"A": tmp_path / "long"}, tmp_path / "p_long")
    # the first run's colour at alpha 0.35 over white: only the faint per-step line under a trailing mean has it
    faint = tuple(0.35 * c + 0.65 for c in to_rgb("C0"))
    short = _pixels_near(tmp_path / "p_short" / "compare_steps.png", faint)
    long = _pixels_near(tmp_path / "p_long" / "compare_steps.png", faint)
    assert long > 3 * short  # measured: 120 (anti-aliased edges) against 662


def test_trailing_mean_averages_each_step_with_the_steps_before_it():
    assert trailing_mean([0.0, 1.0, 2.0, 3.0, 4.0], 3) == [0.0, 0.5, 1.0, 2.0, 3.0]
    assert trailing_mean([5.0], 10) == [5.0]
    with pytest.raises(ValueError, match="window"):
        trailing_mean([1.0], 0)


def _dark_pixels(path) -> int:
    import matplotlib.image

    image = matplotlib.image.imread(path)[..., :3]
    return int((image.max(axis=-1) < 0.15).sum())


def test_reward_plot_draws_the_trailing_mean_once_there_are_enough_steps(tmp_path):
    _write_run(tmp_path / "short", "s", SMOOTH_WINDOW - 1, 0.1)
    _write_run(tmp_path / "long", "s", SMOOTH_WINDOW, 0.1)
    plot_runs([tmp_path / "short"], tmp_path / "p_short")
    plot_runs([tmp_path / "long"], tmp_path / "p_long")
    # the black trailing-mean line adds dark pixels beyond the axes and text
    assert _dark_pixels(tmp_path / "p_long" / "reward.png") > _dark_pixels(tmp_path / "p_short" / "reward.png") + 300
