"""The one-GPU recipe can be followed (issue 45, item 3): ``tirl train rl --dry-run`` checks it on this CPU up to
where the GPU is needed (every key, the data, the tokenizer, the sandbox, the output folder), the SFT step it
starts from is named and writes the model it names, and docs/scale.md's "One GPU" section says the same.

The SFT stage's output does not exist here, so a ``tiny:`` model with the same tokenizer family stands in for it
(:mod:`tirl.models.tiny`); the sandbox runs 2 workers on this 2-core machine instead of the recipe's 12.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.cli.main import app

ROOT = Path(__file__).resolve().parents[1]
RL_RECIPES = sorted((ROOT / "configs" / "rl").glob("one-gpu-*.yaml"))
SFT = ROOT / "configs" / "sft" / "one-gpu-qwen1.5b.yaml"
TINY = "tiny:qwen2.5-coder-0.5b-instruct"
runner = CliRunner()


def _lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.strip()]


def test_there_is_a_one_gpu_recipe():
    assert RL_RECIPES, "configs/rl/one-gpu-*.yaml"


@pytest.mark.slow
@pytest.mark.parametrize("recipe", RL_RECIPES, ids=lambda p: p.name)
def test_the_one_gpu_recipe_passes_its_dry_run_on_this_cpu(recipe, tmp_path):
    args = ["train", "rl", "--config", str(recipe), "--dry-run", f"model.name_or_path={TINY}"]
    result = runner.invoke(app, [*args, f"output_dir={tmp_path / 'run'}", "sandbox.workers=2"])
    assert result.exit_code == 0, result.output
    lines = _lines(result.output)
    assert lines[-1] == "dry run: passed"
    text = "\n".join(lines)
    assert "data: 12121 problems from curated" in text
    assert "sandbox: a local pool of 2 workers answered print(6 * 7) with 42" in text
    assert re.search(r"prompts fit rollout\.max_prompt_tokens=\d+", text)
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


@pytest.mark.parametrize("recipe", RL_RECIPES, ids=lambda p: p.name)
def test_without_the_sft_stage_the_dry_run_says_which_stage_comes_first(recipe):
    result = runner.invoke(app, ["train", "rl", "--config", str(recipe), "--dry-run"])
    assert result.exit_code == 2, result.output
    (line,) = _lines(result.output)
    assert "does not exist yet: it is the output of an earlier stage" in line


@pytest.mark.parametrize("recipe", RL_RECIPES, ids=lambda p: p.name)
def test_the_rl_recipe_starts_from_what_the_sft_recipe_writes_in_its_format(recipe):
    from tirl.train.config import load_config
    from tirl.train.sft_config import load_sft_config

    rl, sft = load_config(recipe, []), load_sft_config(SFT, [])
    assert rl.model.name_or_path == f"{sft.output_dir}/final"
    assert rl.protocol == sft.protocol  # SFT, RL and evaluation share one protocol
    # sized for one GPU with a local sandbox: colocated vLLM, no service address to start first
    assert rl.rollout.use_vllm and rl.rollout.vllm_mode == "colocate"
    assert rl.sandbox.backend == "local"
    assert f"tirl train sft --config configs/sft/{SFT.name}" in recipe.read_text()
    sft_print = runner.invoke(app, ["train", "sft", "--config", str(SFT), "--print-config"])
    assert sft_print.exit_code == 0, sft_print.output


@pytest.mark.slow
def test_a_sandbox_service_that_does_not_answer_fails_the_dry_run(tmp_path):
    # the stage-1 recipe's 127.0.0.1:8000 on a machine with no service there: one line, before any model loads
    args = ["train", "rl", "--config", str(RL_RECIPES[0]), "--dry-run", f"model.name_or_path={TINY}"]
    result = runner.invoke(app, [*args, f"output_dir={tmp_path}", "sandbox.backend=http://127.0.0.1:9"])
    assert result.exit_code == 2, result.output
    assert "error: code executor failed its health check" in result.output


def test_docs_scale_one_gpu_section_matches_the_recipes():
    text = (ROOT / "docs" / "scale.md").read_text(encoding="utf-8")
    section = re.search(r"^## One GPU\n(.*?)(?=^## )", text, re.M | re.S).group(1)
    for recipe in RL_RECIPES:
        assert f"tirl train rl --config configs/rl/{recipe.name} --dry-run" in section
    assert f"tirl train sft --config configs/sft/{SFT.name}" in section
    assert "127.0.0.1:8000" not in section.split("The report's stage-1 recipe")[0]  # the steps name no service
    assert "## Records of runs" in text and len(text.splitlines()) < 250  # the records live in scale-records.md
