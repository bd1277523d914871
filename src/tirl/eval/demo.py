"""The main job (``tirl demo``): the packaged base model and the same model after each stage of tirl's recipe.

Three models, side by side: the packaged Qwen2.5-Coder-0.5B-Instruct, the same model after tirl's SFT stage
(``qwen2.5-coder-0.5b-tirl-sft``) and after the SFT stage and GRPO-RoC on toolmath (``qwen2.5-coder-0.5b-tirl``).
All answer the same problems with the Python tool (local sandbox pool) in the protocol the trained
model learnt (the compact prompt): the first problems of the held-out ``toolmath`` split (generated problems
where one short program is decisive; :mod:`tirl.data.toolmath`) and of MATH-500. Each model is one resumable
:func:`tirl.eval.runner.run_eval` run under ``out/<label>/``; the comparison table puts their columns next to
each other. Limits are sized for about 15 minutes on 2 CPU cores (the report evaluates with 30 turns, 30K
tokens and 16 samples).

Not covered: printing (the caller prints the returned table), training (``tirl train``).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from rich.table import Table

from tirl.eval.report import summary_table
from tirl.eval.runner import EvalConfig, EvalListener, EvalResult, run_eval
from tirl.protocol.config import PromptStyle, ProtocolConfig
from tirl.rollout.agent_loop import AgentLoopSettings

BASE_MODEL = "qwen2.5-coder-0.5b-instruct"
SFT_MODEL = "qwen2.5-coder-0.5b-tirl-sft"
TRAINED_MODEL = "qwen2.5-coder-0.5b-tirl"


@dataclass(frozen=True)
class DemoSettings:
    """The main job's embedded default (README "The main job").

    Attributes:
        models: ``(label, model)`` pairs, evaluated in this order.
        benchmarks: ``(benchmark, first N problems)`` pairs.
        samples: samples per problem.
        temperature: sampling temperature (the report evaluates at 0.6).
        max_turns: assistant turns per trajectory.
        max_tokens: response budget per trajectory (model and tool tokens).
        concurrency: trajectories in flight (all of one model's run at once: the in-process engine batches
            statically, so fewer, larger waves finish sooner).
        seed: base seed of the per-sample seeds.
        prompt_style: the protocol's prompt style (the trained model's).
    """

    models: tuple[tuple[str, str], ...] = (("base", BASE_MODEL), ("tirl-sft", SFT_MODEL), ("tirl-rl", TRAINED_MODEL))
    benchmarks: tuple[tuple[str, int], ...] = (("toolmath", 20), ("math500", 10))
    samples: int = 1
    temperature: float = 0.6
    max_turns: int = 3
    max_tokens: int = 512
    concurrency: int = 30
    seed: int = 0
    prompt_style: PromptStyle = "compact"


def demo_configs(out: Path, settings: DemoSettings = DemoSettings()) -> list[EvalConfig]:
    """One :class:`EvalConfig` per model of ``settings``, writing to ``out/<label>``."""
    return [
        EvalConfig(
            model=model,
            benchmarks=[name for name, _ in settings.benchmarks],
            subsets=dict(settings.benchmarks),
            out_dir=out / label,
            samples=settings.samples,
            rollout=AgentLoopSettings(
                temperature=settings.temperature,
                max_turns=settings.max_turns,
                max_response_tokens=settings.max_tokens,
                max_concurrency=settings.concurrency,
            ),
            seed=settings.seed,
            protocol=ProtocolConfig(prompt_style=settings.prompt_style),
        )
        for label, model in settings.models
    ]


def comparison_table(results: Sequence[EvalResult], labels: Sequence[str], title: str | None = None) -> Table:
    """One column per (benchmark, model): the models' columns of a benchmark side by side."""
    columns = []
    names = [s.benchmark for s in results[0].summaries] if results else []
    for name in names:
        for label, result in zip(labels, results):
            for s in result.summaries:
                if s.benchmark == name:
                    columns.append(dataclasses.replace(s, benchmark=f"{name} {label}"))
    return summary_table(columns, title=title)


async def run_demo(
    out: Path,
    settings: DemoSettings = DemoSettings(),
    *,
    fresh: bool = False,
    listener: Callable[[], EvalListener] | None = None,
) -> tuple[list[EvalResult], float]:
    """Run the demo (see the module docstring); returns each model's result and the wall time in seconds.

    Each model's run reports to a new ``listener()`` (silent when None; ``tirl demo`` shows progress and each
    model's table with ``tirl.cli.eval_display.ConsoleListener``).

    Raises:
        As :func:`tirl.eval.runner.run_eval` (an unknown model, a sandbox that fails its health check, an output
        folder written with other settings).
    """
    if fresh and out.exists():
        shutil.rmtree(out)
    started = time.perf_counter()
    results = []
    for config in demo_configs(out, settings):
        results.append(await run_eval(config, listener=listener() if listener is not None else None))
    return results, time.perf_counter() - started


__all__ = ["BASE_MODEL", "DemoSettings", "SFT_MODEL", "TRAINED_MODEL", "comparison_table", "demo_configs", "run_demo"]
