"""``tirl data``: training-data curation commands (thin: parse arguments, call the library).

``tirl data filter-hard --model CKPT --samples 8`` writes the problems the policy does not solve 8 out of 8
times (the report's stage-3 set); re-running with the same ``--out`` resumes. ``tirl data curate SOURCES --out
DIR`` curates problem collections (:mod:`tirl.cli.curate`, docs/data.md). Both sample through
:func:`tirl.train.sampler.policy_sampler`.
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from tirl.cli import sampler_options as opts

# Defaults come from the library's dataclasses (one setting, one place); they import no heavy module.
from tirl.protocol.config import ProtocolConfig as _P
from tirl.service.config import ExecutorConfig as _X
from tirl.train.config import DataConfig as _D
from tirl.train.hard_subset import HardSubsetConfig as _H
from tirl.train.sampler import SamplerConfig as _S

_DEFAULT_SOURCES = _D().sources
_SOURCE_HELP = ("Problem source (repeatable): math, aime, champ, gsm8k, name:N, synthetic:N, a JSONL "
                f"(default: {' '.join(_DEFAULT_SOURCES)}).")

app = typer.Typer(
    name="data",
    help="Training-data curation.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command("filter-hard")
def filter_hard_command(
    model: str = typer.Option(..., "--model", help="Policy: checkpoint folder (full or LoRA), built-in name, GGUF."),
    samples: int = typer.Option(_H.samples, "--samples", help="Trajectories per problem; kept when fewer are correct."),
    source: list[str] | None = typer.Option(
        None, "--source", help=_SOURCE_HELP),
    out: Path = typer.Option(Path("runs/stage3_hard.jsonl"), "--out", help="Subset file (JSONL)."),
    limit: int | None = typer.Option(None, "--limit", help="Consider at most this many problems."),
    base: str | None = typer.Option(None, "--base", help="Base model of a LoRA adapter checkpoint."),
    max_turns: int = opts.MAX_TURNS,
    max_tokens: int = opts.MAX_TOKENS,
    temperature: float = opts.TEMPERATURE,
    tool_timeout: float = opts.TOOL_TIMEOUT,
    prompt_style: str = opts.PROMPT_STYLE,
    dtype: str = opts.DTYPE,
    sandbox: str = opts.SANDBOX,
    workers: int = opts.WORKERS,
    batch_size: int = opts.BATCH_SIZE,
    chunk: int = typer.Option(_H.chunk_problems, "--chunk", help="Problems per progress checkpoint."),
    seed: int = opts.SEED,
) -> None:
    """Write the problems the policy does not solve SAMPLES out of SAMPLES times (the stage-3 hard subset)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # see tirl.cli.train: spinning OpenMP threads on shared CPUs
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from tirl.data.training import load_training_problems
    from tirl.runtime import load_sampling_policy
    from tirl.train.hard_subset import filter_hard
    from tirl.train.sampler import policy_sampler

    console = Console(stderr=True)
    try:
        sampler_cfg = _S(max_turns=max_turns, max_response_tokens=max_tokens, temperature=temperature,
                         tool_timeout_s=tool_timeout, sandbox=_X(backend=sandbox, workers=workers),
                         batch_size=batch_size, seed=seed, protocol=_P(prompt_style=prompt_style))
        cfg = _H(samples=samples, chunk_problems=chunk)
        problems = load_training_problems(source or _DEFAULT_SOURCES, seed=seed, limit=limit, shuffle=limit is not None)
        policy, tokenizer = load_sampling_policy(model, base, dtype)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None

    with policy_sampler(policy, tokenizer, sampler_cfg) as (generate, score), \
            Progress(TextColumn("filter-hard"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                     console=console) as bar:
        task = bar.add_task("problems", total=len(problems))
        result = filter_hard(problems, generate, score, out, cfg,
                             progress=lambda done, total: bar.update(task, completed=done))
    console.print(
        f"{result.hard} of {result.total} problems are hard (solved fewer than {samples}/{samples}); "
        f"{result.solved_all} always solved; {result.resumed} taken from an earlier run. Written to {out}"
    )


from tirl.cli.curate import curate_command as _curate_command  # noqa: E402

app.command("curate")(_curate_command)
