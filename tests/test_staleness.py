"""Bounded-staleness asynchronous rollouts (issue 42): the setting, the admission control, the correction."""

from __future__ import annotations

import pytest

from tirl.train.config import RLConfig, load_config

SERVER = ["rollout.server_url=http://127.0.0.1:9", "rollout.temperature=1.0", "problems_per_step=2"]


def _config(*overrides: str) -> RLConfig:
    return load_config(
        None, ["rollout.group_size=2", "optim.per_device_train_batch_size=2", "roc.min_per_class=1", *overrides]
    )


def test_default_is_synchronous():
    assert RLConfig().rollout.max_staleness == 0
    _config("problems_per_step=2").validate()  # the in-process engine with k = 0: as before


@pytest.mark.parametrize(
    ("overrides", "fix"),
    [
        (["rollout.temperature=0.7"], "rollout.temperature=1"),
        (["rollout.top_p=0.95"], "rollout.top_p=1"),
        (["rollout.server_url=null"], "rollout.server_url"),
        (["rollout.server_url=null", "rollout.use_vllm=true"], "rollout.server_url"),
        (["rollout.max_staleness=-1"], ">= 0"),
        (["rollout.staleness_is_cap=1.0"], "> 1"),
        (["rollout.staleness_correction=sequence"], "token_truncate or sequence_mask"),
    ],
)
def test_k_over_0_refuses_what_breaks_the_correction_in_one_line_naming_the_fix(overrides, fix):
    config = _config(*SERVER, "rollout.max_staleness=1", *overrides)
    with pytest.raises(ValueError) as info:
        config.validate()
    message = str(info.value)
    assert "\n" not in message and fix in message, message


@pytest.mark.parametrize("extra", [[], ["rollout.staleness_correction=sequence_mask", "rollout.staleness_is_cap=5"]])
def test_k_over_0_on_a_server_at_temperature_1_is_accepted(extra):
    _config(*SERVER, "rollout.max_staleness=2", *extra).validate()
    _config(
        "rollout.launch_server=true", "rollout.temperature=1.0", "problems_per_step=2", "rollout.max_staleness=1"
    ).validate()
