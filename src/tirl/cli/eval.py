"""``tirl eval`` and ``tirl demo``: benchmark evaluation from the command line.

Thin wrappers: read ``--config FILE`` (if given), ``KEY=VALUE`` arguments and the flags given on the command
line into :class:`tirl.eval.config.EvalConfig` (:func:`tirl.eval.config.resolve_eval_config`; flags win over
``KEY=VALUE``, which wins over the file, which wins over the evaluated checkpoint's recipe), call
:func:`tirl.eval.runner.run_eval`, turn the expected failures (unknown model or benchmark, unusable sandbox, an
output folder from another run) into a one-line message and exit code 2. ``demo`` is the README's main job
(:mod:`tirl.eval.demo`): the packaged Qwen2.5-Coder-0.5B in chain of thought and the same model after tirl's SFT
stage and after GRPO-RoC with the tool, side by side, each row in its evaluation mode (:mod:`tirl.eval.modes`).

The flags of ``tirl eval`` are not declared here: :mod:`tirl.cli.config_flags` generates one per setting from
:class:`EvalConfig`'s fields and those of its ``rollout`` section (:class:`AgentLoopSettings`) and, for the
common ones, of ``protocol`` (:class:`ProtocolConfig`), named after the setting (``rollout.max_turns`` is
``--max-turns``, ``use_tools`` is ``--use-tools/--no-use-tools``), with the help of the field's docstring and
the dataclass's default. Every other setting (the rest of ``protocol``, sections added later) is a
``KEY=VALUE`` argument with its dotted key, as in ``tirl train rl``. Only ``--config``, ``--compare``,
``--no-recipe``, ``--quiet`` and ``--print-config``, which are about the command rather than the run, are written
by hand.

``--compare A,B`` evaluates several models with the same settings (the file, ``KEY=VALUE`` and flags; no model's
recipe), one folder per model under ``--out-dir``, and prints one side-by-side table (:func:`compare_configs`).
An in-process evaluation whose sample budget per problem is the report's size warns in one line on a machine
without a GPU (:func:`hours_on_cpu_warning`).

Both commands set ``OMP_WAIT_POLICY=PASSIVE`` (unless the environment sets it) before torch is loaded: on a
shared CPU machine, spinning OpenMP threads make in-process generation many times slower (see
``tirl.cli.train``).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
import yaml
from rich.console import Console

from tirl.cli.config_flags import (
    FLAG_NAMES,
    PROTOCOL_FLAG_FIELDS,
    config_flags,
    flag_values,
    given_on_command_line,
    renamed_flags_command,
    with_flags,
)
from tirl.config import merge, parse_overrides, read_yaml_mapping

# The flags come from the configuration dataclasses (one setting, one place); these modules load no engine and
# no model.
from tirl.eval.config import DEFAULT_CONCURRENCY, EvalConfig, resolve_eval_config

if TYPE_CHECKING:
    from tirl.eval.runner import EvalListener, EvalResult

_CONCURRENCY_HELP = ", ".join(f"{n} for {engine}" for engine, n in DEFAULT_CONCURRENCY.items())

FLAG_SECTIONS: dict[str, tuple[str, ...] | None] = {
    "rollout": None,
    "protocol": PROTOCOL_FLAG_FIELDS,
    "sandbox": ("backend", "workers"),
}
"""The sections of :class:`EvalConfig` whose settings get flags (None: all of them); the rest of a section and
the other sections are ``KEY=VALUE`` arguments."""

EVAL_FLAGS = config_flags(
    EvalConfig,
    FLAG_SECTIONS,
    short={"model": "-m", "benchmarks": "-b", "samples": "-k", "out_dir": "-o"},
    help_extra={
        "model": "Required unless --config names it; a checkpoint of a tirl training run (RUN/checkpoint-N, "
        "RUN/final) brings its recipe's rollout and protocol settings (see --no-recipe).",
        "benchmarks": "Repeat or separate with commas; NAME:N takes the first N problems. Required unless "
        "--config names them.",
        "servers": "Repeat for several servers (the rollout scheduler balances them).",
        "kv_capacities": "One value applies to every server.",
        "out_dir": "Default: runs/eval/<model>-<tools|no-tools|cot|native>.",
        "rollout.max_concurrency": f"Default {_CONCURRENCY_HELP}.",
    },
    names=FLAG_NAMES,
    panels={
        "sandbox": "Where the code runs (sandbox section; the other keys as sandbox.KEY=VALUE)",
        "": "Evaluation settings",
        "rollout": "Agent-loop settings (rollout section)",
        "protocol": "Conversation format (protocol section; the other keys as protocol.KEY=VALUE)",
    },
)
"""The generated flags of ``tirl eval`` (:func:`tirl.cli.config_flags.config_flags` of :class:`EvalConfig`)."""

RENAMED_FLAGS = {
    "--benchmark": "--benchmarks",
    "--server": "--servers",
    "--kv-capacity": "--kv-capacities",
    "--no-tools": "--no-use-tools",
    "--out": "--out-dir",
    "--max-tokens": "--max-response-tokens",
    "--concurrency": "--max-concurrency",
    "--tool-timeout": "--tool-timeout-s",
}
"""Flags of earlier versions whose name was not their setting's: not accepted, only named in the error."""

