"""FSDP2 (FULL_SHARD) in 2 CPU processes on gloo, against 1 process on the same batch: under ``accelerate launch``
with configs/accelerate/fsdp2-2cpu.yaml (and ``ACCELERATE_USE_CPU=1``; tirl.train.cpu_sharding turns FSDP on for CPU
ranks), GRPO-RoC steps of the tiny model on scripted trajectories (tests/equal_steps_script.py) are sharded (each
rank holds half of the parameters), generate on the same gathered full weights on both ranks, hold whole groups,
and give the loss and gradient norm of one process; the 2-process checkpoint resumes in 1 process (without FSDP:
tirl.train.trainer.load_fsdp_checkpoint_weights/_optimizer) and in 2, and both continue identically for two
more steps (the second one depends on the restored optimiser state).

Tolerance: relative 1e-4 on loss and gradient norm (float32; FSDP reduce-scatters the gradients and sums the
sharded norm in another order than one process; measured below 1e-6 relative, docs/scale.md).

The 1-process reference of steps 1-3 is the session's ``equal_steps_reference`` (tests/conftest.py), which the
DDP test reads too."""

from __future__ import annotations

import shutil

import pytest

from equal_steps_runs import one_process, ranks, run_ok, script_env, two_processes

pytestmark = pytest.mark.slow(seconds=65)
RTOL = 1e-4


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_smollm2_model_dir, equal_steps_reference):
    """3 FSDP2 steps in 2 processes, and their checkpoint-3 continued for steps 4 and 5 in 1 and in 2 processes;
    the 1-process reference of steps 1-3 is the session's (tests/conftest.py)."""
    base, model, env = tmp_path_factory.mktemp("fsdp"), tiny_smollm2_model_dir, script_env(ACCELERATE_USE_CPU="1")
    run_ok(two_processes("fsdp2-2cpu.yaml", model, base / "two", 3, env))
    for name in ("in-one", "in-two"):  # the 2-process checkpoint-3, continued for steps 4 and 5
        shutil.copytree(base / "two" / "run", base / name / "run")
    run_ok(two_processes("fsdp2-2cpu.yaml", model, base / "in-two", 5, env), one_process(model, base / "in-one", 5))
    return {
        "one": equal_steps_reference,
        "two": ranks(base / "two", 2),
        "in_one": ranks(base / "in-one", 1)[0],
        "in_two": ranks(base / "in-two", 2),
    }


def test_parameters_are_sharded_over_the_two_ranks(runs):
    for rank in runs["two"]:
        assert rank["world"] == 2 and rank["distributed_type"].endswith("FSDP")
        # each rank holds its half of every parameter (dim-0 shards; odd sizes give one rank a row more)
        assert rank["local_numel"] == pytest.approx(rank["full_numel"] / 2, rel=0.01)
    assert sum(r["local_numel"] for r in runs["two"]) == runs["two"][0]["full_numel"]
    assert runs["one"]["local_numel"] == runs["one"]["full_numel"] == runs["two"][0]["full_numel"]


def test_two_ranks_hold_disjoint_whole_groups_of_the_same_batch(runs):
    a, b = runs["two"]
    for step in range(3):
        assert len(a["seen"][step]) == len(b["seen"][step]) == 2 and not set(a["seen"][step]) & set(b["seen"][step])
        assert set(a["seen"][step]) | set(b["seen"][step]) == set(runs["one"]["seen"][step])


def test_loss_and_grad_norm_equal_one_process(runs):
    one = runs["one"]["steps"]
    for rank in runs["two"]:
        assert [s["step"] for s in rank["steps"]] == [1, 2, 3]
        for mine, ref in zip(rank["steps"], one):
            assert mine["grad_norm"] == pytest.approx(ref["grad_norm"], rel=RTOL)
            assert mine["loss"] == pytest.approx(ref["loss"], rel=RTOL, abs=1e-6)


def test_generation_uses_the_full_gathered_weights(runs):
    """Both ranks generate with the same weights (fsdp_generation_copy), those of the 1-process run."""
    a, b = runs["two"]
    assert len(a["checksums"]) == 3
    assert a["checksums"] == pytest.approx(b["checksums"], rel=1e-9)
    assert a["checksums"] == pytest.approx(runs["one"]["checksums"], rel=1e-4)


def test_the_two_process_checkpoint_resumes_in_one_and_in_two(runs):
    in_one, in_two = runs["in_one"], runs["in_two"]
    assert in_one["resumed_from"].endswith("checkpoint-3") and in_one["distributed_type"].endswith(".NO")
    assert all(r["resumed_from"].endswith("checkpoint-3") and r["global_step"] == 5 for r in in_two)
    assert in_one["global_step"] == 5
    assert [s["step"] for s in in_one["steps"]] == [1, 2, 3, 4, 5]  # steps 1-3 from the trainer state
    assert sorted(in_one["seen"][0]) == sorted(in_two[0]["seen"][0] + in_two[1]["seen"][0])
    for rank in in_two:
        for mine, ref in zip(rank["steps"][3:], in_one["steps"][3:]):
            assert mine["grad_norm"] == pytest.approx(ref["grad_norm"], rel=RTOL)
            assert mine["loss"] == pytest.approx(ref["loss"], rel=RTOL, abs=1e-6)
        # the policy of step 5 comes out of step 4's update, which used the restored optimiser state
        assert rank["checksums"] == pytest.approx(in_one["checksums"], rel=1e-4)
