"""The main job (``tirl demo``): the packaged base model in the field's chain of thought beside the same model after
each stage of tirl's recipe with the Python tool, on held-out toolmath problems and real benchmarks.

Each row is a model and its evaluation mode (:class:`DemoRow`; the modes by name: :mod:`tirl.eval.modes`, the
settings ``configs/eval/*.yaml`` use):

* ``base-cot``: the packaged Qwen2.5-Coder-0.5B-Instruct in mode ``cot``, the field's baseline (its own chat
  template, Qwen's "Please reason step by step, and put your final answer within \\boxed{}.", no tags, no
  prefill, no tool; the last box graded): what a user compares against. tirl's tool prompt, which the base model
  does not follow, would understate it (issue 43);
* ``tirl-sft-tool``: the same model after tirl's SFT stage (``qwen2.5-coder-0.5b-tirl-sft``) and
* ``tirl-rl-tool``: after the SFT stage and GRPO-RoC on toolmath (``qwen2.5-coder-0.5b-tirl``), both in mode
  ``tool-compact``, the format they were trained in, with the Python tool (local sandbox pool).

The problems: the first 20 of the held-out ``toolmath`` split (generated problems where one short program is
decisive; :mod:`tirl.data.toolmath`), the first 30 of the GSM8K test and the first 10 of MATH-500, 1 sample each
at T = 0.6, up to 3 turns with the tool (1 without), 768 response tokens. Each row is one resumable
:func:`tirl.eval.runner.run_eval` run under ``out/<label>/``; the comparison table puts the rows' columns next to
each other, under their labels. The report evaluates with 30 turns, 30K tokens and 16 samples; the files of
``configs/eval/`` measure the full sets.

Wall time, **an estimate (not measured)**: about 12 minutes on 2 CPU cores (in process, bf16) from an empty
model cache, within the 15 minutes the demo is sized for. The demo of 30 November (3 rows x 30 problems, 3
turns, 512 tokens) took 6.6 minutes for about 18,000 response tokens; this one generates about 1.9 times as many
(the base's chain of thought is about 280 tokens a GSM8K problem, more on MATH-500: about 21,000 tokens for its
60 problems, in one turn and one batch; the trained models add about 100 tokens for each GSM8K problem).

The real-math model of issue 43 (``experiments/real-math``) is not packaged yet. When it ships by name (e.g.
``qwen2.5-coder-0.5b-tirl-math``), it is one more row in :data:`DEFAULT_ROWS` with the mode of its manifest's
``prompt_style`` (``tool-native`` for a model trained in the native format); a test checks that every packaged
model's row uses the mode it was trained in.

Not covered: printing (the caller prints the returned table), training (``tirl train``).
"""

from __future__ import annotations

import dataclasses
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from rich.table import Table

from tirl.eval.modes import get_mode
from tirl.eval.report import summary_table
from tirl.eval.runner import EvalConfig, EvalListener, EvalResult, run_eval
from tirl.rollout.agent_loop import AgentLoopSettings

BASE_MODEL = "qwen2.5-coder-0.5b-instruct"
SFT_MODEL = "qwen2.5-coder-0.5b-tirl-sft"
TRAINED_MODEL = "qwen2.5-coder-0.5b-tirl"


class DemoRow(NamedTuple):
    """One model of the demo and how it is evaluated.

    Attributes:
        label: the row's name: its output folder ``out/<label>`` and its columns' header in the comparison table
            (``"toolmath base-cot"``); the defaults end in the mode (``-cot``, ``-tool``) so the table says it.
        model: model reference (built-in or packaged trained name, HF folder; see ``tirl.models.resolve``).
        mode: the evaluation mode, a name of :data:`tirl.eval.modes.MODES` (``cot``, ``tool-native``,
            ``tool-full``, ``tool-compact``).
    """

    label: str
    model: str
    mode: str


