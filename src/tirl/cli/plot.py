"""``tirl plot``: draw training curves (PNG) from the ``metrics.jsonl`` of one or more runs."""

from __future__ import annotations

from pathlib import Path

import typer


def plot_command(
    runs: list[Path] = typer.Argument(
        ...,
        help="Run folders (or metrics.jsonl files); stages in order (with --compare: LABEL=DIR or DIR, one per run).",
    ),
    out: Path = typer.Option(Path("plots"), "--out", "-o", help="Folder for the PNG files."),
    title: str = typer.Option("", "--title", help="Suffix for the figure titles."),
    compare: bool = typer.Option(
        False,
        "--compare",
        help="Overlay the runs (each LABEL=DIR or DIR) instead of "
        "chaining them: at equal steps and at equal wall time.",
    ),
    evals: list[str] = typer.Option(
        [],
        "--eval",
        help="A tirl eval folder of one of the run's checkpoints "
        "(repeat): draws heldout.png, avg pass@1 against step; "
        "with --compare LABEL=DIR, LABEL one of the runs'.",
    ),
    table: Path | None = typer.Option(
        None, "--table", help="Also write the steps as a Markdown table to this file (not with --compare)."
    ),
    band: str = typer.Option(
        "minmax",
        "--band",
        help="With --compare, where several runs share a LABEL (seeds): the band around their mean, minmax or std.",
    ),
) -> None:
    """Draw reward, tool-error-in-correct (before/after RoC), length and overview curves as PNG files (and with
    --table a per-step Markdown table); with --compare, overlay separate runs (an ablation) at equal steps and
    equal wall time, the runs that share a LABEL (seeds of one arm) as their mean with a band."""
    from rich.console import Console

    from tirl.analysis.plot import plot_compare, plot_heldout, plot_runs

    console = Console(stderr=True)
    try:
        if compare:
            labelled: dict[str, list[str]] = {}  # a label given to several runs (seeds): drawn as mean and band
            for item in map(str, runs):
                label, sep, path = item.partition("=")
                labelled.setdefault(label if sep else Path(item).name, []).append(path if sep else item)
            written = plot_compare(labelled, out, title or None, band=band)
            if evals:
                groups: dict[str, list[str]] = {}
                for item in evals:
                    label, sep, path = item.partition("=")
                    if not sep or label not in labelled:
                        raise ValueError(
                            f"--eval with --compare takes LABEL=DIR, LABEL one of {', '.join(labelled)}; got {item!r}"
                        )
                    groups.setdefault(label, []).append(path)
                written.append(plot_heldout(groups, out, title or None, band=band))
        else:
            written = plot_runs(runs, out, title or None)
            if table is not None:
                from tirl.analysis.step_table import step_table

                table.parent.mkdir(parents=True, exist_ok=True)
                table.write_text(step_table(runs), encoding="utf-8")
                written.append(table)
            if evals:
                written.append(plot_heldout(evals, out, title or None))
    except (ValueError, FileNotFoundError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    for path in written:
        typer.echo(str(path))