EvalCommand = renamed_flags_command("tirl eval", RENAMED_FLAGS)
"""The click command of ``tirl eval``: a flag of :data:`RENAMED_FLAGS` is a usage error naming its setting's
flag (:func:`tirl.cli.config_flags.renamed_flags_command`)."""


def _passive_openmp() -> None:
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def flag_overrides(values: dict[str, Any], given: Any = None) -> dict[str, Any]:
    """The configuration mapping (:func:`tirl.eval.config.load_eval_config`'s ``overrides``) of the generated
    flags in ``values`` (``{parameter name: value}``); ``given(name)`` says whether a flag was set on the
    command line (default: every parameter in ``values``). ``kv_capacities`` stay strings (the caller expands
    them with the number of servers)."""
    return flag_values(EVAL_FLAGS, values, given or (lambda name: name in values))


INTERRUPT_GRACE_S = 1.5
"""Seconds an interrupted ``tirl eval`` gives its clean-up (the sandbox's workers, the launched server's stop
signal) before it exits regardless: what is left then is a generation thread finishing its batch (tens of
seconds on a CPU) or a vLLM server shutting down (a minute), neither of which the stored samples need."""


def _stored_samples(out_dir: Path) -> int:
    """Samples stored in ``out_dir`` (complete lines of its trajectories file; 0 without one)."""
    from tirl.runs.evals import sample_count

    try:
        return sample_count(out_dir)
    except OSError:
        return 0


