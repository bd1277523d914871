"""KV-cache capacity and liveness probes of OpenAI-compatible inference servers (SGLang, vLLM, tirl's own).

Covers reading an endpoint's KV capacity in tokens, which the ``kv_aware`` scheduling policy needs, and a
cheap health probe used to decide whether a failed request means a dead server. It does not generate text
and does not decide anything (see :mod:`tirl.rollout.scheduler`).

Where the capacity comes from (field names checked against SGLang's and vLLM's public server code and
documentation; not against a live SGLang or vLLM server, which cannot run on this project's CPU machines):

- SGLang: ``GET /get_server_info`` (``/server_info`` in newer versions) returns a JSON object whose top level
  holds ``max_total_num_tokens``, the size of the KV pool in tokens (the value rStar2-Agent's original
  scheduler read). Some versions only report it inside ``internal_states[0]`` (as ``max_total_num_tokens``
  or ``memory_usage.token_capacity``); both are read. With data parallelism (``dp_size > 1``) the value is
  taken as reported, not multiplied: an under-estimate only admits fewer trajectories.
- vLLM: ``GET /metrics`` (Prometheus text) has a ``vllm:cache_config_info`` gauge whose labels carry
  ``num_gpu_blocks`` and ``block_size``; capacity = blocks x block size. Several lines (one per data-parallel
  engine, label ``engine``) are summed. A value of ``None`` (not yet profiled) is skipped.
- tirl's in-test OpenAI-compatible server reports an SGLang-style ``/get_server_info``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

SGLANG_INFO_PATHS: tuple[str, ...] = ("/get_server_info", "/server_info")
VLLM_METRICS_PATH = "/metrics"
HEALTH_PATHS: tuple[str, ...] = ("/health", "/v1/models")

_LABEL_RE = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class CapacityProbe:
    """Result of :func:`probe_kv_capacity`.

    Attributes:
        tokens: KV capacity in tokens, or None when the server does not expose it.
        source: where it came from: ``sglang:<path>``, ``vllm:/metrics`` or ``none``.
        detail: what was tried and why it failed, for error messages.
    """

    tokens: int | None
    source: str
    detail: str = ""


def server_root(url: str) -> str:
    """The server's root URL: ``http://h:p/v1/`` -> ``http://h:p`` (the OpenAI base path is stripped)."""
    root = url.rstrip("/")
    if root.endswith("/v1"):
        root = root[: -len("/v1")]
    return root


def _positive_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        number = int(value)
    except (TypeError, ValueError):
        return None
    return number if number > 0 else None


def parse_sglang_server_info(info: Mapping[str, Any]) -> int | None:
    """KV capacity in tokens from an SGLang ``/get_server_info`` object, or None when absent or invalid."""
    if not isinstance(info, Mapping):
        return None
    tokens = _positive_int(info.get("max_total_num_tokens"))
    if tokens is not None:
        return tokens
    states = info.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], Mapping):
        state = states[0]
        tokens = _positive_int(state.get("max_total_num_tokens"))
        if tokens is not None:
            return tokens
        usage = state.get("memory_usage")
        if isinstance(usage, Mapping):
            return _positive_int(usage.get("token_capacity"))
    return None


def parse_vllm_metrics(text: str) -> int | None:
    """KV capacity in tokens from vLLM's Prometheus text: sum of ``num_gpu_blocks x block_size`` over the
    ``vllm:cache_config_info`` lines (one per engine); None when no line has both as positive integers."""
    total = 0
    found = False
    for line in text.splitlines():
        if not line.startswith("vllm:cache_config_info{"):
            continue
        labels = dict(_LABEL_RE.findall(line[line.index("{") : line.rindex("}") + 1] if "}" in line else ""))
        blocks = _positive_int(labels.get("num_gpu_blocks"))
        block_size = _positive_int(labels.get("block_size"))
        if blocks is not None and block_size is not None:
            total += blocks * block_size
            found = True
    return total if found else None


def probe_kv_capacity(url: str, timeout_s: float = 5.0, client: httpx.Client | None = None) -> CapacityProbe:
    """Ask the server at ``url`` (root or ``.../v1``) for its KV capacity; never raises for network errors.

    Tries SGLang's server-info paths, then vLLM's ``/metrics``. Returns ``CapacityProbe(None, "none", why)``
    when neither answers with a usable number.
    """
    root = server_root(url)
    tried: list[str] = []
    own = client is None
    http = client or httpx.Client(timeout=timeout_s)
    try:
        for path in SGLANG_INFO_PATHS:
            try:
                resp = http.get(root + path)
                if resp.status_code == 200:
                    tokens = parse_sglang_server_info(resp.json())
                    if tokens is not None:
                        return CapacityProbe(tokens, f"sglang:{path}")
                    tried.append(f"{path}: no max_total_num_tokens")
                else:
                    tried.append(f"{path}: HTTP {resp.status_code}")
            except (httpx.HTTPError, ValueError) as exc:
                tried.append(f"{path}: {type(exc).__name__}")
        try:
            resp = http.get(root + VLLM_METRICS_PATH)
            if resp.status_code == 200:
                tokens = parse_vllm_metrics(resp.text)
                if tokens is not None:
                    return CapacityProbe(tokens, "vllm:/metrics")
                tried.append("/metrics: no vllm:cache_config_info with num_gpu_blocks and block_size")
            else:
                tried.append(f"/metrics: HTTP {resp.status_code}")
        except httpx.HTTPError as exc:
            tried.append(f"/metrics: {type(exc).__name__}")
    finally:
        if own:
            http.close()
    return CapacityProbe(None, "none", "; ".join(tried))


async def probe_health(url: str, timeout_s: float = 5.0, client: httpx.AsyncClient | None = None) -> bool:
    """True when the server at ``url`` answers ``/health`` (or, if that path is missing, ``/v1/models``)
    with a 2xx status within ``timeout_s``; False on connection errors, timeouts and 5xx. Never raises."""
    root = server_root(url)
    own = client is None
    http = client or httpx.AsyncClient(timeout=timeout_s)
    try:
        for path in HEALTH_PATHS:
            try:
                resp = await http.get(root + path, timeout=timeout_s)
            except httpx.HTTPError:
                return False
            if 200 <= resp.status_code < 300:
                return True
            if resp.status_code != 404:
                return False
        return False
    finally:
        if own:
            await http.aclose()
