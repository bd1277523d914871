"""VLLMEngine without vLLM: batching of concurrent turns and the mapping of vLLM outputs (a stand-in LLM)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from tirl.rollout.engine import SamplingParams
from tirl.rollout.vllm_engine import VLLMEngine, to_generation_output


@dataclass
class FakeSamplingParams:
    n: int = 1
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    stop_token_ids: list[int] = field(default_factory=list)
    seed: int | None = None
    logprobs: int | None = None
    skip_special_tokens: bool = True


class FakeLLM:
    """Echoes: completion = the prompt's last id + 1, + 2, ... up to max_tokens, then the first stop id."""

    def __init__(self, fail: bool = False) -> None:
        self.calls: list[int] = []
        self.fail = fail

    def generate(self, prompts: list[dict], sampling_params: list[Any], use_tqdm: bool = False) -> list[Any]:
        if self.fail:
            raise RuntimeError("CUDA out of memory")
        self.calls.append(len(prompts))
        results = []
        for prompt, sp in zip(prompts, sampling_params):
            last = prompt["prompt_token_ids"][-1]
            ids = [last + k for k in range(1, sp.max_tokens)]
            logprobs = [{t: SimpleNamespace(logprob=-0.1 * k)} for k, t in enumerate(ids)]
            stop = sp.stop_token_ids[0] if sp.stop_token_ids else None
            out = SimpleNamespace(token_ids=ids, logprobs=logprobs, finish_reason="stop", stop_reason=stop)
            results.append(SimpleNamespace(outputs=[out]))
        return results


def test_concurrent_turns_are_batched_with_own_params():
    llm = FakeLLM()
    engine = VLLMEngine(llm, batch_wait_s=0.05, sampling_params_cls=FakeSamplingParams)

    async def run():
        outs = await asyncio.gather(
            *[
                engine.generate([10 * i], SamplingParams(max_new_tokens=3 + i, stop_token_ids=[99], seed=i))
                for i in range(5)
            ]
        )
        await engine.aclose()
        return outs

    outs = asyncio.run(run())
    assert llm.calls == [5]
    for i, out in enumerate(outs):
        assert out.token_ids == [10 * i + k for k in range(1, 3 + i)] + [99]  # stop id appended from stop_reason
        assert out.finish_reason == "stop" and len(out.logprobs) == len(out.token_ids)
        assert out.logprobs[-1] == 0.0 and out.logprobs[0] == -0.0


def test_engine_failure_answers_every_caller():
    engine = VLLMEngine(FakeLLM(fail=True), batch_wait_s=0.01, sampling_params_cls=FakeSamplingParams)

    async def run():
        return await asyncio.gather(*[engine.generate([1], SamplingParams(max_new_tokens=2)) for _ in range(3)])

    outs = asyncio.run(run())
    assert all(o.finish_reason == "error" and "out of memory" in o.error for o in outs)


def test_bad_request_is_an_error_not_an_exception():
    engine = VLLMEngine(FakeLLM(), sampling_params_cls=FakeSamplingParams)
    out = asyncio.run(engine.generate([], SamplingParams(max_new_tokens=2)))
    assert out.finish_reason == "error"


def test_output_mapping_length_eos_and_stop():
    params = SamplingParams(max_new_tokens=4, stop_token_ids=[7])
    length = SimpleNamespace(
        outputs=[SimpleNamespace(token_ids=[1, 2, 3, 4], logprobs=None, finish_reason="length", stop_reason=None)]
    )
    assert to_generation_output(length, params).finish_reason == "length"
    eos = SimpleNamespace(
        outputs=[SimpleNamespace(token_ids=[1, 2], logprobs=None, finish_reason="stop", stop_reason=None)]
    )
    mapped = to_generation_output(eos, params)
    assert mapped.finish_reason == "eos" and mapped.token_ids == [1, 2] and mapped.logprobs == []
    stop = SimpleNamespace(
        outputs=[
            SimpleNamespace(token_ids=[1, 7], logprobs=[{1: -1.0}, {7: -2.0}], finish_reason="stop", stop_reason=7)
        ]
    )
    mapped = to_generation_output(stop, params)
    assert (mapped.token_ids, mapped.logprobs, mapped.finish_reason) == ([1, 7], [-1.0, -2.0], "stop")
