"""LoRA adapters on a running inference server (vLLM and its CPU build, or SGLang): load one under a name, by HTTP.

vLLM must have been started with ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`` (``make
vllm-server`` does); SGLang with ``--enable-lora`` (and ``--max-lora-rank``/``--lora-target-modules`` fitting the
adapter). Either runs on the adapter's base weights and must be able to read the adapter's folder (same machine or
shared disk). Used by RL rollouts (:mod:`tirl.train.server_policy`, every step) and by ``tirl eval --engine
openai|sglang`` on a LoRA checkpoint folder.

The SGLang routes (``POST /unload_lora_adapter``, ``/load_lora_adapter`` with ``lora_name``/``lora_path``,
``/flush_cache``; requests then name the adapter in ``/generate``'s ``lora_path``) follow SGLang's server
documentation and are tested against ``tests/testing_server.py``, never against a live SGLang (no CPU build).
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import httpx

logger = logging.getLogger(__name__)


class ServerSyncError(RuntimeError):
    """The server refused or failed to load the adapter (the message quotes its answer)."""


def load_adapter(
    url: str,
    adapter_dir: str | Path,
    lora_name: str,
    *,
    timeout_s: float = 120.0,
    reset_prefix_cache: bool = True,
    api: str = "openai",
) -> None:
    """Make a server serve the LoRA adapter in ``adapter_dir`` under ``lora_name``, replacing an adapter of that
    name, then empty its prefix cache (KV computed under other weights).

    ``api="openai"`` (vLLM): ``POST /v1/load_lora_adapter`` with ``load_inplace``, then ``/reset_prefix_cache``;
    completions name ``lora_name`` as their ``model``. ``api="sglang"``: ``POST /unload_lora_adapter`` (a 4xx for
    a name not loaded yet is fine), ``/load_lora_adapter``, then ``/flush_cache``; ``/generate`` requests name
    ``lora_name`` as their ``lora_path``.

    Raises:
        ServerSyncError: the server refused the adapter (the message quotes its answer) or could not be reached.
        ValueError: an unknown ``api``.
    """
    if api == "sglang":
        return _load_adapter_sglang(
            url.rstrip("/"), adapter_dir, lora_name, timeout_s=timeout_s, reset_prefix_cache=reset_prefix_cache
        )
    if api != "openai":
        raise ValueError(f"api must be 'openai' or 'sglang', got {api!r}")
    url = url.rstrip("/")
    body = {"lora_name": lora_name, "lora_path": str(Path(adapter_dir).resolve()), "load_inplace": True}
    try:
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            resp = client.post("/v1/load_lora_adapter", json=body)
            if resp.status_code >= 400:
                raise ServerSyncError(
                    f"{url}/v1/load_lora_adapter answered {resp.status_code}: "
                    f"{resp.text[:300]} (was the server started with --enable-lora and "
                    "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True?)"
                )
            if reset_prefix_cache:
                reset = client.post("/reset_prefix_cache")
                if reset.status_code >= 400:
                    logger.warning(
                        "%s/reset_prefix_cache answered %s (start vLLM with VLLM_SERVER_DEV_MODE=1)",
                        url,
                        reset.status_code,
                    )
    except httpx.HTTPError as exc:
        raise ServerSyncError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc


def _load_adapter_sglang(
    url: str, adapter_dir: str | Path, lora_name: str, *, timeout_s: float, reset_prefix_cache: bool
) -> None:
    body = {"lora_name": lora_name, "lora_path": str(Path(adapter_dir).resolve())}
    try:
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            client.post("/unload_lora_adapter", json={"lora_name": lora_name})  # absent the first time: fine
            resp = client.post("/load_lora_adapter", json=body)
            ok = resp.status_code < 400
            if ok:
                try:  # SGLang answers 200 with {"success": false, "error_message": ...} for a refused adapter
                    data = resp.json()
                    ok = not (isinstance(data, dict) and data.get("success") is False)
                except ValueError:
                    pass
            if not ok:
                raise ServerSyncError(
                    f"{url}/load_lora_adapter answered {resp.status_code}: {resp.text[:300]} "
                    "(was SGLang started with --enable-lora and a --max-lora-rank that fits?)"
                )
            if reset_prefix_cache:
                flush = client.post("/flush_cache")
                if flush.status_code >= 400:
                    logger.warning("%s/flush_cache answered %s", url, flush.status_code)
    except httpx.HTTPError as exc:
        raise ServerSyncError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc


def reload_weights(url: str, weights_dir: str | Path, *, timeout_s: float = 300.0) -> None:
    """Make a vLLM server load the full weights in ``weights_dir`` (an HF folder of safetensors of the model it
    serves) in place, then empty its prefix cache; completions keep naming the served model.

    Uses vLLM's development routes: ``POST /collective_rpc`` with ``{"method": "reload_weights", "kwargs":
    {"weights_path": ...}}`` (vLLM's in-place reload, which also re-packs the CPU build's linear layers) and
    ``POST /reset_prefix_cache``. The server must run with ``VLLM_SERVER_DEV_MODE=1`` (``make vllm-server`` does).

    Raises:
        ServerSyncError: the server refused the reload (the message quotes its answer) or could not be reached.
    """
    url = url.rstrip("/")
    body = {"method": "reload_weights", "kwargs": {"weights_path": str(Path(weights_dir).resolve())}}
    try:
        with httpx.Client(base_url=url, timeout=timeout_s) as client:
            resp = client.post("/collective_rpc", json=body)
            if resp.status_code >= 400:
                raise ServerSyncError(
                    f"{url}/collective_rpc reload_weights answered {resp.status_code}: "
                    f"{resp.text[:300]} (start vLLM with VLLM_SERVER_DEV_MODE=1)"
                )
            reset = client.post("/reset_prefix_cache")
            if reset.status_code >= 400:
                raise ServerSyncError(f"{url}/reset_prefix_cache answered {reset.status_code}: {reset.text[:300]}")
    except httpx.HTTPError as exc:
        raise ServerSyncError(f"cannot reach {url}: {type(exc).__name__}: {exc}") from exc


def served_adapter_name(adapter_dir: str | Path) -> str:
    """A stable server-side name for the adapter in ``adapter_dir`` (``tirl-`` + 12 hex digits of its path)."""
    return "tirl-" + hashlib.sha1(str(Path(adapter_dir).resolve()).encode()).hexdigest()[:12]


__all__ = ["ServerSyncError", "load_adapter", "reload_weights", "served_adapter_name"]
