"""docs/config.md, the reference of every setting, is generated from the dataclasses' docstrings (issue 45,
friction 3): every key has a description, the file is up to date, and ``tirl train rl --help`` lists the keys."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Literal

import pytest
from typer.testing import CliRunner

from tirl.cli.config_reference import markdown, sections, type_name, undocumented
from tirl.cli.main import app
from tirl.eval.config import EvalConfig
from tirl.train.config import RLConfig
from tirl.train.sft_config import SFTConfig

DOC = Path(__file__).resolve().parents[1] / "docs" / "config.md"
runner = CliRunner()


def _flat(mapping: dict, prefix: str = "") -> set[str]:
    keys = set()
    for key, value in mapping.items():
        if isinstance(value, dict) and value and all(isinstance(k, str) for k in value) and key != "subsets":
            keys |= _flat(value, f"{prefix}{key}.")
        else:
            keys.add(f"{prefix}{key}")
    return keys


@pytest.mark.parametrize("cls", [RLConfig, SFTConfig, EvalConfig], ids=lambda c: c.__name__)
def test_every_key_has_a_description(cls):
    assert undocumented(cls) == []


@pytest.mark.parametrize(
    ("config", "cls"),
    [
        (RLConfig(), RLConfig),
        (SFTConfig(), SFTConfig),
        (EvalConfig(model="m", benchmarks=["b"], out_dir=Path("o")), EvalConfig),
    ],
    ids=["rl", "sft", "eval"],
)
def test_the_reference_covers_exactly_the_keys_print_config_prints(config, cls):
    printed = _flat(config.to_dict())
    listed = {s.key for section in sections(cls) for s in section.settings}
    assert listed == printed


def test_docs_config_md_is_generated_from_the_docstrings():
    assert DOC.read_text(encoding="utf-8") == markdown(), (
        "docs/config.md is stale: python -m tirl.cli.config_reference > docs/config.md"
    )


def test_the_reference_shows_type_default_meaning_and_flag():
    text = markdown()
    assert "| `rollout.group_size` | `int` | `16` | G, trajectories per problem kept for the update" in text
    assert "| `roc.rule` | `str \\| None` | `null` |" in text
    assert "| `rollout.max_turns` | `int` | `30` |" in text and "| `--max-turns` |" in text  # the eval table
    assert "| `sandbox.workers` | `int \\| None` | `4` |" in text  # RL's own default, not ExecutorConfig's None


@dataclasses.dataclass
class Inner:
    """A section.

    Attributes:
        a: described.
    """

    a: int = 1
    b: str = "x"


@dataclasses.dataclass
class Outer:
    """A configuration.

    Attributes:
        mode, other: both described.
        inner: a section.
    """

    mode: Literal["p", "q"] = "p"
    other: bool | Literal["auto"] = False
    inner: Inner = dataclasses.field(default_factory=Inner)


def test_a_field_without_a_description_is_found():
    assert undocumented(Outer) == ["inner.b"]
    assert [s.type for s in sections(Outer)[0].settings] == ["'p' | 'q'", "bool | 'auto'"]
    assert type_name(list[str] | None) == "list[str] | None"


@pytest.mark.parametrize(("command", "key"), [("rl", "rollout.group_size"), ("sft", "optim.batch_size")])
def test_train_help_lists_the_keys_by_section(command, key):
    result = runner.invoke(app, ["train", command, "--help"], terminal_width=160)
    assert result.exit_code == 0, result.output
    section = key.split(".")[0]
    assert f"{section} section (KEY=VALUE; docs/config.md)" in result.output
    assert key in result.output and "Top-level keys" in result.output
