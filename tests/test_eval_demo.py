"""The main job's logic (tirl.eval.demo): the models side by side, progress visible off a terminal."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console

from tirl.cli.eval_display import ConsoleListener
from tirl.eval.demo import (
    BASE_MODEL,
    SFT_MODEL,
    TRAINED_MODEL,
    DemoSettings,
    comparison_table,
    demo_configs,
    run_demo,
)
from tirl.models.trained import trained_models


def test_default_demo_compares_the_base_the_sft_and_the_rl_model_in_the_trained_protocol(tmp_path):
    configs = demo_configs(tmp_path)
    assert [c.model for c in configs] == [BASE_MODEL, SFT_MODEL, TRAINED_MODEL]
    assert [c.out_dir.name for c in configs] == ["base", "tirl-sft", "tirl-rl"]
    assert {SFT_MODEL, TRAINED_MODEL} <= set(trained_models())  # both ship inside the package
    assert all(c.use_tools and c.protocol.prompt_style == "compact" for c in configs)
    assert configs[0].benchmarks == ["toolmath", "math500"]


@pytest.mark.slow
def test_demo_run_prints_progress_lines_and_a_side_by_side_table_off_a_terminal(tmp_path, tiny_model_dir):
    settings = DemoSettings(
        models=(("base", str(tiny_model_dir)), ("tirl", str(tiny_model_dir))),
        benchmarks=(("toolmath", 2), ("math500", 1)),
        max_tokens=12,
        max_turns=1,
        concurrency=4,
    )
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=False, width=60)  # a narrow log must not wrap progress lines
    results, elapsed = asyncio.run(run_demo(tmp_path, settings, listener=lambda: ConsoleListener(console)))
    text = buffer.getvalue()
    progress = [line for line in text.splitlines() if "trajectories (" in line]
    assert any("0/3 trajectories (0%)" in line for line in progress)
    assert any("3/3 trajectories (100%)" in line and "ETA" in line for line in progress)
    assert elapsed > 0 and [r.summary["new_samples"] for r in results] == [3, 3]
    out = io.StringIO()
    Console(file=out, width=200).print(comparison_table(results, ["base", "tirl"]))
    header = next(line for line in out.getvalue().splitlines() if "toolmath" in line)
    order = [header.index(col) for col in ("toolmath base", "toolmath tirl", "math500 base", "math500 tirl")]
    assert order == sorted(order)
    # resumed: nothing new is generated the second time
    again, _ = asyncio.run(run_demo(tmp_path, settings))
    assert [r.new_samples for r in again] == [0, 0]
