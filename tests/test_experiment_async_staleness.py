"""The async-staleness experiment's recipes and runner (experiments/async-staleness, issue 42): the two arms differ
only in ``rollout.max_staleness``, load and pass ``tirl train rl --dry-run``; the runner's commands, its resume
of a finished arm, its archive, and ``report`` on run folders written by :mod:`tirl.runs`' own writers (3 steps an
arm, no model): the table and a non-blank PNG. Nothing here trains."""

from __future__ import annotations

import gzip
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from test_runs_layout import spelled_names
from tirl.runs.evals import RunStore
from tirl.runs.layout import checkpoint_dir, metrics_path
from tirl.runs.metrics import MetricsLog

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "async-staleness"


def _load_runner():
    """The runner as a module (a script of the checkout, not part of the package)."""
    spec = importlib.util.spec_from_file_location("async_staleness_run", EXPERIMENT / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


runner = _load_runner()


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def test_the_arms_differ_only_in_max_staleness():
    """Loaded through tirl's config loader (the base: chain reaches configs/rl/cpu-toolmath-async.yaml and
    cpu-toolmath-roc.yaml), validated; every resolved key equal but max_staleness (and the run's name and
    folder); both on a server the run launches, with the same seed, start model and 20 steps."""
    from tirl.train.config import load_config

    configs = {arm: load_config(path) for arm, path in runner.ARMS.items()}
    for config in configs.values():
        config.validate(1)
    k0, k1 = (_flat(configs[a].to_dict()) for a in ("k0", "k1"))
    differ = {key for key in set(k0) | set(k1) if k0.get(key) != k1.get(key)}
    assert differ == {"rollout.max_staleness", "stage", "output_dir"}
    assert (k0["rollout.max_staleness"], k1["rollout.max_staleness"]) == (0, 1)
    assert k0["rollout.launch_server"] is True  # the k = 0 arm on the same engine as k = 1
    assert k0["max_steps"] == runner.STEPS == 20 and k0["seed"] == 0 and k0["data.seed"] == 0
    assert k0["model.name_or_path"] == runner.START_MODEL
    assert k0["model.dtype"] == "float32"
    assert k0["save_steps"] == 1


@pytest.mark.slow(seconds=25)
@pytest.mark.parametrize("arm", ["k0", "k1"])
def test_the_arms_pass_the_dry_run(arm, tmp_path):
    """``tirl train rl --dry-run`` (data, tokenizer, sandbox, output folder; no weights): a ``tiny:`` model of the
    same tokenizer family stands in for the packaged start model, as in tests/test_one_gpu_recipe.py."""
    from typer.testing import CliRunner

    from tirl.cli.main import app

    args = ["train", "rl", "--config", str(runner.ARMS[arm]), "--dry-run", f"output_dir={tmp_path / 'run'}"]
    result = CliRunner().invoke(app, [*args, "model.name_or_path=tiny:qwen2.5-coder-0.5b-instruct"])
    assert result.exit_code == 0, result.output
    assert result.output.strip().splitlines()[-1] == "dry run: passed"
    assert f"recipe: async-staleness-{arm}, 20 steps of 4 problems" in result.output
    assert not (tmp_path / "run").exists()


def test_the_runner_spells_no_run_file_name():
    """The rule of tests/test_runs_layout.py for src/tirl, applied to the runner: names come from tirl.runs."""
    assert spelled_names((EXPERIMENT / "run.py").read_text(encoding="utf-8")) == []


def test_dry_run_prints_the_commands(tmp_path, capsys):
    out = tmp_path / "runs"
    base = ["--out", str(out), "--tirl", "tirl", "--dry-run"]
    assert runner.main(["train", "k1", *base, "--set", "rollout.engine_batch_size=16"]) == 0
    assert runner.main(["eval", "k0", *base]) == 0
    assert runner.main(["eval", "start", *base]) == 0
    train, ev, start = capsys.readouterr().out.splitlines()
    assert train == (
        f"tirl train rl --config {EXPERIMENT / 'recipes' / 'k1.yaml'} output_dir={out / 'k1'}"
        " rollout.engine_batch_size=16"
    )
    heldout = ROOT / "configs" / "eval" / "toolmath-heldout.yaml"
    assert ev == f"tirl eval --config {heldout} --model {out / 'k0' / 'final'} --out-dir {out / 'eval-k0'} --quiet"
    assert f"--model {runner.START_MODEL} --out-dir {out / 'eval-start'}" in start
    assert not out.exists()  # nothing ran


FAKE = r"""
import json, pathlib, sys
args = sys.argv[1:]
with open(pathlib.Path(sys.argv[0]).with_suffix(".calls"), "a") as fh:
    fh.write(json.dumps(args) + "\n")
out = pathlib.Path(next(a.split("=", 1)[1] for a in args if a.startswith("output_dir=")))
out.mkdir(parents=True, exist_ok=True)
(out / "metrics.jsonl").write_text('{"step": 1, "tirl/reward/mean": 0.5}\n')
(out / "config.yaml").write_text("stage: x\n")
marker = out / "killed_once"
if not marker.exists():
    marker.write_text("x")
    sys.exit(137)  # the OOM killer, once: restarted with the same command
(out / "final").mkdir(exist_ok=True)
(out / "final" / "tirl_final.json").write_text('{"step": 20}')
"""


def test_train_restarts_after_a_kill_archives_and_does_not_rerun_a_finished_arm(tmp_path):
    fake = tmp_path / "fake_tirl.py"
    fake.write_text(FAKE)
    out, archive = tmp_path / "runs", tmp_path / "results"
    argv = ["train", "k0", "--out", str(out), "--archive", str(archive), "--tirl", f"{sys.executable} {fake}"]
    assert runner.main(argv) == 0
    calls = [json.loads(x) for x in fake.with_suffix(".calls").read_text().splitlines()]
    assert len(calls) == 2 and calls[0] == calls[1]  # killed once, restarted with the same command
    machine = json.loads((archive / "k0" / runner.MACHINE_FILE).read_text())
    assert [a["exit"] for a in machine["attempts"]] == [137, 0]
    rows = gzip.decompress((archive / "k0" / "metrics.jsonl.gz").read_bytes())
    assert rows == metrics_path(out / "k0").read_bytes()
    assert (archive / "k0" / "config.yaml").is_file() and not (archive / "k0" / "final").exists()
    assert runner.main(argv) == 0  # finished: not started again
    assert len(fake.with_suffix(".calls").read_text().splitlines()) == 2
    assert "nothing to train" in (out / "runner.log").read_text()


def test_eval_of_an_untrained_arm_is_refused(tmp_path, capsys):
    assert runner.main(["eval", "k1", "--out", str(tmp_path), "--archive", "", "--tirl", "false"]) == 2
    assert "run `train k1` first" in capsys.readouterr().err


def _write_run(folder: Path, k: int, steps: int = 3) -> None:
    """A training run's metrics as ``tirl train rl`` logs them (tirl.runs' writer), ``steps`` steps; at k = 1 the
    stale/* metrics, the wait and the saving too."""
    log = MetricsLog(metrics_path(folder))
    for step in range(1, steps + 1):
        rec = {
            "step": step,
            "tirl/reward/mean": 0.4,
            "tirl/time/step_s": 100.0 + 10 * step - 20 * k,
            "tirl/time/rollout_s": 40.0,
            "tirl/time/update_s": 50.0 - 20 * k,
            "tirl/time/sync_s": 6.0,
            "tirl/length/mean": 200.0,
            "tirl/length/kept_mean": 190.0,
            "tirl/turns/mean": 2.0,
            "tirl/turns/kept_mean": 1.5,
            "tirl/tool_calls/per_traj": 1.25,
            "tirl/tool_calls/kept_per_traj": 1.0,
        }
        if k:
            rec |= {
                "tirl/time/rollout_wait_s": 4.0,
                "tirl/time/overlap_saved_s": 30.0,
                "tirl/stale/lag_0": float(step == 1),
                "tirl/stale/lag_1": float(step > 1),
                "tirl/stale/lag_mean": float(step > 1),
                "tirl/stale/ess": 0.9,
                "tirl/stale/mismatch_kl": 0.002,
                "tirl/stale/is_clipped": 0.01,
            }
        log.write(rec)
    checkpoint_dir(folder, steps).mkdir()


def _write_eval(folder: Path, avg: float) -> None:
    """A held-out evaluation's summary as ``tirl eval`` writes it (tirl.runs' writer)."""
    with RunStore(folder, {"model": "m"}) as store:
        bench = {"avg_pass1": avg, "num_problems": 120, "samples_per_problem": 4}
        bench["intervals"] = {"avg_pass1": [avg - 0.05, avg + 0.05]}
        store.write_summary({"benchmarks": {"toolmath": bench}})


def test_report_on_synthetic_runs_writes_the_table_and_the_plot(tmp_path, capsys):
    from PIL import Image

    runs, dst = tmp_path / "runs", tmp_path / "report"
    _write_run(runs / "k0", 0)
    _write_run(runs / "k1", 1)
    _write_eval(runs / "eval-k0", 0.60)
    _write_eval(runs / "eval-start", 0.358)
    # eval-k1 not yet written: its cell says so
    assert runner.main(["report", "--from", str(runs), "--to", str(dst)]) == 0
    table = (dst / "report.md").read_text()
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert "| k = 0 (synchronous) | k = 1 (asynchronous) |" in table
    assert lines["steps trained"].endswith("| 3 of 20 | 3 of 20 |")
    assert lines["held-out avg pass@1 [95 % CI] of the final model"].endswith(
        "| 60.0 % [55.0, 65.0] (120 x 4) | not yet |"
    )
    assert "35.8 % [30.8, 40.8]" in lines["held-out avg pass@1 [95 % CI] of the start model (both arms')"]
    # means of steps 2-3: k = 0 (120 + 130) / 2, k = 1 (100 + 110) / 2; step 1 on its own row
    assert lines["step s, mean of steps 2-N"].endswith("| 125.0 | 105.0 |")
    assert lines["step 1 s (the server's start-up, nothing to overlap)"].endswith("| 110.0 | 90.0 |")
    assert lines["waited for the rollout s, mean of steps 2-N"].endswith("| - | 4.0 |")
    assert lines["`stale/lag_mean`, mean of steps 2-N"].endswith("| - | 1.000 |")
    assert lines["`stale/ess`, mean of steps 2-N"].endswith("| - | 0.900 |")
    assert lines["response length, model tokens, sampled / trained, mean of steps 2-N"].endswith(
        "| 200.00 / 190.00 | 200.00 / 190.00 |"
    )
    assert lines["wall time of the steps, minutes (sum of step s)"].endswith("| 6.0 | 5.0 |")
    assert "plots/step_time.png" in table and "k = 0 (synchronous)" in capsys.readouterr().out
    with Image.open(dst / "plots" / "step_time.png") as png:
        assert png.size == (800, 450)
        colours = png.convert("RGB").getcolors(maxcolors=1 << 20)
    assert colours is not None and len(colours) > 10  # drawn: axes, lines, text, not a blank canvas
    assert max(count for count, _ in colours) < 0.98 * 800 * 450


def test_report_without_runs_says_so(tmp_path, capsys):
    assert runner.main(["report", "--from", str(tmp_path), "--to", str(tmp_path / "r")]) == 2
    assert "no step records of k0, k1" in capsys.readouterr().err
