"""Seed aggregation in `tirl plot --compare`: runs sharing a label are drawn as a mean line with a band."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tirl.analysis.plot import aggregate_series, plot_compare
from tirl.cli.main import app
from tirl.runs.metrics import MetricsLog

runner = CliRunner()


def _run(folder: Path, offset: float, steps: int = 12, step_s: float = 600.0) -> Path:
    log = MetricsLog(folder / "metrics.jsonl")
    for s in range(1, steps + 1):
        log.write(
            {
                "step": s,
                "tirl/reward/mean": offset + 0.02 * s,
                "tirl/time/step_s": step_s,
                "tirl/tool_error_in_correct/before": 0.1 + offset,
                "tirl/tool_calls/per_traj": 1.0,
                "tirl/length/mean": 100.0,
            }
        )
    return folder


def _pixels_near(path, rgb, tol=0.03) -> int:
    import matplotlib.image
    import numpy as np

    image = matplotlib.image.imread(path)[..., :3]
    return int((np.abs(image - np.array(rgb)).max(axis=-1) < tol).sum())


def test_aggregate_series_at_shared_steps_and_on_a_time_grid():
    xs, mean, low, high = aggregate_series([([1, 2, 3], [0.0, 1.0, 2.0]), ([2, 3, 4], [3.0, 3.0, 4.0])])
    assert xs == [2.0, 3.0] and mean == [2.0, 2.5] and low == [1.0, 2.0] and high == [3.0, 3.0]
    _, m, lo, hi = aggregate_series([([1, 2], [0.0, 2.0]), ([1, 2], [2.0, 2.0])], band="std")
    assert m == [1.0, 2.0] and lo == [0.0, 2.0] and hi == [2.0, 2.0]
    gx, gm, _, _ = aggregate_series([([0, 2], [0.0, 2.0]), ([0, 1], [1.0, 1.0])], grid=[0.0, 0.5, 1.0, 1.5])
    assert gx == [0.0, 0.5, 1.0] and gm == [0.5, 0.75, 1.0]  # only inside every run's span
    assert aggregate_series([([1], [1.0]), ([2], [2.0])]) == ([], [], [], [])
    with pytest.raises(ValueError, match="band"):
        aggregate_series([([1], [1.0])], band="iqr")


def test_seeds_under_one_label_draw_a_band_that_one_run_does_not(tmp_path):
    from matplotlib.colors import to_rgb

    seeds = [_run(tmp_path / f"a{i}", 0.1 * i) for i in range(3)]
    plot_compare({"A": seeds}, tmp_path / "p3")
    plot_compare({"A": seeds[:1]}, tmp_path / "p1")
    band = tuple(0.2 * c + 0.8 for c in to_rgb("C0"))  # C0 at alpha 0.2 over white: only the band has it
    for name in ("compare_steps.png", "compare_time.png"):
        with_band = _pixels_near(tmp_path / "p3" / name, band)
        without = _pixels_near(tmp_path / "p1" / name, band)
        assert with_band > 2000 and with_band > 20 * max(without, 1), (name, with_band, without)


def test_compare_has_one_legend_below_the_panels_naming_every_arm(tmp_path):
    """The arms' names sit in one strip under the panels (six per-panel legends covered the curves): the
    strip below the lowest axes holds each arm's colour (its legend line)."""
    import matplotlib.image
    import numpy as np
    from matplotlib.colors import to_rgb

    runs = {"A": _run(tmp_path / "a", 0.0), "B": _run(tmp_path / "b", 0.2)}
    plot_compare(runs, tmp_path / "p")
    for name in ("compare_steps.png", "compare_time.png"):
        image = matplotlib.image.imread(tmp_path / "p" / name)[..., :3]
        strip = image[int(image.shape[0] * 0.94) :]
        for color in ("C0", "C1"):
            assert (np.abs(strip - np.array(to_rgb(color))).max(axis=-1) < 0.03).sum() > 50, (name, color)


def test_cli_groups_runs_by_label_and_aggregates_heldout(tmp_path):
    from matplotlib.colors import to_rgb

    def write_eval(name: str, model: str, pass1: float) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "summary.json").write_text(
            json.dumps({"settings": {"model": model}, "benchmarks": {"toolfix": {"avg_pass1": pass1}}})
        )
        return d

    runs = [_run(tmp_path / f"r{i}", 0.1 * i) for i in range(2)] + [_run(tmp_path / "g0", 0.3)]
    evals = [
        write_eval("e0", "sft", 0.3),
        write_eval("r0_10", "runs/r0/checkpoint-10", 0.4),
        write_eval("r1_10", "runs/r1/checkpoint-10", 0.6),
    ]
    args = [
        "plot",
        "--compare",
        f"RoC={runs[0]}",
        f"RoC={runs[1]}",
        f"GRPO={runs[2]}",
        "--out",
        str(tmp_path / "p"),
        "--band",
        "std",
        "--eval",
        f"RoC={evals[0]}",
        "--eval",
        f"RoC={evals[1]}",
        "--eval",
        f"RoC={evals[2]}",
    ]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert _pixels_near(tmp_path / "p" / "heldout.png", tuple(0.2 * c + 0.8 for c in to_rgb("C0"))) > 500
    bad = runner.invoke(app, args[:-6] + ["--band", "iqr"])
    assert bad.exit_code == 2 and "band" in bad.output


def test_an_archived_run_with_only_metrics_jsonl_gz_is_read_like_the_run(tmp_path):
    import gzip

    from tirl.analysis.plot import load_runs

    live = _run(tmp_path / "live", 0.1)
    archived = tmp_path / "archived"
    archived.mkdir()
    (archived / "metrics.jsonl.gz").write_bytes(gzip.compress((live / "metrics.jsonl").read_bytes()))
    assert load_runs([archived]) == load_runs([live]) and len(load_runs([live])) == 12
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match="metrics.jsonl"):
        load_runs([empty])


def test_a_folder_with_both_files_reads_the_live_metrics_jsonl_and_a_missing_file_is_named(tmp_path):
    import gzip

    from tirl.runs.metrics import metrics_file, read_metrics

    run = _run(tmp_path / "run", 0.1)
    (run / "metrics.jsonl.gz").write_bytes(gzip.compress(b'{"step": 99}\n'))
    assert metrics_file(run) == run / "metrics.jsonl"  # a live run's log, not a stale archive copy
    assert all(rec.get("step") != 99 for rec in read_metrics(run))
    assert read_metrics(run / "metrics.jsonl.gz") == [{"step": 99}]
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        read_metrics(tmp_path / "nope.jsonl")
