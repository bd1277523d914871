"""``tirl train``: GRPO-RoC agentic RL from a YAML recipe (thin: parse arguments, call ``tirl.train.rl``).

``tirl train rl --config FILE [key.sub=value ...]`` runs one stage; re-running the same command resumes from
the newest checkpoint in the run's ``output_dir``. Under ``accelerate launch`` every process runs it.
``tirl train sft --config FILE [key.sub=value ...]`` runs the recipe's first stage (``tirl.train.sft``) the same
way and writes a plain model folder (``output_dir/final``) that ``tirl train rl`` and ``tirl eval`` start from.
The recipe is checked when it is read (its validation and its model name), before ``--print-config`` prints it
and before a run loads anything. ``--help`` lists every key of the recipe by section
(:func:`tirl.cli.config_reference.keys_help_command`; all of them, with types: docs/config.md).

Unless the environment says otherwise, the command sets ``OMP_WAIT_POLICY=PASSIVE`` before torch is loaded:
on a shared CPU machine OpenMP threads that spin while waiting made generation 10-20x slower (measured with
SmolLM2-135M, 16 sequences: 3.3 tokens/s spinning vs 67 tokens/s passive, machine load about 5 on 2 cores).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from tirl.cli.config_reference import keys_help_command

if TYPE_CHECKING:
    from tirl.train.config import RLConfig
    from tirl.train.sft_config import SFTConfig

PASSIVE_OMP = ("OMP_WAIT_POLICY", "PASSIVE")

app = typer.Typer(
    name="train",
    help="Train a policy with agentic RL (GRPO with Resample-on-Correct) on TRL.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _rl_config_class() -> type:
    from tirl.train.config import RLConfig

    return RLConfig


def _sft_config_class() -> type:
    from tirl.train.sft_config import SFTConfig

    return SFTConfig


@app.command("rl", cls=keys_help_command(_rl_config_class))
def rl_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML recipe (configs/rl/*.yaml)."),
    overrides: list[str] | None = typer.Argument(
        None, help="Overrides such as rollout.group_size=8 optim.learning_rate=2e-5 (dotted keys of the recipe)."
    ),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved configuration and exit."),
    dry_run: bool = typer.Option(
        False,
        "--dry-run",
        help="Check the recipe on this machine up to where the GPU is needed (data, tokenizer, sandbox, "
        "servers, output folder) without loading the weights, and exit.",
    ),
) -> None:
    """Run (or resume) one RL stage: sample 2G trajectories per problem with the Python tool, keep G with RoC,
    update the policy with TRL; checkpoints, metrics.jsonl and the final model go to the recipe's output_dir."""
    os.environ.setdefault(*PASSIVE_OMP)
    from tirl.train.config import load_config

    def run(cfg: RLConfig) -> Path:
        from tirl.train.rl import train

        _configure_logging("tirl.train.rl")
        _sigterm_interrupts()
        return train(cfg)

    def finished(cfg: RLConfig) -> Path | None:
        from tirl.train.rl import finished_run

        return finished_run(cfg)

    def load() -> RLConfig:
        cfg = load_config(config, overrides or [])
        _check_recipe(cfg)
        return cfg

    if dry_run:
        _dry_run(load)
        return
    _run_stage(load, run, print_config, "final weights", finished)


def _dry_run(load: Callable[[], RLConfig]) -> None:
    """``tirl train rl --dry-run``: :func:`tirl.train.dry_run.dry_run` of the loaded recipe, one line per check;
    the first failure is one line and exit code 2."""
    import logging

    from rich.console import Console

    from tirl.rollout.agent_loop import SandboxUnavailable

    console = Console(stderr=True, soft_wrap=True)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        from tirl.train.dry_run import dry_run

        lines = dry_run(load())
    except (ValueError, FileNotFoundError, SandboxUnavailable) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    for line in lines:
        typer.echo(f"dry run: {line}")
    typer.echo("dry run: passed")


