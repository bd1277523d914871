"""The evaluation modes by name (tirl.eval.modes): what each sets, and that every documented evaluation in
configs/eval/ is in the mode it says, so the files and the named modes (which ``tirl demo`` uses) cannot drift."""

from __future__ import annotations

from pathlib import Path

import pytest

from tirl.eval.config import EvalConfig, load_eval_config
from tirl.eval.modes import MODES, get_mode, mode_of
from tirl.protocol import ProtocolConfig
from tirl.rollout.agent_loop import AgentLoopSettings

ROOT = Path(__file__).resolve().parents[1]
EVAL_DIR = ROOT / "configs" / "eval"
FILE_MODES = {
    "gsm8k-test-cot": "cot",
    "math500-cot": "cot",
    "gsm8k-test-tool": "tool-native",
    "math500-tool": "tool-native",
    "demo": "tool-compact",
    "cpu-compare": "tool-compact",
}


def test_the_modes_are_the_fields_baselines_and_tirls_formats():
    assert list(MODES) == ["cot", "tool-native", "tool-full", "tool-compact"]
    assert get_mode("cot").overrides() == {"protocol.prompt_style": "cot", "use_tools": False, "rollout.max_turns": 1}
    assert get_mode("tool-native").overrides() == {"protocol.prompt_style": "native", "use_tools": True}
    assert {m.prompt_style for m in MODES.values()} == {"cot", "native", "full", "compact"}  # one mode a style
    with pytest.raises(ValueError, match="unknown evaluation mode 'native'.*cot, tool-native, tool-full"):
        get_mode("native")


@pytest.mark.parametrize("name", sorted(FILE_MODES))
def test_each_baseline_file_is_exactly_its_named_mode(name):
    config = load_eval_config(EVAL_DIR / f"{name}.yaml", {"model": "m"})
    mode = get_mode(FILE_MODES[name])
    assert mode_of(config) is mode
    assert mode.apply(config) == config  # the file sets every setting of the mode (cot: 1 turn) as the mode does


@pytest.mark.parametrize("path", sorted(EVAL_DIR.glob("*.yaml")), ids=lambda p: p.name)
def test_every_documented_evaluation_is_in_a_named_mode(path):
    config = load_eval_config(path, {"model": "m"})
    mode = mode_of(config)
    assert mode is not None, path.name
    assert config.mode_label() == mode.description


def test_apply_changes_the_mode_and_nothing_else(tmp_path):
    config = EvalConfig(
        model="m",
        benchmarks=["gsm8k"],
        out_dir=tmp_path,
        samples=3,
        rollout=AgentLoopSettings(max_turns=5, max_response_tokens=700, temperature=0.7),
        protocol=ProtocolConfig(prompt_style="compact", tool_response_max_chars=300),
    )
    cot = get_mode("cot").apply(config)
    assert (cot.protocol.prompt_style, cot.use_tools, cot.rollout.max_turns) == ("cot", False, 1)
    assert (cot.samples, cot.rollout.max_response_tokens, cot.rollout.temperature) == (3, 700, 0.7)
    assert cot.protocol.tool_response_max_chars == 300 and config.protocol.prompt_style == "compact"  # a copy
    native = get_mode("tool-native").apply(cot)
    assert (native.protocol.prompt_style, native.use_tools, native.rollout.max_turns) == ("native", True, 1)
    # tirl's tags without the tool are no mode (an ablation, not a baseline)
    tagged = EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path, use_tools=False)
    assert mode_of(tagged) is None and tagged.mode_label() == "no tools (tirl's tags)"
    # a chain of thought with the default 30 turns is still the chain of thought (no tool: one turn either way)
    cot_style = ProtocolConfig(prompt_style="cot")
    long_cot = EvalConfig(model="m", benchmarks=["gsm8k"], out_dir=tmp_path, protocol=cot_style)
    assert long_cot.rollout.max_turns == 30 and mode_of(long_cot) is get_mode("cot")
