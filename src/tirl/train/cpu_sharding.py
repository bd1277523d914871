"""Sharded training on CPU ranks (gloo): the two places where accelerate 1.15 leaves CPUs out, put back for
``tirl train rl`` (SFT does not call it).

torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) and DeepSpeed ZeRO-3 (DeepSpeed's ``cpu`` accelerator) both
run on CPU with the gloo backend, but accelerate never sets them up there:

- **FSDP.** ``AcceleratorState.__init__`` (accelerate/state.py) enables FSDP only in the branch ``elif
  self.distributed_type in [MULTI_GPU, MULTI_MLU, MULTI_SDAA, MULTI_MUSA, MULTI_NPU, MULTI_XPU, MULTI_HPU,
  MULTI_NEURON]``. CPU ranks (``ACCELERATE_USE_CPU=1``, which makes ``PartialState`` pick
  ``DistributedType.MULTI_CPU`` and gloo) never enter it, so an FSDP config launched on CPU trains as plain data
  parallel, without an error. Without ``ACCELERATE_USE_CPU`` a CPU-only machine is worse: ``_prepare_backend`` finds
  no accelerator, the ranks get ``DistributedType.NO`` and each trains alone.
- **DeepSpeed.** The DeepSpeed branch requires ``not cpu`` (so ``ACCELERATE_USE_CPU=1`` turns DeepSpeed off), and
  without it ``PartialState._prepare_backend`` finds no accelerator and returns no backend: DeepSpeed's
  ``init_distributed`` still joins the 2-rank gloo group, but accelerate then records ``num_processes = 1`` and
  ``process_index = 0`` on every rank, and DeepSpeed stops at its batch check (``AssertionError: Check batch
  related parameters. train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2
  * 4 * 2``).

:func:`enable_cpu_sharding` wraps the two: on CPU ranks launched with an FSDP config (``ACCELERATE_USE_FSDP=true``
and ``ACCELERATE_USE_CPU=1``) ``AcceleratorState`` does what the GPU branch does (``distributed_type = FSDP``, the
plugin kept, its mixed precision set); on ranks launched with a DeepSpeed config on a machine without CUDA
(``ACCELERATE_USE_DEEPSPEED=true``, ``LOCAL_RANK`` set, ``ACCELERATE_USE_CPU`` unset) ``_prepare_backend`` returns
gloo and ``MULTI_CPU`` (then accelerate records the real world size and rank, and switches to ``DEEPSPEED`` as on
GPUs). Everything after that (``fsdp2_prepare_model``, ``deepspeed.initialize``, sharded optimiser state, the
checkpoints) is accelerate's and DeepSpeed's own code, unchanged. Nothing changes on GPUs, in a single process, or
without such a config. Ran on this project's CPU machine (docs/scale.md, "Sharded training on CPU").
"""

from __future__ import annotations

import inspect
import os
from typing import Any

_MARK = "_tirl_cpu_sharding"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cpu_fsdp_requested() -> bool:
    """True when this process is a CPU rank launched with an FSDP config (``ACCELERATE_USE_FSDP`` and
    ``ACCELERATE_USE_CPU`` both set, as ``ACCELERATE_USE_CPU=1 accelerate launch --config_file
    configs/accelerate/fsdp2-2cpu.yaml`` leaves them)."""
    return _flag("ACCELERATE_USE_FSDP") and _flag("ACCELERATE_USE_CPU")


def cpu_deepspeed_requested() -> bool:
    """True when this process is a rank launched with a DeepSpeed config on a machine without CUDA
    (``accelerate launch --config_file configs/accelerate/zero3-2cpu.yaml``, without ``ACCELERATE_USE_CPU``)."""
    if not _flag("ACCELERATE_USE_DEEPSPEED") or _flag("ACCELERATE_USE_CPU"):
        return False
    if int(os.environ.get("LOCAL_RANK", "-1")) == -1:
        return False
    import torch

    return not torch.cuda.is_available()


def _wrap_accelerator_state() -> None:
    from accelerate import state as accelerate_state
    from accelerate.utils import DistributedType

    cls = accelerate_state.AcceleratorState
    if getattr(cls.__init__, _MARK, False):
        return
    original = cls.__init__
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        was_initialized = bool(cls._shared_state)
        original(self, *args, **kwargs)
        if was_initialized or self.distributed_type != DistributedType.MULTI_CPU:
            return
        plugin = signature.bind(self, *args, **kwargs).arguments.get("fsdp_plugin")
        if plugin is None:
            return
        # accelerate/state.py, the FSDP branch for GPU-like types, for MULTI_CPU
        self.distributed_type = DistributedType.FSDP
        if self._mixed_precision != "no":
            plugin.set_mixed_precision(self._mixed_precision)
        self.fsdp_plugin = plugin
        accelerate_state.PartialState._shared_state["distributed_type"] = self.distributed_type

    setattr(__init__, _MARK, True)
    __init__.__doc__ = original.__doc__
    cls.__init__ = __init__


def _wrap_prepare_backend() -> None:
    from accelerate import state as accelerate_state
    from accelerate.utils import DistributedType

    cls = accelerate_state.PartialState
    if getattr(cls._prepare_backend, _MARK, False):
        return
    original = cls._prepare_backend

    def _prepare_backend(
        self: Any, cpu: bool = False, sagemaker_dp: bool = False, backend: str | None = None
    ) -> tuple[str | None, Any]:
        found, distributed_type = original(self, cpu, sagemaker_dp, backend)
        if found is None and distributed_type == DistributedType.NO and not cpu:
            return backend or "gloo", DistributedType.MULTI_CPU
        return found, distributed_type

    setattr(_prepare_backend, _MARK, True)
    cls._prepare_backend = _prepare_backend


def enable_cpu_sharding() -> list[str]:
    """Let accelerate set up FSDP or DeepSpeed on CPU ranks (see the module docstring); call before anything
    builds accelerate's state (the training arguments, the trainer). Idempotent; a no-op unless
    :func:`cpu_fsdp_requested` or :func:`cpu_deepspeed_requested`.

    Returns:
        What was enabled: ``"fsdp"``, ``"deepspeed"`` or nothing.
    """
    enabled = []
    if cpu_fsdp_requested():
        _wrap_accelerator_state()
        enabled.append("fsdp")
    if cpu_deepspeed_requested():
        _wrap_prepare_backend()
        enabled.append("deepspeed")
    return enabled


__all__ = ["cpu_deepspeed_requested", "cpu_fsdp_requested", "enable_cpu_sharding"]
