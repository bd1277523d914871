"""FSDP on CPU ranks (gloo): what accelerate 1.15 leaves out, put back for ``tirl train rl`` (SFT does not call it).

Why this exists: torch's FSDP2 (``torch.distributed.fsdp.fully_shard``) runs on CPU with the gloo backend, but
accelerate never turns it on there. ``AcceleratorState.__init__`` (accelerate/state.py) enables FSDP only in the
branch ``elif self.distributed_type in [MULTI_GPU, MULTI_MLU, MULTI_SDAA, MULTI_MUSA, MULTI_NPU, MULTI_XPU,
MULTI_HPU, MULTI_NEURON]``; CPU ranks (``ACCELERATE_USE_CPU=1``, which makes ``PartialState`` pick
``DistributedType.MULTI_CPU`` and gloo) never enter it, so an FSDP config launched on CPU trains as plain data
parallel, without an error. Without ``ACCELERATE_USE_CPU`` a CPU-only machine is worse: ``_prepare_backend`` finds
no accelerator, the ranks get ``DistributedType.NO`` and each trains alone.

:func:`enable_cpu_fsdp` wraps ``AcceleratorState.__init__`` so that, on CPU ranks launched with an FSDP config
(``ACCELERATE_USE_FSDP=true``, which ``accelerate launch`` sets from ``distributed_type: FSDP``), it does what that
branch does for a GPU: ``distributed_type = FSDP``, the plugin kept, its mixed precision set. Everything after that
(``fsdp2_prepare_model``, sharded optimiser state, FSDP checkpoints) is accelerate's own code, which runs unchanged
on CPU (torch picks the CPU device mesh because no accelerator is present). Nothing changes on GPUs, in a single
process, or without an FSDP config. Ran on this project's CPU machine (docs/scale.md, "FSDP on CPU").
"""

from __future__ import annotations

import inspect
import os
from typing import Any

_MARK = "_tirl_cpu_fsdp"


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def cpu_fsdp_requested() -> bool:
    """True when this process is a CPU rank launched with an FSDP config (``ACCELERATE_USE_FSDP`` and
    ``ACCELERATE_USE_CPU`` both set, as ``ACCELERATE_USE_CPU=1 accelerate launch --config_file
    configs/accelerate/fsdp2-2cpu.yaml`` leaves them)."""
    return _flag("ACCELERATE_USE_FSDP") and _flag("ACCELERATE_USE_CPU")


def enable_cpu_fsdp() -> bool:
    """Let accelerate's ``AcceleratorState`` use FSDP on CPU ranks; call before the trainer (its ``Accelerator``)
    is built. Idempotent; a no-op unless :func:`cpu_fsdp_requested`.

    Returns:
        Whether the wrapper is installed.
    """
    if not cpu_fsdp_requested():
        return False
    from accelerate import state as accelerate_state
    from accelerate.utils import DistributedType

    cls = accelerate_state.AcceleratorState
    if getattr(cls.__init__, _MARK, False):
        return True
    original = cls.__init__
    signature = inspect.signature(original)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        was_initialized = bool(cls._shared_state)
        original(self, *args, **kwargs)
        if was_initialized or self.distributed_type != DistributedType.MULTI_CPU:
            return
        bound = signature.bind(self, *args, **kwargs)
        plugin = bound.arguments.get("fsdp_plugin")
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
    return True


__all__ = ["cpu_fsdp_requested", "enable_cpu_fsdp"]
