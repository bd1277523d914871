"""``tirl eval`` of a training checkpoint takes the run's recipe; its flags are generated from the config fields.

The checkpoint fixture is a run folder as ``tirl train rl`` leaves it: ``RUN/config.yaml`` (the resolved recipe of
``configs/rl/cpu-toolmath-roc.yaml``, written with the trainer's own ``dump_config``) and ``RUN/checkpoint-2``
holding the tiny random model with its ``tirl_checkpoint.json`` marker.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import types
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tirl.eval.config import EvalConfig, load_eval_config, recipe_path, recipe_settings
from tirl.protocol.config import ProtocolConfig
from tirl.rollout.agent_loop import AgentLoopSettings

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "configs" / "rl" / "cpu-toolmath-roc.yaml"


def _run_folder(tmp_path: Path, model_dir: Path | None = None, recipe: Path = RECIPE, stage: str = "rl") -> Path:
    """``tmp/run`` with ``config.yaml`` (as the trainer writes it) and ``checkpoint-2`` (the model, or empty)."""
    from tirl.config import dump_config

    run = tmp_path / "run"
    if stage == "rl":
        from tirl.train.config import load_config

        config = load_config(recipe, [f"output_dir={run}"])
    else:
        from tirl.train.sft_config import load_sft_config

        config = load_sft_config(recipe, [f"output_dir={run}"])
    dump_config(config, run / "config.yaml")
    ckpt = run / "checkpoint-2"
    if model_dir is not None:
        shutil.copytree(model_dir, ckpt)
        from tirl.runs.checkpoints import write_checkpoint_marker

        write_checkpoint_marker(ckpt, 2)
    else:
        ckpt.mkdir(parents=True)
    return run


def _capture(monkeypatch) -> list[EvalConfig]:
    from tirl.cli import eval as cli_eval

    seen: list[EvalConfig] = []

    def run(config: EvalConfig, console: Any, progress: bool = True) -> Any:
        seen.append(config)
        return types.SimpleNamespace(new_samples=0, resumed_samples=0, elapsed_s=0.0)

    monkeypatch.setattr(cli_eval, "_run", run)
    return seen


def _eval(*args: str) -> Any:
    from tirl.cli.main import app

    return CliRunner().invoke(app, ["eval", *args])


def _recipe_line(output: str) -> str:
    (line,) = [x for x in output.splitlines() if "settings from the recipe" in x]
    return line


# ----------------------------------------------------------------------------------------- the checkpoint's recipe


def test_recipe_path_is_the_run_config_of_a_checkpoint_or_final_folder(tmp_path):
    run = _run_folder(tmp_path)
    (run / "final").mkdir()
    (run / "other").mkdir()
    assert recipe_path(run / "checkpoint-2") == run / "config.yaml"
    assert recipe_path(f"{run}/final/") == run / "config.yaml"
    assert recipe_path(run / "other") is None and recipe_path(run) is None
    assert recipe_path(run / "checkpoint-9") is None  # not there
    assert recipe_path("qwen2.5-coder-0.5b-tirl-sft") is None
    (run / "config.yaml").unlink()
    assert recipe_path(run / "checkpoint-2") is None


def test_recipe_settings_are_the_sections_the_eval_shares_less_concurrency():
    import yaml

    shared = recipe_settings(
        yaml.safe_load(RECIPE.read_text())
        | {
            "rollout": {
                "max_turns": 3,
                "group_size": 4,
                "tool_timeout_s": 5.0,
                "max_concurrency": 7,
                "sandbox": "local",
            }
        }
    )
    assert shared["rollout"] == {"max_turns": 3, "tool_timeout_s": 5.0}  # training-only keys and concurrency: no
    assert shared["protocol"] == {"prompt_style": "compact"}
    assert "model" not in shared and "optim" not in shared


def test_a_checkpoint_is_evaluated_with_its_recipes_limits_and_protocol(monkeypatch, tmp_path):
    seen = _capture(monkeypatch)
    run = _run_folder(tmp_path)
    res = _eval("--model", str(run / "checkpoint-2"), "-b", "toolmath", "--out-dir", str(tmp_path / "o"))
    assert res.exit_code == 0, res.output
    (config,) = seen
    r = config.rollout
    # the recipe's values, where the evaluation's defaults are 30 turns, 30,720 tokens, T 0.6 and 10 s
    assert (r.max_turns, r.max_response_tokens, r.context_window, r.temperature, r.tool_timeout_s) == (
        3,
        384,
        768,
        1.0,
        5.0,
    )
    assert config.protocol == ProtocolConfig(prompt_style="compact")
    assert r.max_concurrency is None  # the engine's default, not the trainer's
    line = _recipe_line(res.output)
    assert f"settings from the recipe {run / 'config.yaml'}" in line
    for item in (
        "rollout.max_turns=3",
        "rollout.max_response_tokens=384",
        "rollout.tool_timeout_s=5.0",
        "rollout.temperature=1.0",
        "rollout.context_window=768",
        "protocol.prompt_style=compact",
    ):
        assert item in line
    assert "overridden" not in line


def test_flags_key_values_and_the_eval_config_override_the_recipe(monkeypatch, tmp_path):
    seen = _capture(monkeypatch)
    run = _run_folder(tmp_path)
    heldout = ROOT / "configs" / "eval" / "toolmath-heldout.yaml"
    res = _eval(
        "--config",
        str(heldout),
        "--model",
        str(run / "checkpoint-2"),
        "--out-dir",
        str(tmp_path / "o"),
        "--max-turns",
        "5",
        "--tool-timeout-s",
        "2",
        "protocol.answer_fallback=none",
    )
    assert res.exit_code == 0, res.output
    (config,) = seen
    r = config.rollout
    assert (r.max_turns, r.tool_timeout_s) == (5, 2.0)  # flags
    assert r.temperature == 0.6  # the eval config file
    assert (r.max_response_tokens, r.context_window) == (384, 768)  # file and recipe agree
    assert (config.protocol.prompt_style, config.protocol.answer_fallback) == ("compact", "none")
    line = _recipe_line(res.output)
    assert "overridden here: " in line
    overridden = line.split("overridden here: ", 1)[1]
    for item in (
        "rollout.max_turns 3 -> 5",
        "rollout.tool_timeout_s 5.0 -> 2.0",
        "rollout.temperature 1.0 -> 0.6",
        "protocol.answer_fallback last_box_final_turn -> none",
    ):
        assert item in overridden
    assert "max_response_tokens" not in overridden  # set by the file to the recipe's own value: not overridden

    seen.clear()
    res = _eval("--model", str(run / "checkpoint-2"), "-b", "toolmath", "--out-dir", str(tmp_path / "o"), "--no-recipe")
    assert res.exit_code == 0 and "settings from the recipe" not in res.output
    assert seen[0].rollout == AgentLoopSettings() and seen[0].protocol == ProtocolConfig()


def test_a_model_named_in_the_config_file_brings_its_recipe_too(tmp_path):
    run = _run_folder(tmp_path)
    path = tmp_path / "eval.yaml"
    path.write_text(f"model: {run / 'checkpoint-2'}\nbenchmarks: [toolmath]\nrollout: {{max_turns: 2}}\n")
    config = load_eval_config(path)
    assert (config.rollout.max_turns, config.rollout.tool_timeout_s) == (2, 5.0)
    assert load_eval_config(path, recipe=False).rollout.tool_timeout_s == AgentLoopSettings.tool_timeout_s


def test_an_sft_runs_final_folder_brings_only_its_protocol(tmp_path):
    run = _run_folder(tmp_path, recipe=ROOT / "configs" / "sft" / "cpu-qwen0.5b.yaml", stage="sft")
    (run / "final").mkdir()
    config = load_eval_config(None, {"model": str(run / "final"), "benchmarks": ["gsm8k:10"]})
    assert config.protocol.prompt_style == "compact"
    assert config.rollout == AgentLoopSettings()


def test_a_packaged_trained_model_brings_the_prompt_style_of_its_manifest(monkeypatch, tmp_path):
    from tirl.models.trained import trained_models

    seen = _capture(monkeypatch)
    (name, packaged), *_ = trained_models().items()
    res = _eval("-m", name, "-b", "toolmath", "--out-dir", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert seen[0].protocol == ProtocolConfig(prompt_style=packaged.prompt_style)
    assert seen[0].rollout == AgentLoopSettings()  # a manifest records no limits
    assert f"protocol.prompt_style={packaged.prompt_style}" in _recipe_line(res.output)
    assert "manifest.json" in _recipe_line(res.output)
    assert _eval("-m", name, "-b", "toolmath", "--prompt-style", "full", "--out-dir", str(tmp_path)).exit_code == 0
    assert seen[1].protocol.prompt_style == "full"
    assert (
        load_eval_config(None, {"model": "qwen2.5-coder-0.5b-instruct", "benchmarks": ["toolmath"]}).protocol
        == ProtocolConfig()
    )  # a built-in base model has no recipe


def test_a_recipe_with_invalid_shared_settings_is_a_one_line_error(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoint-1").mkdir(parents=True)
    (run / "config.yaml").write_text("rollout: {max_turns: 0}\n")
    res = _eval("--model", str(run / "checkpoint-1"), "-b", "toolmath")
    assert res.exit_code == 2 and "the recipe" in res.output and "--no-recipe" in res.output
    assert "Traceback" not in res.output


def test_print_config_of_a_checkpoint_reads_back_as_the_same_run(tmp_path):
    run = _run_folder(tmp_path)
    res = CliRunner().invoke(
        __import__("tirl.cli.main", fromlist=["app"]).app,
        ["eval", "-m", str(run / "checkpoint-2"), "-b", "toolmath", "--print-config"],
    )
    assert res.exit_code == 0, res.output
    printed = tmp_path / "printed.yaml"
    printed.write_text(res.stdout)  # the recipe line goes to stderr; stdout is the file
    first = load_eval_config(None, {"model": str(run / "checkpoint-2"), "benchmarks": ["toolmath"]})
    assert load_eval_config(printed) == first and first.rollout.tool_timeout_s == 5.0


def test_the_recipes_tool_timeout_reaches_the_evaluation_run(tiny_model_dir, tmp_path):
    """End to end on the tiny model (in-process engine, local sandbox): the run's recorded settings are the
    recipe's 5 s per call, 3 turns and compact prompt, with the flag's token budget."""
    run = _run_folder(tmp_path, tiny_model_dir)
    bench = tmp_path / "bench.jsonl"
    bench.write_text(json.dumps({"id": "q0", "problem": "What is 6 times 7?", "answer": "42"}) + "\n")
    out = tmp_path / "out"
    res = _eval(
        "--model",
        str(run / "checkpoint-2"),
        "-b",
        str(bench),
        "--samples",
        "1",
        "--max-response-tokens",
        "8",
        "--dtype",
        "float32",
        "--quiet",
        "--out-dir",
        str(out),
    )
    assert res.exit_code == 0, res.output
    settings = json.loads((out / "run.json").read_text())
    settings = settings.get("settings", settings)
    assert (settings["tool_timeout_s"], settings["max_turns"], settings["max_tokens"]) == (5.0, 3, 8)
    assert settings["temperature"] == 1.0 and settings["protocol"]["prompt_style"] == "compact"
    (record,) = [json.loads(x) for x in (out / "trajectories.jsonl").read_text().splitlines()]
    assert 0 < record["num_response_tokens"] <= 8


# ------------------------------------------------------------------------------------------------ generated flags


def _help() -> str:
    from tirl.cli.main import app

    res = CliRunner().invoke(
        app, ["eval", "--help"], env={"TERMINAL_WIDTH": "200", "COLUMNS": "200"}, terminal_width=200
    )
    assert res.exit_code == 0, res.output
    return res.output


def test_help_lists_one_flag_per_setting_named_after_its_key():
    from tirl.cli.eval import EVAL_FLAGS, FLAG_SECTIONS, RENAMED_FLAGS

    text = _help()
    shown = set(re.findall(r"--[a-z][a-z0-9.-]*", text))
    expected = {
        "--max-turns",
        "--max-response-tokens",
        "--temperature",
        "--top-p",
        "--context-window",
        "--tool-timeout-s",
        "--tool-memory-mb",
        "--max-concurrency",  # every AgentLoopSettings field
        "--model",
        "--benchmarks",
        "--out-dir",
        "--subset",
        "--samples",
        "--use-tools",
        "--no-use-tools",
        "--engine",
        "--servers",
        "--scheduler",
        "--kv-capacities",
        "--admission-coef",
        "--sandbox",
        "--seed",
        "--dtype",
        "--answer-fallback",
        "--server-seed",
        "--no-server-seed",
        "--prompt-style",
        "--tool-call-format",
        "--protocol.answer-fallback",
        "--multi-call",
        "--lenient",
        "--config",
        "--no-recipe",
        "--quiet",
        "--print-config",
    }
    assert expected <= shown, sorted(expected - shown)
    assert not shown & set(RENAMED_FLAGS) - {"--no-tools"} and "--no-tools" not in text.replace("--no-use-tools", "")
    assert "KEY=VALUE" in text and "Agent-loop settings (rollout section)" in text
    # generated, not written: each flag is its setting's key, help from the field's docstring
    rollout = {f.name for f in dataclasses.fields(AgentLoopSettings)}
    assert {fl.key[-1] for fl in EVAL_FLAGS if fl.key[0] == "rollout"} == rollout
    assert {fl.key[-1] for fl in EVAL_FLAGS if fl.key[0] == "protocol"} == set(FLAG_SECTIONS["protocol"])
    from tirl.cli.eval import FLAG_NAMES

    for fl in EVAL_FLAGS:
        if fl.dotted_key in FLAG_NAMES:  # named for what it sets: sandbox.backend is --sandbox, as in tirl data
            assert fl.name == FLAG_NAMES[fl.dotted_key], fl
            continue
        assert fl.name.lstrip("-").replace("-", "_") in (fl.key[-1], fl.dotted_key), fl
    assert {fl.dotted_key for fl in EVAL_FLAGS if fl.key[0] == "sandbox"} == {"sandbox.backend", "sandbox.workers"}
    assert "wall-clock deadline of each tool call, seconds" in text  # AgentLoopSettings' docstring
    assert "[default: 30]" in text and "[default: 10.0]" in text  # the dataclass defaults


def test_a_setting_has_the_same_flag_in_tirl_eval_and_tirl_data():
    from tirl.cli.eval import EVAL_FLAGS
    from tirl.cli.sampler_options import SAMPLER_FLAGS

    # eval's agent-loop settings are its rollout section; the sampler has them at the top (SamplerConfig extends
    # AgentLoopSettings): the same setting by its AgentLoopSettings / section key
    def setting(fl):
        return fl.key[1:] if fl.key[0] == "rollout" else fl.key

    eval_names = {setting(fl): fl.name for fl in EVAL_FLAGS}
    data_names = {setting(fl): fl.name for fl in SAMPLER_FLAGS}
    shared = set(eval_names) & set(data_names)
    assert {
        ("max_response_tokens",),
        ("tool_timeout_s",),
        ("sandbox", "backend"),
        ("sandbox", "workers"),
        ("protocol", "prompt_style"),
        ("protocol", "answer_fallback"),
        ("seed",),
    } <= shared
    assert {k: eval_names[k] for k in shared} == {k: data_names[k] for k in shared}
    # and no flag name means one setting in one command and another in the other
    by_name = {name: k for k, name in eval_names.items()}
    assert all(by_name.get(name, k) == k for k, name in data_names.items())


def test_renamed_flags_command_is_the_one_mechanism():
    from tirl.cli.data import app as data_app
    from tirl.cli.eval import RENAMED_FLAGS, EvalCommand

    assert EvalCommand.renamed_flags == RENAMED_FLAGS
    commands = {c.name: c for c in data_app.registered_commands}
    assert commands["curate"].cls.renamed_flags["--out"] == "--out-dir"
    assert commands["filter-hard"].cls.renamed_flags["--max-tokens"] == RENAMED_FLAGS["--max-tokens"]
    assert "--out" not in commands["filter-hard"].cls.renamed_flags  # filter-hard's --out is a file, not a folder


@dataclasses.dataclass
class _Limits:
    """Limits.

    Attributes:
        seed: a name the top level has too.
        cpu_s: CPU seconds, per call.
    """

    seed: int = 1
    cpu_s: float = 2.0


@dataclasses.dataclass
class _Top:
    """Top.

    Attributes:
        seed: the base seed.
        fast: go fast.
    """

    seed: int = 0
    fast: bool = False
    limits: _Limits = dataclasses.field(default_factory=_Limits)


def test_generated_flags_cover_a_new_section_and_qualify_shared_names():
    from tirl.cli.config_flags import config_flags

    flags = {fl.dotted_key: fl for fl in config_flags(_Top, {"limits": None})}
    assert flags["seed"].name == "--seed" and flags["limits.seed"].name == "--limits.seed"
    assert flags["limits.cpu_s"].name == "--cpu-s" and flags["limits.cpu_s"].help == "CPU seconds, per call."
    assert flags["fast"].decls == ("--fast/--no-fast",)
    assert {fl.dotted_key for fl in config_flags(_Top, {})} == {"seed", "fast"}  # a section without flags
    assert config_flags(_Top, {"limits": ["cpu_s"]})[-1].name == "--cpu-s"


def test_renamed_flags_are_refused_with_the_new_name():
    for old, new in (
        ("--max-tokens", "--max-response-tokens"),
        ("--out", "--out-dir"),
        ("--tool-timeout", "--tool-timeout-s"),
        ("--no-tools", "--no-use-tools"),
    ):
        res = _eval("-m", "m", "-b", "aime24", old, *([] if old == "--no-tools" else ["1"]))
        assert res.exit_code == 2 and f"{old} is now {new}" in res.output, res.output


def test_key_value_arguments_reach_any_setting(monkeypatch, tmp_path):
    seen = _capture(monkeypatch)
    res = _eval(
        "-m",
        "m",
        "-b",
        "aime24",
        "--out-dir",
        str(tmp_path),
        "protocol.system_prompt=Be brief.",
        "rollout.context_window=900",
        "samples=3",
        "--samples",
        "4",
    )
    assert res.exit_code == 0, res.output
    (config,) = seen
    assert config.protocol.system_prompt == "Be brief." and config.rollout.context_window == 900
    assert config.samples == 4  # the flag wins over KEY=VALUE
    res = _eval("-m", "m", "-b", "aime24", "rollout.group_size=4")
    assert res.exit_code == 2 and "unknown key(s) rollout.group_size" in res.output


# --------------------------------------------------------------------------------------- documented evaluations


def test_the_demo_config_is_the_demos_settings():
    """configs/eval/demo.yaml with each row's mode on top (the file's documented KEY=VALUE arguments) is that row."""
    from tirl.config import merge, parse_overrides
    from tirl.eval.demo import DemoSettings, demo_configs
    from tirl.eval.modes import get_mode

    out = Path("runs/demo")
    settings = DemoSettings()
    demo_file = ROOT / "configs" / "eval" / "demo.yaml"
    for row, config in zip(settings.models, demo_configs(out, settings), strict=True):
        overrides = get_mode(row.mode).overrides()
        written = " ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in overrides.items())
        # the mode as the command line passes it: KEY=VALUE arguments, parsed as tirl eval parses them
        args = merge({"model": config.model, "out_dir": str(config.out_dir)}, parse_overrides(written.split()))
        from_file = load_eval_config(demo_file, args)
        assert from_file == config, row
        if row.mode != "tool-compact":  # the file's own mode needs no arguments; the others are written out
            assert f"--out-dir runs/demo/{row.label} {written}" in demo_file.read_text(), written
    assert settings.benchmarks == (("toolmath", 20), ("gsm8k", 30), ("math500", 10))


@pytest.mark.parametrize("path", sorted((ROOT / "configs" / "eval").glob("*.yaml")), ids=lambda p: p.name)
def test_every_eval_config_loads(path):
    config = load_eval_config(path, {"model": "m"})
    assert config.benchmarks and config.samples >= 1


def _documented_invocations(command: str = "tirl eval") -> list[tuple[str, str]]:
    """``(where, argument text)`` of every ``command`` in the docs, configs, benchmarks and Makefile:
    the text after the command up to a closing backquote, a comment, a shell separator or the end of the line
    (continuation lines joined)."""
    files = [
        ROOT / "README.md",
        ROOT / "Makefile",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "configs").rglob("*.yaml")),
        *sorted((ROOT / "benchmarks").rglob("*.sh")),
        *sorted((ROOT / "benchmarks").rglob("*.py")),
        *sorted((ROOT / "src").rglob("*.py")),
        *sorted((ROOT / "src").rglob("*.md")),
    ]
    found = []
    for f in files:
        if not f.is_file():
            continue
        text = re.sub(r"\\\n\s*(#\s*)?", " ", f.read_text(encoding="utf-8"))
        for m in re.finditer(re.escape(command) + r"\b", text):
            line_start = text.rfind("\n", 0, m.start()) + 1
            inline = text[line_start : m.start()].count("`") % 2 == 1  # inside `...`, which may span lines
            after = text[m.end() :]
            rest = after[: after.index("`")] if inline and "`" in after else re.split(r"`|\n", after, maxsplit=1)[0]
            rest = re.split(r"\s#|&&|;|\|", rest, maxsplit=1)[0]
            found.append((f"{f.relative_to(ROOT)}:{text[: m.start()].count(chr(10)) + 1}", rest))
    return found


def test_every_documented_tirl_eval_flag_exists():
    from tirl.cli.eval import EVAL_FLAGS

    known = {"--config", "-c", "--compare", "--no-recipe", "--quiet", "-q", "--print-config", "--help"}
    for fl in EVAL_FLAGS:
        for decl in fl.decls:
            known.update(decl.split("/"))
    invocations = _documented_invocations()
    assert len(invocations) > 30
    bad = [
        (where, flag)
        for where, rest in invocations
        for flag in re.findall(r"(?<![\w-])--?[a-z][\w.-]*", rest)
        if flag not in known
    ]
    assert not bad, bad


@pytest.mark.parametrize("command, least", [("curate", 10), ("filter-hard", 3), ("filter-pass-rate", 2)])
def test_every_documented_tirl_data_flag_exists(command, least):
    import typer.main

    from tirl.cli.main import app as tirl_app

    data = typer.main.get_command(tirl_app).commands["data"]  # type: ignore[attr-defined]
    known = {"--help"}
    for param in data.commands[command].params:
        known.update(param.opts + param.secondary_opts)
    invocations = _documented_invocations(f"tirl data {command}")
    assert len(invocations) >= least
    bad = [
        (where, flag)
        for where, rest in invocations
        for flag in re.findall(r"(?<![\w-])--?[a-z][\w.-]*", rest)
        if flag not in known
    ]
    assert not bad, bad
