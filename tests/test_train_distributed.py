"""Under ``accelerate launch`` with 2 CPU processes (configs/accelerate/ddp-2cpu.yaml, the config-file form of
docs/training.md's ``--multi_gpu --num_processes 2`` line; tests/test_accelerate_configs.py checks that both say
the same), each problem's G trajectories stay in one process and TRL groups them exactly as the rollout function
did (the advantage check is ~0).

The run is the session's ``ddp_two_process_run`` (tests/conftest.py: tests/equal_steps_script.py, 3 GRPO-RoC
steps of the tiny model on scripted trajectories), which tests/test_train_equal_steps.py compares with 1 process.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
STEPS = 3


@pytest.fixture(scope="module")
def two_process_run(ddp_two_process_run):
    return ddp_two_process_run[1]


def test_both_processes_trained_every_step(two_process_run):
    assert [r["world"] for r in two_process_run] == [2, 2]
    assert [r["global_step"] for r in two_process_run] == [STEPS, STEPS]


def test_each_process_gets_whole_distinct_groups(two_process_run):
    # the rollout function raises unless its prompts come as aligned blocks of G copies; here we also check
    # that the two processes never hold the same problem in a step and that each holds 2 problems per step
    for step in range(STEPS):
        a, b = (r["seen"][step] for r in two_process_run)
        assert len(a) == len(b) == 2
        assert not set(a) & set(b)


def test_trl_grouping_matches_rollout_groups(two_process_run):
    diffs = [d for r in two_process_run for d in r["adv_diffs"]]
    assert len(diffs) == 2 * STEPS and max(diffs) < 1e-3
