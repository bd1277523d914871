"""The README's "Your own problems" path runs as written (issue 45: a new user with a JSONL of their own problems
reaches an evaluated checkpoint by following the README alone).

The commands and the example rows are read from README.md itself, so the test fails when the README drifts: a
renamed flag, a recipe or eval config that moved, a format that no longer reads. Only what makes the run small is
changed: the models become ``tiny:`` random models (:mod:`tirl.models.tiny`) and a few sizes are appended as
overrides (one step, one sample, 32 tokens), which the commands' own settings sit under.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TINY = "tiny:smollm2-135m-instruct"

# appended to the README's commands; each only shrinks the run
TRAIN_SIZES = [
    "max_steps=1",
    "problems_per_step=2",
    "rollout.group_size=2",
    "rollout.max_response_tokens=32",
    "optim.per_device_train_batch_size=2",
    "rollout.launch_server=false",  # in process even where vLLM is installed
]
EVAL_SIZES = ["--samples", "1", "--max-response-tokens", "32"]


def own_data_section(text: str) -> str:
    """The README's "Your own problems" section (up to the next ``## `` heading)."""
    match = re.search(r"^## Your own problems\n(.*?)(?=^## )", text, re.M | re.S)
    assert match, 'README.md has no "## Your own problems" section'
    return match.group(1)


def fenced(section: str, language: str) -> list[str]:
    """The non-empty lines of the section's ```language blocks."""
    blocks = re.findall(rf"^```{language}\n(.*?)^```", section, re.M | re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def readme_commands() -> tuple[list[str], list[list[str]]]:
    """(the example JSONL rows, the commands as argument lists without the leading ``tirl``)."""
    section = own_data_section(README.read_text(encoding="utf-8"))
    rows = fenced(section, "jsonl")
    commands = [shlex.split(line) for line in fenced(section, "bash") if not line.lstrip().startswith("#")]
    return rows, commands


def _value(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def _setting(args: list[str], key: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"{key}="))


def test_the_readme_section_is_the_three_commands_and_four_rows():
    rows, commands = readme_commands()
    assert len(rows) == 4 and all({"problem", "answer"} <= set(json.loads(r)) for r in rows)
    assert [c[:2] for c in commands] == [["tirl", "eval"], ["tirl", "train"], ["tirl", "eval"]]
    before, train, after = commands
    # the checkpoint evaluated is the one the train command writes, on the problems the first command evaluated
    assert _value(after, "--model") == _setting(train, "output_dir") + "/final"
    assert _value(after, "--benchmarks") == _value(before, "--benchmarks")
    assert _value(after, "--config") == _value(before, "--config")
    # the starting model evaluated first is the recipe's
    from tirl.train.config import load_config

    recipe = load_config(ROOT / _value(train, "--config"), [])
    assert recipe.model.name_or_path == _value(before, "--model")


def _tiny(args: list[str], model: str) -> list[str]:
    return [TINY if a == model else a for a in args]


@pytest.mark.slow
def test_the_readme_own_data_commands_reach_an_evaluated_checkpoint(tmp_path, monkeypatch):
    from tirl.cli.main import app

    rows, (before, train, after) = readme_commands()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "configs").symlink_to(ROOT / "configs")  # the commands name the repository's configs
    train_file = _setting(train, "data.sources").strip("[]")
    Path(train_file).write_text("\n".join(rows[:2]) + "\n")
    Path(_value(before, "--benchmarks")).write_text("\n".join(rows[2:]) + "\n")

    runner = CliRunner()
    start = _value(before, "--model")
    result = runner.invoke(app, [*_tiny(before[1:], start), *EVAL_SIZES])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, [*train[1:], f"model.name_or_path={TINY}", *TRAIN_SIZES])
    assert result.exit_code == 0, result.output
    checkpoint = Path(_value(after, "--model"))
    assert (checkpoint / "tirl_final.json").exists(), result.output
    result = runner.invoke(app, [*after[1:], *EVAL_SIZES])
    assert result.exit_code == 0, result.output

    runs = [Path(_value(c, "--out-dir")) for c in (before, after)]
    summaries = [json.loads((r / "summary.json").read_text()) for r in runs]
    assert all(s for s in summaries)
    # like for like: the two evaluations ran with the same settings, whatever the checkpoint's recipe says
    settings = [json.loads((r / "run.json").read_text()) for r in runs]
    for s in settings:
        s.pop("model")
    assert settings[0] == settings[1]
    assert settings[0]["temperature"] == 0.6  # the eval config's, not the recipe's 1.0
