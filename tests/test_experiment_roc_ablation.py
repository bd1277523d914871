"""The RoC ablation's runner (experiments/roc-ablation/run.py): order, resume after a stop, restarts after an OOM
kill (exit 137), the archive that carries finished jobs to a fresh machine, the report at the end, and the one
command that rebuilds the report and plots from the archive kept in git."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = ROOT / "experiments" / "roc-ablation"


def _load_runner():
    """The runner as a module (it is a script of the checkout, not part of the package)."""
    spec = importlib.util.spec_from_file_location("roc_ablation_run", EXPERIMENT / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


runner = _load_runner()
ARMS, main, plan = runner.ARMS, runner.main, runner.plan

FAKE = r"""
import json, pathlib, sys
args = sys.argv[1:]
state = pathlib.Path(sys.argv[0]).with_suffix(".calls")
with open(state, "a") as fh:
    fh.write(json.dumps(args) + "\n")
if args[:2] == ["train", "rl"]:
    out = pathlib.Path(next(a.split("=", 1)[1] for a in args if a.startswith("output_dir=")))
    out.mkdir(parents=True, exist_ok=True)
    if "roc-s0" in str(out) and not (out / "killed_once").exists():
        (out / "killed_once").write_text("x")
        sys.exit(137)  # the OOM killer, once: the runner must restart the same command
    if "grpo2g-s1" in str(out):
        sys.exit(3)    # the watchdog's stop: logged, not retried
    for step in (5, 10):
        (out / f"checkpoint-{step}").mkdir(exist_ok=True)
    (out / "served_weights").mkdir(exist_ok=True)
    (out / "served_weights" / "model.safetensors").write_text("w")
    (out / "metrics.jsonl").write_text('{"step": 1, "reward": 0.5}\n')
    (out / "trajectories").mkdir(exist_ok=True)
    (out / "trajectories" / "step_1_rank0.jsonl").write_text('{"step": 1, "group": 0}\n' * 50)
elif args[0] == "eval":
    out = pathlib.Path(args[args.index("--out-dir") + 1])
    out.mkdir(parents=True, exist_ok=True)
    (out / "summary.json").write_text("{}")