@contextlib.contextmanager
def stop_promptly(say: Callable[[], None], grace_s: float = INTERRUPT_GRACE_S) -> Iterator[None]:
    """While the block runs, Ctrl-C (SIGINT) and SIGTERM end the process with exit code 130 within about
    ``grace_s`` seconds.

    The first signal calls ``say()`` (the one line saying how to resume), then raises KeyboardInterrupt in the
    main thread, so the run's ``finally`` blocks close what they can (the sandbox's workers and folders; a
    launched server is sent SIGTERM, and the kernel sends it one too when this process ends:
    ``PR_SET_PDEATHSIG``); a timer ends the process after ``grace_s`` whatever they still wait for, and a second
    signal ends it at once. Each sample is appended and fsynced as it finishes (:mod:`tirl.runs.evals`), so
    nothing stored is lost. Only in the main thread (signal handlers live there); elsewhere the block runs as
    is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)

    interrupted = False

    def on_signal(signum: int, frame: Any) -> None:
        nonlocal interrupted
        if interrupted:
            leave()
        interrupted = True
        timer = threading.Timer(grace_s, leave)  # first: should say() block (a display's lock), it still ends
        timer.daemon = True
        timer.start()
        with contextlib.suppress(Exception):  # the line must never keep the process alive
            say()
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        if not interrupted:  # raised by something else than the handler (a test, a debugger)
            with contextlib.suppress(Exception):
                say()
        leave()  # without waiting for the generation thread the interpreter would join at exit
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _run(config: EvalConfig, console: Console, progress: bool = True, warn: bool = True) -> EvalResult:
    """Run one evaluation (with its own vLLM server under ``launch_server``); expected failures become a message
    and exit code 2; Ctrl-C ends it promptly with one line saying how to resume (:func:`stop_promptly`). ``warn``:
    print the hours-on-a-CPU line when it applies (after the model name is checked, so a refusal stays one line)."""
    from tirl.cli.eval_display import ConsoleListener
    from tirl.eval.launch import launched_eval_server
    from tirl.models import ModelNotFoundError, check_reference

    try:  # a misspelled name fails here, before a server starts, a model loads or run.json is written
        check_reference(config.model)
    except ModelNotFoundError as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    if warn:
        _warn_if_hours_on_cpu(config)
    listener = ConsoleListener(console, progress=progress)

    def say() -> None:
        listener.close()
        typer.secho(
            f"tirl eval: interrupted; {_stored_samples(config.out_dir)} samples are stored in {config.out_dir}: "
            "re-run the same command to resume",
            fg="yellow",
            err=True,
        )

    with stop_promptly(say), contextlib.ExitStack() as stack:
        try:  # only the server's start is guarded here: the run's own errors are _run_served's
            served = stack.enter_context(
                launched_eval_server(config, say=lambda line: typer.echo(f"tirl eval: {line}", err=True))
            )
        except (ModelNotFoundError, ValueError, RuntimeError) as exc:
            typer.secho(f"tirl eval: {exc}", fg="red", err=True)
            raise typer.Exit(2) from None
        return _run_served(served, listener)


def _run_served(config: EvalConfig, listener: EvalListener) -> EvalResult:
    from tirl.data.benchmarks import BenchmarkError
    from tirl.eval.runner import run_eval
    from tirl.models import ModelNotFoundError
    from tirl.rollout.agent_loop import SandboxUnavailable
    from tirl.rollout.lora_server import ServerSyncError
    from tirl.runs.evals import ResumeMismatch

    if config.engine == "openai":
        from tirl.rollout.capacity import probe_health

        for url in config.servers:  # before generating: a dead server would fail every trajectory one by one
            if not asyncio.run(probe_health(url)):
                typer.secho(
                    f"tirl eval: the server {url} does not answer (GET /health, /v1/models): "
                    "start it, or fix --servers",
                    fg="red",
                    err=True,
                )
                raise typer.Exit(2)
    try:
        return asyncio.run(run_eval(config, listener=listener))
    except ResumeMismatch as exc:
        typer.secho(f"tirl eval: {exc} (the folder is --out-dir)", fg="red", err=True)
        raise typer.Exit(2) from None
    except (ModelNotFoundError, BenchmarkError, SandboxUnavailable, ServerSyncError, ValueError) as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None


def _eval_command(ctx: typer.Context, **values: Any) -> None:
    """Evaluate a model on math benchmarks with the Python tool: avg pass@1 over K samples and more.

    Writes one JSONL line per trajectory, summary.json and run.json to --out-dir
    and prints a table per benchmark; re-running with the same --out-dir resumes.

    Each setting is a flag named after its key, or KEY=VALUE with its dotted key.
    Flags win over KEY=VALUE, which wins over --config, which wins over the
    recipe of a checkpoint (RUN/checkpoint-N, RUN/final: RUN/config.yaml).
    """
    _passive_openmp()
    from tirl.rollout.scheduler import parse_kv_capacities

    console = Console()
    config_file, quiet, print_config = values["config_file"], values["quiet"], values["print_config"]
    given = given_on_command_line(ctx)
    models = compare_models(values.get("compare"))
    if models and given("model"):
        typer.secho("tirl eval: give --model or --compare, not both", fg="red", err=True)
        raise typer.Exit(2)
    try:
        overrides = merge(parse_overrides(values["settings"] or []), flag_overrides(values, given))
        file_data = read_yaml_mapping(config_file) if config_file is not None else {}
        if overrides.get("kv_capacities") is not None:
            servers = overrides.get("servers", file_data.get("servers") or [])
            raw = overrides["kv_capacities"]
            overrides["kv_capacities"] = parse_kv_capacities(
                [raw] if isinstance(raw, (str, int)) else raw, len(servers)
            )
        if models:
            configs, labels = compare_configs(models, config_file, overrides)
        else:
            config, recipe = resolve_eval_config(config_file, overrides, recipe=not values["no_recipe"])
    except (ValueError, FileNotFoundError) as exc:
        typer.secho(f"tirl eval: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    if models:
        if print_config:  # the settings every model gets (model and out_dir are the first's)
            typer.echo(yaml.safe_dump(configs[0].to_dict(), sort_keys=False), nl=False)
            return
        _compare(configs, labels, console, progress=not quiet)
        return
    if recipe is not None:
        typer.echo(f"tirl eval: {recipe.summary()}", err=True)
    if print_config:
        typer.echo(yaml.safe_dump(config.to_dict(), sort_keys=False), nl=False)
        return
    result = _run(config, console, progress=not quiet)
    console.print(
        f"wrote {config.out_dir}/ (trajectories.jsonl, summary.json); {result.new_samples} new, "
        f"{result.resumed_samples} resumed samples in {result.elapsed_s:.0f} s"
    )


COMPARE_OUT_DIR = Path("runs/eval/compare")
"""Where ``tirl eval --compare`` writes without ``--out-dir`` (one folder per model inside)."""


def compare_models(values: list[str] | None) -> list[str]:
    """The models of ``--compare`` (repeated, or comma-separated), in order, without repeats."""
    models = [m.strip() for value in values or [] for m in value.split(",") if m.strip()]
    return list(dict.fromkeys(models))


def compare_labels(models: list[str]) -> list[str]:
    """A short folder name and column label per model: a name as it is, a path or Hub id by its last two parts
    (``runs/mine/rl/final`` -> ``rl-final``, ``Qwen/Qwen2.5-0.5B-Instruct`` -> ``Qwen-Qwen2.5-0.5B-Instruct``);
    other characters than letters, digits, ``.``, ``_`` and ``-`` become ``-``; repeats get ``-2``, ``-3``."""
    import re

    labels: list[str] = []
    for model in models:
        parts = [p for p in model.rstrip("/").split("/") if p and p != "."]
        label = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts[-2:]) if parts else model) or "model"
        base, n = label, 1
        while label in labels:
            n += 1
            label = f"{base}-{n}"
        labels.append(label)
    return labels


def compare_configs(
    models: list[str], config_file: Path | None, overrides: dict[str, Any]
) -> tuple[list[EvalConfig], list[str]]:
    """One :class:`EvalConfig` per model of ``--compare``: the file, ``KEY=VALUE`` and flags, and no recipe (a
    checkpoint's ``RUN/config.yaml`` or a packaged model's manifest), so that every model runs with the same
    settings; ``out_dir`` is ``OUT/<label>`` (:func:`compare_labels`). Prints one line per model whose recipe
    would have set something else, naming it (``--prompt-style`` etc. set it for all).

    Raises:
        ValueError: as :func:`tirl.eval.config.resolve_eval_config` (no benchmarks, a bad value).
    """
    labels = compare_labels(models)
    file_out = read_yaml_mapping(config_file).get("out_dir") if config_file is not None else None
    out = Path(overrides.get("out_dir") or file_out or COMPARE_OUT_DIR)
    configs = []
    for model, label in zip(models, labels):
        over = {**overrides, "model": model, "out_dir": str(out / label)}
        config, _ = resolve_eval_config(config_file, over, recipe=False)
        _, recipe = resolve_eval_config(config_file, over, recipe=True)
        if recipe is not None:
            ignored = []
            for key, value in recipe.taken.items():
                section, _, leaf = key.partition(".")
                if getattr(getattr(config, section), leaf, value) != value:
                    ignored.append(f"{key}={value}")
            if ignored:
                typer.echo(
                    f"tirl eval: --compare uses the same settings for every model; not taken from the recipe "
                    f"{recipe.path}: {', '.join(ignored)}",
                    err=True,
                )
        configs.append(config)
    return configs, labels


def _compare(configs: list[EvalConfig], labels: list[str], console: Console, progress: bool = True) -> list:
    """Run each configuration of ``--compare`` in turn (each prints its own table), then the side-by-side
    table of :func:`tirl.eval.demo.comparison_table`."""
    from tirl.eval.demo import comparison_table

    results = [_run(config, console, progress=progress, warn=i == 0) for i, config in enumerate(configs)]
    first = configs[0]
    title = (
        f"{' vs '.join(f'{label} = {c.model}' for label, c in zip(labels, configs))}; the same settings: "
        f"{first.samples} samples, T={first.rollout.temperature}, {first.rollout.max_turns} turns, "
        f"{first.rollout.max_response_tokens} tokens, prompt {first.protocol.prompt_style}"
    )
    width = 38 + 20 * len(labels) * max(1, len(first.benchmarks))
    if not console.is_terminal and console.width < width:
        console = Console(width=width)
    console.print(comparison_table(results, labels, title=title))
    console.print(f"wrote {', '.join(str(c.out_dir) for c in configs)}")
    return results


CPU_TOKENS_PER_PROBLEM = 16384
"""Sample budget per problem (samples x ``rollout.max_response_tokens``) above which an in-process evaluation
on a machine without a GPU gets a one-line warning: the report's defaults (16 x 30,720) take hours per
benchmark on a CPU; the CPU evaluations of ``configs/eval/`` stay well under it (cpu-compare: 4 x 384)."""


def hours_on_cpu_warning(config: EvalConfig, cuda: bool) -> str | None:
    """The warning line for ``config`` on a machine with (``cuda``) or without a GPU, or None."""
    budget = config.samples * config.rollout.max_response_tokens
    if cuda or config.engine != "hf" or config.launch_server is True or budget <= CPU_TOKENS_PER_PROBLEM:
        return None
    return (
        f"{config.samples} samples x up to {config.rollout.max_response_tokens:,} tokens per problem, generated in "
        "process without a GPU, can take hours per benchmark; configs/eval/cpu-compare.yaml is sized for a CPU "
        "(4 samples, 384 tokens), or set --samples and --max-response-tokens"
    )


def _warn_if_hours_on_cpu(config: EvalConfig) -> None:
    if config.engine != "hf" or config.samples * config.rollout.max_response_tokens <= CPU_TOKENS_PER_PROBLEM:
        return  # before importing torch
    import torch

    line = hours_on_cpu_warning(config, bool(torch.cuda.is_available()))
    if line:
        typer.secho(f"tirl eval: {line}", fg="yellow", err=True)


def _param(name: str, default: Any, annotation: Any) -> inspect.Parameter:
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)


eval_command = with_flags(
    _eval_command,
    [
        inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context),
        _param(
            "config_file",
            typer.Option(
                None,
                "--config",
                "-c",
                help="YAML file of the run's settings: EvalConfig's keys, with the agent-loop "
                "settings in 'rollout' and the format in 'protocol' as in an RL recipe "
                "(configs/eval/*.yaml). KEY=VALUE and flags override it.",
            ),
            Path | None,
        ),
        _param(
            "compare",
            typer.Option(
                None,
                "--compare",
                help="Evaluate several models with the same settings, side by side (instead of --model): "
                "repeat, or separate with commas. No model's recipe is read; each run goes to "
                "--out-dir/<model> (default runs/eval/compare) and one table compares them.",
            ),
            list[str] | None,
        ),
        _param(
            "no_recipe",
            typer.Option(
                False,
                "--no-recipe",
                help="Do not take rollout and protocol settings from the recipe (RUN/config.yaml) "
                "of a checkpoint given as --model.",
            ),
            bool,
        ),
    ],
    EVAL_FLAGS,
    [
        _param("quiet", typer.Option(False, "--quiet", "-q", help="No progress bar."), bool),
        _param(
            "print_config",
            typer.Option(False, "--print-config", help="Print the resolved settings as a --config file and exit."),
            bool,
        ),
        _param(
            "settings",
            typer.Argument(
                None,
                metavar="[KEY=VALUE]...",
                help="Any setting by its dotted key, as in a --config file "
                "(protocol.system_prompt='...', rollout.context_window=null).",
            ),
            list[str] | None,
        ),
    ],
)
"""``tirl eval``: :func:`_eval_command` with the generated flags as its signature (for typer)."""


def run_demo(out: Path, fresh: bool = False, console: Console | None = None) -> list:
    """Run :func:`tirl.eval.demo.run_demo` with its default settings, print the comparison table and the time;
    expected failures become a message and exit code 2. Returns the results (base model first)."""
    from tirl.data.benchmarks import BenchmarkError
    from tirl.eval import demo
    from tirl.models import ModelNotFoundError
    from tirl.rollout.agent_loop import SandboxUnavailable
    from tirl.runs.evals import ResumeMismatch

    console = console or Console()
    settings = demo.DemoSettings()
    try:
        from tirl.cli.eval_display import ConsoleListener

        results, elapsed = asyncio.run(
            demo.run_demo(out, settings, fresh=fresh, listener=lambda: ConsoleListener(console))
        )
    except (ResumeMismatch, ModelNotFoundError, BenchmarkError, SandboxUnavailable, ValueError) as exc:
        typer.secho(f"tirl demo: {exc}", fg="red", err=True)
        raise typer.Exit(2) from None
    labels = [row.label for row in settings.models]
    table = demo.comparison_table(results, labels, title=demo.demo_title(settings))
    width = 38 + 20 * len(labels) * len(settings.benchmarks)  # every column readable, not squeezed into 80 in a log
    if not console.is_terminal and console.width < width:
        console = Console(width=width)
    console.print(table)
    new = sum(r.new_samples for r in results)
    console.print(
        f"demo finished in {elapsed / 60:.1f} min ({new} trajectories generated now; outputs in {out}/; "
        "re-running resumes, --fresh starts over)"
    )
    return results


def demo_command(
    out: Path = typer.Option(Path("runs/demo"), "--out", "-o", help="Output folder of the demo runs."),
    fresh: bool = typer.Option(False, "--fresh", help="Delete earlier demo outputs first (else resume)."),
) -> None:
    """The main job: the packaged Qwen2.5-Coder-0.5B in chain of thought (the field's baseline) beside the same
    model after tirl's SFT stage and after GRPO-RoC with the Python tool (local sandbox), on held-out toolmath,
    GSM8K test and MATH-500 problems. About 12 minutes on 2 cores (an estimate)."""
    _passive_openmp()
    run_demo(out, fresh=fresh)
