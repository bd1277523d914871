"""``tirl eval --config configs/eval/<baseline>.yaml`` end to end on the tiny random model (Qwen2.5's tokenizer and
chat template; in-process engine), with a few GSM8K problems: the files of the field's baselines run, record the
prompt the mode promises, and write the intervals and the truncation share into summary.json and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.eval.config import load_eval_config
from tirl.protocol.config import COT_INSTRUCTION

ROOT = Path(__file__).resolve().parents[1]
BASELINES = {
    "gsm8k-test-cot": ("gsm8k", "cot", 1024),
    "gsm8k-test-tool": ("gsm8k", "native", 1536),
    "math500-cot": ("math500", "cot", 2048),
    "math500-tool": ("math500", "native", 3072),
}


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_the_baseline_files_measure_what_they_say(name):
    config = load_eval_config(ROOT / "configs" / "eval" / f"{name}.yaml")
    benchmark, style, budget = BASELINES[name]
    assert config.benchmarks == [benchmark] and config.subset is None and not config.subsets  # the whole set
    assert (config.samples, config.rollout.temperature, config.rollout.top_p) == (4, 0.6, 1.0)
    assert config.protocol.prompt_style == style and config.rollout.max_response_tokens == budget
    assert config.use_tools is (style == "native")
    assert config.model == "qwen2.5-coder-0.5b-instruct"  # the base model unless --model says otherwise
    assert (config.rollout.max_turns > 1) is (style == "native")


@pytest.mark.parametrize("name", ["gsm8k-test-cot", "gsm8k-test-tool"])
def test_a_dry_run_of_the_gsm8k_baselines_on_the_tiny_model(name, tiny_model_dir, tmp_path):
    from tirl.cli.main import app

    out = tmp_path / "out"
    args = ["eval", "--config", str(ROOT / "configs" / "eval" / f"{name}.yaml"), "--model", str(tiny_model_dir)]
    args += ["-b", "gsm8k:2", "--samples", "2", "--max-response-tokens", "12", "--dtype", "float32"]
    args += ["--quiet", "--out-dir", str(out), "launch_server=false"]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "160"})
    assert res.exit_code == 0, res.output
    records = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for r in records:
        prompt = r["prompt_text"]
        assert prompt.endswith("<|im_start|>assistant\n")  # no prefill
        assert f"{r['problem']}\n{COT_INSTRUCTION}<|im_end|>" in prompt
        assert "<reason>" not in prompt and "<answer>" not in prompt
        assert ("<tools>" in prompt) is name.endswith("tool")
        assert "You are Qwen, created by Alibaba Cloud." in prompt  # the template's own system prompt
    summary = json.loads((out / "summary.json").read_text())
    gsm8k = summary["benchmarks"]["gsm8k"]
    assert gsm8k["num_problems"] == 2 and gsm8k["samples_per_problem"] == 2
    for key in ("avg_pass1", "pass_at_k", "maj_at_k"):
        low, high = gsm8k["intervals"][key]
        assert 0.0 <= low <= high <= 1.0
    assert 0.0 <= gsm8k["truncation_rate"] <= 1.0  # a random model at 12 tokens: mostly cut
    assert summary["settings"]["use_tools"] is name.endswith("tool")
    assert summary["settings"]["protocol"]["prompt_style"] == ("native" if name.endswith("tool") else "cot")
    assert "[95% CI]" in res.output and "truncated (%)" in res.output
    words = " ".join(res.output.split())  # the title may wrap
    assert ("chain of thought (the model's template, no tool)" in words) is name.endswith("cot")