@app.command("sft", cls=keys_help_command(_sft_config_class))
def sft_command(
    config: Path = typer.Option(..., "--config", "-c", help="YAML recipe (configs/sft/*.yaml)."),
    overrides: list[str] | None = typer.Argument(
        None, help="Overrides such as optim.max_steps=10 data.sources=gsm8k_tir:200 (dotted keys of the recipe)."
    ),
    print_config: bool = typer.Option(False, "--print-config", help="Print the resolved configuration and exit."),
) -> None:
    """Run (or resume) the SFT stage: tool-calling and chat conversations in tirl's format, loss on the model's
    tokens only; checkpoints, metrics.jsonl and the final (LoRA-merged) model go to the recipe's output_dir."""
    os.environ.setdefault(*PASSIVE_OMP)
    from tirl.train.sft_config import load_sft_config

    def load() -> SFTConfig:
        cfg = load_sft_config(config, overrides or [])
        _check_recipe(cfg)
        return cfg

    def run(cfg: SFTConfig) -> Path:
        import logging

        from tirl.train.sft import train_sft

        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        logging.getLogger("tirl.train.sft").setLevel(logging.INFO)  # data counts, resume, duration
        return train_sft(cfg)

    _run_stage(load, run, print_config, "final model")


@app.command("replay")
def replay_command(
    run_dir: Path = typer.Argument(..., help="The output_dir of a tirl train rl run that logged its trajectories."),
    step: int = typer.Option(..., "--step", "-s", help="The step to recompute (1-based)."),
    keep: Path | None = typer.Option(None, "--keep", help="Replay into this folder and keep it (default: temporary)."),
) -> None:
    """Recompute step N of a run from checkpoint N-1 and its config.yaml; report whether the sampled tokens,
    rewards, loss and grad_norm match the logs (RUN_DIR/replay_step_N.json). Exit 0: all match; 1: something
    differs; 2: the step cannot be replayed."""
    os.environ.setdefault(*PASSIVE_OMP)
    from rich.console import Console

    from tirl.analysis.step_replay import ReplayError, print_report
    from tirl.train.replay import replay_step

    console = Console(stderr=True, soft_wrap=True)
    _configure_logging("tirl.train.replay")
    try:
        report = replay_step(run_dir, step, keep=keep)
    except (ReplayError, ValueError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    print_report(report, Console(soft_wrap=True))
    raise typer.Exit(0 if report.ok else 1)


def _check_recipe(cfg: RLConfig | SFTConfig) -> None:
    """The checks a recipe passes when it is read, before ``--print-config`` prints it and before a run loads
    anything: its own validation (group size, selection rule, batch arithmetic, for the launch's
    ``WORLD_SIZE`` processes; the run repeats it with the count the trainer sees) and its model name (a
    misspelled one fails here, not after the imports of a run).

    Raises:
        ValueError: an invalid setting, named.
        FileNotFoundError: (:class:`tirl.models.ModelNotFoundError`) no such model.
    """
    from tirl.models import ModelNotFoundError, check_reference
    from tirl.runs.layout import is_model_folder_name

    cfg.validate(int(os.environ.get("WORLD_SIZE", "1") or 1))
    try:
        check_reference(cfg.model.name_or_path)
    except ModelNotFoundError as exc:
        name = str(cfg.model.name_or_path)
        if is_model_folder_name(Path(name).name):
            # a run's output that does not exist yet: the recipe's comments name the stage that writes it
            raise ModelNotFoundError(
                f"model {name} does not exist yet: it is the output of an earlier stage (the recipe's "
                "comments name it): train that first, or set model.name_or_path"
            ) from exc
        raise


def _is_main_process() -> bool:
    """False in the processes of ``accelerate launch`` (or torchrun) other than rank 0."""
    return os.environ.get("RANK", "0") in ("", "0")


def _configure_logging(stage_logger: str) -> None:
    """Plain ``message`` lines on stderr: warnings, and INFO of ``stage_logger`` (resume, data counts); only
    errors in processes other than the main one, so that ``accelerate launch`` prints each line once."""
    import logging
    import warnings

    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    if _is_main_process():
        logging.getLogger(stage_logger).setLevel(logging.INFO)
        _warn_once()
    else:
        logging.getLogger().setLevel(logging.ERROR)
        logging.getLogger("tirl").setLevel(logging.ERROR)
        warnings.simplefilter("ignore")


def _warn_once() -> None:
    """Show each library warning (category and text) once per process: transformers and torch repeat theirs
    every step (deprecations, ``pin_memory`` without an accelerator), which buried the step lines."""
    import warnings

    shown: set[tuple[type, str]] = set()
    original = warnings.showwarning
    if getattr(original, "tirl_once", False):
        return

    def show(message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None) -> None:
        key = (category, str(message))
        if key not in shown:
            shown.add(key)
            original(message, category, filename, lineno, file, line)

    show.tirl_once = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def _sigterm_interrupts() -> None:
    """SIGTERM (a scheduler's stop, ``kill``) stops the run like Ctrl-C: the sandbox and its temporary folders
    are cleaned up and the resume line is printed (the default action would end the process on the spot)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def _resume_hint(output_dir: str) -> str:
    """Where a re-run of an interrupted run continues from."""
    from tirl.runs.checkpoints import last_checkpoint

    ckpt = last_checkpoint(output_dir)
    return (
        f"re-run the same command to resume from {ckpt}"
        if ckpt
        else f"no checkpoint in {output_dir} yet: re-running starts from the beginning"
    )


def _run_stage(
    load: Callable[[], Any],
    run: Callable[[Any], Path],
    print_config: bool,
    what: str,
    finished: Callable[[Any], Path | None] | None = None,
) -> None:
    """Load a stage's configuration, print it or run the stage, and turn bad input into exit code 2.

    ``load`` returns the resolved config (it raises ValueError/FileNotFoundError on a bad file or override);
    ``finished`` (optional) returns the final folder of a run that has already trained all its steps, which is
    then reported with exit code 0 instead of training; ``run`` trains and returns the final folder
    (ValueError/FileNotFoundError/KeyError on bad data or paths); a run stopped by the watch-dog exits with
    code 3 and says how to go on.
    """
    import yaml
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # one message, one line (no wrapping at 80 columns)
    try:
        cfg = load()
    except (ValueError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if print_config:
        typer.echo(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        return
    from tirl.runs.layout import metrics_path
    from tirl.train.watchdog import RunStopped

    done = finished(cfg) if finished is not None else None
    if done is not None:
        if _is_main_process():
            console.print(
                f"[green]finished:[/] {cfg.output_dir} has trained all {cfg.max_steps} steps; {what} in "
                f"{done}. To train on, re-run with a larger max_steps."
            )
        return
    try:
        final = run(cfg)
    except RunStopped as exc:
        if not _is_main_process():
            raise typer.Exit(3) from None
        if exc.final is not None:
            console.print(f"[red]watchdog:[/] {exc}. That was the last step: {what} in {exc.final}.")
        else:
            where = exc.checkpoint or f"the newest checkpoint in {cfg.output_dir}"
            console.print(
                f"[red]watchdog:[/] {exc}. {where} is saved: fix the cause and re-run the same "
                "command to resume from it (add watchdog.enabled=false to go on regardless)."
            )
        raise typer.Exit(3) from None
    except KeyboardInterrupt:
        if _is_main_process():
            console.print(f"[yellow]interrupted:[/] {_resume_hint(cfg.output_dir)}")
        # the sandbox is closed by now; what is left is a generation thread finishing its batch (tens of
        # seconds on a CPU), which the interpreter would wait for at exit
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    except (ValueError, FileNotFoundError, KeyError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    if _is_main_process():
        console.print(f"[green]done:[/] {what} in {final}; metrics in {metrics_path(cfg.output_dir)}")
