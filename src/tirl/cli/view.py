"""``tirl view``: write the offline HTML trajectory viewer of an eval or training run (:mod:`tirl.view`)."""

from __future__ import annotations

from pathlib import Path

import typer


def view_command(
    run_dir: Path = typer.Argument(
        ...,
        help="An eval run folder (trajectories.jsonl) or a training run folder "
        "(trajectories/step_N_rankR.jsonl, logging.log_trajectories=true).",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="The HTML file to write (default RUN_DIR/view.html)."),
) -> None:
    """Write one self-contained HTML page showing every trajectory of a run (opens from disk, no network)."""
    from rich.console import Console

    from tirl.view import write_view

    console = Console(stderr=True)
    try:
        path = write_view(run_dir, out)
    except FileNotFoundError as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    typer.echo(str(path))
