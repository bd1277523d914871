"""``tirl plot``: draw training curves (PNG) from the ``metrics.jsonl`` of one or more runs."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer


def plot_command(
    runs: List[Path] = typer.Argument(..., help="Run folders (or metrics.jsonl files); stages in order."),
    out: Path = typer.Option(Path("plots"), "--out", "-o", help="Folder for the PNG files."),
    title: str = typer.Option("", "--title", help="Suffix for the figure titles."),
) -> None:
    """Draw reward, tool-error-in-correct (before/after RoC), length and overview curves as PNG files."""
    from rich.console import Console

    from tirl.train.plot import plot_runs

    console = Console(stderr=True)
    try:
        written = plot_runs(runs, out, title or None)
    except (ValueError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    for path in written:
        typer.echo(str(path))
