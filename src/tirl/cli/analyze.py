"""``tirl analyze``: analyses of saved trajectories (``tirl analyze entropy``, :mod:`tirl.analysis.entropy`)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

app = typer.Typer(help="Analyse saved trajectories.", no_args_is_help=True)


@app.command("entropy")
def entropy_command(
    run_dir: Path = typer.Argument(..., help="An eval run folder or a training run folder (with saved token ids)."),
    models: list[str] = typer.Option(
        ...,
        "--model",
        "-m",
        help="Model to re-score with (folder, .gguf, built-in "
        "name, tiny:<tokenizer>); repeat to compare checkpoints on the same tokens.",
    ),
    labels: list[str] | None = typer.Option(
        None,
        "--label",
        help="A name per --model (default: the model's folder name); the file is RUN_DIR/entropy/<label>.jsonl.",
    ),
    limit: int | None = typer.Option(None, "--limit", min=1, help="Score at most this many trajectories."),
    first_k: int = typer.Option(
        10, "--first-k", min=1, help="Model tokens after a tool response counted as 'post-tool'."
    ),
    top: int = typer.Option(30, "--top", min=1, help="High-entropy tokens listed."),
    dtype: str = typer.Option(
        "float32",
        "--dtype",
        help="float32 (the default: entropies without bf16 rounding), auto (bf16 where the "
        "CPU computes it natively, faster), bfloat16 or float16.",
    ),
) -> None:
    """Re-score saved trajectories (exact token ids) for per-token entropy; report forking and post-tool tokens.

    Writes RUN_DIR/entropy/<label>.jsonl per model, RUN_DIR/entropy/report.json and RUN_DIR/entropy/entropy.png,
    and prints the tables. `tirl view RUN_DIR` then colours tokens by entropy.
    """
    from rich.console import Console
    from rich.table import Table

    from tirl.analysis.entropy import entropy_report, label_for, score_run
    from tirl.analysis.entropy_plot import plot_entropy
    from tirl.models import load, model_reference

    console = Console(stderr=True)
    if labels and len(labels) != len(models):
        console.print(f"[red]error:[/] {len(labels)} --label for {len(models)} --model")
        raise typer.Exit(2)
    names = list(labels) if labels else [label_for(m) for m in models]
    if len(set(names)) != len(names):
        console.print(f"[red]error:[/] two models share the label {names}; give --label for each")
        raise typer.Exit(2)
    for model_ref, label in zip(models, names):
        try:
            model, tokenizer = load(model_reference(model_ref), dtype=dtype)
        except (ValueError, OSError) as exc:
            console.print(f"[red]error:[/] cannot load {model_ref}: {exc}")
            raise typer.Exit(2) from None
        with console.status(f"scoring with {label}") as status:
            try:
                path = score_run(
                    run_dir,
                    model,
                    tokenizer,
                    label,
                    model_name=model_ref,
                    limit=limit,
                    progress=lambda d, t, label=label: status.update(f"scoring with {label}: {d}/{t}"),
                )
            except (FileNotFoundError, ValueError) as exc:
                console.print(f"[red]error:[/] {exc}")
                raise typer.Exit(2) from None
        console.print(f"wrote {path}")
        del model
    report = entropy_report(run_dir, names, first_k=first_k, top=top)
    folder = Path(report["run"]) / "entropy"
    (folder / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    png = plot_entropy(report, folder / "entropy.png")

    out = Console()
    table = Table(title=f"generated-token entropy (nats), {report['trajectories']} trajectories")
    table.add_column("")
    for st in report["labels"]:
        table.add_column(st["label"], justify="right")
    rows = [("tokens", lambda s: f"{s['tokens']}"), ("mean", lambda s: f"{s['mean']:.3f}")]
    rows += [(q, lambda s, q=q: f"{s['quantiles'][q]:.3f}") for q in ("p50", "p80", "p90", "p95", "p99")]
    rows += [
        (f"mean, first {first_k} after a tool response", lambda s: _num(s["post_tool"]["mean_post"])),
        ("  (tokens)", lambda s: f"{s['post_tool']['n_post']}"),
        ("mean, all other generated tokens", lambda s: _num(s["post_tool"]["mean_other"])),
        ("share >= p80, after a tool response", lambda s: _num(s["post_tool"]["high_share_post"])),
        ("share >= p80, elsewhere", lambda s: _num(s["post_tool"]["high_share_other"])),
    ]
    for name, get in rows:
        table.add_row(name, *[get(s) for s in report["labels"]])
    out.print(table)
    for st in report["labels"]:
        ft = Table(title=f"top high-entropy tokens under {st['label']} (entropy >= p80 = {st['high_threshold']:.3f})")
        for col in ("token", "count", "share of its uses >= p80", "mean entropy"):
            ft.add_column(col, justify="left" if col == "token" else "right")
        for f in st["forking"][:top]:
            ft.add_row(repr(f["token"]), str(f["count"]), f"{f['share_high']:.2f}", f"{f['mean_entropy']:.2f}")
        out.print(ft)
    typer.echo(f"{folder / 'report.json'}\n{png}")


def _num(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f}"


@app.command("reference-run")
def reference_run_command(
    out_dir: Path = typer.Argument(..., help="Folder to write (trajectories.jsonl in tirl eval's schema)."),
    model: str = typer.Option(
        ..., "--model", "-m", help="Whose tokenizer renders the conversations (the model you will score them with)."
    ),
    source: str = typer.Option(
        "gsm8k_tir:0-20", "--source", help="Packaged SFT set and rows: gsm8k_tir:N or gsm8k_tir:A-B."
    ),
) -> None:
    """Write reference tool-integrated solutions (packaged SFT set) as a run, to measure post-tool entropy
    teacher-forced on a model that does not call the tool itself: then `tirl analyze entropy OUT_DIR --model`."""
    from rich.console import Console

    from tirl.analysis.reference import write_reference_run
    from tirl.models import load_tokenizer, model_reference

    console = Console(stderr=True)
    try:
        path = write_reference_run(out_dir, source, load_tokenizer(model_reference(model)))
    except (ValueError, OSError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    typer.echo(str(path))


@app.command("roc")
def roc_command(
    run_dir: Path = typer.Argument(
        ...,
        help="An RL run folder (recipe with logging.log_trajectories: true) or a "
        "tirl eval run folder (--samples 2K: groups of 2K).",
    ),
    keep: int | None = typer.Option(
        None,
        "--keep",
        min=1,
        help="Trajectories kept per group (G). Default: the "
        "run's G for RL runs, half the samples per problem for eval runs.",
    ),
    replays: int = typer.Option(200, "--replays", min=1, help="Repetitions of the stochastic rules."),
    seed: int = typer.Option(0, "--seed", help="Base seed of the replays."),
    min_per_class: int = typer.Option(
        1,
        "--min-per-class",
        min=0,
        help="RoC's minimum kept per class (roc.min_per_class; 1 in the CPU recipes, 2 in the report's).",
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="JSON report (default RUN_DIR/roc_replay.json)."),
) -> None:
    """Replay random down-sampling against RoC's selection (paper and release modes) on logged groups, many
    times, and report how the kept sets differ (failing calls in kept positives, calls per trajectory,
    positives without a call, format violations, length, groups where the pick differs from a random one).

    No training: it says in minutes whether a task gives RoC anything to select. Prints a table and writes JSON.
    """
    from rich.console import Console
    from rich.table import Table

    from tirl.algo.roc import RocConfig
    from tirl.analysis.roc_replay import METRICS, format_cell, load_run, replay

    console = Console(stderr=True)
    cfg = RocConfig(min_per_class=min_per_class)
    try:
        report = replay(load_run(run_dir, cfg), keep=keep, replays=replays, seed=seed, config=cfg)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    path = out or Path(run_dir) / "roc_replay.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    s = report["summary"]
    table = Table(
        title=f"RoC replay: {report['kind']} run, {int(s['groups'])} groups, {int(s['trajectories'])} "
        f"trajectories, keep {report['keep']}, {report['replays']} replays (mean ± std \\[min, max])"
    )
    table.add_column("kept set")
    cols = list(report["columns"])
    for col in cols:
        table.add_column(col, justify="right")
    for key, label in METRICS:
        table.add_row(label, *[format_cell(report["columns"][c].get(key, {}), key) for c in cols])
    Console().print(table)
    pos, fail = int(s["sampled_positives"]), int(s["sampled_pos_with_failing_call"])
    typer.echo(
        f"groups down-sampled {int(s['groups_downsampled'])}, with both classes {int(s['groups_mixed'])}, "
        f"where RoC can choose among positives {int(s['groups_roc_can_choose'])}; sampled positives {pos}, "
        f"{fail} with a failing call ({100 * fail / pos if pos else 0:.1f} %)"
        + (
            f"; {int(s['incomplete_groups_left_out'])} problems with fewer samples left out"
            if s.get("incomplete_groups_left_out")
            else ""
        )
    )
    typer.echo(str(path))


@app.command("ablation")
def ablation_command(
    ablation_dir: Path = typer.Argument(
        ...,
        help="An ablation folder: experiments/roc-ablation/run.py's --out (runs/ablation-toolfix) or its "
        "--archive (experiments/roc-ablation/results).",
    ),
    baseline: str | None = typer.Option(
        None, "--baseline", help="Arm the held-out differences are taken against (default: grpo)."
    ),
    benchmark: str | None = typer.Option(
        None, "--benchmark", help="Benchmark of the held-out summaries (default: the only or first one)."
    ),
    markdown_out: Path | None = typer.Option(
        None, "--markdown", help="Also write the table as GitHub markdown to this file (for an experiment's write-up)."
    ),
    out: Path | None = typer.Option(
        None, "--out", "-o", help="JSON report (default ABLATION_DIR/ablation_report.json)."
    ),
) -> None:
    """The ablation's result per arm over its seeds: held-out avg pass@1 at each evaluated step (mean ± sample std
    [min, max], n seeds), its difference from the baseline arm with an exact permutation test over the seeds (p and
    the smallest p the seed counts allow), wall hours to each step, and the training means
    (the report's Figure 4 failing-call share sampled and trained on, tool calls, length, reward).

    Prints a table and writes JSON; runs or evaluations not finished yet are left out of their cells.
    """
    from rich.console import Console
    from rich.table import Table

    from tirl.analysis.ablation import ARM_LABELS as LABELS
    from tirl.analysis.ablation import load_ablation, markdown, report, table_rows

    console = Console(stderr=True)
    try:
        rep = report(load_ablation(ablation_dir, benchmark), baseline=baseline)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[red]error:[/] {exc}")
        raise typer.Exit(2) from None
    path = out or Path(ablation_dir) / "ablation_report.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(rep, indent=2) + "\n", encoding="utf-8")
    if not rep["arms"]:
        start = (rep.get("start") or {}).get("avg_pass1")
        typer.echo(
            "no training run has logged a step yet"
            + (f"; the start model's held-out avg pass@1: {100 * start:.1f} %" if start is not None else "")
        )
        typer.echo(str(path))
        return
    header, rows = table_rows(rep, LABELS)
    seeds = ", ".join(f"{LABELS.get(a, a)}: {len(r['seeds'])}" for a, r in rep["arms"].items())
    table = Table(title=f"Ablation {ablation_dir} (seeds per arm: {seeds}; mean ± std \\[min, max] (n))")
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in rows:
        table.add_row(*row)
    Console(width=max(120, 40 + 34 * (len(header) - 1))).print(table)
    if markdown_out is not None:
        markdown_out.parent.mkdir(parents=True, exist_ok=True)
        markdown_out.write_text(markdown(header, rows), encoding="utf-8")
        typer.echo(str(markdown_out))
    typer.echo(str(path))
