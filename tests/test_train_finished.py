"""Finished runs stay finished, half-written checkpoints are passed over, and what the command line says about
it (text of the lines, exit codes). No model is trained here: the run folders are written by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tirl.cli.main import app
from tirl.runs.checkpoints import (
    checkpoint_problem,
    last_checkpoint,
    set_aside_incomplete,
    write_checkpoint_marker,
)
from tirl.runs.layout import CHECKPOINT_MARKER
from tirl.runs.metrics import MetricsLog, read_metrics

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-tiny-smoke.yaml"


def _checkpoint(root: Path, step: int, *, marker: bool = True, state: bool = True) -> Path:
    folder = root / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "model.safetensors").write_bytes(b"w" * 64)
    (folder / "config.json").write_text("{}")
    (folder / "optimizer.pt").write_bytes(b"o" * 32)
    if state:
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    if marker:
        write_checkpoint_marker(folder, step)
    return folder


def test_a_checkpoint_is_complete_only_with_all_its_files(tmp_path):
    good = _checkpoint(tmp_path, 1)
    assert checkpoint_problem(good) is None
    (good / "optimizer.pt").write_bytes(b"o" * 5)  # torn after the marker was written
    assert "optimizer.pt has 5 bytes" in checkpoint_problem(good)
    (good / "optimizer.pt").unlink()
    assert "optimizer.pt is missing" in checkpoint_problem(good)
    # without tirl's marker: transformers' trainer state (written last) decides
    assert checkpoint_problem(_checkpoint(tmp_path, 2, marker=False)) is None
    assert "trainer_state.json" in checkpoint_problem(_checkpoint(tmp_path, 3, marker=False, state=False))
    torn = _checkpoint(tmp_path, 4, marker=False)
    (torn / "trainer_state.json").write_text('{"global_st')
    assert "unreadable" in checkpoint_problem(torn)


def test_the_newest_complete_checkpoint_is_used_and_the_half_written_one_set_aside(tmp_path, caplog):
    _checkpoint(tmp_path, 1)
    _checkpoint(tmp_path, 2)
    _checkpoint(tmp_path, 3, marker=False, state=False)
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert "checkpoint-3 is incomplete" in caplog.text
    moved = set_aside_incomplete(tmp_path)
    assert moved == [tmp_path / "incomplete-checkpoint-3"]
    assert not (tmp_path / "checkpoint-3").exists() and (moved[0] / "model.safetensors").exists()
    assert last_checkpoint(tmp_path) == tmp_path / "checkpoint-2"
    assert (tmp_path / "checkpoint-2" / CHECKPOINT_MARKER).exists()


def test_metrics_log_drops_a_half_written_line_so_the_next_record_is_whole(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "loss": 1.0}\n{"step": 2, "loss": 0.5}\n{"step": 3, "lo')
    log = MetricsLog(path)
    assert log.truncate_after(2) == 0
    log.write({"step": 3, "loss": 0.25})
    assert [r["step"] for r in read_metrics(path)] == [1, 2, 3]


def _finished_run(root: Path, steps: int = 2, final: bool = True) -> Path:
    _checkpoint(root, steps - 1)
    _checkpoint(root, steps)
    if final:
        (root / "final").mkdir()
        (root / "final" / "model.safetensors").write_bytes(b"w" * 64)
        (root / "final" / "tirl_final.json").write_text(json.dumps({"step": steps}))
    return root


def test_rerunning_a_finished_run_says_so_and_trains_nothing(tmp_path):
    run = _finished_run(tmp_path / "run")
    result = CliRunner().invoke(app, ["train", "rl", "--config", str(SMOKE), f"output_dir={run}"])
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        f"finished: {run} has trained all 2 steps; final weights in {run / 'final'}. To train on, "
        "re-run with a larger max_steps."
    ]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-1", "checkpoint-2", "final"]


def test_a_finished_run_without_final_gets_it_from_its_last_checkpoint(tmp_path):
    from tirl.runs.checkpoints import final_step

    run = _finished_run(tmp_path / "run", final=False)
    result = CliRunner().invoke(app, ["train", "rl", "--config", str(SMOKE), f"output_dir={run}"])
    assert result.exit_code == 0 and "finished:" in result.output
    assert final_step(run) == 2
    names = sorted(p.name for p in (run / "final").iterdir())
    assert names == ["config.json", "model.safetensors", "tirl_final.json"]  # no optimiser or trainer state


def test_a_finished_run_with_more_steps_asked_is_not_finished(tmp_path):
    from tirl.train.config import load_config
    from tirl.train.rl import finished_run

    run = _finished_run(tmp_path / "run")
    assert finished_run(load_config(SMOKE, [f"output_dir={run}", "max_steps=3"])) is None
    assert finished_run(load_config(SMOKE, [f"output_dir={run}", "resume=false"])) is None


def _stage_output(exc: BaseException, capsys) -> tuple[int, str]:
    from tirl.cli.train import _run_stage
    from tirl.train.config import load_config

    def run(cfg):
        raise exc

    with pytest.raises(typer.Exit) as info:
        _run_stage(lambda: load_config(SMOKE, ["output_dir=/tmp/nowhere-h25"]), run, False, "final weights")
    return info.value.exit_code, capsys.readouterr().err


def test_watchdog_stop_lines_say_how_to_go_on(capsys):
    from tirl.train.watchdog import RunStopped

    stop = RunStopped("stopped at step 3: 100% of trajectories were masked (threshold watchdog.max_masked_share)")
    stop.checkpoint = Path("runs/x/checkpoint-3")
    code, err = _stage_output(stop, capsys)
    assert code == 3
    assert err.strip().splitlines() == [
        "watchdog: stopped at step 3: 100% of trajectories were masked (threshold watchdog.max_masked_share). "
        "runs/x/checkpoint-3 is saved: fix the cause and re-run the same command to resume from it (add "
        "watchdog.enabled=false to go on regardless)."
    ]
    last = RunStopped("stopped at step 2: x")
    last.final = Path("runs/x/final")
    code, err = _stage_output(last, capsys)
    assert (
        code == 3
        and err.strip() == "watchdog: stopped at step 2: x. That was the last step: final weights in runs/x/final."
    )


def test_the_interrupt_line_names_the_checkpoint_to_resume_from(tmp_path):
    from tirl.cli.train import _resume_hint

    assert _resume_hint(str(tmp_path)) == f"no checkpoint in {tmp_path} yet: re-running starts from the beginning"
    _checkpoint(tmp_path, 4)
    assert _resume_hint(str(tmp_path)) == f"re-run the same command to resume from {tmp_path / 'checkpoint-4'}"


@pytest.mark.parametrize(
    "override, expected",
    [
        ("logging.report_to=[wandb]", "logging.report_to names wandb, which is not installed: pip install wandb"),
        ("rollout.use_vllm=true", "rollout.use_vllm=true needs vLLM"),
        ("rollout.server_url=http://127.0.0.1:9", "rollout.server_url http://127.0.0.1:9 does not answer"),
    ],
)
def test_missing_pieces_end_in_one_line_and_exit_2(tmp_path, override, expected):
    import importlib.util

    if "wandb" in override and importlib.util.find_spec("wandb"):
        pytest.skip("wandb is installed here")
    if "vllm" in override and importlib.util.find_spec("vllm"):
        pytest.skip("vLLM is installed here")
    extra = ["model.lora.enabled=true"] if "server_url" in override else []
    result = CliRunner().invoke(
        app, ["train", "rl", "--config", str(SMOKE), f"output_dir={tmp_path}", override, *extra]
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: " + expected), lines


def test_eval_checks_its_server_before_generating(tmp_path):
    result = CliRunner().invoke(
        app,
        [
            "eval",
            "--engine",
            "openai",
            "--servers",
            "http://127.0.0.1:9",
            "--model",
            "smollm2-135m-instruct",  # a name that names a model: a misspelled one is refused first
            "--benchmarks",
            "gsm8k",
            "--subset",
            "1",
            "--out-dir",
            str(tmp_path / "e"),
        ],
    )
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [
        "tirl eval: the server http://127.0.0.1:9 does not answer (GET /health, /v1/models): start it, or fix --servers"
    ]
    assert not (tmp_path / "e" / "trajectories.jsonl").exists()


def test_sandbox_serve_on_a_bad_or_busy_port_is_one_line(tmp_path):
    import socket

    result = CliRunner().invoke(app, ["sandbox", "serve", "--port", "99999"])
    assert result.exit_code == 2
    assert [x for x in result.output.splitlines() if x.strip()] == [
        "tirl sandbox serve: --port 99999 is not a TCP port: use 1-65535 (0 picks a free one)"
    ]
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = CliRunner().invoke(app, ["sandbox", "serve", "--port", str(port)])
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"tirl sandbox serve: cannot listen on 127.0.0.1:{port} (")
