"""Tests of HFEngine on the tiny random model (float32, so batched results can be compared exactly)."""

from __future__ import annotations

import asyncio

import pytest

torch = pytest.importorskip("torch")

from tirl.rollout.engine import Engine, SamplingParams  # noqa: E402
from tirl.rollout.hf_engine import HFEngine, HFEngineConfig, _top_p_filter  # noqa: E402

PROMPTS = [[151644, 872, 198, 9707, 11, 1879, 0], [40, 1079], [17, 10, 17, 28, 30, 2130, 29, 16, 18, 11]]


@pytest.fixture(scope="module")
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)


def _teacher_forced(model, prompt, out_ids, temperature=1.0):
    """log_softmax(logits / T) of ``out_ids`` given ``prompt``, from one plain forward pass (TRL's way)."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out_ids])).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits / temperature, -1)
    return lp[torch.arange(len(out_ids)), torch.tensor(out_ids)]


async def _gen_all(engine, prompts, params_list):
    return await asyncio.gather(*[engine.generate(p, sp) for p, sp in zip(prompts, params_list)])


def test_engine_satisfies_the_protocol(model):
    assert isinstance(HFEngine(model), Engine)


async def test_batched_greedy_equals_unbatched_generate(model):
    engine = HFEngine(model)
    outs = await _gen_all(engine, PROMPTS, [SamplingParams(max_new_tokens=8, temperature=0)] * 3)
    assert engine.batches_run == 1 and engine.max_batch_seen == 3
    assert len({t for o in outs for t in o.token_ids}) > 3  # the fixture model does not repeat one id
    for prompt, out in zip(PROMPTS, outs):
        ref = model.generate(
            torch.tensor([prompt]),
            attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
            do_sample=False,
            max_new_tokens=8,
            eos_token_id=None,
            pad_token_id=0,
        )
        assert out.token_ids == ref[0, len(prompt) :].tolist()
        assert out.finish_reason == "length"


async def test_sampled_logprobs_equal_temperature_scaled_recomputation(model):
    engine = HFEngine(model, HFEngineConfig(seed=0))
    outs = await _gen_all(engine, PROMPTS, [SamplingParams(max_new_tokens=10, temperature=0.7)] * 3)
    for prompt, out in zip(PROMPTS, outs):
        assert len(out.logprobs) == len(out.token_ids) == 10
        expected = _teacher_forced(model, prompt, out.token_ids, temperature=0.7)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


async def test_raw_logprobs_ignore_temperature(model):
    engine = HFEngine(model, HFEngineConfig(seed=0, logprobs_mode="raw"))
    out = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=6, temperature=1.5))
    expected = _teacher_forced(model, PROMPTS[0], out.token_ids, temperature=1.0)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


async def test_top_p_logprobs_are_renormalised_over_the_nucleus(model):
    engine = HFEngine(model, HFEngineConfig(seed=1))
    out = await engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=6, temperature=1.0, top_p=0.5))
    full = _teacher_forced(model, PROMPTS[1], out.token_ids)
    got = torch.tensor(out.logprobs)
    # renormalising over a nucleus of mass >= 0.5 raises each log-prob by at most log 2
    assert (got >= full - 1e-5).all() and (got <= full + torch.log(torch.tensor(2.0)) + 1e-4).all()


async def test_tiny_top_p_is_greedy(model):
    engine = HFEngine(model, HFEngineConfig(seed=2))
    greedy = await engine.generate(PROMPTS[2], SamplingParams(max_new_tokens=6, temperature=0))
    nucleus = await engine.generate(PROMPTS[2], SamplingParams(max_new_tokens=6, temperature=1.0, top_p=1e-9))
    assert nucleus.token_ids == greedy.token_ids
    assert nucleus.logprobs == [0.0] * 6  # a one-token nucleus has probability 1


def test_top_p_filter_keeps_the_smallest_set_reaching_the_mass():
    lp = torch.log(torch.tensor([0.1, 0.5, 0.3, 0.1]))
    kept = _top_p_filter(lp, 0.75).exp()
    assert torch.allclose(kept, torch.tensor([0.0, 0.5 / 0.8, 0.3 / 0.8, 0.0]))
    assert torch.allclose(_top_p_filter(lp, 1.0).exp(), lp.exp())


async def test_stop_token_is_included_and_ends_the_row(model):
    engine = HFEngine(model)
    greedy = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=8, temperature=0))
    stop = greedy.token_ids[3]
    first = greedy.token_ids.index(stop)
    out = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=8, temperature=0, stop_token_ids=[stop]))
    assert out.token_ids == greedy.token_ids[: first + 1]
    assert out.finish_reason == "stop" and len(out.logprobs) == first + 1


async def test_model_eos_that_is_not_a_stop_id_reports_eos(model):
    greedy = await HFEngine(model).generate(PROMPTS[1], SamplingParams(max_new_tokens=5, temperature=0))
    engine = HFEngine(model, eos_token_ids=[greedy.token_ids[1]])
    out = await engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=5, temperature=0))
    assert out.finish_reason == "eos" and out.token_ids[-1] == greedy.token_ids[1]


async def test_rows_of_one_batch_keep_their_own_limits_and_settings(model):
    engine = HFEngine(model, HFEngineConfig(seed=0))
    params = [
        SamplingParams(max_new_tokens=2, temperature=0),
        SamplingParams(max_new_tokens=9, temperature=1.0),
        SamplingParams(max_new_tokens=5, temperature=0.3, top_p=0.8),
    ]
    outs = await _gen_all(engine, PROMPTS, params)
    assert [len(o.token_ids) for o in outs] == [2, 9, 5]
    assert engine.batches_run == 1
    greedy = await HFEngine(model).generate(PROMPTS[0], SamplingParams(max_new_tokens=2, temperature=0))
    assert outs[0].token_ids == greedy.token_ids


async def test_request_seed_reproduces_a_sample(model):
    engine = HFEngine(model)
    a = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=12, seed=42))
    b = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=12, seed=42))
    c = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=12, seed=43))
    assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert a.token_ids != c.token_ids


async def test_concurrent_callers_are_batched(model):
    engine = HFEngine(model, HFEngineConfig(max_batch_size=4))
    outs = await _gen_all(engine, [PROMPTS[i % 3] for i in range(10)], [SamplingParams(max_new_tokens=3)] * 10)
    assert all(len(o.token_ids) == 3 for o in outs)
    assert engine.max_batch_seen == 4 and 3 <= engine.batches_run <= 4


async def test_max_batch_tokens_splits_long_prompts(model):
    engine = HFEngine(model, HFEngineConfig(max_batch_tokens=12))
    outs = await _gen_all(engine, [PROMPTS[2]] * 3, [SamplingParams(max_new_tokens=1)] * 3)
    assert all(o.finish_reason == "length" for o in outs)
    assert engine.max_batch_seen == 1 and engine.batches_run == 3


@pytest.mark.parametrize(
    "prompt,params,needle",
    [
        ([], SamplingParams(max_new_tokens=3), "empty prompt"),
        ([5, 10**9], SamplingParams(max_new_tokens=3), "outside the vocabulary"),
        ([5, -1], SamplingParams(max_new_tokens=3), "outside the vocabulary"),
        ([5], SamplingParams(max_new_tokens=0), "max_new_tokens"),
        ([5], SamplingParams(max_new_tokens=3, top_p=0.0), "top_p"),
        ([5], SamplingParams(max_new_tokens=3, temperature=-1), "temperature"),
    ],
)
async def test_bad_requests_get_an_error_output_and_the_engine_keeps_serving(model, prompt, params, needle):
    engine = HFEngine(model)
    out = await engine.generate(prompt, params)
    assert out.finish_reason == "error" and needle in out.error and out.token_ids == []
    ok = await engine.generate([5, 6], SamplingParams(max_new_tokens=2))
    assert ok.finish_reason == "length" and len(ok.token_ids) == 2


async def test_context_limit_truncates_or_rejects(model):
    engine = HFEngine(model, HFEngineConfig(max_model_len=12))
    out = await engine.generate(PROMPTS[2], SamplingParams(max_new_tokens=50, temperature=0))
    assert len(PROMPTS[2]) + len(out.token_ids) == 12 and out.finish_reason == "length"
    too_long = await engine.generate(PROMPTS[2] + [1, 2], SamplingParams(max_new_tokens=5))
    assert too_long.finish_reason == "error" and "context" in too_long.error


async def test_a_model_failure_answers_every_row_and_the_next_batch_runs(model, monkeypatch):
    engine = HFEngine(model)
    calls = {"n": 0}
    real = engine._decode

    def flaky(m, rows):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated out of memory")
        return real(m, rows)

    monkeypatch.setattr(engine, "_decode", flaky)
    outs = await _gen_all(engine, PROMPTS, [SamplingParams(max_new_tokens=2)] * 3)
    assert [o.finish_reason for o in outs] == ["error"] * 3 and "simulated out of memory" in outs[0].error
    again = await engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=2))
    assert again.finish_reason == "length"
    assert not model.training


async def test_cancelled_caller_does_not_disturb_others(model):
    engine = HFEngine(model, HFEngineConfig(batch_wait_s=0.05))
    doomed = asyncio.create_task(engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=4)))
    survivor = asyncio.create_task(engine.generate(PROMPTS[1], SamplingParams(max_new_tokens=4)))
    await asyncio.sleep(0)
    doomed.cancel()
    out = await survivor
    assert len(out.token_ids) == 4
    assert doomed.cancelled()


def test_engine_serves_several_event_loops_in_turn(model):
    engine = HFEngine(model)
    a = asyncio.run(engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=3, temperature=0)))
    b = asyncio.run(engine.generate(PROMPTS[0], SamplingParams(max_new_tokens=3, temperature=0)))
    assert a.token_ids == b.token_ids and len(a.token_ids) == 3


async def test_train_mode_is_restored_and_no_gradients_are_kept(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir))
    m.train()
    out = await HFEngine(m).generate(PROMPTS[0], SamplingParams(max_new_tokens=3))
    assert m.training and len(out.token_ids) == 3
    assert all(p.grad is None for p in m.parameters())


@pytest.fixture(scope="module")
def other_model(tiny_model_dir, tmp_path_factory):
    """A second tiny model with the same architecture and different weights."""
    from transformers import AutoModelForCausalLM

    from tirl.models import build_tiny_model

    other_dir = build_tiny_model(tiny_model_dir, tmp_path_factory.mktemp("other") / "m", seed=99)
    return AutoModelForCausalLM.from_pretrained(str(other_dir), dtype=torch.float32)


async def test_refreshed_weights_take_effect_on_the_next_call(tiny_model_dir, other_model):
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), dtype=torch.float32)
    engine = HFEngine(m)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    before = await engine.generate(PROMPTS[0], greedy)
    engine.load_state_dict(other_model.state_dict())
    after = await engine.generate(PROMPTS[0], greedy)
    ref = await HFEngine(other_model).generate(PROMPTS[0], greedy)
    assert (after.token_ids, after.logprobs) == (ref.token_ids, ref.logprobs)
    assert before.logprobs != after.logprobs


async def test_set_model_swaps_the_policy(model, other_model):
    engine = HFEngine(model)
    greedy = SamplingParams(max_new_tokens=6, temperature=0)
    a = await engine.generate(PROMPTS[0], greedy)
    engine.set_model(other_model)
    b = await engine.generate(PROMPTS[0], greedy)
    ref = await HFEngine(other_model).generate(PROMPTS[0], greedy)
    assert (b.token_ids, b.logprobs) == (ref.token_ids, ref.logprobs)
    assert a.logprobs != b.logprobs


async def test_prompt_ids_are_used_as_given_token_in_token_out(model, qwen_tokenizer):
    """Field case F85: a non-canonical tokenization is continued as is, never re-tokenized."""
    hel, lo = (qwen_tokenizer.convert_tokens_to_ids(t) for t in ("hel", "lo"))
    prompt = [PROMPTS[0][0], hel, lo]  # "hello" re-encodes as one token
    assert qwen_tokenizer.encode(qwen_tokenizer.decode(prompt), add_special_tokens=False) != prompt
    out = await HFEngine(model).generate(prompt, SamplingParams(max_new_tokens=5, temperature=0))
    ref = model.generate(
        torch.tensor([prompt]),
        attention_mask=torch.ones(1, 3, dtype=torch.long),
        do_sample=False,
        max_new_tokens=5,
        eos_token_id=None,
        pad_token_id=0,
    )
    assert out.token_ids == ref[0, 3:].tolist()
    assert torch.allclose(torch.tensor(out.logprobs), _teacher_forced(model, prompt, out.token_ids), atol=1e-4)


async def test_rows_sharing_a_prompt_are_prefilled_once_and_sample_as_if_alone(model):
    engine = HFEngine(model, HFEngineConfig(max_batch_size=8, batch_wait_s=0.05))
    p, q = [5, 9, 11, 13, 17, 19, 23, 29], [7, 8, 9]
    seeded = [SamplingParams(max_new_tokens=6, temperature=1.0, seed=100 + i) for i in range(4)]
    outs = await _gen_all(engine, [p, p, p, p, q], seeded + [SamplingParams(max_new_tokens=6, temperature=0.0)])
    assert engine.batches_run == 1
    assert engine.stats.prefill_tokens == len(p) + len(q)
    assert engine.stats.prompt_tokens_requested == 4 * len(p) + len(q)
    assert engine.stats.decode_tokens > 0 and engine.stats.prefill_s > 0 and engine.stats.decode_s > 0
    # each shared-prompt row samples exactly what it samples alone with its seed (its own copy of the cache)
    for i, params in enumerate(seeded):
        alone = HFEngine(model, HFEngineConfig(max_batch_size=1))
        ref = await alone.generate(p, params)
        assert outs[i].token_ids == ref.token_ids
        assert outs[i].logprobs == pytest.approx(ref.logprobs, abs=1e-4)
        await alone.aclose()
    await engine.aclose()