DEFAULT_ROWS: tuple[DemoRow, ...] = (
    DemoRow("base-cot", BASE_MODEL, "cot"),
    DemoRow("tirl-sft-tool", SFT_MODEL, "tool-compact"),
    DemoRow("tirl-rl-tool", TRAINED_MODEL, "tool-compact"),
    # The real-math model (issue 43) is one more line here once it is packaged; it is not yet (module docstring).
)
"""The default demo's rows, in the table's order."""


@dataclass(frozen=True)
class DemoSettings:
    """The main job's embedded default (README "The main job"; ``configs/eval/demo.yaml`` holds the same settings).

    Attributes:
        models: the rows (:class:`DemoRow`: label, model, evaluation mode), evaluated in this order. Plain
            ``(label, model, mode)`` tuples are accepted.
        benchmarks: ``(benchmark, first N problems)`` pairs, for every row.
        samples: samples per problem.
        temperature: sampling temperature (the report evaluates at 0.6).
        max_turns: assistant turns per trajectory with the tool (the ``cot`` mode has 1).
        max_tokens: response budget per trajectory (model and tool tokens); one budget for every row, so a row's
            ``truncated (%)`` says whether it bound.
        concurrency: trajectories in flight (all of one row's run at once: the in-process engine batches
            statically, so fewer, larger waves finish sooner).
        seed: base seed of the per-sample seeds.

    Raises:
        ValueError: a row with an unknown mode, an empty label, or a label used twice (the rows' output folders
            would collide).
    """

    models: tuple[DemoRow, ...] = DEFAULT_ROWS
    benchmarks: tuple[tuple[str, int], ...] = (("toolmath", 20), ("gsm8k", 30), ("math500", 10))
    samples: int = 1
    temperature: float = 0.6
    max_turns: int = 3
    max_tokens: int = 768
    concurrency: int = 60
    seed: int = 0

    def __post_init__(self) -> None:
        rows = tuple(DemoRow(*row) for row in self.models)
        object.__setattr__(self, "models", rows)  # frozen: normalise plain tuples once, here
        for row in rows:
            get_mode(row.mode)  # an unknown mode fails here, before any model loads
            if not row.label:
                raise ValueError(f"demo row of {row.model!r} has an empty label")
        labels = [row.label for row in rows]
        if len(set(labels)) != len(labels):
            raise ValueError(f"demo labels must differ (each is an output folder), got {labels}")


def demo_configs(out: Path, settings: DemoSettings = DemoSettings()) -> list[EvalConfig]:
    """One :class:`EvalConfig` per row of ``settings``, in the row's mode, writing to ``out/<label>``."""
    configs = []
    for row in settings.models:
        shared = EvalConfig(
            model=row.model,
            benchmarks=[name for name, _ in settings.benchmarks],
            subsets=dict(settings.benchmarks),
            out_dir=out / row.label,
            samples=settings.samples,
            rollout=AgentLoopSettings(
                temperature=settings.temperature,
                max_turns=settings.max_turns,
                max_response_tokens=settings.max_tokens,
                max_concurrency=settings.concurrency,
            ),
            seed=settings.seed,
        )
        configs.append(get_mode(row.mode).apply(shared))
    return configs


def demo_title(settings: DemoSettings = DemoSettings()) -> str:
    """The comparison table's title: each row's label, model and mode in words, then the shared settings."""
    rows = "; ".join(f"{r.label} = {r.model}, {get_mode(r.mode).description}" for r in settings.models)
    return (
        f"{rows}. T={settings.temperature}, up to {settings.max_turns} turns with the tool, "
        f"{settings.max_tokens} tokens, {settings.samples} sample(s) a problem"
    )


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


__all__ = [
    "BASE_MODEL",
    "DEFAULT_ROWS",
    "DemoRow",
    "DemoSettings",
    "SFT_MODEL",
    "TRAINED_MODEL",
    "comparison_table",
    "demo_configs",
    "demo_title",
    "run_demo",
]
