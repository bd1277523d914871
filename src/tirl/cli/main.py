"""Entry point of the ``tirl`` command: the root typer app and the registration of sub-commands.

Each part of tirl keeps its commands in its own module under ``tirl.cli`` and is registered here. Only
commands that exist are listed.
"""

from __future__ import annotations

import typer

from tirl import __version__

app = typer.Typer(
    name="tirl",
    help="Tool-integrated reasoning with RL: evaluate and train LLM agents that call a Python tool.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"tirl {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version_callback, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Tool-integrated reasoning with RL."""
    from tirl.cli.quiet import filter_known_warnings

    filter_known_warnings()  # third-party warnings tirl knows harmless (tirl.cli.quiet); TIRL_ALL_WARNINGS=1 shows them


from tirl.cli.eval import EvalCommand as _EvalCommand  # noqa: E402
from tirl.cli.eval import demo_command as _demo_command  # noqa: E402
from tirl.cli.eval import eval_command as _eval_command  # noqa: E402

app.command("eval", cls=_EvalCommand)(_eval_command)
app.command("demo")(_demo_command)


from tirl.cli.sandbox import app as _sandbox_app  # noqa: E402

app.add_typer(_sandbox_app, name="sandbox")


from tirl.cli.data import app as _data_app  # noqa: E402
from tirl.cli.plot import plot_command as _plot_command  # noqa: E402
from tirl.cli.train import app as _train_app  # noqa: E402

app.add_typer(_train_app, name="train")
app.add_typer(_data_app, name="data")
app.command("plot")(_plot_command)


from tirl.cli.analyze import app as _analyze_app  # noqa: E402
from tirl.cli.view import view_command as _view_command  # noqa: E402

app.command("view")(_view_command)
app.add_typer(_analyze_app, name="analyze")


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
