"""Like-for-like comparisons (issue 45, friction 8): ``tirl eval --compare A,B`` evaluates several models with the
same settings whatever their recipes, and an in-process evaluation sized for the report's GPUs warns on a CPU."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.eval import compare_configs, compare_labels, compare_models, hours_on_cpu_warning
from tirl.cli.main import app
from tirl.eval.config import load_eval_config

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()


def _checkpoint(tmp_path: Path) -> Path:
    """``run/checkpoint-2`` of a run of the CPU recipe (its ``config.yaml`` samples at T = 1.0, compact prompt)."""
    from tirl.config import dump_config
    from tirl.train.config import load_config

    run = tmp_path / "run"
    (run / "checkpoint-2").mkdir(parents=True)
    dump_config(
        load_config(ROOT / "configs" / "rl" / "cpu-toolmath-roc.yaml", [f"output_dir={run}"]), run / "config.yaml"
    )
    return run / "checkpoint-2"


def test_models_and_labels():
    assert compare_models(["a,b", "c", "a"]) == ["a", "b", "c"]
    labels = compare_labels(
        ["qwen2.5-coder-0.5b-tirl-sft", "runs/mine/rl/final", "Qwen/Qwen2.5-0.5B-Instruct", "x/rl/final"]
    )
    assert labels == ["qwen2.5-coder-0.5b-tirl-sft", "rl-final", "Qwen-Qwen2.5-0.5B-Instruct", "rl-final-2"]


def test_compare_gives_a_checkpoint_and_a_packaged_model_the_same_settings(tmp_path, capsys):
    checkpoint = _checkpoint(tmp_path)
    models = ["qwen2.5-coder-0.5b-tirl-sft", str(checkpoint)]
    configs, labels = compare_configs(models, None, {"benchmarks": ["gsm8k"], "out_dir": str(tmp_path / "cmp")})
    a, b = (c.to_dict() for c in configs)
    assert [a.pop("model"), b.pop("model")] == models
    assert [a.pop("out_dir"), b.pop("out_dir")] == [str(tmp_path / "cmp" / label) for label in labels]
    assert a == b  # without --compare the checkpoint would sample at its recipe's T = 1.0, the other at 0.6
    assert a["rollout"]["temperature"] == 0.6
    said = capsys.readouterr().err
    assert "not taken from the recipe" in said and "rollout.temperature=1.0" in said


def test_model_and_compare_together_are_refused(tmp_path):
    args = ["eval", "--model", "a", "--compare", "b,c", "--benchmarks", "gsm8k:1", "--out-dir", str(tmp_path)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2 and "--model or --compare, not both" in result.output


def test_the_report_defaults_warn_in_process_without_a_gpu_and_cpu_configs_do_not():
    default = load_eval_config(None, {"model": "m", "benchmarks": ["aime24"]})
    line = hours_on_cpu_warning(default, cuda=False)
    assert line and "16 samples x up to 30,720 tokens" in line and "configs/eval/cpu-compare.yaml" in line
    assert hours_on_cpu_warning(default, cuda=True) is None
    for name in ("cpu-compare.yaml", "demo.yaml", "toolmath-heldout.yaml"):
        config = load_eval_config(ROOT / "configs" / "eval" / name, {"model": "m"})
        assert hours_on_cpu_warning(config, cuda=False) is None, name


@pytest.mark.slow
def test_compare_runs_each_model_and_prints_one_table(tmp_path):
    bench = tmp_path / "mine.jsonl"
    bench.write_text('{"problem": "What is 17 * 23?", "answer": "391"}\n{"problem": "What is 2 + 2?", "answer": "4"}\n')
    models = "tiny:smollm2-135m-instruct,tiny:qwen2.5-coder-0.5b-instruct"
    out = tmp_path / "cmp"
    args = ["eval", "--compare", models, "--config", str(ROOT / "configs" / "eval" / "cpu-compare.yaml")]
    args += ["--benchmarks", str(bench), "--samples", "1", "--max-response-tokens", "16", "--out-dir", str(out), "-q"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    runs = [json.loads((out / label / "run.json").read_text()) for label in compare_labels(models.split(","))]
    for run in runs:
        run.pop("model")
    assert runs[0] == runs[1]
    assert "the same settings: 1 samples, T=0.6, 3 turns, 16 tokens, prompt compact" in " ".join(result.output.split())
