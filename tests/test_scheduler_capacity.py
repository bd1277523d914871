"""Capacity and health probes (tirl.rollout.capacity) against SGLang/vLLM-shaped answers."""

import httpx
import pytest

from tirl.rollout.capacity import (
    parse_sglang_server_info,
    parse_vllm_metrics,
    probe_health,
    probe_kv_capacity,
    server_root,
)

VLLM_METRICS = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",engine="0",'
    'num_gpu_blocks="573",sliding_window="None"} 1.0\n'
    'vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="600"} 1.0\n'
    'vllm:num_requests_running{engine="0",model_name="m"} 0.0\n'
)


def test_sglang_top_level_and_nested_fields():
    assert parse_sglang_server_info({"max_total_num_tokens": 326223, "internal_states": []}) == 326223
    nested = {"internal_states": [{"memory_usage": {"token_capacity": 270336}}]}
    assert parse_sglang_server_info(nested) == 270336
    assert parse_sglang_server_info({"internal_states": [{"max_total_num_tokens": "4096"}]}) == 4096


@pytest.mark.parametrize(
    "bad", [{}, {"max_total_num_tokens": 0}, {"max_total_num_tokens": "x"}, {"max_total_num_tokens": True}, []]
)
def test_sglang_missing_or_invalid_capacity_is_none(bad):
    assert parse_sglang_server_info(bad) is None


def test_vllm_capacity_is_blocks_times_block_size_summed_over_engines():
    assert parse_vllm_metrics(VLLM_METRICS) == 573 * 16 + 600 * 16


def test_vllm_unprofiled_cache_is_not_a_capacity():
    text = 'vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1.0\n'
    assert parse_vllm_metrics(text) is None
    assert parse_vllm_metrics("vllm:num_requests_running 1\n") is None


def test_server_root_strips_the_openai_base_path():
    assert server_root("http://127.0.0.1:8000/v1/") == "http://127.0.0.1:8000"
    assert server_root("http://h:1") == "http://h:1"


def _client(routes):
    def handler(request: httpx.Request) -> httpx.Response:
        fn = routes.get(request.url.path)
        return fn() if fn else httpx.Response(404)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_probe_prefers_sglang_then_falls_back_to_vllm_metrics():
    sg = _client({"/get_server_info": lambda: httpx.Response(200, json={"max_total_num_tokens": 1234})})
    assert probe_kv_capacity("http://x/v1", client=sg).tokens == 1234
    vl = _client({"/metrics": lambda: httpx.Response(200, text=VLLM_METRICS)})
    probe = probe_kv_capacity("http://x", client=vl)
    assert probe.tokens == 18768 and probe.source == "vllm:/metrics"


def test_probe_reports_what_it_tried_when_nothing_is_exposed():
    probe = probe_kv_capacity("http://x", client=_client({}))
    assert probe.tokens is None and probe.source == "none"
    assert "/get_server_info: HTTP 404" in probe.detail and "/metrics: HTTP 404" in probe.detail


def test_probe_survives_an_unreachable_server():
    probe = probe_kv_capacity("http://127.0.0.1:9", timeout_s=0.5)
    assert probe.tokens is None and "ConnectError" in probe.detail


async def test_health_probe():
    def handler(request):
        return httpx.Response(404 if request.url.path == "/health" else 200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        assert await probe_health("http://x/v1", client=client)  # falls back to /v1/models
    async with httpx.AsyncClient(transport=httpx.MockTransport(lambda r: httpx.Response(503))) as client:
        assert not await probe_health("http://x", client=client)
    assert not await probe_health("http://127.0.0.1:9", timeout_s=0.5)