"""


def _calls(fake: Path) -> list[list[str]]:
    path = fake.with_suffix(".calls")
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def test_plan_is_seed_major_with_evals_after_each_run(tmp_path):
    jobs = plan(
        tmp_path, arms=list(ARMS), seeds=[0, 1], eval_steps=[10], eval_config="e.yaml", start_model="sft", tirl=["tirl"]
    )
    names = [j.name for j in jobs]
    assert names[0] == "eval-start" and names[-1] == "plot"
    assert names[1:7] == [
        "train-grpo-s0",
        "eval-grpo-s0-10",
        "train-roc-s0",
        "eval-roc-s0-10",
        "train-grpo2g-s0",
        "eval-grpo2g-s0-10",
    ]
    train = next(j for j in jobs if j.name == "train-roc-s1")
    assert train.argv[4:] == [ARMS["roc"], "seed=1", f"output_dir={tmp_path / 'roc-s1'}"]
    plot = jobs[-1].argv
    assert plot.count(f"GRPO-RoC (G of 2G)={tmp_path / 'roc-s0'}") == 1  # the seeds of an arm share one label
    assert f"--eval=GRPO-RoC (G of 2G)={tmp_path / 'eval-start'}" in plot


def test_runner_restarts_killed_jobs_resumes_and_skips_what_is_done(tmp_path):
    fake = tmp_path / "fake_tirl.py"
    fake.write_text(FAKE)
    out = tmp_path / "abl"
    argv = [
        "--out",
        str(out),
        "--seeds",
        "0",
        "1",
        "--eval-steps",
        "10",
        "--tirl",
        f"{sys.executable} {fake}",
        "--retries",
        "2",
    ]
    assert main(argv) == 1  # grpo2g-s1 stopped with 3
    calls = _calls(fake)
    trains = [c for c in calls if c[:2] == ["train", "rl"]]
    roc0 = [c for c in trains if f"output_dir={out / 'roc-s0'}" in c]
    assert len(roc0) == 2 and roc0[0] == roc0[1]  # killed once, restarted with the same command
    assert len([c for c in trains if f"output_dir={out / 'grpo2g-s1'}" in c]) == 1  # exit 3: not retried
    assert (out / "done" / "eval-roc-s0-10").exists() and not (out / "done" / "eval-grpo2g-s1-10").exists()
    assert not (out / "done" / "plot").exists()
    log = (out / "runner.log").read_text()
    assert "killed (exit 137)" in log and "FAILED train-grpo2g-s1 (exit 3)" in log
    assert "skip eval-grpo2g-s1-10" in log
    # a finished run with all its evaluations done loses its served weights, and only those
    assert not (out / "roc-s0" / "served_weights").exists() and (out / "roc-s0" / "checkpoint-10").is_dir()
    assert "removed " in log and "served weights" in log
    # a re-run continues where it stopped: only the failed run (and what needs it) is tried again
    before = len(calls)
    assert main(argv) == 1
    again = _calls(fake)[before:]
    assert [c[:2] for c in again] == [["train", "rl"]] and f"output_dir={out / 'grpo2g-s1'}" in again[0]


def test_a_later_invocation_with_more_arms_redraws_the_plot_with_them(tmp_path):
    """A subset (--arms grpo) ends with a plot of its own runs; the next invocation with every arm, on the same
    folder, draws it again with the new arms instead of skipping it for its marker."""
    fake = tmp_path / "fake_tirl.py"
    fake.write_text(FAKE)
    out = tmp_path / "abl"
    base = ["--out", str(out), "--seeds", "0", "--eval-steps", "10", "--tirl", f"{sys.executable} {fake}"]
    assert main([*base, "--arms", "grpo"]) == 0
    assert main([*base, "--arms", "grpo", "roc", "--retries", "2"]) == 0
    plots = [c for c in _calls(fake) if c[:2] == ["plot", "--compare"]]
    assert len(plots) == 2
    assert not any("roc-s0" in a for a in plots[0]) and any(a.endswith(str(out / "roc-s0")) for a in plots[1])
    trains = [c for c in _calls(fake) if c[:2] == ["train", "rl"]]
    assert sum(f"output_dir={out / 'grpo-s0'}" in c for c in trains) == 1  # the finished run is not re-run


def test_dry_run_prints_the_remaining_commands(tmp_path, capsys):
    assert (
        main(
            [
                "--out",
                str(tmp_path / "abl"),
                "--seeds",
                "0",
                "--arms",
                "roc",
                "--dry-run",
                "--tirl",
                "tirl",
                "--set",
                "rollout.server_url=http://127.0.0.1:1",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out.splitlines()
    assert printed[1].startswith(f"tirl train rl --config {EXPERIMENT / 'recipes' / 'cpu-toolfix-roc.yaml'} seed=0")
    assert printed[1].endswith("rollout.server_url=http://127.0.0.1:1")
    assert printed[2].startswith(f"tirl eval --config {ROOT / 'configs' / 'eval' / 'toolfix-heldout.yaml'} --model ")
    assert (
        printed[-1].startswith("tirl plot --compare") and len(printed) == 1 + 1 + 2 + 1
    )  # eval-start, the run, its evaluations at steps 10 and 20, the plot
    assert not (tmp_path / "abl" / "done" / "eval-start").exists()  # nothing ran


def test_the_archive_carries_finished_jobs_to_a_fresh_machine(tmp_path):
    """With --archive, a run's small files are archived once its evaluations are done (they need its
    checkpoints, which are not archived); on a fresh machine (--out gone) the archived jobs are restored and
    not re-run, an unarchived run is trained again, and the plot job sees the restored files."""
    import gzip

    fake = tmp_path / "fake_tirl.py"
    fake.write_text(FAKE)
    out, archive = tmp_path / "abl", tmp_path / "repo" / "results"
    argv = ["--out", str(out), "--archive", str(archive), "--seeds", "0", "1", "--eval-steps", "10"]
    argv += ["--tirl", f"{sys.executable} {fake}", "--retries", "2"]
    assert main(argv) == 1  # grpo2g-s1 stops with 3
    archived = {p.name for p in (archive / "done").iterdir()}
    assert "train-roc-s0" in archived and "eval-roc-s0-10" in archived and "eval-start" in archived
    assert "train-grpo2g-s1" not in archived and "plot" not in archived
    assert not list(archive.rglob("checkpoint-*"))  # checkpoints stay out of git
    rows = gzip.decompress((archive / "roc-s0" / "trajectories" / "step_1_rank0.jsonl.gz").read_bytes())
    assert rows == (out / "roc-s0" / "trajectories" / "step_1_rank0.jsonl").read_bytes()
    assert (archive / "eval-roc-s0-10" / "summary.json").is_file()
    # each finished job records the machine it ran on (wall times are comparable on one machine only), with one
    # entry per attempt: roc-s0 was killed once (137) and finished on its second start
    machine = json.loads((archive / "roc-s0" / "machine.json").read_text())
    assert [a["exit"] for a in machine["attempts"]] == [137, 0]
    assert machine["cores"] == os.cpu_count() and isinstance(machine["native_bf16"], bool) and machine["cpu"]
    assert all(a["wall_s"] >= 0 for a in machine["attempts"])
    assert json.loads((archive / "eval-start" / "machine.json").read_text())["attempts"][0]["exit"] == 0
    assert not (out / "grpo2g-s1" / "machine.json").exists()  # a failed job has no record

    import shutil

    shutil.rmtree(out)  # a fresh machine: only the archive (in git) is left
    before = len(_calls(fake))
    assert main(argv) == 1
    again = _calls(fake)[before:]
    assert [c[:2] for c in again] == [["train", "rl"]] and f"output_dir={out / 'grpo2g-s1'}" in again[0]
    assert (out / "roc-s0" / "metrics.jsonl").read_text() == '{"step": 1, "reward": 0.5}\n'
    assert (out / "done" / "train-roc-s0").exists()
    assert "restored" in (out / "runner.log").read_text()


def test_a_run_is_archived_only_after_its_evaluations(tmp_path):
    archive_ready = runner.archive_ready

    out, archive = tmp_path / "abl", tmp_path / "arch"
    jobs = plan(out, arms=["roc"], seeds=[0], eval_steps=[10, 20], eval_config="e", start_model="m", tirl=["t"])
    (out / "done").mkdir(parents=True)
    (out / "roc-s0").mkdir()
    (out / "roc-s0" / "metrics.jsonl").write_text("{}\n")
    for name in ("train-roc-s0", "eval-roc-s0-10"):
        (out / "done" / name).write_text("t\n")
    assert archive_ready(jobs, out, archive) == []  # eval at step 20 still needs the checkpoints, and the
    assert not (archive / "done").exists()  # finished eval at step 10 waits for its run
    (out / "done" / "eval-roc-s0-20").write_text("t\n")
    assert archive_ready(jobs, out, archive) == ["train-roc-s0", "eval-roc-s0-10", "eval-roc-s0-20"]
    assert archive_ready(jobs, out, archive) == []  # once


def test_served_weights_are_removed_once_a_run_and_its_evaluations_are_done(tmp_path):
    prune_finished = runner.prune_finished

    out = tmp_path / "abl"
    jobs = plan(out, arms=["roc"], seeds=[0], eval_steps=[10, 20], eval_config="e", start_model="m", tirl=["t"])
    weights = out / "roc-s0" / "served_weights"
    weights.mkdir(parents=True)
    (weights / "model.safetensors").write_text("w")
    (out / "roc-s0" / "checkpoint-10").mkdir()
    (out / "done").mkdir()
    assert prune_finished(jobs, out) == []  # the run is not done: it may still resume and sync
    for name in ("train-roc-s0", "eval-roc-s0-10"):
        (out / "done" / name).write_text("t\n")
    assert prune_finished(jobs, out) == [] and weights.is_dir()  # an evaluation is still to run
    (out / "done" / "eval-roc-s0-20").write_text("t\n")
    assert prune_finished(jobs, out) == [weights]
    assert not weights.exists() and (out / "roc-s0" / "checkpoint-10").is_dir()
    assert prune_finished(jobs, out) == []


def test_the_documented_command_rebuilds_the_report_and_plots_from_the_archive(tmp_path):
    """experiments/roc-ablation/README.md's one command: every job restored from the archive kept in git, nothing
    trained, the plots drawn and the report written, equal to the archived one."""
    out = tmp_path / "roc-ablation"
    tirl = f"{sys.executable} -m tirl.cli.main"  # this checkout's tirl, as the installed command would be
    assert main(["--archive", str(EXPERIMENT / "results"), "--out", str(out), "--tirl", tirl]) == 0
    log = (out / "runner.log").read_text()
    assert "restored 28 finished jobs" in log and "start train-" not in log and "start eval-" not in log
    assert sorted(p.name for p in (out / "plots").glob("*.png")) == sorted(
        p.name for p in (EXPERIMENT / "plots").glob("*.png")
    )
    archived = json.loads((EXPERIMENT / "results" / "ablation_report.json").read_text())
    assert json.loads((out / "ablation_report.json").read_text()) == archived
    table = (out / "report.md").read_text()
    assert "37.9 % ± 2.9 [34.6, 39.6] (n=3)" in table  # GRPO-RoC at step 20, as the write-up states


def test_the_arms_recipes_load_from_the_experiment_folder():
    """The recipes moved out of configs/ with their runner: each loads (its base: chain reaches
    configs/rl/cpu-toolmath-roc.yaml), validates, and the arms differ only where the write-up says."""
    from tirl.train.config import load_config

    arms = {arm: load_config(path) for arm, path in ARMS.items()}
    for config in arms.values():
        config.validate(1)
        assert config.max_steps == 20 and config.model.name_or_path == "qwen2.5-coder-0.5b-tirl-sft-recovery"
    g = arms["roc"].rollout.group_size
    assert (arms["roc"].rollout.oversample, arms["roc"].roc.rule) == (2, "roc_paper")
    assert (arms["grpo"].rollout.oversample, arms["grpo"].rollout.group_size, arms["grpo"].roc.rule) == (1, g, "all")
    assert (arms["grpo2g"].rollout.oversample, arms["grpo2g"].rollout.group_size) == (1, 2 * g)
