"""2 processes against 1 on the same batch: under ``accelerate launch`` with configs/accelerate/ddp-2cpu.yaml (2 CPU
ranks on gloo), GRPO-RoC steps of the tiny model on scripted trajectories give the same loss and gradient norm as
one process, each rank holds whole groups, and a checkpoint written by the 2 processes resumes in 1.

The 1-process and 2-process runs are the session's (tests/conftest.py: ``equal_steps_reference``,
``ddp_two_process_run``; tests/test_train_distributed.py reads the same 2-process run).

Tolerance: relative 1e-4 on loss and gradient norm (float32; the 2-process sum is reduced in another order).
Measured on the reference run (docs/scale.md): differences below 1e-6 relative."""

from __future__ import annotations

import shutil

import pytest

from equal_steps_runs import one_process, ranks, run_ok

pytestmark = pytest.mark.slow(seconds=45)
RTOL = 1e-4


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_smollm2_model_dir, equal_steps_reference, ddp_two_process_run):
    """The session's 1-process and 2-process runs (tests/conftest.py), and the 2-process run's checkpoint-3
    continued for a 4th step in 1 process."""
    two_dir, two = ddp_two_process_run
    resumed = tmp_path_factory.mktemp("resumed-in-one")
    shutil.copytree(two_dir / "run", resumed / "run")
    run_ok(one_process(tiny_smollm2_model_dir, resumed, 4))
    return {"one": equal_steps_reference, "two": two, "resumed": ranks(resumed, 1)[0]}


def test_two_ranks_hold_disjoint_whole_groups_of_the_same_batch(runs):
    a, b = runs["two"]
    assert a["world"] == b["world"] == 2 and a["distributed_type"].endswith("MULTI_CPU")
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
    a, b = runs["two"]
    assert a["checksums"] == pytest.approx(b["checksums"], rel=1e-9)  # both ranks generate with the same weights


def test_a_two_process_checkpoint_resumes_in_one_process(runs):
    again = runs["resumed"]
    assert again["resumed_from"].endswith("checkpoint-3") and again["global_step"] == 4
    assert [s["step"] for s in again["steps"]][-1] == 4
