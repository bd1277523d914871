"""``tirl data``: training-data curation commands (thin: parse arguments, call the library).

``tirl data filter-hard --model CKPT --samples 8`` writes the problems the policy does not solve 8 out of 8
times (the report's stage-3 set); re-running with the same ``--out`` resumes. ``tirl data filter-pass-rate
--eval-run DIR --out OUT.jsonl`` writes the problems a finished ``tirl eval`` run solved sometimes, not always or
never (:mod:`tirl.eval.pass_rate`; it samples nothing). ``tirl data curate SOURCES --out-dir DIR`` curates
problem collections (:mod:`tirl.cli.curate`, docs/data.md). filter-hard and curate sample through
:func:`tirl.runtime.sampler.policy_sampler`; their sampling flags are generated from
:class:`tirl.runtime.sampler.SamplerConfig`'s fields (:mod:`tirl.cli.sampler_options`) under the names ``tirl eval``
gives the same settings, and a flag of an earlier version whose name was not its setting's (``--max-tokens``,
``--tool-timeout``) is refused with the new name.
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import typer

from tirl.cli import sampler_options as opts
from tirl.cli.config_flags import given_on_command_line, renamed_flags_command, with_flags
from tirl.data.hard_subset import HardSubsetConfig as _H

# Defaults come from the library's dataclasses (one setting, one place); they import no heavy module.
from tirl.train.config import DataConfig as _D

_DEFAULT_SOURCES = _D().sources
_SOURCE_HELP = (
    "Problem source (repeatable): math, aime, champ, gsm8k, name:N, synthetic:N, a JSONL "
    f"(default: {' '.join(_DEFAULT_SOURCES)})."
)

app = typer.Typer(
    name="data",
    help="Training-data curation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


FILTER_HARD_RENAMED = dict(opts.RENAMED_FLAGS)
"""Flags of ``tirl data filter-hard`` that were renamed (refused with the new name)."""


def _filter_hard(ctx: typer.Context, **values: Any) -> None:
    """Write the problems the policy does not solve SAMPLES out of SAMPLES times (the stage-3 hard subset).

    The sampling flags are the settings of SamplerConfig, named as in tirl eval; re-running with the same --out
    resumes.
    """
    model, samples, source, out = values["model"], values["samples"], values["source"], values["out"]
    limit, base, dtype, chunk = values["limit"], values["base"], values["dtype"], values["chunk"]
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tirl.cli.train: spinning OpenMP threads on shared CPUs
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tirl.data.hard_subset import filter_hard
    from tirl.data.training import load_training_problems
    from tirl.runtime import load_sampling_policy
    from tirl.runtime.sampler import policy_sampler

    console = Console(stderr=True)
    try:
        sampler_cfg = opts.sampler_config(values, given_on_command_line(ctx))
        cfg = _H(samples=samples, chunk_problems=chunk)
        problems = load_training_problems(
            source or _DEFAULT_SOURCES, seed=sampler_cfg.seed, limit=limit, shuffle=limit is not None
        )
        policy, tokenizer = load_sampling_policy(model, base, dtype)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None

    with (
        policy_sampler(policy, tokenizer, sampler_cfg) as (generate, score),
        Progress(
            TextColumn("filter-hard"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        ) as bar,
    ):
        task = bar.add_task("problems", total=len(problems))
        result = filter_hard(
            problems, generate, score, out, cfg, progress=lambda done, total: bar.update(task, completed=done)
        )
    console.print(
        f"{result.hard} of {result.total} problems are hard (solved fewer than {samples}/{samples}); "
        f"{result.solved_all} always solved; {result.resumed} taken from an earlier run. Written to {out}"
    )


filter_hard_command = with_flags(
    _filter_hard,
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        _param(
            "model",
            typer.Option(..., "--model", help="Policy: checkpoint folder (full or LoRA), built-in name, GGUF."),
            str,
        ),
        _param(
            "samples",
            typer.Option(_H.samples, "--samples", help="Trajectories per problem; kept when fewer are correct."),
            int,
        ),
        _param("source", typer.Option(None, "--source", help=_SOURCE_HELP), list[str] | None),
        _param("out", typer.Option(Path("runs/stage3_hard.jsonl"), "--out", help="Subset file (JSONL)."), Path),
        _param("limit", typer.Option(None, "--limit", help="Consider at most this many problems."), int | None),
        _param("base", typer.Option(None, "--base", help="Base model of a LoRA adapter checkpoint."), str | None),
        opts.DTYPE,
        _param("chunk", typer.Option(_H.chunk_problems, "--chunk", help="Problems per progress checkpoint."), int),
    ],
    opts.SAMPLER_FLAGS,
    [],
)
"""``tirl data filter-hard``: :func:`_filter_hard` with the generated sampler flags as its signature."""

app.command("filter-hard", cls=renamed_flags_command("tirl data filter-hard", FILTER_HARD_RENAMED))(filter_hard_command)


@app.command("filter-pass-rate")
def filter_pass_rate_command(
    eval_run: Path = typer.Option(..., "--eval-run", help="The --out-dir of a tirl eval run (its samples are read)."),
    out: Path = typer.Option(..., "--out", help="Subset file (JSONL, the source's problem rows); stats beside it."),
    min_correct: int = typer.Option(1, "--min-correct", help="Keep problems with at least this many correct."),
    max_correct: int | None = typer.Option(
        None, "--max-correct", help="Keep problems with at most this many correct (default: samples - 1)."
    ),
    samples: int | None = typer.Option(
        None, "--samples", help="Samples per problem (N); default: the run's (summary.json, else its records)."
    ),
    complete_only: bool = typer.Option(
        False, "--complete-only", help="From a partial run, keep only the problems with all N samples."
    ),
    source: str | None = typer.Option(
        None, "--source", help="The JSONL the eval read, when its path does not reach it from here (one benchmark)."
    ),
) -> None:
    """Write the problems a tirl eval run solved sometimes (min..max of N correct; default 1..N-1): GRPO's
    useful problems, from an evaluation at the RL temperature (docs/data.md, "Pass-rate filter")."""
    from rich.console import Console
    from rich.markup import escape

    from tirl.eval.pass_rate import PassRateError, filter_pass_rate, histogram_table, summary_lines

    console = Console()
    try:
        result = filter_pass_rate(
            eval_run,
            out,
            min_correct=min_correct,
            max_correct=max_correct,
            samples=samples,
            complete_only=complete_only,
            source=source,
        )
    except PassRateError as exc:
        Console(stderr=True).print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(histogram_table(result))
    for line in summary_lines(result):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


from tirl.cli.curate import CURATE_RENAMED as _CURATE_RENAMED  # noqa: E402
from tirl.cli.curate import curate_command as _curate_command  # noqa: E402

app.command("curate", cls=renamed_flags_command("tirl data curate", _CURATE_RENAMED))(_curate_command)
