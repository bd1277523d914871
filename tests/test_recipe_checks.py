"""A recipe's values are checked when it is read (issue 45, friction 9): ``--print-config`` and the start of a run
refuse what the run would refuse later, in one line, before any model is loaded; ``tirl eval`` takes the
``tiny:`` model names that training takes."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SMOKE = str(CONFIGS / "rl" / "cpu-tiny-smoke.yaml")
runner = CliRunner()


def _error_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) == 1, output  # one line, no traceback, no configuration printed
    return lines[0]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("rollout.group_size=1", "rollout.group_size must be >= 2"),
        ("roc.mode=papr", "roc.mode must be one of"),
        ("roc.rule=roc_papr", "unknown selection rule 'roc_papr'"),
        ("roc.mod=paper", "did you mean roc.mode"),
        ("optim.per_device_train_batch_size=3", "multiple of optim.per_device_train_batch_size=3"),
        ("model.name_or_path=qwen2.5-coder-0.5b-instuct", "model 'qwen2.5-coder-0.5b-instuct' not found"),
    ],
)
def test_print_config_refuses_what_the_run_would_refuse(override, expected):
    result = runner.invoke(app, ["train", "rl", "--config", SMOKE, "--print-config", override])
    assert result.exit_code == 2, result.output
    assert expected in _error_line(result.output)


def test_print_config_still_prints_a_valid_recipe_with_a_tiny_model():
    result = runner.invoke(app, ["train", "rl", "--config", SMOKE, "--print-config", "rollout.group_size=4"])
    assert result.exit_code == 0, result.output
    assert "name_or_path: tiny:smollm2-135m-instruct" in result.output


def test_sft_print_config_checks_the_model_name():
    recipe = str(CONFIGS / "sft" / "cpu-qwen0.5b.yaml")
    ok = runner.invoke(app, ["train", "sft", "--config", recipe, "--print-config"])
    assert ok.exit_code == 0, ok.output
    bad = runner.invoke(app, ["train", "sft", "--config", recipe, "--print-config", "model.name_or_path=smollm3"])
    assert bad.exit_code == 2 and "model 'smollm3' not found" in _error_line(bad.output)


def test_a_misspelled_data_source_fails_before_the_model_loads(tmp_path, monkeypatch):
    import tirl.train.rl

    def no_model(*args, **kwargs):
        raise AssertionError("the model was loaded before the data was read")

    monkeypatch.setattr(tirl.train.rl, "load_policy", no_model)
    result = runner.invoke(
        app, ["train", "rl", "--config", SMOKE, f"output_dir={tmp_path / 'run'}", "data.sources=synthetc:8"]
    )
    assert result.exit_code == 2, result.output
    assert "data source 'synthetc:8' is neither" in result.output


def test_eval_takes_a_tiny_model_name_as_training_does(tmp_path):
    out = tmp_path / "o"
    args = ["eval", "--model", "tiny:smollm2-135m-instruct", "--benchmarks", "gsm8k:1", "--out-dir", str(out)]
    result = runner.invoke(app, [*args, "--print-config"])
    assert result.exit_code == 0, result.output
    assert "model: tiny:smollm2-135m-instruct" in result.output


def test_eval_refuses_a_misspelled_model_before_writing_anything(tmp_path):
    # --print-config prints a file for any name (the model may live on another machine); a run checks it first
    out = tmp_path / "o"
    args = ["eval", "--model", "smollm2-135m-instuct", "--benchmarks", "gsm8k:1", "--out-dir", str(out)]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "model 'smollm2-135m-instuct' not found" in _error_line(result.output)
    assert not out.exists()  # no run.json to block the corrected command
