"""``tirl train replay``: a step recomputed from the checkpoint before it matches what the run logged, and a
tampered log (tokens, reward, loss) is reported as a mismatch (exit 1); a step that cannot be replayed exits 2
with one line.

Two runs: the CPU smoke recipe through the command line (real agent loop, local sandbox, HF sampling; the random
model's rewards are all 0, so its loss is 0), and the scripted run of ``tests/resume_helpers.py`` (mixed rewards,
a non-zero loss and gradient) replayed in process with the same scripted source.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import resume_helpers as h
from tirl.analysis.step_replay import ReplayError, check_replayable
from tirl.cli.main import app
from tirl.runs.layout import trajectory_file
from tirl.train.replay import replay_step

SMOKE = Path(__file__).resolve().parents[1] / "configs" / "rl" / "cpu-tiny-smoke.yaml"


def _rewrite(path: Path, index: int, change) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[index])
    change(rec)
    lines[index] = json.dumps(rec)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture(scope="module")
def smoke_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("replay") / "run"
    result = CliRunner().invoke(
        app,
        [
            "train",
            "rl",
            "--config",
            str(SMOKE),
            f"output_dir={out}",
            "max_steps=2",
            "save_steps=1",
            "logging.log_trajectories=true",
            "logging.console=false",
            "rollout.max_response_tokens=32",
            "watchdog.enabled=false",
        ],
    )
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.slow(seconds=30)
def test_replayed_smoke_step_matches_then_a_tampered_token_is_reported(smoke_run):
    result = CliRunner().invoke(app, ["train", "replay", str(smoke_run), "--step", "2"])
    assert result.exit_code == 0, result.output
    assert "MATCH" in result.output and "tokens and rewards equal" in result.output
    report = json.loads((smoke_run / "replay_step_2.json").read_text())
    assert report["ok"] and report["token_mismatches"] == 0 and len(report["trajectories"]) == 8
    assert set(report["metrics"]) == {"loss", "grad_norm"}

    logged = trajectory_file(smoke_run, 2)
    original = logged.read_text(encoding="utf-8")
    try:

        def bump(rec):
            rec["response_ids"][5] += 1

        _rewrite(logged, 3, bump)
        result = CliRunner().invoke(app, ["train", "replay", str(smoke_run), "--step", "2"])
        assert result.exit_code == 1, result.output
        assert "MISMATCH" in result.output and "1 of 8 trajectories differ" in result.output
        report = json.loads((smoke_run / "replay_step_2.json").read_text())
        bad = [t for t in report["trajectories"] if not t["ok"]]
        assert len(bad) == 1 and bad[0]["first_diff"] == 5 and bad[0]["mismatched"] == 1
        assert bad[0]["reward_equal"]
    finally:
        logged.write_text(original, encoding="utf-8")


def test_a_step_without_what_replay_needs_exits_2_with_one_line(smoke_run, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(smoke_run / "config.yaml", bare / "config.yaml")
    shutil.copytree(smoke_run / "checkpoint-1", bare / "checkpoint-1")
    result = CliRunner().invoke(app, ["train", "replay", str(bare), "--step", "2"])
    assert result.exit_code == 2
    lines = [x for x in result.output.splitlines() if x.strip()]
    assert len(lines) == 1 and "logging.log_trajectories=true" in lines[0], result.output

    (bare / "trajectories").mkdir()
    shutil.copy(trajectory_file(smoke_run, 2), trajectory_file(bare, 2))
    shutil.copy(trajectory_file(smoke_run, 2), trajectory_file(bare, 3))
    shutil.rmtree(bare / "checkpoint-1")
    with pytest.raises(ReplayError, match="no checkpoint-1 .*save_steps=1"):
        check_replayable(bare, 2)
    shutil.copytree(smoke_run / "checkpoint-2", bare / "checkpoint-2")
    (bare / "checkpoint-2" / "optimizer.pt").write_bytes(b"torn")
    result = CliRunner().invoke(app, ["train", "replay", str(bare), "--step", "3"])
    assert result.exit_code == 2 and "incomplete" in result.output and "optimizer.pt" in result.output


@pytest.fixture(scope="module")
def scripted_run(tmp_path_factory, tiny_smollm2_model_dir):
    tmp = tmp_path_factory.mktemp("replay-scripted")
    cfg = h.config(tmp / "run", tiny_smollm2_model_dir, max_steps=3)
    cfg.logging.log_trajectories = True
    h.run_life(cfg, tmp / "rollouts.jsonl", life=1)
    return tmp


def _scripted_kwargs(tmp: Path, model_dir: Path) -> dict:
    from tirl.models import load_tokenizer
    from tirl.protocol import stop_token_ids

    tok = load_tokenizer(str(model_dir))
    source = h.ScriptedSource(tok, stop_token_ids(tok)[0], tmp / "replay-rollouts.jsonl", 2, None)
    return {"source": source, "scorer": h.ModScorer(), "problems": h.PROBLEMS}


def test_scripted_step_with_a_real_gradient_replays_loss_and_grad_norm(scripted_run, tiny_smollm2_model_dir):
    run = scripted_run / "run"
    report = replay_step(run, 3, **_scripted_kwargs(scripted_run, tiny_smollm2_model_dir))
    assert report.ok, report.to_dict()
    assert report.metrics["grad_norm"]["logged"] > 0 and report.metrics["loss"]["logged"] != 0
    # the update itself is bit-identical here (same machine, same threads)
    assert report.metrics["loss"]["replayed"] == report.metrics["loss"]["logged"]
    # the problems of step 3 (the second epoch) were replayed, not the first epoch's
    rollouts = [json.loads(x) for x in (scripted_run / "rollouts.jsonl").read_text().splitlines()]
    replayed = [json.loads(x) for x in (scripted_run / "replay-rollouts.jsonl").read_text().splitlines()]
    assert replayed[-1]["problems"] == [r for r in rollouts if r["step"] == 3][-1]["problems"]
    # step 1 starts from the run's starting model (no checkpoint-0)
    first = replay_step(run, 1, **_scripted_kwargs(scripted_run, tiny_smollm2_model_dir))
    assert first.ok and first.checkpoint is None and first.metrics["grad_norm"]["logged"] > 0


def test_scripted_tampered_reward_and_loss_are_mismatches(scripted_run, tiny_smollm2_model_dir):
    run = scripted_run / "run"
    logged = trajectory_file(run, 3)
    metrics = run / "metrics.jsonl"
    saved = logged.read_text(encoding="utf-8"), metrics.read_text(encoding="utf-8")
    try:

        def flip(rec):
            rec["reward"] = 1.0 - rec["reward"]

        _rewrite(logged, 0, flip)
        lines = metrics.read_text(encoding="utf-8").splitlines()
        idx = max(i for i, x in enumerate(lines) if json.loads(x).get("step") == 3 and "loss" in json.loads(x))
        _rewrite(metrics, idx, lambda rec: rec.update(loss=rec["loss"] * (1 + 1e-3)))
        report = replay_step(run, 3, **_scripted_kwargs(scripted_run, tiny_smollm2_model_dir))
        assert not report.ok
        bad = [t for t in report.trajectories if not t.ok]
        assert len(bad) == 1 and bad[0].tokens_equal and not bad[0].reward_equal
        assert not report.metrics["loss"]["equal"] and report.metrics["grad_norm"]["equal"]
    finally:
        logged.write_text(saved[0], encoding="utf-8")
        metrics.write_text(saved[1], encoding="utf-8")
