"""Exact resume: a GRPO-RoC run killed at random points and resumed trains what an uninterrupted run trains.

A property test over kill points: mid-rollout, mid-update (gradients half accumulated) and during a checkpoint
write (after the weights, after the optimiser, after transformers' trainer state), at random steps of a 4-step
run whose epochs are 2 steps long (so resumes land in a later epoch). Checked against one uninterrupted run:
the problems of every step (so their multiset too), the final weights, each step logged once in
``metrics.jsonl``, no checkpointed step rolled out again, and a half-written checkpoint set aside with the one
before it used. One case is a real SIGKILL of a child process paused at the point. The seed of the draws is
``TIRL_RESUME_SEED`` (random when unset; a failure prints it).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

import resume_helpers as h
from tirl.runs.checkpoints import checkpoint_step, last_checkpoint
from tirl.runs.metrics import read_metrics

pytestmark = pytest.mark.slow(seconds=40)

MAX_STEPS = 4
POINTS = (
    "rollout",
    "update",
    "checkpoint:_save_optimizer_and_scheduler",
    "checkpoint:_save_rng_state",
    "checkpoint:_save_checkpoint_tail",
)


def _rollouts(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _weights(run_dir: Path, step: int) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run_dir / f"checkpoint-{step}" / "model.safetensors"))


@pytest.fixture(scope="module")
def baseline(tmp_path_factory, tiny_smollm2_model_dir):
    out = tmp_path_factory.mktemp("baseline")
    cfg = h.config(out / "run", tiny_smollm2_model_dir, MAX_STEPS)
    h.run_life(cfg, out / "rollouts.jsonl", 0)
    steps = {r["step"]: r["problems"] for r in _rollouts(out / "rollouts.jsonl")}
    weights = _weights(out / "run", MAX_STEPS)
    from safetensors.torch import load_file

    start = load_file(str(tiny_smollm2_model_dir / "model.safetensors"))
    # the updates moved the weights, so that comparing final weights below can tell runs apart
    assert any(k in start and not start[k].equal(v) for k, v in weights.items())
    return {"steps": steps, "weights": weights}


def _expected_resume(point: str, step: int, save_steps: int) -> int:
    """The step of the checkpoint the next life must resume from after dying at ``point`` in ``step``."""
    if point == "checkpoint:_save_checkpoint_tail":
        return step  # trainer_state.json was written: the checkpoint is whole, only tirl's marker is missing
    below = step - 1
    return below - below % save_steps


def _check_against_baseline(run_dir: Path, log: Path, baseline: dict, note: str) -> None:
    records = [r for r in read_metrics(run_dir) if "tirl/reward/mean" in r]
    assert [r["step"] for r in records] == list(range(1, MAX_STEPS + 1)), note
    trained: dict[int, list[str]] = {}
    for r in _rollouts(log):
        trained[r["step"]] = r["problems"]  # a later life's rollout of a step replaces a killed one's
    assert trained == baseline["steps"], note
    assert sorted(p for ps in trained.values() for p in ps) == sorted(
        p for ps in baseline["steps"].values() for p in ps
    ), note
    mine = _weights(run_dir, MAX_STEPS)
    assert mine.keys() == baseline["weights"].keys()
    worst = max(float((mine[k] - baseline["weights"][k]).abs().max()) for k in mine)
    assert worst < 1e-5, note


def test_killed_at_random_points_resumes_exactly(baseline, tmp_path, tiny_smollm2_model_dir):
    seed = int(os.environ.get("TIRL_RESUME_SEED", random.SystemRandom().randrange(1 << 30)))
    rng = random.Random(seed)
    save_steps = rng.choice((1, 2))
    saving = [s for s in range(1, MAX_STEPS + 1) if s % save_steps == 0 or s == MAX_STEPS]
    kinds = rng.sample(POINTS, 3)
    steps = [rng.choice(saving) if p.startswith("checkpoint:") else rng.randint(1, MAX_STEPS) for p in kinds]
    if max(steps) < 3:  # at least one resume lands in the second epoch (its order is the one TRL got wrong)
        late = [s for s in (saving if kinds[-1].startswith("checkpoint:") else range(1, MAX_STEPS + 1)) if s >= 3]
        steps[-1] = rng.choice(late)
    faults = sorted(zip(steps, range(3), kinds))
    note = f"TIRL_RESUME_SEED={seed}: save_steps={save_steps}, faults (step, _, point) {faults}"
    run_dir, log = tmp_path / "run", tmp_path / "rollouts.jsonl"
    cfg = h.config(run_dir, tiny_smollm2_model_dir, MAX_STEPS, save_steps)
    committed = 0  # the step of the newest complete checkpoint
    life = 0
    injected = []  # the faults that ran: one at or below the committed step has no life to kill
    for step, _, point in faults:
        if step <= committed:  # a tail fault can leave nothing to do at its step: skip later faults there
            continue
        injected.append((step, point))
        with pytest.raises(h.Killed):
            h.run_life(cfg, log, life, h.Fault(point, step))
        lives = [r for r in _rollouts(log) if r["life"] == life]
        assert lives and lives[0]["step"] == committed + 1, note  # nothing checkpointed is rolled out again
        assert [r["step"] for r in lives] == list(range(committed + 1, step + 1)), note
        committed = _expected_resume(point, step, save_steps)
        found = last_checkpoint(run_dir)
        assert (checkpoint_step(found) if found else 0) == committed, note
        if point in ("checkpoint:_save_optimizer_and_scheduler", "checkpoint:_save_rng_state"):
            assert (run_dir / f"checkpoint-{step}").exists()  # half-written, and passed over
        life += 1
    if committed < MAX_STEPS:
        run = h.run_life(cfg, log, life)
        assert (checkpoint_step(run.resume_from) if run.resume_from else 0) == committed, note
        lives = [r for r in _rollouts(log) if r["life"] == life]
        assert [r["step"] for r in lives] == list(range(committed + 1, MAX_STEPS + 1)), note
    for step, point in injected:  # a skipped fault wrote no half checkpoint (seed 109667097: tail, then rng at 4)
        if point in ("checkpoint:_save_optimizer_and_scheduler", "checkpoint:_save_rng_state") and step > 0:
            assert (run_dir / f"incomplete-checkpoint-{step}").is_dir(), note
    _check_against_baseline(run_dir, log, baseline, note)


def test_sigkill_during_a_checkpoint_write_then_resume(baseline, tmp_path, tiny_smollm2_model_dir):
    # a real kill: the child pauses after writing checkpoint-3's weights and optimiser, and is SIGKILLed there
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")]))
    child = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).parent / "resume_helpers.py"),
            str(tiny_smollm2_model_dir),
            str(tmp_path),
            "0",
            "checkpoint:_save_rng_state",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        assert child.stdout is not None
        lines = iter(child.stdout.readline, "")
        assert any(line.strip() == "PAUSED" for line in lines)
        child.kill()
        child.wait(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    run_dir, log = tmp_path / "run", tmp_path / "rollouts.jsonl"
    assert (run_dir / "checkpoint-3" / "optimizer.pt").exists()
    assert last_checkpoint(run_dir) == run_dir / "checkpoint-2"
    run = h.run_life(h.config(run_dir, tiny_smollm2_model_dir, MAX_STEPS), log, 1)
    assert run.resume_from == run_dir / "checkpoint-2"
    assert (run_dir / "incomplete-checkpoint-3").is_dir()
    assert [r["step"] for r in _rollouts(log) if r["life"] == 1] == [3, 4]
    _check_against_baseline(run_dir, log, baseline, "sigkill at checkpoint-3")
