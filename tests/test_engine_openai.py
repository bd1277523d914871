"""Tests of OpenAIEngine against tirl's testing server (vLLM- and SGLang-shaped) serving the tiny model.

No live vLLM/SGLang runs on these CPU machines; the testing server implements the same request/answer shapes.
"""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

torch = pytest.importorskip("torch")

from testing_server import TestingServer  # noqa: E402
from tirl.rollout.capacity import probe_kv_capacity  # noqa: E402
from tirl.rollout.engine import Engine, GenerationOutput, SamplingParams  # noqa: E402
from tirl.rollout.hf_engine import HFEngine  # noqa: E402
from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig, _parse_openai  # noqa: E402

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0]
FAST_RETRY = dict(retry_backoff_s=0.01)


class CountingEngine:
    """Wraps an engine and records the most requests it had in flight at once."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.in_flight, self.max_in_flight = inner, 0, 0

    def validate(self, prompt_ids, params):
        return self.inner.validate(prompt_ids, params)

    async def generate(self, prompt_ids, params) -> GenerationOutput:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            await asyncio.sleep(0.05)
            return await self.inner.generate(prompt_ids, params)
        finally:
            self.in_flight -= 1


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)


@pytest.fixture(scope="module")
def server(model, qwen_tokenizer):
    engine = CountingEngine(HFEngine(model))
    with TestingServer(engine, tokenizer=qwen_tokenizer, kv_capacity_tokens=12345) as srv:
        srv.engine = engine
        yield srv


@pytest.fixture(autouse=True)
def _reset_faults(server):
    server.fail_next(0)
    yield
    server.fail_next(0)


def _direct(model, params):
    return asyncio.run(HFEngine(model).generate(PROMPT, params))


def test_openai_engine_satisfies_the_protocol(server):
    assert isinstance(OpenAIEngine(server.url), Engine)


@pytest.mark.parametrize("api", ["openai", "sglang"])
async def test_ids_and_logprobs_equal_the_in_process_engine(server, model, api):
    params = SamplingParams(max_new_tokens=7, temperature=0.8, top_p=0.95, seed=11)
    async with OpenAIEngine(server.url + "/v1", OpenAIEngineConfig(api=api)) as engine:
        out = await engine.generate(PROMPT, params)
    ref = await HFEngine(model).generate(PROMPT, params)
    assert out.token_ids == ref.token_ids and len(out.token_ids) == 7
    assert out.logprobs == pytest.approx(ref.logprobs, abs=1e-5)
    assert out.finish_reason == "length"


@pytest.mark.parametrize("api", ["openai", "sglang"])
async def test_stop_id_is_kept_and_reported_as_stop(server, model, api):
    greedy = await HFEngine(model).generate(PROMPT, SamplingParams(max_new_tokens=6, temperature=0))
    stop = greedy.token_ids[2]
    cut = greedy.token_ids.index(stop) + 1
    async with OpenAIEngine(server.url, OpenAIEngineConfig(api=api)) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=6, temperature=0, stop_token_ids=[stop]))
    assert out.token_ids == greedy.token_ids[:cut] and out.finish_reason == "stop"


async def test_concurrency_limit_caps_requests_in_flight(server):
    server.engine.max_in_flight = 0
    async with OpenAIEngine(server.url, OpenAIEngineConfig(max_concurrency=2)) as engine:
        outs = await asyncio.gather(*[engine.generate(PROMPT, SamplingParams(max_new_tokens=2)) for _ in range(6)])
    assert all(len(o.token_ids) == 2 for o in outs)
    assert server.engine.max_in_flight == 2


async def test_transient_server_errors_are_retried(server):
    server.fail_next(2, 503)
    async with OpenAIEngine(server.url, OpenAIEngineConfig(max_retries=3, **FAST_RETRY)) as engine:
        await engine.generate(PROMPT, SamplingParams(max_new_tokens=1))  # discovers the model first
        server.fail_next(2, 503)
        sent = engine.requests_sent
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=3))
    assert out.finish_reason == "length" and len(out.token_ids) == 3
    assert engine.requests_sent - sent == 3


async def test_exhausted_retries_give_an_error_output(server):
    server.fail_next(10, 502)
    async with OpenAIEngine(server.url, OpenAIEngineConfig(api="sglang", max_retries=1, **FAST_RETRY)) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=3))
        assert engine.requests_sent == 2
    assert out.finish_reason == "error" and "HTTP 502" in out.error and "2 attempts" in out.error


async def test_client_errors_are_not_retried_and_quote_the_server(server):
    async with OpenAIEngine(server.url, OpenAIEngineConfig(api="sglang", **FAST_RETRY)) as engine:
        out = await engine.generate([10**9], SamplingParams(max_new_tokens=3))
        assert engine.requests_sent == 1
    assert out.finish_reason == "error" and "HTTP 400" in out.error and "vocabulary" in out.error


async def test_unreachable_server_gives_an_error_output():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    async with OpenAIEngine(
        f"http://127.0.0.1:{port}", OpenAIEngineConfig(api="sglang", max_retries=2, **FAST_RETRY)
    ) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=3))
        assert engine.requests_sent == 3
    assert out.finish_reason == "error" and "ConnectError" in out.error


async def test_wrong_model_name_is_a_clear_error(server):
    async with OpenAIEngine(server.url, OpenAIEngineConfig(model="not-served")) as engine:
        out = await engine.generate(PROMPT, SamplingParams(max_new_tokens=2))
    assert out.finish_reason == "error" and "HTTP 404" in out.error and "not-served" in out.error


def test_engine_works_across_event_loops(server):
    engine = OpenAIEngine(server.url)
    params = SamplingParams(max_new_tokens=3, temperature=0)
    a = asyncio.run(engine.generate(PROMPT, params))
    b = asyncio.run(engine.generate(PROMPT, params))
    assert a.token_ids == b.token_ids and len(a.token_ids) == 3


def test_text_tokens_are_refused_rather_than_retokenized():
    answer = {
        "choices": [
            {"finish_reason": "length", "logprobs": {"tokens": ["Hello", " world"], "token_logprobs": [-1.0, -2.0]}}
        ]
    }
    with pytest.raises(ValueError, match="never re-tokenizes"):
        _parse_openai(answer, SamplingParams(max_new_tokens=2))


def test_token_id_strings_are_parsed_when_token_ids_are_absent():
    answer = {
        "choices": [
            {
                "finish_reason": "stop",
                "logprobs": {"tokens": ["token_id:5", "token_id:151645"], "token_logprobs": [-1.5, -0.25]},
            }
        ]
    }
    out = _parse_openai(answer, SamplingParams(max_new_tokens=9, stop_token_ids=[151645]))
    assert (out.token_ids, out.logprobs, out.finish_reason) == ([5, 151645], [-1.5, -0.25], "stop")
    eos = _parse_openai(answer, SamplingParams(max_new_tokens=9, stop_token_ids=[7]))
    assert eos.finish_reason == "eos"


# ---------------------------------------------------------------- the testing server itself


def test_server_reports_sglang_style_kv_capacity(server):
    probe = probe_kv_capacity(server.url)
    assert probe.tokens == 12345 and probe.source.startswith("sglang")


@pytest.mark.parametrize(
    "body,status",
    [
        ({"prompt": "text prompt", "max_tokens": 2}, 400),
        ({"prompt": [1, 2], "max_tokens": 2, "n": 2}, 400),
        ({"prompt": [1, 2], "max_tokens": 0}, 422),
        ({"max_tokens": 2}, 422),
        ({"prompt": [], "max_tokens": 2}, 400),
        ({"prompt": [1, 2], "max_tokens": 2, "top_p": 0}, 422),
    ],
)
def test_server_answers_malformed_requests_with_4xx(server, body, status):
    resp = httpx.post(server.url + "/v1/completions", json=body, timeout=30)
    assert resp.status_code == status, resp.text
    ok = httpx.post(server.url + "/v1/completions", json={"prompt": [1, 2], "max_tokens": 1}, timeout=30)
    assert ok.status_code == 200


def test_server_answers_an_engine_failure_with_500_and_keeps_serving(qwen_tokenizer):
    class Broken:
        calls = 0

        async def generate(self, prompt_ids, params):
            Broken.calls += 1
            if Broken.calls == 1:
                raise RuntimeError("model exploded")
            return GenerationOutput(token_ids=[3], logprobs=[-0.5], finish_reason="length")

    with TestingServer(Broken()) as srv:
        first = httpx.post(srv.url + "/generate", json={"input_ids": [1]}, timeout=30)
        second = httpx.post(srv.url + "/generate", json={"input_ids": [1], "return_logprob": True}, timeout=30)
    assert first.status_code == 500
    assert second.status_code == 200 and second.json()["meta_info"]["output_token_logprobs"] == [[-0.5, 3, None]]
