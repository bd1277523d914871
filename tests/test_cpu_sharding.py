"""When tirl.train.cpu_sharding steps in (only CPU ranks launched with an FSDP or DeepSpeed config), what its
wrapper makes of accelerate's state, and how tirl.train.trainer tells FSDP and DeepSpeed checkpoints apart."""

from __future__ import annotations

import pytest

from tirl.train import cpu_sharding


@pytest.mark.parametrize(
    ("env", "fsdp", "deepspeed"),
    [
        ({}, False, False),
        ({"ACCELERATE_USE_FSDP": "true"}, False, False),  # a GPU launch: accelerate's own branch
        ({"ACCELERATE_USE_FSDP": "true", "ACCELERATE_USE_CPU": "1"}, True, False),
        ({"ACCELERATE_USE_DEEPSPEED": "true", "LOCAL_RANK": "0"}, False, True),
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, False, False),  # not a launched rank
        ({"ACCELERATE_USE_DEEPSPEED": "true", "LOCAL_RANK": "0", "ACCELERATE_USE_CPU": "1"}, False, False),
    ],
)
def test_what_is_requested(monkeypatch, env, fsdp, deepspeed):
    for name in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cpu_sharding.cpu_fsdp_requested() is fsdp
    assert cpu_sharding.cpu_deepspeed_requested() is deepspeed


def test_nothing_is_wrapped_without_a_sharded_launch(monkeypatch):
    for name in ("ACCELERATE_USE_FSDP", "ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED", "LOCAL_RANK"):
        monkeypatch.delenv(name, raising=False)
    from accelerate import state

    before = (state.AcceleratorState.__init__, state.PartialState._prepare_backend)
    assert cpu_sharding.enable_cpu_sharding() == []
    assert (state.AcceleratorState.__init__, state.PartialState._prepare_backend) == before


def test_the_deepspeed_wrapper_gives_a_cpu_rank_gloo(monkeypatch):
    from accelerate import state
    from accelerate.utils import DistributedType

    monkeypatch.setattr(state.PartialState, "_prepare_backend", state.PartialState._prepare_backend)
    monkeypatch.setattr(
        state.PartialState,
        "_prepare_backend",
        lambda self, cpu=False, sagemaker_dp=False, backend=None: (None, DistributedType.NO),
    )
    cpu_sharding._wrap_prepare_backend()
    wrapped = state.PartialState._prepare_backend
    assert wrapped(object()) == ("gloo", DistributedType.MULTI_CPU)
    assert wrapped(object(), cpu=True) == (None, DistributedType.NO)  # ACCELERATE_USE_CPU: accelerate decides


def test_checkpoint_kinds(tmp_path):
    from tirl.train.trainer import deepspeed_checkpoint, fsdp_full_checkpoint

    fsdp, ds, plain = tmp_path / "fsdp", tmp_path / "ds", tmp_path / "plain"
    for folder in (fsdp, ds, plain):
        folder.mkdir()
    (fsdp / "pytorch_model_fsdp.bin").write_bytes(b"x")
    (fsdp / "optimizer.bin").write_bytes(b"x")
    (ds / "latest").write_text("global_step3")
    (ds / "global_step3").mkdir()
    (plain / "model.safetensors").write_bytes(b"x")
    (plain / "optimizer.pt").write_bytes(b"x")
    assert [fsdp_full_checkpoint(f) for f in (fsdp, ds, plain)] == [True, False, False]
    assert [deepspeed_checkpoint(f) for f in (fsdp, ds, plain)] == [False, True, False]
    (ds / "latest").write_text("global_step9")  # names no folder: not taken for one
    assert not deepspeed_checkpoint(ds)
